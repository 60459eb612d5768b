"""Table 1 analogue from finished training runs: single-query test metrics after
temperature scaling fitted on dev (read from each run's ``final/rlcd.json``).

    .venv/bin/python benchmarks/compare_runs.py runs/verify-s0/*/

Columns: accuracy, Brier, NLL, ECE, AURC and Cov@5% after temperature scaling (``ts_``),
the fitted T, the raw ECE, and the mean rationale length on test (sampled tokens).
"""

from __future__ import annotations

import sys
from pathlib import Path

from rlcd_lab.models import read_meta

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


def main(runs: list[str]) -> None:
    print(f"{'run':<28}" + "".join(f"{name:>9}" for _, name in COLS))
    for run in runs:
        final = Path(run) / "final"
        if not (final / "rlcd.json").exists():
            print(f"{Path(run).name:<28} (not finished)")
            continue
        test = read_meta(final)["metrics"]["test"]
        print(f"{Path(run).name:<28}" + "".join(f"{test[key]:>9.3f}" for key, _ in COLS))


if __name__ == "__main__":
    main(sys.argv[1:])
