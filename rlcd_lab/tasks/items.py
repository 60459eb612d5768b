"""Task items: the one data format every task, loader and training loop shares.

One item per JSONL line: ``{"uid": str, "prompt": str, "options": [str, ...],
"label": int | null, "q": [float, ...] | null}`` (:class:`TaskItem`, checked by
:func:`validate_item`); :func:`read_items` and :func:`write_items` read and write a file.
"""

from __future__ import annotations

import itertools
import json
import math
import numbers
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from rlcd_lab.files.io import atomic_write_text, loads_json, printable

FIELDS = ("uid", "prompt", "options", "label", "q")
REQUIRED = ("uid", "prompt", "options")
"""Fields every item has; ``label`` or ``q`` (at least one of them) may be null."""
EXPECTED = (
    "uid (string), prompt (string), options (array of strings), label (integer index "
    "into options, or null), q (array of probabilities, one per option, or null)"
)
"""The task-item fields as an error message lists them."""


def _json_kind(value: object) -> str:
    """How a parsed JSON value reads in a message: ``an array``, ``a string``, ..."""
    if isinstance(value, bool):
        return f"{str(value).lower()}"
    if value is None:
        return "null"
    kinds = {dict: "an object", list: "an array", str: "a string", int: "a number"}
    return next((k for t, k in kinds.items() if isinstance(value, t)), "a number")


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclass(frozen=True)
class TaskItem:
    """One question: prompt text, option labels, a label and/or an outcome distribution.

    ``options`` are the answer labels as the model writes them after the marker (each a
    single token for the model's tokenizer); ``prompt`` is the question text, which names the
    options. ``q`` is the outcome distribution (one-hot for epistemic tasks, spread for
    aleatoric ones); when given, training draws a fresh outcome ``Y ~ q`` on every visit.
    """

    uid: str
    prompt: str
    options: tuple[str, ...]
    label: int | None = None
    q: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        where = f"task item {self.uid!r}"
        if isinstance(self.options, (str, bytes)) or not isinstance(self.options, Iterable):
            raise ValueError(f"{where}: options must be a list of strings, got {self.options!r}")
        object.__setattr__(self, "options", tuple(self.options))
        if self.q is not None:
            if isinstance(self.q, (str, bytes)) or not isinstance(self.q, Iterable):
                raise ValueError(f"{where}: q must be a list of numbers or null, got {self.q!r}")
            if not all(_is_number(v) for v in self.q):
                raise ValueError(f"{where}: q must hold numbers only, got {list(self.q)}")
            object.__setattr__(self, "q", tuple(float(v) for v in self.q))
        validate_item(self)

    def to_json(self) -> dict:
        """The JSON-ready dict of the item (lists, not tuples)."""
        d = asdict(self)
        d["options"] = list(self.options)
        d["q"] = None if self.q is None else list(self.q)
        return d

    @classmethod
    def from_json(cls, d: object) -> TaskItem:
        """Build an item from a parsed JSON value, which must be an object with the item's
        fields (unknown keys are an error) and ``options`` and ``q`` arrays; ``ValueError``
        naming the problem otherwise."""
        if not isinstance(d, dict):
            raise ValueError(
                f"a task item must be a JSON object with {', '.join(FIELDS)}, got {_json_kind(d)}"
            )
        extra = [k for k in d if k not in FIELDS]
        missing = [k for k in REQUIRED if k not in d]
        if extra or missing:
            parts = [f"unknown task-item fields {extra}"] if extra else []
            parts += [f"task item is missing {missing}"] if missing else []
            raise ValueError(
                f"{' and '.join(parts)}; a task item has the fields {EXPECTED} (see "
                "docs/training.md, 'Task files')"
            )
        where = f"task item {d['uid']!r}"
        if not isinstance(d["options"], list):
            raise ValueError(
                f"{where}: options must be an array of strings, got {_json_kind(d['options'])}"
            )
        if d.get("q") is not None and not isinstance(d["q"], list):
            raise ValueError(
                f"{where}: q must be an array of numbers or null, got {_json_kind(d['q'])}"
            )
        return cls(d["uid"], d["prompt"], tuple(d["options"]), d.get("label"), d.get("q"))

    @property
    def target(self) -> tuple[float, ...]:
        """The outcome distribution: ``q`` if given, else the one-hot of ``label``."""
        if self.q is not None:
            return self.q
        return tuple(float(k == self.label) for k in range(len(self.options)))


