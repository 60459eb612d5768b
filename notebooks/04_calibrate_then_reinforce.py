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
# # 4. Calibrate, then reinforce: the recipe against SFT, RFT and GRPO
#
# The recipe (OpenJev-RLCD Algorithm 1):
#
# * **stage 1, calibrate** (`rlcd-lab train calibrate`): loss `-(1/M) sum_i J(u_i, Y)`,
#   pathwise only: the rationales are sampled on-policy but not reinforced;
# * **stage 2, reinforce** (`rlcd-lab train reinforce`, from the stage-1 model): the same
#   proper score as reward, score-function weight `c = 0.3`, KL anchor `beta = 0.04` to
#   the stage-1 model.
#
# The baselines, each followed by temperature scaling fitted on dev (`+TS`): SFT on direct
# answers, RFT/STaR (clone the rationales whose sampled answer is right; optionally with a
# KL anchor) and GRPO (correctness reward of a sampled answer). The paper's Table 1 on
# GSM8K-Verify: RLCD matches GRPO in accuracy but ranks its confidence far better (AURC
# 0.034 vs 0.061), decides 81% of the items at <= 5% error against 19% for GRPO, and
# needs a fitted temperature of 1.4 against about 7.
#
# This notebook builds the Table 1 analogue on the tiny `verify` task from **whatever
# runs are shipped** (`rlcd_lab.assets.shipped_runs()`: every seed, baseline and stage-2
# fork it finds; runs are grouped by method and settings, never by hard-coded names),
# with paired tests, risk-coverage curves and reliability diagrams, and the Table 2
# analogue when stage-2 forks are shipped. It also trains a couple of very short runs
# itself to show the commands work.
#
# Where the numbers come from: Tables 1 and 2 and the figures are computed from the
# shipped runs' eval dumps (`eval/{dev,test}.jsonl`: single-query readouts on 200 dev and
# 400 test items) with `rlcd_lab.evaluate.summarize`; how the runs were made is in
# `assets/README.md` and `benchmarks/RESULTS.md`. The last section's runs are trained
# here, in a temporary directory.

# %%
# ruff: noqa: E402  (the two settings below must come before the imports)
import os
import warnings

os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars in the notebook output
warnings.filterwarnings("ignore", message="IProgress not found")

import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.io as pio
import torch
from IPython.display import display

from rlcd_lab import assets, metrics, plots, tutorial
from rlcd_lab.evaluate import summarize
from rlcd_lab.models import read_meta
from rlcd_lab.train import train
from rlcd_lab.train.grpo import GRPOConfig
from rlcd_lab.train.rlcd import preset

pio.renderers.default = "plotly_mimetype+notebook"  # plots embedded, work offline
torch.set_num_threads(1)

SCALE = tutorial.get_scale()
SIZES = {  # the runs trained in the last section (the shipped runs are read as they are)
    "ci": dict(steps=3, eval_every=3, eval_items=10, test_items=40, grpo=False),
    "default": dict(steps=60, eval_every=30, eval_items=100, test_items=200, grpo=True),
    "paper": dict(steps=3, eval_every=3, eval_items=10, test_items=40, grpo=False),
}[SCALE]
N_BOOT = 2000 if SCALE == "default" else 500  # bootstrap / permutation replicates
EPS = 0.05
print(f"SCALE = {SCALE}: {SIZES}")


def label(info):
    """A display name chosen by method (and its settings), never by run name."""
    m = info["method"]
    if m == "reinforce":
        return (
            "RLCD (calibrate -> reinforce)"
            if info["reader"] in (None, "self")
            else (f"reinforce, reader={info['reader']}")
        )
    if m == "rft":
        return "RFT+KL+TS" if info["beta"] else "RFT+TS"
    return {"calibrate": "RLCD stage 1 only", "sft": "SFT+TS", "grpo": "GRPO+TS"}.get(
        m, f"{m} ({info['variant']})"
    )


# %% [markdown]
# ## The shipped runs

