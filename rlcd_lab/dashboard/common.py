"""Helpers shared by the dashboard's tabs: finding runs and checkpoints, naming them."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import gradio as gr

from ..assets import ASSETS, shipped_checkpoints, shipped_runs
from ..pretrained import SMOLLM2_DEFAULT_DIR

CHECKPOINT_ENV = "RLCD_CHECKPOINT"
"""Environment variable naming the checkpoint directory the Ask tab opens with (instead of
``rlcd_lab.assets.default_checkpoint``)."""

RUN_KINDS = ("reinforce", "grpo", "rft", "sft")
"""The default comparison, in this order: two-stage RLCD against its baselines."""


def run_choices(root: str | Path = ASSETS) -> list[str]:
    """Names of the shipped runs under ``root`` (see :func:`rlcd_lab.assets.shipped_runs`)."""
    return list(shipped_runs(root))


def checkpoint_choices(root: str | Path = ASSETS) -> list[str]:
    """Names of the shipped checkpoints under ``root``."""
    return list(shipped_checkpoints(root))


def env_checkpoint() -> str | None:
    """The checkpoint named by ``$RLCD_CHECKPOINT`` (stripped; None when unset or empty)."""
    return os.environ.get(CHECKPOINT_ENV, "").strip() or None


def local_checkpoints(smollm2_dir: str | Path = SMOLLM2_DEFAULT_DIR) -> list[str]:
    """Checkpoints offered besides the shipped ones: ``$RLCD_CHECKPOINT`` when set (listed
    even when it is not there, so the Ask tab says why it cannot be used), then the SmolLM2
    checkpoint when it has been converted (``rlcd-lab smollm2``) at ``smollm2_dir``. Nothing
    is downloaded or converted here."""
    out = []
    env = env_checkpoint()
    if env:
        out.append(env)
    smollm2 = Path(smollm2_dir)
    full = smollm2.expanduser()
    if (full / "config.json").is_file() and (full / "rlcd.json").is_file():
        same = env is not None and Path(env).expanduser().resolve() == full.resolve()
        if not same:
            out.append(str(smollm2))
    return out


def _kind(leaf: str) -> int | None:
    """Position of a run's leaf name in :data:`RUN_KINDS` (``rft*`` counts as rft)."""
    for i, kind in enumerate(RUN_KINDS):
        if leaf.startswith(kind) if kind == "rft" else leaf.endswith(kind):
            return i
    return None


def default_runs(names: Sequence[str]) -> list[str]:
    """The default comparison: the runs named ``*reinforce``, ``*grpo``, ``rft*`` and
    ``*sft`` that share a parent directory (one task and seed) with a ``*reinforce`` run,
    the first such parent in sorted order (``verify`` first), RLCD first; else the first four."""
    groups: dict[str, list[str]] = {}
    for name in names:
        parent, _, leaf = name.rpartition("/")
        groups.setdefault(parent, []).append(leaf)
    for parent in sorted(groups, key=lambda p: ("verify" not in p, p)):  # verify first
        leaves = [leaf for leaf in groups[parent] if _kind(leaf) is not None]
        if any(_kind(leaf) == 0 for leaf in leaves):
            leaves.sort(key=lambda leaf: (_kind(leaf), leaf))
            return [f"{parent}/{leaf}" if parent else leaf for leaf in leaves]
    return list(names[:4])


def short_labels(names: Sequence[str]) -> dict[str, str]:
    """Legend names: the last two path components (``verify-s0/reinforce``), or the full
    name where two runs would share a label."""
    short = {n: "/".join(Path(n).parts[-2:]) for n in names}
    counts = {s: list(short.values()).count(s) for s in short.values()}
    return {n: (s if counts[s] == 1 else n) for n, s in short.items()}


def resolve_dir(name: str, root: str | Path, required: str, what: str) -> Path:
    """The directory a dashboard name refers to: ``root/name`` (a shipped artefact) or the
    path ``name`` itself; it must hold ``required``. Raises ``gr.Error`` naming both."""
    name = (name or "").strip()
    if not name:
        raise gr.Error(f"choose a {what}")
    candidates = [Path(root) / name, Path(name).expanduser()]
    for path in candidates:
        if (path / required).exists():
            return path
    raise gr.Error(
        f"{what} {name!r} not found: no {required} in {candidates[0]} nor in {candidates[1]}"
    )