def validate_item(item: TaskItem) -> None:
    """Raise ``ValueError`` naming the item and the problem if it is malformed: ``uid`` and
    ``prompt`` non-empty strings; at least 2 distinct non-empty string options; text that
    UTF-8 can write (no lone surrogates); a label or a ``q``; a label an integer index into
    the options (``true``/``false`` are not); ``q`` a probability distribution over them."""
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
    for name, text in (
        ("uid", item.uid),
        ("prompt", item.prompt),
        *(("options", o) for o in item.options),
    ):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:  # a lone surrogate (JSON "\ud800"): no UTF-8
            raise ValueError(
                f"{where}: {name} holds {text[err.start]!r}, a lone surrogate that is not text"
            ) from None
    if item.label is None and item.q is None:
        raise ValueError(f"{where}: needs a label or an outcome distribution q")
    if item.label is not None and not (
        isinstance(item.label, int)
        and not isinstance(item.label, bool)
        and 0 <= item.label < len(item.options)
    ):
        shown = json.dumps(item.label) if isinstance(item.label, bool) else repr(item.label)
        raise ValueError(
            f"{where}: label {shown} is not an index into the options (an integer 0..K-1, or null)"
        )
    if item.q is not None:
        if len(item.q) != len(item.options):
            raise ValueError(
                f"{where}: q has {len(item.q)} entries for {len(item.options)} options"
            )
        if any(v < 0 or not math.isfinite(v) for v in item.q) or abs(sum(item.q) - 1) > 1e-6:
            raise ValueError(f"{where}: q must be a probability distribution, got {list(item.q)}")


MAX_LINE_BYTES = 1 << 20
"""Longest line of a task file :func:`read_items` reads, its newline included (1 MiB: a
prompt of a few hundred thousand characters fits, far beyond any model's context)."""
MAX_ITEMS = 100_000
"""Most items a task file may hold (the largest set ``data fetch`` writes, MMLU, has 14,042;
a split holds fewer than its file). Every item of a split is held in memory and checked
against the model before training or evaluation starts, so past this a file is refused
rather than read."""
MAX_FILE_BYTES = 256 << 20
"""Most bytes :func:`read_items` reads from one task file (256 MiB)."""


def read_items(path: str | os.PathLike) -> list[TaskItem]:
    """Read a task-item JSONL file (UTF-8, a byte-order mark allowed; blank lines
    skipped), streamed and bounded: it stops with a ``ValueError`` at the first line
    longer than :data:`MAX_LINE_BYTES`, past :data:`MAX_ITEMS` items or past
    :data:`MAX_FILE_BYTES` bytes (so ``/dev/zero`` or a runaway file costs at most one
    line's worth of memory, not all of it). Every other problem is one ``ValueError``
    ``"<file>:<line>: <what>"`` too: bytes that are not UTF-8, a line that is not JSON or
    nested too deeply to parse, a line that is not an object, a malformed item
    (``TaskItem.from_json``, ``validate_item``); the line it quotes has its control
    characters escaped (:func:`rlcd_lab.files.io.printable`).

    Reading a file (``read_items``) refuses anything else with one ``ValueError`` naming the
    file and line: bytes that are not UTF-8, a line that is not JSON (or nested too deeply to
    parse), a line that is not an object (an array, a string, a number), a field of the
    wrong type (``"label": true``, ``"options": "YN"``, ``"q": ["0.5", ...]``) and the
    checks of ``validate_item``.
    """
    items: list[TaskItem] = []
    total = 0
    with open(path, "rb") as f:
        for n in itertools.count(1):
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            total += len(raw)
            if len(raw) > MAX_LINE_BYTES:
                raise ValueError(
                    f"{path}:{n}: line longer than {MAX_LINE_BYTES:,} bytes, the limit of one "
                    "task item (is this a task-item JSONL file?)"
                )
            if total > MAX_FILE_BYTES:
                raise ValueError(
                    f"{path}: larger than {MAX_FILE_BYTES:,} bytes, the limit of a task file; "
                    "shorten its prompts or split it into several files"
                )
            try:
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(
                    f"{path}:{n}: not UTF-8 text (byte 0x{raw[err.start]:02x} at byte "
                    f"{err.start + 1} of the line)"
                ) from None
            if not line.strip():
                continue
            if len(items) == MAX_ITEMS:
                raise ValueError(
                    f"{path}: more than {MAX_ITEMS:,} items, the limit of a task file (line "
                    f"{n}); train or evaluate on a subset (e.g. `head -n {MAX_ITEMS}`)"
                )
            try:
                items.append(TaskItem.from_json(loads_json(line)))
            except (ValueError, TypeError, KeyError) as err:
                shown = line.strip()
                shown = shown if len(shown) <= 120 else shown[:117] + "..."
                raise ValueError(f"{path}:{n}: {err} (the line: {printable(shown)})") from None
    return items


def write_items(path: str | os.PathLike, items: Iterable[TaskItem]) -> Path:
    """Write items as JSONL, atomically."""
    lines = (json.dumps(item.to_json(), ensure_ascii=False) + "\n" for item in items)
    return atomic_write_text(path, "".join(lines))
