"""Strictly proper scoring rules for a categorical forecast.

Shapes: ``u`` is a float tensor ``(..., K)`` of probability vectors (rows on the simplex),
``y`` an integer label (Python int or a tensor broadcastable to ``u.shape[:-1]``), ``q`` a
``(..., K)`` outcome distribution. Every score is *higher is better* and returns one value
per row, shape ``u.shape[:-1]``.

A rule ``J`` is strictly proper when ``E_{Y~q} J(u, Y)`` is uniquely maximised at
``u = q`` (Gneiting & Raftery 2007, "Strictly proper scoring rules, prediction, and
estimation", JASA 102(477)). Brier (quadratic), log and spherical are the classic three.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from rlcd_lab.math.rule_names import Rule


def _pick(u: Tensor, y: int | Tensor) -> Tensor:
    """``u[..., y]`` with ``y`` an int or an integer tensor broadcast over the rows."""
    y = torch.as_tensor(y, device=u.device, dtype=torch.long)
    y = y.expand(u.shape[:-1])
    return u.gather(-1, y.unsqueeze(-1)).squeeze(-1)


def brier_score(u: Tensor, y: int | Tensor) -> Tensor:
    """Shifted, negated Brier score ``J(u, y) = 2 u_y - ||u||^2 = 1 - ||u - e_y||^2``.

    Shapes: ``u (..., K)``, ``y`` int or ``(...)`` -> ``(...)``. Higher is better; range
    ``[-1, 1]`` on the simplex (1 for a confident correct answer, -1 for a confident
    wrong one). Brier (1950), "Verification of forecasts expressed in terms of
    probability"; the shifted form is the RLCD reward (OpenJev-RLCD, sec. 3).
    """
    return 2.0 * _pick(u, y) - (u * u).sum(-1)


def log_score(u: Tensor, y: int | Tensor, eps: float = 0.0) -> Tensor:
    """Log score ``J(u, y) = log u_y`` (minus the NLL).

    Shapes: ``u (..., K)``, ``y`` int or ``(...)`` -> ``(...)``. Higher is better; range
    ``(-inf, 0]``. ``eps`` > 0 clamps ``u_y`` from below to keep the value finite.
    Good (1952), "Rational decisions".
    """
    p = _pick(u, y)
    return torch.log(p.clamp_min(eps) if eps > 0 else p)


def spherical_score(u: Tensor, y: int | Tensor) -> Tensor:
    """Spherical score ``J(u, y) = u_y / ||u||_2``.

    Shapes: ``u (..., K)``, ``y`` int or ``(...)`` -> ``(...)``. Higher is better; range
    ``[0, 1]``. Strictly proper (Gneiting & Raftery 2007, sec. 3.1; Roby 1965).
    """
    return _pick(u, y) / u.norm(dim=-1)


def _expected_brier(u: Tensor, q: Tensor) -> Tensor:
    return 2.0 * (u * q).sum(-1) - (u * u).sum(-1)


def _expected_log(u: Tensor, q: Tensor) -> Tensor:
    return torch.where(q > 0, q * torch.log(u), torch.zeros_like(u)).sum(-1)


def _expected_spherical(u: Tensor, q: Tensor) -> Tensor:
    return (u * q).sum(-1) / u.norm(dim=-1)


@dataclass(frozen=True)
class ScoringRule:
    """One strictly proper rule: ``score(u, y)`` of an outcome and ``expected(u, q)``, its
    closed-form expectation under an outcome distribution."""

    score: Callable[[Tensor, int | Tensor], Tensor]
    expected: Callable[[Tensor, Tensor], Tensor]


RULES: dict[Rule, ScoringRule] = {
    "brier": ScoringRule(brier_score, _expected_brier),
    "log": ScoringRule(log_score, _expected_log),
    "spherical": ScoringRule(spherical_score, _expected_spherical),
}
"""Every scoring rule, once: name (one of :data:`rlcd_lab.math.rule_names.Rule`, the
settings' choices; ``tests/test_scoring.py`` checks they are the same) -> its score and
expected score."""


def _rule(rule: str) -> ScoringRule:
    try:
        return RULES[rule]
    except KeyError:
        raise ValueError(f"unknown scoring rule {rule!r}; choose one of {tuple(RULES)}") from None


def score(u: Tensor, y: int | Tensor, rule: Rule = "brier") -> Tensor:
    """Dispatch ``J(u, y)`` by rule name (a key of :data:`RULES`)."""
    return _rule(rule).score(u, y)


def expected_score(u: Tensor, q: Tensor, rule: Rule = "brier") -> Tensor:
    """Expected score under the outcome distribution: ``J(u, q) = E_{Y~q} J(u, Y)``.

    Shapes: ``u (..., K)``, ``q (..., K)`` (broadcastable) -> ``(...)``. Higher is better;
    for a strictly proper rule uniquely maximised over the simplex at ``u = q``.
    Closed forms: Brier ``2 u.q - ||u||^2``; log ``sum_k q_k log u_k`` (terms with
    ``q_k = 0`` contribute 0); spherical ``u.q / ||u||``.
    """
    return _rule(rule).expected(u, q)
