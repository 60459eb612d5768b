"""The names of the proper scoring rules, torch-free: the keys of ``rlcd_lab.scoring.RULES``
(built over :data:`Rule`), and the type every setting that names a rule takes (the training
configs' ``--rule``, the TRL bridge's ``rule``)."""

from __future__ import annotations

from typing import Literal

Rule = Literal["brier", "log", "spherical"]
"""A rule's name: Brier ``2 u_Y - ||u||^2``, log ``log u_Y``, spherical ``u_Y / ||u||``."""
MIXTURE_RULES: tuple[Rule, ...] = ("brier",)
"""The rules the mixture objective (``lam > 0``) has an unbiased estimator for
(``rlcd_lab.estimators.lambda_surrogate``)."""
