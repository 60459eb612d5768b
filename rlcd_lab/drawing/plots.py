"""Plotly figures for calibration, selective prediction, rationales and training logs.

Every function returns a ``plotly.graph_objects.Figure`` and writes nothing; numbers are
computed by :mod:`rlcd_lab.metrics` so a figure always shows the same values as the
tables. Data arrays are stored as plain lists (``fig.to_dict()`` is readable JSON) and
the exact metric values behind a label are kept in each trace's ``meta`` dict.
:func:`training_curves` and :func:`compare_curves` may read ``log.jsonl`` files when given
paths (read only).

References: Guo et al. 2017 (reliability diagrams), Geifman & El-Yaniv 2017 and
Geifman et al. 2019 (risk-coverage curves, AURC), OpenJev-RLCD sec. 5 (Cov@eps).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from rlcd_lab import metrics
from rlcd_lab.files.io import read_jsonl
from rlcd_lab.metrics import DEFAULT_EPS, ArrayLike, to_numpy

COLORS = (
    "#636efa",
    "#EF553B",
    "#00cc96",
    "#ab63fa",
    "#FFA15A",
    "#19d3f3",
    "#FF6692",
    "#B6E880",
    "#FF97FF",
    "#FECB52",
    # 14 more, darker than plotly's ten and far from them: 24 distinct line colours
    "#2E91E5",
    "#1CA71C",
    "#B68100",
    "#862A16",
    "#6C7C32",
    "#778AAE",
    "#B2828D",
    "#DA16FF",
    "#AF0038",
    "#00A08B",
    "#750D86",
    "#511CFB",
    "#6C4516",
    "#FC0080",
)
"""Trace colours in order: plotly's default ten, then 14 more (from plotly's Dark24), so
that up to 24 models on one figure get distinct colours."""
LEGEND_ENTRY_PX = 22
"""Height of one legend entry (plotly's default 12 px font and the gap), rounded up."""
X_MARGIN = 0.05
""":func:`threshold_curves`' x axis: margin on each side, as a share of the data's span."""
DEFAULT_HEIGHT, DEFAULT_TOP = 450, 100
"""Plotly's default figure height and top margin, in px."""


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def _legend_height(entries: int) -> int | None:
    """A figure height whose right-hand legend of ``entries`` entries fits below the top
    margin (plotly scrolls, i.e. cuts, a longer one), or None when the default fits."""
    need = DEFAULT_TOP + LEGEND_ENTRY_PX * (entries + 1)
    return need if need > DEFAULT_HEIGHT else None


RUN_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
RUN_SYMBOLS = ("circle", "square", "diamond", "cross", "triangle-up", "x")
"""Line dash and marker symbol of the i-th run (:func:`run_style`), cycled."""
RUN_WIDTH, RUN_WIDTH_STEP, RUN_MIN_WIDTH = 3.0, 0.75, 1.0
"""Line width of the first run, how much thinner each later run is drawn, the thinnest."""
RUN_MARKER, RUN_MARKER_STEP, RUN_MIN_MARKER = 9.0, 1.5, 5.0
"""The same for marker sizes."""
MARKER_MAX_POINTS = 50
"""A run's curve shows markers at its points when it has at most this many."""


def run_style(i: int) -> dict[str, dict[str, Any]]:
    """``{"line": ..., "marker": ...}`` of the i-th run on a figure with one line per run:
    its colour (:data:`COLORS`), a dash pattern and marker symbol of its own
    (:data:`RUN_DASHES`, :data:`RUN_SYMBOLS`), and a line and marker that get thinner and
    smaller with ``i`` (down to :data:`RUN_MIN_WIDTH`, :data:`RUN_MIN_MARKER`). Traces are
    drawn in order, so where two runs' curves coincide the later, thinner, dashed one lies
    on the earlier, wider one and both stay visible."""
    return {
        "line": {
            "color": _color(i),
            "dash": RUN_DASHES[i % len(RUN_DASHES)],
            "width": max(RUN_MIN_WIDTH, RUN_WIDTH - RUN_WIDTH_STEP * i),
        },
        "marker": {
            "color": _color(i),
            "symbol": RUN_SYMBOLS[i % len(RUN_SYMBOLS)],
            "size": max(RUN_MIN_MARKER, RUN_MARKER - RUN_MARKER_STEP * i),
        },
    }


Theme = Literal["auto", "light", "dark"]
THEMES = ("auto", "light", "dark")
TEMPLATES = {"auto": "plotly_white", "light": "plotly_white", "dark": "plotly_dark"}
"""The plotly template of each theme (``auto``: white's layout, recoloured to be neutral)."""
TRANSPARENT = "rgba(0, 0, 0, 0)"
NEUTRAL_GRID = "rgba(128, 128, 128, 0.3)"
"""Grid, zero and axis lines of the ``auto`` theme: grey, visible on white and on black."""
FOREGROUND = {"auto": "#8c8c8c", "light": "black", "dark": "#e5e7eb"}
"""What the figures' black lines and markers become: mid grey (``auto``), black, light grey."""
MODEBAR = {"bgcolor": TRANSPARENT, "color": "#8c8c8c", "activecolor": "#636efa"}
"""Plotly's mode bar (the toolbar): no background (plotly's default, half the paper's
colour, is a dark bar on a transparent paper), grey icons, the active one blue."""


def apply_theme(fig: go.Figure, theme: Theme = "auto") -> go.Figure:
    """Make ``fig`` follow a light or dark page (in place; returns it).

    Every theme makes the paper, plot, legend and mode bar backgrounds transparent (the
    page shows through; the mode bar as :data:`MODEBAR`) and sets the template of
    :data:`TEMPLATES`; black lines and markers become
    :data:`FOREGROUND` (black vanishes on a dark page). ``light`` and ``dark`` fix the text
    colour through the template; ``auto`` is for a page that may switch between both: grid
    and axis lines are a translucent grey, and the text keeps plotly's default colour, which
    the page's stylesheet recolours in dark mode (the dashboard does, see
    :data:`rlcd_lab.dashboard.ui.CSS`). Figures are built without a theme; callers that
    show them on a themed page apply one.
    """
    if theme not in THEMES:
        raise ValueError(f"theme must be one of {list(THEMES)}, got {theme!r}")
    fig.update_layout(
        template=TEMPLATES[theme],
        paper_bgcolor=TRANSPARENT,
        plot_bgcolor=TRANSPARENT,
        legend_bgcolor=TRANSPARENT,
        modebar=MODEBAR,
    )
    if theme == "auto":
        lines = {
            "gridcolor": NEUTRAL_GRID,
            "zerolinecolor": NEUTRAL_GRID,
            "linecolor": NEUTRAL_GRID,
        }
        fig.update_xaxes(**lines)
        fig.update_yaxes(**lines)
    fg = FOREGROUND[theme]
    for trace in fig.data:
        for part in (getattr(trace, "marker", None), getattr(trace, "line", None)):
            if part is None:
                continue
            if getattr(part, "color", None) == "black":
                part.color = fg
            edge = getattr(part, "line", None)
            if edge is not None and getattr(edge, "color", None) == "black":
                edge.color = fg
    for ann in fig.layout.annotations or ():
        if ann.bgcolor == "white":
            ann.bgcolor = TRANSPARENT
    return fig


def _titled_layout(
    title: str,
    xaxis_title: str,
    yaxis_title: str,
    xaxis: Mapping[str, Any] | None = None,
    yaxis: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A plain-dict figure layout: ``title`` and the two axis titles, each axis dict then
    extended by ``xaxis`` / ``yaxis`` (e.g. ``{"range": [0, 1]}``). Plain dicts because the
    figure builders that use it pass everything to one ``go.Figure`` call (validated once)."""
    return {
        "title": {"text": title},
        "xaxis": {"title": {"text": xaxis_title}, **(xaxis or {})},
        "yaxis": {"title": {"text": yaxis_title}, **(yaxis or {})},
    }


def _add_perfect_calibration(fig: go.Figure) -> None:
    """Add the dashed grey diagonal ``"perfect calibration"`` (``y = x`` on [0, 1]) to row 1
    of a two-row reliability figure (in place): the reference every reliability plot of
    this module draws first, so its points read as over- or underconfident against it."""
    fig.add_trace(
        go.Scatter(
            x=[0.0, 1.0],
            y=[0.0, 1.0],
            mode="lines",
            name="perfect calibration",
            line={"dash": "dash", "color": "gray"},
        ),
        row=1,
        col=1,
    )


def _reliability_axes(fig: go.Figure, count_title: str) -> None:
    """Axes of a two-row reliability figure (in place): both x axes span [0, 1] (the lower
    one titled ``confidence``), row 1's y axis is the accuracy on [0, 1], row 2's y axis is
    titled ``count_title`` (what its per-bin traces count)."""
    fig.update_xaxes(range=[0, 1], row=1, col=1)
    fig.update_xaxes(range=[0, 1], title_text="confidence", row=2, col=1)
    fig.update_yaxes(range=[0, 1], title_text="accuracy", row=1, col=1)
    fig.update_yaxes(title_text=count_title, row=2, col=1)


def _accuracy_bin_traces(
    centres: np.ndarray, acc: np.ndarray, mconf: np.ndarray, width: float
) -> list[go.BaseTraceType]:
    """Row 1 of :func:`reliability_diagram` after the diagonal, for the non-empty bins:
    ``centres``, ``acc`` (accuracy) and ``mconf`` (mean confidence) are ``(B,)`` arrays of
    those bins, ``width`` the bar width (one bin). Returns, in order, the ``"accuracy"``
    bars, the ``"gap"`` bars (from the accuracy to the mean confidence; shaded, so over-
    and underconfidence show as a bar above or below the accuracy) and the ``"mean
    confidence"`` markers at ``(mconf, acc)``."""
    return [
        go.Bar(
            x=centres.tolist(),
            y=acc.tolist(),
            width=width,
            name="accuracy",
            marker={"color": _color(0)},
        ),
        go.Bar(
            x=centres.tolist(),
            y=(mconf - acc).tolist(),
            base=acc.tolist(),
            width=width,
            name="gap",
            marker={"color": "rgba(239, 85, 59, 0.35)", "line": {"color": _color(1)}},
        ),
        go.Scatter(
            x=mconf.tolist(),
            y=acc.tolist(),
            mode="markers",
            name="mean confidence",
            marker={"color": "black", "size": 6},
        ),
    ]


def reliability_diagram(
    probs: ArrayLike,
    labels: ArrayLike,
    n_bins: int = 15,
    title: str = "Reliability diagram",
) -> go.Figure:
    """Top-label reliability diagram with a confidence histogram underneath.

    ``probs (N, K)``, ``labels (N,)``; bins as in :func:`rlcd_lab.metrics.ece`
    (``(i/n, (i+1)/n]``). Row 1 holds four traces, in this order: ``"perfect
    calibration"`` (the diagonal), ``"accuracy"`` (bars of per-bin accuracy at the bin
    centres, non-empty bins only), ``"gap"`` (bars from the bin accuracy up or down to
    the bin's mean confidence) and ``"mean confidence"`` (markers at ``(conf_b, acc_b)``).
    Row 2 holds ``"count"``, the number of items per bin (all bins). The ECE is annotated
    (``ECE = 0.0123``) and stored exactly in ``layout.meta["ece"]``. Bars below the
    diagonal mean overconfidence. Guo et al. 2017, fig. 1.
    """
    conf, correct = metrics.confidence_and_correct(probs, labels)
    bins = metrics.reliability_bins(conf, correct, n_bins)
    ece = metrics.ece_from_confidence(conf, correct, n_bins)
    edges = bins["edges"]
    centres = (edges[:-1] + edges[1:]) / 2
    width = 1.0 / n_bins
    keep = bins["count"] > 0
    acc, mconf = bins["accuracy"][keep], bins["confidence"][keep]

    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, row_heights=[0.75, 0.25], vertical_spacing=0.05
    )
    _add_perfect_calibration(fig)
    for trace in _accuracy_bin_traces(centres[keep], acc, mconf, width):
        fig.add_trace(trace, row=1, col=1)
    fig.add_trace(
        go.Bar(
            x=centres.tolist(),
            y=bins["count"].tolist(),
            width=width,
            name="count",
            marker={"color": "gray"},
        ),
        row=2,
        col=1,
    )
    fig.add_annotation(
        text=f"ECE = {ece:.4f}",
        x=0.02,
        y=0.98,
        xref="x domain",
        yref="y domain",
        showarrow=False,
        align="left",
        bgcolor="white",
    )
    fig.update_layout(title=title, barmode="overlay", meta={"ece": ece, "n_bins": n_bins})
    _reliability_axes(fig, "count")
    return fig


def _thin(n: int, max_points: int | None) -> np.ndarray | None:
    """Indices of at most ``max_points`` evenly spaced points out of ``n`` (first and last
    kept), or ``None`` to keep all ``n``."""
    if max_points is None or n <= max_points:
        return None
    if max_points < 2:
        raise ValueError(f"max_points must be >= 2, got {max_points}")
    return np.unique(np.linspace(0, n - 1, max_points).round().astype(np.int64))


def _pick(a: np.ndarray, idx: np.ndarray | None) -> list[float]:
    return (a if idx is None else a[idx]).tolist()


def _thinned_line(x: np.ndarray, y: np.ndarray, idx: np.ndarray | None, **fields: Any) -> dict:
    """A plain-dict ``scatter`` trace in ``mode="lines"`` through the points ``idx`` of ``x
    (P,)`` and ``y (P,)`` (all of them when ``idx`` is None, see :func:`_thin`), with
    ``fields`` (name, line, meta, ...) added: the curve trace of the figure builders that
    thin long curves for display."""
    return dict(type="scatter", x=_pick(x, idx), y=_pick(y, idx), mode="lines", **fields)


def _model_risk_traces(
    i: int,
    name: str,
    conf: ArrayLike,
    correct: ArrayLike,
    eps: float,
    with_oracle: bool,
    cov_style: str,
    max_points: int | None,
    aurc_in_name: bool = True,
) -> tuple[list[dict], float]:
    """The traces of the ``i``-th model of :func:`risk_coverage_figure` and its Cov@eps.

    ``conf (N,)``, ``correct (N,)``. Traces (plain dicts, in order): the risk-coverage
    curve (AURC in its ``meta``, and in its name with ``aurc_in_name``), the oracle curve
    when ``with_oracle``, and with ``cov_style="lines"`` the dashed vertical line at
    ``x = Cov@eps``; all in the model's
    colour and ``legendgroup``, thinned to ``max_points`` (metrics use every item)."""
    cov, risk = metrics.risk_coverage_curve(conf, correct)
    idx = _thin(cov.size, max_points)
    area = metrics.aurc(conf, correct)
    cov_eps = metrics.coverage_at_risk(conf, correct, eps)
    color = _color(i)
    traces = [
        _thinned_line(
            cov,
            risk,
            idx,
            name=f"{name} (AURC={area:.4f})" if aurc_in_name else name,
            legendgroup=name,
            line={"color": color},
            meta={"model": name, "aurc": area, "cov_at_eps": cov_eps},
        )
    ]
    if with_oracle:
        ocov, orisk = metrics.oracle_risk_coverage_curve(correct)
        traces.append(
            _thinned_line(
                ocov,
                orisk,
                idx,
                name=f"{name} oracle",
                legendgroup=name,
                line={"color": color, "dash": "dot", "width": 1},
                meta={"model": name, "aurc": float(orisk.mean())},
            )
        )
    if cov_style == "lines":
        traces.append(
            dict(
                type="scatter",
                x=[cov_eps, cov_eps],
                y=[0.0, 1.0],
                mode="lines",
                name=f"{name} Cov@{eps:g}",
                legendgroup=name,  # toggled with the curve, no legend entry of its own
                showlegend=False,
                line={"color": color, "dash": "dash", "width": 1},
                meta={"model": name, "cov_at_eps": cov_eps},
            )
        )
    return traces, cov_eps


def _outlined_markers(colors: list[str], size: int, symbol: str) -> dict[str, Any]:
    """A marker dict of one point per model: ``colors`` (one per point, the models'
    :data:`COLORS`), ``size`` px, ``symbol``, outlined in black (so the point stands out
    on a curve of its own colour)."""
    return {
        "color": colors,
        "size": size,
        "symbol": symbol,
        "line": {"color": "black", "width": 1},
    }


def _cov_markers_trace(covs: Mapping[str, float], eps: float) -> dict:
    """``cov_style="markers"`` of :func:`risk_coverage_figure`: one plain-dict trace
    ``"Cov@{eps}"`` with a triangle per model at ``(Cov@eps, eps)``; ``covs`` maps each
    model, in figure order, to its Cov@eps (kept in ``meta``, lists in model order)."""
    names = list(covs)
    return dict(
        type="scatter",
        x=[covs[n] for n in names],
        y=[eps] * len(names),
        mode="markers",
        name=f"Cov@{eps:g}",
        text=names,
        marker=_outlined_markers([_color(i) for i in range(len(names))], 11, "triangle-up"),
        meta={"models": names, "cov_at_eps": [covs[n] for n in names]},
        hovertemplate="%{text}<br>Cov@" + f"{eps:g}" + " = %{x:.3f}<extra></extra>",
    )


def _marks_trace(
    names: list[str], marks: Mapping[str, tuple[float, float]] | None, label: str
) -> dict | None:
    """The ``marks`` trace of :func:`risk_coverage_figure`, or None when no model in
    ``names`` (figure order, which picks each diamond's colour) is marked: one plain-dict
    trace named ``label`` with a diamond per marked model at its ``(coverage, risk)``,
    both kept in ``meta`` beside the model names."""
    marked = [n for n in names if marks and n in marks]
    if not marked:
        return None
    assert marks is not None
    points = [tuple(float(v) for v in marks[n]) for n in marked]
    return dict(
        type="scatter",
        x=[c for c, _ in points],
        y=[r for _, r in points],
        mode="markers",
        name=label,
        text=marked,
        marker=_outlined_markers([_color(names.index(n)) for n in marked], 13, "diamond"),
        meta={
            "models": marked,
            "coverage": [c for c, _ in points],
            "risk": [r for _, r in points],
        },
        hovertemplate="%{text}<br>coverage %{x:.3f}<br>risk %{y:.3f}<extra></extra>",
    )


def risk_coverage_figure(
    models: Mapping[str, tuple[ArrayLike, ArrayLike]],
    eps: float = DEFAULT_EPS,
    oracle: Literal["first", "each", "none"] = "first",
    title: str = "Risk-coverage",
    max_points: int | None = None,
    marks: Mapping[str, tuple[float, float]] | None = None,
    mark_label: str = "threshold",
    cov_style: Literal["lines", "markers"] = "lines",
    aurc_in_name: bool = True,
) -> go.Figure:
    """Risk-coverage curves of several models on one figure.

    ``models`` maps a name to ``(confidence (N,), correct (N,))``. For each model, in
    order, the traces are:

    * the curve, named ``"{name} (AURC=0.0123)"`` (``"{name}"`` when not
      ``aurc_in_name``, e.g. where the AURC is an exercise's answer), with
      ``meta = {"model", "aurc", "cov_at_eps"}`` holding the exact values of
      :func:`rlcd_lab.metrics.aurc` and :func:`rlcd_lab.metrics.coverage_at_risk`;
    * its oracle curve (:func:`rlcd_lab.metrics.oracle_risk_coverage_curve`), named
      ``"{name} oracle"``, for the first model only (``oracle="first"``), for every model
      (``"each"``) or none;
    * with ``cov_style="lines"``, a vertical dashed line at ``x = Cov@eps``, named
      ``"{name} Cov@{eps}"`` (no legend entry: it shows and hides with its curve).

    With ``cov_style="markers"`` one trace ``"Cov@{eps}"`` follows instead, a triangle
    per model at ``(Cov@eps, eps)`` on the risk line (``meta = {"models",
    "cov_at_eps"}``, lists in model order). With ``marks`` (name -> ``(coverage,
    risk)``, e.g. each model's operating point at a confidence threshold) one trace
    named ``mark_label`` follows, a diamond per marked model (``meta = {"models",
    "coverage", "risk"}``). Last comes one horizontal dotted line at ``y = eps`` named
    ``"risk = {eps}"``. ``max_points`` thins each curve to at most that many evenly
    spaced points for display (the first and last kept; AURC and Cov@eps are still
    computed on all items). The compact options (``max_points``, ``cov_style="markers"``,
    one ``marks`` trace) keep the figure fast enough to rebuild on every slider move.
    Models take distinct colours (:data:`COLORS`, up to 24), and a figure whose legend
    would not fit plotly's default height is made taller.
    Lower curves are better; Cov@eps is where a curve last sits at or below the line.
    Geifman & El-Yaniv 2017; Geifman et al. 2019; OpenJev-RLCD sec. 5.
    """
    if oracle not in ("first", "each", "none"):
        raise ValueError("oracle must be 'first', 'each' or 'none'")
    if cov_style not in ("lines", "markers"):
        raise ValueError("cov_style must be 'lines' or 'markers'")
    traces: list[dict] = []
    covs: dict[str, float] = {}
    for i, (name, (conf, correct)) in enumerate(models.items()):
        with_oracle = oracle == "each" or (oracle == "first" and i == 0)
        model_traces, covs[name] = _model_risk_traces(
            i, name, conf, correct, eps, with_oracle, cov_style, max_points, aurc_in_name
        )
        traces += model_traces
    if cov_style == "markers" and covs:
        traces.append(_cov_markers_trace(covs, eps))
    if (marked := _marks_trace(list(models), marks, mark_label)) is not None:
        traces.append(marked)
    traces.append(
        dict(
            type="scatter",
            x=[0.0, 1.0],
            y=[eps, eps],
            mode="lines",
            name=f"risk = {eps:g}",
            line={"color": "gray", "dash": "dot"},
            meta={"eps": eps},
        )
    )
    layout = _titled_layout(title, "coverage", "risk (error rate)", xaxis={"range": [0, 1]})
    height = _legend_height(sum(t.get("showlegend", True) for t in traces))
    if height:
        layout["height"] = height
    # plain dicts validated once by one Figure call (not go.Scatter + add_trace, which
    # validate twice): several times faster, for the dashboard's live updates
    return go.Figure(data=traces, layout=layout)


def reliability_curves(
    models: Mapping[str, tuple[ArrayLike, ArrayLike]],
    n_bins: int = 15,
    title: str = "Reliability",
) -> go.Figure:
    """Top-label reliability of several models on one figure (an overlay, for comparing).

    ``models`` maps a name to ``(probs (N, K), labels (N,))``. Row 1: the diagonal
    (``"perfect calibration"``), then per model a line through ``(conf_b, acc_b)``, the
    mean confidence and the accuracy of each non-empty bin (bins as in
    :func:`rlcd_lab.metrics.ece`), named ``"{name} (ECE=0.0123)"`` with
    ``meta = {"model", "ece"}`` (exact :func:`rlcd_lab.metrics.ece`). Row 2: per model the
    fraction of its items in each bin (all bins, at the bin centres), named
    ``"{name} items"``. Points below the diagonal mean overconfidence. Guo et al. 2017.
    """
    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, row_heights=[0.72, 0.28], vertical_spacing=0.06
    )
    _add_perfect_calibration(fig)
    centres = (metrics.bin_edges(n_bins)[:-1] + metrics.bin_edges(n_bins)[1:]) / 2
    for i, (name, (probs, labels)) in enumerate(models.items()):
        conf, correct = metrics.confidence_and_correct(probs, labels)
        bins = metrics.reliability_bins(conf, correct, n_bins)
        ece = metrics.ece_from_confidence(conf, correct, n_bins)
        keep = bins["count"] > 0
        color = _color(i)
        fig.add_trace(
            go.Scatter(
                x=bins["confidence"][keep].tolist(),
                y=bins["accuracy"][keep].tolist(),
                mode="lines+markers",
                name=f"{name} (ECE={ece:.4f})",
                legendgroup=name,
                line={"color": color},
                meta={"model": name, "ece": ece},
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=centres.tolist(),
                y=(bins["count"] / conf.size).tolist(),
                mode="lines+markers",
                name=f"{name} items",
                legendgroup=name,
                showlegend=False,
                line={"color": color, "width": 1},
                marker={"size": 4},
            ),
            row=2,
            col=1,
        )
    fig.update_layout(title=title)
    _reliability_axes(fig, "items")
    return fig


