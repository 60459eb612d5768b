"""Every decision rule: from calibrated probabilities to automated decisions (decide when
the model is sure, escalate when it is not); the dashboard and the decision server call it,
so they decide alike. Pure functions on numpy arrays (tensors and lists accepted).

Start at :class:`DecisionRule` (confidence measure, readout, threshold) and the defaults
(:data:`DEFAULT_THRESHOLD`, :data:`DEFAULT_CHANCE_CORRECTED_THRESHOLD`, :data:`DEFAULT_EPS`);
then selective prediction (:func:`threshold_for_risk`, :func:`selective_risk`), Bayes
decisions under a cost matrix (:func:`bayes_actions`, :func:`bayes_threshold`), the cost
model (:func:`expected_cost`, :func:`cost_curve`) and the cascade (:func:`cascade`).
Shapes: ``probs (N, K)``, ``readouts (M, K)``, ``labels (N,)``, ``cost (A, K)`` (lower is
better). References: Chow (1970); Geifman & El-Yaniv (2017); OpenJev-RLCD sec. 5.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from rlcd_lab import metrics
from rlcd_lab.metrics import (
    DEFAULT_EPS as DEFAULT_EPS,  # the error budget, defined with Cov@eps
)
from rlcd_lab.metrics import to_numpy

DEFAULT_THRESHOLD = 0.9
"""The dashboard's default threshold on max p (Ask, Compare, Batch and Routing tabs)."""
DEFAULT_CHANCE_CORRECTED_THRESHOLD = 0.8
"""The decision server's default threshold on the chance-corrected confidence (``auto``
mode escalates below it). With K = 2 options it is the max-p rule at 0.9
(:func:`equivalent_threshold`: ``c = 2 max p - 1``)."""

if TYPE_CHECKING:
    from rlcd_lab.metrics import ArrayLike

Measure = Literal["max_p", "chance_corrected"]
Aggregate = Literal["single", "mixture"]
Kind = Literal["noul", "choice", "score"]
MEASURES: tuple[str, ...] = ("max_p", "chance_corrected")
AGGREGATES: tuple[str, ...] = ("single", "mixture")
MEASURE_NAMES = {"max_p": "max p", "chance_corrected": "chance-corrected confidence"}
AGGREGATE_NAMES = {"single": "the first rationale's readout", "mixture": "the mixture"}


# ------------------------------------------------------------------------- decision rule
@dataclass(frozen=True)
class Routed:
    """One decision: ``probs (K,)`` the readout decided on, ``answer`` its argmax (first on
    ties), ``confidence`` under the rule's measure, ``automate`` (``confidence >=
    threshold``)."""

    probs: np.ndarray
    answer: int
    confidence: float
    automate: bool

    @property
    def decision(self) -> str:
        """``"automate"`` or ``"escalate"``."""
        return "automate" if self.automate else "escalate"


@dataclass(frozen=True)
class DecisionRule:
    """Decide automatically when ``confidence(aggregate(readouts)) >= threshold``.

    ``measure``: ``max_p`` or ``chance_corrected`` (:func:`confidence`); ``aggregate``:
    ``single`` (the first rationale's readout) or ``mixture`` (the mean of the M readouts,
    :func:`aggregate_readouts`); ``threshold`` in [0, 1]. Raises ``ValueError`` for
    anything else. The dashboard's default is ``DecisionRule()`` (max p of the single
    query at :data:`DEFAULT_THRESHOLD`); the server's ``auto`` mode uses the
    chance-corrected confidence (see :class:`rlcd_lab.decide.DecideOptions`).
    """

    measure: Measure = "max_p"
    threshold: float = DEFAULT_THRESHOLD
    aggregate: Aggregate = "single"

    def __post_init__(self) -> None:
        check_threshold(self.threshold)
        if self.measure not in MEASURES:
            raise ValueError(f"measure must be one of {list(MEASURES)}, got {self.measure!r}")
        if self.aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be one of {list(AGGREGATES)}, got {self.aggregate!r}")

    def probs(self, readouts: ArrayLike) -> np.ndarray:
        """The ``(K,)`` readout decided on (:func:`aggregate_readouts`)."""
        return aggregate_readouts(readouts, self.aggregate)

    def confidence(self, p: ArrayLike, kind: Kind = "choice") -> float:
        """The rule's confidence of one ``(K,)`` distribution (:func:`confidence`)."""
        return confidence(p, self.measure, kind)

    def automates(self, confidence: float) -> bool:
        """Whether a confidence is high enough to decide automatically (``>= threshold``)."""
        return bool(confidence >= self.threshold)

    def apply(self, readouts: ArrayLike, kind: Kind = "choice") -> Routed:
        """Aggregate ``readouts (M, K)`` (or one ``(K,)`` readout), measure, decide."""
        p = self.probs(readouts)
        c = self.confidence(p, kind)
        return Routed(p, int(np.argmax(p)), c, self.automates(c))

    def describe(self, k: int | None = None) -> str:
        """The rule in words, e.g. ``decide automatically when max p of the first
        rationale's readout is >= 0.900``; with ``k`` options the chance-corrected rule
        also gives its max-p equivalent."""
        text = (
            f"decide automatically when the {MEASURE_NAMES[self.measure]} of "
            f"{AGGREGATE_NAMES[self.aggregate]} is ≥ {self.threshold:.3f}, escalate otherwise"
        )
        if self.measure == "chance_corrected" and k is not None and k >= 2:
            same = equivalent_threshold(self.threshold, k, "chance_corrected", "max_p")
            text += f" (with K = {k} options: max p ≥ {same:.3f})"
        return text


