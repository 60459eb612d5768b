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
# # 2. System-One collapse: training the per-rationale objective end to end
#
# The per-rationale objective `E_r J(u(r), q)` has a calibrated optimum (notebook 1).
# The paper reports that optimising it *end to end* (pathwise and score-function terms
# together, from the base reasoner) fails in a specific way on a knowledge task
# (MMLU-Pro): the base model ends every rationale with near-certainty, so the Brier
# score punishes its confident mistakes; hedging is learned faster after an *empty*
# rationale, and the policy gradient moves all rationales to the bare marker within
# about 100 steps: the reasoning model becomes a direct scorer ("System One"). A KL
# anchor to the base model (`beta = 0.04`) prevents it.
#
# Here we run that experiment on the tiny world's knowledge task, `facts` (the MMLU-Pro
# analogue: reasoning writes `recall xyz=V` and copies `V` with certainty; the base model
# answers *better* directly, see the numbers printed below), from the shipped base checkpoint
# `assets/checkpoints/base-facts`, twice: without and with the KL anchor. Like a real LM,
# that base model gives the empty rationale (the marker right after the question) a small
# probability: 2% of its reasoning demonstrations had one (`rlcd-lab pretrain --task
# facts`, setting `p_empty`), so an empty rationale is a space and the marker,
# `" Answer:"`, 8 tokens, and about one rationale in a hundred starts out empty. Then we look
# at rationale length, forced-marker rate and the variance of `u` across rationales,
# step by step, from each run's `log.jsonl`.
#
# Where the numbers come from: the two runs are trained *in this notebook* (into a
# temporary directory), at the size set by `SCALE`. At `ci` scale they are far too short
# to show anything but that the commands work. Training on CPU is deterministic given
# the seed, so `default` reproduces the same curves on any machine (up to thread-level
# float differences).
#
# **Honesty note.** The text below that interprets the runs is computed from the logs:
# it says what happened, including when the paper's finding does not reproduce at this
# scale.

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
import plotly.io as pio
import torch
from IPython.display import display

from rlcd_lab.classroom import tutorial
from rlcd_lab.drawing import plots
from rlcd_lab.files import assets
from rlcd_lab.files.io import read_jsonl
from rlcd_lab.files.rundir import read_log
from rlcd_lab.lm.checkpoint import read_meta
from rlcd_lab.methods.configs import preset
from rlcd_lab.train import launch_command, train

pio.renderers.default = tutorial.plotly_renderer()  # JupyterLab's; none as a script
torch.set_num_threads(1)

SCALE = tutorial.get_scale()
GPUS = 8  # the paper-scale commands below: one process per GPU (accelerate launch)
SIZES = {
    "ci": dict(steps=8, eval_every=4, eval_items=20, test_items=0),
    "default": dict(steps=250, eval_every=25, eval_items=100, test_items=0),
    "paper": dict(steps=8, eval_every=4, eval_items=20, test_items=0),
}[SCALE]
print(f"SCALE = {SCALE}: {SIZES}")

BASE = assets.shipped_checkpoints()["checkpoints/base-facts"]
OUT = Path(tempfile.mkdtemp(prefix="rlcd-nb02-"))
EMPTY_TOKENS = 8  # " Answer:" in the character tokenizer: an empty rationale
TASK = "facts"
COMMON = dict(
    init=BASE,
    task=TASK,
    lr=3e-4,  # the collapse takes about 200 steps at this rate (1e-3: see exercise 1)
    max_new_tokens=24,
    batch_size=8,
    m=4,
    seed=0,
    grad_terms_every=10,
    save_every=10_000,
    **SIZES,
)
print(f"base checkpoint: {BASE}\nruns written to: {OUT}")
base_dev = read_meta(BASE)["metrics"]["dev"]  # measured when the checkpoint was built
for mode in ("direct", "reason"):
    print(
        f"base-facts on dev, {mode:>6}: accuracy {base_dev[mode]['accuracy']:.3f}, "
        f"Brier {base_dev[mode]['brier']:.3f}, fitted T {base_dev[mode]['T']:.2f}"
    )
base_dev = base_dev["reason"]

