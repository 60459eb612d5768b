"""What the tabs' layouts share: the build context, the model requests' concurrency group,
the checkpoint choices and the sampling and decision-rule controls.

Each tab's layout (``*_layout.py``, one per tab) is a ``layout(ctx)`` called inside its
``gr.Tab`` by :func:`rlcd_lab.dashboard.ui.build_demo`, which loops over the tab list; the
tabs see one another only through the :class:`TabContext` they are given (the Ask tab's
fields, which the Compare tab copies; every tab's rule controls, which ``ui`` keeps equal).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr

from rlcd_lab.dashboard import routing_tab
from rlcd_lab.dashboard.common import (
    checkpoint_choices,
    env_checkpoint,
    local_checkpoints,
    trained_checkpoints,
)
from rlcd_lab.files.assets import default_checkpoint
from rlcd_lab.math.routing import DEFAULT_THRESHOLD

MODEL_CONCURRENCY = 1
"""How many model requests (Ask, Compare, Batch) run at once, across users. One: the reader
seeds torch's global generator for a reproducible draw, which two concurrent draws would
interleave, and the model already uses every CPU core."""
MODEL_CONCURRENCY_ID = "model"
"""The concurrency group of the events that run a model."""

CHECKPOINT_INFO = (
    "a shipped checkpoint, a run trained under runs/ (its final/), a local one "
    "($RLCD_CHECKPOINT, SmolLM2 once converted with `rlcd-lab gguf smollm2`), or type a directory"
)


@dataclass
class TabContext:
    """What a tab's ``layout(ctx)`` builds with: the assets root, the trained runs' root,
    the ``gr.Blocks`` being built (its ``load`` event), the places the callbacks may open
    (``common.allowed_places``), and what the tabs share: the Ask tab's ``(checkpoint,
    question, options)`` fields and each tab's ``(measure, aggregate, threshold)`` rule
    controls, in tab order."""

    root: Path
    runs_root: Path
    demo: gr.Blocks
    places: tuple[Path, ...]
    ask_fields: tuple = ()
    rules: list[tuple] = field(default_factory=list)


def checkpoints(root: Path, runs_root: Path) -> tuple[list[str], str | None]:
    """Checkpoint choices (shipped, local, trained under ``runs_root``) and the first one."""
    names = checkpoint_choices(root)
    first = env_checkpoint() or default_checkpoint(names)
    names += [n for n in local_checkpoints() + trained_checkpoints(runs_root) if n not in names]
    return names, first


def rule_controls() -> tuple[gr.Radio, gr.Radio, gr.Slider]:
    """The decision-rule controls: confidence measure, readout, threshold."""
    with gr.Group():
        with gr.Row():
            measure = gr.Radio(
                routing_tab.MEASURE_CHOICES,
                value="max_p",
                label="confidence",
                info="max p, or (K max p − 1)/(K − 1) as the server uses",
                min_width=160,
            )
            aggregate = gr.Radio(
                routing_tab.AGGREGATE_CHOICES,
                value="single",
                label="decide on",
                info="the first rationale's readout, or the mixture of all M",
                min_width=160,
            )
        threshold = gr.Slider(
            0.0,
            1.0,
            value=DEFAULT_THRESHOLD,
            step=0.001,
            label="threshold t: decide automatically when confidence ≥ t",
        )
    return measure, aggregate, threshold


def sampling_controls() -> tuple[gr.Slider, gr.Slider, gr.Slider, gr.Number]:
    """The sampling controls: M rationales, sampling temperature, rationale length, seed."""
    with gr.Row():
        m = gr.Slider(1, 8, value=4, step=1, label="M rationales", min_width=140)
        sampling_t = gr.Slider(
            0.05, 2.0, value=1.0, step=0.05, label="sampling temp.", min_width=140
        )
    with gr.Row():
        max_new = gr.Slider(4, 128, value=64, step=1, label="max rationale tokens", min_width=140)
        seed = gr.Number(0, precision=0, label="seed", min_width=100)
    return m, sampling_t, max_new, seed
