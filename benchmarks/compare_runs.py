"""Table 1 analogue from finished training runs: single-query test metrics after
temperature scaling fitted on dev (read from each run's eval dumps through
``rlcd_lab.reports.results.load_run``), mean +- s.d. over the runs that share a name (one per
seed), plus paired tests.

    .venv/bin/python benchmarks/compare_runs.py runs/verify-s*/*/ [--paired reinforce grpo]

Columns: accuracy, Brier, NLL, ECE, AURC and Cov@5% after temperature scaling, the fitted
T, the raw ECE, and the mean rationale length on test (sampled tokens). ``--paired A B``
compares A and B on the same test items and seeds (runs in the same parent directory are
one seed) with ``rlcd_lab.reports.results.paired``, as the paper does: accuracy, Brier and NLL
per item averaged over seeds; AURC and Cov@5% per seed and averaged, test items
resampled jointly across seeds; 95% bootstrap CI of A - B and a sign-flip p-value.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from rlcd_lab.files.io import jsonl_path
from rlcd_lab.math.verdicts import fmt_diff
from rlcd_lab.reports import results
from rlcd_lab.reports.report import fmt_cell

EPS = 0.05
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


def load(runs: list[Path]) -> dict[Path, results.RunResult]:
    """Every run in ``runs`` that has a test dump, read once."""
    found = [r for r in runs if jsonl_path(r / "eval" / "test.jsonl").exists()]  # or .xz
    return {r: results.load_run(r, eps=EPS) for r in found}


def cell(rows: list[dict], key: str) -> str:
    """``mean ± s.d.`` of ``key`` over the rows; "not fitted" when a run has no dev dump
    (no T, no ``ts_*`` metrics)."""
    if not all(key in r for r in rows):
        return "not fitted"
    return fmt_cell(results.mean_sd([r[key] for r in rows]))


def table(loaded: dict[Path, results.RunResult]) -> None:
    groups: dict[str, list[dict]] = defaultdict(list)
    for run, res in loaded.items():
        groups[run.name].append(res.row)
    n = max(len(g) for g in groups.values())
    print(f"{'run':<16}{'seeds':>6}" + "".join(f"{name:>18}" for _, name in COLS))
    for name, rows in sorted(groups.items()):
        cells = [cell(rows, key) for key, _ in COLS]
        print(f"{name:<16}{len(rows):>6}" + "".join(f"{c:>18}" for c in cells))
    if any(len(g) != n for g in groups.values()):
        print("(runs differ in their number of seeds)")


def paired(loaded: dict[Path, results.RunResult], a: str, b: str) -> None:
    by_seed: dict[Path, dict[str, results.RunResult]] = defaultdict(dict)
    for run, res in loaded.items():
        by_seed[run.parent][run.name] = res
    pairs = [(d[a], d[b]) for _, d in sorted(by_seed.items()) if a in d and b in d]
    if not pairs:
        print(f"{a} - {b}: no seed holds both runs")
        return
    res = results.paired([x for x, _ in pairs], [y for _, y in pairs], eps=EPS)
    print(f"{a} - {b}  [{len(pairs)} seeds x {len(pairs[0][0].labels)} items]")
    for metric, d in res.items():
        print(f"  {metric:<12} {fmt_diff(d)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--paired", nargs=2, action="append", default=[], metavar=("A", "B"))
    args = ap.parse_args()
    loaded = load([r.resolve() for r in args.runs])
    table(loaded)
    for a, b in args.paired:
        paired(loaded, a, b)


if __name__ == "__main__":
    main()
