"""The dashboard's layout: seven tabs wired to the pure callbacks of the sibling modules.

Every event has an explicit ``api_name`` (``gradio_client`` calls them as
``client.predict(..., api_name="/routing")``); the callbacks take the assets root as a
keyword bound here, so a test can point the whole app at fabricated runs.

The decision rule (confidence measure, single query or mixture, threshold) is set in the
Ask, Compare, Batch and Routing tabs; a user's change in one tab moves the others, so every
tab applies the same :class:`rlcd_lab.math.routing.DecisionRule` and names it.

The queue is bounded (:data:`QUEUE_MAX_SIZE`: past it a request is turned away at once
with gradio's "Queue is full" message instead of waiting without end) and shared fairly
(:class:`FairQueue`): one browser session may have at most :data:`MAX_SESSION_EVENTS`
events waiting and one client address :data:`MAX_CLIENT_EVENTS`, so one user's burst is
refused beyond its share instead of filling the queue for everyone. The events that
run a model (Ask, the Ask that follows a page load, Compare and Batch) share one
concurrency group of :data:`MODEL_CONCURRENCY`; the other callbacks are light and pure and
run :data:`DEFAULT_CONCURRENCY` at a time each, beside a running model request. Together
with the Ask tab's size limits (``ask_tab.MAX_QUESTION_CHARS``, the model's context) and the
Batch tab's (``batch_tab.MAX_BATCH_ROWS``) this bounds how long one user's request can
make the others wait.

Every callback that opens a checkpoint or a run is confined (``common.confine``) to the
shipped assets, ``runs/``, ``$RLCD_CHECKPOINT``, the converted SmolLM2 checkpoint and the
folders the operator allows (``build_demo(allowed_dirs=...)``, ``rlcd-lab app
--allow-checkpoint-dir``): a typed path elsewhere is refused with a message that does not
say whether it exists.

Figures follow the page's light or dark theme: they are drawn on a transparent background
with neutral grid lines (:func:`rlcd_lab.reports.plots.apply_theme`, ``auto``) and :data:`CSS`
recolours their text in dark mode.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr
from gradio import queueing

from rlcd_lab.dashboard import (
    ask_checkpoint,
    ask_tab,
    batch_tab,
    compare_tab,
    help_tab,
    playground,
    routing_tab,
    runs_tab,
)
from rlcd_lab.dashboard.common import (
    RUNS_DIR,
    allowed_places,
    checkpoint_choices,
    confine,
    default_runs,
    env_checkpoint,
    forwarded_trust,
    local_checkpoints,
    local_run_choices,
    run_choices,
    trained_checkpoints,
)
from rlcd_lab.files import rundir
from rlcd_lab.files.assets import ASSETS, default_checkpoint
from rlcd_lab.math.routing import DEFAULT_THRESHOLD
from rlcd_lab.metrics import DEFAULT_EPS

INTRO = """# rlcd_lab: calibrated decisions from reasoning models
A model writes a rationale that ends in `Answer:`; we **read** its next-token distribution
over the option tokens (the readout *u*), score it with a proper scoring rule, and
decide automatically only when the calibrated confidence is high enough.
**Ask** a checkpoint a question · **Compare** two checkpoints on one question · answer a
**Batch** file · compare **Routing** of RLCD against GRPO/SFT/RFT on cached eval dumps ·
inspect training **Runs** · play with **Proposition 1** · look terms up in **Help**.
Everything here runs on the CPU, offline: the shipped tiny checkpoints, runs you trained
under `runs/`, SmolLM2-135M-Instruct once converted (`rlcd-lab gguf smollm2`), or the checkpoint
named by `$RLCD_CHECKPOINT`."""

CSS = """
.dark .js-plotly-plot .main-svg .infolayer text,
.dark .js-plotly-plot .main-svg g[class$="tick"] text,
.dark .js-plotly-plot .main-svg .annotation text,
.dark .js-plotly-plot .main-svg .legendtext {
  fill: var(--body-text-color) !important;
}
.dark .js-plotly-plot .modebar-btn path { fill: var(--body-text-color-subdued) !important; }
th[role="columnheader"] span {
  word-break: normal !important;
  overflow-wrap: normal !important;
}
.js-plotly-plot .plotly .modebar { opacity: 0; transition: opacity 0.3s ease; }
.js-plotly-plot .plotly:hover .modebar,
.js-plotly-plot .plotly:focus-within .modebar { opacity: 1; }
"""
"""Dark mode for the plotly figures: their text takes the theme's text colour (the figures
themselves are transparent, :func:`rlcd_lab.reports.plots.apply_theme`). Table headers break
between words only (gradio's ``break-word`` split "escalated" across lines in a narrow
column; the column widens to its longest word instead). Plotly's mode bar (toolbar)
shows while the pointer is over a figure or a button in it has the focus: plotly does
that itself (``displayModeBar: "hover"``) only where the browser reports a pointer that
can hover, and gradio passes no plotly config."""

QUEUE_MAX_SIZE = 128
"""Events that may wait in the queue at once (all events and users together; a page load
queues about seven). Past it gradio answers "Queue is full" at once."""
MAX_SESSION_EVENTS = 12
"""Events one browser session (gradio's session hash) may have waiting at once."""
MAX_CLIENT_EVENTS = 24
"""Events one client address may have waiting at once, all its sessions together (a
client can open sessions at will). The address is the connection's peer: an
``X-Forwarded-For`` header counts only from the proxies named in
``$RLCD_TRUSTED_PROXIES`` (``common.trusted_proxies``; none by default)."""
DEFAULT_CONCURRENCY = 2
"""How many calls of one light callback (Routing, Runs, Proposition 1, examples) run at once."""
MODEL_CONCURRENCY = 1
"""How many model requests (Ask, Compare, Batch) run at once, across users. One: the reader
seeds torch's global generator for a reproducible draw, which two concurrent draws would
interleave, and the model already uses every CPU core."""
MODEL_CONCURRENCY_ID = "model"
"""The concurrency group of the events that run a model."""

SYSTEM_FONTS = ["system-ui", "-apple-system", "Segoe UI", "Roboto", "Helvetica", "Arial"]
SYSTEM_MONO = ["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"]


def offline_theme() -> gr.themes.Base:
    """Gradio's default theme with system fonts only: names given as plain strings load
    no stylesheet, so the page fetches no web fonts (no network)."""
    return gr.themes.Default(font=[*SYSTEM_FONTS, "sans-serif"], font_mono=SYSTEM_MONO)


class FairQueue(queueing.Queue):
    """Gradio's queue with a share per user: an event is refused at once (gradio's
    "queue full" answer, HTTP 503, with a message saying why) when its session already has
    :data:`MAX_SESSION_EVENTS` events waiting or its client address
    :data:`MAX_CLIENT_EVENTS`; otherwise gradio's own bound (``max_size``) applies.
    Running events do not count, only waiting ones."""

    max_session_events = MAX_SESSION_EVENTS
    max_client_events = MAX_CLIENT_EVENTS

    def _waiting(self) -> list[queueing.Event]:
        return [e for q in self.event_queue_per_concurrency_id.values() for e in q.queue]

    async def push(self, body: Any, request: Any, username: str | None) -> tuple:
        """Gradio's ``Queue.push`` after the per-session and per-client checks."""
        lock = self.__dict__.setdefault("_fair_lock", asyncio.Lock())
        async with lock:  # the checks and the push, one event at a time
            waiting = self._waiting()
            session = getattr(body, "session_hash", None)
            if session is not None:
                mine = sum(e.session_hash == session for e in waiting)
                if mine >= self.max_session_events:
                    msg = (
                        f"You already have {mine} requests waiting; "
                        "wait for them to finish, then try again."
                    )
                    return False, msg, "queue_full"
            host = _client_host(request)
            if host is not None:
                theirs = sum(_client_host(e.request) == host for e in waiting)
                if theirs >= self.max_client_events:
                    msg = (
                        f"Your address already has {theirs} requests waiting; "
                        "wait for them to finish, then try again."
                    )
                    return False, msg, "queue_full"
            return await super().push(body, request, username)


def _client_host(request: Any) -> str | None:
    client = getattr(request, "client", None)
    return getattr(client, "host", None)


class Dashboard(gr.Blocks):
    """``gr.Blocks`` that launches with :func:`offline_theme` unless told otherwise, and
    whose queue is a :class:`FairQueue`.

    Gradio 6 takes the theme in ``launch()``; ``rlcd-lab app`` and ``app.py`` call a bare
    ``launch()``, so the default lives here. ``launch()`` also sets which proxies' forwarded
    headers uvicorn believes (``common.forwarded_trust``: none unless configured).
    """

    def launch(self, *args, **kwargs):  # noqa: D102 (gradio's docstring applies)
        kwargs.setdefault("theme", offline_theme())
        kwargs.setdefault("css", CSS)
        with forwarded_trust():  # uvicorn believes forwarded headers only from these
            return super().launch(*args, **kwargs)

    def queue(self, *args, **kwargs):  # noqa: D102 (gradio's docstring applies)
        out = super().queue(*args, **kwargs)
        self._queue.__class__ = FairQueue  # same state, fair push
        return out


def _checkpoints(root: Path, runs_root: Path) -> tuple[list[str], str | None]:
    """Checkpoint choices (shipped, local, trained under ``runs_root``) and the first one."""
    names = checkpoint_choices(root)
    first = env_checkpoint() or default_checkpoint(names)
    names += [n for n in local_checkpoints() + trained_checkpoints(runs_root) if n not in names]
    return names, first


CHECKPOINT_INFO = (
    "a shipped checkpoint, a run trained under runs/ (its final/), a local one "
    "($RLCD_CHECKPOINT, SmolLM2 once converted with `rlcd-lab gguf smollm2`), or type a directory"
)


def _rule_controls() -> tuple[gr.Radio, gr.Radio, gr.Slider]:
    """The decision-rule controls: confidence measure, readout, threshold."""
    with gr.Group():
        with gr.Row():
            measure = gr.Radio(
                routing_tab.MEASURE_CHOICES,
                value="max_p",
                label="confidence",
                info="max p, or (K max p − 1)/(K − 1) as the server uses",
                min_width=160,
            )
            aggregate = gr.Radio(
                routing_tab.AGGREGATE_CHOICES,
                value="single",
                label="decide on",
                info="the first rationale's readout, or the mixture of all M",
                min_width=160,
            )
        threshold = gr.Slider(
            0.0,
            1.0,
            value=DEFAULT_THRESHOLD,
            step=0.001,
            label="threshold t: decide automatically when confidence ≥ t",
        )
    return measure, aggregate, threshold


def _sampling_controls() -> tuple[gr.Slider, gr.Slider, gr.Slider, gr.Number]:
    with gr.Row():
        m = gr.Slider(1, 8, value=4, step=1, label="M rationales", min_width=140)
        sampling_t = gr.Slider(
            0.05, 2.0, value=1.0, step=0.05, label="sampling temp.", min_width=140
        )
    with gr.Row():
        max_new = gr.Slider(4, 128, value=64, step=1, label="max rationale tokens", min_width=140)
        seed = gr.Number(0, precision=0, label="seed", min_width=100)
    return m, sampling_t, max_new, seed


def _ask_tab(root: Path, runs_root: Path, demo: gr.Blocks, places: tuple[Path, ...]) -> tuple:
    names, first = _checkpoints(root, runs_root)
    with gr.Row():
        with gr.Column(scale=2, min_width=320):
            checkpoint = gr.Dropdown(
                names,
                value=first,
                allow_custom_value=True,
                label="Checkpoint",
                info=CHECKPOINT_INFO,
            )
            with gr.Accordion("Model card", open=True):
                info = gr.Markdown()
            example = gr.Dropdown(
                [], label="Task example (test split)", info="fills the question and options"
            )
            question = gr.Textbox(
                label="Question",
                lines=2,
                info=f"at most {ask_tab.MAX_QUESTION_CHARS:,} characters, and it must fit the "
                "model's context with the rationale",
            )
            options = gr.Textbox(
                label="Options", info="comma-separated labels, each a single token (e.g. Y, N)"
            )
            m, sampling_t, max_new, seed = _sampling_controls()
            measure, aggregate, threshold = _rule_controls()
            button = gr.Button("Ask", variant="primary")
        with gr.Column(scale=3, min_width=320):
            verdict = gr.Markdown()
            texts = gr.HTML(label="Rationales")
            bars = gr.Plot(label="Readouts", show_label=False)
            with gr.Accordion("Exact numbers (JSON)", open=False):
                result = gr.JSON(label="result")

    fields = [checkpoint, question, options]
    inputs = [checkpoint, question, options, m, sampling_t, max_new, seed, threshold]
    inputs += [measure, aggregate]
    gr.on(
        [checkpoint.change, demo.load],
        confine(partial(ask_checkpoint.checkpoint_info, root=root), places),
        fields,
        [info, example, question, options],
        api_name="checkpoint_info",
    ).then(
        confine(partial(ask_tab.ask, root=root), places),
        inputs,
        [verdict, texts, bars, result],
        api_visibility="private",
        concurrency_limit=MODEL_CONCURRENCY,
        concurrency_id=MODEL_CONCURRENCY_ID,
    )
    example.input(
        confine(partial(ask_checkpoint.example_fields, root=root), places),
        [checkpoint, example],
        [question, options],
        api_name="example",
    )
    gr.on(
        [button.click, question.submit, options.submit],
        confine(partial(ask_tab.ask, root=root), places),
        inputs,
        [verdict, texts, bars, result],
        api_name="ask",
        concurrency_limit=MODEL_CONCURRENCY,
        concurrency_id=MODEL_CONCURRENCY_ID,
    )
    gr.on(
        [threshold.change, measure.change, aggregate.change],
        ask_tab.reroute,
        [result, threshold, measure, aggregate],
        [verdict, result],
        api_name="ask_reroute",
    )
    return (measure, aggregate, threshold), (checkpoint, question, options)


def _compare_tab(root: Path, runs_root: Path, ask_fields: tuple, places: tuple[Path, ...]) -> tuple:
    names, _ = _checkpoints(root, runs_root)
    pair_a, pair_b, pair_question, pair_options = compare_tab.compare_defaults(names, root)
    gr.Markdown(
        "Two checkpoints read the same question with the same sampling settings and are "
        "decided by the same rule: e.g. a base model against the RLCD model trained from it."
    )
    with gr.Row():
        a = gr.Dropdown(
            names, value=pair_a, allow_custom_value=True, label="Checkpoint A", min_width=260
        )
        b = gr.Dropdown(
            names,
            value=pair_b,
            allow_custom_value=True,
            label="Checkpoint B",
            min_width=260,
        )
    with gr.Row():
        with gr.Column(scale=2, min_width=320):
            question = gr.Textbox(pair_question, label="Question", lines=2)
            options = gr.Textbox(pair_options, label="Options", info="comma-separated labels")
            copy = gr.Button("Use the Ask tab's question", size="sm")
            m, sampling_t, max_new, seed = _sampling_controls()
            measure, aggregate, threshold = _rule_controls()
            button = gr.Button("Compare", variant="primary")
        with gr.Column(scale=3, min_width=320):
            summary = gr.Markdown("Press **Compare** to read the question with both checkpoints.")
            with gr.Row():
                with gr.Column(min_width=260):
                    md_a = gr.Markdown()
                    fig_a = gr.Plot(show_label=False)
                with gr.Column(min_width=260):
                    md_b = gr.Markdown()
                    fig_b = gr.Plot(show_label=False)
            with gr.Accordion("Exact numbers (JSON)", open=False):
                result = gr.JSON(label="both results")
    copy.click(
        lambda q, o: (q, o), list(ask_fields[1:]), [question, options], api_visibility="private"
    )
    button.click(
        confine(partial(compare_tab.compare_checkpoints, root=root), places),
        [a, b, question, options, m, sampling_t, max_new, seed, threshold, measure, aggregate],
        [summary, md_a, fig_a, md_b, fig_b, result],
        api_name="compare",
        concurrency_limit=MODEL_CONCURRENCY,
        concurrency_id=MODEL_CONCURRENCY_ID,
    )
    return measure, aggregate, threshold


def _batch_tab(root: Path, runs_root: Path, places: tuple[Path, ...]) -> tuple:
    names, first = _checkpoints(root, runs_root)
    gr.Markdown(
        "Upload a **JSONL** or **CSV** file with a `question` and an `options` column "
        "(options as a list or as `Y, N`; optional `label`: the true option). Every question "
        f"is answered as in the Ask tab (at most {batch_tab.MAX_BATCH_ROWS} per file) and "
        "decided by the rule below; download the answers as CSV."
    )
    with gr.Row():
        with gr.Column(scale=1, min_width=320):
            checkpoint = gr.Dropdown(
                names,
                value=first,
                allow_custom_value=True,
                label="Checkpoint",
                info=CHECKPOINT_INFO,
            )
            upload = gr.File(
                label="Questions (.jsonl or .csv)",
                file_types=list(batch_tab.SUFFIXES),
                type="filepath",
            )
        with gr.Column(scale=1, min_width=320):
            m, sampling_t, max_new, seed = _sampling_controls()
            measure, aggregate, threshold = _rule_controls()
            button = gr.Button("Answer all", variant="primary")
    # the answers below, across the page: the table's columns need its whole width
    summary = gr.Markdown()
    table = gr.Dataframe(
        value={"headers": batch_tab.RESULT_COLUMNS, "data": []},
        label="Answers",
        interactive=False,
        wrap=True,
        column_widths=batch_tab.COLUMN_WIDTHS,
    )
    download = gr.File(label="answers.csv", interactive=False, visible=False)
    button.click(
        confine(partial(batch_tab.batch_answers, root=root), places),
        [checkpoint, upload, m, sampling_t, max_new, seed, threshold, measure, aggregate],
        [summary, table, download],
        api_name="batch",
        concurrency_limit=MODEL_CONCURRENCY,
        concurrency_id=MODEL_CONCURRENCY_ID,
    ).success(_shown, None, download, api_visibility="private", show_progress="hidden")
    return measure, aggregate, threshold


def _shown() -> dict:
    """Show a component hidden until it has a value (the Batch tab's answers.csv)."""
    return gr.update(visible=True)


def _routing_tab(root: Path, runs_root: Path, demo: gr.Blocks, places: tuple[Path, ...]) -> tuple:
    names = run_choices(root)
    names += [n for n in local_run_choices(runs_root) if n not in names]
    runs = gr.Dropdown(
        names,
        value=default_runs(run_choices(root)),
        multiselect=True,
        allow_custom_value=True,
        label="Runs (cached eval dumps)",
        info="shipped runs and runs trained under runs/; or type a run directory that "
        "holds eval/test.jsonl",
    )
    with gr.Row():
        with gr.Column(scale=3, min_width=300):
            measure, aggregate, threshold = _rule_controls()
        with gr.Column(scale=2, min_width=260):
            calibrated = gr.Checkbox(True, label="temperature-scale (T fitted on dev)")
            eps = gr.Slider(0.005, 0.5, value=DEFAULT_EPS, step=0.005, label="error budget ε")
            with gr.Row():
                cost_wrong = gr.Number(
                    routing_tab.DEFAULT_COST_WRONG,
                    minimum=0,
                    label="cost of a wrong automated decision",
                    min_width=120,
                )
                cost_escalate = gr.Number(
                    routing_tab.DEFAULT_COST_ESCALATE,
                    minimum=0,
                    label="cost of escalating an item",
                    min_width=120,
                )
            bayes = gr.Button("set t to the cost-optimal threshold", size="sm")
    summary = gr.Markdown()
    table = gr.Dataframe(
        label="Routing at threshold t (test split)",
        interactive=False,
        wrap=True,
        column_widths=routing_tab.COLUMN_WIDTHS,
    )
    with gr.Row():
        rc_plot = gr.Plot(show_label=False, min_width=300)
        cost_plot = gr.Plot(show_label=False, min_width=300)
    metrics_table = gr.Dataframe(label="Per-run metrics (test split)", interactive=False)
    reliability = gr.Plot(show_label=False)
    with gr.Accordion("Exact numbers (JSON)", open=False):
        numbers = gr.JSON(label="routing")

    inputs = [runs, threshold, eps, cost_wrong, cost_escalate, calibrated, measure, aggregate]
    gr.on(
        [c.change for c in inputs] + [demo.load],
        confine(partial(routing_tab.routing_update, root=root), places),
        inputs,
        [summary, table, metrics_table, rc_plot, numbers],
        api_name="routing",
        trigger_mode="always_last",
        show_progress="hidden",
    )
    slow = [runs, cost_wrong, cost_escalate, calibrated, measure, aggregate]
    gr.on(
        [c.change for c in slow] + [demo.load],
        confine(partial(routing_tab.routing_figures, root=root), places),
        slow,
        [reliability, cost_plot],
        api_name="routing_figures",
        trigger_mode="always_last",
    )
    bayes.click(
        confine(partial(routing_tab.bayes_for_runs, root=root), places),
        [cost_wrong, cost_escalate, measure, runs],
        threshold,
        api_name="bayes",
    )
    return measure, aggregate, threshold


def _runs_tab(root: Path, runs_root: Path, demo: gr.Blocks, places: tuple[Path, ...]) -> None:
    names = run_choices(root)
    defaults = default_runs(names)
    names += [n for n in local_run_choices(runs_root, rundir.LOG) if n not in names]
    columns, unreadable = runs_tab.scan_logs(names, root)  # a log that cannot be read: left out
    names = [n for n in names if n not in unreadable]
    defaults = [n for n in defaults if n not in unreadable]
    if unreadable:
        gr.Markdown(runs_tab.unreadable_note(unreadable))
    with gr.Row():
        run = gr.Dropdown(
            names,
            value=defaults[0] if defaults else None,
            allow_custom_value=True,
            label="Run",
            info="a shipped run, a run trained under runs/, or type a run directory that "
            "holds log.jsonl",
            min_width=300,
        )
        panels = gr.CheckboxGroup(
            list(runs_tab.PANELS), value=runs_tab.DEFAULT_PANELS, label="Panels"
        )
    summary = gr.Markdown()
    curves = gr.Plot(show_label=False)
    gr.Markdown("### Compare runs on one logged column")
    with gr.Row():
        with gr.Column(scale=3, min_width=300):
            compare = gr.Dropdown(
                names, value=defaults, multiselect=True, allow_custom_value=True, label="Runs"
            )
        with gr.Column(scale=1, min_width=200):
            column = gr.Dropdown(
                list(columns),
                value="rationale_length" if "rationale_length" in columns else None,
                allow_custom_value=True,
                label="Column",
            )
    compared = gr.Plot(show_label=False)
    gr.on(
        [run.change, panels.change, demo.load],
        confine(partial(runs_tab.run_curves, root=root), places),
        [run, panels],
        [curves, summary],
        api_name="run_curves",
    )
    gr.on(
        [compare.change, column.change, demo.load],
        confine(partial(runs_tab.compare_runs, root=root), places),
        [compare, column],
        compared,
        api_name="compare_runs",
    )


def _playground_tab(demo: gr.Blocks) -> None:
    gr.Markdown(
        "Proposition 1 (Brier): scoring the **mixture** p = mean of the M readouts gives "
        "J(p, q) = E_r J(u_r, q) + E_r ||u_r − p||² — the mean per-rationale score plus a "
        "**diversity** bonus. Each readout is (A, 1 − A) with 2 options; with 3 options C "
        "gets the rest (A and B are rescaled when they exceed 1)."
    )
    with gr.Row():
        with gr.Column(scale=2, min_width=340):
            with gr.Row():
                k = gr.Radio([2, 3], value=2, label="options K")
                m = gr.Slider(1, playground.MAX_M, value=3, step=1, label="readouts M")
            a, b = [], []
            for i in range(playground.MAX_M):
                with gr.Row():
                    a.append(
                        gr.Slider(
                            0,
                            1,
                            playground.DEFAULT_A[i],
                            step=0.01,
                            label=f"u{i + 1}(A)",
                            visible=i < 3,
                        )
                    )
                    b.append(
                        gr.Slider(
                            0,
                            1,
                            playground.DEFAULT_B[i],
                            step=0.01,
                            label=f"u{i + 1}(B)",
                            visible=False,
                        )
                    )
            with gr.Row():
                qa = gr.Slider(0, 1, playground.DEFAULT_QA, step=0.01, label="q(A)")
                qb = gr.Slider(0, 1, playground.DEFAULT_QB, step=0.01, label="q(B)", visible=False)
        with gr.Column(scale=3, min_width=420):
            check = gr.Markdown()
            table = gr.Dataframe(
                headers=["term", "value"], label="Proposition 1", interactive=False
            )
            fig = gr.Plot(show_label=False)
    sliders = [k, m, a[0], b[0], a[1], b[1], a[2], b[2], a[3], b[3], qa, qb]
    gr.on(
        [s.change for s in sliders] + [demo.load],
        playground.proposition1_sliders,
        sliders,
        [check, table, fig],
        api_name="proposition1",
        trigger_mode="always_last",
        show_progress="hidden",
    )
    gr.on(
        [k.change, m.change],
        playground.playground_visibility,
        [k, m],
        [*a, *b, qb],
        api_visibility="private",
    )
    with gr.Accordion("Type readouts instead", open=False):
        readouts = gr.Textbox(
            "0.9,0.1\n0.2,0.8\n0.6,0.4", lines=4, label="readouts u_r (one per line)"
        )
        q = gr.Textbox("0.7,0.3", label="outcome distribution q")
        typed = gr.Dataframe(headers=["term", "value"], label="Proposition 1", interactive=False)
        button = gr.Button("Decompose")
    gr.on(
        [button.click, demo.load],
        playground.proposition1_table,
        [readouts, q],
        typed,
        api_name="proposition1_text",
    )


def _copies(n: int):
    """A callback that returns its input ``n`` times (once when ``n == 1``)."""
    return (lambda v: v) if n == 1 else (lambda v: [v] * n)


def _sync(groups: list[tuple]) -> None:
    """Keep the rule controls of every tab equal: a user's change of one moves the same
    control in the other tabs (``.input``: programmatic updates do not echo back)."""
    for i in range(len(groups[0])):
        same = [g[i] for g in groups]
        for c in same:
            others = [o for o in same if o is not c]
            c.input(_copies(len(others)), c, others, api_visibility="private")


TAB_IDS = ("ask", "compare", "batch", "routing", "runs", "proposition1", "help")
"""The tabs' ids, in order; ``/?tab=<id>`` opens that tab (:func:`tab_from_query`)."""


def tab_from_query(query: Mapping[str, str] | None) -> str:
    """The tab a page's URL query names (``?tab=routing``, case and spaces ignored), or the
    first tab (``ask``) when it names none or an unknown one."""
    name = str((query or {}).get("tab", "")).strip().lower()
    return name if name in TAB_IDS else TAB_IDS[0]


def _select_tab(request: gr.Request) -> gr.Tabs:
    """On page load: select the tab named by the URL's ``tab`` query parameter."""
    return gr.Tabs(selected=tab_from_query(getattr(request, "query_params", None)))


def build_demo(
    root: str | Path = ASSETS,
    runs_root: str | Path = RUNS_DIR,
    allowed_dirs: Sequence[str | Path] = (),
) -> gr.Blocks:
    """Build the dashboard (not launched) on the checkpoints and runs under ``root``
    (default: the shipped ``assets/``) and the runs trained under ``runs_root`` (default
    ``runs/``), its queue bounded and fair (see the module docstring). Its callbacks open
    checkpoints and runs only there, in ``$RLCD_CHECKPOINT``, the converted SmolLM2
    checkpoint and ``allowed_dirs`` (``common.allowed_places``). ``launch()`` uses
    :func:`offline_theme` and :data:`CSS`."""
    root, runs_root = Path(root), Path(runs_root)
    places = allowed_places(root, runs_root, allowed_dirs)
    with Dashboard(title="rlcd_lab dashboard", analytics_enabled=False) as demo:
        gr.Markdown(INTRO)
        with gr.Tabs() as tabs:
            with gr.Tab("Ask", id="ask"):
                ask_rule, ask_fields = _ask_tab(root, runs_root, demo, places)
            with gr.Tab("Compare", id="compare"):
                compare_rule = _compare_tab(root, runs_root, ask_fields, places)
            with gr.Tab("Batch", id="batch"):
                batch_rule = _batch_tab(root, runs_root, places)
            with gr.Tab("Routing", id="routing"):
                routing_rule = _routing_tab(root, runs_root, demo, places)
            with gr.Tab("Runs", id="runs"):
                _runs_tab(root, runs_root, demo, places)
            with gr.Tab("Proposition 1", id="proposition1"):
                _playground_tab(demo)
            with gr.Tab("Help", id="help"):
                gr.Markdown(help_tab.help_markdown())
        # one rule for every tab: a user's change in one tab moves the others
        _sync([ask_rule, compare_rule, batch_rule, routing_rule])
        # deep links: /?tab=routing opens the Routing tab
        demo.load(_select_tab, None, tabs, api_visibility="private", show_progress="hidden")
    demo.queue(max_size=QUEUE_MAX_SIZE, default_concurrency_limit=DEFAULT_CONCURRENCY)
    return demo
