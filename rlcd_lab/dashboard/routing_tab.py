"""Routing tab: decide automatically or escalate, on the cached eval dumps of finished runs.

Start at :func:`routing_update` (the tab's callback): the runs' dumps (:func:`load_run`),
the rule (:func:`make_rule`, the same :class:`rlcd_lab.math.routing.DecisionRule` the Ask
tab and the server apply), the decisions and their cost (:func:`route`,
:func:`cost_curve`, :func:`bayes_threshold`); :func:`routing_figures` draws them.
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

from rlcd_lab import metrics
from rlcd_lab.dashboard import routing_words
from rlcd_lab.dashboard.common import resolve_dir, short_labels
from rlcd_lab.drawing import plots
from rlcd_lab.files import rundir
from rlcd_lab.files.assets import ASSETS
from rlcd_lab.files.io import jsonl_path
from rlcd_lab.math import routing
from rlcd_lab.math.routing import (
    DEFAULT_THRESHOLD,
    DecisionRule,
    selective_risk,
    threshold_for_coverage,
    threshold_for_risk,
)
from rlcd_lab.reports.results import Ranked, RunResult, RunView, rank
from rlcd_lab.reports.results import load_run as load_result

MEASURE_CHOICES = [("max p", "max_p"), ("chance-corrected", "chance_corrected")]
AGGREGATE_CHOICES = [("first rationale (single query)", "single"), ("mixture of M", "mixture")]
BAYES_LINE = {"max_p": "1 − c_e/c_w", "chance_corrected": "cost-optimal t (chance-corrected)"}
"""Legend of the cost-optimal threshold's line in the cost figure, per measure."""
HALF = 0.5  # the share of items the nothing-decided note quotes a threshold for
DEFAULT_COST_WRONG = 10.0
DEFAULT_COST_ESCALATE = 1.0
NOTHING_DECIDED = "nothing decided"  # the error when decided of a threshold deciding no item
NOT_FITTED = "not fitted"
"""Shown for T of a run without a dev dump (its "temperature-scaled" view is its raw one)."""
MAX_POINTS = 200  # curve points drawn per run (metrics always use every item)
RUN_CACHE = 32
LEGEND_BELOW = {"orientation": "h", "yanchor": "top", "y": -0.2, "x": 0}
MARGIN = {"l": 50, "r": 20, "t": 80, "b": 40}

Scores = Ranked
"""One reading of a run's items ranked by the rule's confidence
(:class:`rlcd_lab.reports.results.Ranked`: ``probs``, ``labels``, ``confidence`` descending,
``correct``, and dev's ``dev_confidence`` / ``dev_correct``, None without a dev dump)."""
make_scores = rank
""":func:`rlcd_lab.reports.results.rank`: :class:`Scores` of ``probs (N, K)`` with ``labels``."""


@dataclass(frozen=True)
class RunData:
    """A run's eval dumps, read once: ``summary`` is :attr:`rlcd_lab.reports.results.RunResult.row`
    (keys ``accuracy``... and, when T was fitted on dev, ``T`` and ``ts_*``); ``T`` is 1
    and ``fitted`` False without a dev dump. Each view (raw or scaled, single query or
    mixture) is the run's :meth:`rlcd_lab.reports.results.RunResult.view`, cached there."""

    name: str
    T: float
    fitted: bool
    summary: dict
    result: RunResult

    @property
    def raw(self) -> Scores:
        """Raw single-query readouts, max p."""
        return self.scores(False)

    @property
    def scaled(self) -> Scores:
        """Temperature-scaled single-query readouts, max p."""
        return self.scores(True)

    def view(self, calibrated: bool = True, aggregate: str = "single") -> RunView:
        """The run's :class:`rlcd_lab.reports.results.RunView`."""
        return self.result.view(calibrated, aggregate)

    def mixture_m(self) -> int:
        """Rationales per item of the mixture view (1: the dumps hold only single queries)."""
        return self.view(True, "mixture").m

    def probs(self, calibrated: bool = True, aggregate: str = "single") -> np.ndarray:
        """Test probabilities ``(N, K)`` of the view (:meth:`RunResult.view`)."""
        return self.view(calibrated, aggregate).probs

    def scores(self, calibrated: bool, measure: str = "max_p", aggregate: str = "single") -> Scores:
        """The items ranked under a view (cached): dev is always the single query."""
        return self.view(calibrated, aggregate).ranked(measure)

    def metric(self, key: str, calibrated: bool) -> float:
        """A summary metric, after temperature scaling when ``calibrated`` (and fitted)."""
        ts = f"ts_{key}"
        return float(self.summary[ts if calibrated and ts in self.summary else key])

    def table_metrics(self, calibrated: bool, aggregate: str, eps: float) -> dict[str, float]:
        """Table 1 metrics of the view's readout (:meth:`rlcd_lab.reports.results.RunView.metrics`,
        max p): accuracy, brier, nll, ece, aurc, cov_at_eps, pred_cov_at_eps."""
        return self.view(calibrated, aggregate).metrics(eps)


