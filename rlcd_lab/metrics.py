"""Calibration and selective-prediction metrics (numpy in, Python floats out).

Shapes: ``probs`` is ``(N, K)`` (rows on the simplex), ``logits`` ``(N, K)``, ``labels``
``(N,)`` integers in ``[0, K)``, ``q`` ``(N, K)`` outcome distributions, ``confidence``
``(N,)`` in ``[0, 1]`` (usually ``max_k p_k``) and ``correct`` ``(N,)`` booleans (or 0/1).
Every function accepts numpy arrays, torch tensors or nested lists (:func:`to_numpy`).
Peer libraries disagree on several definitions; each function pins its own (top-label
:func:`ece`, plain :func:`aurc`, the stable ranking of :func:`confidence_order`,
:func:`coverage_at_risk`, :func:`fit_temperature`), tested against brute-force references
in ``tests/test_metrics.py``; :func:`evaluate` computes them all for one split.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

EPS = 1e-12
"""Probabilities are clamped from below at this value before taking logs (NLL, and the
``log(probs)`` pseudo-logits used for temperature scaling), so an item given probability
0 for its label costs ``-log(1e-12) ~ 27.6`` nats instead of ``inf``."""

T_MIN, T_MAX = 0.05, 50.0
"""Search range of :func:`fit_temperature`."""

TIE_TOL = 1e-12
"""Confidences that differ by at most this (absolute) are one tie group of the risk
curve (:func:`risk_curve_rows`): equality at the readout's resolution, not float noise.
Two computations of one probability (a softmax summed in another order, a scaled
logit) differ by a few float64 ulps (about 1e-16); readouts that differ as a model
computed them (float32, about 1e-7 relative) are far apart. Stated confidences are
compared after the rounding their text carries (``rlcd_lab.reports.results``)."""

DEFAULT_EPS = 0.05
"""The error budget eps of Cov@eps (the largest share decided at error <= eps) and of the
routing rules (``rlcd_lab.math.routing``): the paper's 5% on GSM8K-Verify. Every default eps in
the package and its notebooks is this constant."""

ArrayLike = Any  # numpy array, torch tensor, or nested sequence


def to_numpy(x: ArrayLike, dtype: Any = None) -> np.ndarray:
    """Convert a numpy array, torch tensor or nested list to a numpy array.

    Torch tensors are detached and moved to the CPU; bfloat16/float16 tensors are upcast
    to float64 (numpy has no bfloat16). ``dtype`` optionally casts the result.
    """
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch.Tensor, without importing torch
        x = x.detach().cpu()
        if x.is_floating_point():
            x = x.double()
        x = x.numpy()
    return np.asarray(x, dtype=dtype)


def pad_ragged(rows: Sequence[Sequence[float]], fill: float) -> np.ndarray:
    """Rows of different lengths (items with their own number of options K_i) as one
    ``(N, K_max)`` float64 array, padded with ``fill`` on the right.

    Pad logits with ``-inf`` and probabilities or ``q`` with ``0``: an absent option then
    has probability 0 under ``softmax`` and any temperature, contributes 0 to the Brier
    sum, is never the argmax, and so every metric here equals the one computed over each
    item's own options (``tests/test_metrics.py`` checks this against per-item values).
    """
    if not len(rows):
        raise ValueError("need at least one row")
    k = max(len(r) for r in rows)
    out = np.full((len(rows), k), fill, dtype=np.float64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def _probs(probs: ArrayLike) -> np.ndarray:
    p = to_numpy(probs, np.float64)
    if p.ndim != 2:
        raise ValueError(f"probs must be (N, K), got shape {p.shape}")
    return p


def _labels(labels: ArrayLike, n: int) -> np.ndarray:
    y = to_numpy(labels).astype(np.int64).reshape(-1)
    if y.shape[0] != n:
        raise ValueError(f"expected {n} labels, got {y.shape[0]}")
    return y


def _conf_correct(confidence: ArrayLike, correct: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """``(confidence, correct)`` as flat float64 and bool arrays; ``ValueError`` when their
    lengths differ, they are empty, or a confidence is NaN (the rankings of
    :func:`risk_coverage_curve`, :func:`aurc` and :func:`coverage_at_risk` need a number
    for every item)."""
    c = to_numpy(confidence, np.float64).reshape(-1)
    r = to_numpy(correct).astype(bool).reshape(-1)
    if c.shape != r.shape:
        raise ValueError(f"confidence {c.shape} and correct {r.shape} differ in length")
    if c.size == 0:
        raise ValueError("need at least one item")
    if np.isnan(c).any():  # NaN has no place in a ranking: it would land anywhere
        nan = np.flatnonzero(np.isnan(c))
        raise ValueError(
            f"confidence holds {nan.size} NaN value(s) (first at index {nan[0]}) of "
            f"{c.size}: items cannot be ranked by it"
        )
    return c, r


def softmax(logits: ArrayLike) -> np.ndarray:
    """Numerically stable ``softmax`` over the last axis; ``(..., K) -> (..., K)``."""
    z = to_numpy(logits, np.float64)
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def log_softmax(logits: ArrayLike) -> np.ndarray:
    """Numerically stable ``log softmax`` over the last axis; ``(..., K) -> (..., K)``."""
    z = to_numpy(logits, np.float64)
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


# ---------------------------------------------------------------------------------------
# Proper scores and accuracy
# ---------------------------------------------------------------------------------------


def confidence_and_correct(probs: ArrayLike, labels: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Top-label confidence ``max_k p_k`` and correctness ``argmax_k p_k == y``, each ``(N,)``.

    Ties in ``argmax`` go to the lowest index (``np.argmax``).
    """
    p = _probs(probs)
    y = _labels(labels, p.shape[0])
    return p.max(1), p.argmax(1) == y