# %%
infos = tutorial.discover_runs(assets.shipped_runs(), task="verify")
display(
    pd.DataFrame(
        [
            {k: i[k] for k in ("name", "variant", "method", "seed", "steps", "beta", "parent")}
            for i in infos
        ]
    )
)
rows = {}
for info in infos:
    test_rows, dev_rows = tutorial.read_eval(info["path"])
    rows[info["name"]] = (test_rows, dev_rows)
    info["summary"] = summarize(test_rows, dev_rows, eps=EPS)
    info["label"] = label(info)
uids = {tuple(r["uid"] for r in t) for t, _ in rows.values()}
assert len(uids) == 1, "the shipped runs must be evaluated on the same test items"
print(f"{len(infos)} runs, {len(next(iter(uids)))} test items each")

# %% [markdown]
# ## Table 1 analogue: single query, after temperature scaling
#
# Runs trained from the base model (no shipped parent), plus the two-stage RLCD run(s).
# Mean +- s.d. over the seeds shipped for each variant. Accuracy and Cov@5% higher is
# better; Brier, NLL, ECE, AURC lower is better; T is the temperature fitted on dev
# (1 = calibrated as trained, > 1 overconfident).

# %%
RLCD = "RLCD (calibrate -> reinforce)"
COLS = {
    "ts_accuracy": "accuracy",
    "ts_brier": "Brier",
    "ts_nll": "NLL",
    "ts_ece": "ECE",
    "ts_aurc": "AURC",
    "ts_cov_at_eps": "Cov@5%",
    "T": "T",
    "mean_length": "length",
}
table1_infos = [i for i in infos if i["parent"] is None or i["label"] == RLCD]
by_label = defaultdict(list)
for i in table1_infos:
    by_label[i["label"]].append(i)


def fmt(values):
    mean, sd = tutorial.mean_std(values)
    return f"{mean:.3f}" if np.isnan(sd) else f"{mean:.3f} +- {sd:.3f}"


table1 = pd.DataFrame(
    {
        lab: {
            "seeds": len(g),
            **{name: fmt([i["summary"][k] for i in g]) for k, name in COLS.items()},
        }
        for lab, g in by_label.items()
    }
).T
display(table1)

# %% [markdown]
# ### Paired tests against the RLCD run
#
# For each baseline: the difference RLCD - baseline on the same test items and seeds
# (`tutorial.paired_comparison`: per-item Brier, NLL and accuracy averaged over seeds,
# paired bootstrap 95% CI and sign-flip p-value; AURC pooled over seeds and recomputed
# per replicate). Negative Brier / NLL / AURC differences and positive accuracy
# differences favour RLCD.


# %%
def by_seed(group):
    out = {}
    for i in group:
        test_rows, dev_rows = rows[i["name"]]
        p, _ = tutorial.scaled_probs(test_rows, dev_rows)
        out[i["seed"]] = (p, np.array([r["label"] for r in test_rows]))
    return out


tests = {}
if RLCD in by_label:
    a_runs = by_seed(by_label[RLCD])
    for lab, g in by_label.items():
        if lab == RLCD:
            continue
        b_runs = by_seed(g)
        seeds = sorted(set(a_runs) & set(b_runs))
        res = tutorial.paired_comparison(
            [a_runs[s] for s in seeds], [b_runs[s] for s in seeds], n=N_BOOT, seed=0
        )
        for metric, r in res.items():
            tests[(lab, metric)] = {"seeds": len(seeds), **r}
tests = pd.DataFrame(tests).T
tests.index.names = ["RLCD vs", "metric"]
display(tests.round(4))

# %% [markdown]
# ### Risk-coverage and reliability
#
# Risk-coverage of the single-query decisions after temperature scaling (the first
# shipped seed of each variant). Temperature scaling cannot change the *ranking* of
# items by confidence (for K = 2 it is monotone), so it cannot repair a model whose
# confident answers are no more often right than its hesitant ones.

# %%
first = {lab: g[0] for lab, g in by_label.items()}
curves = {}
for lab, i in first.items():
    test_rows, dev_rows = rows[i["name"]]
    p, _ = tutorial.scaled_probs(test_rows, dev_rows)
    curves[lab] = metrics.confidence_and_correct(p, [r["label"] for r in test_rows])