def run_data(name: str, result: RunResult) -> RunData:
    """Everything the Routing tab needs from a run's :class:`rlcd_lab.reports.results.RunResult`
    (T fitted on dev, or 1 and not fitted without a dev dump); single-query readouts
    (``logits``) are routed by default, as in the paper's Table 1."""
    return RunData(name, result.T, result.fitted, result.row, result)


@lru_cache(maxsize=RUN_CACHE)
def _load(path: str, stamp: tuple[int, ...], name: str) -> RunData:
    return run_data(name, load_result(path))


def load_run(name: str, root: str | Path = ASSETS) -> RunData:
    """The cached :class:`RunData` of a shipped run name or a run directory path (re-read
    when its dumps change on disk). Raises ``gr.Error`` for a missing or unreadable run.

    T is fitted on dev (without a dev dump the "temperature-scaled" view is the raw readout,
    shown as "not fitted"); each view is ranked once and cached, so a threshold change costs
    O(N) numpy work per run and one figure."""
    path = resolve_dir(name, root, rundir.TEST_DUMP, "run")
    files = [rundir.eval_path(path, "test"), rundir.eval_path(path, "dev")]
    files += [jsonl_path(f) for _, f in rundir.mixture_dumps(path)]
    stamp = tuple(f.stat().st_mtime_ns if f.exists() else 0 for f in files)
    try:
        return _load(str(path.resolve()), stamp, name)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
        raise gr.Error(f"run {name!r}: could not read its eval dumps ({err})") from None


def route(scores: Scores, threshold: float, cost_wrong: float, cost_escalate: float) -> dict:
    """Routing numbers at ``threshold``: :func:`rlcd_lab.math.routing.expected_cost`
    (``coverage``, ``risk``, ``decided``, ``errors``, ``escalated`` and ``cost``, the
    expected cost per item, below; lower is better).

    Expected cost per item of the rule, with ``c_w`` the cost of a wrong automated decision
    and ``c_e`` the cost of escalating (a correct automated decision costs 0):
    ``(c_w * #wrong automated + c_e * #escalated) / N``. With calibrated confidences the
    cost-optimal max-p threshold is ``1 - c_e / c_w`` (automate when the expected cost of a
    mistake ``(1 - max p) c_w`` is at most ``c_e``; Chow 1970; ``routing.bayes_threshold``).
    """
    return routing.expected_cost(
        scores.confidence, scores.correct, threshold, cost_wrong, cost_escalate
    )


def cost_curve(scores: Scores, cost_wrong: float, cost_escalate: float) -> tuple[np.ndarray, ...]:
    """Expected cost per item of "decide when confidence >= t" for every distinct t
    (:func:`rlcd_lab.math.routing.cost_curve`): ``(t, cost)`` ascending in ``t``, ``cost[j]``
    holding for ``t`` in ``(t[j-1], t[j]]``; ``t = 1`` escalates everything."""
    return routing.cost_curve(scores.confidence, scores.correct, cost_wrong, cost_escalate)


