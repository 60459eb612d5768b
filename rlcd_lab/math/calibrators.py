"""Post-hoc calibrators: the probability that a model's answer is right, fitted on held-out
(dev) items from what the model and the question show, numpy only.

Isotonic regression (:func:`fit_isotonic`, :func:`predict_isotonic`), logistic regression
(:func:`fit_logistic`, :func:`predict_logistic`) and one temperature per group of
questions (:func:`fit_group_temperature`); each function gives its method and references.
Every fit reads only the items it is given; the reports fit on dev and apply to test
(:mod:`rlcd_lab.reports.posthoc`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from rlcd_lab.metrics import ArrayLike, fit_temperature, to_numpy

RIDGE = 1e-4
"""L2 penalty (per item) on the logistic calibrator's weights, the intercept excepted."""
MIN_GROUP = 10
"""Dev items a group needs for a temperature of its own."""


def fit_isotonic(score: ArrayLike, correct: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """The non-decreasing step function of ``score (N,)`` closest in squared error to
    ``correct (N,)`` (0/1): ``(x, v)``, the distinct scores ascending and the fitted value
    at each (items of equal score pooled first, weighted by their count). Pool adjacent
    violators: scan left to right, merging a block with its left neighbour while the
    neighbour's mean is larger (Barlow et al. 1972; O(N) after sorting).

    Zadrozny & Elkan 2002, "Transforming classifier scores into accurate multiclass
    probability estimates".
    """
    s = to_numpy(score, np.float64).reshape(-1)
    y = to_numpy(correct, np.float64).reshape(-1)
    if s.size == 0 or s.shape != y.shape:
        raise ValueError(f"need paired non-empty score and correct, got {s.shape}, {y.shape}")
    x, inverse = np.unique(s, return_inverse=True)
    weight = np.bincount(inverse).astype(np.float64)
    total = np.bincount(inverse, weights=y)
    means, weights, sizes = [], [], []
    for w, t in zip(weight, total, strict=True):
        m, n = t / w, 1
        while means and means[-1] > m:
            pw, pm, pn = weights.pop(), means.pop(), sizes.pop()
            m, w, n = (pm * pw + m * w) / (pw + w), pw + w, pn + n
        means.append(m)
        weights.append(w)
        sizes.append(n)
    return x, np.repeat(means, sizes)


def predict_isotonic(fit: tuple[np.ndarray, np.ndarray], score: ArrayLike) -> np.ndarray:
    """The fitted step function at ``score``: the value of the largest fitted score at or
    below it (the first value below the smallest)."""
    x, v = fit
    s = to_numpy(score, np.float64).reshape(-1)
    return v[np.clip(np.searchsorted(x, s, side="right") - 1, 0, len(x) - 1)]


def _design(features: ArrayLike) -> np.ndarray:
    f = to_numpy(features, np.float64)
    f = f.reshape(-1, 1) if f.ndim == 1 else f
    return np.concatenate([np.ones((f.shape[0], 1)), f], axis=1)


def fit_logistic(
    features: ArrayLike, correct: ArrayLike, ridge: float = RIDGE, iters: int = 100
) -> np.ndarray:
    """Weights ``w (F + 1,)`` (intercept first) maximising ``sum_i log sigma(+-x_i . w) -
    ridge N ||w_{1:}||^2 / 2`` for ``features (N, F)`` and ``correct (N,)``: Newton steps
    ``w -= H^{-1} g`` until the step is below 1e-12 (the objective is strictly concave, so
    the maximiser is unique). Features are used as given (standardize them first when
    their scales differ widely).

    Fitted by Newton's method (iteratively reweighted least squares) with a small ridge
    penalty so separable data still has a finite fit (Platt 1999 on one feature, the margin;
    Kull et al. 2017 on more).
    """
    x = _design(features)
    y = to_numpy(correct, np.float64).reshape(-1)
    if x.shape[0] != y.size or y.size == 0:
        raise ValueError(f"need one correct per row of features, got {x.shape[0]} and {y.size}")
    penalty = np.full(x.shape[1], ridge * y.size)
    penalty[0] = 0.0
    w = np.zeros(x.shape[1])
    for _ in range(iters):
        p = 1 / (1 + np.exp(-(x @ w)))
        grad = x.T @ (p - y) + penalty * w
        hess = (x * (p * (1 - p))[:, None]).T @ x + np.diag(penalty) + 1e-12 * np.eye(x.shape[1])
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-12:
            break
    return w


def predict_logistic(w: np.ndarray, features: ArrayLike) -> np.ndarray:
    """``sigma(w_0 + features . w_{1:})`` for ``features (N, F)`` -> ``(N,)``."""
    return 1 / (1 + np.exp(-(_design(features) @ w)))


def fit_group_temperature(
    logits: ArrayLike, labels: ArrayLike, groups: Sequence[Hashable], min_group: int = MIN_GROUP
) -> tuple[dict, float]:
    """``({group: T}, T_all)``: a temperature fitted on each group's items of ``logits (N,
    K)`` / ``labels (N,)`` that has at least ``min_group`` of them, and the one fitted on
    all items (:func:`rlcd_lab.metrics.fit_temperature`), for the other groups.

    Guo et al. 2017, sec. 4.2 (temperature scaling).
    """
    z = to_numpy(logits, np.float64)
    y = np.asarray(labels)
    groups = list(groups)
    by_group = {}
    for key in dict.fromkeys(groups):
        mask = np.array([g == key for g in groups])
        if mask.sum() >= min_group:
            by_group[key] = fit_temperature(z[mask], y[mask])
    return by_group, fit_temperature(z, y)
