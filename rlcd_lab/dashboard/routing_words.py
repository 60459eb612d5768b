"""What the Routing tab says in words: its tables' columns, each with a line saying what it
means (shown under each table, :func:`columns_help`), and why a run at chance is left out
of the figures (:func:`chance_reason`, :func:`left_out_note`)."""

from __future__ import annotations

import numpy as np

from rlcd_lab import metrics

T_HELP = "temperature fitted on dev; the readouts are softmax(logits / T)"
ROUTING_HELP = {
    "run": "the run: its task folder and method",
    "T": T_HELP,
    "decided automatically": "test items whose confidence is at least t (share and count)",
    "error when decided": "the share of those items answered wrongly",
    "escalated": "test items sent to a person (confidence below t)",
    "cost per item": "(cost of a wrong decision × wrong + cost of escalating × escalated) / "
    "items; lower is better",
    "threshold from dev": "the lowest t whose error on dev is at most ε (chosen without test "
    "labels)",
    "decided on test at it": "the share of test items that threshold decides",
    "error on test at it": "their error on test (near ε when dev and test agree)",
}
"""The routing table's columns and what each says (shown under the table)."""
METRIC_HELP = {
    "run": "the run",
    "accuracy": "share of test items whose most likely option is right",
    "Brier": "squared error of the probabilities; lower is better",
    "NLL": "negative log-probability of the right option; lower is better",
    "ECE": "gap between confidence and accuracy over 15 bins; lower is better",
    "AURC": "area under the risk-coverage curve (the error averaged over every coverage); "
    "lower is better",
    "Cov@ε": "the largest share of test items decidable with observed error at most ε "
    "(uses the labels); higher is better",
    "predicted Cov@ε": "the same from the model's own confidences, without labels: 0 when "
    "every confidence is below 1 − ε",
    "T": T_HELP,
    "rationale length": "mean tokens per rationale (0: the run answers directly)",
}
"""The metrics table's columns and what each says (shown under the table)."""
ROUTING_COLUMNS = list(ROUTING_HELP)
COLUMN_WIDTHS = ["190px", "80px", "130px", "150px", "90px", "90px", "100px", "120px", "120px"]
"""Widths of the routing table's columns (fixed: on a phone the table scrolls sideways)."""
METRIC_COLUMNS = list(METRIC_HELP)


def columns_help(help: dict[str, str], eps: float | None = None) -> str:
    """One line per column of a table (``help``: name -> what it says), ε written as
    ``eps`` when given."""
    lines = [f"**{name}**: {what}" for name, what in help.items() if name != "run"]
    text = " · ".join(lines)
    return text.replace("ε", f"ε = {eps:g}") if eps is not None else text


CHANCE_MARGIN = 0.05
"""A run whose every test confidence is within this of chance (1/K) is left out of the
figures (:func:`degenerate_reason`): its curves sit at chance and squash the others."""


def chance_reason(
    confidence: np.ndarray, k: int, fitted_t: float | None, mean_length: float | None
) -> str:
    """Why a run is left out of the figures ("" when it is drawn): every test
    ``confidence`` is within :data:`CHANCE_MARGIN` of chance ``1/k`` (its risk-coverage
    curve sits at a coin's error and its cost curve far above the others'), said with what
    shows in its row: a fitted T (``fitted_t``; None: not fitted) at the fit's upper bound
    (``metrics.T_MAX``: the readouts carry no signal on dev, so scaling flattens them) and
    a ``mean_length`` of 0 (the run answers directly)."""
    c = np.asarray(confidence, dtype=np.float64)
    if c.size == 0 or c.max() > 1.0 / k + CHANCE_MARGIN:
        return ""
    parts = [f"every confidence within {CHANCE_MARGIN:g} of chance (1/{k}; highest {c.max():.3f})"]
    if fitted_t is not None and fitted_t >= metrics.T_MAX:
        parts.append(f"T {fitted_t:.3f} is the fit's upper bound: its readouts carry no signal")
    if mean_length == 0:
        parts.append("rationale length 0: it answers directly, without a rationale")
    return "; ".join(parts)


def left_out_note(left_out: dict[str, str]) -> str:
    """Markdown naming the runs left out of the figures and why (:func:`chance_reason`),
    after a blank line; "" for none."""
    lines = [f"- **{label}**: {why}" for label, why in left_out.items()]
    return (
        "\n\n**Left out of the figures** (their rows stay in the tables): at chance, their "
        "curves would squash the others into one band.\n" + "\n".join(lines)
    ) * bool(left_out)