def _model_threshold_traces(
    i: int, name: str, t: ArrayLike, y: ArrayLike, max_points: int | None
) -> tuple[list[dict], float, float]:
    """The ``i``-th model's traces of :func:`threshold_curves` and the x range it needs.

    ``t (P,)`` ascending thresholds, ``y (P,)`` the values (``ValueError`` when the shapes
    differ or are empty). Returns ``(traces, lo, hi)``: the step curve (thinned to
    ``max_points``; ``meta`` holds the first threshold reaching the minimum) and an open
    circle at that minimum (no legend entry), as plain dicts; ``lo`` is the lowest
    threshold and ``hi`` the start of the last piece or the minimum's threshold if later,
    so the axis spans what changes."""
    ta, ya = to_numpy(t, np.float64).reshape(-1), to_numpy(y, np.float64).reshape(-1)
    if ta.shape != ya.shape or ta.size == 0:
        raise ValueError(f"{name}: t {ta.shape} and y {ya.shape} must match, non-empty")
    j = int(np.argmin(ya))
    color = _color(i)
    curve = _thinned_line(
        ta,
        ya,
        _thin(ta.size, max_points),
        line={"color": color, "shape": "vh"},
        name=name,
        legendgroup=name,
        meta={"model": name, "t_min": float(ta[j]), "y_min": float(ya[j])},
    )
    lowest = dict(
        type="scatter",
        x=[float(ta[j])],
        y=[float(ya[j])],
        mode="markers",
        name=f"{name} min",
        legendgroup=name,
        showlegend=False,
        marker={"color": color, "size": 9, "symbol": "circle-open"},
    )
    return [curve, lowest], ta[0], max(ta[max(ta.size - 2, 0)], ta[j])


