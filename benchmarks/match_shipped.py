"""Does a reproduction match the shipped one? Compares two ``summary.json`` of
``rlcd-lab reproduce`` run by run and seed by seed (the seeds both hold), metric by metric.

    .venv/bin/python benchmarks/match_shipped.py runs/reproduce/verify/summary.json \\
        [assets/results/verify/summary.json]

Prints, per run, the seeds compared, the number of per-seed numbers compared and the
largest absolute difference; exits with status 1 when any number differs by more than
``--atol`` (default 0: identical). Same seeds, one thread per run, the same torch and
transformers versions and the same CPU kernel (``ATEN_CPU_CAPABILITY``: the shipped runs
used AVX2 on an AMD EPYC) give identical numbers. Another kernel (AVX-512 on a newer
Intel Xeon, or ``default``) rounds some logits differently in the last bit; once that
changes a sampled token, the run follows another trajectory, as another seed would, so
compare at the spread between seeds (e.g. ``--atol 0.05``) or compare the verdicts. JSD
columns are left out when the two summaries hold them in different units (summaries
written by ``rlcd_lab.reports.results.summarize_runs`` say ``"units": {"jsd": "bits"}``; older
ones were in nats).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent.parent / "assets" / "results" / "verify" / "summary.json"


def per_seed(summary: dict) -> dict[tuple[str, int], dict[str, float]]:
    """``{(run, seed): {metric: value}}`` from a summary's ``runs`` section."""
    out = {}
    for run, entry in summary["runs"].items():
        for seed, row in zip(summary["seeds"], entry["per_seed"], strict=True):
            out[(run, seed)] = {k: v for k, v in row.items() if isinstance(v, int | float)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mine", type=Path)
    ap.add_argument("shipped", type=Path, nargs="?", default=DEFAULT)
    ap.add_argument(
        "--atol", type=float, default=0.0, help="largest |difference| that counts as a match"
    )
    args = ap.parse_args()
    mine, shipped = json.loads(args.mine.read_text()), json.loads(args.shipped.read_text())
    a, b = per_seed(mine), per_seed(shipped)
    units = [s.get("units", {}).get("jsd", "nats") for s in (mine, shipped)]  # older: nats
    if units[0] != units[1]:
        print(f"JSD in {units[0]} here, in {units[1]} in the shipped summary: not compared")
        for rows in (a, b):
            for row in rows.values():
                for k in [k for k in row if "jsd" in k]:
                    del row[k]
    shared = sorted(set(a) & set(b))
    if not shared:
        print("no (run, seed) in common")
        return 1
    worst_all = 0.0
    print(f"{'run':14s} {'seeds':>12s} {'numbers':>8s} {'max |diff|':>11s}")
    for run in sorted({r for r, _ in shared}):
        keys = [k for k in shared if k[0] == run]
        diffs = [abs(a[k][m] - b[k][m]) for k in keys for m in a[k].keys() & b[k].keys()]
        worst = max(diffs)
        worst_all = max(worst_all, worst)
        seeds = ",".join(str(s) for _, s in keys)
        print(f"{run:14s} {seeds:>12s} {len(diffs):8d} {worst:11.3g}")
    if worst_all == 0:
        print("identical")
    elif worst_all <= args.atol:
        print(f"within --atol {args.atol:g} (max |diff| {worst_all:.3g})")
    else:
        print(f"DIFFERENT (max |diff| {worst_all:.3g})")
    return 0 if worst_all <= args.atol else 1


if __name__ == "__main__":
    sys.exit(main())
