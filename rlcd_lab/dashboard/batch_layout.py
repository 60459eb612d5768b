"""The Batch tab's layout and events (its callbacks: :mod:`rlcd_lab.dashboard.batch_tab`).

It shares its rule controls with the other tabs (``ctx.rules``); a file or a setting that
cannot be used is said in one line where the summary goes (``controls.in_pane``)."""

from __future__ import annotations

from functools import partial

import gradio as gr

from rlcd_lab.dashboard import batch_tab
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


def layout(ctx: TabContext) -> None:
    """Build the Batch tab inside its ``gr.Tab``."""
    names, first = checkpoints(ctx.root, ctx.runs_root)
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
            m, sampling_t, max_new, seed = sampling_controls()
            measure, aggregate, threshold = rule_controls()
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
    empty = {"headers": batch_tab.RESULT_COLUMNS, "data": []}
    button.click(
        in_pane(
            confine(partial(batch_tab.batch_answers, root=ctx.root), ctx.places),
            ("", empty, None),
        ),
        [checkpoint, upload, m, sampling_t, max_new, seed, threshold, measure, aggregate],
        [summary, table, download],
        api_name="batch",
        concurrency_limit=MODEL_CONCURRENCY,
        concurrency_id=MODEL_CONCURRENCY_ID,
    ).then(_shown, download, download, api_visibility="private", show_progress="hidden")
    on_refresh(
        ctx,
        partial(checkpoint_dropdown, ctx.root, ctx.runs_root),
        [checkpoint],
        "batch_checkpoints",
    )
    ctx.rules.append((measure, aggregate, threshold))


def _shown(value: object) -> dict:
    """Show the Batch tab's answers.csv only when there is one."""
    return gr.update(visible=value is not None)