def _vline_traces(vlines: Mapping[str, float], top: float) -> list[dict]:
    """One dotted vertical line from 0 to ``top`` per entry (label -> x) of ``vlines``, as
    plain-dict traces named by the label (``meta = {"x"}``): the first black, the others
    grey, so the main reference (e.g. the Bayes threshold) stands out."""
    return [
        dict(
            type="scatter",
            x=[float(x), float(x)],
            y=[0.0, top],
            mode="lines",
            name=label,
            line={"color": "black" if k == 0 else "gray", "dash": "dot", "width": 1},
            meta={"x": float(x)},
        )
        for k, (label, x) in enumerate(vlines.items())
    ]


def _edge_notes(vlines: Mapping[str, float], x0: float, x1: float) -> list[dict]:
    """Layout annotations for the ``vlines`` (label -> x) outside the x range ``[x0, x1]``:
    text at the top left or right edge with an arrow pointing towards the line
    (``"← label = 0.123"``), so a line the axis cuts off is not silently missing."""
    return [
        {
            "x": 1.0 if x > x1 else 0.0,
            "xref": "paper",
            "xanchor": "right" if x > x1 else "left",
            "y": 1.0,
            "yref": "paper",
            "text": f"{label} = {x:.3g} →" if x > x1 else f"← {label} = {x:.3g}",
            "showarrow": False,
        }
        for label, x in vlines.items()
        if not x0 <= x <= x1
    ]


