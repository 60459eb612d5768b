"""Proposition 1 playground: ``J(p, q) = E_r J(u_r, q) + E_r ||u_r - p||^2`` (Brier).

Scoring the mixture ``p = (1/M) sum_r u_r`` of M readouts pays a bonus for readouts that
disagree; the mean of the per-rationale scores does not (OpenJev-RLCD, Proposition 1,
:func:`rlcd_lab.decomposition.variance_decomposition`). With sampled one-hot answers the
mixture score is RLVR's reward plus a Gini bonus (Corollary 1).
"""

from __future__ import annotations

import gradio as gr
import pandas as pd
import plotly.graph_objects as go
import torch

from rlcd_lab.dashboard.common import compact_layout
from rlcd_lab.decomposition import sampled_answer_decomposition, variance_decomposition
from rlcd_lab.drawing import plots

MAX_M = 4
LABELS = ("A", "B", "C")
DEFAULT_A = (0.9, 0.2, 0.6, 0.5)
DEFAULT_B = (0.05, 0.6, 0.2, 0.3)
DEFAULT_QA, DEFAULT_QB = 0.7, 0.2


def simplex(a: float, b: float, k: int) -> list[float]:
    """A distribution over ``k`` in {2, 3} options from slider values: ``(a, 1 - a)``, or
    ``(a, b, 1 - a - b)`` with ``(a, b)`` rescaled to sum to 1 when ``a + b > 1``."""
    if k == 2:
        return [a, 1.0 - a]
    if k != 3:
        raise gr.Error("the playground has 2 or 3 options")
    if a + b > 1.0:
        a, b = a / (a + b), b / (a + b)
    return [a, b, max(0.0, 1.0 - a - b)]


def _rows(u: torch.Tensor, q: torch.Tensor) -> list[list[str]]:
    d = variance_decomposition(u, q)
    c = sampled_answer_decomposition(d["mixture"], q)
    return [
        ["mixture score J(p, q)", f"{d['mixture_score'].item():.6f}"],
        ["mean score E_r J(u_r, q)", f"{d['mean_score'].item():.6f}"],
        ["diversity E_r ||u_r - p||^2", f"{d['diversity'].item():.6f}"],
        ["RLVR reward p·q", f"{c['rlvr_reward'].item():.6f}"],
        ["Gini bonus 1 - ||p||^2", f"{c['gini'].item():.6f}"],
    ]


def proposition1_sliders(
    k: int,
    m: int,
    a1: float,
    b1: float,
    a2: float,
    b2: float,
    a3: float,
    b3: float,
    a4: float,
    b4: float,
    qa: float,
    qb: float,
) -> tuple[str, pd.DataFrame, go.Figure]:
    """Proposition 1 on ``m`` readouts over ``k`` options set by sliders (see
    :func:`simplex`): ``(check markdown, table of the terms, bars of u_r, p and q)``."""
    k, m = int(k), int(m)
    if not 1 <= m <= MAX_M:
        raise gr.Error(f"M must be between 1 and {MAX_M}")
    pairs = [(a1, b1), (a2, b2), (a3, b3), (a4, b4)][:m]
    u = torch.tensor([simplex(a, b, k) for a, b in pairs], dtype=torch.float64)
    q = torch.tensor(simplex(qa, qb, k), dtype=torch.float64)
    rows = _rows(u, q)
    mix, mean, div = (float(v) for _, v in rows[:3])
    check = (
        f"J(p, q) = **{mix:.4f}** = E_r J(u_r, q) **{mean:.4f}** + diversity **{div:.4f}** "
        f"(difference {abs(mix - mean - div):.1e}). "
        + (
            "The mixture scores higher than its rationales on average: disagreeing "
            "readouts earn the diversity bonus."
            if div > 1e-12
            else "All readouts agree: no diversity bonus."
        )
    )
    labels = list(LABELS[:k])
    fig = plots.rationale_bars(u, labels, title="Readouts u_r, their mixture p, and q")
    fig.add_trace(
        go.Scatter(
            x=labels,
            y=q.tolist(),
            mode="markers",
            name="q (outcomes)",
            marker={"symbol": "line-ew-open", "size": 28, "color": "#d62728", "line": {"width": 3}},
        )
    )
    return (
        check,
        pd.DataFrame(rows, columns=["term", "value"]),
        plots.apply_theme(compact_layout(fig, 0.25)),
    )


def playground_visibility(k: int, m: int) -> list:
    """Show the sliders that matter: ``u_r(A)`` for ``r <= m``, ``u_r(B)`` and ``q(B)``
    only with 3 options. Order: a1..a4, b1..b4, qb."""
    k, m = int(k), int(m)
    a = [gr.update(visible=i < m) for i in range(MAX_M)]
    b = [gr.update(visible=i < m and k == 3) for i in range(MAX_M)]
    return [*a, *b, gr.update(visible=k == 3)]


def proposition1_table(readouts: str, q: str) -> list[list[str]]:
    """Parse ``readouts`` (one comma-separated distribution per line) and ``q``; return the
    rows ``[term, value]`` of Proposition 1 (and Corollary 1). Raises ``gr.Error`` on
    malformed input."""
    try:
        u = torch.tensor(
            [[float(v) for v in line.split(",")] for line in readouts.strip().splitlines()],
            dtype=torch.float64,
        )
        qq = torch.tensor([float(v) for v in q.split(",")], dtype=torch.float64)
    except ValueError as err:
        raise gr.Error(f"could not read the numbers: {err}") from None
    if u.dim() != 2 or u.shape[-1] != qq.shape[-1]:
        raise gr.Error("every readout and q need the same number of options")
    if (u < 0).any() or (qq < 0).any():
        raise gr.Error("probabilities must be non-negative")
    if (u.sum(-1) <= 0).any() or qq.sum() <= 0:
        raise gr.Error("every distribution needs some positive mass")
    u, qq = u / u.sum(-1, keepdim=True), qq / qq.sum()
    return _rows(u, qq)
