"""lm-evaluation-harness tasks and model for rlcd_lab checkpoints.

This folder is an lm-eval ``--include_path``: the task YAMLs ``rlcd_verify``,
``rlcd_facts`` and ``rlcd_aleatoric`` (tag ``rlcd``) read the synthetic tasks' test items
offline (:mod:`.tasks`) and report the numbers ``rlcd-lab eval`` prints; the ``rlcd``
model (:mod:`.model`) answers each option with ``log u`` from one reading of a checkpoint.
Run it as ``python -m rlcd_lab.lm_eval_tasks`` or call :func:`register` first. Needs
``lm-eval`` (not a dependency of rlcd_lab).
"""

from __future__ import annotations

from pathlib import Path

TASK_DIR = Path(__file__).resolve().parent
"""The folder to pass as lm-eval's ``--include_path`` (the task YAMLs live here)."""

MODEL_NAME = "rlcd"
"""The name of :class:`rlcd_lab.lm_eval_tasks.model.RLCDLM` in lm-eval's model registry."""


def register() -> None:
    """Register the ``rlcd`` model with lm-eval (lazily: ``torch`` and the checkpoint load
    only when the harness builds the model). The harness's own models are registered
    first, as lm-eval only does that itself while its registry is empty. Idempotent.

    lm-eval has no plug-in discovery for models, so run it
    through this package, which registers ``rlcd`` and adds ``--include_path`` (this
    folder) when it is not given::

        python -m rlcd_lab.lm_eval_tasks --model rlcd \\
            --model_args checkpoint=assets/checkpoints/base-verify,mode=direct --tasks rlcd_verify

    or, in Python, call :func:`register` before ``lm_eval.simple_evaluate`` and pass
    ``TaskManager(include_path=TASK_DIR)``. Needs ``lm-eval`` (not a dependency of rlcd_lab).
    """
    import lm_eval.models  # noqa: F401
    from lm_eval.api.registry import model_registry

    if MODEL_NAME not in model_registry:
        model_registry.register(MODEL_NAME, target="rlcd_lab.lm_eval_tasks.model:RLCDLM")


__all__ = [
    "MODEL_NAME",
    "TASK_DIR",
    "register",
]