def accuracy(probs: ArrayLike, labels: ArrayLike) -> float:
    """Top-1 accuracy ``(1/N) sum_i 1[argmax_k p_ik = y_i]``.

    Shapes: ``probs (N, K)`` (logits work too: argmax is the same), ``labels (N,)``.
    Higher is better, in ``[0, 1]``. Ties in ``argmax`` go to the lowest index.
    Reference: the usual top-1 accuracy (e.g. Guo et al. 2017, sec. 2).
    """
    _, correct = confidence_and_correct(probs, labels)
    return float(correct.mean())


def nll(probs: ArrayLike, labels: ArrayLike, eps: float = EPS) -> float:
    """Negative log-likelihood ``-(1/N) sum_i log max(p_{i, y_i}, eps)`` in nats.

    Shapes: ``probs (N, K)``, ``labels (N,)``. Lower is better, in ``[0, -log eps]``;
    the clamp at ``eps = 1e-12`` keeps a zero-probability label finite (27.6 nats).
    Good (1952), "Rational decisions" (minus the log score); Guo et al. 2017, sec. 2.
    """
    return float(item_nll(probs, labels, eps).mean())


def brier(probs: ArrayLike, labels: ArrayLike) -> float:
    """Multi-class Brier score ``(1/N) sum_i sum_k (p_ik - 1[k = y_i])^2``.

    Shapes: ``probs (N, K)``, ``labels (N,)``. Lower is better, in ``[0, 2]`` (0 for a
    confident correct answer, 2 for a confident wrong one). This is the usual squared
    error, i.e. ``1 - J`` for the shifted RLCD reward ``J`` in ``rlcd_lab.scoring``.
    Brier (1950), "Verification of forecasts expressed in terms of probability".
    """
    return float(item_brier(probs, labels).mean())


def item_brier(probs: ArrayLike, labels: ArrayLike) -> np.ndarray:
    """Per-item Brier loss ``sum_k (p_ik - 1[k = y_i])^2``, ``(N, K), (N,) -> (N,)``.

    Lower is better, in ``[0, 2]``; its mean is :func:`brier`. A padded option (an item
    with fewer options, probability 0, :func:`pad_ragged`) adds nothing. The one per-item
    Brier of the suite: results, routing and the dashboard call it.
    """
    p = _probs(probs)
    y = _labels(labels, p.shape[0])
    onehot = np.zeros_like(p)
    onehot[np.arange(p.shape[0]), y] = 1.0
    return ((p - onehot) ** 2).sum(1)


