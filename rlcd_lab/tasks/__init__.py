"""Task items, synthetic tasks of the tiny world, and converters from public datasets."""

from __future__ import annotations

from pathlib import Path

from .items import TaskItem, read_items, validate_item, write_items
from .synthetic import TASKS, get_task

__all__ = ["TaskItem", "load_task_items", "read_items", "validate_item", "write_items"]


def load_task_items(task: str, split: str) -> list[TaskItem]:
    """Items of a synthetic task's split, or of a task-item JSONL file (``task`` a path;
    ``split`` then picks ``<stem>.<split>.jsonl`` beside it if that exists)."""
    if task in TASKS:
        return get_task(task).split(split)
    path = Path(task)
    sibling = path.with_name(f"{path.stem}.{split}.jsonl")
    if sibling.is_file():
        return read_items(sibling)
    if path.is_file():
        return read_items(path)
    raise ValueError(f"task must be one of {sorted(TASKS)} or a task-item JSONL file, got {task!r}")
