"""Measure the shipped base models of the tiny world: direct vs after reasoning.

    .venv/bin/python benchmarks/base_models.py [--checkpoints assets/checkpoints] [--items 400]

For each task (verify, facts, aleatoric) the base checkpoint answers the test split once
directly (bare marker) and once after one sampled rationale (single query). Temperature is
fitted on the dev split (200 items) in the same mode. Prints one table; the issue's
targets for ``verify``: accuracy after reasoning >= direct + 15 points, and an
overconfident readout (fitted T >= 2 or ECE >= 0.05).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rlcd_lab.evaluate import run_eval
from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.summary import summarize
from rlcd_lab.tasks.synthetic import get_task


def measure(path: Path, task: str, items: int) -> dict[str, dict]:
    model, tok, _ = load_checkpoint(path)
    t = get_task(task)
    out = {}
    for mode in ("direct", "reason"):
        dev = run_eval(model, tok, t.split("dev"), mode=mode, seed=1)
        test = run_eval(model, tok, t.split("test")[:items], mode=mode, seed=2)
        out[mode] = summarize(test, dev_rows=dev)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoints", type=Path, default=Path("assets/checkpoints"))
    ap.add_argument("--items", type=int, default=400)
    ap.add_argument("--tasks", nargs="+", default=["verify", "verify-mixed", "facts", "aleatoric"])
    args = ap.parse_args()
    cols = ["accuracy", "brier", "nll", "ece", "aurc", "T", "ts_ece", "mean_length"]
    print(f"{'model':<16} {'mode':<7} " + " ".join(f"{c:>11}" for c in cols))
    for task in args.tasks:
        t0 = time.perf_counter()
        res = measure(args.checkpoints / f"base-{task}", task, args.items)
        for mode, r in res.items():
            print(f"{'base-' + task:<16} {mode:<7} " + " ".join(f"{r[c]:>11.3f}" for c in cols))
        gap = res["reason"]["accuracy"] - res["direct"]["accuracy"]
        extra = (
            f" jsd direct {res['direct']['jsd']:.3f} reason {res['reason']['jsd']:.3f}"
            if "jsd" in res["direct"]
            else ""
        )
        print(f"  reason - direct accuracy: {gap:+.3f}{extra}   ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
