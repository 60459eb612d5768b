# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
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
# against `q` (Jensen-Shannon divergence, `rlcd_lab.metrics.jsd`, natural log; lower is
# better). The interpretation is computed from the numbers.

# %%
# ruff: noqa: E402  (the two settings below must come before the imports)
import os
import warnings

os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars in the notebook output
warnings.filterwarnings("ignore", message="IProgress not found")

import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
import torch
from IPython.display import display
from plotly.subplots import make_subplots

from rlcd_lab import assets, metrics, plots, stats, tutorial
from rlcd_lab.decomposition import variance_decomposition
from rlcd_lab.evaluate import run_eval, summarize
from rlcd_lab.models import load_checkpoint, read_meta
from rlcd_lab.tasks import load_task_items
from rlcd_lab.train import TRAINERS, train
from rlcd_lab.train.common import read_log

pio.renderers.default = "plotly_mimetype+notebook"  # plots embedded, work offline
torch.set_num_threads(1)

SCALE = tutorial.get_scale()
SIZES = {
    "ci": dict(steps=6, eval_every=3, eval_items=10, test_items=30, m_eval=4),
    "default": dict(steps=200, eval_every=25, eval_items=100, test_items=200, m_eval=8),
    "paper": dict(steps=6, eval_every=3, eval_items=10, test_items=30, m_eval=4),
}[SCALE]
print(f"SCALE = {SCALE}: {SIZES}")
m_eval = SIZES.pop("m_eval")

OUT = Path(tempfile.mkdtemp(prefix="rlcd-nb05-"))
BASE = assets.shipped_checkpoints()["checkpoints/base-aleatoric"]
# at ci scale a copy of the task with small dev/test splits (each run ends with an eval)
TASK = (
    "aleatoric"
    if SCALE == "default"
    else str(tutorial.subset_task("aleatoric", OUT, {"dev": 30, "test": 30}))
)
COMMON = dict(init=BASE, task=TASK, lr=3e-4, max_new_tokens=24, seed=0, save_every=10_000, **SIZES)
MARKER_TOKENS = 7  # a bare-marker rationale ("Answer:")
base_dev = read_meta(BASE)["metrics"]["dev"]
base_len = base_dev["reason"]["mean_length"]
for mode in ("direct", "reason"):
    print(
        f"base-aleatoric on dev, {mode:>6}: JSD to q {base_dev[mode]['jsd']:.3f}, "
        f"accuracy {base_dev[mode]['accuracy']:.3f}, "
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
    cfg = replace(TRAINERS[method][0], **COMMON, **extra, out=OUT / name)
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in extra.items())
    print(
        f"rlcd-lab train {method} --init {BASE} --task {TASK} --out {cfg.out} "
        f"--steps {cfg.steps} --lr {cfg.lr:g} --max-new-tokens {cfg.max_new_tokens} {flags}"
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
            f"accelerate launch -m rlcd_lab.cli train {method} --init PATH/TO/Qwen3-1.7B "
            f"--task data/chaosnli.jsonl --lr 2e-6 --steps 400 {flags}".rstrip()
        )

# %% [markdown]
# ## Does reasoning switch itself off?
#
# Rationale length and forced-marker rate per step, from each RL run's `log.jsonl` (the
# cross-entropy baseline answers directly: no rationales).

# %%
logs = {name: read_log(path) for name, path in runs.items() if name != "cross-entropy"}
fig = make_subplots(
    rows=1,
    cols=3,
    subplot_titles=("rationale length (tokens)", "forced-marker rate", "reward J(u, Y)"),
)
for i, (name, rows) in enumerate(logs.items()):
    for j, col in enumerate(("rationale_length", "forced_rate", "reward")):
        steps, vals = tutorial.log_column(rows, col)
        if len(vals) > 20:
            vals = pd.Series(vals).rolling(10, min_periods=1).mean().to_numpy()
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=vals,
                name=name,
                legendgroup=name,
                showlegend=j == 0,
                line={"color": plots.COLORS[i]},
            ),
            row=1,
            col=j + 1,
        )
