"""Training's draw on the rung: the LoRA policy itself against a merged float32 copy made
inside the call (what ``--sampler hf`` now does once per step), side by side.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/train_sampler.py [--questions 8] [--reps 5]

The rung's batch: the first ``--questions`` training questions of
``basic-skills-arithmetic-verify-pairs`` (``rlcd-lab data fetch
basic-skills-arithmetic-verify-pairs``) x 4 rationales, 40 new tokens, drawn as
``train.common.sample_batch`` draws them (``reader.sample_questions``, seeds
``mix_seed(0, j)``), from the shipped rung adapter (seed 17's two-stage RLCD, SmolLM2-135M +
LoRA r = 8). Variants, each timed with the copy made inside the call:

* ``peft``: ``decoding.kv_sampler`` on the PeftModel, LoRA unmerged (the draw before);
* ``merged``: ``decoding.CopySampler(float32, pack=False)``: the adapter merged into a plain
  copy, the compact steps on ``F.linear``;
* ``packed``: ``decoding.merged_sampler``'s sampler: the merged copy, its matrices packed
  for oneDNN.

Every repetition runs every variant once, the order rotated by one each repetition, after
one warm-up repetition; times are process CPU seconds (one torch thread), medians, with the
range. Identical rationales are counted against ``peft``'s (texts and token ids).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlcd_lab.bench.common import machine  # noqa: E402
from rlcd_lab.lm.loading import load_checkpoint  # noqa: E402
from rlcd_lab.reader.decoding import CopySampler, kv_sampler, merged_sampler  # noqa: E402
from rlcd_lab.reader.rationales import mix_seed, sample_questions  # noqa: E402
from rlcd_lab.tasks import load_task_items  # noqa: E402

RUNG = REPO / "assets/results/basic-skills-arithmetic-verify-pairs/seed-17/reinforce/final"
TASK = Path.home() / ".cache/rlcd_lab/data/basic-skills-arithmetic-verify-pairs.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, tok, meta = load_checkpoint(RUNG, "cpu")
    model.eval()
    items = list(load_task_items(str(TASK), "train"))[: args.questions]
    variants = {
        "peft": lambda: kv_sampler,
        "merged": lambda: CopySampler(torch.float32, pack=False),
        "packed": lambda: merged_sampler(model),
    }

    def draw(make):
        return sample_questions(
            model, tok, [it.prompt for it in items], [it.options for it in items], 4, 40,
            marker=meta["marker"], sep=meta["sep"],
            seed=[mix_seed(0, j) for j in range(len(items))], sampler=make(),
        )[0]  # fmt: skip

    times: dict[str, list[float]] = {k: [] for k in variants}
    out = {}
    names = list(variants)
    for rep in range(args.reps + 1):
        for name in names[rep % 3 :] + names[: rep % 3]:
            t0 = time.process_time()
            out[name] = draw(variants[name])
            if rep:
                times[name].append(time.process_time() - t0)
    print(f"CPU: {machine()}; one torch thread; process CPU seconds per call, {args.reps} reps")
    print(f"batch: {len(items)} questions x 4 rationales, 40 new tokens, the rung adapter")
    print("| draw | CPU s (median [min, max]) | peft / this | identical rationales |")
    print("|---|---|---|---|")
    ref = out["peft"]
    for name in names:
        med = statistics.median(times[name])
        same = sum(
            a == b and torch.equal(x, y)
            for a, b, x, y in zip(
                ref.texts, out[name].texts, ref.input_ids, out[name].input_ids, strict=True
            )
        )
        print(
            f"| {name} | {med:.2f} [{min(times[name]):.2f}, {max(times[name]):.2f}] "
            f"| {statistics.median(times['peft']) / med:.2f}x | {same}/{len(ref.texts)} |"
        )


if __name__ == "__main__":
    main()