def threshold_curves(
    curves: Mapping[str, tuple[ArrayLike, ArrayLike]],
    vlines: Mapping[str, float] | None = None,
    title: str = "Expected cost by threshold",
    xaxis_title: str = "confidence threshold t",
    yaxis_title: str = "expected cost per item",
    max_points: int | None = None,
) -> go.Figure:
    """Step curves ``y(t)`` of a rule "act on the items with confidence >= t", one per model.

    ``curves`` maps a name to ``(t (P,), y (P,))`` with ``t`` ascending and ``y[j]`` the
    value for thresholds in ``(t[j-1], t[j]]`` (drawn with ``line_shape="vh"``). Per
    model: the curve (named ``name``, ``meta = {"model", "t_min", "y_min"}``: the first
    threshold reaching the smallest value) and a marker at that minimum
    (``"{name} min"``, not in the legend). Then one dotted vertical line per entry of
    ``vlines`` (label -> threshold), named by its label. ``max_points`` thins the curves
    for display (minimum computed on all points).

    The x axis spans the data that change (:data:`X_MARGIN` of the span added on each
    side): from the lowest threshold to the start of each curve's last piece (beyond
    it ``y[-1]`` holds to ``t[-1]``, e.g. "escalate everything" up to ``t = 1``) or its
    minimum if later. A vertical line outside that range gets an arrow at the edge
    (``layout.annotations``) saying where it is.
    """
    traces: list[dict] = []
    lo, hi = math.inf, -math.inf
    for i, (name, (t, y)) in enumerate(curves.items()):
        model_traces, t_lo, t_hi = _model_threshold_traces(i, name, t, y, max_points)
        traces += model_traces
        lo, hi = min(lo, t_lo), max(hi, t_hi)
    ys = [v for tr in traces for v in tr["y"]]
    traces += _vline_traces(vlines or {}, max(ys) if ys else 1.0)
    layout = _titled_layout(title, xaxis_title, yaxis_title, yaxis={"rangemode": "tozero"})
    if traces:
        pad = X_MARGIN * (hi - lo) or X_MARGIN
        x0, x1 = float(lo - pad), float(hi + pad)
        layout["xaxis"]["range"] = [x0, x1]
        if notes := _edge_notes(vlines or {}, x0, x1):
            layout["annotations"] = notes
    return go.Figure(data=traces, layout=layout)


