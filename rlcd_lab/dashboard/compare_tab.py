"""Compare tab: two checkpoints answer the same question, side by side.

Each side is the Ask tab's reading (:func:`rlcd_lab.dashboard.ask_tab.ask`: M rationales,
each one's temperature-scaled readout, the mixture) under the same
:class:`rlcd_lab.routing.DecisionRule`, so the two decisions are comparable: e.g. a base
checkpoint against the two-stage RLCD checkpoint trained from it. A side that cannot
answer (options that are not single tokens for its tokenizer, a prompt past its context)
shows why; the other is still shown.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import plotly.graph_objects as go

from .. import plots
from ..assets import ASSETS
from ..routing import DEFAULT_THRESHOLD
from . import ask_tab


def _side(
    checkpoint: str, args: tuple, threshold: float, measure: str, aggregate: str, root: Path
) -> tuple[str, go.Figure, dict]:
    """One side: ``(markdown, readout bars, result)``; a ``gr.Error`` becomes the markdown
    and ``{"error": message}``."""
    try:
        verdict, _, fig, result = ask_tab.ask(
            checkpoint, *args, threshold, measure, aggregate, root=root
        )
    except gr.Error as err:
        msg = getattr(err, "message", str(err))
        return (
            f"#### `{checkpoint}`\n\n**Cannot answer:** {msg}",
            plots.apply_theme(go.Figure()),
            {"checkpoint": checkpoint, "error": msg},
        )
    return f"#### `{checkpoint}`\n\n{verdict}", fig, result


def compare_checkpoints(
    checkpoint_a: str,
    checkpoint_b: str,
    question: str,
    options: str,
    m: float = 4,
    sampling_temperature: float = 1.0,
    max_new_tokens: float = 64,
    seed: float | None = 0,
    threshold: float = DEFAULT_THRESHOLD,
    measure: str = "max_p",
    aggregate: str = "single",
    root: str | Path = ASSETS,
) -> tuple[str, str, go.Figure, str, go.Figure, dict]:
    """``(summary, markdown A, bars A, markdown B, bars B, {"a": result, "b": result})``.

    Both checkpoints read ``question`` with the same options, sampling settings and seed,
    and are decided by the same rule (:func:`rlcd_lab.dashboard.ask_tab.ask`). The
    summary says whether they agree on the answer and on the decision. Raises
    ``gr.Error`` when neither side can answer, or for input that no checkpoint could
    answer (no question, no options, sizes over the Ask tab's limits, a bad rule)."""
    ask_tab.check_sizes(question, options)
    if not (question or "").strip():
        raise gr.Error("type a question, or pick a task example in the Ask tab")
    ask_tab.parse_options(options)
    ask_tab.make_rule(threshold, measure, aggregate)
    root = Path(root)
    args = (question, options, m, sampling_temperature, max_new_tokens, seed)
    md_a, fig_a, a = _side(checkpoint_a, args, threshold, measure, aggregate, root)
    md_b, fig_b, b = _side(checkpoint_b, args, threshold, measure, aggregate, root)
    if "error" in a and "error" in b:
        raise gr.Error(f"neither checkpoint can answer: A: {a['error']} B: {b['error']}")
    if "error" in a or "error" in b:
        summary = "Only one checkpoint could answer; the other says why."
    else:
        ra, rb = a["routing"], b["routing"]
        same = "agree" if ra["answer"] == rb["answer"] else "disagree"
        summary = (
            f"The two checkpoints **{same}**: A answers **{ra['answer']}** "
            f"(confidence {ra['confidence']:.3f}, {ra['decision']}), B answers "
            f"**{rb['answer']}** (confidence {rb['confidence']:.3f}, {rb['decision']}). "
            f"**Rule:** {ra['description']}."
        )
    return summary, md_a, fig_a, md_b, fig_b, {"a": a, "b": b}
