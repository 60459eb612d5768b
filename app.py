"""Hugging Face Spaces entry point: the rlcd_lab dashboard (``python app.py``).

The Space's front matter is at the top of README.md; ``make app`` and ``rlcd-lab app``
serve the same :func:`rlcd_lab.dashboard.ui.build_demo`, whose ``launch()`` uses a theme
with system fonts (no web fonts, nothing fetched from the network), serves the decision
functions as MCP tools (``/gradio_api/mcp/``) and bounds uploads for a public Space
(``rlcd_lab.dashboard.uploads``). The Ask tab opens with
the checkpoint directory named by ``$RLCD_CHECKPOINT`` when it is set, e.g.
``RLCD_CHECKPOINT=~/.cache/rlcd_lab/models/smollm2-135m-instruct python app.py``.
"""

from rlcd_lab.dashboard.ui import build_demo

demo = build_demo()

if __name__ == "__main__":
    demo.launch()