# %% [markdown]
# ## The two runs
#
# `rlcd-lab train endtoend` is the RLCD loop (`rlcd_lab/train/rlcd.py`) with the
# per-rationale objective and score-function weight `c = 1`: every step samples 4
# rationales for each of 8 questions, reads `u` after each, and takes the gradient of
# `-(1/M) sum_i R_i - c (1/M) sum_i sg(A_i) log pi(r_i)`, `R_i = J(u_i, Y)` (Brier), with
# the leave-one-out advantage `A_i` (plus `-beta log pi/pi_ref` when anchored). The
# equivalent commands:

# %%
runs = {}
for name, beta in (("no KL", 0.0), ("KL 0.04", 0.04)):
    cfg = preset("endtoend", out=OUT / name.replace(" ", "-"), beta=beta, **COMMON)
    print(
        f"rlcd-lab train endtoend --init {BASE} --out {cfg.out} --task {TASK} "
        f"--steps {cfg.steps} --lr {cfg.lr:g} --max-new-tokens {cfg.max_new_tokens} "
        f"--eval-every {cfg.eval_every} --beta {beta:g}"
    )
    if SCALE == "paper":
        continue
    t0 = time.perf_counter()
    runs[name] = train(cfg)
    print(f"  trained {cfg.steps} steps in {time.perf_counter() - t0:.0f} s")

# %% [markdown]
# At paper scale these are the commands for Qwen3-1.7B on MMLU-Pro (GPU, bf16; the
# paper's settings: AdamW lr 2e-6, 8 questions x 4 rationales per step):

# %%
if SCALE == "paper":
    print("rlcd-lab data convert mmlu-pro mmlu_pro_test.jsonl data/mmlu-pro.jsonl")
    print("rlcd-lab data split data/mmlu-pro.jsonl --dev 500 --test 2000")
    for beta in (0.0, 0.04):
        print(
            launch_command(
                "train endtoend --init PATH/TO/Qwen3-1.7B --task data/mmlu-pro.jsonl --lr 2e-6 "
                f"--steps 400 --max-new-tokens 1024 --beta {beta} "
                f"--out runs/mmlu-endtoend-beta{beta}",
                processes=GPUS,
            )
        )
    print("(the tiny runs below were not trained at paper scale: nothing to plot)")
else:
    print("(set RLCD_SCALE=paper to print the commands for a real model)")

# %% [markdown]
# ## What the logs say
#
# Per step: the mean rationale length (sampled tokens; an empty rationale is 8), the share
# of rationales that hit the length limit and got the marker appended ("forced"), the
# variance of `u` across the 4 rationales of a question (Proposition 1's diversity term:
# 0 when the readout no longer depends on which rationale was written), the mean reward
# `J(u, Y)`, and dev accuracy every few steps.

# %%
logs = {name: read_log(path) for name, path in runs.items()}
panels = {
    "rationale_length": "rationale length (tokens)",
    "forced_rate": "forced-marker rate",
    "readout_variance": "variance of u across rationales",
    "reward": "reward J(u, Y) (Brier, higher is better)",
    "dev_accuracy": "dev accuracy",
    "kl": "log pi/pi_ref (mean per rationale)",
}
fig = plots.run_panels(  # curves of more than 20 steps: a 10-step moving average
    logs,
    panels,
    raw=["dev_accuracy"],
    rates=["forced_rate", "dev_accuracy"],
    title="End-to-end per-rationale training on facts",
    height=850,
)
fig.add_hline(y=EMPTY_TOKENS, line_dash="dot", row=1, col=1, annotation_text="empty rationale")
if logs:
    fig.show()


# %%
def window(rows, col, frac):
    """Mean of a log column over the first (frac < 0) or last (frac > 0) share of steps."""
    _, v = tutorial.log_column(rows, col)
    k = max(1, int(abs(frac) * len(v)))
    return float(np.mean(v[:k] if frac < 0 else v[-k:]))


