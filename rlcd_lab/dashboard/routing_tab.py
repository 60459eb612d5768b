"""Routing tab: decide automatically or escalate, on the cached eval dumps of finished runs.

The rule: decide automatically when the single-query confidence ``max_k p_k`` is
``>= t``, escalate otherwise. Per run the dumps (``eval/test.jsonl`` and
``eval/dev.jsonl``) are read once through :func:`rlcd_lab.results.load_run` and cached
by :func:`load_run`: the temperature T fitted on dev (none without a dev dump: the
"temperature-scaled" view of such a run is its raw readout, shown as "not fitted"), the
raw and temperature-scaled test probabilities, and their confidences and correctness
sorted by confidence. A threshold change then only costs O(N) numpy work
per run (:func:`rlcd_lab.routing.selective_risk`) and one figure.

Expected cost per item of the rule, with ``c_w`` the cost of a wrong automated decision
and ``c_e`` the cost of escalating (a correct automated decision costs 0):
``(c_w * #wrong automated + c_e * #escalated) / N``. With calibrated confidences the
cost-optimal threshold is ``1 - c_e / c_w`` (automate when the expected cost of a
mistake ``(1 - conf) c_w`` is at most ``c_e``; Chow 1970).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import gradio as gr
import numpy as np
import plotly.graph_objects as go

from .. import metrics, plots
from ..assets import ASSETS
from ..results import RunResult
from ..results import load_run as load_result
from ..routing import selective_risk, threshold_for_risk
from .common import resolve_dir, short_labels

DEFAULT_THRESHOLD = 0.9
DEFAULT_EPS = 0.05
DEFAULT_COST_WRONG = 10.0
DEFAULT_COST_ESCALATE = 1.0
NOT_FITTED = "not fitted"
"""Shown for T of a run without a dev dump (its "temperature-scaled" view is its raw one)."""
MAX_POINTS = 200
"""Curve points drawn per run (metrics always use every item)."""
RUN_CACHE = 32
LEGEND_BELOW = {"orientation": "h", "yanchor": "top", "y": -0.2, "x": 0}
MARGIN = {"l": 50, "r": 20, "t": 80, "b": 40}

ROUTING_COLUMNS = [
    "run",
    "T",
    "decided",
    "error when decided",
    "escalated",
    "cost / item",
    "dev t @ ε",
    "test decided @ dev t",
    "test error @ dev t",
]
METRIC_COLUMNS = ["run", "accuracy", "Brier", "NLL", "ECE", "AURC", "Cov@ε", "pred. Cov@ε"]
METRIC_COLUMNS += ["T", "mean length"]


@dataclass(frozen=True)
class Scores:
    """One reading of a run's items (raw, or temperature-scaled), in confidence order.

    ``probs (N, K)``, ``labels (N,)``, ``confidence (N,)`` descending (stable on ties,
    :func:`rlcd_lab.metrics.confidence_order`), ``correct (N,)`` bool; the same for dev
    (``None`` when the run has no dev dump).
    """

    probs: np.ndarray
    labels: np.ndarray
    confidence: np.ndarray
    correct: np.ndarray
    dev_confidence: np.ndarray | None
    dev_correct: np.ndarray | None


@dataclass(frozen=True)
class RunData:
    """A run's eval dumps, read once: ``summary`` is :attr:`rlcd_lab.results.RunResult.row`
    (keys ``accuracy``... and, when T was fitted on dev, ``T`` and ``ts_*``); ``T`` is 1
    and ``fitted`` False without a dev dump."""

    name: str
    T: float
    fitted: bool
    summary: dict
    raw: Scores
    scaled: Scores

    def scores(self, calibrated: bool) -> Scores:
        """Temperature-scaled scores when ``calibrated``, else the raw readout."""
        return self.scaled if calibrated else self.raw

    def metric(self, key: str, calibrated: bool) -> float:
        """A summary metric, after temperature scaling when ``calibrated`` (and fitted)."""
        ts = f"ts_{key}"
        return float(self.summary[ts if calibrated and ts in self.summary else key])


def _ranked(probs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, ...]:
    conf, correct = metrics.confidence_and_correct(probs, labels)
    order = metrics.confidence_order(conf)
    return probs[order], labels[order], conf[order], correct[order]


def _scores(result: RunResult, calibrated: bool) -> Scores:
    probs, labels, conf, correct = _ranked(result.probs(calibrated), result.labels)
    dev_conf = dev_correct = None
    dev = result.dev_probs(calibrated)
    if dev is not None:
        _, _, dev_conf, dev_correct = _ranked(dev, result.dev_labels)
    return Scores(probs, labels, conf, correct, dev_conf, dev_correct)


def run_data(name: str, result: RunResult) -> RunData:
    """Precompute everything the Routing tab needs from a run's
    :class:`rlcd_lab.results.RunResult` (T fitted on dev, or 1 and not fitted without a
    dev dump); single-query readouts (``logits``) are what gets routed, as in the
    paper's Table 1."""
    return RunData(
        name, result.T, result.fitted, result.row, _scores(result, False), _scores(result, True)
    )


