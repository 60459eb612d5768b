"""Training loops: one readable loop per method (``rlcd.py`` for the RLCD family,
``sft.py``, ``rft.py``, ``grpo.py`` for the baselines) on shared helpers (``common.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from . import grpo, rft, rlcd, sft
from .common import TrainConfig

TRAINERS: dict[str, tuple[TrainConfig, Callable[[TrainConfig], Path], str]] = {
    **{name: (cfg, rlcd.train, rlcd.DESCRIPTIONS[name]) for name, cfg in rlcd.METHODS.items()},
    "sft": (
        sft.SFTConfig(),
        sft.train,
        "Baseline: direct answers, cross-entropy on the label token.",
    ),
    "rft": (
        rft.RFTConfig(),
        rft.train,
        "Baseline: RFT/STaR, clone trajectories whose sampled answer is right.",
    ),
    "grpo": (
        grpo.GRPOConfig(),
        grpo.train,
        "Baseline: GRPO, correctness reward of a sampled answer, KL anchor.",
    ),
}


def train(cfg: TrainConfig) -> Path:
    """Run the training loop of ``cfg.method``; returns the run directory."""
    if cfg.method not in TRAINERS:
        raise ValueError(f"unknown method {cfg.method!r}; choose one of {sorted(TRAINERS)}")
    return TRAINERS[cfg.method][1](cfg)