fig.add_hline(y=MARKER_TOKENS, line_dash="dot", row=1, col=1, annotation_text="bare marker")
fig.update_layout(title="Aleatoric task: what the RL objectives do to the rationales")
if logs:
    fig.show()

# %% [markdown]
# ## Quality against q
#
# For each final model, on the test split: the single-query readout (one rationale, or
# the direct answer for cross-entropy) and, for the RL runs, the mixture of
# `m_eval` rationales. JSD to `q` before and after temperature scaling (T fitted on dev).

# %%
test_items = load_task_items(TASK, "test")[: SIZES["test_items"]]
q = np.array([it.q for it in test_items])
quality, per_item = [], {}
base_model, tok, _ = load_checkpoint(BASE)
for mode in ("direct", "reason"):
    rows = run_eval(base_model, tok, test_items, mode=mode, max_new_tokens=24, seed=2)
    per_item[f"base ({mode})"] = metrics.jsd(np.array([r["probs"] for r in rows]), q)
    quality.append(
        {
            "model": f"base ({mode})",
            "JSD single": float(per_item[f"base ({mode})"].mean()),
            "mean length": summarize(rows)["mean_length"],
        }
    )
for name, path in runs.items():
    test_rows, dev_rows = tutorial.read_eval(path)
    s = summarize(test_rows, dev_rows)
    row = {
        "model": name,
        "JSD single": s["jsd"],
        "JSD single (TS)": s["ts_jsd"],
        "T": s["T"],
        "mean length": s["mean_length"],
        "forced rate": s["forced_rate"],
    }
    p_ts, _ = tutorial.scaled_probs(test_rows, dev_rows)
    per_item[name] = metrics.jsd(p_ts, q)
    if name != "cross-entropy":
        model, tok, _ = load_checkpoint(Path(path) / "final")
        mrows = run_eval(model, tok, test_items, m=m_eval, max_new_tokens=24, seed=3)
        mix = np.array([r["mixture"] for r in mrows])
        row[f"JSD mixture of {m_eval}"] = metrics.mean_jsd(mix, q)
        u = torch.tensor([r["readouts"] for r in mrows], dtype=torch.float64)  # (N, M, K)
        d = variance_decomposition(u, torch.tensor(q))  # Proposition 1, per item
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
    yaxis_title="mean JSD (nats)",
)
fig.show()

# %% [markdown]
# ## Verdicts, computed
#
# Paired comparisons on the test items (per-item JSD after temperature scaling; paired
# bootstrap 95% CI and sign-flip p-value, `rlcd_lab.stats`).

