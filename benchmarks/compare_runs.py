"""Table 1 analogue from finished training runs: single-query test metrics after
temperature scaling fitted on dev (read from each run's ``final/rlcd.json``), mean +- s.d.
over the runs that share a name (one per seed), plus paired AURC tests.

    .venv/bin/python benchmarks/compare_runs.py runs/verify-s*/*/ [--paired reinforce grpo]

Columns: accuracy, Brier, NLL, ECE, AURC and Cov@5% after temperature scaling, the fitted
T, the raw ECE, and the mean rationale length on test (sampled tokens). ``--paired A B``
compares the AURC of A and B on the same test items and seeds (pooled), from the eval
dumps: paired bootstrap 95% CI of AURC(A) - AURC(B) and a sign-flip p-value.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from rlcd_lab.models import read_meta
from rlcd_lab.stats import paired_bootstrap_aurc, sign_flip_test_aurc

COLS = [
    ("ts_accuracy", "acc"),
    ("ts_brier", "brier"),
    ("ts_nll", "nll"),
    ("ts_ece", "ece"),
    ("ts_aurc", "aurc"),
    ("ts_cov_at_eps", "cov@5%"),
    ("T", "T"),
    ("ece", "raw ece"),
    ("mean_length", "length"),
]


def table(runs: list[Path]) -> None:
    groups: dict[str, list[dict]] = defaultdict(list)
    for run in runs:
        if (run / "final" / "rlcd.json").exists():
            groups[run.name].append(read_meta(run / "final")["metrics"]["test"])
    n = max(len(g) for g in groups.values())
    print(f"{'run':<16}{'seeds':>6}" + "".join(f"{name:>16}" for _, name in COLS))
    for name, rows in sorted(groups.items()):
        cells = []
        for key, _ in COLS:
            v = np.array([r[key] for r in rows])
            cells.append(f"{v.mean():.3f}" + (f" +-{v.std(ddof=1):.3f}" if len(v) > 1 else " " * 7))
        print(f"{name:<16}{len(rows):>6}" + "".join(f"{c:>16}" for c in cells))
    if any(len(g) != n for g in groups.values()):
        print("(runs differ in their number of seeds)")


def dump(run: Path) -> tuple[np.ndarray, np.ndarray]:
    rows = [json.loads(line) for line in (run / "eval" / "test.jsonl").read_text().splitlines()]
    probs = np.array([r["probs"] for r in rows])
    correct = probs.argmax(1) == np.array([r["label"] for r in rows])
    return probs.max(1), correct  # temperature scaling does not change this ranking (K = 2)


def paired(runs: list[Path], a: str, b: str) -> None:
    by_seed = defaultdict(dict)
    for run in runs:
        if (run / "eval" / "test.jsonl").exists():
            by_seed[run.parent][run.name] = run
    pairs = [(d[a], d[b]) for d in by_seed.values() if a in d and b in d]
    ca, ra, cb, rb = (
        np.concatenate(x) for x in zip(*[(*dump(x), *dump(y)) for x, y in pairs], strict=True)
    )
    ci = paired_bootstrap_aurc(ca, ra, cb, rb, n=2000, seed=0)
    p = sign_flip_test_aurc(ca, ra, cb, rb, n=2000, seed=0)
    print(
        f"AURC {a} - {b}: {ci['diff']:+.4f} (95% CI {ci['ci_low']:+.4f} .. {ci['ci_high']:+.4f}), "
        f"sign-flip p = {p:.4f}  [{len(pairs)} seeds x {len(ca) // len(pairs)} items, pooled]"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--paired", nargs=2, action="append", default=[], metavar=("A", "B"))
    args = ap.parse_args()
    runs = [r.resolve() for r in args.runs]
    table(runs)
    for a, b in args.paired:
        paired(runs, a, b)


if __name__ == "__main__":
    main()