def item_nll(probs: ArrayLike, labels: ArrayLike, eps: float = EPS) -> np.ndarray:
    """Per-item negative log-likelihood ``-log max(p_{i, y_i}, eps)`` in nats, ``(N,)``.

    Lower is better; its mean is :func:`nll` (the clamp at ``eps = 1e-12`` keeps a
    zero-probability label finite).
    """
    p = _probs(probs)
    y = _labels(labels, p.shape[0])
    py = p[np.arange(p.shape[0]), y]
    return -np.log(np.maximum(py, eps))


# ---------------------------------------------------------------------------------------
# Expected calibration error
# ---------------------------------------------------------------------------------------


def bin_edges(n_bins: int) -> np.ndarray:
    """Equal-width bin edges ``[0, 1/n, ..., 1]`` computed as ``i / n`` (``(n+1,)``)."""
    if n_bins < 1:
        raise ValueError("n_bins must be >= 1")
    return np.arange(n_bins + 1) / n_bins


def bin_index(confidence: ArrayLike, n_bins: int) -> np.ndarray:
    """Bin of each confidence: ``b`` such that ``b/n < c <= (b+1)/n``; ``c = 0`` -> bin 0.

    Shapes: ``(N,) -> (N,)`` integers in ``[0, n_bins)``. Values above 1 (float noise)
    are put in the last bin.
    """
    c = to_numpy(confidence, np.float64).reshape(-1)
    b = np.searchsorted(bin_edges(n_bins), c, side="left") - 1
    return np.clip(b, 0, n_bins - 1)