@lru_cache(maxsize=RUN_CACHE)
def _load(path: str, stamp: tuple[int, int], name: str) -> RunData:
    return run_data(name, load_result(path))


def load_run(name: str, root: str | Path = ASSETS) -> RunData:
    """The cached :class:`RunData` of a shipped run name or a run directory path (re-read
    when its dumps change on disk). Raises ``gr.Error`` for a missing or unreadable run."""
    path = resolve_dir(name, root, "eval/test.jsonl", "run")
    dev = path / "eval" / "dev.jsonl"
    stamp = (
        (path / "eval/test.jsonl").stat().st_mtime_ns,
        dev.stat().st_mtime_ns if dev.exists() else 0,
    )
    try:
        return _load(str(path.resolve()), stamp, name)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
        raise gr.Error(f"run {name!r}: could not read its eval dumps ({err})") from None


def route(scores: Scores, threshold: float, cost_wrong: float, cost_escalate: float) -> dict:
    """Routing numbers at ``threshold``: :func:`rlcd_lab.routing.selective_risk`
    (``coverage``, ``risk``, ``decided``, ``errors``) plus ``escalated`` (count) and
    ``cost`` (expected cost per item, see the module docstring; lower is better)."""
    out = selective_risk(scores.confidence, scores.correct, threshold)
    n = scores.confidence.size
    out["escalated"] = float(n - out["decided"])
    out["cost"] = (cost_wrong * out["errors"] + cost_escalate * out["escalated"]) / n
    return out


def cost_curve(scores: Scores, cost_wrong: float, cost_escalate: float) -> tuple[np.ndarray, ...]:
    """Expected cost per item of "decide when confidence >= t" for every distinct t.

    Returns ``(t, cost)`` ascending in ``t``, in the form :func:`rlcd_lab.plots.threshold_curves`
    draws: ``cost[j]`` holds for ``t`` in ``(t[j-1], t[j]]``; deciding the top ``k`` items
    (``t = conf_(k)``, ties kept together) costs ``(c_w errors_k + c_e (N - k)) / N``,
    and ``t = 1`` (above every confidence below 1) escalates everything.
    """
    c = scores.confidence
    n = c.size
    errors = np.cumsum(~scores.correct)
    k = np.arange(1, n + 1)
    ends = np.append(c[1:] < c[:-1], True)  # a tie group ends at k: t = c[k-1] decides k
    t = c[ends]
    cost = (cost_wrong * errors[ends] + cost_escalate * (n - k[ends])) / n
    if c[0] < 1.0:
        t, cost = np.append(1.0, t), np.append(cost_escalate, cost)
    return t[::-1], cost[::-1]


