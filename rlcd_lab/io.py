"""Atomic writes: a reader never sees a half-written file or checkpoint directory."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path


def _mode(full: int) -> int:
    umask = os.umask(0)
    os.umask(umask)
    return full & ~umask & (stat.S_IRWXU | stat.S_IRWXG | stat.S_IRWXO)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` via a temp file in the same directory and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _mode(0o666))  # mkstemp makes 0600; give what open() would
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> Path:
    """Write ``rows`` as JSON lines (an eval dump), atomically."""
    return atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Rows of a JSONL file (an eval dump, a ``log.jsonl``); blank lines are skipped."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp directory beside ``path``; on success it replaces ``path`` whole.

    On an exception the temp directory is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    os.chmod(tmp, _mode(0o777))  # mkdtemp makes 0700; give what mkdir() would
    try:
        yield tmp
        for sub in tmp.rglob("*"):  # some writers (safetensors) create 0600 files
            os.chmod(sub, _mode(0o777 if sub.is_dir() else 0o666))
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