summary, hedges = {}, {}
for name, rows in logs.items():
    meta = read_meta(Path(runs[name]) / "final")
    dev = meta["metrics"]["dev"]
    dev_rows = read_jsonl(Path(runs[name]) / "eval/dev.jsonl")
    summary[name] = {
        "length (first 10%)": window(rows, "rationale_length", -0.1),
        "length (last 10%)": window(rows, "rationale_length", 0.1),
        "forced (last 10%)": window(rows, "forced_rate", 0.1),
        "var u (first 10%)": window(rows, "readout_variance", -0.1),
        "var u (last 10%)": window(rows, "readout_variance", 0.1),
        "reward (first 10%)": window(rows, "reward", -0.1),
        "reward (last 10%)": window(rows, "reward", 0.1),
        "final dev accuracy": dev["accuracy"],
        "final dev Brier": dev["brier"],
        "final dev T": dev["T"],
        "final empty share": float(np.mean([r["rationales"][0] == "" for r in dev_rows])),
    }
    # the mean top probability itself is exercise 2's answer: only whether it hedges here
    hedges[name] = float(np.mean([max(r["probs"]) for r in dev_rows])) < 0.9
summary = pd.DataFrame(summary).T
display(summary.round(3))

# %% [markdown]
# A few rationales each final model writes on dev (from the run's `eval/dev.jsonl`):

# %%
for name, path in runs.items():
    dev_rows = read_jsonl(Path(path) / "eval/dev.jsonl")
    print(f"--- {name}")
    for r in dev_rows[:5]:
        u, opts = np.array(r["probs"]), r["options"]
        print(
            f"  {r['rationales'][0]!r:<40} forced={r['forced'][0]!s:<5} "
            f"top option {opts[int(u.argmax())]} p={u.max():.2f} (label {opts[r['label']]})"
        )

# %% [markdown]
# ## Verdict, computed from the logs


# %%
def verdict(name, s):
    empty = s["length (last 10%)"] <= EMPTY_TOKENS + 1.0
    flat = s["var u (last 10%)"] < 0.1 * max(s["var u (first 10%)"], 1e-9)
    limit = s["forced (last 10%)"] > 0.5
    if empty and flat:
        return (
            f"{name}: System-One collapse as in the paper: rationales became empty "
            f"({s['length (last 10%)']:.1f} tokens over the last 10% of steps, "
            f"{s['final empty share']:.0%} of the final model's dev rationales are empty) "
            f"and the readout no longer depends on them (variance of u "
            f"{s['var u (first 10%)']:.3f} -> {s['var u (last 10%)']:.3f})."
        )
    if flat and limit:
        return (
            f"{name}: the readout stopped depending on the rationale (variance of u "
            f"{s['var u (first 10%)']:.3f} -> {s['var u (last 10%)']:.3f}): it answers the "
            "same whatever was written, like a direct scorer; but the rationales did not "
            f"become empty: they ran to the length limit ({s['forced (last 10%)']:.0%} "
            "forced). A collapse of the reasoning, not the paper's empty-rationale form."
        )
    if flat:
        return (
            f"{name}: the readout no longer depends on the rationale (variance of u "
            f"{s['var u (first 10%)']:.3f} -> {s['var u (last 10%)']:.3f}) while the "
            f"rationales keep their length ({s['length (last 10%)']:.1f} tokens): the "
            "rationales are kept but ignored."
        )
    return (
        f"{name}: no collapse: rationales keep their length ({s['length (last 10%)']:.1f} "
        f"tokens, {s['forced (last 10%)']:.0%} forced) and the readout still depends on them "
        f"(variance of u {s['var u (last 10%)']:.3f})."
    )


if len(summary):
    for name, s in summary.iterrows():
        print(verdict(name, s))
        r0, r1 = s["reward (first 10%)"], s["reward (last 10%)"]
        hedged = hedges[name]
        print(
            f"  reward J(u, Y) on the training batches {r0:+.3f} -> {r1:+.3f}; mean top "
            f"probability on dev {'below' if hedged else 'at least'} 0.9"
            + (
                ": the readout learned to hedge (paper Fig. 1, right)."
                if r1 > r0 and hedged
                else "."
            )
        )
    acc = summary["final dev accuracy"]
    print(
        "Dev accuracy after training: "
        + ", ".join(f"{n} {a:.3f}" for n, a in acc.items())
        + f" (base model after reasoning {base_dev['accuracy']:.3f}). "
        + (
            "Both runs lost accuracy against the base model."
            if (acc < base_dev["accuracy"] - 0.05).all()
            else "Neither run lost more than 5 points against the base model."
            if (acc >= base_dev["accuracy"] - 0.05).all()
            else "One run lost more than 5 points against the base model."
        )
    )
    if SCALE == "ci":
        print(f"(ci scale: only {SIZES['steps']} steps; nothing can be read from these curves)")

