# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     notebook_metadata_filter: -jupytext.text_representation
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 5. When RL cannot help: aleatoric uncertainty
#
# When the outcome is uncertain because annotators *disagree* (ChaosNLI: 100 human
# labels per item), the best possible answer is the label distribution `q(x)` itself,
# and no amount of reasoning can sharpen it. The paper's claims (sec. 5.3, Table 3):
#
# 1. **No RL variant beats cross-entropy** on the same labels: with an explicit
#    readout, the RLCD gradient equals the Brier gradient in expectation.
# 2. **The mixture objective** (`lambda = 1`, score the mixture `p` of the rationales)
#    calibrates the mixture by making the rationales *random* (they run to the length
#    limit), so a single rationale is badly calibrated (Proposition 1: the diversity
#    bonus pays for disagreement).
# 3. **The per-rationale objective discovers that reasoning is useless** here and
#    switches it off, reaching the quality of cross-entropy on direct answers.
#
# The tiny world's `aleatoric` task mirrors ChaosNLI: `urn 3a1b2c?` asks for the colour
# of a ball drawn from the urn, `q` is the urn's composition, and every training visit
# draws a fresh outcome `Y ~ q`. The shipped base model (`assets/checkpoints/base-aleatoric`)
# names the majority colour with certainty (rationale `most a`). We train three methods
# from it, with the same question/outcome stream:
#
# * `mixture`: `rlcd-lab train mixture` (`lam = 1`, score-function weight 1);
# * `per-rationale`: `rlcd-lab train endtoend` (`lam = 0`, weight 1, no KL anchor);
# * `cross-entropy`: `rlcd-lab train sft` (direct answers, cross-entropy on the drawn
#   label).
#
# Where the numbers come from: all three runs are trained *in this notebook* (into a
# temporary directory) at the size set by `SCALE`, then evaluated on the test split
# against `q` (Jensen-Shannon divergence, `rlcd_lab.metrics.jsd`, in bits as in the
# paper: 0 when equal, 1 for disjoint supports; lower is better). Their eval dumps are
# read with `rlcd_lab.reports.results.load_run` (temperature fitted on dev) and compared with
# `rlcd_lab.reports.results` (per-item JSD averaged over seeds, bootstrap over test items,
# sign-flip p-value). The last section reads the shipped multi-seed reproduction the
# same way. The interpretation is computed from the numbers.

# %%
# ruff: noqa: E402  (the settings below must come before the imports)
import os
import warnings

os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars in the notebook output
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' bars too
warnings.filterwarnings("ignore", message="IProgress not found")

import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
import torch
from IPython.display import display

from rlcd_lab import metrics
from rlcd_lab.classroom import tutorial
from rlcd_lab.decomposition import variance_decomposition
from rlcd_lab.drawing import plots
from rlcd_lab.evaluate import run_eval
from rlcd_lab.files import assets
from rlcd_lab.files.rundir import read_log
from rlcd_lab.lm.checkpoint import read_meta
from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.math import paper, verdicts
from rlcd_lab.methods import METHOD_TABLE, configured
from rlcd_lab.reports import report, results
from rlcd_lab.tasks import load_task_items
from rlcd_lab.train import launch_command, train

pio.renderers.default = tutorial.plotly_renderer()  # JupyterLab's; none as a script
torch.set_num_threads(1)

SCALE = tutorial.get_scale()
GPUS = 8  # the paper-scale commands below: one process per GPU (accelerate launch)
SIZES = {
    "ci": dict(steps=6, eval_every=3, eval_items=10, test_items=30, m_eval=4),
    "default": dict(steps=200, eval_every=25, eval_items=100, test_items=200, m_eval=8),
    "paper": dict(steps=6, eval_every=3, eval_items=10, test_items=30, m_eval=4),
}[SCALE]
N_BOOT = 2000 if SCALE == "default" else 500  # bootstrap replicates / sign-flip patterns
print(f"SCALE = {SCALE}: {SIZES}")
m_eval = SIZES.pop("m_eval")

