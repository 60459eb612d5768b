"""The Runs tab's layout and events (its callbacks: :mod:`rlcd_lab.dashboard.runs_tab`).

Its run lists are read again on each page load and by the page's refresh button
(``controls.on_refresh``); errors come back in the summary's pane (``controls.in_pane``)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import gradio as gr

from rlcd_lab.dashboard import runs_tab
from rlcd_lab.dashboard.common import confine, default_runs, run_choices
from rlcd_lab.dashboard.controls import TabContext, in_pane, on_refresh


def layout(ctx: TabContext) -> None:
    """Build the Runs tab inside its ``gr.Tab``: one run's curves, then runs compared."""
    root, places = ctx.root, ctx.places
    names, columns, unreadable = runs_tab.run_names(root, ctx.runs_root)
    defaults = [n for n in default_runs(run_choices(root)) if n not in unreadable]
    left_out = gr.Markdown(runs_tab.unreadable_note(unreadable))
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
    smoothing = gr.Slider(
        0.0,
        runs_tab.MAX_SMOOTHING,
        value=0.0,
        step=0.01,
        label="smoothing (moving average weight; 0: the logged values)",
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
    compare_note = gr.Markdown()
    compared = gr.Plot(show_label=False)
    on_refresh(
        ctx, partial(_lists, root, ctx.runs_root), [run, compare, column, left_out], "runs_lists"
    )
    gr.on(
        [run.change, panels.change, smoothing.change, ctx.demo.load],
        in_pane(confine(partial(runs_tab.run_curves, root=root), places), (None, ""), pane=1),
        [run, panels, smoothing],
        [curves, summary],
        api_name="run_curves",
    )
    gr.on(
        [compare.change, column.change, smoothing.change, ctx.demo.load],
        in_pane(confine(partial(_compared, root=root), places), (None, ""), pane=1),
        [compare, column, smoothing],
        [compared, compare_note],
        api_name="compare_runs",
    )


def _lists(root: Path, runs_root: Path) -> tuple:
    """The tab's lists as they are now (:func:`runs_tab.run_names`): both run dropdowns,
    the column dropdown and the note on unreadable logs."""
    names, columns, unreadable = runs_tab.run_names(root, runs_root)
    return (
        gr.update(choices=names),
        gr.update(choices=names),
        gr.update(choices=columns),
        runs_tab.unreadable_note(unreadable),
    )


def _compared(runs, column, smoothing, root):
    """:func:`runs_tab.compare_runs` and an empty note (the pane its errors go to)."""
    return runs_tab.compare_runs(runs, column, smoothing, root=root), ""
