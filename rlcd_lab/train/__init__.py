"""Training loops: one readable loop per method (``rlcd.py`` for the RLCD family,
``sft.py``, ``rft.py``, ``grpo.py``, ``rlcr.py`` for the baselines, ``teach.py`` to give a
pretrained model its task's skill first) on shared helpers (``common.py``); their
settings and rows in ``rlcd_lab.methods``.

Importing this package (``train``, ``launch_command``) loads no torch: a loop module is
imported when its method runs, so ``rlcd-lab train ... --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from rlcd_lab.methods import method_of
from rlcd_lab.methods.configs import TrainConfig


def train(cfg: TrainConfig) -> Path:
    """Run the training loop of ``cfg.method`` (its row of ``rlcd_lab.methods``); returns
    the run directory."""
    return method_of(cfg).run(cfg)


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
