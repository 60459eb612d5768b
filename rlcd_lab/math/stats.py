"""Paired comparisons of two models on the same test items.

Inputs are per-item arrays ``a, b`` of shape ``(N,)`` aligned by item (average each item
over seeds first, so the unit of resampling is the test item). Differences are always
``a - b``; for Brier, NLL and AURC lower is better, so a negative ``a - b`` favours A.
Start at :func:`paired_bootstrap` (a CI) and :func:`sign_flip_test` (a p-value); the
``*_curve`` variants do the same for a whole-curve statistic (AURC, Cov@eps),
:func:`seed_test` tests across training seeds, and :func:`mde`, :func:`items_needed` and
:func:`seeds_needed` size a comparison. Randomness comes from
``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import product
from statistics import NormalDist

import numpy as np

from rlcd_lab.metrics import TIE_TOL, ArrayLike, largest_covered, risk_curve_rows, to_numpy

EXACT_MAX = 16
"""Sign-flip tests enumerate all ``2^N`` flips when ``N <= EXACT_MAX`` (65 536 at most)."""

_CHUNK_ELEMS = 2_000_000  # resampled values held in memory at once


def wilson_interval(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval of a proportion ``k / n`` (95% for the default ``z``):
    ``(p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)`` (Wilson 1927; Brown,
    Cai & DasGupta 2001 recommend it over the normal interval for small ``n``)."""
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    p, z2 = k / n, z * z
    centre = p + z2 / (2 * n)
    half = z * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return float((centre - half) / (1 + z2 / n)), float((centre + half) / (1 + z2 / n))


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


def _se(samples: np.ndarray) -> float:
    """Bootstrap standard error: the replicates' sample s.d. (0 for one replicate)."""
    return float(samples.std(ddof=1)) if samples.size > 1 else 0.0


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
    keyword, one row at a time otherwise. Returns ``{"diff": stat(a - b),
    "ci_low", "ci_high"}`` (``diff`` is ``stat`` of the observed differences, the mean
    by default) and ``"se"``, the standard deviation of the replicates (the bootstrap
    standard error, ``ddof = 1``). Identical inputs give ``0``, the CI ``[0, 0]`` and
    ``se = 0``.
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
    reps = np.concatenate(reps)
    lo, hi = _percentile_ci(reps, level)
    return {"diff": float(stat(d)), "ci_low": lo, "ci_high": hi, "se": _se(reps)}


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
# Whole-curve statistics (AURC, Cov@eps), per seed, items resampled jointly across seeds
# ---------------------------------------------------------------------------------------

