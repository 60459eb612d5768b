"""How many test items and training seeds a comparison needs: ``rlcd-lab power``.

From a pilot, two methods' runs (one per seed, the same test items; or a summary's paired
entry, :mod:`rlcd_lab.reports.results`), and a stated difference ``delta`` in a metric
(AURC, Brier, Cov@eps, accuracy, NLL), :func:`plan` gives the pilot's paired test and the
test items and training seeds needed to detect ``delta``; :func:`plan_from_runs` and
:func:`plan_from_summary` read the pilot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from rlcd_lab.math import stats
from rlcd_lab.metrics import DEFAULT_EPS
from rlcd_lab.reports.results import N_BOOT, PER_ITEM, RunResult, load_run, paired_metric

POWER_METRICS = (*PER_ITEM, "aurc", "cov_at_eps")
"""The metrics a plan can be made for."""


def plan_from_entry(entry: Mapping, items: int, delta: float, metric: str) -> dict:
    """The plan (:func:`plan`) from a paired entry holding ``se`` and ``seeds``
    (:func:`rlcd_lab.reports.results.paired_metric`) measured on ``items`` test items."""
    if "se" not in entry or "seeds" not in entry:
        raise ValueError(f"{metric}: the paired entry has no standard error (an old summary)")
    diffs = np.asarray(entry["seeds"]["diffs"], dtype=np.float64)
    sd = float(diffs.std(ddof=1)) if diffs.size > 1 else None
    return {
        "metric": metric,
        "delta": delta,
        "pilot": {
            "items": items,
            "seeds": int(diffs.size),
            "diff": entry["diff"],
            "ci": [entry["ci_low"], entry["ci_high"]],
            "se": entry["se"],
            "mde": stats.mde(entry["se"]),
            "seed_diffs": diffs.tolist(),
            "seed_sd": sd,
            "p_t": entry["seeds"]["p_t"],
        },
        "power": stats.POWER,
        "items_needed": stats.items_needed(entry["se"], items, delta),
        "seeds_needed": None if sd is None else stats.seeds_needed(sd, delta),
    }


def plan(
    a: Sequence[RunResult],
    b: Sequence[RunResult],
    metric: str,
    delta: float,
    eps: float = DEFAULT_EPS,
    n: int = N_BOOT,
) -> dict:
    """How many test items and seeds detect a difference ``delta`` (A - B, the metric's
    units) in ``metric`` with 80% power, from pilot runs ``a`` and ``b`` (one
    :class:`~rlcd_lab.reports.results.RunResult` per seed each, aligned): ``{"metric",
    "delta", "pilot": {"items", "seeds", "diff", "ci", "se", "mde", "seed_diffs",
    "seed_sd", "p_t"}, "power", "items_needed", "seeds_needed"}`` (``seeds_needed`` None
    for a one-seed pilot or beyond 1000 seeds).

    * the pilot's paired test (difference, bootstrap standard error, minimal detectable effect
      at 80% power: :func:`rlcd_lab.math.stats.mde`);
    * the test items for the item-level test to detect ``delta`` at the pilot's seeds, the
      standard error scaled as ``1 / sqrt(items)`` (:func:`rlcd_lab.math.stats.items_needed`);
    * the training seeds for the test across seeds (a paired t test of per-seed differences
      with the pilot's s.d.) to detect it (:func:`rlcd_lab.math.stats.seeds_needed`).

    Both are the usual normal / t approximations at a two-sided 5% level and 80% power
    (Cohen 1988, "Statistical power analysis for the behavioral sciences", ch. 2); a pilot of
    few seeds estimates the s.d. across seeds loosely, so the seeds are a first guess.
    """
    if metric not in POWER_METRICS:
        raise ValueError(f"--metric must be one of {', '.join(POWER_METRICS)}, got {metric!r}")
    if not delta:
        raise ValueError("--delta must be a non-zero difference")
    entry = paired_metric(a, b, metric, eps, n)
    return plan_from_entry(entry, len(a[0].labels), delta, metric)


def plan_from_runs(
    a: Sequence[str | Path], b: Sequence[str | Path], metric: str, delta: float, eps: float
) -> dict:
    """:func:`plan` of the runs in folders ``a`` and ``b`` (one per seed, in seed order)."""
    if not a or len(a) != len(b):
        raise ValueError(
            f"--a and --b need one run folder per seed each, got {len(a)} and {len(b)}"
        )
    return plan([load_run(p, eps) for p in a], [load_run(p, eps) for p in b], metric, delta, eps)


def plan_from_summary(summary: Mapping, pair: str, metric: str, delta: float) -> dict:
    """:func:`plan` read from a summary's ``paired[pair][metric]`` entry."""
    if metric not in POWER_METRICS:
        raise ValueError(f"--metric must be one of {', '.join(POWER_METRICS)}, got {metric!r}")
    if not delta:
        raise ValueError("--delta must be a non-zero difference")
    if pair not in summary.get("paired", {}):
        known = ", ".join(sorted(summary.get("paired", {}))) or "none"
        raise ValueError(f"--pair {pair!r} is not in the summary (its pairs: {known})")
    a = pair.split(" - ")[0]
    return plan_from_entry(
        summary["paired"][pair][metric], summary["runs"][a]["items"], delta, metric
    )