def bayes_threshold(
    cost_wrong: float, cost_escalate: float, measure: str = "max_p", k: int = 2
) -> float:
    """The cost-optimal threshold for calibrated confidences
    (:func:`rlcd_lab.math.routing.bayes_threshold`; max p: ``1 - c_e / c_w`` clipped to
    ``[0, 1]``); routing's ``ValueError`` for bad costs comes back as ``gr.Error``."""
    try:
        return routing.bayes_threshold(cost_wrong, cost_escalate, measure, k)  # type: ignore[arg-type]
    except ValueError as err:
        raise gr.Error(str(err)) from None


def _check_costs(cost_wrong: float | None, cost_escalate: float | None) -> None:
    try:
        routing.check_costs(cost_wrong, cost_escalate)
    except ValueError as err:
        raise gr.Error(str(err)) from None


def make_rule(threshold: float, measure: str = "max_p", aggregate: str = "single") -> DecisionRule:
    """The tab's :class:`rlcd_lab.math.routing.DecisionRule`; bad values raise ``gr.Error``.

    Decide automatically when the confidence (``max_p`` by default, or ``chance_corrected``)
    of the readout (``single``, the first rationale's, by default; or ``mixture``, the mean
    of the run's largest ``eval/test-m<M>.jsonl`` dump) is ``>= t``, escalate otherwise."""
    try:
        return DecisionRule(measure, threshold, aggregate)  # type: ignore[arg-type]
    except ValueError as err:
        raise gr.Error(str(err)) from None


def nothing_decided_note(label: str, scores: Scores, threshold: float, share: float = HALF) -> str:
    """Why a threshold decides none of a run's items, in words ("" when it decides some):
    the run's highest confidence, and the highest threshold that decides ``share`` of the
    items (:func:`rlcd_lab.math.routing.threshold_for_coverage`) with its coverage and error.

    The run's error when decided then reads :data:`NOTHING_DECIDED`, not 0%."""
    c = scores.confidence
    if c.size == 0 or c.max() >= threshold:
        return ""
    t = threshold_for_coverage(c, share)
    at = selective_risk(c, scores.correct, t)
    return (
        f"**{label}**: highest confidence {c.max():.3f} < t = {threshold:.3f}; "
        f"t = {t:.3f} would decide {_pct(at['coverage'])} ({int(at['decided'])}/{c.size}) "
        f"at error {_pct(at['risk'])}"
    )


def _pct(x: float | None) -> str:
    return NOTHING_DECIDED if x is None else f"{100 * x:.1f}%"  # None: an error over no items


def _thr(t: float | None) -> str:
    return "none" if t is None else f"{t:.3f}"


def _k(data: RunData) -> int:
    """Options per item of a run (the most, when they vary)."""
    return int(data.result.logits.shape[1])


def degenerate_reason(data: RunData, scores: Scores) -> str:
    """Why a run is left out of the figures, "" when drawn (``routing_words.chance_reason``)."""
    t, length = (data.T if data.fitted else None), data.summary.get("mean_length")
    return routing_words.chance_reason(scores.confidence, _k(data), t, length)


def bayes_for_runs(
    cost_wrong: float,
    cost_escalate: float,
    measure: str = "max_p",
    runs: Sequence[str] | None = None,
    root: str | Path = ASSETS,
) -> float:
    """The "set t" button: :func:`bayes_threshold` on ``measure``, with the option count K
    of the first selected run (2 without one; only the chance-corrected value depends on K)."""
    runs = list(runs or [])
    k = _k(load_run(runs[0], root)) if runs and measure == "chance_corrected" else 2
    return bayes_threshold(cost_wrong, cost_escalate, measure, k)


