"""Task items, synthetic tasks of the tiny world, and converters from public datasets."""

from .items import TaskItem, read_items, validate_item, write_items

__all__ = ["TaskItem", "read_items", "validate_item", "write_items"]