CurveStat = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""A whole-curve statistic of every row: ``(conf (R, N), correct (R, N)) -> (R,)``."""


def aurc_rows(conf: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """AURC of every row (lower is better): :func:`rlcd_lab.metrics.aurc` row by row
    (ties averaged: :func:`rlcd_lab.metrics.risk_curve_rows`)."""
    return risk_curve_rows(conf, 1.0 - correct)[0].mean(axis=1)


def _aurc_grouped(counts: np.ndarray, errors: np.ndarray, n: int) -> np.ndarray:
    """AURC of every row from its tie groups in ranked order (``counts (R, G)`` items and
    ``errors (R, G)`` wrong answers per group, ``n`` items in all): the tie rule of
    :func:`rlcd_lab.metrics.risk_curve_rows` summed in closed form. A group of ``c`` items
    with ``e`` errors after ``a`` items holding ``E`` errors adds ``sum_{k=a+1}^{a+c} (E +
    (k - a) e / c) / k = E (H_{a+c} - H_a) + (e / c) (c - a (H_{a+c} - H_a))`` (``H``
    the harmonic numbers); the AURC is the total over ``n``."""
    h = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, n + 1))])
    end = np.cumsum(counts, axis=1).astype(np.int64)
    start = np.zeros_like(end)  # each group starts where the one before it ends
    start[:, 1:] = end[:, :-1]
    h_end = h[end]
    h_start = np.zeros_like(h_end)
    h_start[:, 1:] = h_end[:, :-1]
    before = np.cumsum(errors, axis=1) - errors
    dh = h_end - h_start
    share = np.where(counts > 0, errors / np.maximum(counts, 1), 0.0)
    return (before * dh + share * (counts - start * dh)).sum(axis=1) / n


aurc_rows.grouped = _aurc_grouped  # type: ignore[attr-defined]


def cov_rows(eps: float, tol: float = 1e-12) -> CurveStat:
    """Cov@eps of every row (higher is better): :func:`rlcd_lab.metrics.coverage_at_risk`
    row by row (the largest ``k/N`` at a tie-group end whose top-k error rate is ``<= eps``)."""

    def stat(conf: np.ndarray, correct: np.ndarray) -> np.ndarray:
        return largest_covered(*risk_curve_rows(conf, 1.0 - correct), eps, tol)

    def grouped(counts: np.ndarray, errors: np.ndarray, n: int) -> np.ndarray:
        end = np.cumsum(counts, axis=1)
        ok = (counts > 0) & (np.cumsum(errors, axis=1) / np.maximum(end, 1) <= eps + tol)
        return np.where(ok, end, 0).max(axis=1) / n

    stat.grouped = grouped  # type: ignore[attr-defined]
    return stat


def _ranked_groups(conf: np.ndarray, tie_tol: float = TIE_TOL) -> tuple[np.ndarray, np.ndarray]:
    """``(order, starts)`` of confidences ``conf (M,)``: the descending stable order and
    the first position of each tie group in it (neighbours within ``tie_tol``, chained)."""
    order = np.argsort(-conf, kind="stable")
    c = conf[order]
    new = np.ones(c.size, dtype=bool)
    new[1:] = c[:-1] - c[1:] > tie_tol
    return order, np.flatnonzero(new)


def _grouped_stat(
    stat: CurveStat, weights: np.ndarray, conf: np.ndarray, wrong: np.ndarray, n: int
) -> np.ndarray:
    """``stat`` of every row of ``weights (R, M)`` (how many times each of the ``M``
    entries ``conf``/``wrong`` is in the row's sample, ``n`` in all), without sorting each
    row: the entries are ranked once and each row's tie groups are sums of its weights
    (:func:`_aurc_grouped`; the groups are those of all ``M`` entries, which differ from a
    row's own only where a chain of neighbours within the tie tolerance runs through an
    entry the row leaves out)."""
    return stat.grouped(*_group_sums(weights, conf, wrong), n)  # type: ignore[attr-defined]


def _group_sums(
    weights: np.ndarray, conf: np.ndarray, wrong: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(counts, errors)``, each ``(R, G)``: every row's weight and weighted wrong answers
    in each tie group of ``conf`` (:func:`_ranked_groups`), groups in ranked order."""
    order, starts = _ranked_groups(conf)
    w = weights[:, order]
    return np.add.reduceat(w, starts, axis=1), np.add.reduceat(w * wrong[order], starts, axis=1)


def _seed_curves(
    conf_a: ArrayLike, correct_a: ArrayLike, conf_b: ArrayLike, correct_b: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The four arrays as ``(S, N)`` float64 (a ``(N,)`` input is one seed)."""
    out = []
    for x, is_correct in ((conf_a, 0), (correct_a, 1), (conf_b, 0), (correct_b, 1)):
        arr = to_numpy(x)
        arr = arr.astype(bool) if is_correct else arr
        out.append(np.atleast_2d(arr.astype(np.float64)))
    shapes = {a.shape for a in out}
    if len(shapes) != 1:
        raise ValueError(f"confidence and correct arrays must share one shape, got {shapes}")
    if out[0].ndim != 2 or out[0].size == 0:
        raise ValueError("need (N,) or (seeds, N) arrays with at least one item")
    return out[0], out[1], out[2], out[3]


def _seed_mean_diff(
    stat: CurveStat, ca: np.ndarray, ra: np.ndarray, cb: np.ndarray, rb: np.ndarray
) -> np.ndarray:
    """``mean_s [stat(A_s) - stat(B_s)]`` for ``(S, R, N)`` arrays -> ``(R,)``."""
    s, r, n = ca.shape
    flat = [x.reshape(s * r, n) for x in (ca, ra, cb, rb)]
    return (stat(flat[0], flat[1]) - stat(flat[2], flat[3])).reshape(s, r).mean(axis=0)


def paired_bootstrap_curve(
    conf_a: ArrayLike,
    correct_a: ArrayLike,
    conf_b: ArrayLike,
    correct_b: ArrayLike,
    stat: CurveStat = aurc_rows,
    n: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, float]:
    """Paired percentile bootstrap of a whole-curve statistic, ``stat(A) - stat(B)``,
    computed per seed and averaged over seeds.

    Shapes: four ``(S, N)`` arrays (S seeds evaluated on the same N test items, aligned;
    ``(N,)`` is one seed): confidence and correctness of each model. The statistic is
    ``T = mean_s [stat(A_s) - stat(B_s)]`` (AURC by default; :func:`cov_rows` for
    Cov@eps). Each replicate draws one set of ``N`` item indices with replacement and
    applies it to every seed and both models (items resampled jointly across seeds, so
    the unit of resampling is the test item), then recomputes ``T``. Duplicated items
    keep their resampled order on confidence ties, as in ``metrics.aurc``. Returns
    ``{"diff": T, "a": mean_s stat(A_s), "b": mean_s stat(B_s), "ci_low", "ci_high",
    "se"}`` (``se``: the replicates' s.d., the bootstrap standard error).
    For AURC lower is better (``diff < 0`` favours A); for Cov@eps higher is better.
    Geifman et al. 2019 (AURC); OpenJev-RLCD sec. 5 (per-seed metrics averaged, items
    resampled jointly across seeds); Efron & Tibshirani (1993), ch. 13.
    """
    ca, ra, cb, rb = _seed_curves(conf_a, correct_a, conf_b, correct_b)
    a, b = float(stat(ca, ra).mean()), float(stat(cb, rb).mean())
    rng = np.random.default_rng(seed)
    items = ca.shape[1]
    chunk = max(1, _CHUNK_ELEMS // ca.size)
    reps = []
    for start in range(0, n, chunk):
        idx = rng.integers(0, items, size=(min(chunk, n - start), items))
        if hasattr(stat, "grouped"):  # counts of each item per replicate, no sort per row
            rows = idx + (np.arange(len(idx)) * items)[:, None]
            w = np.bincount(rows.ravel(), minlength=idx.size).reshape(idx.shape).astype(float)
            reps.append(
                np.mean(
                    [
                        _grouped_stat(stat, w, ca[k], 1.0 - ra[k], items)
                        - _grouped_stat(stat, w, cb[k], 1.0 - rb[k], items)
                        for k in range(ca.shape[0])
                    ],
                    axis=0,
                )
            )
            continue
        reps.append(_seed_mean_diff(stat, ca[:, idx], ra[:, idx], cb[:, idx], rb[:, idx]))
    reps = np.concatenate(reps)
    lo, hi = _percentile_ci(reps, level)
    return {"diff": a - b, "a": a, "b": b, "ci_low": lo, "ci_high": hi, "se": _se(reps)}


def sign_flip_test_curve(
    conf_a: ArrayLike,
    correct_a: ArrayLike,
    conf_b: ArrayLike,
    correct_b: ArrayLike,
    stat: CurveStat = aurc_rows,
    n: int = 2000,
    seed: int = 0,
    exact_max: int = EXACT_MAX,
) -> float:
    """Two-sided paired permutation test of ``stat(A) = stat(B)`` by per-item swaps.

    Shapes and statistic as in :func:`paired_bootstrap_curve`. Under H0 the two models are
    exchangeable on each item, so item i's ``(conf, correct)`` of A may be swapped with
    B's; one swap pattern applies to every seed (jointly, like the bootstrap's items) and
    ``T = mean_s [stat(A'_s) - stat(B'_s)]`` is recomputed. The p-value follows
    :func:`sign_flip_test`: exact enumeration of all ``2^N`` swap patterns when
    ``N <= exact_max``, else ``(1 + #{|T*| >= |T|}) / (1 + n)`` over ``n`` random
    patterns from ``default_rng(seed)``. Both models' confidences must be on a comparable
    scale (both are probabilities). Identical inputs give ``p = 1``. Smaller p is stronger
    evidence of a difference. Good (2005), sec. 3.2; Geifman et al. 2019 (AURC).
    """
    ca, ra, cb, rb = _seed_curves(conf_a, correct_a, conf_b, correct_b)
    t_obs = float(_seed_mean_diff(stat, ca[:, None], ra[:, None], cb[:, None], rb[:, None])[0])

    def t_of(swap: np.ndarray) -> np.ndarray:  # swap (R, N) booleans, the same for each seed
        if hasattr(stat, "grouped"):  # A' takes B's entry where swapped: weights on both
            w = np.concatenate([~swap, swap], axis=1).astype(float)
            out = []
            for k in range(ca.shape[0]):
                conf = np.concatenate([ca[k], cb[k]])
                wrong = 1.0 - np.concatenate([ra[k], rb[k]])
                counts, errors = _group_sums(w, conf, wrong)
                # B' holds every entry A' leaves: its sums are the groups' totals less A''s
                # (whole numbers in float64, so exactly those of the weights 1 - w)
                size, total = _group_sums(np.ones((1, len(conf))), conf, wrong)
                out.append(
                    stat.grouped(counts, errors, len(ca[k]))  # type: ignore[attr-defined]
                    - stat.grouped(size - counts, total - errors, len(ca[k]))  # type: ignore[attr-defined]
                )
            return np.mean(out, axis=0)
        w = swap[None]
        a2 = np.where(w, cb[:, None], ca[:, None]), np.where(w, rb[:, None], ra[:, None])
        b2 = np.where(w, ca[:, None], cb[:, None]), np.where(w, ra[:, None], rb[:, None])
        return _seed_mean_diff(stat, a2[0], a2[1], b2[0], b2[1])

    items = ca.shape[1]
    chunk = max(1, _CHUNK_ELEMS // ca.size)
    if items <= exact_max:
        swaps = _all_signs(items) < 0
        t_null = np.concatenate([t_of(swaps[i : i + chunk]) for i in range(0, len(swaps), chunk)])
        return _p_value(t_obs, t_null, exact=True)
    rng = np.random.default_rng(seed)
    t_null = np.concatenate(
        [t_of(rng.random((min(chunk, n - s), items)) < 0.5) for s in range(0, n, chunk)]
    )
    return _p_value(t_obs, t_null, exact=False)


def curve_per_seed(
    conf_a: ArrayLike,
    correct_a: ArrayLike,
    conf_b: ArrayLike,
    correct_b: ArrayLike,
    stat: CurveStat = aurc_rows,
) -> np.ndarray:
    """``(S,)`` per-seed differences ``stat(A_s) - stat(B_s)`` of a whole-curve statistic
    (shapes as in :func:`paired_bootstrap_curve`): what :func:`seed_test` tests."""
    ca, ra, cb, rb = _seed_curves(conf_a, correct_a, conf_b, correct_b)
    return stat(ca, ra) - stat(cb, rb)


# ---------------------------------------------------------------------------------------
# Across training seeds, and power
# ---------------------------------------------------------------------------------------

POWER = 0.8
"""The power at which the minimal detectable effect and the sample sizes are stated."""


def student_t_p(t: float, df: int) -> float:
    """Two-sided p-value ``P(|T| >= |t|)`` of Student's t with ``df`` (integer >= 1)
    degrees of freedom, in closed form: with ``theta = atan(|t| / sqrt(df))``,
    ``P(|T| < |t|) = (2/pi) (theta + sin(theta) cos(theta) sum_{j=1}^{(df-1)/2 - 1} ...)``
    for odd ``df`` and ``sin(theta) sum_{j=0}^{df/2 - 1} c_j cos^{2j}(theta)`` for even
    ``df`` (Abramowitz & Stegun 1964, 26.7.3-26.7.4). ``t = inf`` gives 0, ``t = 0`` 1."""
    if df < 1 or int(df) != df:
        raise ValueError(f"df must be an integer >= 1, got {df}")
    if math.isnan(t):
        return float("nan")
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for j in range(1, df // 2):
            term *= c2 * (2 * j - 1) / (2 * j)
            total += term
        inside = s * total
    else:
        total = 0.0
        if df > 1:
            term, total = 1.0, 1.0
            for j in range(1, (df - 1) // 2):
                term *= c2 * (2 * j) / (2 * j + 1)
                total += term
        inside = 2 / math.pi * (theta + s * math.cos(theta) * total)
    return min(1.0, max(0.0, 1.0 - inside))


def student_t_quantile(q: float, df: int) -> float:
    """The ``q`` quantile (``0.5 <= q < 1``) of Student's t with ``df`` degrees of
    freedom: the root of ``1 - student_t_p(t, df) / 2 = q``, found by bisection to 1e-12."""
    if not 0.5 <= q < 1:
        raise ValueError(f"q must be in [0.5, 1), got {q}")
    lo, hi = 0.0, 1.0
    while 1 - student_t_p(hi, df) / 2 < q:
        hi *= 2
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 1 - student_t_p(mid, df) / 2 < q else (lo, mid)
    return (lo + hi) / 2


def seed_test(diffs: Sequence[float] | np.ndarray) -> dict:
    """The test across training seeds of per-seed differences ``d_s = stat(A_s) -
    stat(B_s)`` (S seeds, each a trained model: the unit of replication the item-level
    bootstrap holds fixed). Returns ``{"diffs": [d_s], "mean", "p_sign", "t", "p_t"}``:
    ``p_sign`` the exact two-sided sign-flip p over the ``2^S`` sign patterns of the
    ``d_s`` (:func:`sign_flip_test`; at least ``2^(1-S)``, 0.25 for 3 seeds), ``t =
    mean / (sd / sqrt(S))`` (``ddof = 1``) and ``p_t`` its two-sided p under Student's t
    with ``S - 1`` degrees of freedom (:func:`student_t_p`); ``t`` and ``p_t`` are None
    for one seed or equal differences (no spread to test against). Fisher (1935); Student
    (1908), "The probable error of a mean"."""
    d = np.asarray(diffs, dtype=np.float64).reshape(-1)
    if d.size == 0:
        raise ValueError("need at least one seed")
    out: dict = {"diffs": d.tolist(), "mean": float(d.mean()), "t": None, "p_t": None}
    out["p_sign"] = sign_flip_test(d, np.zeros_like(d), exact_max=max(EXACT_MAX, d.size))
    sd = float(d.std(ddof=1)) if d.size > 1 else 0.0
    if sd > 1e-15 * max(1.0, float(np.abs(d).max())):
        out["t"] = float(d.mean() / (sd / math.sqrt(d.size)))
        out["p_t"] = student_t_p(out["t"], d.size - 1)
    return out


def _z(level: float, power: float) -> float:
    nd = NormalDist()
    return nd.inv_cdf(1 - (1 - level) / 2) + nd.inv_cdf(power)


def mde(se: float, level: float = 0.95, power: float = POWER) -> float:
    """The minimal detectable effect of a two-sided test at ``1 - level`` (5%) with
    ``power`` (80%) from the standard error ``se`` of the difference:
    ``(z_{(1+level)/2} + z_power) se`` (1.960 + 0.842 = 2.802 times ``se``). A true
    difference of this size is detected with probability ``power``; a smaller one
    usually is not. Cohen (1988), "Statistical power analysis", ch. 2 (normal approximation)."""
    return _z(level, power) * se


def items_needed(
    se: float, n_items: int, delta: float, level: float = 0.95, power: float = POWER
) -> int:
    """Test items for :func:`mde` to reach ``|delta|``, scaling a pilot's standard error
    ``se`` on ``n_items`` items as ``1 / sqrt(items)``: ``ceil(n_items (z se / delta)^2)``."""
    if delta == 0:
        raise ValueError("delta must be non-zero")
    return max(1, math.ceil(n_items * (_z(level, power) * se / abs(delta)) ** 2))


def seeds_needed(
    sd: float, delta: float, level: float = 0.95, power: float = POWER, max_seeds: int = 1000
) -> int | None:
    """Training seeds for a paired t test over seeds to detect ``|delta|`` with ``power``
    when per-seed differences have s.d. ``sd``: the smallest ``S >= 2`` with
    ``(t_{(1+level)/2, S-1} + t_{power, S-1}) sd / sqrt(S) <= |delta|`` (the usual
    t-quantile approximation of the noncentral t, Cohen 1988, ch. 2); None beyond ``max_seeds``."""
    if delta == 0:
        raise ValueError("delta must be non-zero")
    for s in range(2, max_seeds + 1):
        t = student_t_quantile(1 - (1 - level) / 2, s - 1) + student_t_quantile(power, s - 1)
        if t * sd / math.sqrt(s) <= abs(delta):
            return s
    return None
