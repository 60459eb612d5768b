"""Plotly figures for calibration, selective prediction, rationales and training logs.

Every function returns a ``plotly.graph_objects.Figure`` and writes nothing; numbers are
computed by :mod:`rlcd_lab.metrics` so a figure always shows the same values as the
tables. Data arrays are stored as plain lists (``fig.to_dict()`` is readable JSON) and
the exact metric values behind a label are kept in each trace's ``meta`` dict.
:func:`training_curves` may read a ``log.jsonl`` when given a path (read only).

References: Guo et al. 2017 (reliability diagrams), Geifman & El-Yaniv 2017 and
Geifman et al. 2019 (risk-coverage curves, AURC), OpenJev-RLCD sec. 5 (Cov@eps).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from . import metrics
from .metrics import ArrayLike, to_numpy

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
)


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


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
    fig.add_trace(
        go.Bar(
            x=centres[keep].tolist(),
            y=acc.tolist(),
            width=width,
            name="accuracy",
            marker={"color": _color(0)},
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Bar(
            x=centres[keep].tolist(),
            y=(mconf - acc).tolist(),
            base=acc.tolist(),
            width=width,
            name="gap",
            marker={"color": "rgba(239, 85, 59, 0.35)", "line": {"color": _color(1)}},
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=mconf.tolist(),
            y=acc.tolist(),
            mode="markers",
            name="mean confidence",
            marker={"color": "black", "size": 6},
        ),
        row=1,
        col=1,
    )
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
    fig.update_xaxes(range=[0, 1], row=1, col=1)
    fig.update_xaxes(range=[0, 1], title_text="confidence", row=2, col=1)
    fig.update_yaxes(range=[0, 1], title_text="accuracy", row=1, col=1)
    fig.update_yaxes(title_text="count", row=2, col=1)
    return fig


def risk_coverage_figure(
    models: Mapping[str, tuple[ArrayLike, ArrayLike]],
    eps: float = 0.05,
    oracle: Literal["first", "each", "none"] = "first",
    title: str = "Risk-coverage",
) -> go.Figure:
    """Risk-coverage curves of several models on one figure.

    ``models`` maps a name to ``(confidence (N,), correct (N,))``. For each model, in
    order, the traces are:

    * the curve, named ``"{name} (AURC=0.0123)"``, with
      ``meta = {"model", "aurc", "cov_at_eps"}`` holding the exact values of
      :func:`rlcd_lab.metrics.aurc` and :func:`rlcd_lab.metrics.coverage_at_risk`;
    * its oracle curve (:func:`rlcd_lab.metrics.oracle_risk_coverage_curve`), named
      ``"{name} oracle"``, for the first model only (``oracle="first"``), for every model
      (``"each"``) or none;
    * a vertical dashed line at ``x = Cov@eps``, named ``"{name} Cov@{eps}"``.

    Last comes one horizontal dotted line at ``y = eps`` named ``"risk = {eps}"``.
    Lower curves are better; Cov@eps is where a curve last sits at or below the line.
    Geifman & El-Yaniv 2017; Geifman et al. 2019; OpenJev-RLCD sec. 5.
    """
    if oracle not in ("first", "each", "none"):
        raise ValueError("oracle must be 'first', 'each' or 'none'")
    fig = go.Figure()
    for i, (name, (conf, correct)) in enumerate(models.items()):
        cov, risk = metrics.risk_coverage_curve(conf, correct)
        area = metrics.aurc(conf, correct)
        cov_eps = metrics.coverage_at_risk(conf, correct, eps)
        color = _color(i)
        fig.add_trace(
            go.Scatter(
                x=cov.tolist(),
                y=risk.tolist(),
                mode="lines",
                name=f"{name} (AURC={area:.4f})",
                legendgroup=name,
                line={"color": color},
                meta={"model": name, "aurc": area, "cov_at_eps": cov_eps},
            )
        )
        if oracle == "each" or (oracle == "first" and i == 0):
            ocov, orisk = metrics.oracle_risk_coverage_curve(correct)
            fig.add_trace(
                go.Scatter(
                    x=ocov.tolist(),
                    y=orisk.tolist(),
                    mode="lines",
                    name=f"{name} oracle",
                    legendgroup=name,
                    line={"color": color, "dash": "dot", "width": 1},
                    meta={"model": name, "aurc": float(orisk.mean())},
                )
            )
        fig.add_trace(
            go.Scatter(
                x=[cov_eps, cov_eps],
                y=[0.0, 1.0],
                mode="lines",
                name=f"{name} Cov@{eps:g}",
                legendgroup=name,
                line={"color": color, "dash": "dash", "width": 1},
                meta={"model": name, "cov_at_eps": cov_eps},
            )
        )
    fig.add_trace(
        go.Scatter(
            x=[0.0, 1.0],
            y=[eps, eps],
            mode="lines",
            name=f"risk = {eps:g}",
            line={"color": "gray", "dash": "dot"},
            meta={"eps": eps},
        )
    )
    fig.update_layout(title=title, xaxis_title="coverage", yaxis_title="risk (error rate)")
    fig.update_xaxes(range=[0, 1])
    return fig


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
    fig = go.Figure()
    for i in range(m):
        hover = None
        if texts is not None:
            t = texts[i]
            t = t if len(t) <= max_hover_chars else t[: max_hover_chars - 1] + "…"
            hover = [t] * k
        fig.add_trace(
            go.Bar(
                x=names,
                y=ua[i].tolist(),
                name=f"r{i + 1}",
                hovertext=hover,
                marker={"color": _color(i), "opacity": 0.6},
            )
        )
    diversity = float(((ua - p) ** 2).sum(1).mean())
    fig.add_trace(
        go.Bar(
            x=names,
            y=p.tolist(),
            name="mixture",
            marker={"color": "black"},
            meta={"diversity": diversity},
        )
    )
    fig.update_layout(title=title, barmode="group", xaxis_title="option", yaxis_title="probability")
    fig.update_yaxes(range=[0, 1])
    return fig


def _read_log(log: str | Path | Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    if isinstance(log, (str, Path)):
        with open(log, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]
    return list(log)


def _is_number(v: Any) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        return False
    return math.isfinite(float(v))


def training_curves(
    log: str | Path | Sequence[Mapping[str, Any]],
    columns: str | Sequence[str] | None = None,
    x: str = "step",
    title: str = "Training curves",
    separate: bool = False,
) -> go.Figure:
    """Any logged column against ``x`` (default ``"step"``), one trace per column.

    ``log`` is a list of row dicts or the path of a run's ``log.jsonl`` (one JSON object
    per line; blank lines ignored). ``columns`` defaults to every key that holds a number
    in some row, except ``x``. A row contributes to a column's trace only when it has a
    finite number for both ``x`` and that column (rows missing the column, or holding
    ``None``/NaN/non-numbers, are skipped). With ``separate=True`` each column gets its
    own stacked subplot (useful when scales differ); otherwise all share one axis.
    """
    rows = _read_log(log)
    if columns is None:
        cols: list[str] = []
        for row in rows:
            for key, v in row.items():
                if key != x and key not in cols and _is_number(v):
                    cols.append(key)
    elif isinstance(columns, str):
        cols = [columns]
    else:
        cols = list(columns)
    if separate and cols:
        fig = make_subplots(rows=len(cols), cols=1, shared_xaxes=True, subplot_titles=cols)
    else:
        fig = go.Figure()
    for i, col in enumerate(cols):
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
        if separate:
            fig.add_trace(trace, row=i + 1, col=1)
        else:
            fig.add_trace(trace)
    fig.update_layout(title=title)
    fig.update_xaxes(title_text=x, row=len(cols) if separate and cols else None)
    return fig