OUT = Path(tempfile.mkdtemp(prefix="rlcd-nb05-"))
BASE = assets.shipped_checkpoints()["checkpoints/base-aleatoric"]
TASK = "aleatoric"
COMMON = dict(init=BASE, task=TASK, lr=3e-4, max_new_tokens=24, seed=0, save_every=10_000, **SIZES)
MARKER_TOKENS = 7  # a bare-marker rationale ("Answer:")
base_dev = read_meta(BASE)["metrics"]["dev"]
base_len = base_dev["reason"]["mean_length"]
for mode in ("direct", "reason"):  # as stored when it was pretrained (JSD below, in bits)
    print(
        f"base-aleatoric on dev, {mode:>6}: accuracy {base_dev[mode]['accuracy']:.3f}, "
        f"mean rationale length {base_dev[mode]['mean_length']:.1f}"
    )

# %% [markdown]
# ## Training the three methods

# %%
METHODS = {
    "mixture": ("mixture", {}),
    "per-rationale": ("endtoend", {"beta": 0.0}),
    "cross-entropy": ("sft", {}),
}
runs = {}
for name, (method, extra) in METHODS.items():
    # the settings this method has (SFT answers directly: no rationale budget, no m)
    cfg = configured(METHOD_TABLE[method].config, COMMON | extra, out=OUT / name)
    budget = {"max_new_tokens": cfg.max_new_tokens} if hasattr(cfg, "max_new_tokens") else {}
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in (budget | extra).items())
    print(
        f"rlcd-lab train {method} --init {BASE} --task {TASK} --out {cfg.out} "
        f"--steps {cfg.steps} --lr {cfg.lr:g} {flags}"
    )
    if SCALE == "paper":
        continue
    t0 = time.perf_counter()
    runs[name] = train(cfg)
    print(f"  trained {cfg.steps} steps in {time.perf_counter() - t0:.0f} s")
if SCALE == "paper":
    print("\nAt paper scale (Qwen3-1.7B, ChaosNLI, GPU):")
    print("rlcd-lab data convert chaosnli chaosnli_mnli.jsonl data/chaosnli.jsonl")
    print("rlcd-lab data split data/chaosnli.jsonl --dev 200 --test 500")
    for method, flags in (("mixture", ""), ("endtoend", ""), ("sft", "")):
        print(
            launch_command(
                f"train {method} --init PATH/TO/Qwen3-1.7B --task data/chaosnli.jsonl "
                f"--lr 2e-6 --steps 400 {flags}".rstrip(),
                processes=GPUS,
            )
        )

# %% [markdown]
# ## Does reasoning switch itself off?
#
# Rationale length and forced-marker rate per step, from each RL run's `log.jsonl` (the
# cross-entropy baseline answers directly: no rationales).

# %%
logs = {name: read_log(path) for name, path in runs.items() if name != "cross-entropy"}
fig = plots.run_panels(  # curves of more than 20 steps: a 10-step moving average
    logs,
    {
        "rationale_length": "rationale length (tokens)",
        "forced_rate": "forced-marker rate",
        "reward": "reward J(u, Y)",
    },
    cols=3,
    rates=["forced_rate"],
    title="Aleatoric task: what the RL objectives do to the rationales",
)
fig.add_hline(y=MARKER_TOKENS, line_dash="dot", row=1, col=1, annotation_text="bare marker")
if logs:
    fig.show()

# %% [markdown]
# ## Quality against q
#
# For each final model, on the test split: the single-query readout (one rationale, or
# the direct answer for cross-entropy) and, for the RL runs, the mixture of
# `m_eval` rationales. JSD to `q` in bits, before and after temperature scaling (T
# fitted on dev; the base model's rows are its readouts as they are).

