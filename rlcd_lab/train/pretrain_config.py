"""The settings of ``rlcd-lab pretrain`` (``PretrainConfig``) and the per-task defaults of
the shipped base models (``SHIPPED``, ``resolved``).

Standard library only, so ``rlcd-lab pretrain --help`` loads no torch; the loop
(:mod:`rlcd_lab.train.pretrain`) imports them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal


@dataclass(frozen=True)
class PretrainConfig:
    """Pretrain a tiny base reasoning model on a synthetic task (defaults: the shipped ones)."""

    task: Literal["verify", "verify-mixed", "verify-check", "facts", "aleatoric"] = "verify"
    """Which synthetic task's teacher to imitate."""
    out: Path | None = None
    """Checkpoint directory to write, atomically (default: runs/base-TASK); one that holds
    a checkpoint is replaced only with ``--overwrite``."""
    steps: int | None = None
    """Optimizer steps (default: the task's, ``SHIPPED``)."""
    batch_size: int | None = None
    """Demonstrations per step (default: the task's, ``SHIPPED``)."""
    lr: float = 3e-3
    """AdamW's peak learning rate (a cosine schedule after the warmup)."""
    warmup: int = 100
    """Steps of linear warmup to ``lr``."""
    hidden_size: int = 96
    """The tiny transformer's width (a multiple of ``heads``)."""
    layers: int = 4
    """Its transformer layers."""
    heads: int = 4
    """Its attention heads."""
    p_direct: float = 0.5
    """Fraction of demonstrations that answer directly after a bare marker."""
    p_empty: float | None = None
    """Fraction of the reasoning demonstrations whose rationale is empty (the marker right
    after the question): gives the System-One shortcut the small probability a real LM
    has, for RL to find (default: the task's, ``SHIPPED``)."""
    slip: float | None = None
    """The verify tasks only: the teacher's probability of dropping a carry at each
    addition that has one, which sets how often the base model reasons to a wrong answer
    (default: the task's, 0.25 for ``verify`` and ``verify-check``, 0.2 for ``verify-mixed``; the
    difficulty map uses 0.05 and 0.6)."""
    seed: int = 0
    """Seed of the initial weights, the demonstrations and the final measurement."""
    eval_items: int = 200
    """Dev items measured at the end (direct and after one rationale each)."""
    max_new_tokens: int = 48
    """Token budget of each rationale in that measurement."""
    overwrite: bool = False
    """Replace the checkpoint ``out`` holds (never another folder)."""


SHIPPED: dict[str, dict] = {
    "verify": dict(steps=4000, batch_size=32, p_empty=0.0),
    "verify-mixed": dict(steps=4000, batch_size=32, p_empty=0.0),
    "verify-check": dict(steps=4000, batch_size=32, p_empty=0.0),
    "facts": dict(steps=3000, batch_size=64, p_empty=0.02),
    "aleatoric": dict(steps=3000, batch_size=64, p_empty=0.1),
}
"""Per-task defaults: the settings of the shipped ``assets/checkpoints/base-<task>``."""


def resolved(cfg: PretrainConfig) -> PretrainConfig:
    """``cfg`` with every ``None`` setting replaced by the task's default (``SHIPPED``)."""
    return replace(cfg, **{k: v for k, v in SHIPPED[cfg.task].items() if getattr(cfg, k) is None})
