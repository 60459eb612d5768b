"""Ask tab, the checkpoint side: what a checkpoint is and which questions it understands.

When a checkpoint is chosen the Ask tab shows its card (:func:`model_card`: model, method,
task, step, prompt format, options, an example question it understands, whether its
calibration temperature T was fitted, its stored test metrics) and offers examples
(:func:`example_items`: its task's test items, or :data:`GENERIC_EXAMPLES` for a chat
checkpoint without a task) through the callbacks :func:`checkpoint_info` and
:func:`example_fields`. Everything here reads the checkpoint's files (``rlcd.json``, the
tokenizer config); no model is loaded. The readings themselves are :mod:`.ask_tab`'s.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import gradio as gr

from rlcd_lab.dashboard.common import checkpoint_dir
from rlcd_lab.files.assets import ASSETS
from rlcd_lab.lm.checkpoint import calibration_T, read_meta
from rlcd_lab.reader import (
    checkpoint_prompt_format,
    has_chat_template,
    raw_meta,
    temperature_fitted,
)
from rlcd_lab.tasks import load_task_items
from rlcd_lab.tasks.items import TaskItem

N_EXAMPLES = 100
"""Task examples offered per checkpoint (the first of its task's test split)."""
GENERIC_EXAMPLES = (
    TaskItem("example-yes-no", "Is the Pacific the largest ocean on Earth?", ("yes", "no"), 0),
    TaskItem(
        "example-planets",
        "Quelle planète est la plus grande ? 🌍\n"
        "A) Mercure\nB) Vénus\nC) Terre\nD) Mars\nE) Jupiter\n"
        "F) Saturne\nG) Uranus\nH) Neptune\nI) Pluton\nJ) la Lune",
        tuple("ABCDEFGHIJ"),
        4,
    ),
    TaskItem(
        "example-score",
        "How hot is a cup of freshly brewed coffee?\n"
        "0) cold\n1) cool\n2) warm\n3) hot\n4) scalding",
        ("0", "1", "2", "3", "4"),
        3,
    ),
)
"""Examples for a chat checkpoint without a task (e.g. SmolLM2-135M-Instruct): labels that
are single tokens after ``"Answer: "`` for BPE tokenizers (yes/no, letters, digits)."""


def _meta(path: Path) -> dict:
    try:
        return read_meta(path)
    except (OSError, ValueError) as err:
        raise gr.Error(f"could not read {path / 'rlcd.json'}: {err}") from None


@lru_cache(maxsize=8)
def _task_items(task: str) -> tuple[TaskItem, ...]:
    return tuple(load_task_items(task, "test"))


def example_items(path: Path, meta: dict) -> tuple[TaskItem, ...]:
    """The examples offered for a checkpoint: its task's test items; for a chat checkpoint
    without a task, :data:`GENERIC_EXAMPLES`; else none."""
    if meta.get("task"):
        return task_items(meta)
    return GENERIC_EXAMPLES if has_chat_template(path) else ()


def task_items(meta: dict) -> tuple[TaskItem, ...]:
    """Test items of the checkpoint's task (``rlcd.json`` ``"task"``); empty when it names
    none or the task cannot be loaded."""
    task = meta.get("task")
    if not task:
        return ()
    try:
        return _task_items(str(task))
    except (OSError, ValueError):
        return ()


def _example_label(item: TaskItem) -> str:
    truth = "" if item.label is None else f" → {item.options[item.label]}"
    return f"{item.uid} · {item.prompt}{truth}"


def temperature_status(path: Path, meta: dict) -> tuple[bool, str]:
    """``(fitted, note)``: whether the checkpoint's T was fitted, and a note saying why not
    (else ``""``): :func:`rlcd_lab.reader.temperature_fitted` of its own ``rlcd.json``
    (the method taken from ``meta`` when the file does not record one)."""
    return temperature_fitted({"method": meta.get("method"), **(raw_meta(path) or {})})


FORMATS = {
    "task": "the question is the task's own string (as in the example), answered with the "
    "checkpoint's options; its vocabulary knows nothing else",
    "chat": "the question and its option lines become a user message of its chat template",
    "plain": "plain text: the question, then the options",
}
MAX_CARD_EXAMPLE = 160
"""Characters of the example question shown on a model card."""


@lru_cache(maxsize=8)
def _dev_item(task: str) -> TaskItem | None:
    items = load_task_items(task, "dev")
    return items[0] if items else None


def example_question(path: Path, meta: dict) -> TaskItem | None:
    """A question the checkpoint understands: the first dev item of its task
    (``rlcd.json`` ``"task"``, via :func:`rlcd_lab.tasks.load_task_items`); for a chat
    checkpoint without a task the first generic example; else None."""
    task = meta.get("task")
    if task:
        try:
            return _dev_item(str(task))
        except (OSError, ValueError):
            return None
    return GENERIC_EXAMPLES[0] if has_chat_template(path) else None


def _card_lines(rows: list[tuple[str, str]]) -> str:
    return "\n".join(f"- **{k}** {v}" for k, v in rows)


def model_card(checkpoint: str, root: str | Path = ASSETS) -> str:
    """A per-checkpoint card (markdown): model, method, task, training step, prompt format,
    options, an example question it understands with its true answer
    (:func:`example_question`), the calibration temperature (``fitted T 1.234``, or ``not fitted``
    for a base checkpoint, :func:`temperature_status`) and the stored test metrics after
    temperature scaling. Raises ``gr.Error`` for a missing checkpoint or a broken
    ``rlcd.json``."""
    path = checkpoint_dir(checkpoint, root)
    meta = _meta(path)
    fitted, note = temperature_status(path, meta)
    fmt = checkpoint_prompt_format(path, meta)
    rows = [("checkpoint", f"`{checkpoint}`")]
    for key in ("model", "method", "task", "step"):
        if meta.get(key) is not None:
            rows.append((key, f"{meta[key]}"))
    rows.append(("prompt format", f"`{fmt}`: {FORMATS[fmt]}"))
    opts = meta.get("options")
    rows.append(
        (
            "options",
            ", ".join(f"`{o}`" for o in opts)
            if opts
            else "any single-token labels (yes/no, letters, digits)",
        )
    )
    item = example_question(path, meta)
    if item is not None:
        prompt = " · ".join(line.strip() for line in item.prompt.splitlines() if line.strip())
        prompt = prompt.replace("`", "'")
        if len(prompt) > MAX_CARD_EXAMPLE:
            prompt = prompt[: MAX_CARD_EXAMPLE - 1] + "…"
        answer = "" if item.label is None else f" → **{item.options[item.label]}**"
        rows.append(("example", f"`{prompt}` (options {', '.join(item.options)}){answer}"))
    if fitted:
        rows.append(("fitted T", f"{float(calibration_T(meta)):.3f} (fitted on dev)"))
    else:
        rows.append(("T", f"not fitted ({note}): readouts are used raw"))
    test = (meta.get("metrics") or {}).get("test") or {}
    shown = [
        f"{k.removeprefix('ts_')} {test[k]:.3f}"
        for k in ("ts_accuracy", "ts_ece", "ts_aurc", "ts_cov_at_eps")
        if isinstance(test.get(k), (int, float))
    ]
    if shown:
        rows.append(("test metrics", ", ".join(shown) + " (stored, after T)"))
    return _card_lines(rows)


def checkpoint_info(
    checkpoint: str, question: str, options: str, root: str | Path = ASSETS
) -> tuple[str, gr.Dropdown, str, str]:
    """What the Ask tab shows when a checkpoint is chosen: ``(model card, examples
    dropdown, question, options)``. The question and options are replaced by the task's
    first example only when the current options do not fit the checkpoint's task; for a
    chat checkpoint without a task (SmolLM2) by the first generic example only when the
    question is empty. The dropdown shows the example the question is, when it is one."""
    try:
        path = checkpoint_dir(checkpoint, root)
        meta = _meta(path)
        info = model_card(checkpoint, root)
    except gr.Error as err:
        return (
            f"**Checkpoint not usable:** {err}",
            gr.Dropdown(choices=[], value=None),
            question,
            options,
        )
    items = example_items(path, meta)
    if meta.get("task") and not items:
        info += f"\n\nTask {meta['task']!r} could not be loaded; type your own question."
    choices = [(_example_label(it), it.uid) for it in items[:N_EXAMPLES]]
    current = [s.strip() for s in (options or "").replace(",", " ").split()]
    if meta.get("task"):
        label = "Task example (test split)"
        if items and current != list(items[0].options):
            question, options = items[0].prompt, ", ".join(items[0].options)
    else:
        label = "Example question"
        if items:
            info += "\n\nNo task: pick an example or type your own question and labels."
            if not (question or "").strip():
                question, options = items[0].prompt, ", ".join(items[0].options)
    shown = next(
        (it.uid for it in items[:N_EXAMPLES]
         if it.prompt == question and ", ".join(it.options) == options),
        None,
    )  # fmt: skip
    return info, gr.Dropdown(choices=choices, value=shown, label=label), question, options


def example_fields(checkpoint: str, uid: str | None, root: str | Path = ASSETS) -> tuple:
    """``(question, options)`` of the example ``uid`` of the checkpoint (a test item of its
    task, or a generic example; no change when ``uid`` is empty)."""
    if not uid:
        return gr.skip(), gr.skip()
    path = checkpoint_dir(checkpoint, root)
    for item in example_items(path, _meta(path)):
        if item.uid == uid:
            return item.prompt, ", ".join(item.options)
    raise gr.Error(f"no example {uid!r} for this checkpoint")


def example_answer(checkpoint: str, uid: str | None, root: str | Path = ASSETS) -> tuple:
    """What picking an example does: ``(question, options)`` of :func:`example_fields`,
    then the answer's outputs cleared (verdict, rationales, bars, result), so the previous
    answer does not stay beside the new question."""
    return (*example_fields(checkpoint, uid, root), "", "", None, None)