# %%
test_items = load_task_items(TASK, "test")[: SIZES["test_items"]]
q = np.array([it.q for it in test_items])
quality, per_item = [], {}
base_model, tok, _ = load_checkpoint(BASE)
for mode in ("direct", "reason"):
    rows = run_eval(base_model, tok, test_items, mode=mode, max_new_tokens=24, seed=2)
    r = results.from_rows(rows)  # no dev rows: not temperature-scaled (T = 1)
    per_item[f"base ({mode})"] = r.jsd
    quality.append(
        {
            "model": f"base ({mode})",
            "JSD single": float(r.jsd.mean()),
            "mean length": r.row["mean_length"],
        }
    )
trained = {name: results.load_run(path) for name, path in runs.items()}
for name, r in trained.items():
    row = {
        "model": name,
        "JSD single": r.row["jsd"],
        "JSD single (TS)": float(r.jsd.mean()),
        "T": r.T,
        "mean length": r.row["mean_length"],
        "forced rate": r.row["forced_rate"],
    }
    per_item[name] = r.jsd  # after temperature scaling
    if name != "cross-entropy":
        model, tok, _ = load_checkpoint(Path(runs[name]) / "final")
        mrows = run_eval(model, tok, test_items, m=m_eval, max_new_tokens=24, seed=3)
        mix = np.array([r["mixture"] for r in mrows])
        row[f"JSD mixture of {m_eval}"] = metrics.mean_jsd(mix, q)
        u = torch.tensor([r["readouts"] for r in mrows], dtype=torch.float64)  # (N, M, K)
        d = variance_decomposition(u, torch.tensor(q))  # Proposition 1, per item
        if name == "mixture":  # the per-rationale run's is exercise 2's answer
            row["var u across rationales"] = float(d["diversity"].mean())
        row["example rationale"] = mrows[0]["rationales"][0]
    quality.append(row)
quality = pd.DataFrame(quality).set_index("model")
display(quality.round(4))

# %%
fig = go.Figure()
cols = [c for c in quality.columns if c.startswith("JSD")]
for i, col in enumerate(cols):
    fig.add_trace(
        go.Bar(x=quality.index, y=quality[col], name=col, marker={"color": plots.COLORS[i]})
    )
fig.update_layout(
    barmode="group",
    title="Jensen-Shannon divergence to the outcome distribution q (test; lower is better)",
    yaxis_title="mean JSD (bits)",
)
fig.show()

# %% [markdown]
# ## Verdicts, computed
#
# Paired comparisons with cross-entropy on the same test items (`results.paired`,
# one seed here): the difference of per-item JSD after temperature scaling, its 95%
# bootstrap CI over test items and a two-sided sign-flip p-value.

# %%
if runs:
    for name in ("mixture", "per-rationale"):
        d = results.paired([trained[name]], [trained["cross-entropy"]], n=N_BOOT)["jsd"]
        better = d["ci_high"] < 0
        print(
            f"{name} - cross-entropy, JSD (TS, bits): {verdicts.fmt_diff(d)}: "
            + (
                "the RL variant is significantly better than cross-entropy: claim 1 does "
                "NOT reproduce here."
                if better
                else "not better than cross-entropy: claim 1 reproduces."
            )
        )
    for name in ("mixture", "per-rationale"):
        r = quality.loc[name]
        length, forced = r["mean length"], r["forced rate"]
        if length <= MARKER_TOKENS + 0.5:
            what = "its rationales became the bare marker: reasoning switched off (claim 3's form)"
        elif forced > 0.5:
            what = (
                f"its rationales ran to the length limit ({forced:.0%} forced, "
                f"{length:.1f} tokens; the base model wrote {base_len:.0f})"
            )
        else:
            what = f"its rationales kept a normal length ({length:.1f} tokens)"
        single, mixed = r["JSD single"], r[f"JSD mixture of {m_eval}"]
        print(
            f"{name}: {what}; single-query JSD {single:.3f}, mixture of {m_eval} {mixed:.3f}"
            + (
                " (the mixture is clearly better calibrated than one rationale)."
                if mixed < 0.9 * single
                else " (about the same)."
            )
        )
    mix = quality.loc["mixture"]
    var_u_mixture = var_u = mix["var u across rationales"]
    random_rationales = var_u > 0.01 and mix[f"JSD mixture of {m_eval}"] < 0.9 * mix["JSD single"]
    print(
        f"Claim 2 (the mixture objective makes the rationales random and one rationale badly "
        f"calibrated): variance of u across the mixture run's rationales {var_u:.4f} -> "
        + (
            "reproduces."
            if random_rationales
            else "does NOT reproduce in that form: the readouts after its rationales agree, so "
            "a single query is as good as the mixture."
        )
    )
    per = quality.loc["per-rationale"]
    if per["mean length"] > MARKER_TOKENS + 0.5:
        print(
            "Claim 3 in the paper's form (empty rationales) does not reproduce at this scale "
            "(the bare marker is never a completion in the base model's pretraining, so the "
            "per-rationale objective cannot find it)"
            + (
                "; it degrades the rationales to the length limit instead."
                if per["forced rate"] > 0.5
                else "; the rationales keep their form."
            )
        )
    if SCALE == "ci":
        print(f"(ci scale: {SIZES['steps']} steps; these verdicts mean nothing yet)")

