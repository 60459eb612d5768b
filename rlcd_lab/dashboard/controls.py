"""What the tabs' layouts share: the build context, the model requests' concurrency group,
the checkpoint choices and the sampling and decision-rule controls.

Each tab's layout (``*_layout.py``, one per tab) is a ``layout(ctx)`` called inside its
``gr.Tab`` by :func:`rlcd_lab.dashboard.ui.build_demo`, which loops over the tab list; the
tabs see one another only through the :class:`TabContext` they are given (the Ask tab's
fields, which the Compare tab copies; every tab's rule controls, which ``ui`` keeps equal).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

CHECKPOINT_INFO = "shipped, trained under runs/ (its final/), $RLCD_CHECKPOINT, or type a folder"


@dataclass
class TabContext:
    """What a tab's ``layout(ctx)`` builds with: the assets root, the trained runs' root,
    the ``gr.Blocks`` being built (its ``load`` event), the places the callbacks may open
    (``common.allowed_places``), the page's refresh button (:func:`on_refresh`), and what
    the tabs share: the Ask tab's ``(checkpoint, question, options)`` fields and each
    tab's ``(measure, aggregate, threshold)`` rule controls, in tab order."""

    root: Path
    runs_root: Path
    demo: gr.Blocks
    places: tuple[Path, ...]
    refresh: gr.Button | None = None
    ask_fields: tuple = ()
    rules: list[tuple] = field(default_factory=list)


def on_refresh(ctx: TabContext, fn: Callable[[], Any], outputs: Sequence, api_name: str) -> None:
    """Run ``fn`` (no inputs; it returns updates of ``outputs``, e.g. a dropdown's choices)
    on every page load and on a click of the page's refresh button, so runs and
    checkpoints written after the app started are listed without a restart."""
    triggers = [ctx.demo.load] + ([ctx.refresh.click] if ctx.refresh is not None else [])
    gr.on(triggers, fn, None, list(outputs), api_name=api_name, show_progress="hidden")


def checkpoint_dropdown(root: Path, runs_root: Path) -> dict:
    """A checkpoint dropdown's update listing :func:`checkpoints` as they are now (the
    value is kept)."""
    return gr.update(choices=checkpoints(root, runs_root)[0])


ERROR_PREFIX = "**Error:** "
"""How an error reads in a tab's result pane (:func:`in_pane`)."""


def error_line(message: str) -> str:
    """``message`` as one line of markdown for a result pane: line breaks become spaces,
    other control characters are escaped (``\\x1b``), markdown's special characters are
    escaped, so user data echoed in a message shows as typed."""
    text = " ".join(str(message).split("\n"))
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    special = "\\`*_{}[]<>()#+-.!|~"
    return ERROR_PREFIX + "".join("\\" + c if c in special else c for c in text)


def in_pane(fn: Callable[..., tuple], blanks: Sequence[Any], pane: int = 0) -> Callable[..., Any]:
    """``fn`` whose ``gr.Error`` comes back in the tab's result pane instead of a toast:
    the outputs are ``blanks`` with the pane's (output ``pane``, a markdown) replaced by
    :func:`error_line` of the message. The signature, seen through ``__wrapped__``, is
    ``fn``'s; ``.raising`` is ``fn`` itself (its errors raised)."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except gr.Error as err:
            out = list(blanks)
            out[pane] = error_line(err.message)
            return tuple(out)

    wrapped.raising = fn  # type: ignore[attr-defined]
    return wrapped


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
