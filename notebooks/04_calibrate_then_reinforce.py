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
# runs are shipped** (`rlcd_lab.files.assets.shipped_runs()`: every seed, baseline and stage-2
# fork it finds; runs are named from their `config.json` (method and settings) and
# whether they continue another shipped run, never from their directory names), with
# paired tests, risk-coverage curves and reliability diagrams, the Table 2 analogue when
# stage-2 forks are shipped, and the paper's claims checked on these numbers. It also
# trains a couple of very short runs itself to show the commands work.
#
# Where the numbers come from: every table and figure is computed here from the shipped
# runs' eval dumps (`eval/{dev,test}.jsonl`: single-query readouts on 200 dev and 400
# test items) through `rlcd_lab.reports.results`: `load_run` fits the temperature on dev and
# gives per-item values, `paired` the paired tests as the paper does them (accuracy and
# Brier: per-item values averaged over seeds, bootstrap over test items and a sign-flip
# test; AURC and Cov@5%: computed per seed and averaged over seeds, with the test items
# resampled, or swapped between the two methods, jointly across seeds). Display names
# and verdicts are `rlcd_lab.reports.report`'s, as in the reproduction's report. How the runs
# were made is in `assets/README.md`. The last section's runs are trained here, in a
# temporary directory.

# %%
# ruff: noqa: E402  (the settings below must come before the imports)
import os
import warnings

os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars in the notebook output
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' bars too
warnings.filterwarnings("ignore", message="IProgress not found")

import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.io as pio
import torch
from IPython.display import display

from rlcd_lab import methods, metrics  # noqa: F401 (metrics: for the exercises, metrics.aurc, ...)
from rlcd_lab.classroom import tutorial
from rlcd_lab.drawing import plots
from rlcd_lab.files import assets
from rlcd_lab.lm.checkpoint import read_meta
from rlcd_lab.math import paper, verdicts
from rlcd_lab.methods.configs import GRPOConfig, preset
from rlcd_lab.reports import report, results
from rlcd_lab.train import launch_command, train

pio.renderers.default = tutorial.plotly_renderer()  # JupyterLab's; none as a script
torch.set_num_threads(1)

SCALE = tutorial.get_scale()
GPUS = 8  # the paper-scale commands below: one process per GPU (accelerate launch)
SIZES = {  # the runs trained in the last section (the shipped runs are read as they are)
    "ci": dict(steps=3, eval_every=3, eval_items=10, test_items=40, grpo=False),
    "default": dict(steps=60, eval_every=30, eval_items=100, test_items=200, grpo=True),
    "paper": dict(steps=3, eval_every=3, eval_items=10, test_items=40, grpo=False),
}[SCALE]
N_BOOT = 2000 if SCALE == "default" else 500  # bootstrap replicates / sign-flip patterns
EPS = 0.05
print(f"SCALE = {SCALE}: {SIZES}")


def run_name(info, method_of):
    """The reproduction's name of a run (``report.label`` shows it), chosen from its
    config: method, settings, and which shipped run it continues (``method_of``: each
    run's method by name)."""
    m, parent = info["method"], method_of.get(info["parent"])
    forked = parent is not None
    if m == "reinforce":
        if info["outcome_reward"] is False:  # the score-function term gets the KL reward only
            return "anchor-only"
        return "reinforce"
    if m == "calibrate":  # stage 1 continued: after GRPO (outcome RL first), or a fork
        if parent == "grpo":
            return methods.GRPO_STAGE1
        return "readout-only" if forked else "calibrate"
    if m == "grpo":
        if forked:
            return "grpo-cont"
        return "drgrpo" if info["advantage"] == "group-mean" else "grpo"
    if m == "rft":
        return "rft-kl" if info["beta"] else "rft"
    if m == "endtoend":  # Table 4: one run per score-function weight; Figure 1 without KL
        return methods.NO_KL if not info["beta"] else f"endtoend-c{info['sf_weight']:g}"
    if m == "rlcr":  # its stated confidence is a second view of the same run (same config)
        return "rlcr-stated" if "-stated" in info["variant"] else "rlcr"
    return m


# %% [markdown]
# ## The shipped runs

# %%
infos = tutorial.discover_runs(assets.shipped_runs(), task="verify")
method_of = {info["name"]: info["method"] for info in infos}
for info in infos:
    info["run"] = run_name(info, method_of)
stage1 = min(i["steps"] for i in infos if i["run"] == "calibrate")
for info in infos:  # a baseline trained from the base for longer than stage 1: RLCD's budget
    if info["parent"] is None and info["run"] != "base" and info["steps"] > stage1:
        info["run"] += methods.MATCHED
    info["label"] = report.label(info["run"])
    info["result"] = results.load_run(info["path"], eps=EPS)
