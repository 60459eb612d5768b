"""Paired comparisons of two models on the same test items.

Inputs are per-item arrays ``a, b`` of shape ``(N,)`` aligned by item (e.g. per-item
Brier, NLL or correctness of model A and model B; average each item over seeds first, so
the unit of resampling is the test item). Differences are always ``a - b``; whether a
positive difference is good depends on the metric (for Brier, NLL and AURC, lower is
better, so a negative ``a - b`` favours A).

* :func:`paired_bootstrap`: percentile bootstrap CI of ``stat(a - b)`` resampling items
  with replacement (Efron & Tibshirani 1993, "An introduction to the bootstrap", ch. 13;
  Koehn 2004, "Statistical significance tests for machine translation evaluation").
* :func:`sign_flip_test`: two-sided paired permutation (sign-flip) test of the mean
  difference (Fisher 1935; Good 2005, "Permutation, parametric and bootstrap tests of
  hypotheses", sec. 3.2), exact for small N, Monte Carlo otherwise.
* :func:`paired_bootstrap_aurc` and :func:`sign_flip_test_aurc`: the same for a
  whole-curve statistic (AURC), which is not an average of per-item values: each
  replicate recomputes the AURC of both models on the resampled / swapped items.

All randomness comes from ``numpy.random.default_rng(seed)``; results are reproducible.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import product

import numpy as np

from .metrics import ArrayLike, to_numpy

EXACT_MAX = 16
"""Sign-flip tests enumerate all ``2^N`` flips when ``N <= EXACT_MAX`` (65 536 at most)."""

_CHUNK_ELEMS = 2_000_000  # resampled values held in memory at once


def _paired(a: ArrayLike, b: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    x = to_numpy(a, np.float64).reshape(-1)
    y = to_numpy(b, np.float64).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"paired arrays differ in length: {x.shape} vs {y.shape}")
    if x.size == 0:
        raise ValueError("need at least one item")
    return x, y


def _apply_rows(stat: Callable[..., ArrayLike], x: np.ndarray) -> np.ndarray:
    """``stat`` of every row of ``x (R, N)``; uses ``axis=1`` when ``stat`` supports it."""
    try:
        out = np.asarray(stat(x, axis=1), dtype=np.float64)
        if out.shape == (x.shape[0],):
            return out
    except TypeError:
        pass
    return np.array([float(stat(row)) for row in x])


def _percentile_ci(samples: np.ndarray, level: float) -> tuple[float, float]:
    alpha = (1.0 - level) / 2.0
    lo, hi = np.percentile(samples, [100.0 * alpha, 100.0 * (1.0 - alpha)])
    return float(lo), float(hi)


def paired_bootstrap(
    a: ArrayLike,
    b: ArrayLike,
    n: int = 10000,
    seed: int = 0,
    stat: Callable[..., ArrayLike] = np.mean,
    level: float = 0.95,
) -> dict[str, float]:
    """Paired percentile bootstrap of ``stat(a - b)`` over items.

    Shapes: ``a, b (N,)`` paired by item. Each of ``n`` replicates draws ``N`` item
    indices with replacement (``default_rng(seed).integers``) and evaluates ``stat`` on
    the resampled differences ``d = a - b``; the CI is the ``(1 - level)/2`` and
    ``(1 + level)/2`` percentiles of the replicates (numpy's linear interpolation).
    ``stat`` gets the ``(R, N)`` replicate matrix with ``axis=1`` if it accepts that
    keyword, one row at a time otherwise. Returns ``{"mean_diff": stat(a - b),
    "ci_low", "ci_high"}`` (``mean_diff`` is ``stat`` of the observed differences, the mean
    by default). Identical inputs give ``0`` and the CI ``[0, 0]``.
    Efron & Tibshirani (1993), "An introduction to the bootstrap", ch. 13 (percentile
    interval); Koehn (2004), paired bootstrap resampling.
    """
    x, y = _paired(a, b)
    d = x - y
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_ELEMS // d.size)
    reps = []
    for start in range(0, n, chunk):
        idx = rng.integers(0, d.size, size=(min(chunk, n - start), d.size))
        reps.append(_apply_rows(stat, d[idx]))
    lo, hi = _percentile_ci(np.concatenate(reps), level)
    return {"mean_diff": float(stat(d)), "ci_low": lo, "ci_high": hi}


def _all_signs(m: int) -> np.ndarray:
    """All ``2^m`` sign vectors, ``(2^m, m)``, the all-plus vector first."""
    return np.array(list(product((1.0, -1.0), repeat=m)))


def _p_value(t_obs: float, t_null: np.ndarray, exact: bool) -> float:
    """Two-sided p-value with a relative tolerance for float ties of ``|T*|`` and ``|T|``."""
    tol = 1e-12 * max(1.0, abs(t_obs))
    hits = int(np.sum(np.abs(t_null) >= abs(t_obs) - tol))
    if exact:
        return hits / t_null.size
    return (1 + hits) / (1 + t_null.size)


def sign_flip_test(
    a: ArrayLike, b: ArrayLike, n: int = 10000, seed: int = 0, exact_max: int = EXACT_MAX
) -> float:
    """Two-sided paired sign-flip (permutation) test of ``mean(a - b) = 0``.

    Shapes: ``a, b (N,)`` paired by item. Under H0 (A and B exchangeable on each item)
    every difference ``d_i = a_i - b_i`` is equally likely to have either sign. The
    statistic is ``T = mean(d)``; the p-value is

    * exact when ``N <= exact_max`` (16): ``#{s in {-1,1}^N : |mean(s d)| >= |T|} / 2^N``,
      enumerating every sign vector (the identity included, so ``p >= 2^-N``);
    * Monte Carlo otherwise: ``(1 + #{|T*_j| >= |T|}) / (1 + n)`` over ``n`` random sign
      vectors from ``default_rng(seed)`` (Phipson & Smyth 2010, "Permutation p-values
      should never be zero"), so ``p >= 1/(n+1)``.

    ``|T*| >= |T|`` is compared with a relative tolerance of 1e-12 so that float rounding
    does not break ties. Identical inputs give ``p = 1``. Smaller p is stronger evidence
    of a difference. Fisher (1935), "The design of experiments", sec. 21; Good (2005).
    """
    x, y = _paired(a, b)
    d = x - y
    t_obs = float(d.mean())
    if d.size <= exact_max:
        return _p_value(t_obs, _all_signs(d.size) @ d / d.size, exact=True)
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_ELEMS // d.size)
    t_null = []
    for start in range(0, n, chunk):
        signs = rng.choice(np.array([-1.0, 1.0]), size=(min(chunk, n - start), d.size))
        t_null.append(signs @ d / d.size)
    return _p_value(t_obs, np.concatenate(t_null), exact=False)


# ---------------------------------------------------------------------------------------
# AURC: a whole-curve statistic
# ---------------------------------------------------------------------------------------


def _aurc_rows(conf: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """AURC of every row of ``conf, correct (R, N)`` (same ranking rule as metrics.aurc)."""
    order = np.argsort(-conf, axis=1, kind="stable")
    errors = 1.0 - np.take_along_axis(correct, order, axis=1)
    k = np.arange(1, conf.shape[1] + 1)
    return (np.cumsum(errors, axis=1) / k).mean(axis=1)


def _paired_curves(
    conf_a: ArrayLike, correct_a: ArrayLike, conf_b: ArrayLike, correct_b: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    ca, cb = _paired(conf_a, conf_b)
    ra = to_numpy(correct_a).astype(bool).astype(np.float64).reshape(-1)
    rb = to_numpy(correct_b).astype(bool).astype(np.float64).reshape(-1)
    if ra.shape != ca.shape or rb.shape != cb.shape:
        raise ValueError("confidence and correct arrays must all have the same length N")
    return ca, ra, cb, rb


def paired_bootstrap_aurc(
    conf_a: ArrayLike,
    correct_a: ArrayLike,
    conf_b: ArrayLike,
    correct_b: ArrayLike,
    n: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, float]:
    """Paired percentile bootstrap of ``AURC(A) - AURC(B)``.

    Shapes: four ``(N,)`` arrays paired by item (confidence and correctness of each
    model). Each replicate draws ``N`` item indices with replacement (the same indices
    for both models) and recomputes the whole-curve AURC of each model on the resample
    (duplicated items keep their resampled order on confidence ties, as in
    ``metrics.aurc``). Returns ``{"diff": AURC(A) - AURC(B), "aurc_a", "aurc_b",
    "ci_low", "ci_high"}``. Lower AURC is better, so ``diff < 0`` favours A.
    Geifman et al. 2019 (AURC); Efron & Tibshirani (1993), ch. 13.
    """
    ca, ra, cb, rb = _paired_curves(conf_a, correct_a, conf_b, correct_b)
    aurc_a = float(_aurc_rows(ca[None], ra[None])[0])
    aurc_b = float(_aurc_rows(cb[None], rb[None])[0])
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_ELEMS // ca.size)
    reps = []
    for start in range(0, n, chunk):
        idx = rng.integers(0, ca.size, size=(min(chunk, n - start), ca.size))
        reps.append(_aurc_rows(ca[idx], ra[idx]) - _aurc_rows(cb[idx], rb[idx]))
    lo, hi = _percentile_ci(np.concatenate(reps), level)
    return {
        "diff": aurc_a - aurc_b,
        "aurc_a": aurc_a,
        "aurc_b": aurc_b,
        "ci_low": lo,
        "ci_high": hi,
    }


def sign_flip_test_aurc(
    conf_a: ArrayLike,
    correct_a: ArrayLike,
    conf_b: ArrayLike,
    correct_b: ArrayLike,
    n: int = 2000,
    seed: int = 0,
    exact_max: int = EXACT_MAX,
) -> float:
    """Two-sided paired permutation test of ``AURC(A) = AURC(B)`` by per-item swaps.

    Shapes: four ``(N,)`` arrays paired by item. Under H0 the two models are
    exchangeable on each item, so each item's pair ``(conf, correct)`` of A may be swapped
    with B's; the statistic ``T = AURC(A') - AURC(B')`` is recomputed on every swap
    pattern. The p-value follows :func:`sign_flip_test`: exact enumeration of all
    ``2^N`` swap patterns when ``N <= exact_max``, else ``(1 + #{|T*| >= |T|}) / (1 + n)``
    over ``n`` random patterns from ``default_rng(seed)``. This assumes both models'
    confidences are on a comparable scale (both are probabilities). Identical inputs give
    ``p = 1``. Smaller p is stronger evidence of a difference.
    Good (2005), sec. 3.2 (paired permutation tests); Geifman et al. 2019 (AURC).
    """
    ca, ra, cb, rb = _paired_curves(conf_a, correct_a, conf_b, correct_b)
    t_obs = float(_aurc_rows(ca[None], ra[None])[0] - _aurc_rows(cb[None], rb[None])[0])

    def t_of(swap: np.ndarray) -> np.ndarray:  # swap (R, N) booleans
        conf_a2, conf_b2 = np.where(swap, cb, ca), np.where(swap, ca, cb)
        corr_a2, corr_b2 = np.where(swap, rb, ra), np.where(swap, ra, rb)
        return _aurc_rows(conf_a2, corr_a2) - _aurc_rows(conf_b2, corr_b2)

    chunk = max(1, _CHUNK_ELEMS // ca.size)
    if ca.size <= exact_max:
        swaps = _all_signs(ca.size) < 0
        t_null = np.concatenate([t_of(swaps[i : i + chunk]) for i in range(0, len(swaps), chunk)])
        return _p_value(t_obs, t_null, exact=True)
    rng = np.random.default_rng(seed)
    t_null = np.concatenate(
        [t_of(rng.random((min(chunk, n - s), ca.size)) < 0.5) for s in range(0, n, chunk)]
    )
    return _p_value(t_obs, t_null, exact=False)