# %%
if runs:
    ce = per_item["cross-entropy"]
    for name in ("mixture", "per-rationale"):
        ci = stats.paired_bootstrap(per_item[name], ce, n=2000, seed=0)
        p = stats.sign_flip_test(per_item[name], ce, n=2000, seed=0)
        better = ci["ci_high"] < 0
        print(
            f"{name} - cross-entropy, JSD (TS): {ci['mean_diff']:+.4f} "
            f"(95% CI {ci['ci_low']:+.4f} .. {ci['ci_high']:+.4f}), p = {p:.3g}: "
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
    var_u = mix["var u across rationales"]
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
assert (quality["JSD single"] <= np.log(2) + 1e-9).all()

# %% [markdown]
# ## The shipped reproduction (all seeds)
#
# The runs above are one seed, trained here. `rlcd-lab reproduce --task aleatoric` ships
# the same comparison over several seeds under `assets/` (found with
# `rlcd_lab.assets.shipped_runs()`, grouped by method; `assets/README.md` has the
# settings, which differ from the ones above: for instance its learning rate). Single
# query after temperature scaling, and, where the run ships `eval/test-m4.jsonl`, the
# mixture of 4 rationales; mean +- s.d. over seeds.

# %%
NAMES = {"sft": "cross-entropy", "endtoend": "per-rationale", "mixture": "mixture"}
shipped = [
    i
    for i in tutorial.discover_runs(assets.shipped_runs(), task="aleatoric")
    if i["method"] in NAMES
]
agg, items_by = {}, {}
for i in shipped:
    test_rows, dev_rows = tutorial.read_eval(i["path"])
    s = summarize(test_rows, dev_rows)
    qa = np.array([r["q"] for r in test_rows])
    p_ts, _ = tutorial.scaled_probs(test_rows, dev_rows)
    name = NAMES[i["method"]] + ("" if not i["lam"] or i["lam"] == 1 else f" lam={i['lam']}")
    row = {
        "JSD single (TS)": s["ts_jsd"],
        "length": s["mean_length"],
        "forced": s["forced_rate"],
    }
    m4 = i["path"] / "eval" / "test-m4.jsonl"
    if m4.exists():
        rows4 = assets.read_jsonl(m4)
        row["JSD mixture of 4"] = metrics.mean_jsd(np.array([r["mixture"] for r in rows4]), qa)
    agg.setdefault(name, []).append(row)
    items_by.setdefault(name, {})[i["seed"]] = metrics.jsd(p_ts, qa)
if agg:
    cols = ["JSD single (TS)", "JSD mixture of 4", "length", "forced"]
    table3 = pd.DataFrame(
        {
            name: {
                "seeds": len(rs),
                **{
                    c: "{:.3f} +- {:.3f}".format(*tutorial.mean_std([r[c] for r in rs]))
                    for c in cols
                    if c in rs[0]
                },
            }
            for name, rs in agg.items()
        }
    ).T
    display(table3)
    if "cross-entropy" in items_by:
        ce_seeds = items_by["cross-entropy"]
        for name, by_seed in items_by.items():
            if name == "cross-entropy":
                continue
            seeds = sorted(set(by_seed) & set(ce_seeds))
            a = np.mean([by_seed[k] for k in seeds], axis=0)
            b = np.mean([ce_seeds[k] for k in seeds], axis=0)
            ci = stats.paired_bootstrap(a, b, n=2000, seed=0)
            p = stats.sign_flip_test(a, b, n=2000, seed=0)
            print(
                f"shipped, {len(seeds)} seeds: {name} - cross-entropy, JSD (TS) "
                f"{ci['mean_diff']:+.4f} (95% CI {ci['ci_low']:+.4f} .. {ci['ci_high']:+.4f}, "
                f"p = {p:.3g}) -> "
                + (
                    "the RL variant is better: claim 1 does NOT reproduce."
                    if ci["ci_high"] < 0
                    else "not better than cross-entropy: claim 1 reproduces."
                )
            )
    if "per-rationale" in agg:
        lengths = [r["length"] for r in agg["per-rationale"]]
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
#    diversity term on the mixture run's test readouts (`mrows` above) and compare it
#    with the per-rationale run's.
# 3. Why can't reasoning help on `urn 3a1b2c?` even in principle? What would a task look
#    like where a spread `q` *can* be narrowed by reasoning?

# %% tags=["solution"] jupyter={"source_hidden": true}
# Solution 1 (default scale only, about 1.5 minutes):
if SCALE == "default":
    cfg = replace(TRAINERS["mixture"][0], **COMMON, lam=0.5, out=OUT / "lam0.5")
    s = summarize(*tutorial.read_eval(train(cfg)))
    print(f"exercise 1: lam 0.5: single-query JSD {s['jsd']:.3f} (TS {s['ts_jsd']:.3f})")
# Solution 2: the column 'var u across rationales' above is exactly that term, averaged
# over test items (rlcd_lab.decomposition.variance_decomposition gives it per item).
print(
    "exercise 2:", quality.get("var u across rationales", pd.Series(dtype=float)).round(4).to_dict()
)
# Solution 3: Y is drawn from the urn independently of anything the model can compute:
# q(x) is already known from the prompt. Reasoning helps when q(x) is spread only from the
# model's point of view (epistemic), e.g. verify before computing the sum.
