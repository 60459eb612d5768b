"""The Runs tab's layout and events (its callbacks: :mod:`rlcd_lab.dashboard.runs_tab`)."""

from __future__ import annotations

from functools import partial

import gradio as gr

from rlcd_lab.dashboard import runs_tab
from rlcd_lab.dashboard.common import confine, default_runs, local_run_choices, run_choices
from rlcd_lab.dashboard.controls import TabContext
from rlcd_lab.files import rundir


def layout(ctx: TabContext) -> None:
    """Build the Runs tab inside its ``gr.Tab``: one run's curves, then runs compared."""
    root, places = ctx.root, ctx.places
    names = run_choices(root)
    defaults = default_runs(names)
    names += [n for n in local_run_choices(ctx.runs_root, rundir.LOG) if n not in names]
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
        [run.change, panels.change, ctx.demo.load],
        confine(partial(runs_tab.run_curves, root=root), places),
        [run, panels],
        [curves, summary],
        api_name="run_curves",
    )
    gr.on(
        [compare.change, column.change, ctx.demo.load],
        confine(partial(runs_tab.compare_runs, root=root), places),
        [compare, column],
        compared,
        api_name="compare_runs",
    )