def rationale_bars(
    u: ArrayLike,
    labels: Sequence[str] | None = None,
    mixture: ArrayLike | None = None,
    texts: Sequence[str] | None = None,
    title: str = "Per-rationale readouts",
    max_hover_chars: int = 300,
) -> go.Figure:
    """Grouped bars of the per-rationale readouts ``u (M, K)`` beside the mixture.

    ``labels`` names the K options (default ``"0".."K-1"``); ``mixture (K,)`` defaults to
    the row mean ``p = (1/M) sum_i u_i`` (OpenJev-RLCD, Proposition 1); ``texts`` are the M
    rationales, shown on hover (truncated to ``max_hover_chars``). Traces: ``"r1"`` ..
    ``"rM"`` then ``"mixture"`` (``meta = {"diversity": (1/M) sum_i ||u_i - p||^2}``).
    """
    ua = to_numpy(u, np.float64)
    if ua.ndim != 2:
        raise ValueError(f"u must be (M, K), got shape {ua.shape}")
    m, k = ua.shape
    names = [str(j) for j in range(k)] if labels is None else [str(s) for s in labels]
    if len(names) != k:
        raise ValueError(f"{len(names)} labels for K = {k} options")
    p = ua.mean(0) if mixture is None else to_numpy(mixture, np.float64).reshape(-1)
    if texts is not None and len(texts) != m:
        raise ValueError(f"{len(texts)} texts for M = {m} rationales")
    traces = []
    for i in range(m):
        hover = None
        if texts is not None:
            t = texts[i]
            t = t if len(t) <= max_hover_chars else t[: max_hover_chars - 1] + "…"
            hover = [t] * k
        bar = dict(
            type="bar",
            x=names,
            y=ua[i].tolist(),
            name=f"r{i + 1}",
            marker={"color": _color(i), "opacity": 0.6},
        )
        if hover is not None:
            bar["hovertext"] = hover
        traces.append(bar)
    diversity = float(((ua - p) ** 2).sum(1).mean())
    traces.append(
        dict(
            type="bar",
            x=names,
            y=p.tolist(),
            name="mixture",
            marker={"color": "black"},
            meta={"diversity": diversity},
        )
    )
    return go.Figure(
        data=traces,
        layout={
            "title": {"text": title},
            "barmode": "group",
            "xaxis": {"title": {"text": "option"}},
            "yaxis": {"title": {"text": "probability"}, "range": [0, 1]},
        },
    )


