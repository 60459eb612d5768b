"""The Ask tab's layout and events (its callbacks: :mod:`rlcd_lab.dashboard.ask_tab` and
:mod:`rlcd_lab.dashboard.ask_checkpoint`).

The question's side reads top to bottom: checkpoint, example, question, options and the
Ask button (above the fold of a 1400 x 1000 window), then the sampling and rule controls
and the model card. Errors come back in the answer's pane (``controls.in_pane``); picking
an example clears the previous answer. Its checkpoint, question and options fields are
shared (``ctx.ask_fields``: the Compare tab copies the question), and so are its rule
controls (``ctx.rules``)."""

from __future__ import annotations

from functools import partial

import gradio as gr

from rlcd_lab.dashboard import ask_checkpoint, ask_tab
from rlcd_lab.dashboard.common import confine
from rlcd_lab.dashboard.controls import (
    CHECKPOINT_INFO,
    MODEL_CONCURRENCY,
    MODEL_CONCURRENCY_ID,
    TabContext,
    checkpoint_dropdown,
    checkpoints,
    in_pane,
    on_refresh,
    rule_controls,
    sampling_controls,
)

BLANK_ANSWER = ("", "", None, None)
"""The answer's outputs (verdict, rationales, bars, result) with nothing shown."""


def layout(ctx: TabContext) -> None:
    """Build the Ask tab inside its ``gr.Tab``: the question's side, the answer's side."""
    names, first = checkpoints(ctx.root, ctx.runs_root)
    with gr.Row():
        with gr.Column(scale=2, min_width=320):
            checkpoint = gr.Dropdown(
                names,
                value=first,
                allow_custom_value=True,
                label="Checkpoint",
                info=CHECKPOINT_INFO,
            )
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
            button = gr.Button("Ask", variant="primary")
            m, sampling_t, max_new, seed = sampling_controls()
            measure, aggregate, threshold = rule_controls()
            with gr.Accordion("Model card", open=False):
                info = gr.Markdown()
        with gr.Column(scale=3, min_width=320):
            verdict = gr.Markdown()
            texts = gr.HTML(label="Rationales")
            bars = gr.Plot(label="Readouts", show_label=False)
            with gr.Accordion("Exact numbers (JSON)", open=False):
                result = gr.JSON(label="result")

    fields = [checkpoint, question, options]
    inputs = [checkpoint, question, options, m, sampling_t, max_new, seed, threshold]
    inputs += [measure, aggregate]
    outputs = [verdict, texts, bars, result]
    _wire(ctx, fields, example, info, inputs, outputs, button)
    ctx.rules.append((measure, aggregate, threshold))
    ctx.ask_fields = (checkpoint, question, options)


def _wire(
    ctx: TabContext,
    fields: list,
    example: gr.Dropdown,
    info: gr.Markdown,
    inputs: list,
    outputs: list,
    button: gr.Button,
) -> None:
    """The Ask tab's events: the model card and an answer on load and on a new checkpoint,
    a task example, the Ask button (or Enter), and a new decision when the rule moves."""
    root, places = ctx.root, ctx.places
    checkpoint, question, options = fields
    threshold, measure, aggregate = inputs[7:]
    verdict, _, _, result = outputs
    answer = in_pane(confine(partial(ask_tab.ask, root=root), places), BLANK_ANSWER)
    on_refresh(
        ctx, partial(checkpoint_dropdown, ctx.root, ctx.runs_root), [checkpoint], "ask_checkpoints"
    )
    gr.on(
        [checkpoint.change, ctx.demo.load],
        confine(partial(ask_checkpoint.checkpoint_info, root=root), places),
        fields,
        [info, example, question, options],
        api_name="checkpoint_info",
    ).then(
        answer,
        inputs,
        outputs,
        api_visibility="private",
        concurrency_limit=MODEL_CONCURRENCY,
        concurrency_id=MODEL_CONCURRENCY_ID,
    )
    example.input(
        in_pane(
            confine(partial(ask_checkpoint.example_answer, root=root), places),
            (gr.skip(), gr.skip(), *BLANK_ANSWER),
            pane=2,
        ),
        [checkpoint, example],
        [question, options, *outputs],
        api_name="example",
    )
    gr.on(
        [button.click, question.submit, options.submit],
        answer,
        inputs,
        outputs,
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