# %%
# Checks that make a silent regression fail CI.
for name, path in runs.items():
    assert len(read_log(path)) == SIZES["steps"], name
assert all(np.isfinite(v).all() and (v >= 0).all() for v in per_item.values())
assert (quality["JSD single"] <= 1 + 1e-9).all()  # bits: at most 1

# %% [markdown]
# ## The shipped reproduction (all seeds)
#
# The runs above are one seed, trained here. `rlcd-lab reproduce --task aleatoric` ships
# the same comparison over several seeds under `assets/` (found with
# `rlcd_lab.files.assets.shipped_runs()`, named by method and settings; `assets/README.md` has
# the settings, which differ from the ones above: for instance its learning rate).
# Single query after temperature scaling and, where the run ships a mixture dump
# (`eval/test-m<M>.jsonl`), the mixture of M rationales; mean +- s.d. over seeds, JSD in
# bits. The paper's Table 3 readout is the mixture for a run that writes rationales and
# the single query for direct answers (cross-entropy). The paired tests follow the paper:
# each item's JSD averaged over the seeds, bootstrap over test items and a sign-flip
# p-value (`results.paired`); the claims are `rlcd_lab.math.paper`'s, the verdicts
# `rlcd_lab.math.verdicts`'.

# %%
NAMES = {"sft": "cross-entropy", "endtoend": "per-rationale", "mixture": "mixture"}
shipped = [
    i
    for i in tutorial.discover_runs(assets.shipped_runs(), task="aleatoric")
    if i["method"] in NAMES
]
for i in shipped:
    i["label"] = NAMES[i["method"]] + ("" if not i["lam"] or i["lam"] == 1 else f" lam={i['lam']}")
budgets = {}
for i in shipped:
    budgets.setdefault(i["label"], set()).add(i["steps"])
groups = {}  # label -> {seed: RunResult}
for i in shipped:
    if i["steps"] > min(budgets[i["label"]]):  # the same run at a larger (matched) budget
        i["label"] += f" ({i['steps']} steps)"
    groups.setdefault(i["label"], {})[i["seed"]] = results.load_run(i["path"])