display(
    pd.DataFrame(
        [
            {k: i[k] for k in ("name", "label", "method", "seed", "steps", "beta", "parent")}
            for i in infos
        ]
    )
)
twins = [k for k, c in Counter((i["label"], i["seed"]) for i in infos).items() if c > 1]
assert not twins, (
    f"several shipped runs share a name and a seed: {twins}; their config.json files do "
    "not tell them apart (runs from an older version? rerun rlcd-lab reproduce)"
)
labels = {tuple(i["result"].labels) for i in infos}
assert len(labels) == 1, "the shipped runs must be evaluated on the same test items"
print(f"{len(infos)} runs, {len(next(iter(labels)))} test items each")

# %% [markdown]
# ## Table 1 analogue: single query, after temperature scaling
#
# Runs trained from the base model (no shipped parent), plus the two-stage RLCD run(s).
# Mean +- s.d. over the seeds shipped for each run (the mean alone for one seed).
# Accuracy and Cov@5% higher is better; Brier, NLL, ECE, AURC lower is better; T is the
# temperature fitted on dev (1 = calibrated as trained, > 1 overconfident); `steps` the
# training budget (stage 1 included for two-stage RLCD).

# %%
RLCD = report.label(results.RLCD)
by_name = {i["name"]: i for i in infos}


def budget(i):
    return i["steps"] + (by_name[i["parent"]]["steps"] if i["parent"] else 0)


def seeds_of(group):
    """``{seed: RunResult}`` of a group of runs."""
    return {i["seed"]: i["result"] for i in group}


by_label = defaultdict(list)
for i in infos:
    if i["parent"] is None or i["label"] == RLCD:
        by_label[i["label"]].append(i)
table1 = pd.DataFrame(
    {
        lab: {
            "seeds": len(g),
            "steps": "/".join(str(s) for s in sorted({budget(i) for i in g})),
            **{
                col: report.fmt_cell(results.mean_sd([i["result"].row[src] for i in g]))
                for col, src in results.METRICS.values()
            },
        }
        for lab, g in by_label.items()
    }
).T
display(table1)

# %% [markdown]
# ### Paired tests against the RLCD run
#
# For each baseline, RLCD minus the baseline on the same test items and seeds
# (`results.paired`): the difference of the means over seeds, its 95% bootstrap CI and
# a two-sided sign-flip p-value. Accuracy, Brier and NLL: per-item values averaged over
# seeds, items resampled. AURC and Cov@5%: per-seed metrics averaged over seeds, test
# items resampled (or swapped) jointly across seeds. Negative Brier / NLL / AURC and
# positive accuracy / Cov@5% differences favour RLCD.


# %%
def paired(a_group, b_group):
    """``results.paired`` of two groups of runs over the seeds both hold."""
    a, b = seeds_of(a_group), seeds_of(b_group)
    seeds = sorted(set(a) & set(b))
    return len(seeds), results.paired(
        [a[s] for s in seeds], [b[s] for s in seeds], eps=EPS, n=N_BOOT
    )


tests = {}
if RLCD in by_label:
    for lab, g in by_label.items():
        if lab != RLCD:
            tests[lab] = paired(by_label[RLCD], g)
paired_table = pd.DataFrame(
    {
        (lab, metric): {"seeds": n, **r}
        for lab, (n, res) in tests.items()
        for metric, r in res.items()
    }
).T
paired_table.index.names = ["RLCD vs", "metric"]
display(paired_table.round(4))

# %% [markdown]
# ### Risk-coverage and reliability
#
# Risk-coverage of the single-query decisions after temperature scaling (the first
# shipped seed of each run). Temperature scaling cannot change the *ranking* of
# items by confidence (for K = 2 it is monotone), so it cannot repair a model whose
# confident answers are no more often right than its hesitant ones.

# %%
first = {lab: min(g, key=lambda i: i["seed"])["result"] for lab, g in by_label.items()}
plots.risk_coverage_figure(
    {lab: (r.confidence, r.correct) for lab, r in first.items()},
    eps=EPS,
    oracle="none",
    title="Risk-coverage on verify test (after TS)",
    aurc_in_name=False,  # the AURC is exercise 1's answer; Table 1 has the seeds' mean
).show()

# %% [markdown]
# Reliability diagrams of RLCD and GRPO, before and after temperature scaling: bars
# below the diagonal are overconfidence.