def check_threshold(threshold: float) -> float:
    """``threshold`` as a float when it is a number in [0, 1]; else ``ValueError``."""
    try:
        t = float(threshold)
    except (TypeError, ValueError):
        raise ValueError(f"the threshold must be a number in [0, 1], got {threshold!r}") from None
    if not 0.0 <= t <= 1.0:  # also refuses NaN
        raise ValueError(f"the threshold must be in [0, 1], got {threshold!r}")
    return t


def aggregate_readouts(readouts: ArrayLike, how: Aggregate = "single") -> np.ndarray:
    """The ``(K,)`` readout a rule decides on, from ``readouts (M, K)`` (a ``(K,)`` array
    counts as M = 1): ``single`` the first row (the paper's single query), ``mixture``
    the mean ``p = (1/M) sum_i u_i``. Raises ``ValueError`` for an unknown ``how`` or an
    empty or mis-shaped array."""
    u = to_numpy(readouts, np.float64)
    if u.ndim == 1:
        u = u[None]
    if u.ndim != 2 or u.shape[0] == 0 or u.shape[1] == 0:
        raise ValueError(f"readouts must be (M, K) with M, K >= 1, got shape {u.shape}")
    if how == "single":
        return u[0].copy()
    if how == "mixture":
        return u.mean(0)
    raise ValueError(f"aggregate must be one of {list(AGGREGATES)}, got {how!r}")


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
    eps: float = DEFAULT_EPS,
    tol: float = 1e-12,
) -> float:
    """The lowest confidence threshold whose decided set has error ``<= eps``.

    Items are ranked by confidence (descending); the prefix is the largest ``k`` ending
    between two distinct confidences whose error rate is ``<= eps`` (observed error when
    ``correct`` is given, as :func:`rlcd_lab.metrics.coverage_at_risk`; else the
    label-free *predicted* error ``mean(1 - confidence)``, as
    :func:`metrics.predicted_coverage_at_risk`). Returns the confidence of the ``k``-th
    item, so that "decide when ``confidence >= threshold``" decides exactly that prefix
    (a tie group is taken whole); ``inf`` when no prefix qualifies (decide nothing). Fit
    it on dev, apply it on test with :func:`selective_risk`.
    """
    c = to_numpy(confidence, np.float64).reshape(-1)
    if c.size == 0:
        raise ValueError("need at least one item")
    if correct is None:
        err = 1.0 - c
    else:
        _, r = _conf_correct(c, correct)
        err = (~r).astype(np.float64)
    risks, ends = metrics.risk_curve_rows(c[None, :], err[None, :])
    k = round(float(metrics.largest_covered(risks, ends, eps, tol)[0]) * c.size)
    return float(np.sort(c)[::-1][k - 1]) if k else float("inf")


