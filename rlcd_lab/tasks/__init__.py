"""Task items, synthetic tasks of the tiny world, and converters from public datasets."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence

from rlcd_lab.tasks.items import TaskItem, read_items
from rlcd_lab.tasks.split import SPLITS, split_base, split_paths
from rlcd_lab.tasks.synthetic import TASKS, get_task

__all__ = [
    "check_unique_uids",
    "load_task_items",
]


def check_unique_uids(items: Sequence[TaskItem], path: str | os.PathLike) -> None:
    """``ValueError`` naming ``path`` and the repeated uids (the first 10, with their
    counts) when an item's uid repeats in ``items`` (read from ``path``)."""
    counts = Counter(it.uid for it in items)
    dups = [(uid, c) for uid, c in counts.items() if c > 1]
    if dups:
        shown = ", ".join(f"{uid!r} ({c}x)" for uid, c in dups[:10])
        more = f" and {len(dups) - 10} more" if len(dups) > 10 else ""
        raise ValueError(
            f"{path}: duplicate uids {shown}{more}; every item needs its own uid (eval dumps "
            "and comparisons key items by uid): remove or rename the repeats"
        )


def load_task_items(task: str, split: str) -> list[TaskItem]:
    """Items of one split of a task: a synthetic task name, or a task-item JSONL file.

    For a file ``x.jsonl`` the split is read from its sibling ``x.<split>.jsonl`` (written
    by ``rlcd-lab data split x.jsonl --dev N --test N``); a split file given as the task
    (``x.train.jsonl``, ``x.dev.jsonl`` or ``x.test.jsonl``) stands for ``x.jsonl``, so its
    siblings are read for the other splits. ``x.jsonl`` itself is never read: a missing
    sibling is a ``ValueError`` naming it and the command that writes it, never a silent
    fallback to the whole file (which would train and test on the same items). An
    unknown name, or a path with neither the file nor any split of it, is a
    ``ValueError`` listing the synthetic tasks; so is a split file that holds no item
    (naming it), and one whose uids repeat
    (:func:`check_unique_uids`: eval dumps, routing and the paired comparisons key items
    by uid).
    """
    if task in TASKS:
        return get_task(task).split(split)
    task = os.path.expanduser(task)  # configs name files under the home directory as ~/...
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
    base = split_base(task)
    paths = split_paths(base)
    if paths[split].is_file():
        items = read_items(paths[split])
        if not items:
            raise ValueError(
                f"task {task}: the {split} split is empty (no items in {paths[split]}); write "
                f"the splits again with `rlcd-lab data split {base} --dev N --test N --overwrite`"
            )
        check_unique_uids(items, paths[split])
        return items
    if base.is_file() or any(p.is_file() for p in paths.values()):
        raise ValueError(
            f"task file {base} has no {split} split: {paths[split]} is missing; write the "
            f"splits with `rlcd-lab data split {base} --dev N --test N`"
        )
    raise ValueError(f"task must be one of {sorted(TASKS)} or a task-item JSONL file, got {task!r}")
