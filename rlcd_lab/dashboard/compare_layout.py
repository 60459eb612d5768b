"""The Compare tab's layout and events (its callbacks: :mod:`rlcd_lab.dashboard.compare_tab`).

It copies the Ask tab's question (``ctx.ask_fields``) and shares its rule controls
(``ctx.rules``); errors come back in the summary's pane (``controls.in_pane``)."""

from __future__ import annotations

from functools import partial

import gradio as gr

from rlcd_lab.dashboard import compare_tab
from rlcd_lab.dashboard.common import confine
from rlcd_lab.dashboard.controls import (
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


def layout(ctx: TabContext) -> None:
    """Build the Compare tab inside its ``gr.Tab`` (after the Ask tab, whose fields it reads)."""
    root, places = ctx.root, ctx.places
    names, _ = checkpoints(root, ctx.runs_root)
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
            m, sampling_t, max_new, seed = sampling_controls()
            measure, aggregate, threshold = rule_controls()
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
        lambda q, o: (q, o), list(ctx.ask_fields[1:]), [question, options], api_visibility="private"
    )
    on_refresh(ctx, partial(_both, root, ctx.runs_root), [a, b], "compare_checkpoints")
    button.click(
        in_pane(
            confine(partial(compare_tab.compare_checkpoints, root=root), places),
            ("", "", None, "", None, None),
        ),
        [a, b, question, options, m, sampling_t, max_new, seed, threshold, measure, aggregate],
        [summary, md_a, fig_a, md_b, fig_b, result],
        api_name="compare",
        concurrency_limit=MODEL_CONCURRENCY,
        concurrency_id=MODEL_CONCURRENCY_ID,
    )
    ctx.rules.append((measure, aggregate, threshold))


def _both(root, runs_root) -> tuple[dict, dict]:
    """Both checkpoint dropdowns' choices as they are now."""
    update = checkpoint_dropdown(root, runs_root)
    return update, update