def bayes_threshold(cost_wrong: float, cost_escalate: float) -> float:
    """``1 - c_e / c_w`` clipped to ``[0, 1]``: the cost-optimal threshold for calibrated
    confidences (automate when ``(1 - conf) c_w <= c_e``)."""
    _check_costs(cost_wrong, cost_escalate)
    if cost_wrong <= 0:
        return 0.0
    return float(min(1.0, max(0.0, 1.0 - cost_escalate / cost_wrong)))


def _check_costs(cost_wrong: float | None, cost_escalate: float | None) -> None:
    if cost_wrong is None or cost_escalate is None:
        raise gr.Error("enter both costs (a wrong automated decision, an escalation)")
    if cost_wrong < 0 or cost_escalate < 0:
        raise gr.Error("costs must be non-negative")


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _thr(t: float) -> str:
    return "none" if math.isinf(t) else f"{t:.3f}"


def routing_update(
    runs: Sequence[str] | None,
    threshold: float,
    eps: float,
    cost_wrong: float,
    cost_escalate: float,
    calibrated: bool = True,
    root: str | Path = ASSETS,
) -> tuple[str, dict, dict, go.Figure, dict]:
    """The live routing view: ``(summary markdown, routing table, metrics table,
    risk-coverage figure with each run's operating point at the threshold, exact numbers)``;
    tables are ``{"headers": [...], "data": [[...], ...]}`` (formatted strings).

    Per run: coverage, error when decided, escalations and expected cost at
    ``threshold``; Cov@eps (oracle) and label-free Cov@eps at ``eps``; the lowest
    threshold whose *dev* error is ``<= eps`` (:func:`rlcd_lab.routing.threshold_for_risk`)
    and what it gives on test. Only O(N) work per run once the runs are cached. ``T`` in
    the exact numbers is the fitted temperature (1 in the raw view; None, shown as "not
    fitted", for a run without a dev dump in the temperature-scaled view).
    """
    _check_costs(cost_wrong, cost_escalate)
    runs = list(runs or [])
    if not runs:
        empty = {"headers": ROUTING_COLUMNS, "data": []}
        return (
            "Select one or more runs.",
            empty,
            {"headers": METRIC_COLUMNS, "data": []},
            go.Figure(),
            {},
        )
    if not 0 < eps < 1:
        raise gr.Error("the error budget eps must be in (0, 1)")
    labels = short_labels(runs)
    kind = "temperature-scaled" if calibrated else "raw"
    curves, marks, numbers, route_rows, metric_rows = {}, {}, {}, [], []
    for name in runs:
        data = load_run(name, root)
        s = data.scores(calibrated)
        r = route(s, threshold, cost_wrong, cost_escalate)
        t_dev = (
            threshold_for_risk(s.dev_confidence, s.dev_correct, eps)
            if s.dev_confidence is not None
            else math.inf
        )
        at_dev = selective_risk(s.confidence, s.correct, t_dev)
        cov_eps = metrics.coverage_at_risk(s.confidence, s.correct, eps)
        pred_cov = metrics.predicted_coverage_at_risk(s.confidence, eps)
        T = (data.T if data.fitted else None) if calibrated else 1.0  # None: not fitted
        t_cell = NOT_FITTED if T is None else f"{T:.3f}"
        label = labels[name]
        curves[label] = (s.confidence, s.correct)
        marks[label] = (r["coverage"], r["risk"])
        n = s.confidence.size
        numbers[name] = {
            "n": n,
            "T": T,
            "fitted": data.fitted,
            **r,
            "cov_at_eps": cov_eps,
            "pred_cov_at_eps": pred_cov,
            "dev_threshold": None if math.isinf(t_dev) else t_dev,
            "test_coverage_at_dev_threshold": at_dev["coverage"],
            "test_risk_at_dev_threshold": at_dev["risk"],
            **{k: data.metric(k, calibrated) for k in ("accuracy", "brier", "nll", "ece", "aurc")},
        }
        route_rows.append(
            [
                label,
                t_cell,
                f"{_pct(r['coverage'])} ({int(r['decided'])}/{n})",
                f"{_pct(r['risk'])} ({int(r['errors'])} wrong)",
                f"{int(r['escalated'])}",
                f"{r['cost']:.3f}",
                _thr(t_dev),
                _pct(at_dev["coverage"]),
                _pct(at_dev["risk"]),
            ]
        )
        m = numbers[name]
        metric_rows.append(
            [label]
            + [f"{m[k]:.4f}" for k in ("accuracy", "brier", "nll", "ece", "aurc")]
            + [f"{cov_eps:.3f}", f"{pred_cov:.3f}", t_cell]
            + [f"{data.summary['mean_length']:.1f}"]
        )
    fig = plots.risk_coverage_figure(
        curves,
        eps=eps,
        oracle="none",
        title=f"Risk-coverage, {kind} (◆ at t, ▲ Cov@ε)",
        max_points=MAX_POINTS,
        marks=marks,
        mark_label=f"at t = {threshold:.3f}",
        cov_style="markers",
    )
    fig.update_layout(legend=LEGEND_BELOW, margin=MARGIN)
    best = min(numbers, key=lambda k: numbers[k]["cost"])
    summary = (
        f"Decide automatically when the {kind} "
        f"single-query confidence is **≥ t = {threshold:.3f}**, escalate otherwise. "
        f"Expected cost per item = ({cost_wrong:g} × wrong automated decisions + "
        f"{cost_escalate:g} × escalations) / N; lowest here: **{labels[best]}** "
        f"({numbers[best]['cost']:.3f}). For calibrated confidences the cost-optimal "
        f"threshold is 1 − {cost_escalate:g}/{cost_wrong:g} = "
        f"**{bayes_threshold(cost_wrong, cost_escalate):.3f}**. "
        f"Error budget ε = {eps:g}: Cov@ε is the largest share decidable at observed error "
        f"≤ ε (oracle); the dev threshold is the lowest t with dev error ≤ ε, applied to test."
    )
    unfitted = [labels[n] for n in runs if not numbers[n]["fitted"]]
    if calibrated and unfitted:
        summary += (
            f" T {NOT_FITTED} (no dev dump) for {', '.join(unfitted)}: shown unscaled, "
            "without a dev threshold."
        )
    result = {
        "threshold": threshold,
        "eps": eps,
        "cost_wrong": cost_wrong,
        "cost_escalate": cost_escalate,
        "calibrated": bool(calibrated),
        "runs": numbers,
    }
    return (
        summary,
        {"headers": ROUTING_COLUMNS, "data": route_rows},
        {"headers": [c.replace("ε", f"{eps:g}") for c in METRIC_COLUMNS], "data": metric_rows},
        fig,
        result,
    )


