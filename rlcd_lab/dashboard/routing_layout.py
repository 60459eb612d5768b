"""The Routing tab's layout and events (its callbacks: :mod:`rlcd_lab.dashboard.routing_tab`).

It opens on the runs of ``routing_guide.FIRST_VIEW`` with a note saying what they show,
and where RLCD loses (``routing_guide.first_view_note``); each table is followed by a line per
column saying what it means. Its run list is read again on each page load and by the
page's refresh button; errors come back in the summary's pane (``controls.in_pane``). It
shares its rule controls with the other tabs (``ctx.rules``)."""

from __future__ import annotations

from functools import partial

import gradio as gr

from rlcd_lab.dashboard import routing_guide, routing_tab, routing_words
from rlcd_lab.dashboard.common import confine
from rlcd_lab.dashboard.controls import TabContext, in_pane, on_refresh, rule_controls
from rlcd_lab.metrics import DEFAULT_EPS


def layout(ctx: TabContext) -> None:
    """Build the Routing tab inside its ``gr.Tab``: runs, rule and costs, then the results."""
    names = routing_guide.run_names(ctx.root, ctx.runs_root)
    gr.Markdown(routing_guide.first_view_note(ctx.root))
    runs = gr.Dropdown(
        names,
        value=routing_guide.first_view(names),
        multiselect=True,
        allow_custom_value=True,
        label="Runs (cached eval dumps)",
        info="shipped runs and runs trained under runs/; or type a run directory that "
        "holds eval/test.jsonl",
    )
    with gr.Row():
        with gr.Column(scale=3, min_width=300):
            measure, aggregate, threshold = rule_controls()
        with gr.Column(scale=2, min_width=260):
            calibrated, eps, cost_wrong, cost_escalate, bayes = _cost_controls()
    summary = gr.Markdown()
    table = gr.Dataframe(
        label="Routing at threshold t (test split)",
        interactive=False,
        wrap=True,
        column_widths=routing_words.COLUMN_WIDTHS,
    )
    gr.Markdown(routing_words.columns_help(routing_words.ROUTING_HELP), elem_classes="column-help")
    with gr.Row():
        rc_plot = gr.Plot(show_label=False, min_width=300)
        cost_plot = gr.Plot(show_label=False, min_width=300)
    metrics_table = gr.Dataframe(label="Per-run metrics (test split)", interactive=False)
    gr.Markdown(routing_words.columns_help(routing_words.METRIC_HELP), elem_classes="column-help")
    reliability = gr.Plot(show_label=False)
    with gr.Accordion("Exact numbers (JSON)", open=False):
        numbers = gr.JSON(label="routing")

    root, places = ctx.root, ctx.places
    on_refresh(ctx, partial(_run_list, root, ctx.runs_root), [runs], "routing_runs")
    inputs = [runs, threshold, eps, cost_wrong, cost_escalate, calibrated, measure, aggregate]
    empty = {"headers": [], "data": []}
    gr.on(
        [c.change for c in inputs] + [ctx.demo.load],
        in_pane(
            confine(partial(routing_tab.routing_update, root=root), places),
            ("", empty, empty, None, {}),
        ),
        inputs,
        [summary, table, metrics_table, rc_plot, numbers],
        api_name="routing",
        trigger_mode="always_last",
        show_progress="hidden",
    )
    slow = [runs, cost_wrong, cost_escalate, calibrated, measure, aggregate]
    gr.on(
        [c.change for c in slow] + [ctx.demo.load],
        _quiet(confine(partial(routing_tab.routing_figures, root=root), places)),
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
    ctx.rules.append((measure, aggregate, threshold))


def _run_list(root, runs_root) -> dict:
    """The run dropdown's choices as they are now (:func:`routing_guide.run_names`)."""
    return gr.update(choices=routing_guide.run_names(root, runs_root))


def _quiet(fn):
    """``fn`` whose ``gr.Error`` leaves its figures as they are: the same error is said
    once, in the summary, by the routing update."""

    def figures(*args):
        try:
            return fn(*args)
        except gr.Error:
            return gr.skip(), gr.skip()

    return figures


def _cost_controls() -> tuple[gr.Checkbox, gr.Slider, gr.Number, gr.Number, gr.Button]:
    """Temperature scaling, the error budget ε, the two costs and the "set t" button."""
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
    return calibrated, eps, cost_wrong, cost_escalate, bayes