def _run_numbers(
    data: RunData, rule: DecisionRule, eps: float, costs: tuple[float, float], calibrated: bool
) -> tuple[dict, Scores]:
    """One run's exact numbers under ``rule`` (see :func:`routing_update`) and its ranked
    items."""
    s = data.scores(calibrated, rule.measure, rule.aggregate)
    r = route(s, rule.threshold, *costs)
    t_dev = (
        threshold_for_risk(s.dev_confidence, s.dev_correct, eps)
        if s.dev_confidence is not None
        else math.inf
    )
    at_dev = selective_risk(s.confidence, s.correct, t_dev)
    table = data.table_metrics(calibrated, rule.aggregate, eps)
    numbers = {
        "n": s.confidence.size,
        "m": data.mixture_m() if rule.aggregate == "mixture" else 1,
        "T": (data.T if data.fitted else None) if calibrated else 1.0,  # None: not fitted
        "fitted": data.fitted,
        **r,
        "risk": r["risk"] if r["decided"] else None,  # None: nothing decided (undefined)
        "cov_at_eps": metrics.coverage_at_risk(s.confidence, s.correct, eps),
        "pred_cov_at_eps": table["pred_cov_at_eps"],
        "dev_threshold": None if math.isinf(t_dev) else t_dev,
        "test_coverage_at_dev_threshold": at_dev["coverage"],
        "test_risk_at_dev_threshold": at_dev["risk"] if at_dev["decided"] else None,
        "threshold_for_half": threshold_for_coverage(s.confidence, HALF),
        "max_confidence": float(s.confidence.max()),
        **{k: table[k] for k in ("accuracy", "brier", "nll", "ece", "aurc")},
    }
    return numbers, s


def _t_cell(x: dict) -> str:
    return NOT_FITTED if x["T"] is None else f"{x['T']:.3f}"


def _route_row(label: str, x: dict) -> list[str]:
    """A row of the routing table from a run's numbers (:func:`_run_numbers`)."""
    return [
        label,
        _t_cell(x),
        f"{_pct(x['coverage'])} ({int(x['decided'])}/{x['n']})",
        NOTHING_DECIDED if x["risk"] is None else f"{_pct(x['risk'])} ({int(x['errors'])} wrong)",
        f"{int(x['escalated'])}",
        f"{x['cost']:.3f}",
        _thr(x["dev_threshold"]),
        _pct(x["test_coverage_at_dev_threshold"]),
        _pct(x["test_risk_at_dev_threshold"]),
    ]


def _metric_row(label: str, x: dict, data: RunData) -> list[str]:
    """A row of the metrics table from a run's numbers (:func:`_run_numbers`)."""
    return (
        [label]
        + [f"{x[k]:.4f}" for k in ("accuracy", "brier", "nll", "ece", "aurc")]
        + [f"{x['cov_at_eps']:.3f}", f"{x['pred_cov_at_eps']:.3f}", _t_cell(x)]
        + [f"{data.summary['mean_length']:.1f}"]
    )


def _readout_words(rule: DecisionRule, ms: Sequence[int]) -> str:
    if rule.aggregate == "single":
        return "single query (first rationale)"
    mixed = sorted(set(ms))
    return f"mixture of M = {'/'.join(map(str, mixed))} rationales per item" + (
        " (M = 1: the run's dumps hold one rationale per item)" if 1 in mixed else ""
    )


