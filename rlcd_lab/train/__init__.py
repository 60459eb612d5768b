"""Training loops: one readable loop per method (``rlcd.py`` for the RLCD family,
``sft.py``, ``rft.py``, ``grpo.py``, ``rlcr.py`` for the baselines, ``teach.py`` to give a
pretrained model its task's skill first) on shared helpers (``common.py``);
their settings in ``configs.py``.

Importing this package (:data:`METHOD_TABLE`, ``train``) loads no torch: a loop module is
imported when its method runs, so ``rlcd-lab train ... --help`` stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class Method:
    """One training method, everything the lab needs to know of it in one row: the command
    line (``rlcd-lab train <name>``), the reproduction, the reports and the dashboard read
    :data:`METHOD_TABLE`, so a new method is one row here, its config in ``configs.py`` and
    its loop in ``<loop>.py``."""

    config: TrainConfig
    """Its default settings (``rlcd-lab train <name>`` starts from them)."""
    loop: str
    """The module of ``rlcd_lab.train`` whose ``train(cfg)`` runs it."""
    label: str
    """Its name in tables and figures (``+TS``: read after temperature scaling)."""
    role: Literal["rlcd", "baseline", "setup"]
    """``rlcd``: the paper's two stages; ``baseline``: compared with them (a matched-budget
    copy in the reproduction); ``setup``: prepares a base model."""
    description: str
    """One line for ``--help``."""
    command: bool = True
    """Offered as ``rlcd-lab train <name>`` (a variant of another method's config is not)."""
    compare: int | None = None
    """Its place in the dashboard's default comparison (None: not in it)."""

    def run(self, cfg: TrainConfig) -> Path:
        """Run ``rlcd_lab.train.<loop>.train(cfg)`` (imported now); returns the run directory."""
        return import_module(f"{__name__}.{self.loop}").train(cfg)


_BASELINE = "baseline"
METHOD_TABLE: dict[str, Method] = {
    "calibrate": Method(
        METHODS["calibrate"], "rlcd", "RLCD stage 1", "rlcd", DESCRIPTIONS["calibrate"],
    ),
    "reinforce": Method(
        METHODS["reinforce"], "rlcd", "RLCD (two-stage)", "rlcd", DESCRIPTIONS["reinforce"],
        compare=0,
    ),
    "endtoend": Method(
        METHODS["endtoend"], "rlcd", "per-rationale (end to end, KL)", _BASELINE,
        DESCRIPTIONS["endtoend"],
    ),
    "mixture": Method(
        METHODS["mixture"], "rlcd", "mixture (lam = 1)", _BASELINE, DESCRIPTIONS["mixture"],
    ),
    "sft": Method(
        SFTConfig(), "sft", "SFT+TS", _BASELINE,
        "Baseline: direct answers, cross-entropy on the label token.", compare=3,
    ),
    "rft": Method(
        RFTConfig(), "rft", "RFT+TS", _BASELINE,
        "Baseline: RFT/STaR, clone trajectories whose sampled answer is right.", compare=2,
    ),
    "rft-kl": Method(
        RFTConfig(beta=0.04), "rft", "RFT+KL+TS", _BASELINE,
        "Baseline: RFT/STaR anchored by KL to its start (beta 0.04).", command=False,
    ),
    "rlcr": Method(
        RLCRConfig(), "rlcr", "RLCR+TS (readout)", _BASELINE,
        "Baseline: RLCR, correctness + Brier of a stated confidence, KL anchor.",
    ),
    "teach": Method(
        TeachConfig(), "teach", "teach", "setup",
        "Give a pretrained model its task's skill: SFT on worked rationales (by rule).",
    ),
    "grpo": Method(
        GRPOConfig(), "grpo", "GRPO+TS", _BASELINE,
        "Baseline: GRPO, correctness reward of a sampled answer, KL anchor.", compare=1,
    ),
    "drgrpo": Method(
        GRPOConfig(advantage="group-mean"), "grpo", "Dr.GRPO+TS", _BASELINE,
        "Baseline: GRPO without the division by the group's reward s.d. (Dr. GRPO).",
        command=False,
    ),
}  # fmt: skip
"""Every training method by run name (the command line's order)."""


def train(cfg: TrainConfig) -> Path:
    """Run the training loop of ``cfg.method``; returns the run directory."""
    commands = {n: m for n, m in METHOD_TABLE.items() if m.command}
    if cfg.method not in commands:
        raise ValueError(f"unknown method {cfg.method!r}; choose one of {sorted(commands)}")
    return commands[cfg.method].run(cfg)


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
