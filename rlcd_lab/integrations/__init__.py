"""Bridges from rlcd_lab's estimators and reader to other training frameworks (optional extras)."""