# %%
# Checks that make a silent regression fail CI: the logs hold what the plots need.
for name, rows in logs.items():
    assert len(rows) == SIZES["steps"], (name, len(rows))
    for col in ("rationale_length", "forced_rate", "readout_variance", "reward"):
        assert len(tutorial.log_column(rows, col)[1]) == SIZES["steps"], col
    assert 0 < window(rows, "rationale_length", -0.1) <= COMMON["max_new_tokens"] + EMPTY_TOKENS
    assert (
        len(tutorial.log_column(rows, "dev_accuracy")[1]) == SIZES["steps"] // SIZES["eval_every"]
    )
if "KL 0.04" in logs:
    assert tutorial.log_column(logs["KL 0.04"], "kl")[1].size > 0

# %% [markdown]
# **What this tiny world shows.** At `default` scale (250 steps, seed 0; the same runs
# from the command line are in `benchmarks/RESULTS.md`), the run without the anchor
# collapses as in the paper: its rationales shrink from 20 tokens to the empty rationale
# (8 tokens) between steps 100 and 250, until all of its final dev rationales are empty;
# the variance of `u` across rationales falls from about 0.4 to 0.007, and its readout
# hedges (mean top probability well below 0.9; dev Brier 0.99 -> 0.76). The anchored run keeps
# reasoning (17 tokens, variance 0.18 over the last 25 steps). Caveats: the anchored
# run is drifting too (a quarter of its final dev rationales are already empty, and by
# step 300 half are), because in `facts` answering directly really is better (exercise
# 3 prices this; with `beta = 0.2`, whose price exceeds the gain, the rationales keep
# their form for 300 steps); both runs lose some accuracy (0.45 and 0.42 against the base model's
# 0.505 after reasoning); and at `lr = 1e-3` the no-KL rationales run to the length
# limit instead and accuracy collapses (exercise 1). On `verify`, where reasoning is
# needed, no collapse happens at all.

# %% [markdown]
# ## Exercises
#
# 1. Rerun the no-KL run with `lr=1e-3` instead of `3e-4`. Where do the rationales go,
#    and what happens to dev accuracy?
# 2. The paper explains the collapse by the readout after an empty rationale learning to
#    hedge faster. Measure the hedge: for the final no-KL model, compute the mean top
#    probability of its readouts on dev (`eval/dev.jsonl`) and compare it with the
#    base model's (`rlcd-lab eval --checkpoint assets/checkpoints/base-facts --task facts
#    --split dev`).
# 3. Price the shortcut. The KL shaping reward of a rationale is
#    `-beta log pi(r)/pi_ref(r)`. If the policy always wrote the empty rationale, which
#    the base model writes with probability about 0.01-0.02, what would it pay per
#    question at `beta = 0.04`? Compare with the Brier gain of answering directly
#    (base-facts on dev: direct vs reason Brier, printed at the top). Which wins at the
#    optimum of the anchored objective, and what does the anchor buy you then?
#
# Put your answers in the next cell (replace each `None`) and run it: the `classroom`
# checks compute the right answers themselves (from the runs above and the base model's
# `rlcd.json`) and say whether yours match. Exercise 1 needs the `lr=1e-3` run (default
# scale); exercise 2 is checked on the no-KL run trained above.

# %%
from rlcd_lab.classroom import exercises

lr_run = None  # 1: the run directory of your no-KL run at lr=1e-3
length_last_10pct = None  # 1: its mean rationale length over the last 10% of steps
mean_top_p = None  # 2: mean top probability of the final no-KL model's readouts on dev
kl_price = None  # 3: the KL price per question at beta = 0.04 when p = 0.01
brier_gain = None  # 3: base-facts dev Brier after reasoning minus answering directly
winner = None  # 3: "direct" or "reason": which does the anchored objective prefer?
print("1:", exercises.check_lr_run(lr_run, length_last_10pct))
print("2:", exercises.check_mean_top_probability(runs.get("no KL"), mean_top_p))
print("3:", exercises.check_kl_price(kl_price, brier_gain, winner, base=BASE))
