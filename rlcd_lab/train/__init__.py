"""Training loops: one readable loop per method (``rlcd.py`` for the RLCD family,
``sft.py``, ``rft.py``, ``grpo.py``, ``rlcr.py`` for the baselines, ``teach.py`` to give a
pretrained model its task's skill first) on shared helpers (``common.py``);
their settings in ``configs.py``.

Importing this package (``TRAINERS``, ``train``) loads no torch: a loop module is imported
when its method runs, so ``rlcd-lab train ... --help`` stays fast.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import Literal

from rlcd_lab.train.configs import (
    DESCRIPTIONS,
    METHODS,
    GRPOConfig,
    RFTConfig,
    RLCRConfig,
    SFTConfig,
    TeachConfig,
    TrainConfig,
)


def _loop(module: str) -> Callable[[TrainConfig], Path]:
    """The ``train`` function of ``rlcd_lab.train.<module>``, imported on the first call."""

    def run(cfg: TrainConfig) -> Path:
        return import_module(f"{__name__}.{module}").train(cfg)

    run.__qualname__ = run.__name__ = f"{module}.train"
    run.__doc__ = f"Run ``rlcd_lab.train.{module}.train(cfg)``; returns the run directory."
    return run


TRAINERS: dict[str, tuple[TrainConfig, Callable[[TrainConfig], Path], str]] = {
    **{name: (cfg, _loop("rlcd"), DESCRIPTIONS[name]) for name, cfg in METHODS.items()},
    "sft": (
        SFTConfig(),
        _loop("sft"),
        "Baseline: direct answers, cross-entropy on the label token.",
    ),
    "rft": (
        RFTConfig(),
        _loop("rft"),
        "Baseline: RFT/STaR, clone trajectories whose sampled answer is right.",
    ),
    "rlcr": (
        RLCRConfig(),
        _loop("rlcr"),
        "Baseline: RLCR, correctness + Brier of a stated confidence, KL anchor.",
    ),
    "teach": (
        TeachConfig(),
        _loop("teach"),
        "Give a pretrained model its task's skill: SFT on worked rationales (by rule).",
    ),
    "grpo": (
        GRPOConfig(),
        _loop("grpo"),
        "Baseline: GRPO, correctness reward of a sampled answer, KL anchor.",
    ),
}
"""Each method: its default config, its training loop and a one-line description."""


def train(cfg: TrainConfig) -> Path:
    """Run the training loop of ``cfg.method``; returns the run directory."""
    if cfg.method not in TRAINERS:
        raise ValueError(f"unknown method {cfg.method!r}; choose one of {sorted(TRAINERS)}")
    return TRAINERS[cfg.method][1](cfg)


def launch_command(args: str, processes: int, on: Literal["gpu", "cpu"] = "gpu") -> str:
    """The shell command that runs ``rlcd-lab ARGS`` (e.g. ``"train calibrate --init
    DIR"``) data-parallel on ``processes`` processes: ``accelerate launch`` on GPUs (one
    process per GPU), ``torchrun`` with gloo on CPU processes (adds ``--device cpu``).
    Use ``--num-rationales`` rather than ``--m`` in ``args``: both launchers take ``--m``
    for a flag of their own."""
    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    if on == "cpu":
        return f"torchrun --nproc-per-node {processes} -m rlcd_lab.cli {args} --device cpu"
    multi = "--multi_gpu " if processes > 1 else ""
    return f"accelerate launch {multi}--num_processes {processes} -m rlcd_lab.cli {args}"
