"""Compare tab: two checkpoints answer the same question, side by side.

Each side is the Ask tab's reading (:func:`rlcd_lab.dashboard.ask_tab.ask`) under the same
:class:`rlcd_lab.math.routing.DecisionRule`, so the two decisions are comparable, e.g. a
base checkpoint against the two-stage RLCD checkpoint trained from it. Start at
:func:`compare_checkpoints` (the summary, :func:`readout_words`, calls a side near uniform
undecided: :data:`UNDECIDED_MARGIN`); the tab opens on :func:`compare_defaults`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import gradio as gr
import plotly.graph_objects as go

from rlcd_lab.dashboard import ask_tab
from rlcd_lab.dashboard.ask_checkpoint import task_items
from rlcd_lab.dashboard.common import checkpoint_dir
from rlcd_lab.dashboard.runs_tab import warnings_markdown
from rlcd_lab.drawing import plots
from rlcd_lab.files.assets import ASSETS, default_checkpoint, tiny_verify_first
from rlcd_lab.files.rundir import CheckpointError
from rlcd_lab.lm.checkpoint import read_meta
from rlcd_lab.math.routing import DEFAULT_THRESHOLD
from rlcd_lab.reader import PRETRAINED_METHODS

UNDECIDED_MARGIN = 0.05
"""A readout whose chance-corrected confidence ``(K max p - 1) / (K - 1)`` is below this
is "undecided": near uniform (K = 2: max p < 0.525), its arg max a tie-break. The Compare
summary says so instead of "agree" or "disagree"."""
TRAINED_METHOD = "reinforce"
"""The method of the two-stage RLCD checkpoint the Compare tab opens on (side B)."""
BASE_METHODS = (*PRETRAINED_METHODS, "teach")
"""Methods of a base (stage-0) checkpoint, preferred as side A: never calibrated."""


def _task_of(name: str, root: Path) -> tuple[str | None, str | None]:
    """``(task, method)`` of a checkpoint name from its ``rlcd.json`` (no model is
    loaded); ``(None, None)`` when it cannot be read."""
    try:
        meta = read_meta(checkpoint_dir(name, root))
    except (gr.Error, OSError, ValueError, CheckpointError):
        return None, None
    task = meta.get("task")
    return (str(task) if task else None), meta.get("method")


def default_pair(names: Sequence[str], root: str | Path = ASSETS) -> tuple[str | None, str | None]:
    """The pair the Compare tab opens on, among checkpoint ``names``: ``(A, B)`` with B a
    two-stage RLCD checkpoint (method :data:`TRAINED_METHOD`; the tiny ``verify`` task's
    first, :func:`rlcd_lab.files.assets.tiny_verify_first`) and A a checkpoint of the *same task*
    (``rlcd.json`` ``"task"``): a base one (:data:`BASE_METHODS`) when there is one, else
    another of its task (e.g. its stage-1 ``calibrate``). Without such a pair both sides are
    :func:`rlcd_lab.files.assets.default_checkpoint` (one checkpoint, two draws: still one task);
    ``(None, None)`` for no names. Reads only ``rlcd.json`` files."""
    names = list(names)
    if not names:
        return None, None
    root = Path(root)
    info = {n: _task_of(n, root) for n in names}
    ordered = sorted(names, key=tiny_verify_first)
    for b in ordered:
        task, method = info[b]
        if method != TRAINED_METHOD or task is None:
            continue
        same = [n for n in names if n != b and info[n][0] == task]
        bases = [n for n in same if info[n][1] in BASE_METHODS]
        if bases or same:
            return (bases or same)[0], b
    first = default_checkpoint(names)
    return first, first


def compare_defaults(
    names: Sequence[str], root: str | Path = ASSETS
) -> tuple[str | None, str | None, str, str]:
    """What the Compare tab opens with: ``(A, B, question, options)``, the pair of
    :func:`default_pair` and the first test item of B's task (its question and options,
    comma-separated); an empty question when the task has none (or B names none)."""
    a, b = default_pair(names, root)
    question, options = "", ""
    if b is not None:
        try:
            meta = read_meta(checkpoint_dir(b, root))
        except (gr.Error, OSError, ValueError, CheckpointError):
            meta = {}
        items = task_items(meta)
        if items:
            question, options = items[0].prompt, ", ".join(items[0].options)
    return a, b, question, options


def readout_words(side: str, routed: dict, options: Sequence[str]) -> tuple[bool, str]:
    """``(undecided, words)``: what one side's readout (``routed``: :func:`ask_tab.route_result`,
    the rule's readout ``probs``) shows. Undecided when its chance-corrected confidence is
    below :data:`UNDECIDED_MARGIN` (``"B is undecided: 0.50/0.50 (Y/N)"``); else its answer
    with the readout and the rule's confidence and decision."""
    probs = [float(p) for p in routed["probs"]]
    k = len(probs)
    spread = "/".join(f"{p:.2f}" for p in probs)
    labels = "/".join(options)
    corrected = (k * max(probs) - 1) / (k - 1) if k > 1 else 1.0
    if corrected < UNDECIDED_MARGIN:
        return True, (
            f"{side} is undecided: {spread} ({labels}; confidence "
            f"{routed['confidence']:.3f}, {routed['decision']})"
        )
    return False, (
        f"{side} answers **{routed['answer']}**: {spread} ({labels}; confidence "
        f"{routed['confidence']:.3f}, {routed['decision']})"
    )


def _side(
    checkpoint: str, args: tuple, threshold: float, measure: str, aggregate: str, root: Path
) -> tuple[str, go.Figure, dict]:
    """One side: ``(markdown, readout bars, result)``; a ``gr.Error`` becomes the markdown
    and ``{"error": message}``. The checkpoint's stored warnings (its training's final
    evaluation, :func:`rlcd_lab.dashboard.runs_tab.warnings_markdown`) end the markdown."""
    try:
        warned = warnings_markdown(read_meta(checkpoint_dir(checkpoint, root)))
    except (gr.Error, OSError, ValueError, CheckpointError):
        warned = ""  # the reading below says why the checkpoint cannot be used
    warned = f"\n\n{warned}" if warned else ""
    try:
        verdict, _, fig, result = ask_tab.ask(
            checkpoint, *args, threshold, measure, aggregate, root=root
        )
    except gr.Error as err:
        msg = getattr(err, "message", str(err))
        return (
            f"#### `{checkpoint}`\n\n**Cannot answer:** {msg}{warned}",
            plots.apply_theme(go.Figure()),
            {"checkpoint": checkpoint, "error": msg},
        )
    return f"#### `{checkpoint}`\n\n{verdict}{warned}", fig, result


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
    summary says what each side's readout (the rule's: first rationale or mixture) shows
    (:func:`readout_words`), and whether they agree on the answer only when neither is
    undecided (at or near uniform); then whether they agree on the decision. Raises
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
        undecided_a, words_a = readout_words("A", ra, a["options"])
        undecided_b, words_b = readout_words("B", rb, b["options"])
        if undecided_a or undecided_b:
            head = "No agreement to report (an undecided readout's answer is a tie-break)"
        else:
            same = "agree" if ra["answer"] == rb["answer"] else "disagree"
            head = f"The two checkpoints **{same}** on the answer"
        both = "the same" if ra["decision"] == rb["decision"] else "different"
        summary = (
            f"{head}: {words_a}; {words_b}. They take {both} decisions. "
            f"**Rule:** {ra['description']}."
        )
    return summary, md_a, fig_a, md_b, fig_b, {"a": a, "b": b}