plots.risk_coverage_figure(
    curves, eps=EPS, oracle="none", title="Risk-coverage on verify test (after TS)"
).show()

# %% [markdown]
# Reliability diagrams of RLCD and GRPO, before and after temperature scaling: bars
# below the diagonal are overconfidence.

# %%
for lab in (RLCD, "GRPO+TS"):
    if lab not in first:
        continue
    test_rows, dev_rows = rows[first[lab]["name"]]
    y = [r["label"] for r in test_rows]
    raw = metrics.softmax(np.array([r["logits"] for r in test_rows]))
    p, T = tutorial.scaled_probs(test_rows, dev_rows)
    plots.reliability_diagram(raw, y, title=f"{lab}: raw readout").show()
    plots.reliability_diagram(p, y, title=f"{lab}: after temperature scaling (T = {T:.2f})").show()

# %% [markdown]
# ### The paper's claims, checked on these numbers


# %%
by_name = {i["name"]: i for i in infos}


def mean_of(lab, key):
    return tutorial.mean_std([i["summary"][key] for i in by_label[lab]])[0]


claims = []
if RLCD in by_label:
    rl_T = mean_of(RLCD, "T")
    for base in ("GRPO+TS", "RFT+TS", "RFT+KL+TS", "SFT+TS"):
        if base not in by_label:
            continue
        b_T = mean_of(base, "T")
        if base != "SFT+TS":
            claims.append(
                f"T closer to 1 than {base} (paper: 1.4 vs ~7): {rl_T:.2f} vs {b_T:.2f} -> "
                + ("reproduces" if abs(np.log(rl_T)) < abs(np.log(b_T)) else "does NOT reproduce")
            )
        t = tests.loc[(base, "aurc")]
        sig = t["p"] < 0.05 and t["ci_high"] < 0
        claims.append(
            f"AURC lower than {base}: {mean_of(RLCD, 'ts_aurc'):.3f} vs "
            f"{mean_of(base, 'ts_aurc'):.3f}, "
            f"diff {t['diff']:+.4f} (95% CI {t['ci_low']:+.4f} .. {t['ci_high']:+.4f}, "
            f"p = {t['p']:.3g}) -> "
            + (
                "reproduces (significant)"
                if sig
                else "lower but not significant"
                if t["diff"] < 0
                else "does NOT reproduce"
            )
        )
        rc, bc = mean_of(RLCD, "ts_cov_at_eps"), mean_of(base, "ts_cov_at_eps")
        paper = " (paper: 81% vs 19%)" if base == "GRPO+TS" else ""
        claims.append(
            f"Cov@5% higher than {base}{paper}: {rc:.0%} vs {bc:.0%} -> "
            + ("reproduces" if rc > bc else "tie" if rc == bc else "does NOT reproduce")
        )
        t = tests.loc[(base, "accuracy")]
        claims.append(
            f"accuracy vs {base}: {mean_of(RLCD, 'ts_accuracy'):.3f} vs "
            f"{mean_of(base, 'ts_accuracy'):.3f} (diff {t['diff']:+.3f}, p = {t['p']:.3g})"
        )
for c in claims:
    print("-", c)
budget = {}
for lab, g in by_label.items():
    total = [i["steps"] + (by_name[i["parent"]]["steps"] if i["parent"] else 0) for i in g]
    budget[lab] = sorted(set(total))
print(f"Caveat: total training steps per variant (stage 1 included): {budget}")

# %% [markdown]
# ## Table 2 analogue: stage-2 forks of a stage-1 checkpoint
#
# Runs whose `init` is the `final/` checkpoint of another shipped run (a stage-2
# continuation): change relative to that checkpoint (single query, after TS), mean
# over seeds, and the paired test fork - parent. When a readout-only continuation is
# shipped (a `calibrate` fork), every fork is also compared with it, as in the paper's
# Figure 3.

# %%
forks = [i for i in infos if i["parent"] is not None]
by_name = {i["name"]: i for i in infos}
fork_rows = defaultdict(list)
for f in forks:
    parent = by_name[f["parent"]]
    fork_rows[(f["variant"], f["method"])].append(
        {
            k: f["summary"][k] - parent["summary"][k]
            for k in ("ts_accuracy", "ts_brier", "ts_aurc", "T")
        }
    )
