"""The Help tab's layout (its text: :mod:`rlcd_lab.dashboard.help_tab`)."""

from __future__ import annotations

import gradio as gr

from rlcd_lab.dashboard import help_tab
from rlcd_lab.dashboard.controls import TabContext


def layout(ctx: TabContext) -> None:
    """Build the Help tab inside its ``gr.Tab``: the glossary and the notebooks."""
    gr.Markdown(help_tab.help_markdown())