def _summary(
    rule: DecisionRule,
    numbers: dict[str, dict],
    labels: dict[str, str],
    ks: Sequence[int],
    eps: float,
    costs: tuple[float, float],
    calibrated: bool,
    notes: Sequence[str],
) -> str:
    """The routing view's summary markdown: the rule, the cost model and its lowest-cost
    run, the cost-optimal threshold, runs without a fitted T and runs nothing decided."""
    cost_wrong, cost_escalate = costs
    kind = "temperature-scaled" if calibrated else "raw"
    best = min(numbers, key=lambda k: numbers[k]["cost"])
    bayes = bayes_threshold(cost_wrong, cost_escalate, rule.measure, max(ks))
    readout = _readout_words(rule, [x["m"] for x in numbers.values()])
    summary = (
        f"**Rule:** {rule.describe(max(ks) if len(set(ks)) == 1 else None)} "
        f"({kind} readouts, {readout}; the Ask tab and the server decide with the same "
        f"`rlcd_lab.math.routing` rule). "
        f"Expected cost per item = ({cost_wrong:g} × wrong automated decisions + "
        f"{cost_escalate:g} × escalations) / N; lowest here: **{labels[best]}** "
        f"({numbers[best]['cost']:.3f}). For calibrated confidences the cost-optimal "
        f"threshold is **{bayes:.3f}** (max p ≥ 1 − {cost_escalate:g}/{cost_wrong:g}). "
        f"Error budget ε = {eps:g}: Cov@ε is the largest share decidable at observed error "
        f"≤ ε (oracle); the dev threshold is the lowest t with dev error ≤ ε, applied to test."
    )
    unfitted = [labels[n] for n, x in numbers.items() if not x["fitted"]]
    if calibrated and unfitted:
        summary += (
            f" T {NOT_FITTED} (no dev dump) for {', '.join(unfitted)}: shown unscaled, "
            "without a dev threshold."
        )
    if notes:
        summary += (
            f"\n\n**Nothing decided for {len(notes)} of {len(numbers)} runs.** A threshold "
            "above every confidence of a run escalates all of its items: that is the rule "
            "working, not a failure. After temperature scaling the tiny models' confidences "
            "are honest, and they are rarely this high. Lower t (or pick a cost) to decide "
            "some:\n" + "\n".join(f"- {note}" for note in notes)
        )
    return summary


def _risk_figure(
    ranked: dict[str, Scores], numbers: dict[str, dict], rule: DecisionRule, eps: float, kind: str
) -> go.Figure:
    """Risk-coverage curves of the runs (by label), each deciding run's point at the threshold."""
    fig = plots.risk_coverage_figure(
        {label: (s.confidence, s.correct) for label, s in ranked.items()},
        eps=eps,
        oracle="none",
        title=f"Risk-coverage, {kind}<br><sub>◆ at t, ▲ Cov@ε</sub>",
        max_points=MAX_POINTS,
        marks={k: (x["coverage"], x["risk"]) for k, x in numbers.items() if x["risk"] is not None},
        mark_label=f"at t = {rule.threshold:.3f}",
        cov_style="markers",
    )
    fig.update_layout(legend=LEGEND_BELOW, margin=MARGIN)
    return plots.apply_theme(fig)


def routing_update(
    runs: Sequence[str] | None,
    threshold: float,
    eps: float,
    cost_wrong: float,
    cost_escalate: float,
    calibrated: bool = True,
    measure: str = "max_p",
    aggregate: str = "single",
    root: str | Path = ASSETS,
) -> tuple[str, dict, dict, go.Figure, dict]:
    """The live routing view: ``(summary markdown, routing table, metrics table,
    risk-coverage figure with each run's operating point at the threshold, exact numbers)``;
    tables are ``{"headers": [...], "data": [[...], ...]}`` (formatted strings); a run at
    chance keeps its rows, left out of the figure (:func:`degenerate_reason`, said why).

    The rule is ``DecisionRule(measure, threshold, aggregate)`` (see the module
    docstring); the summary names it. Per run: coverage, error when decided, escalations
    and expected cost at ``threshold``; Cov@eps (oracle, on the rule's confidence) and
    label-free Cov@eps at ``eps``; the lowest threshold whose *dev* error is ``<= eps``
    (:func:`rlcd_lab.math.routing.threshold_for_risk`, dev read as a single query) and what it
    gives on test; when nothing is decided, why (:func:`nothing_decided_note`). Only O(N)
    work per run once a view is cached. ``T`` in the exact numbers is the fitted temperature
    (1 in the raw view; None, shown as "not fitted", for a run without a dev dump in the
    temperature-scaled view); ``m`` the rationales per item of the readout; ``risk`` and
    ``test_risk_at_dev_threshold`` are None where nothing is decided."""
    _check_costs(cost_wrong, cost_escalate)
    rule = make_rule(threshold, measure, aggregate)
    runs = list(runs or [])
    if not runs:
        return (
            "Select one or more runs.",
            {"headers": routing_words.ROUTING_COLUMNS, "data": []},
            {"headers": routing_words.METRIC_COLUMNS, "data": []},
            plots.apply_theme(go.Figure()),
            {},
        )
    if not 0 < eps < 1:
        raise gr.Error("the error budget eps must be in (0, 1)")
    labels = short_labels(runs)
    costs = (cost_wrong, cost_escalate)
    numbers, ranked, route_rows, metric_rows, notes, ks, left_out = {}, {}, [], [], [], [], {}
    for name in runs:
        data = load_run(name, root)
        ks.append(_k(data))
        x, s = _run_numbers(data, rule, eps, costs, calibrated)
        numbers[name], ranked[labels[name]] = x, s
        if why := degenerate_reason(data, s):
            left_out[labels[name]] = why
        route_rows.append(_route_row(labels[name], x))
        metric_rows.append(_metric_row(labels[name], x, data))
        if note := nothing_decided_note(labels[name], s, rule.threshold):
            notes.append(note)
    kind = "temperature-scaled" if calibrated else "raw"
    left_out = left_out if len(left_out) < len(ranked) else {}  # all at chance: draw all
    drawn = {k: s for k, s in ranked.items() if k not in left_out}
    by_label = {labels[n]: x for n, x in numbers.items() if labels[n] in drawn}
    fig = _risk_figure(drawn, by_label, rule, eps, kind)
    summary = _summary(rule, numbers, labels, ks, eps, costs, calibrated, notes)
    summary += routing_words.left_out_note(left_out)
    metric_heads = [c.replace("ε", f"{eps:g}") for c in routing_words.METRIC_COLUMNS]
    result = {
        "threshold": rule.threshold,
        "measure": rule.measure,
        "aggregate": rule.aggregate,
        "rule": rule.describe(),
        "eps": eps,
        "cost_wrong": cost_wrong,
        "cost_escalate": cost_escalate,
        "calibrated": bool(calibrated),
        "runs": numbers,
    }
    return (
        summary,
        {"headers": routing_words.ROUTING_COLUMNS, "data": route_rows},
        {"headers": metric_heads, "data": metric_rows},
        fig,
        result,
    )


