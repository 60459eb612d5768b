"""The Proposition 1 tab's layout and events (its callbacks: :mod:`.playground`)."""

from __future__ import annotations

import gradio as gr

from rlcd_lab.dashboard import playground
from rlcd_lab.dashboard.controls import TabContext


def layout(ctx: TabContext) -> None:
    """Build the Proposition 1 tab inside its ``gr.Tab``: sliders, then typed readouts."""
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
            a, b = _readout_sliders()
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
        [s.change for s in sliders] + [ctx.demo.load],
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
    _typed_readouts(ctx)


def _readout_sliders() -> tuple[list[gr.Slider], list[gr.Slider]]:
    """u_r(A) and u_r(B) for r = 1..MAX_M, a row each (the first three A shown)."""
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
    return a, b


def _typed_readouts(ctx: TabContext) -> None:
    """The "Type readouts instead" accordion and its Decompose button."""
    with gr.Accordion("Type readouts instead", open=False):
        readouts = gr.Textbox(
            "0.9,0.1\n0.2,0.8\n0.6,0.4", lines=4, label="readouts u_r (one per line)"
        )
        q = gr.Textbox("0.7,0.3", label="outcome distribution q")
        typed = gr.Dataframe(headers=["term", "value"], label="Proposition 1", interactive=False)
        button = gr.Button("Decompose")
    gr.on(
        [button.click, ctx.demo.load],
        playground.proposition1_table,
        [readouts, q],
        typed,
        api_name="proposition1_text",
    )