def reliability_bins(
    confidence: ArrayLike, correct: ArrayLike, n_bins: int = 15
) -> dict[str, np.ndarray]:
    """Per-bin statistics of a reliability diagram (used by :func:`ece` and the plots).

    Bins are ``(i/n, (i+1)/n]`` for ``i = 0..n-1``; a confidence of exactly 0 goes to the
    first bin. Returns a dict of numpy arrays:

    * ``edges (n+1,)``: the bin edges ``i/n``;
    * ``count (n,)``: number of items per bin, ``|B_b|``;
    * ``confidence (n,)``: mean confidence per bin, ``conf_b`` (NaN for an empty bin);
    * ``accuracy (n,)``: fraction correct per bin, ``acc_b`` (NaN for an empty bin).

    Reference: DeGroot & Fienberg (1983), "The comparison and evaluation of forecasters";
    Guo et al. 2017, sec. 2 (reliability diagrams).
    """
    c, r = _conf_correct(confidence, correct)
    b = bin_index(c, n_bins)
    count = np.bincount(b, minlength=n_bins).astype(np.int64)
    conf_sum = np.bincount(b, weights=c, minlength=n_bins)
    acc_sum = np.bincount(b, weights=r.astype(np.float64), minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_conf = np.where(count > 0, conf_sum / np.maximum(count, 1), np.nan)
        mean_acc = np.where(count > 0, acc_sum / np.maximum(count, 1), np.nan)
    return {
        "edges": bin_edges(n_bins),
        "count": count,
        "confidence": mean_conf,
        "accuracy": mean_acc,
    }


def ece_from_confidence(confidence: ArrayLike, correct: ArrayLike, n_bins: int = 15) -> float:
    """Top-label ECE from ``confidence (N,)`` and ``correct (N,)``; see :func:`ece`."""
    bins = reliability_bins(confidence, correct, n_bins)
    n = bins["count"].sum()
    keep = bins["count"] > 0
    gaps = np.abs(bins["accuracy"][keep] - bins["confidence"][keep])
    return float((bins["count"][keep] / n * gaps).sum())


def auroc(confidence: ArrayLike, correct: ArrayLike) -> float:
    """Area under the ROC curve of ``confidence (N,)`` for telling ``correct (N,)`` answers
    from wrong ones: the probability that a random right answer has a higher confidence
    than a random wrong one, ties counting one half (the Mann-Whitney U statistic over
    ``n_right * n_wrong``; Hanley & McNeil 1982). 0.5 is no discrimination, 1 perfect.
    Needs at least one right and one wrong answer."""
    conf, ok = _conf_correct(confidence, correct)
    n_right, n_wrong = int(ok.sum()), int((~ok).sum())
    if not (n_right and n_wrong):
        raise ValueError(f"AUROC needs right and wrong answers, got {n_right} and {n_wrong}")
    values, inverse, counts = np.unique(conf, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2)[inverse]  # average ranks, 1-based
    u = ranks[ok].sum() - n_right * (n_right + 1) / 2
    return float(u / (n_right * n_wrong))


def ece(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15) -> float:
    """Top-label expected calibration error ``sum_b |B_b|/N |acc_b - conf_b|``.

    Shapes: ``probs (N, K)``, ``labels (N,)``. The confidence is ``max_k p_ik`` and an
    item is correct when ``argmax_k p_ik = y_i`` (lowest index on ties). Bins are the
    equal-width ``(i/n, (i+1)/n]`` (confidence 0 goes to the first bin); empty bins
    contribute 0. Lower is better, in ``[0, 1]``. Even a perfectly calibrated model has
    ECE > 0 at finite N; compare with :func:`ece_noise_floor`.
    Guo et al. 2017, "On calibration of modern neural networks", eq. 3.
    """
    c, r = confidence_and_correct(probs, labels)
    return ece_from_confidence(c, r, n_bins)


def ece_noise_floor(
    confidence: ArrayLike, n_bins: int = 15, n_sim: int = 1000, seed: int = 0
) -> float:
    """Expected ECE of a perfectly calibrated predictor with the same confidences.

    Simulates ``correct_i ~ Bernoulli(confidence_i)`` independently ``n_sim`` times
    (``numpy.random.default_rng(seed)``) and returns the mean ECE over the simulations,
    with the same bins as :func:`ece`. Shapes: ``confidence (N,)`` -> float. A reported
    ECE near this value is indistinguishable from finite-sample noise; lower ECE is
    better but cannot be expected below this floor. Reference: Bröcker & Smith (2007),
    "Increasing the reliability of reliability diagrams" (consistency resampling).
    """
    c = to_numpy(confidence, np.float64).reshape(-1)
    if c.size == 0:
        raise ValueError("need at least one item")
    rng = np.random.default_rng(seed)
    b = bin_index(c, n_bins)
    conf_sum = np.bincount(b, weights=c, minlength=n_bins)
    onehot = np.zeros((c.size, n_bins))
    onehot[np.arange(c.size), b] = 1.0
    total = 0.0
    chunk = max(1, 2_000_000 // c.size)
    for start in range(0, n_sim, chunk):
        s = min(chunk, n_sim - start)
        correct = (rng.random((s, c.size)) < c).astype(np.float64)
        acc_sum = correct @ onehot  # (s, n_bins)
        # |B_b|/N |acc_b - conf_b| = |sum_{i in B_b} correct_i - sum_{i in B_b} c_i| / N
        total += (np.abs(acc_sum - conf_sum) / c.size).sum()
    return float(total / n_sim)


# ---------------------------------------------------------------------------------------
# Selective prediction
# ---------------------------------------------------------------------------------------


def confidence_order(confidence: ArrayLike) -> np.ndarray:
    """Indices sorting items by confidence descending; ties keep their original order.

    Implemented as ``np.argsort(-confidence, kind="stable")``. Shapes: ``(N,) -> (N,)``.
    The selective metrics below do not depend on this order within ties (see
    :func:`risk_curve_rows`); it only fixes which tied item is listed first.
    """
    c = to_numpy(confidence, np.float64).reshape(-1)
    return np.argsort(-c, kind="stable")


def risk_curve_rows(
    conf: np.ndarray, errors: np.ndarray, tie_tol: float = TIE_TOL
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k risks of every row with tied confidences averaged: ``conf (R, N)`` float,
    ``errors (R, N)`` float (1 for a wrong answer, or a predicted error in [0, 1]) ->
    ``(risks (R, N), ends (R, N) bool)``, both in ranked order (confidence descending).
    Neighbours in that order that differ by at most ``tie_tol`` (:data:`TIE_TOL`) are tied
    (a chain of such steps is one group).

    The tie rule: items of equal confidence are ranked in uniformly random order, and
    ``risks[:, k-1]`` is the *expected* error rate of the top ``k`` over those orders:
    ``(E_before + (k - a) e_g / n_g) / k`` for the ``k``-th item falling in a tie group of
    ``n_g`` items holding ``e_g`` errors, with ``a`` items and ``E_before`` errors ranked
    above the group. No file order or float noise in a tie decides a curve. ``ends``
    marks the last position of each tie group: the only prefixes a confidence threshold
    can select (a rule "decide when confidence >= t" takes a whole group or none), where
    the risk is the group boundary's observed rate. Geifman & El-Yaniv (2017),
    "Selective classification for deep neural networks".
    """
    order = np.argsort(-conf, axis=1, kind="stable")
    c = np.take_along_axis(conf, order, axis=1)
    e = np.take_along_axis(errors, order, axis=1)
    r, n = c.shape
    pos = np.broadcast_to(np.arange(n), (r, n))
    new = np.ones((r, n), dtype=bool)
    new[:, 1:] = c[:, :-1] - c[:, 1:] > tie_tol
    ends = np.ones((r, n), dtype=bool)
    ends[:, :-1] = new[:, 1:]
    start = np.maximum.accumulate(np.where(new, pos, 0), axis=1)  # first index of the group
    end = np.minimum.accumulate(np.where(ends, pos, n - 1)[:, ::-1], axis=1)[:, ::-1]
    cum = np.concatenate([np.zeros((r, 1)), np.cumsum(e, axis=1)], axis=1)  # (R, N + 1)
    before = np.take_along_axis(cum, start, axis=1)
    in_group = np.take_along_axis(cum, end + 1, axis=1) - before
    k = pos + 1
    expected = before + (k - start) * in_group / (end + 1 - start)
    return expected / k, ends


def risk_coverage_curve(confidence: ArrayLike, correct: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Risk-coverage curve: ``(coverages, risks)``, each ``(N,)``.

    Items are ranked by confidence descending. For ``k = 1..N``, ``coverages[k-1] = k/N``
    and ``risks[k-1]`` is the error rate of the ``k`` top-ranked items, with tied
    confidences averaged (the expected rate over random orders of the tied items,
    :func:`risk_curve_rows`). Lower risk is better at every coverage. El-Yaniv & Wiener
    (2010), "On the foundations of noise-free selective classification", JMLR; Geifman &
    El-Yaniv (2017), "Selective classification for deep neural networks".
    """
    c, r = _conf_correct(confidence, correct)
    risks, _ = risk_curve_rows(c[None, :], (~r).astype(np.float64)[None, :])
    return np.arange(1, c.size + 1) / c.size, risks[0]


def oracle_risk_coverage_curve(correct: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Risk-coverage curve of the ideal ranking (every correct item before every error).

    With ``C`` correct items out of ``N``: ``risks[k-1] = max(0, k - C) / k``. It lower-
    bounds :func:`risk_coverage_curve` pointwise for the same ``correct``. Shapes:
    ``(N,) -> ((N,), (N,))``. Geifman et al. 2019 (the "optimal" curve of excess AURC).
    """
    r = to_numpy(correct).astype(bool).reshape(-1)
    if r.size == 0:
        raise ValueError("need at least one item")
    k = np.arange(1, r.size + 1)
    return k / r.size, np.maximum(0, k - r.sum()) / k


def aurc(confidence: ArrayLike, correct: ArrayLike) -> float:
    """Area under the risk-coverage curve, ``(1/N) sum_{k=1..N} risk(top-k)``.

    Shapes: ``confidence (N,)``, ``correct (N,)``; a NaN confidence is a ``ValueError``.
    Lower is better, in ``[0, 1]``. This is the plain AURC (not the excess AURC, which
    subtracts the oracle's area), with the ranking and tie rule of
    :func:`risk_coverage_curve`.
    Geifman et al. 2019, "Bias-reduced uncertainty estimation for deep neural
    classifiers", ICLR, sec. 3.
    """
    return float(risk_coverage_curve(confidence, correct)[1].mean())


def largest_covered(risks: np.ndarray, ends: np.ndarray, eps: float, tol: float) -> np.ndarray:
    """``(R,)`` largest ``k/N`` among tie-group ends (``ends (R, N)``, from
    :func:`risk_curve_rows`) whose risk (``risks (R, N)``) is ``<= eps + tol``; 0 where
    none is."""
    ok = ends & (risks <= eps + tol)
    n = risks.shape[1]
    last = n - np.argmax(ok[:, ::-1], axis=1)
    return np.where(ok.any(axis=1), last / n, 0.0)


def coverage_at_risk(
    confidence: ArrayLike, correct: ArrayLike, eps: float = DEFAULT_EPS, tol: float = 1e-12
) -> float:
    """Cov@eps: the largest ``k/N`` whose top-k *observed* error rate is ``<= eps``.

    Items ranked as in :func:`risk_coverage_curve` (confidence descending). Only prefixes
    that end between two distinct confidences count (a threshold takes a tie group whole:
    :func:`risk_curve_rows`), so constant confidences give 1 or 0. Returns 0.0 when even
    the most confident group's error rate is above ``eps``. The prefix need not be the
    first to cross ``eps``: the largest qualifying ``k`` counts, even if a shorter prefix
    is above ``eps``. ``tol`` absorbs float rounding in the comparison. Higher is better,
    in ``[0, 1]``: the fraction of items that can be decided automatically at error
    ``<= eps`` with an oracle-chosen threshold. OpenJev-RLCD, sec. 5 ("Cov@eps");
    Geifman & El-Yaniv 2017.
    """
    c, r = _conf_correct(confidence, correct)
    risks, ends = risk_curve_rows(c[None, :], (~r).astype(np.float64)[None, :])
    return float(largest_covered(risks, ends, eps, tol)[0])


def coverage_ceiling(accuracy: float, eps: float = DEFAULT_EPS) -> float:
    """The most Cov@eps (:func:`coverage_at_risk`) any confidence can reach on answers of
    this ``accuracy``: ``min(1, accuracy / (1 - eps))``.

    A prefix of ``k`` of ``N`` items holding ``e`` errors qualifies when ``e <= eps k``; it
    holds at most the ``N_c`` right answers, so ``k - e <= N_c`` and ``k (1 - eps) <= N_c``.
    Ranking every right answer first (distinct confidences), then the errors, reaches
    ``min(N, N_c + floor(eps N_c / (1 - eps))) / N``, within ``1/N`` of the bound. Higher
    is better; a ceiling on the readout's ranking, set by its accuracy alone."""
    return min(1.0, accuracy / (1.0 - eps))


def predicted_coverage_at_risk(
    probs: ArrayLike, eps: float = DEFAULT_EPS, tol: float = 1e-12
) -> float:
    """Label-free Cov@eps: largest ``k/N`` whose top-k *predicted* error is ``<= eps``.

    The predicted error of the prefix is ``(1/k) sum_{j<=k} (1 - max_l p_jl)`` with items
    ranked by ``max p`` descending, prefixes ending between distinct confidences only (as
    :func:`coverage_at_risk`). Shapes: ``probs (N, K)`` (or an ``(N,)`` vector of
    confidences). Higher is better, in ``[0, 1]``; this is what a deployed model can
    compute without labels; it equals the observed Cov@eps when the model is calibrated.
    ``tol`` absorbs float rounding (e.g. ``1 - 0.95 > 0.05``). OpenJev-RLCD, sec. 5.
    """
    p = to_numpy(probs, np.float64)
    c = p.max(1) if p.ndim == 2 else p.reshape(-1)
    if c.size == 0:
        raise ValueError("need at least one item")
    risks, ends = risk_curve_rows(c[None, :], 1.0 - c[None, :])
    return float(largest_covered(risks, ends, eps, tol)[0])


# ---------------------------------------------------------------------------------------
# Temperature scaling
# ---------------------------------------------------------------------------------------


def apply_temperature(logits: ArrayLike, T: float) -> np.ndarray:
    """Temperature-scaled probabilities ``softmax(logits / T)``; ``(N, K) -> (N, K)``.

    ``T > 1`` softens (less confident), ``T < 1`` sharpens; argmax is unchanged.
    Guo et al. 2017, sec. 4.2.
    """
    if T <= 0:
        raise ValueError("temperature must be positive")
    return softmax(to_numpy(logits, np.float64) / T)


def temperature_nll(logits: ArrayLike, labels: ArrayLike, T: float) -> float:
    """NLL of ``softmax(logits / T)``: ``-(1/N) sum_i log_softmax(z_i / T)_{y_i}``.

    Computed in log space (no ``eps`` clamp). Lower is better.
    """
    z = to_numpy(logits, np.float64)
    y = _labels(labels, z.shape[0])
    return float(-log_softmax(z / T)[np.arange(z.shape[0]), y].mean())


def temperature_nll_slope(logits: ArrayLike, labels: ArrayLike, beta: float) -> float:
    """Derivative in ``beta = 1/T`` of the NLL of ``softmax(beta z)``:
    ``(1/N) sum_i (E_{k ~ softmax(beta z_i)} z_ik - z_i,y_i)``.

    Shapes: ``logits (N, K)`` (``-inf`` marks an absent option), ``labels (N,)`` ->
    float. Non-decreasing in ``beta`` (the NLL is convex in ``beta``: its second
    derivative is the mean variance of ``z_i`` under ``softmax(beta z_i)``); zero at the
    fitted temperature. Guo et al. 2017, sec. 4.2.
    """
    z = to_numpy(logits, np.float64)
    y = _labels(labels, z.shape[0])
    finite = np.isfinite(z)
    z0 = np.where(finite, z, 0.0)
    p = softmax(np.where(finite, beta * z0, -np.inf))
    return float(((p * z0).sum(1) - z0[np.arange(z.shape[0]), y]).mean())


def fit_temperature(
    logits: ArrayLike, labels: ArrayLike, t_min: float = T_MIN, t_max: float = T_MAX
) -> float:
    """Temperature ``T`` in ``[t_min, t_max]`` minimising the NLL of ``softmax(logits / T)``.

    Shapes: ``logits (N, K)``, ``labels (N,)`` -> float. The NLL is convex in
    ``beta = 1/T`` (a log-sum-exp of linear functions minus a linear one), so its
    minimiser on the interval is where the slope (:func:`temperature_nll_slope`) changes
    sign, or a boundary when it does not (``t_min`` for perfectly separable data,
    ``t_max`` when the logits carry no signal). Found by bisection on ``log beta`` until
    the bracket cannot shrink in float64. Why the slope and not the NLL itself: near the
    optimum the NLL is flat, so comparing two NLL values is decided by the last bits of
    ``exp``/``log``, which differ between CPUs (numpy's AVX-512 and AVX2 kernels); the
    slope crosses zero with a nonzero derivative, so its sign is wrong only within about
    ``1e-14`` (relative) of the root and the fitted ``T`` agrees across CPUs to that
    (measured on every shipped dev dump: at most 6e-15; a golden-section search on the
    NLL differed by up to 8e-8). Lower NLL is better; a fitted ``T > 1`` means the raw
    model was overconfident. Guo et al. 2017, "On calibration of modern neural
    networks", sec. 4.2.
    """
    z = to_numpy(logits, np.float64)
    y = _labels(labels, z.shape[0])
    lo, hi = np.log(1.0 / t_max), np.log(1.0 / t_min)  # bracket on s = log beta
    if temperature_nll_slope(z, y, np.exp(lo)) >= 0:
        return float(t_max)
    if temperature_nll_slope(z, y, np.exp(hi)) <= 0:
        return float(t_min)
    while True:
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            return float(np.exp(-mid))
        if temperature_nll_slope(z, y, np.exp(mid)) < 0:
            lo = mid
        else:
            hi = mid


# ---------------------------------------------------------------------------------------
# Distribution targets (aleatoric tasks)
# ---------------------------------------------------------------------------------------


def _xlogy_ratio(p: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Elementwise ``p log(p / m)`` with ``0 log 0 = 0`` (m > 0 wherever p > 0)."""
    out = np.zeros_like(p)
    pos = p > 0
    out[pos] = p[pos] * np.log(p[pos] / m[pos])
    return out


def jsd(p: ArrayLike, q: ArrayLike) -> np.ndarray:
    """Jensen-Shannon divergence per item, in bits (log base 2, the paper's unit).

    ``JSD(p, q) = 1/2 KL(p || m) + 1/2 KL(q || m)`` with ``m = (p + q)/2``, KL in bits,
    and the convention ``0 log 0 = 0``. Shapes: ``p, q (..., K)`` (broadcastable) ->
    ``(...)`` numpy array. Lower is better, in ``[0, 1]``: 0 iff ``p = q``, 1 for
    disjoint supports. Lin (1991), "Divergence measures based on the Shannon entropy",
    IEEE Trans. Inf. Theory 37(1).
    """
    p = to_numpy(p, np.float64)
    q = to_numpy(q, np.float64)
    p, q = np.broadcast_arrays(p, q)
    m = 0.5 * (p + q)
    nats = 0.5 * _xlogy_ratio(p, m).sum(-1) + 0.5 * _xlogy_ratio(q, m).sum(-1)
    return nats / np.log(2.0)


def mean_jsd(p: ArrayLike, q: ArrayLike) -> float:
    """Mean of :func:`jsd` over items (bits; lower is better, in ``[0, 1]``)."""
    return float(np.mean(jsd(p, q)))


# ---------------------------------------------------------------------------------------
# One row of Table 1
# ---------------------------------------------------------------------------------------


def _metrics_row(
    p: np.ndarray, y: np.ndarray, eps: float, n_bins: int, q: np.ndarray | None
) -> dict[str, float]:
    c, r = confidence_and_correct(p, y)
    row = {
        "accuracy": float(r.mean()),
        "brier": brier(p, y),
        "nll": nll(p, y),
        "ece": ece_from_confidence(c, r, n_bins),
        "aurc": aurc(c, r),
        "cov_at_eps": coverage_at_risk(c, r, eps),
        "pred_cov_at_eps": predicted_coverage_at_risk(p, eps),
    }
    if q is not None:
        row["jsd"] = mean_jsd(p, q)
    return row


def evaluate(
    probs_or_logits: ArrayLike,
    labels: ArrayLike,
    dev: tuple[ArrayLike, ArrayLike] | None = None,
    eps: float = DEFAULT_EPS,
    is_logits: bool = False,
    q: ArrayLike | None = None,
    n_bins: int = 15,
) -> dict[str, float]:
    """Every metric of one model on one test set: a row of the paper's Table 1.

    ``probs_or_logits (N, K)`` are probabilities (default) or logits
    (``is_logits=True``); ``labels (N,)``; ``dev = (dev_scores, dev_labels)`` in the same
    form (probs or logits) as the test scores; ``q (N, K)`` optional outcome
    distributions for aleatoric tasks. Returns a flat dict of floats:

    * ``n``, ``eps``: test size and the risk level of Cov@eps;
    * ``accuracy`` (higher better), ``brier``, ``nll``, ``ece``, ``aurc`` (lower better),
      ``cov_at_eps`` (observed, oracle) and ``pred_cov_at_eps`` (label-free), higher
      better; ``jsd`` (mean, lower better) when ``q`` is given;
    * with ``dev``: ``T`` fitted on dev by :func:`fit_temperature`, and every metric
      above again after applying ``T`` to the test scores, prefixed ``ts_``.

    Probabilities are turned into pseudo-logits ``log(max(p, 1e-12))`` for temperature
    scaling (``softmax(log p) = p``, so ``T = 1`` is the identity); an exact 0 (an absent
    option of an item with fewer options, see :func:`pad_ragged`) becomes ``-inf``. OpenJev-RLCD,
    Table 1 (metrics accuracy, Brier, NLL, ECE, AURC, Cov@eps, fitted T).
    """
    s = to_numpy(probs_or_logits, np.float64)
    if s.ndim != 2:
        raise ValueError(f"scores must be (N, K), got shape {s.shape}")
    y = _labels(labels, s.shape[0])
    qa = None if q is None else to_numpy(q, np.float64)

    def as_logits(x: np.ndarray) -> np.ndarray:  # an exact 0 (absent option) stays 0
        return x if is_logits else np.where(x > 0, np.log(np.maximum(x, EPS)), -np.inf)

    p = softmax(s) if is_logits else s
    row: dict[str, float] = {"n": float(s.shape[0]), "eps": float(eps)}
    row.update(_metrics_row(p, y, eps, n_bins, qa))
    if dev is not None:
        dev_s = to_numpy(dev[0], np.float64)
        T = fit_temperature(as_logits(dev_s), dev[1])
        row["T"] = T
        p_ts = apply_temperature(as_logits(s), T)
        row.update({f"ts_{k}": v for k, v in _metrics_row(p_ts, y, eps, n_bins, qa).items()})
    return row
