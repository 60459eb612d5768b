"""Shipped artefacts: the checkpoints and run directories under the repository's ``assets/``.

The dashboard, the server and the notebooks find their defaults here instead of
hard-coding paths, so a rebuilt or newly shipped result shows up without code changes.
Names are paths relative to ``assets/`` (e.g. ``checkpoints/base-verify``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rlcd_lab.files.rundir import evaluated_runs

ASSETS = Path(__file__).resolve().parents[2] / "assets"


def shipped_checkpoints(root: str | Path = ASSETS) -> dict[str, Path]:
    """Every checkpoint dir under ``root`` (a dir holding ``rlcd.json``), sorted by name."""
    root = Path(root)
    found = (p.parent for p in root.rglob("rlcd.json"))
    return {p.relative_to(root).as_posix(): p for p in sorted(found)}


def tiny_verify_first(name: str) -> tuple[bool, bool]:
    """Sort key that puts names under a ``verify`` folder (the tiny ``verify`` task) first,
    then other names holding ``verify`` (e.g. the real rung's), then the rest; stable."""
    return "verify" not in name.split("/"), "verify" not in name


def default_checkpoint(names: Sequence[str]) -> str | None:
    """The checkpoint a face opens with, among ``names``: a stage-2 RLCD model (name holding
    ``reinforce``; those of the tiny ``verify`` task first (a ``verify`` folder), before
    e.g. the SmolLM2 adapters, which need their base), else a stage-1 one (``calibrate``),
    else a base model of the ``verify`` task, else the first; None for no names."""
    ordered = sorted(names, key=tiny_verify_first)
    for key in ("reinforce", "calibrate", "base-verify"):
        for name in ordered:
            if key in name:
                return name
    return names[0] if names else None


STUDIES = ("results/difficulty/", "results/rung-lr/")
"""Folders under ``assets`` that hold a study of their own (the difficulty map's level
reproductions, read by ``rlcd_lab.reports.difficulty``; the real rung at another learning rate):
not listed by :func:`shipped_runs`, whose readers (tutorials, dashboard) expect one run
per method, seed and task."""


def shipped_runs(root: str | Path = ASSETS) -> dict[str, Path]:
    """Every run dir under ``root`` with a test eval dump (``eval/test.jsonl``, shipped
    packed as ``eval/test.jsonl.xz``), by name, outside :data:`STUDIES`."""
    root = Path(root)
    names = {p.relative_to(root).as_posix(): p for p in sorted(evaluated_runs(root))}
    return {n: p for n, p in names.items() if not n.startswith(STUDIES)}


def bench_reports(root: str | Path = ASSETS) -> dict[str, dict]:
    """The shipped bench reports (``rlcd-lab bench typed|attack``), each one's
    ``summary.json`` by ``<checkpoint>/<bench>`` (``verify-reinforce/attack``), sorted."""
    from rlcd_lab.files.io import loads_json

    found = sorted((Path(root) / "results" / "bench").glob("*/*/summary.json"))
    return {f"{p.parent.parent.name}/{p.parent.name}": loads_json(p.read_bytes()) for p in found}
