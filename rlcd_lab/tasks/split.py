"""Train/dev/test splits of a task-item file, so that nothing trains on its test items.

A task file ``x.jsonl`` is split once into ``x.train.jsonl``, ``x.dev.jsonl`` and
``x.test.jsonl`` beside it (:func:`split_file`, ``rlcd-lab data split x.jsonl --dev N
--test N``); ``load_task_items("x.jsonl", split)`` then reads the sibling of that split,
and never the whole file. :func:`split_items` (pure) says how items are split.
"""

from __future__ import annotations

import math
import os
import random
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from rlcd_lab.tasks.items import TaskItem, read_items, write_items

SPLITS = ("train", "dev", "test")
_SPLIT_FILE = re.compile(r"(?P<stem>.+)\.(?P<split>train|dev|test)\.jsonl")


def split_base(path: str | os.PathLike) -> Path:
    """The task file a path stands for: ``x.train.jsonl`` (or ``.dev``/``.test``) ->
    ``x.jsonl`` beside it; any other path unchanged."""
    path = Path(path)
    m = _SPLIT_FILE.fullmatch(path.name)
    return path.with_name(f"{m['stem']}.jsonl") if m else path


def split_paths(path: str | os.PathLike) -> dict[str, Path]:
    """``{split: <stem>.<split>.jsonl}`` beside the task file ``path`` (a split file of
    it resolves to the same siblings: see ``split_base``)."""
    base = split_base(path)
    stem = base.name[: -len(".jsonl")] if base.name.endswith(".jsonl") else base.stem
    return {s: base.with_name(f"{stem}.{s}.jsonl") for s in SPLITS}


def stratum(item: TaskItem) -> int:
    """The label an item is stratified by: ``label``, else the argmax of ``q`` (first)."""
    if item.label is not None:
        return item.label
    assert item.q is not None  # validated: an item has a label or a q
    return max(range(len(item.q)), key=lambda k: (item.q[k], -k))


def _allocate(sizes: dict[int, int], total: int, room: dict[int, int]) -> dict[int, int]:
    """``total`` whole items over strata in proportion to ``sizes`` (largest remainders),
    never more than ``room[k]`` in stratum ``k``; needs ``sum(room) >= total``."""
    n = sum(sizes.values())
    exact = {k: total * s / n for k, s in sizes.items()}
    got = {k: min(math.floor(x), room[k]) for k, x in exact.items()}
    order = sorted(sizes, key=lambda k: (-(exact[k] - math.floor(exact[k])), -sizes[k], k))
    while sum(got.values()) < total:
        for k in order:
            if sum(got.values()) < total and got[k] < room[k]:
                got[k] += 1
    return got


def split_items(
    items: Sequence[TaskItem], n_dev: int, n_test: int, seed: int = 0
) -> dict[str, list[TaskItem]]:
    """Split ``items`` into ``{"train", "dev", "test"}`` lists of exactly ``N - n_dev -
    n_test``, ``n_dev`` and ``n_test`` items, disjoint by uid, stratified by label (see
    below), deterministic given ``seed``.

    Raises ``ValueError`` when uids repeat (naming them), when ``n_dev`` or ``n_test`` is
    below 1, or when ``n_dev + n_test >= N`` (the train split would be empty).

    How items are split: the items are grouped by stratum, their
    ``label`` (or, when only ``q`` is given, the argmax of ``q``, first on a tie); each
    stratum gets a share of the dev and of the test items proportional to its size
    (largest remainders, ties to the larger stratum, then the smaller label), so the label
    mix of every split matches the file's as closely as whole items allow. Within a stratum
    the items are ordered by uid and shuffled with ``random.Random(f"{seed}:{stratum}")``:
    the result depends only on the items and the seed, not on the file's line order. Each
    split keeps the file's order.
    """
    counts = Counter(item.uid for item in items)
    dups = sorted(uid for uid, c in counts.items() if c > 1)
    if dups:
        shown = ", ".join(repr(u) for u in dups[:10]) + (" ..." if len(dups) > 10 else "")
        raise ValueError(f"duplicate uids ({len(dups)}): {shown}; uids must be unique to split")
    if n_dev < 1 or n_test < 1:
        raise ValueError(f"dev and test sizes must be at least 1, got {n_dev} and {n_test}")
    if n_dev + n_test >= len(items):
        raise ValueError(
            f"dev {n_dev} + test {n_test} = {n_dev + n_test} leaves no training items "
            f"out of {len(items)}; ask for fewer"
        )
    position = {item.uid: i for i, item in enumerate(items)}
    strata: dict[int, list[TaskItem]] = {}
    for item in sorted(items, key=lambda it: it.uid):
        strata.setdefault(stratum(item), []).append(item)
    sizes = {k: len(v) for k, v in strata.items()}
    dev_n = _allocate(sizes, n_dev, sizes)
    test_n = _allocate(sizes, n_test, {k: sizes[k] - dev_n[k] for k in sizes})
    out: dict[str, list[TaskItem]] = {s: [] for s in SPLITS}
    for k, group in sorted(strata.items()):
        random.Random(f"{seed}:{k}").shuffle(group)
        out["dev"] += group[: dev_n[k]]
        out["test"] += group[dev_n[k] : dev_n[k] + test_n[k]]
        out["train"] += group[dev_n[k] + test_n[k] :]
    return {s: sorted(v, key=lambda it: position[it.uid]) for s, v in out.items()}


def default_sizes(n: int) -> tuple[int, int]:
    """``(n_dev, n_test)`` used by ``data fetch``: 10% dev (at most 500) and 20% test (at
    most 2000), at least 1 each; needs ``n >= 3``."""
    if n < 3:
        raise ValueError(f"{n} items are too few to split into train, dev and test")
    return min(500, max(1, round(0.1 * n))), min(2000, max(1, round(0.2 * n)))


def split_file(
    path: str | os.PathLike, n_dev: int, n_test: int, seed: int = 0, overwrite: bool = False
) -> dict[str, Path]:
    """Split the task-item file ``path`` with ``split_items`` and write the three splits
    beside it (``split_paths``), each atomically; return their paths.

    Raises ``ValueError`` when ``path`` is itself a split file, when a split file exists
    and not ``overwrite`` (nothing is written then), and for ``split_items``' errors
    (prefixed with the file name).
    """
    path = Path(path)
    if split_base(path) != path:
        raise ValueError(f"{path} is already a split file; split {split_base(path)} instead")
    targets = split_paths(path)
    existing = [str(p) for p in targets.values() if p.exists()]
    if existing and not overwrite:
        raise ValueError(
            f"split files exist: {', '.join(existing)}; pass --overwrite to replace them"
        )
    items = read_items(path)
    try:
        splits = split_items(items, n_dev, n_test, seed)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    return {s: write_items(targets[s], splits[s]) for s in SPLITS}
