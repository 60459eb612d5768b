"""Would the KL anchor's pass in bfloat16 change what training sees? Its error on the
per-sequence KL and on the reward, against their noise, on the rung.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/anchor_precision.py [--steps 3] [--fraction 0.1]

The policy is the shipped rung adapter (seed 17's two-stage RLCD, SmolLM2-135M + LoRA r = 8,
float32); the anchor is ``assets/checkpoints/smollm2-arith-verify`` (the model both stages
started from: the real anchor, the stage-1 adapter, does not ship its weights, so the KL
here spans two stages, not one). ``--steps`` batches of the rung's shape (8 training
questions of ``basic-skills-arithmetic-verify-pairs`` x 4 rationales, 40 new tokens, the
questions of step ``t`` those of positions ``8t .. 8t + 7``) are drawn from the policy as
training draws them; each rationale's ``log pi(r)`` is scored by the policy (float32) and
by the anchor twice: in float32 and as a bfloat16 copy (``decoding.plain_copy``). Per
sequence, ``KL_i = log pi(r_i) - log pi_ref(r_i)`` (the loop's ``log_ratio``) and the
anchor's part of the reward ``-beta KL_i`` (beta = 0.04, the rung's; the readout's score,
the rest of the reward, does not involve the anchor).

Noise, measured beside the error: the spread of the per-sequence KL over a step's 32
rationales (their standard deviation, averaged over steps) and the step-to-step standard
deviation of the logged batch KL and reward in the shipped run's ``log.jsonl.xz`` (100
steps). Verdict: bfloat16 passes only if the per-sequence KL's error (its RMS) is below
``--fraction`` of the KL's spread over rationales and the batch KL's and the reward's
errors are below ``--fraction`` of their step-to-step noise. CPU seconds of the two
anchor passes (process time, one thread) are printed beside.
"""

from __future__ import annotations

import argparse
import json
import lzma
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlcd_lab.bench.common import machine  # noqa: E402
from rlcd_lab.lm.loading import load_checkpoint  # noqa: E402
from rlcd_lab.reader.decoding import merged_sampler, plain_copy  # noqa: E402
from rlcd_lab.reader.rationales import mix_seed, sample_questions  # noqa: E402
from rlcd_lab.reader.reading import score_rationales  # noqa: E402
from rlcd_lab.tasks import load_task_items  # noqa: E402

RUN = REPO / "assets/results/basic-skills-arithmetic-verify-pairs/seed-17/reinforce"
ANCHOR = REPO / "assets/checkpoints/smollm2-arith-verify"
TASK = Path.home() / ".cache/rlcd_lab/data/basic-skills-arithmetic-verify-pairs.jsonl"
BETA = 0.04


def logged_noise() -> tuple[float, float]:
    """Step-to-step standard deviations of the shipped run's logged ``kl`` and ``reward``."""
    with lzma.open(RUN / "log.jsonl.xz", "rt") as f:
        rows = [json.loads(line) for line in f]
    return (
        statistics.stdev(r["kl"] for r in rows if r.get("kl") is not None),
        statistics.stdev(r["reward"] for r in rows),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--fraction", type=float, default=0.1)
    args = ap.parse_args()
    torch.set_num_threads(1)
    policy, tok, meta = load_checkpoint(RUN / "final", "cpu")
    anchor = load_checkpoint(ANCHOR, "cpu")[0]
    anchor16 = plain_copy(anchor, torch.bfloat16)
    items = list(load_task_items(str(TASK), "train"))
    errs, spreads, kl_errs, t32, t16 = [], [], [], [], []
    for step in range(args.steps):
        batch = items[8 * step : 8 * step + 8]
        rats, opts = sample_questions(
            policy, tok, [it.prompt for it in batch], [it.options for it in batch], 4, 40,
            marker=meta["marker"], sep=meta["sep"], sampler=merged_sampler(policy),
            seed=[mix_seed(step, j) for j in range(len(batch))],
        )  # fmt: skip
        with torch.no_grad():
            logp = score_rationales(policy, rats, opts)[2].double()
            t0 = time.process_time()
            ref32 = score_rationales(anchor, rats, opts)[2].double()
            t1 = time.process_time()
            ref16 = score_rationales(anchor16, rats, opts)[2].double()
            t2 = time.process_time()
        kl32, kl16 = logp - ref32, logp - ref16
        errs.append(kl16 - kl32)
        spreads.append(float(kl32.std()))
        kl_errs.append(float((kl16 - kl32).mean()))
        t32.append(t1 - t0)
        t16.append(t2 - t1)
    err = torch.cat(errs)
    rms, spread = float(err.pow(2).mean().sqrt()), statistics.mean(spreads)
    kl_noise, reward_noise = logged_noise()
    batch_err = max(abs(e) for e in kl_errs)
    reward_err = BETA * batch_err
    print(f"CPU: {machine()}; one torch thread; {args.steps} steps of 8 x 4, 40 tokens")
    print("| quantity | bfloat16 anchor's error | its noise | error / noise |")
    print("|---|---|---|---|")
    rows = [
        ("per-sequence KL (RMS; max)", rms, spread, f"{rms:.3g}; {float(err.abs().max()):.3g}"),
        ("batch KL (largest of the steps)", batch_err, kl_noise, f"{batch_err:.3g}"),
        ("batch reward, -beta KL part", reward_err, reward_noise, f"{reward_err:.3g}"),
    ]
    verdict = True
    for name, e, noise, shown in rows:
        verdict &= e < args.fraction * noise
        print(f"| {name} | {shown} | {noise:.3g} | {e / noise:.3f} |")
    print(
        f"anchor pass CPU s per step: float32 {statistics.median(t32):.2f}, "
        f"bfloat16 {statistics.median(t16):.2f}"
    )
    word = "passes" if verdict else "fails"
    print(f"verdict: bfloat16 {word} (every error below {args.fraction} of its noise)")


if __name__ == "__main__":
    main()