def _read_log(log: str | Path | Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return read_jsonl(log) if isinstance(log, (str, Path)) else list(log)


def _is_number(v: Any) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        return False
    return math.isfinite(float(v))


def training_curves(
    log: str | Path | Sequence[Mapping[str, Any]],
    columns: str | Sequence[str | Sequence[str]] | None = None,
    x: str = "step",
    title: str = "Training curves",
    separate: bool = False,
) -> go.Figure:
    """Any logged column against ``x`` (default ``"step"``), one trace per column.

    ``log`` is a list of row dicts or the path of a run's ``log.jsonl`` (one JSON object
    per line; blank lines ignored). ``columns`` defaults to every key that holds a number
    in some row, except ``x``. A row contributes to a column's trace only when it has a
    finite number for both ``x`` and that column (rows missing the column, or holding
    ``None``/NaN/non-numbers, are skipped). With ``separate=True`` each entry of
    ``columns`` gets its own stacked subplot (useful when scales differ); an entry may
    be a group of columns (e.g. ``("grad_pathwise", "grad_score_function")``) sharing one
    subplot, titled by its columns joined with ``" / "``. Otherwise all share one axis.
    """
    rows = _read_log(log)
    if columns is None:
        groups: list[list[str]] = []
        seen: set[str] = set()
        for row in rows:
            for key, v in row.items():
                if key != x and key not in seen and _is_number(v):
                    seen.add(key)
                    groups.append([key])
    elif isinstance(columns, str):
        groups = [[columns]]
    else:
        groups = [[c] if isinstance(c, str) else list(c) for c in columns]
    if separate and groups:
        fig = make_subplots(
            rows=len(groups),
            cols=1,
            shared_xaxes=True,
            subplot_titles=[" / ".join(g) for g in groups],
        )
    else:
        fig = go.Figure()
    i = 0
    for panel, group in enumerate(groups):
        for col in group:
            pts = [
                (float(r[x]), float(r[col]))
                for r in rows
                if _is_number(r.get(x)) and _is_number(r.get(col))
            ]
            trace = go.Scatter(
                x=[a for a, _ in pts],
                y=[b for _, b in pts],
                mode="lines+markers" if len(pts) < 50 else "lines",
                name=col,
                line={"color": _color(i)},
            )
            i += 1
            if separate:
                fig.add_trace(trace, row=panel + 1, col=1)
            else:
                fig.add_trace(trace)
    fig.update_layout(title=title)
    fig.update_xaxes(title_text=x, row=len(groups) if separate and groups else None)
    return fig


RATE_RANGE = (-0.03, 1.03)
"""The y range of a rate panel of :func:`run_panels`: [0, 1], a little wider so that a
line at 0 or 1 is drawn whole."""


def _moving_average(v: np.ndarray, k: int) -> np.ndarray:
    """Trailing mean over the last ``k`` values (fewer at the start): ``out[j] =
    mean(v[max(0, j - k + 1) : j + 1])``."""
    c = np.concatenate([[0.0], np.cumsum(v, dtype=np.float64)])
    j = np.arange(v.size)
    lo = np.maximum(0, j - k + 1)
    return (c[j + 1] - c[lo]) / (j + 1 - lo)


def run_panels(
    logs: Mapping[str, str | Path | Sequence[Mapping[str, Any]]],
    panels: Mapping[str, str],
    cols: int = 2,
    x: str = "step",
    smooth: int = 10,
    raw: Sequence[str] = (),
    rates: Sequence[str] = (),
    title: str = "Training curves",
    height: int | None = None,
) -> go.Figure:
    """Several logged columns of several runs: one subplot per column, one line per run.

    ``logs`` maps a run's name to its log (as in :func:`training_curves`, same skipping
    rules); ``panels`` maps a column to its subplot's title, laid out row by row in
    ``cols`` columns. A curve with more than ``2 * smooth`` points is shown as its trailing
    ``smooth``-step moving average (:func:`_moving_average`), except the columns in
    ``raw`` (e.g. dev accuracy, logged every few steps). Runs are styled by
    :func:`run_style` (colour, dash, marker, thinner with each run; markers on curves of
    at most :data:`MARKER_MAX_POINTS` points), so coinciding curves both stay visible; a
    run's traces share a legend entry (``legendgroup``), shown on its first panel.

    The y axis of a column in ``rates`` spans :data:`RATE_RANGE` (a rate of 0 throughout
    is drawn at the bottom of [0, 1], not in the middle of plotly's [-1, 1]); any other
    panel whose values are all >= 0 starts at 0 (``rangemode="tozero"``). The x axes are
    shared per column of panels; the lowest panel of each column shows the ticks and the
    title ``x``. ``height`` defaults to 450 px for one row of panels, 240 px more per row.
    The traces are in run order, then panel order; each has ``meta = {"run", "column"}``.
    """
    names = list(panels)
    n = len(names)
    if n == 0:
        raise ValueError("no panels")
    if cols < 1:
        raise ValueError(f"cols must be >= 1, got {cols}")
    cols = min(cols, n)
    nrows = -(-n // cols)
    fig = make_subplots(
        rows=nrows, cols=cols, shared_xaxes=True, subplot_titles=[panels[c] for c in names]
    )
    lowest: dict[str, float] = dict.fromkeys(names, math.inf)
    for i, (run, log) in enumerate(logs.items()):
        rows = _read_log(log)
        style = run_style(i)
        for j, col in enumerate(names):
            pts = [
                (float(r[x]), float(r[col]))
                for r in rows
                if _is_number(r.get(x)) and _is_number(r.get(col))
            ]
            ys = np.array([b for _, b in pts], dtype=np.float64)
            if smooth > 1 and col not in raw and ys.size > 2 * smooth:
                ys = _moving_average(ys, smooth)
            if ys.size:
                lowest[col] = min(lowest[col], float(ys.min()))
            fig.add_trace(
                go.Scatter(
                    x=[a for a, _ in pts],
                    y=ys.tolist(),
                    mode="lines+markers" if len(pts) <= MARKER_MAX_POINTS else "lines",
                    name=run,
                    legendgroup=run,
                    showlegend=j == 0,
                    meta={"run": run, "column": col},
                    **style,
                ),
                row=j // cols + 1,
                col=j % cols + 1,
            )
    for j, col in enumerate(names):
        where = {"row": j // cols + 1, "col": j % cols + 1}
        if col in rates:
            fig.update_yaxes(range=list(RATE_RANGE), **where)
        elif lowest[col] >= 0:
            fig.update_yaxes(rangemode="tozero", **where)
        if j + cols >= n:  # nothing below it: the column's lowest panel
            fig.update_xaxes(title_text=x, showticklabels=True, **where)
    fig.update_layout(title=title, height=height or DEFAULT_HEIGHT + 240 * (nrows - 1))
    return fig


def wrap_label(text: str, width: int = 10) -> str:
    """``text`` broken into lines of at most ``width`` characters (joined by ``<br>``, a
    plotly line break), after a ``-`` or ``_`` or at a space; a piece longer than
    ``width`` without such a place stays whole. ``"rft-kl-matched"`` -> ``"rft-kl-<br>
    matched"``."""
    pieces = [p for p in re.split(r"(?<=[-_])|(?= )", str(text)) if p]
    lines: list[str] = []
    for piece in pieces:
        if lines and len(lines[-1]) + len(piece) <= width:
            lines[-1] += piece
        else:
            lines.append(piece.lstrip(" ") if lines else piece)
    return "<br>".join(lines)


TICK_LINE_PX = 16
"""Height of one line of a tick label (plotly's default 12 px font), rounded up."""
SLIDER_GAP_PX = 24
"""Space between a figure's lowest tick labels and the top of its slider."""


def category_ticks(fig: go.Figure, width: int = 10) -> go.Figure:
    """Horizontal, wrapped tick labels on a categorical x axis (in place; returns ``fig``).

    The categories are the x values of all traces (visible or not), in order of first
    appearance; each label is :func:`wrap_label` ``(width)`` (plotly's rotated labels of
    long names run into whatever lies below the axis). A slider of ``fig`` is moved
    below the labels: its top padding is :data:`TICK_LINE_PX` per label line plus
    :data:`SLIDER_GAP_PX` (plotly draws a slider just below the plot area, over
    the labels)."""
    cats: dict[Any, None] = {}
    for trace in fig.data:
        xs = getattr(trace, "x", None)
        for v in () if xs is None else xs:
            cats.setdefault(v, None)
    text = [wrap_label(str(c), width) for c in cats]
    fig.update_xaxes(
        tickmode="array", tickvals=list(cats), ticktext=text, tickangle=0, automargin=True
    )
    lines = max((t.count("<br>") + 1 for t in text), default=1)
    for slider in fig.layout.sliders or ():
        slider.pad.t = TICK_LINE_PX * lines + SLIDER_GAP_PX
    return fig


def legend_hline(
    fig: go.Figure, y: float, name: str, color: str = "gray", dash: str = "dot"
) -> go.Figure:
    """A horizontal line across the plot at ``y``, labelled by a legend entry ``name``
    instead of text on the plot (which overlaps whatever is drawn there). In place;
    returns ``fig``. The line is a shape (``layout.shapes``); the entry a trace with no
    points and the same style, ``meta = {"y": y}``. A slider's steps that set the
    traces' ``visible`` flags keep the entry visible."""
    fig.add_hline(y=y, line={"color": color, "dash": dash, "width": 1.5})
    fig.add_trace(
        go.Scatter(
            x=[None],
            y=[None],
            mode="lines",
            name=name,
            line={"color": color, "dash": dash, "width": 1.5},
            hoverinfo="skip",
            meta={"y": float(y)},
        )
    )
    for slider in fig.layout.sliders or ():
        for step in slider.steps:
            args = list(step.args or ())
            if args and isinstance(args[0], dict) and "visible" in args[0]:
                args[0] = {**args[0], "visible": [*args[0]["visible"], True]}
                step.args = args
    return fig


def compare_curves(
    logs: Mapping[str, str | Path | Sequence[Mapping[str, Any]]],
    column: str,
    x: str = "step",
    title: str | None = None,
) -> go.Figure:
    """One logged ``column`` of several runs against ``x``, one trace per run (named by
    its key in ``logs``; each log as in :func:`training_curves`, same skipping rules)."""
    traces = []
    for i, (name, log) in enumerate(logs.items()):
        pts = [
            (float(r[x]), float(r[column]))
            for r in _read_log(log)
            if _is_number(r.get(x)) and _is_number(r.get(column))
        ]
        traces.append(
            go.Scatter(
                x=[a for a, _ in pts],
                y=[b for _, b in pts],
                mode="lines+markers" if len(pts) < 50 else "lines",
                name=name,
                line={"color": _color(i)},
            )
        )
    return go.Figure(
        data=traces,
        layout={
            "title": {"text": title or column},
            "xaxis": {"title": {"text": x}},
            "yaxis": {"title": {"text": column}},
        },
    )


def interval_figure(
    diffs: Mapping[str, Mapping[str, float]], title: str, xlabel: str, better: str = "left"
) -> go.Figure:
    """Paired differences with their 95% CIs, one row per comparison.

    ``diffs[name] = {"diff", "ci_low", "ci_high", ...}`` (e.g.
    :func:`rlcd_lab.reports.results.paired` entries); a dashed line marks 0. ``better`` says on
    which side of 0 a difference favours the first model ("left": lower is better, as
    for Brier and AURC), written into the x-axis title.
    """
    names = list(diffs)
    d = [diffs[n]["diff"] for n in names]
    fig = go.Figure(
        go.Scatter(
            x=d,
            y=names,
            mode="markers",
            marker={"color": _color(0), "size": 9},
            error_x={
                "type": "data",
                "symmetric": False,
                "array": [diffs[n]["ci_high"] - v for n, v in zip(names, d, strict=True)],
                "arrayminus": [v - diffs[n]["ci_low"] for n, v in zip(names, d, strict=True)],
            },
            hovertemplate="%{y}: %{x:+.4f}<extra></extra>",
        )
    )
    fig.add_vline(x=0.0, line={"dash": "dash", "color": "gray"})
    side = "negative" if better == "left" else "positive"
    fig.update_layout(
        title=title,
        xaxis_title=f"{xlabel} ({side} favours the first model; bars: 95% CI)",
        height=120 + 40 * len(names),
    )
    return fig