def routing_figures(
    runs: Sequence[str] | None,
    cost_wrong: float,
    cost_escalate: float,
    calibrated: bool = True,
    root: str | Path = ASSETS,
) -> tuple[go.Figure, go.Figure]:
    """The figures that do not move with the threshold: reliability curves of the runs
    and their expected cost per item against the threshold."""
    _check_costs(cost_wrong, cost_escalate)
    runs = list(runs or [])
    if not runs:
        return go.Figure(), go.Figure()
    labels = short_labels(runs)
    data = {labels[n]: load_run(n, root).scores(calibrated) for n in runs}
    kind = "temperature-scaled" if calibrated else "raw"
    reliability = plots.reliability_curves(
        {k: (s.probs, s.labels) for k, s in data.items()}, title=f"Reliability on test ({kind})"
    )
    costs = plots.threshold_curves(
        {k: cost_curve(s, cost_wrong, cost_escalate) for k, s in data.items()},
        vlines={"1 − c_e/c_w": bayes_threshold(cost_wrong, cost_escalate)},
        title=f"Expected cost per item vs t, {kind} (○ lowest)",
        max_points=4 * MAX_POINTS,
    )
    costs.update_layout(legend=LEGEND_BELOW, margin=MARGIN)
    reliability.update_layout(margin=MARGIN)
    return reliability, costs
