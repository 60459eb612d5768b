"""Which pretrained model can do which real task? The probe table that picks the rung.

For each model (a GGUF model shipped on the index, converted by ``rlcd-lab gguf``, or a
checkpoint directory) and each task (a fetched task name, ``rlcd-lab data fetch NAME``, or
a task file), reads ``--n`` test items (a seeded sample) with the shipped reader
(``rlcd_lab.reader.read``), directly and after one sampled rationale (temperature 1, the
training setting, ``--max-new-tokens``). One row per model, task and mode:

* accuracy with its 95% Wilson interval;
* chance: the accuracy of always giving the most frequent gold letter of these items;
* the margin over chance and whether the row meets the rung's bar (accuracy at least 15
  points above chance, the interval above chance, and, with reasoning, the marker written
  by the model itself in at least half the rationales);
* self-marker: the share of rationales that end with the model's own ``Answer:`` (the
  rest are cut at ``--max-new-tokens`` and given the marker);
* AUROC of the readout's top probability for telling right from wrong answers.

    .venv/bin/rlcd-lab data fetch basic-skills-arithmetic    # and the other tasks
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/probe.py --models smollm2 gemma3-270m \\
        --tasks basic-skills-arithmetic arc-easy --n 100
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from rlcd_lab.bench.common import machine
from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.lm.pretrained import MODELS, convert_gguf
from rlcd_lab.math.stats import wilson_interval
from rlcd_lab.metrics import auroc
from rlcd_lab.reader.reading import read
from rlcd_lab.tasks import load_task_items
from rlcd_lab.tasks.items import TaskItem

DATA = Path("~/.cache/rlcd_lab/data").expanduser()
MARGIN, SELF_MARKER = 0.15, 0.5
"""The rung's bar: accuracy at least MARGIN above chance (interval above chance) and,
with reasoning, at least SELF_MARKER of the rationales ending with the model's marker."""


def items_of(task: str, n: int, seed: int) -> list[TaskItem]:
    """``n`` seeded test items of a fetched task name or a task file."""
    path = DATA / f"{task}.jsonl"
    items = load_task_items(str(path) if path.exists() else task, "test")
    rng = np.random.default_rng(seed)
    return [items[i] for i in np.sort(rng.permutation(len(items))[:n])]


def model_dir(name: str) -> Path:
    """A GGUF model name (converted once) or a checkpoint directory."""
    return convert_gguf(name) if name in MODELS else Path(name)


def label(name: str) -> str:
    """A model's name in the table: a run's folder for its ``final`` checkpoint."""
    path = Path(name)
    return path.parent.name if path.name == "final" else path.name


def probe_row(readings, items: list[TaskItem], mode: str) -> dict:
    """The probe's numbers for one model, task and mode (see the module docstring)."""
    y = np.array([it.label for it in items])
    u = [r.u[0].numpy() for r in readings]
    correct = np.array([int(p.argmax()) == t for p, t in zip(u, y, strict=True)])
    conf = np.array([float(p.max()) for p in u])
    chance = np.bincount(y).max() / len(y)
    lo, hi = wilson_interval(int(correct.sum()), len(y))
    self_marker = None if mode == "direct" else 1 - np.mean([r.forced[0] for r in readings])
    meets = correct.mean() - chance >= MARGIN and lo > chance
    if self_marker is not None:
        meets = meets and self_marker >= SELF_MARKER
    return {
        "accuracy": correct.mean(),
        "ci": (lo, hi),
        "chance": chance,
        "self_marker": self_marker,
        "auroc": auroc(conf, correct) if 0 < correct.sum() < len(y) else float("nan"),
        "meets": meets,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["smollm2", "gemma3-270m"])
    ap.add_argument("--tasks", nargs="+", required=True)
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"CPU: {machine()}, torch threads {torch.get_num_threads()}")
    print(
        "| model | task | mode | n | accuracy [95% CI] | chance | margin | self-marker "
        "| AUROC | meets the bar | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models:
        model, tok, _ = load_checkpoint(model_dir(name))
        for task in args.tasks:
            items = items_of(task, args.n, args.seed)
            qs, opts = [it.prompt for it in items], [it.options for it in items]
            for mode in ("direct", "reason"):
                t0 = time.perf_counter()
                with torch.no_grad():
                    readings = read(
                        model, tok, qs, opts, mode=mode, max_new_tokens=args.max_new_tokens,
                        seed=args.seed, batch_size=args.batch_size,
                    )  # fmt: skip
                wall = time.perf_counter() - t0
                r = probe_row(readings, items, mode)
                marker = "-" if r["self_marker"] is None else f"{r['self_marker']:.2f}"
                print(
                    f"| {label(name)} | {task} | {mode} | {len(items)} | "
                    f"{r['accuracy']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] | "
                    f"{r['chance']:.3f} | {r['accuracy'] - r['chance']:+.3f} | {marker} | "
                    f"{r['auroc']:.2f} | {'yes' if r['meets'] else 'no'} | {wall:.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