def routing_figures(
    runs: Sequence[str] | None,
    cost_wrong: float,
    cost_escalate: float,
    calibrated: bool = True,
    measure: str = "max_p",
    aggregate: str = "single",
    root: str | Path = ASSETS,
) -> tuple[go.Figure, go.Figure]:
    """The figures that do not move with the threshold: reliability curves of the runs
    (max p of the view's readout) and their expected cost per item against the threshold
    on the rule's confidence; runs at chance left out (:func:`degenerate_reason`)."""
    _check_costs(cost_wrong, cost_escalate)
    make_rule(DEFAULT_THRESHOLD, measure, aggregate)
    runs = list(runs or [])
    if not runs:
        return plots.apply_theme(go.Figure()), plots.apply_theme(go.Figure())
    labels = short_labels(runs)
    loaded = {labels[n]: load_run(n, root) for n in runs}
    data = {k: d.scores(calibrated, measure, aggregate) for k, d in loaded.items()}
    drawn = [k for k in loaded if not degenerate_reason(loaded[k], data[k])] or list(loaded)
    loaded, data = {k: loaded[k] for k in drawn}, {k: data[k] for k in drawn}
    kind = "temperature-scaled" if calibrated else "raw"
    reliability = plots.reliability_curves(
        {k: (d.probs(calibrated, aggregate), d.result.labels) for k, d in loaded.items()},
        title=f"Reliability on test ({kind})",
    )
    k = max(_k(d) for d in loaded.values())
    costs = plots.threshold_curves(
        {k: cost_curve(s, cost_wrong, cost_escalate) for k, s in data.items()},
        vlines={BAYES_LINE[measure]: bayes_threshold(cost_wrong, cost_escalate, measure, k)},
        title=f"Expected cost per item vs t<br><sub>{kind}; ○ lowest</sub>",
        max_points=4 * MAX_POINTS,
    )
    costs.update_layout(legend=LEGEND_BELOW, margin=MARGIN)
    reliability.update_layout(legend=LEGEND_BELOW, margin=MARGIN, height=560)
    return plots.apply_theme(reliability), plots.apply_theme(costs)
