"""The Gradio dashboard (``app.py`` and ``rlcd-lab app`` both call ``build_demo``).

A first page until the dashboard issue lands: what rlcd_lab is and a live Proposition 1
check on readouts the user types in.
"""

from __future__ import annotations

import gradio as gr
import torch

from .decomposition import variance_decomposition


def proposition1_table(readouts: str, q: str) -> list[list[str]]:
    """Parse ``readouts`` (one comma-separated distribution per line) and ``q``; return the
    rows ``[term, value]`` of Proposition 1. Raises ``gr.Error`` on malformed input."""
    try:
        u = torch.tensor(
            [[float(v) for v in line.split(",")] for line in readouts.strip().splitlines()],
            dtype=torch.float64,
        )
        qq = torch.tensor([float(v) for v in q.split(",")], dtype=torch.float64)
    except ValueError as err:
        raise gr.Error(f"could not read the numbers: {err}") from None
    if u.dim() != 2 or u.shape[-1] != qq.shape[-1]:
        raise gr.Error("every readout and q need the same number of options")
    if (u < 0).any() or (qq < 0).any():
        raise gr.Error("probabilities must be non-negative")
    u, qq = u / u.sum(-1, keepdim=True), qq / qq.sum()
    d = variance_decomposition(u, qq)
    return [
        ["mixture score J(p, q)", f"{d['mixture_score'].item():.6f}"],
        ["mean score E_r J(u_r, q)", f"{d['mean_score'].item():.6f}"],
        ["diversity E_r ||u_r - p||^2", f"{d['diversity'].item():.6f}"],
    ]


def build_demo() -> gr.Blocks:
    """Build the dashboard's ``gr.Blocks`` (not launched)."""
    with gr.Blocks(title="rlcd_lab") as demo:
        gr.Markdown(
            "# rlcd_lab\nReinforcement learning for calibrated decisions. The full "
            "dashboard (checkpoints, per-rationale readouts, live routing) is being "
            "built; below, Proposition 1 on readouts you type: "
            "mixture score = mean score + diversity."
        )
        readouts = gr.Textbox("0.9,0.1\n0.2,0.8\n0.6,0.4", lines=4, label="readouts u_r")
        q = gr.Textbox("0.7,0.3", label="outcome distribution q")
        table = gr.Dataframe(headers=["term", "value"], label="Proposition 1")
        button = gr.Button("Decompose")
        button.click(proposition1_table, [readouts, q], table)
        demo.load(proposition1_table, [readouts, q], table)
    return demo