table2 = pd.DataFrame(
    {
        f"{variant} ({method})": {
            "seeds": len(d),
            **{f"delta {k}": fmt([x[k] for x in d]) for k in d[0]},
        }
        for (variant, method), d in fork_rows.items()
    }
).T
if len(table2):
    display(table2)
    pairs = {}
    for variant in sorted({f["variant"] for f in forks}):
        g = [f for f in forks if f["variant"] == variant]
        a = by_seed(g)
        b = {}
        for f in g:
            test_rows, dev_rows = rows[f["parent"]]
            p, _ = tutorial.scaled_probs(test_rows, dev_rows)
            b[f["seed"]] = (p, np.array([r["label"] for r in test_rows]))
        seeds = sorted(set(a) & set(b))
        res = tutorial.paired_comparison([a[s] for s in seeds], [b[s] for s in seeds], n=N_BOOT)
        for metric in ("accuracy", "brier", "aurc"):
            pairs[(variant, "vs its stage-1 checkpoint", metric)] = res[metric]
        readout_only = [f for f in forks if f["method"] == "calibrate" and f["variant"] != variant]
        if readout_only:
            c = by_seed(readout_only)
            seeds = sorted(set(a) & set(c))
            res = tutorial.paired_comparison([a[s] for s in seeds], [c[s] for s in seeds], n=N_BOOT)
            for metric in ("accuracy", "brier", "aurc"):
                pairs[(variant, "vs readout-only continuation", metric)] = res[metric]
    display(pd.DataFrame(pairs).T.round(4))
    for (variant, method), d in fork_rows.items():
        if all(abs(x[k]) < 1e-12 for x in d for k in x):
            print(
                f"Note: '{variant}' ({method}) is identical to its stage-1 checkpoint on every "
                "metric and seed: it never moved (e.g. a zero gradient), so it is no control."
            )
    for (variant, ref, metric), r in pairs.items():
        if metric == "brier" and ref == "vs its stage-1 checkpoint":
            print(
                f"{variant}: Brier {r['diff']:+.4f} relative to its stage-1 checkpoint "
                f"(p = {r['p']:.3g}) -> "
                + (
                    "stage 2 helps"
                    if r["ci_high"] < 0
                    else "stage 2 hurts"
                    if r["ci_low"] > 0
                    else "no significant change from stage 2"
                )
            )
else:
    print("No stage-2 forks are shipped yet.")

# %% [markdown]
# ## Training a few short runs here
#
# The same commands the shipped runs came from, only much shorter (and at `ci` scale on a
# copy of `verify` with a 30-item dev split, since every run ends with a full dev
# evaluation). These runs are far too short to compare with the shipped ones; they show
# the pipeline working end to end: stage 1, stage 2 from its `final/` checkpoint, and a
# baseline.

# %%
OUT = Path(tempfile.mkdtemp(prefix="rlcd-nb04-"))
BASE = assets.shipped_checkpoints()["checkpoints/base-verify"]
grpo = SIZES.pop("grpo")
TASK = "verify" if SCALE == "default" else str(tutorial.subset_task("verify", OUT, {"dev": 30}))
common = dict(task=TASK, seed=0, save_every=10_000, **SIZES)
plan = [
    ("calibrate", preset("calibrate", init=BASE, out=OUT / "calibrate", **common)),
    (
        "reinforce",
        preset("reinforce", init=OUT / "calibrate" / "final", out=OUT / "reinforce", **common),
    ),
]
if grpo:
    plan.append(("grpo", GRPOConfig(init=BASE, out=OUT / "grpo", **common)))
mine = {}
for name, cfg in plan:
    print(
        f"rlcd-lab train {name} --init {cfg.init} --out {cfg.out} --task {TASK} "
        f"--steps {cfg.steps} --test-items {cfg.test_items}"
    )
    if SCALE == "paper":
        continue
    t0 = time.perf_counter()
    path = train(cfg)
    s = summarize(*tutorial.read_eval(path), eps=EPS)
    mine[f"{name} ({cfg.steps} steps, trained here)"] = {COLS[k]: s[k] for k in COLS}
    print(f"  {time.perf_counter() - t0:.0f} s")
