"""Do several rationales per test item narrow the rung's confidence intervals? The bootstrap
standard error and 95% interval of AURC and Brier score (after temperature scaling) of one
run read with its first rationale per item against the mixture of its ``M``, alone and
paired with another run's single readout.

    .venv/bin/python benchmarks/rationales_ci.py [RUN] [--against RUN] [--n 2000] [--json]

``RUN`` (default: the shipped seed-17 two-stage RLCD run of the rung) holds its test and
dev dumps and a ``test-m<M>`` dump of the same test items read with ``M`` rationales each,
the first drawn as the single readout's (``rlcd-lab eval --m M --seed <the run's seed>
--max-new-tokens <its budget>`` on its ``final/``; the shipped one: ``M`` = 8). The
readings are the lab's (:meth:`rlcd_lab.reports.results.RunResult.view`): the single query
``softmax(z / T)`` and the mixture ``mean_i softmax(log u_i / T)``, ``T`` fitted on dev
single queries. Per reading: AURC's bootstrap over test items
(:func:`rlcd_lab.math.stats.paired_bootstrap_curve` against a reader right on every item,
whose AURC is 0 in every replicate, so the replicates are the reading's own AURC) and
Brier's (:func:`rlcd_lab.math.stats.paired_bootstrap` against zeros); with ``--against``
(default: the same seed's GRPO-matched run, whose single readout is all that ships of it)
the paired difference RLCD - against, as the report's claims test it
(:func:`rlcd_lab.reports.results.paired_metric`'s bootstraps, one seed). ``N_BOOT``
replicates, bootstrap seed 0, as the summaries use.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from rlcd_lab.files.assets import ASSETS
from rlcd_lab.math import stats
from rlcd_lab.reports.results import N_BOOT, RunView, load_run

RUNG = ASSETS / "results" / "basic-skills-arithmetic-verify-pairs" / "seed-17"
"""The rung's seed 17: its two-stage RLCD run ships the adapter and the ``test-m8`` dump."""


def interval(view: RunView, other: RunView | None = None, n: int = N_BOOT) -> dict:
    """``{"aurc": {...}, "brier": {...}}`` of one reading (``other`` None: the reading's own
    value, 95% CI and bootstrap s.e.) or of the paired difference ``view - other`` on the
    same items, each ``{"value", "ci_low", "ci_high", "se"}``; bootstrap seed 0."""
    if other is None:
        right = np.ones_like(view.confidence)
        curve = stats.paired_bootstrap_curve(
            view.confidence, view.correct, view.confidence, right, n=n, seed=0
        )
        items = stats.paired_bootstrap(view.brier, np.zeros_like(view.brier), n=n, seed=0)
    else:
        if not np.array_equal(view.labels, other.labels):
            raise ValueError("the two readings are not of the same test items in one order")
        curve = stats.paired_bootstrap_curve(
            view.confidence, view.correct, other.confidence, other.correct, n=n, seed=0
        )
        items = stats.paired_bootstrap(view.brier, other.brier, n=n, seed=0)
    keep = ("ci_low", "ci_high", "se")
    return {
        "aurc": {"value": curve["diff"], **{k: curve[k] for k in keep}},
        "brier": {"value": items["diff"], **{k: items[k] for k in keep}},
    }


def measure(run: Path, against: Path | None, n: int = N_BOOT) -> dict:
    """:func:`interval` of ``run``'s single readout and of its mixture of ``M`` rationales,
    alone and, with ``against``, paired with its single readout, beside the correlation of
    the per-item Brier scores of the two paired readings (what pairing removes): ``{"m": M,
    "single": {"own", "paired", "corr"}, "mixture": {...}}`` (``"paired"`` and ``"corr"``
    None without ``against``)."""
    result = load_run(run)
    single, mixture = result.view(True, "single"), result.view(True, "mixture")
    if mixture.m == 1:
        raise ValueError(f"{run}: no eval/test-m<M>.jsonl dump with M > 1 rationales per item")
    other = None if against is None else load_run(against).view(True, "single")
    out: dict = {"m": mixture.m}
    for name, view in (("single", single), ("mixture", mixture)):
        out[name] = {
            "own": interval(view, n=n),
            "paired": None if other is None else interval(view, other, n=n),
            "corr": None if other is None else float(np.corrcoef(view.brier, other.brier)[0, 1]),
        }
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", type=Path, default=RUNG / "reinforce")
    ap.add_argument("--against", type=Path, default=RUNG / "grpo-matched")
    ap.add_argument("--n", type=int, default=N_BOOT, help="bootstrap replicates")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = ap.parse_args(argv)
    out = measure(args.run, args.against, args.n)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{args.run}: 1 rationale vs {out['m']} per item; paired with {args.against}")
    print("| reading | metric | value [95% CI] | s.e. | paired diff [95% CI] | s.e. |")
    print("|---|---|---|---|---|---|")
    for name in ("single", "mixture"):
        for metric in ("aurc", "brier"):
            o, p = out[name]["own"][metric], out[name]["paired"][metric]
            print(f"| {name} | {metric} | {o['value']:.3f} [{o['ci_low']:.3f}, "
                  f"{o['ci_high']:.3f}] | {o['se']:.4f} | {p['value']:+.3f} "
                  f"[{p['ci_low']:+.3f}, {p['ci_high']:+.3f}] | {p['se']:.4f} |")  # fmt: skip
    for name in ("single", "mixture"):
        print(f"per-item Brier's correlation with the other run, {name}: {out[name]['corr']:.2f}")


if __name__ == "__main__":
    main()
