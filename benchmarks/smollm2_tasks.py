"""Where does reasoning help SmolLM2-135M-Instruct? Direct vs reasoning accuracy per task.

For each candidate task (items from local task files, nothing downloaded here), reads
``--n`` test items with the shipped reader (``rlcd_lab.reader.read``): the direct readout,
and ``--m`` sampled rationales (temperature 1, the training setting, ``--max-new-tokens``)
with the first rationale's readout (single query) and the mixture. Prints one table row
per task: accuracy of each, the gain of reasoning with a paired bootstrap 95% CI, the
forced-marker rate (the model did not write ``Answer:`` itself) and the wall time.

    .venv/bin/rlcd-lab data fetch mmlu
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/smollm2_tasks.py \\
        --tasks mmlu:elementary_mathematics mmlu:high_school_geography --n 60
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.lm.pretrained import convert_gguf
from rlcd_lab.math.stats import paired_bootstrap
from rlcd_lab.reader.reading import read
from rlcd_lab.tasks import load_task_items
from rlcd_lab.tasks.items import TaskItem

DATA = Path("~/.cache/rlcd_lab/data").expanduser()


def candidate(name: str, n: int, seed: int) -> list[TaskItem]:
    """``mmlu:<subject>`` (from the fetched MMLU file) or a task name / task file."""
    if name.startswith("mmlu:"):
        subject = name.split(":", 1)[1].replace("_", " ")
        rows = [json.loads(line) for line in open(DATA / "mmlu.jsonl", encoding="utf-8")]
        items = [
            TaskItem.from_json(r)
            for r in rows
            if r["prompt"].startswith(
                f"The following is a multiple choice question about {subject}."
            )
        ]
    else:
        items = load_task_items(name, "test")
    rng = np.random.default_rng(seed)
    return [items[i] for i in rng.permutation(len(items))[:n]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", nargs="+", required=True)
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--m", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    model, tok, _ = load_checkpoint(convert_gguf("smollm2"))
    print(
        "| task | n | direct acc | reason acc (1 rationale) | mixture acc "
        f"(M={args.m}) | reason - direct [95% CI] | forced-marker rate | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in args.tasks:
        items = candidate(name, args.n, args.seed)
        y = np.array([it.label for it in items])
        qs, opts = [it.prompt for it in items], [it.options for it in items]
        t0 = time.perf_counter()
        with torch.no_grad():
            direct = read(model, tok, qs, opts, mode="direct", batch_size=16)
            reason = read(
                model, tok, qs, opts, m=args.m, max_new_tokens=args.max_new_tokens,
                seed=args.seed, batch_size=16,
            )  # fmt: skip
        wall = time.perf_counter() - t0
        acc_d = np.array([int(r.u[0].argmax()) for r in direct]) == y
        acc_r = np.array([int(r.u[0].argmax()) for r in reason]) == y
        acc_m = np.array([int(r.mixture.argmax()) for r in reason]) == y
        diff = paired_bootstrap(acc_r.astype(float), acc_d.astype(float), seed=args.seed)
        forced = np.mean([f for r in reason for f in r.forced])
        ci = f"{diff['diff']:+.3f} [{diff['ci_low']:+.3f}, {diff['ci_high']:+.3f}]"
        print(
            f"| {name} | {len(items)} | {acc_d.mean():.3f} | {acc_r.mean():.3f} | "
            f"{acc_m.mean():.3f} | {ci} | {forced:.2f} | {wall:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
