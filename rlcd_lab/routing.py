"""From calibrated probabilities to automated decisions: thresholds, costs, cascades.

A calibrated decision model is useful because software can act on its confidence:
decide automatically when the model is sure, escalate (to a human, or to a more
expensive model) when it is not. This module holds the small pure functions for that,
on numpy arrays (torch tensors and lists are accepted too):

* selective prediction at an error budget: pick a confidence threshold on dev, apply it
  on test (:func:`threshold_for_risk`, :func:`selective_risk`);
* Bayes decisions under an asymmetric cost matrix, with an optional "escalate" action
  (:func:`expected_costs`, :func:`bayes_actions`, :func:`realized_costs`);
* an AutoThink-style cascade: answer directly when the direct readout is confident,
  reason only when it is not (:func:`cascade`, :func:`cascade_curve`).

Shapes: ``probs (N, K)`` rows on the simplex, ``labels (N,)`` ints, ``confidence (N,)``
(usually ``max_k p_k``), ``correct (N,)`` booleans, ``cost (A, K)`` with ``cost[a, y]``
the cost of action ``a`` when the outcome is ``y`` (lower is better). Ranking follows
:mod:`rlcd_lab.metrics` (confidence descending, stable on ties).
References: Chow (1970), "On optimum recognition error and reject tradeoff"; Geifman &
El-Yaniv (2017), "Selective classification for deep neural networks"; OpenJev-RLCD
sec. 5 (Cov@eps); StartLux AutoThink (answer directly when confident).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .metrics import ArrayLike, confidence_order, to_numpy


def _conf_correct(confidence: ArrayLike, correct: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    c = to_numpy(confidence, np.float64).reshape(-1)
    r = to_numpy(correct).astype(bool).reshape(-1)
    if c.shape != r.shape or c.size == 0:
        raise ValueError(f"need equal, non-empty confidence {c.shape} and correct {r.shape}")
    return c, r


# ------------------------------------------------------------------ selective prediction
def threshold_for_risk(
    confidence: ArrayLike,
    correct: ArrayLike | None = None,
    eps: float = 0.05,
    tol: float = 1e-12,
) -> float:
    """The lowest confidence threshold whose decided set has error ``<= eps``.

    Items are ranked by confidence (descending, stable on ties); the prefix is the
    largest ``k`` whose error rate is ``<= eps`` (observed error when ``correct`` is
    given, as :func:`rlcd_lab.metrics.coverage_at_risk`; else the label-free *predicted*
    error ``mean(1 - confidence)``, as :func:`metrics.predicted_coverage_at_risk`).
    Returns the confidence of the ``k``-th item, so that "decide when ``confidence >=
    threshold``" reproduces the prefix (up to ties at the threshold, which are then all
    decided); ``inf`` when no prefix qualifies (decide nothing). Fit it on dev, apply it
    on test with :func:`selective_risk`.
    """
    c = to_numpy(confidence, np.float64).reshape(-1)
    if c.size == 0:
        raise ValueError("need at least one item")
    order = confidence_order(c)
    if correct is None:
        err = 1.0 - c[order]
    else:
        _, r = _conf_correct(c, correct)
        err = (~r[order]).astype(np.float64)
    risks = np.cumsum(err) / np.arange(1, c.size + 1)
    ok = np.flatnonzero(risks <= eps + tol)
    return float(c[order][ok[-1]]) if ok.size else float("inf")


def selective_risk(confidence: ArrayLike, correct: ArrayLike, threshold: float) -> dict[str, float]:
    """Decide the items with ``confidence >= threshold``, escalate the rest.

    Returns ``coverage`` (fraction decided, higher is better), ``risk`` (error rate among
    the decided, lower is better; 0 when none is decided), ``decided`` and ``errors``
    (counts). Geifman & El-Yaniv (2017).
    """
    c, r = _conf_correct(confidence, correct)
    decided = c >= threshold
    n = int(decided.sum())
    errors = int((decided & ~r).sum())
    return {
        "coverage": n / c.size,
        "risk": errors / n if n else 0.0,
        "decided": float(n),
        "errors": float(errors),
    }


# ---------------------------------------------------------------------- cost matrices
def expected_costs(probs: ArrayLike, cost: ArrayLike) -> np.ndarray:
    """Expected cost of every action for every item, ``(N, K), (A, K) -> (N, A)``:
    ``E_{Y~p_i} cost[a, Y] = sum_y p_iy cost[a, y]``. Lower is better."""
    p = to_numpy(probs, np.float64)
    c = to_numpy(cost, np.float64)
    if p.ndim != 2 or c.ndim != 2 or p.shape[1] != c.shape[1]:
        raise ValueError(f"probs {p.shape} and cost {c.shape} must be (N, K) and (A, K)")
    return p @ c.T


def bayes_actions(probs: ArrayLike, cost: ArrayLike) -> np.ndarray:
    """The action minimising the expected cost under ``probs`` for each item, ``(N,)``
    ints (lowest index on ties). With calibrated ``probs`` this minimises the expected
    realised cost (Bayes decision rule; Chow 1970 for the reject option)."""
    return np.argmin(expected_costs(probs, cost), axis=1)


def realized_costs(actions: ArrayLike, labels: ArrayLike, cost: ArrayLike) -> np.ndarray:
    """The cost each item actually incurs, ``cost[a_i, y_i]``, shape ``(N,)`` (lower is
    better; average it for the realised cost per decision)."""
    a = to_numpy(actions).astype(np.int64).reshape(-1)
    y = to_numpy(labels).astype(np.int64).reshape(-1)
    c = to_numpy(cost, np.float64)
    if a.shape != y.shape:
        raise ValueError(f"{a.size} actions for {y.size} labels")
    return c[a, y]


def decision_cost_matrix(
    k: int,
    error_costs: ArrayLike | None = None,
    escalate: float | None = None,
) -> np.ndarray:
    """A cost matrix for "answer option a" actions (rows ``0..K-1``) plus, when
    ``escalate`` is given, one "escalate" action (row K) with that cost whatever the
    outcome. ``error_costs (K, K)`` gives ``cost[a, y]`` of answering ``a`` when the truth
    is ``y`` (default: 0-1 loss); its diagonal should be 0. Returns ``(K (+1), K)``."""
    base = 1.0 - np.eye(k) if error_costs is None else to_numpy(error_costs, np.float64).copy()
    if base.shape != (k, k):
        raise ValueError(f"error_costs must be ({k}, {k}), got {base.shape}")
    if escalate is None:
        return base
    return np.vstack([base, np.full((1, k), float(escalate))])


# --------------------------------------------------------------------------- cascades
def cascade(
    direct_probs: ArrayLike, reason_probs: ArrayLike, threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """AutoThink-style cascade: keep the direct readout when its confidence ``max p`` is
    ``>= threshold``, otherwise use the readout after reasoning.

    Shapes: ``(N, K), (N, K)`` -> ``(probs (N, K), routed (N,) bool)`` where ``routed``
    marks the items sent to reasoning. ``threshold = 0`` never reasons, ``threshold >
    1`` always reasons.
    """
    d = to_numpy(direct_probs, np.float64)
    r = to_numpy(reason_probs, np.float64)
    if d.shape != r.shape or d.ndim != 2:
        raise ValueError(f"direct {d.shape} and reason {r.shape} probs must both be (N, K)")
    routed = d.max(1) < threshold
    return np.where(routed[:, None], r, d), routed


def cascade_curve(
    direct_probs: ArrayLike,
    reason_probs: ArrayLike,
    labels: ArrayLike,
    reason_tokens: ArrayLike,
    thresholds: Sequence[float] | np.ndarray,
    direct_tokens: ArrayLike | float = 0.0,
) -> dict[str, Any]:
    """The cascade of :func:`cascade` at every threshold: what it costs and what it gets.

    ``reason_tokens (N,)`` are the tokens generated when an item is reasoned about (the
    rationale length), ``direct_tokens`` those of a direct answer (scalar or ``(N,)``;
    0: the readout needs no sampled token). Returns arrays over thresholds:
    ``threshold``, ``reason_fraction`` (items routed to reasoning), ``accuracy`` (higher
    is better), ``brier`` (multi-class Brier, lower is better), ``mean_tokens``
    (generated tokens per item, lower is cheaper). The accuracy at each threshold is
    ``(1 - f) * acc_direct(kept) + f * acc_reason(routed)``, the mix of the two modes on
    the items each one answers.
    """
    d = to_numpy(direct_probs, np.float64)
    r = to_numpy(reason_probs, np.float64)
    y = to_numpy(labels).astype(np.int64).reshape(-1)
    tok_r = to_numpy(reason_tokens, np.float64).reshape(-1)
    tok_d = np.broadcast_to(to_numpy(direct_tokens, np.float64), tok_r.shape)
    onehot = np.zeros_like(d)
    onehot[np.arange(len(y)), y] = 1.0
    out: dict[str, list[float]] = {
        k: [] for k in ("threshold", "reason_fraction", "accuracy", "brier", "mean_tokens")
    }
    for t in thresholds:
        p, routed = cascade(d, r, float(t))
        out["threshold"].append(float(t))
        out["reason_fraction"].append(float(routed.mean()))
        out["accuracy"].append(float((p.argmax(1) == y).mean()))
        out["brier"].append(float(((p - onehot) ** 2).sum(1).mean()))
        out["mean_tokens"].append(float(np.where(routed, tok_r, tok_d).mean()))
    return {k: np.array(v) for k, v in out.items()}