def selective_risk(confidence: ArrayLike, correct: ArrayLike, threshold: float) -> dict[str, float]:
    """Decide the items with ``confidence >= threshold``, escalate the rest.

    Returns ``coverage`` (fraction decided, higher is better), ``risk`` (error rate among
    the decided, lower is better; 0 when none is decided), ``decided`` and ``errors``
    (counts). Geifman & El-Yaniv (2017).
    """
    c, r = _conf_correct(confidence, correct)
    return decided_risk(r, c >= threshold)


def decided_risk(correct: ArrayLike, decided: ArrayLike) -> dict[str, float]:
    """What a set of automated decisions gets: ``correct (N,)`` and ``decided (N,)``
    booleans (decided automatically; the rest escalated) -> ``coverage``, ``risk`` (error
    rate among the decided, 0 when none is), ``decided`` and ``errors`` (counts), as
    :func:`selective_risk` (which decides by a threshold). Raises ``ValueError`` for
    unequal or empty inputs."""
    d, r = _conf_correct(to_numpy(decided).astype(bool), correct)
    d = d.astype(bool)
    n = int(d.sum())
    errors = int((d & ~r).sum())
    return {
        "coverage": n / d.size,
        "risk": errors / n if n else 0.0,
        "decided": float(n),
        "errors": float(errors),
    }


def threshold_for_coverage(confidence: ArrayLike, coverage: float = 0.5) -> float:
    """The highest threshold that decides at least ``coverage`` of the items.

    With the confidences sorted descending, ``c_(1) >= ... >= c_(N)``, it is ``c_(k)`` for
    ``k = ceil(coverage N)``: "decide when ``confidence >= t``" then decides the top ``k``
    (more when others tie with ``c_(k)``), and any higher ``t`` decides fewer than ``k``.
    ``coverage`` in (0, 1]; raises ``ValueError`` otherwise or for no items. The Routing
    tab quotes it when a threshold decides nothing.
    """
    c = to_numpy(confidence, np.float64).reshape(-1)
    if c.size == 0:
        raise ValueError("need at least one item")
    if not 0.0 < coverage <= 1.0:
        raise ValueError(f"coverage must be in (0, 1], got {coverage!r}")
    k = max(1, math.ceil(coverage * c.size - 1e-9))  # 1e-9: 0.5 * 400 is exactly 200
    return float(np.sort(c)[::-1][k - 1])


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


def check_costs(cost_wrong: float | None, cost_escalate: float | None) -> tuple[float, float]:
    """``(c_w, c_e)`` as floats when both are given, finite and non-negative; else
    ``ValueError`` naming the problem."""
    if cost_wrong is None or cost_escalate is None:
        raise ValueError("enter both costs (a wrong automated decision, an escalation)")
    c_w, c_e = float(cost_wrong), float(cost_escalate)
    if not (math.isfinite(c_w) and math.isfinite(c_e)):
        raise ValueError("costs must be finite")
    if c_w < 0 or c_e < 0:
        raise ValueError("costs must be non-negative")
    return c_w, c_e


def bayes_threshold(
    cost_wrong: float, cost_escalate: float, measure: Measure = "max_p", k: int = 2
) -> float:
    """The cost-optimal threshold of "answer the argmax or escalate" for calibrated
    probabilities, on ``measure`` (Chow 1970).

    Answering costs ``c_w`` when wrong (probability ``1 - max p``), escalating ``c_e``
    always; answering is cheaper in expectation when ``(1 - max p) c_w <= c_e``, i.e.
    ``max p >= 1 - c_e / c_w``. Clipped to [0, 1]; ``c_w = 0`` gives 0 (a mistake costs
    nothing: always answer). On the chance-corrected confidence with ``k`` options the same
    rule is :func:`equivalent_threshold` of it (clipped to [0, 1]). Raises ``ValueError``
    for missing, negative or non-finite costs, or an unknown measure.
    """
    c_w, c_e = check_costs(cost_wrong, cost_escalate)
    t = 0.0 if c_w <= 0 else min(1.0, max(0.0, 1.0 - c_e / c_w))
    if measure == "max_p":
        return t
    if measure == "chance_corrected":
        return min(1.0, max(0.0, equivalent_threshold(t, k, "max_p", "chance_corrected")))
    raise ValueError(f"measure must be one of {list(MEASURES)}, got {measure!r}")


