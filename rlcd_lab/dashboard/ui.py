"""The dashboard's layout: four tabs wired to the pure callbacks of the sibling modules.

Every event has an explicit ``api_name`` (``gradio_client`` calls them as
``client.predict(..., api_name="/routing")``); the callbacks take the assets root as a
keyword bound here, so a test can point the whole app at fabricated runs.

The queue is bounded (:data:`QUEUE_MAX_SIZE`: past it a request is turned away at once
with gradio's "Queue is full" message instead of waiting without end). The two events that
run a model (Ask, and the Ask that follows a page load) share one concurrency group of
:data:`MODEL_CONCURRENCY`; the other callbacks are light and pure and run
:data:`DEFAULT_CONCURRENCY` at a time each, beside a running model request. Together with
the Ask tab's size limits (``ask_tab.MAX_QUESTION_CHARS``, the model's context) this bounds
how long one user's request can make the others wait.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import gradio as gr

from ..assets import ASSETS, default_checkpoint, read_jsonl
from . import ask_tab, playground, routing_tab, runs_tab
from .common import (
    checkpoint_choices,
    default_runs,
    env_checkpoint,
    local_checkpoints,
    run_choices,
)

INTRO = """# rlcd_lab: calibrated decisions from reasoning models
A model writes a rationale that ends in `Answer:`; we **read** its next-token distribution
over the option tokens (the readout *u*), score it with a proper scoring rule, and
decide automatically only when the calibrated confidence is high enough.
**Ask** a checkpoint a question · compare **Routing** of RLCD against GRPO/SFT/RFT
on cached eval dumps · inspect training **Runs** · play with **Proposition 1**.
Everything here runs on the CPU, offline: the shipped tiny checkpoints, SmolLM2-135M-Instruct
once converted (`rlcd-lab smollm2`), or the checkpoint named by `$RLCD_CHECKPOINT`."""

QUEUE_MAX_SIZE = 64
"""Events that may wait in the queue at once (all events and users together; a page load
queues about seven). Past it gradio answers "Queue is full" at once."""
DEFAULT_CONCURRENCY = 2
"""How many calls of one light callback (Routing, Runs, Proposition 1, examples) run at once."""
MODEL_CONCURRENCY = 1
"""How many model requests (Ask) run at once, across users. One: the reader seeds torch's
global generator for a reproducible draw, which two concurrent draws would interleave, and
the model already uses every CPU core."""
MODEL_CONCURRENCY_ID = "model"
"""The concurrency group of the events that run a model."""

SYSTEM_FONTS = ["system-ui", "-apple-system", "Segoe UI", "Roboto", "Helvetica", "Arial"]
SYSTEM_MONO = ["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"]


def offline_theme() -> gr.themes.Base:
    """Gradio's default theme with system fonts only: names given as plain strings load
    no stylesheet, so the page fetches no web fonts (no network)."""
    return gr.themes.Default(font=[*SYSTEM_FONTS, "sans-serif"], font_mono=SYSTEM_MONO)


class Dashboard(gr.Blocks):
    """``gr.Blocks`` that launches with :func:`offline_theme` unless told otherwise.

    Gradio 6 takes the theme in ``launch()``; ``rlcd-lab app`` and ``app.py`` call a bare
    ``launch()``, so the default lives here.
    """

    def launch(self, *args, **kwargs):  # noqa: D102 (gradio's docstring applies)
        kwargs.setdefault("theme", offline_theme())
        return super().launch(*args, **kwargs)


def _ask_tab(root: Path, demo: gr.Blocks) -> gr.Slider:
    names = checkpoint_choices(root)
    first = env_checkpoint() or default_checkpoint(names)
    names += [n for n in local_checkpoints() if n not in names]
    with gr.Row():
        with gr.Column(scale=2, min_width=340):
            checkpoint = gr.Dropdown(
                names,
                value=first,
                allow_custom_value=True,
                label="Checkpoint",
                info="a shipped checkpoint, a local one ($RLCD_CHECKPOINT, SmolLM2 once "
                "converted with `rlcd-lab smollm2`), or type a checkpoint directory",
            )
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
            with gr.Row():
                m = gr.Slider(1, 8, value=4, step=1, label="M rationales")
                temperature = gr.Slider(0.05, 2.0, value=1.0, step=0.05, label="sampling temp.")
            with gr.Row():
                max_new = gr.Slider(4, 128, value=64, step=1, label="max rationale tokens")
                seed = gr.Number(0, precision=0, label="seed")
            threshold = gr.Slider(
                0.0,
                1.0,
                value=routing_tab.DEFAULT_THRESHOLD,
                step=0.001,
                label="routing threshold t (decide automatically when confidence ≥ t)",
            )
            button = gr.Button("Ask", variant="primary")
        with gr.Column(scale=3, min_width=420):
            verdict = gr.Markdown()
            texts = gr.HTML(label="Rationales")
            bars = gr.Plot(label="Readouts", show_label=False)
            with gr.Accordion("Exact numbers (JSON)", open=False):
                result = gr.JSON(label="result")

    fields = [checkpoint, question, options]
    gr.on(
        [checkpoint.change, demo.load],
        partial(ask_tab.checkpoint_info, root=root),
        fields,
        [info, example, question, options],
        api_name="checkpoint_info",
    ).then(
        partial(ask_tab.ask, root=root),
        [checkpoint, question, options, m, temperature, max_new, seed, threshold],
        [verdict, texts, bars, result],
        api_visibility="private",
        concurrency_limit=MODEL_CONCURRENCY,
        concurrency_id=MODEL_CONCURRENCY_ID,
    )
    example.input(
        partial(ask_tab.example_fields, root=root),
        [checkpoint, example],
        [question, options],
        api_name="example",
    )
    gr.on(
        [button.click, question.submit, options.submit],
        partial(ask_tab.ask, root=root),
        [checkpoint, question, options, m, temperature, max_new, seed, threshold],
        [verdict, texts, bars, result],
        api_name="ask",
        concurrency_limit=MODEL_CONCURRENCY,
        concurrency_id=MODEL_CONCURRENCY_ID,
    )
    threshold.change(
        ask_tab.reroute, [result, threshold], [verdict, result], api_name="ask_reroute"
    )
    return threshold


def _routing_tab(root: Path, demo: gr.Blocks) -> gr.Slider:
    names = run_choices(root)
    with gr.Row():
        runs = gr.Dropdown(
            names,
            value=default_runs(names),
            multiselect=True,
            allow_custom_value=True,
            label="Runs (cached eval dumps)",
            info="shipped runs; or type a run directory that holds eval/test.jsonl",
            scale=4,
        )
        calibrated = gr.Checkbox(True, label="temperature-scale (T fitted on dev)", scale=1)
    with gr.Row():
        threshold = gr.Slider(
            0.0,
            1.0,
            value=routing_tab.DEFAULT_THRESHOLD,
            step=0.001,
            label="confidence threshold t: decide automatically when confidence ≥ t",
            scale=3,
        )
        eps = gr.Slider(
            0.005, 0.5, value=routing_tab.DEFAULT_EPS, step=0.005, label="error budget ε"
        )
    with gr.Row():
        cost_wrong = gr.Number(
            routing_tab.DEFAULT_COST_WRONG, minimum=0, label="cost of a wrong automated decision"
        )
        cost_escalate = gr.Number(
            routing_tab.DEFAULT_COST_ESCALATE, minimum=0, label="cost of escalating an item"
        )
        bayes = gr.Button("set t = 1 − c_escalate / c_wrong")
    summary = gr.Markdown()
    table = gr.Dataframe(
        label="Routing at threshold t (test split)",
        interactive=False,
        wrap=True,
        column_widths=["18%", "7%", "13%", "14%", "8%", "8%", "8%", "12%", "12%"],
    )
    with gr.Row():
        rc_plot = gr.Plot(show_label=False)
        cost_plot = gr.Plot(show_label=False)
    metrics_table = gr.Dataframe(label="Per-run metrics (test split)", interactive=False)
    reliability = gr.Plot(show_label=False)
    with gr.Accordion("Exact numbers (JSON)", open=False):
        numbers = gr.JSON(label="routing")

    inputs = [runs, threshold, eps, cost_wrong, cost_escalate, calibrated]
    gr.on(
        [c.change for c in inputs] + [demo.load],
        partial(routing_tab.routing_update, root=root),
        inputs,
        [summary, table, metrics_table, rc_plot, numbers],
        api_name="routing",
        trigger_mode="always_last",
        show_progress="hidden",
    )
    gr.on(
        [c.change for c in (runs, cost_wrong, cost_escalate, calibrated)] + [demo.load],
        partial(routing_tab.routing_figures, root=root),
        [runs, cost_wrong, cost_escalate, calibrated],
        [reliability, cost_plot],
        api_name="routing_figures",
        trigger_mode="always_last",
    )
    bayes.click(
        routing_tab.bayes_threshold, [cost_wrong, cost_escalate], threshold, api_name="bayes"
    )
    return threshold


def _runs_tab(root: Path, demo: gr.Blocks) -> None:
    names = run_choices(root)
    defaults = default_runs(names)
    columns: dict[str, None] = {}
    for name in names:
        if (root / name / "log.jsonl").exists():
            rows = read_jsonl(root / name / "log.jsonl")
            columns.update(dict.fromkeys(runs_tab.numeric_columns(rows)))
    with gr.Row():
        run = gr.Dropdown(
            names,
            value=defaults[0] if defaults else None,
            allow_custom_value=True,
            label="Run",
            info="a shipped run, or type a run directory that holds log.jsonl",
        )
        panels = gr.CheckboxGroup(
            list(runs_tab.PANELS), value=runs_tab.DEFAULT_PANELS, label="Panels"
        )
    summary = gr.Markdown()
    curves = gr.Plot(show_label=False)
    gr.Markdown("### Compare runs on one logged column")
    with gr.Row():
        compare = gr.Dropdown(
            names, value=defaults, multiselect=True, allow_custom_value=True, label="Runs", scale=3
        )
        column = gr.Dropdown(
            list(columns),
            value="rationale_length" if "rationale_length" in columns else None,
            allow_custom_value=True,
            label="Column",
        )
    compared = gr.Plot(show_label=False)
    gr.on(
        [run.change, panels.change, demo.load],
        partial(runs_tab.run_curves, root=root),
        [run, panels],
        [curves, summary],
        api_name="run_curves",
    )
    gr.on(
        [compare.change, column.change, demo.load],
        partial(runs_tab.compare_runs, root=root),
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


def build_demo(root: str | Path = ASSETS) -> gr.Blocks:
    """Build the dashboard (not launched) on the checkpoints and runs under ``root``
    (default: the shipped ``assets/``), its queue bounded (see the module docstring).
    ``launch()`` uses :func:`offline_theme`."""
    root = Path(root)
    with Dashboard(title="rlcd_lab dashboard", analytics_enabled=False) as demo:
        gr.Markdown(INTRO)
        with gr.Tabs():
            with gr.Tab("Ask", id="ask"):
                ask_threshold = _ask_tab(root, demo)
            with gr.Tab("Routing", id="routing"):
                routing_threshold = _routing_tab(root, demo)
            with gr.Tab("Runs", id="runs"):
                _runs_tab(root, demo)
            with gr.Tab("Proposition 1", id="proposition1"):
                _playground_tab(demo)
        # one threshold for both tabs: a user's move on either slider moves the other
        ask_threshold.input(lambda t: t, ask_threshold, routing_threshold, api_visibility="private")
        routing_threshold.input(
            lambda t: t, routing_threshold, ask_threshold, api_visibility="private"
        )
    demo.queue(max_size=QUEUE_MAX_SIZE, default_concurrency_limit=DEFAULT_CONCURRENCY)
    return demo
