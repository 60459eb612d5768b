"""The Routing tab's layout and events (its callbacks: :mod:`rlcd_lab.dashboard.routing_tab`).

It shares its rule controls with the other tabs (``ctx.rules``)."""

from __future__ import annotations

from functools import partial

import gradio as gr

from rlcd_lab.dashboard import routing_tab
from rlcd_lab.dashboard.common import confine, default_runs, local_run_choices, run_choices
from rlcd_lab.dashboard.controls import TabContext, rule_controls
from rlcd_lab.metrics import DEFAULT_EPS


def layout(ctx: TabContext) -> None:
    """Build the Routing tab inside its ``gr.Tab``: runs, rule and costs, then the results."""
    names = run_choices(ctx.root)
    names += [n for n in local_run_choices(ctx.runs_root) if n not in names]
    runs = gr.Dropdown(
        names,
        value=default_runs(run_choices(ctx.root)),
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
        column_widths=routing_tab.COLUMN_WIDTHS,
    )
    with gr.Row():
        rc_plot = gr.Plot(show_label=False, min_width=300)
        cost_plot = gr.Plot(show_label=False, min_width=300)
    metrics_table = gr.Dataframe(label="Per-run metrics (test split)", interactive=False)
    reliability = gr.Plot(show_label=False)
    with gr.Accordion("Exact numbers (JSON)", open=False):
        numbers = gr.JSON(label="routing")

    root, places = ctx.root, ctx.places
    inputs = [runs, threshold, eps, cost_wrong, cost_escalate, calibrated, measure, aggregate]
    gr.on(
        [c.change for c in inputs] + [ctx.demo.load],
        confine(partial(routing_tab.routing_update, root=root), places),
        inputs,
        [summary, table, metrics_table, rc_plot, numbers],
        api_name="routing",
        trigger_mode="always_last",
        show_progress="hidden",
    )
    slow = [runs, cost_wrong, cost_escalate, calibrated, measure, aggregate]
    gr.on(
        [c.change for c in slow] + [ctx.demo.load],
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
    ctx.rules.append((measure, aggregate, threshold))


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