def expected_cost(
    confidence: ArrayLike,
    correct: ArrayLike,
    threshold: float,
    cost_wrong: float,
    cost_escalate: float,
) -> dict[str, float]:
    """The cost model of "decide when ``confidence >= threshold``, escalate otherwise":
    :func:`selective_risk` (``coverage``, ``risk``, ``decided``, ``errors``) plus
    ``escalated`` (count) and ``cost``, the expected cost per item
    ``(c_w * #wrong automated + c_e * #escalated) / N`` (a correct automated decision
    costs 0; lower is better). Costs are checked (:func:`check_costs`)."""
    c_w, c_e = check_costs(cost_wrong, cost_escalate)
    out = selective_risk(confidence, correct, threshold)
    n = to_numpy(confidence).size
    out["escalated"] = float(n - out["decided"])
    out["cost"] = (c_w * out["errors"] + c_e * out["escalated"]) / n
    return out


def cost_curve(
    confidence: ArrayLike, correct: ArrayLike, cost_wrong: float, cost_escalate: float
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`expected_cost` per item of "decide when confidence >= t" for every distinct t.

    Returns ``(t, cost)`` ascending in ``t``, in the form
    :func:`rlcd_lab.drawing.plots.threshold_curves` draws: ``cost[j]`` holds for ``t`` in
    ``(t[j-1], t[j]]``; deciding the top ``k`` items (``t = conf_(k)``, ties kept
    together) costs ``(c_w errors_k + c_e (N - k)) / N``, and ``t = 1`` (above every
    confidence below 1) escalates everything. Items are ranked as in
    :func:`rlcd_lab.metrics.confidence_order` (confidence descending, stable on ties).
    """
    c_w, c_e = check_costs(cost_wrong, cost_escalate)
    c, r = _conf_correct(confidence, correct)
    order = metrics.confidence_order(c)
    c, r = c[order], r[order]
    n = c.size
    errors = np.cumsum(~r)
    k = np.arange(1, n + 1)
    ends = np.append(c[1:] < c[:-1], True)  # a tie group ends at k: t = c[k-1] decides k
    t = c[ends]
    cost = (c_w * errors[ends] + c_e * (n - k[ends])) / n
    if c[0] < 1.0:
        t, cost = np.append(1.0, t), np.append(c_e, cost)
    return t[::-1], cost[::-1]


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
    out: dict[str, list[float]] = {
        k: [] for k in ("threshold", "reason_fraction", "accuracy", "brier", "mean_tokens")
    }
    for t in thresholds:
        p, routed = cascade(d, r, float(t))
        out["threshold"].append(float(t))
        out["reason_fraction"].append(float(routed.mean()))
        out["accuracy"].append(float((p.argmax(1) == y).mean()))
        out["brier"].append(float(metrics.item_brier(p, y).mean()))
        out["mean_tokens"].append(float(np.where(routed, tok_r, tok_d).mean()))
    return {k: np.array(v) for k, v in out.items()}


# ------------------------------------------------------------ confidence measures (math)
def max_p_confidence(p: ArrayLike) -> float:
    """``max_k p_k`` of a ``(K,)`` distribution: the probability that its argmax is right,
    when calibrated. In ``[1/K, 1]``."""
    q = to_numpy(p, np.float64).reshape(-1)
    if q.size == 0:
        raise ValueError("need K >= 1 options")
    return float(q.max())


def chance_corrected_confidence(p: Sequence[float] | np.ndarray) -> float:
    """``(K max_k p_k - 1) / (K - 1)`` for a ``(K,)`` distribution, K >= 2; higher is surer.

    0 for the uniform distribution (the model knows nothing beyond chance), 1 for a one-hot
    one; clipped to [0, 1] against float rounding. K = 1 (a single option, certain by
    construction) gives 1. For K = 2 it is ``|2 p_1 - 1| = 2 max p - 1``.
    """
    p = np.asarray(p, dtype=np.float64)
    k = p.shape[-1]
    if k < 1:
        raise ValueError(f"need K >= 1 options, got {k}")
    if k == 1:
        return 1.0
    return float(np.clip((k * p.max() - 1.0) / (k - 1.0), 0.0, 1.0))


def score_confidence(p: Sequence[float] | np.ndarray) -> float:
    """``1 - Var(p) / Var_max`` for a ``(L,)`` distribution over levels 0..L-1, L >= 2.

    ``Var(p) = sum_i p_i (i - mu)^2`` with ``mu = sum_i i p_i``; ``Var_max = (L - 1)^2 / 4``
    is the largest variance on L levels (mass 1/2 on each end). 1 for a point mass, 0 for
    the two-ended split; the uniform p scores ``1 - (L + 1) / (3 (L - 1))`` (0 for L = 2,
    1/2 for L = 5). Higher is surer; clipped to [0, 1]. L = 1 (a point mass by construction)
    gives 1. The chance-corrected measure of an ordinal score: mass on neighbouring levels
    costs less than mass on distant ones.
    """
    p = np.asarray(p, dtype=np.float64)
    n = p.shape[-1]
    if n < 1:
        raise ValueError(f"need L >= 1 levels, got {n}")
    if n == 1:
        return 1.0
    levels = np.arange(n)
    mu = levels @ p
    var = ((levels - mu) ** 2) @ p
    return float(np.clip(1.0 - var / ((n - 1) ** 2 / 4.0), 0.0, 1.0))


def confidence(p: ArrayLike, measure: Measure = "max_p", kind: Kind = "choice") -> float:
    """The confidence of one ``(K,)`` distribution under ``measure``: ``max_p``
    (:func:`max_p_confidence`) or ``chance_corrected`` (:func:`chance_corrected_confidence`;
    for ``kind = "score"`` the ordinal :func:`score_confidence`). Raises ``ValueError`` for
    an unknown measure."""
    if measure == "max_p":
        return max_p_confidence(p)
    if measure == "chance_corrected":
        q = to_numpy(p, np.float64).reshape(-1)
        return score_confidence(q) if kind == "score" else chance_corrected_confidence(q)
    raise ValueError(f"measure must be one of {list(MEASURES)}, got {measure!r}")


def confidences(
    probs: ArrayLike, measure: Measure = "max_p", n_options: ArrayLike | None = None
) -> np.ndarray:
    """:func:`confidence` of every row of ``probs (N, K)`` (choice questions), ``(N,)``.

    ``n_options (N,)``: the number of real options per row when rows are padded with
    zero-probability options (ragged option counts); default ``K`` for every row. The
    chance-corrected value is ``(K_i max p_i - 1) / (K_i - 1)``, 1 where ``K_i = 1``,
    clipped to [0, 1].
    """
    p = to_numpy(probs, np.float64)
    if p.ndim != 2 or p.shape[1] == 0:
        raise ValueError(f"probs must be (N, K) with K >= 1, got shape {p.shape}")
    top = p.max(1) if p.shape[0] else np.zeros(0)
    if measure == "max_p":
        return top
    if measure != "chance_corrected":
        raise ValueError(f"measure must be one of {list(MEASURES)}, got {measure!r}")
    k = np.full(p.shape[0], p.shape[1], np.float64)
    if n_options is not None:
        k = to_numpy(n_options, np.float64).reshape(-1)
        if k.shape != top.shape or (k < 1).any():
            raise ValueError(f"n_options must be (N,) = {top.shape} with every count >= 1")
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.where(k > 1, (k * top - 1.0) / np.maximum(k - 1.0, 1.0), 1.0)
    return np.clip(c, 0.0, 1.0)


def equivalent_threshold(threshold: float, k: int, source: Measure, target: Measure) -> float:
    """The threshold on ``target`` that decides exactly the same ``K = k``-option items as
    ``threshold`` on ``source``.

    ``c = (k m - 1) / (k - 1)`` maps max p ``m`` to the chance-corrected ``c`` (increasing in
    ``m``), so ``m >= t`` iff ``c >= (k t - 1) / (k - 1)`` and ``c >= t`` iff ``m >= (1 +
    (k - 1) t) / k``. E.g. with ``k = 2``: max p 0.9 <-> chance-corrected 0.8. A result
    below 0 (max p thresholds under 1/k) means "every item". Raises ``ValueError`` for
    ``k < 2`` or an unknown measure.
    """
    if k < 2:
        raise ValueError(f"need k >= 2 options, got {k}")
    for m in (source, target):
        if m not in MEASURES:
            raise ValueError(f"measure must be one of {list(MEASURES)}, got {m!r}")
    t = float(threshold)
    if source == target:
        return t
    if source == "max_p":
        return (k * t - 1.0) / (k - 1.0)
    return (1.0 + (k - 1.0) * t) / k
