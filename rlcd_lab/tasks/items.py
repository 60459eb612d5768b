"""Task items: the one data format every task, loader and training loop shares.

One item per JSONL line: ``{"uid": str, "prompt": str, "options": [str, ...],
"label": int | null, "q": [float, ...] | null}``. ``options`` are the answer labels as
the model writes them after the marker (each a single token for the model's tokenizer);
``prompt`` is the question text, which names the options. ``q`` is the outcome
distribution (one-hot for epistemic tasks, spread for aleatoric ones); when given,
training draws a fresh outcome ``Y ~ q`` on every visit.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from ..io import atomic_write_text


@dataclass(frozen=True)
class TaskItem:
    """One question: prompt text, option labels, a label and/or an outcome distribution."""

    uid: str
    prompt: str
    options: tuple[str, ...]
    label: int | None = None
    q: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", tuple(self.options))
        if self.q is not None:
            object.__setattr__(self, "q", tuple(float(v) for v in self.q))
        validate_item(self)

    def to_json(self) -> dict:
        """The JSON-ready dict of the item (lists, not tuples)."""
        d = asdict(self)
        d["options"] = list(self.options)
        d["q"] = None if self.q is None else list(self.q)
        return d

    @classmethod
    def from_json(cls, d: dict) -> TaskItem:
        """Build an item from a parsed JSON object; unknown keys are an error."""
        extra = set(d) - {"uid", "prompt", "options", "label", "q"}
        if extra:
            raise ValueError(f"unknown task-item fields {sorted(extra)}")
        missing = {"uid", "prompt", "options"} - set(d)
        if missing:
            raise ValueError(f"task item is missing {sorted(missing)}")
        return cls(d["uid"], d["prompt"], tuple(d["options"]), d.get("label"), d.get("q"))

    @property
    def target(self) -> tuple[float, ...]:
        """The outcome distribution: ``q`` if given, else the one-hot of ``label``."""
        if self.q is not None:
            return self.q
        return tuple(float(k == self.label) for k in range(len(self.options)))


def validate_item(item: TaskItem) -> None:
    """Raise ``ValueError`` naming the item and the problem if it is malformed."""
    where = f"task item {item.uid!r}"
    if not isinstance(item.uid, str) or not item.uid:
        raise ValueError(f"{where}: uid must be a non-empty string")
    if not isinstance(item.prompt, str) or not item.prompt.strip():
        raise ValueError(f"{where}: prompt must be a non-empty string")
    if len(item.options) < 2:
        raise ValueError(f"{where}: needs at least 2 options, got {list(item.options)}")
    if any(not isinstance(o, str) or not o.strip() for o in item.options):
        raise ValueError(f"{where}: options must be non-empty strings")
    if len(set(item.options)) != len(item.options):
        raise ValueError(f"{where}: duplicate options {list(item.options)}")
    if item.label is None and item.q is None:
        raise ValueError(f"{where}: needs a label or an outcome distribution q")
    if item.label is not None and not (
        isinstance(item.label, int) and 0 <= item.label < len(item.options)
    ):
        raise ValueError(f"{where}: label {item.label!r} is not an index into the options")
    if item.q is not None:
        if len(item.q) != len(item.options):
            raise ValueError(
                f"{where}: q has {len(item.q)} entries for {len(item.options)} options"
            )
        if any(v < 0 or not math.isfinite(v) for v in item.q) or abs(sum(item.q) - 1) > 1e-6:
            raise ValueError(f"{where}: q must be a probability distribution, got {list(item.q)}")


def read_items(path: str | os.PathLike) -> list[TaskItem]:
    """Read a task-item JSONL file; errors name the file and line."""
    items = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                items.append(TaskItem.from_json(json.loads(line)))
            except (ValueError, TypeError, KeyError) as err:
                raise ValueError(f"{path}:{n}: {err}") from None
    return items


def write_items(path: str | os.PathLike, items: Iterable[TaskItem]) -> Path:
    """Write items as JSONL, atomically."""
    lines = (json.dumps(item.to_json(), ensure_ascii=False) + "\n" for item in items)
    return atomic_write_text(path, "".join(lines))