# %%
GRPO = report.label("grpo")
for lab in (RLCD, GRPO):
    if lab not in first:
        continue
    r = first[lab]
    plots.reliability_diagram(r.probs(False), r.labels, title=f"{lab}: raw readout").show()
    plots.reliability_diagram(
        r.scaled, r.labels, title=f"{lab}: after temperature scaling (T = {r.T:.2f})"
    ).show()

# %% [markdown]
# ## Table 2 analogue: stage-2 forks of a stage-1 checkpoint
#
# Runs whose `init` is the `final/` checkpoint of another shipped run (a stage-2
# continuation), each minus that checkpoint (same seed): paired tests as above, and the
# mean +- s.d. over seeds of the change in T and in rationale length. anchor-only is
# RLCD-RL with the outcome reward removed (`outcome_reward=False`: the score-function
# term gets the KL reward only; the readout is still trained by the pathwise term).
# When a readout-only continuation is shipped, every other fork is also compared with
# it, as in the paper's Figure 3.

# %%
forks = defaultdict(list)
for i in infos:
    if i["parent"] is not None:
        forks[i["label"]].append(i)
fork_tests, vs_readout = {}, {}
READOUT_ONLY = report.label("readout-only")
for lab, g in forks.items():
    parents = [by_name[i["parent"]] for i in g]
    n, res = paired(g, parents)
    pairs = [(i["result"].row, p["result"].row) for i, p in zip(g, parents, strict=True)]
    for key, src in (("T", "T"), ("length", "mean_length")):
        res[key] = results.mean_sd([f[src] - c[src] for f, c in pairs])
    fork_tests[lab] = res
    if READOUT_ONLY in forks and lab != READOUT_ONLY:
        vs_readout[lab] = paired(g, forks[READOUT_ONLY])[1]
keys = ("accuracy", "brier", "aurc", "cov_at_eps")
if fork_tests:
    table2 = pd.DataFrame(
        {
            lab: {
                "seeds": len(forks[lab]),
                **{f"delta {results.METRICS[k][0]}": verdicts.fmt_diff(res[k]) for k in keys},
                **{f"delta {k}": report.fmt_cell(res[k], signed=True) for k in ("T", "length")},
            }
            for lab, res in fork_tests.items()
        }
    ).T
    display(table2)
    if vs_readout:
        display(
            pd.DataFrame(
                {
                    lab: {f"{results.METRICS[k][0]}": verdicts.fmt_diff(res[k]) for k in keys}
                    for lab, res in vs_readout.items()
                }
            ).T.rename_axis(f"fork minus {READOUT_ONLY}")
        )
    for lab, g in forks.items():
        moved = any(
            abs(i["result"].row[k] - by_name[i["parent"]]["result"].row[k]) > 1e-12
            for i in g
            for k in ("ts_accuracy", "ts_brier", "ts_aurc", "T")
        )
        if not moved:
            print(
                f"Note: '{lab}' is identical to its stage-1 checkpoint on every metric and "
                "seed: it never moved (e.g. a zero gradient), so it is no control."
            )
    for lab, res in fork_tests.items():
        b = res["brier"]
        print(
            f"{lab}: Brier {verdicts.fmt_diff(b)} relative to its stage-1 checkpoint -> "
            + (
                "stage 2 helps"
                if b["ci_high"] < 0
                else "stage 2 hurts"
                if b["ci_low"] > 0
                else "no significant change from stage 2"
            )
        )
else:
    print("No stage-2 forks are shipped yet.")

# %% [markdown]
# ## The paper's claims, checked on these numbers
#
# Each claim the paper makes about GSM8K-Verify, the task `verify` stands for
# (`rlcd_lab.math.paper.CLAIMS`, the list the reproduction's report checks; Table 4's sweep is
# in the report) beside our difference, 95% CI and p-value, with `report.verdict`:
# *reproduces* when the difference is significant on the paper's side (CI excludes 0 and
# p < 0.05) and the CI holds the paper's effect, *smaller than the paper's* when the CI
# excludes that effect on the near side, *not measurable* when it holds both 0 and the
# effect, *opposite direction* when significant on the other side. A baseline shipped at
# RLCD's budget (matched) is used when there is one. The fitted temperatures are compared
# by their means over seeds (T has no per-item values to resample),
# `report.temperature_verdict`: RLCD's near 1 and closest, the baselines' far from it.