if groups:
    cells = {}
    for name, by_seed in groups.items():
        rs = list(by_seed.values())
        cells[name] = {"seeds": len(rs)}
        cells[name]["JSD single (TS)"] = report.fmt_cell(
            results.mean_sd([r.jsd.mean() for r in rs])
        )
        if all(r.mixture_jsd is not None for r in rs):
            cells[name][f"JSD mixture of {rs[0].m_mixture}"] = report.fmt_cell(
                results.mean_sd([r.mixture_jsd.mean() for r in rs])
            )
        cells[name]["JSD (Table 3 readout)"] = report.fmt_cell(
            results.mean_sd([r.jsd_table3.mean() for r in rs])
        )
        for col, key in (("length", "mean_length"), ("forced", "forced_rate")):
            cells[name][col] = report.fmt_cell(results.mean_sd([r.row[key] for r in rs]))
    display(pd.DataFrame(cells).T)

    def paired(a, b):
        """``results.paired`` of two groups over the seeds both hold."""
        seeds = sorted(set(groups[a]) & set(groups[b]))
        return len(seeds), results.paired(
            [groups[a][k] for k in seeds], [groups[b][k] for k in seeds], n=N_BOOT
        )

    if "cross-entropy" in groups:
        for name in groups:
            if name == "cross-entropy":
                continue
            n, res = paired(name, "cross-entropy")
            d = res["jsd_table3"]
            print(
                f"shipped, {n} seeds: {name} - cross-entropy, JSD of the Table 3 readouts "
                f"(bits) {verdicts.fmt_diff(d)} -> "
                + (
                    "the RL variant is better: claim 1 does NOT reproduce."
                    if d["ci_high"] < 0
                    else "not better than cross-entropy: claim 1 reproduces."
                )
            )
    claims = []
    for c in paper.CLAIMS[paper.kind(TASK)]:  # ChaosNLI's (Table 3)
        a, b = (NAMES.get(r) for r in c.pair.split(" - "))
        if a not in groups or b not in groups:
            continue
        d = paired(a, b)[1][c.metric]
        claims.append(
            {
                "claim": f"{a} - {b}: {c.metric}",
                "paper": f"{c.paper} (section {c.section})",
                "ours: difference [95% CI], p": verdicts.fmt_diff(d),
                "verdict": verdicts.verdict(d, c.direction, c.effect),
            }
        )
    if claims:
        display(pd.DataFrame(claims))
    if "per-rationale" in groups:
        lengths = [r.row["mean_length"] for r in groups["per-rationale"].values()]
        print(
            "shipped per-rationale runs, mean rationale length per seed: "
            + ", ".join(f"{x:.1f}" for x in lengths)
            + f" (bare marker {MARKER_TOKENS}, base model {base_len:.0f}) -> "
            + (
                "reasoning switched off (claim 3 reproduces)."
                if max(lengths) <= MARKER_TOKENS + 0.5
                else "reasoning did not switch itself off in the paper's form."
            )
        )
else:
    print("No aleatoric reproduction is shipped.")

# %% [markdown]
# ## Exercises
#
# 1. Run the `lambda` objective in between: `rlcd-lab train mixture --lam 0.5`. Where do
#    its single-query and mixture JSD land?
# 2. Proposition 1 says the mixture objective pays `E_r ||u(r) - p||^2`. Compute that
#    diversity term, averaged over test items, on the readouts `mrows` above (the
#    per-rationale run's: the last run evaluated there) and compare it with the mixture
#    run's.
# 3. Why can't reasoning help on `urn 3a1b2c?` even in principle? What would a task look
#    like where a spread `q` *can* be narrowed by reasoning? (To check the first part:
#    what is the best forecast for `urn 3a1b2c?`, and what did you need to compute it?)
#
# Put your answers in the next cell (replace each `None`) and run it: the `classroom`
# checks compute the right answers themselves (from your runs, `mrows` and the task's
# items) and say whether yours match.

# %%
from rlcd_lab.classroom import exercises

lam_run = None  # 1: the run directory of your `--lam 0.5` run (default scale)
lam_jsd_single = None  # 1: its single-query test JSD to q, in bits, before scaling
diversity = None  # 2: the mean over test items of E_r ||u(r) - p||^2 on `mrows`
urn_forecast = None  # 3: the best forecast for `urn 3a1b2c?`, [P(A), P(B), P(C)]
print("1:", exercises.check_lambda_run(lam_run, lam_jsd_single, lam=0.5))
print("2:", exercises.check_diversity_term(mrows if runs else None, diversity))
print("3:", exercises.check_urn_forecast(urn_forecast, "urn 3a1b2c?"))
