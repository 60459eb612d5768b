"""Report cards for a decision model: ``rlcd-lab bench typed`` (:mod:`.typed`,
TypedBench-style) and ``rlcd-lab bench attack`` (:mod:`.attack`, JevAdvBench-style);
:func:`run_bench` runs either.

Shared pieces: :mod:`.common` (the pure math, the variant rules, the report writer) and
:mod:`.backends` (a checkpoint in-process, or a running server over the Jev wire). The
config types live in :mod:`.configs`, which imports neither torch nor numpy (the command
line's ``--help`` stays fast); this package file imports nothing heavy either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def run_bench(cfg: Any, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the bench ``cfg`` names (a :class:`.configs.TypedBenchConfig` or
    :class:`.configs.AttackBenchConfig`); returns its headline numbers and the report
    paths (the full summary is in ``summary.json``)."""
    from rlcd_lab.bench.configs import AttackBenchConfig, TypedBenchConfig

    cfg.validate()
    if isinstance(cfg, TypedBenchConfig):
        from rlcd_lab.bench.typed import run_typed

        s = run_typed(cfg, progress=progress)
        c, a = s["calibration"], s["accuracy"]
        return {
            "paths": s["paths"],
            "accuracy_median": a["median"],
            "accuracy_range": [a["min"], a["max"]],
            "ece": c["ece"],
            "ece_floor_95": [c["floor_low"], c["floor_high"]],
            "ece_inside_floor": c["inside"],
            **{k: s["selective"][k] for k in ("aurc", "cov_at_eps")},
            "rps": s["ordinal"].get("rps", "not applicable"),
            "costs": {
                n: {"expected_cost": r["expected_cost"], "top_answer": r["top_answer"]}
                for n, r in s["costs"].items()
            },
            "wall_s": s["wall_s"],
        }
    if isinstance(cfg, AttackBenchConfig):
        from rlcd_lab.bench.attack import run_attack

        s = run_attack(cfg, progress=progress)
        attacks = {}
        for name, r in s["attacks"].items():
            if "flip" in r:
                f = r["flip"]
                attacks[name] = {
                    "excess_flip": [f["diff"], f["ci_low"], f["ci_high"]],
                    "pushed_below": r["pushed_below"]["share"],
                    **({"verdict": r["verdict"]} if "verdict" in r else {}),
                }
            else:
                attacks[name] = r.get("verdict") or r.get("note") or "refused"
        return {
            "paths": s["paths"],
            "floor_flip_rate": s["floor_flip_rate"],
            "attacks": attacks,
            "wall_s": s["wall_s"],
        }
    raise TypeError(f"not a bench config: {type(cfg).__name__}")