if mine:
    display(pd.DataFrame(mine).T.round(3))
    assert all(np.isfinite(v).all() for v in pd.DataFrame(mine).to_numpy())

# %% [markdown]
# At paper scale, the commands for Qwen3-1.7B on GSM8K-Verify (GPU; 3 seeds):

# %%
if SCALE == "paper":
    q = "PATH/TO/Qwen3-1.7B"
    print("rlcd-lab data convert gsm8k-verify gsm8k_test.jsonl data/gsm8k-verify.jsonl")
    print("rlcd-lab data split data/gsm8k-verify.jsonl --dev 200 --test 500")
    d = "--task data/gsm8k-verify.jsonl --lr 2e-6 --steps 400 --max-new-tokens 1024"
    for seed in (0, 1, 2):
        o = f"runs/gsm8k-s{seed}"
        for line in (
            f"train calibrate --init {q} --out {o}/calibrate {d} --seed {seed}",
            f"train reinforce --init {o}/calibrate/final --out {o}/reinforce {d} --seed {seed}",
            f"train sft --init {q} --out {o}/sft {d} --seed {seed}",
            f"train rft --init {q} --out {o}/rft-kl {d} --beta 0.04 --seed {seed}",
            f"train grpo --init {q} --out {o}/grpo {d} --seed {seed}",
        ):
            print("accelerate launch -m rlcd_lab.cli " + line)
else:
    print("(set RLCD_SCALE=paper to print the commands for a real model)")

# %%
# Checks that make a silent regression fail CI: the shipped numbers are what RESULTS.md
# and the checkpoints' rlcd.json report (summarize on the dumps == the stored metrics).
checked = 0
for i in infos:
    if not (i["path"] / "final" / "rlcd.json").exists():  # not every run ships final/
        continue
    stored = read_meta(i["path"] / "final")["metrics"]["test"]
    for k in ("ts_accuracy", "ts_brier", "ts_aurc", "T"):
        assert abs(stored[k] - i["summary"][k]) < 1e-9, (i["name"], k)
    checked += 1
print(f"{checked} shipped checkpoints' stored test metrics match their eval dumps")
assert RLCD in by_label, "a two-stage RLCD run (method reinforce) must be shipped"

# %% [markdown]
# ## Exercises
#
# 1. Temperature scaling with one scalar cannot change the ranking of a binary
#    classifier's confidences. Verify it: compute the AURC of the GRPO run before and
#    after scaling.
# 2. Which single number in Table 1 would you show a product manager who wants to
#    automate verification at a 5% error budget? Compute it for a 2% budget instead.
# 3. The budgets differ: RLCD ran stage 1 *and* stage 2. Using the short runs trained
#    above, design a fair comparison (same total steps) and say what you would run.

# %% tags=["solution"] jupyter={"source_hidden": true}
if "GRPO+TS" in first:
    test_rows, dev_rows = rows[first["GRPO+TS"]["name"]]
    y = [r["label"] for r in test_rows]
    raw = metrics.softmax(np.array([r["logits"] for r in test_rows]))
    p, _ = tutorial.scaled_probs(test_rows, dev_rows)
    a_raw = metrics.aurc(*metrics.confidence_and_correct(raw, y))
    a_ts = metrics.aurc(*metrics.confidence_and_correct(p, y))
    print(f"exercise 1: GRPO AURC raw {a_raw:.4f}, after TS {a_ts:.4f} (same up to ties)")
for lab, g in by_label.items():
    test_rows, dev_rows = rows[g[0]["name"]]
    p, _ = tutorial.scaled_probs(test_rows, dev_rows)
    c, ok = metrics.confidence_and_correct(p, [r["label"] for r in test_rows])
    print(f"exercise 2: {lab}: Cov@2% = {metrics.coverage_at_risk(c, ok, 0.02):.0%}")
print("exercise 3: e.g. baselines for stage-1 + stage-2 steps, or RLCD stages of half length")
