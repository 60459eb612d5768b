"""Shipped artefacts: the checkpoints and run directories under the repository's ``assets/``.

The dashboard, the server and the notebooks find their defaults here instead of
hard-coding paths, so a rebuilt or newly shipped result shows up without code changes.
Names are paths relative to ``assets/`` (e.g. ``checkpoints/base-verify``).
"""

from __future__ import annotations

from pathlib import Path

from .io import read_jsonl as read_jsonl  # re-exported: dumps and logs of shipped runs

ASSETS = Path(__file__).resolve().parent.parent / "assets"


def shipped_checkpoints(root: str | Path = ASSETS) -> dict[str, Path]:
    """Every checkpoint dir under ``root`` (a dir holding ``rlcd.json``), sorted by name."""
    root = Path(root)
    found = (p.parent for p in root.rglob("rlcd.json"))
    return {p.relative_to(root).as_posix(): p for p in sorted(found)}


def shipped_runs(root: str | Path = ASSETS) -> dict[str, Path]:
    """Every run dir under ``root`` with a test eval dump (``eval/test.jsonl``), by name."""
    root = Path(root)
    found = (p.parent.parent for p in root.rglob("eval/test.jsonl"))
    return {p.relative_to(root).as_posix(): p for p in sorted(found)}