# %%
def rlcd_minus(other):
    """``(label, results.paired(RLCD, other))`` for the run named ``other`` (its
    matched-budget twin when shipped); ``(label, None)`` when it is not shipped."""
    for lab in (report.label(other + methods.MATCHED), report.label(other)):
        if lab in tests:
            return lab, tests[lab][1]
        if lab in forks and RLCD in forks:  # RLCD-RL against another fork
            return lab, paired(forks[RLCD], forks[lab])[1]
    return report.label(other), None


KIND = paper.kind("verify")
claims = []
for c in paper.CLAIMS[KIND]:
    if not c.pair.startswith(("fork:", f"{results.RLCD} - ")):
        continue  # Table 4's sweep: the reproduction's report
    if c.pair.startswith("fork:"):
        lab = report.label(c.pair.removeprefix("fork:"))
        name, res = f"{lab} minus its stage-1 checkpoint", fork_tests.get(lab)
    else:
        lab, res = rlcd_minus(c.pair.removeprefix(f"{results.RLCD} - "))
        name = f"RLCD minus {lab}"
    if res is None or c.metric not in res or c.metric == "T":
        continue
    d = res[c.metric]
    claims.append(
        {
            "claim": f"{name}: {c.metric}",
            "paper": f"{c.paper} (section {c.section})",
            "ours: difference [95% CI], p": verdicts.fmt_diff(d),
            "verdict": verdicts.verdict(d, c.direction, c.effect),
        }
    )
display(pd.DataFrame(claims))
baselines = [lab for lab in (rlcd_minus("grpo")[0], rlcd_minus("rft-kl")[0]) if lab in by_label]
if RLCD in by_label and baselines and KIND in paper.TEMPERATURE:
    t = {
        lab: results.mean_sd([i["result"].T for i in by_label[lab]])["mean"]
        for lab in (RLCD, *baselines)
    }
    verdict_t = verdicts.temperature_verdict(t[RLCD], [t[lab] for lab in baselines])
    print(
        f"fitted T (paper: {paper.TEMPERATURE[KIND].paper}): "
        + ", ".join(f"{lab} {v:.2f}" for lab, v in t.items())
        + f" -> {verdict_t}"
    )
steps = {lab: sorted({budget(i) for i in g}) for lab, g in by_label.items()}
print(f"Training budgets in steps (stage 1 included for two-stage RLCD): {steps}")

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
TASK = "verify"
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
    row = results.load_run(path, eps=EPS).row
    mine[f"{name} ({cfg.steps} steps, trained here)"] = {
        col: row[src] for col, src in results.METRICS.values()
    }
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
            print(launch_command(line, processes=GPUS))
else:
    print("(set RLCD_SCALE=paper to print the commands for a real model)")

# %%
# Checks that make a silent regression fail CI: the shipped numbers are what the
# checkpoints' rlcd.json report (the eval dumps read by results.load_run == the metrics
# stored at training time). T to 1e-6 relative: the stored T came from an older fit (a
# golden-section search on the flat NLL, within 2e-7 of today's root of its slope).
checked = 0
for i in infos:
    if not (i["path"] / "final" / "rlcd.json").exists():  # not every run ships final/
        continue
    stored = read_meta(i["path"] / "final")["metrics"]["test"]
    for k in ("ts_accuracy", "ts_brier", "ts_aurc"):
        assert abs(stored[k] - i["result"].row[k]) < 1e-9, (i["name"], k)
    assert abs(stored["T"] / i["result"].row["T"] - 1) < 1e-6, (i["name"], "T")
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
#    automate verification at a 5% error budget? Compute it for a 2% budget instead
#    (for the RLCD run).
# 3. The budgets differ: RLCD ran stage 1 *and* stage 2. Using the short runs trained
#    above, design a fair comparison (same total steps) and say what you would run: how
#    many steps does a baseline get?
#
# Put your answers in the next cell (replace each `None`) and run it: the `classroom`
# checks compute the right answers themselves (from the runs above) and say whether
# yours match.

# %%
from rlcd_lab.classroom import exercises

aurc_raw = None  # 1: AURC of the GRPO run (first[GRPO]) on its raw probabilities
aurc_ts = None  # 1: the same after temperature scaling
cov_2pct = None  # 2: Cov@2% of the RLCD run (first[RLCD]) after scaling, as a fraction
baseline_steps = None  # 3: the steps of a baseline matched to the two stages trained above
print("1:", exercises.check_aurc_before_after(first.get(GRPO), aurc_raw, aurc_ts))
print("2:", exercises.check_coverage_at_risk(first.get(RLCD), cov_2pct, eps=0.02))
print("3:", exercises.check_fair_budget(OUT / "calibrate", OUT / "reinforce", baseline_steps))
