"""File-system plumbing: atomic writes (a reader never sees a half-written file or
checkpoint directory), JSON that fails as a ``ValueError`` only, JSON lines read plain or
packed (``X.jsonl.xz``: :func:`pack`), and a lock that lets one process at a time write a
folder (``FolderLock``).

``python -m rlcd_lab.files.io pack DIR...`` packs every ``*.jsonl`` under each DIR (what
``assets/results`` ships; runs keep writing plain ``.jsonl``).
"""

from __future__ import annotations

import errno
import json
import lzma
import os
import shutil
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # Windows: FolderLock is a no-op
    fcntl = None  # type: ignore[assignment]


def _mode(full: int) -> int:
    umask = os.umask(0)
    os.umask(umask)
    return full & ~umask & (stat.S_IRWXU | stat.S_IRWXG | stat.S_IRWXO)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` via a temp file in the same directory and ``os.replace``."""
    return _atomic_write(path, text, "w")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (as :func:`atomic_write_text`)."""
    return _atomic_write(path, data, "wb")


def _atomic_write(path: str | os.PathLike, data: str | bytes, mode: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as f:
            f.write(data)
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


PACKED = ".xz"
"""Suffix of a packed JSONL file: ``X.jsonl.xz`` holds the bytes of ``X.jsonl``, xz-compressed
(about a quarter smaller than gzip on the eval dumps: what keeps ``assets/`` lean)."""
PACK_PRESET = 9 | lzma.PRESET_EXTREME
"""xz preset of :func:`pack_jsonl` (fixed; xz stores no time or name: reproducible bytes)."""


def jsonl_path(path: str | os.PathLike) -> Path:
    """The file that holds the rows of ``path``: ``path`` itself, else its packed form
    ``path.xz`` when only that exists (shipped dumps are packed), else ``path`` (missing:
    errors name the plain file). ``jsonl_path(p).exists()``: whether ``p`` can be read."""
    path = Path(path)
    packed = path.with_name(path.name + PACKED)
    if path.name.endswith(".jsonl") and not path.exists() and packed.exists():
        return packed
    return path


def jsonl_files(folder: str | os.PathLike, pattern: str = "*.jsonl") -> list[Path]:
    """The JSONL files under ``folder`` that match ``pattern`` (a glob ending in
    ``.jsonl``, e.g. ``"test-m*.jsonl"`` or ``"**/eval/test.jsonl"``), plain or packed,
    each by its plain name (``X.jsonl`` for ``X.jsonl.xz``: read it with
    :func:`read_jsonl`, find the file with :func:`jsonl_path`), sorted."""
    folder = Path(folder)
    packed = (p.with_name(p.name[: -len(PACKED)]) for p in folder.glob(pattern + PACKED))
    return sorted({*folder.glob(pattern), *packed})


def read_jsonl(path: str | os.PathLike, partial_last: bool = False) -> list[dict]:
    """Rows of a JSONL file (an eval dump, a ``log.jsonl``); blank lines are skipped. A
    ``.xz`` file is decompressed, and a missing ``X.jsonl`` is read from ``X.jsonl.xz``
    (:func:`jsonl_path`).

    Every problem is one ``ValueError`` ``"<file>:<line>: <what>"``: bytes that are not
    UTF-8, a line that is not JSON (or nested too deeply to parse), a line that is not a
    JSON object; a truncated or corrupt packed file names the file and the line it was
    read to. ``partial_last``: a last line that is not JSON and has no newline after it
    (what a process killed mid-write leaves at the end of a log it appends to) is
    ignored instead.
    """
    path = jsonl_path(path)
    packed = path.name.endswith(PACKED)
    lines: list[bytes] = []
    try:
        with lzma.open(path, "rb") if packed else open(path, "rb") as f:
            for raw in f:
                lines.append(raw)
    except (EOFError, lzma.LZMAError) as err:  # the stream ends early, or is corrupt
        raise ValueError(
            f"{path}: truncated or corrupt xz stream after line {len(lines)} ({err})"
        ) from None
    rows = []
    for n, raw in enumerate(lines, 1):
        try:
            row = _jsonl_row(raw)
        except ValueError as err:
            if partial_last and n == len(lines) and not raw.endswith(b"\n"):
                break  # cut short by a killed writer: the rows before it stand
            raise ValueError(f"{path}:{n}: {err}") from None
        if row is not None:
            rows.append(row)
    return rows


def _jsonl_row(raw: bytes) -> dict | None:
    """The object on one JSONL line (``raw``: its bytes); None for a blank line;
    ``ValueError`` saying what is wrong otherwise."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"not UTF-8 text (byte 0x{raw[err.start]:02x} at byte {err.start + 1} of the line)"
        ) from None
    if not line.strip():
        return None
    try:
        row = loads_json(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"not JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(row, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean"}.get(type(row), "a number")
        raise ValueError(f"not a JSON object, {'null' if row is None else kind}")
    return row


def pack_jsonl(path: str | os.PathLike) -> Path:
    """Replace ``X.jsonl`` by ``X.jsonl.xz`` beside it (an existing one is overwritten):
    xz at :data:`PACK_PRESET`, so the same file always packs to the same bytes; checked to
    unpack to the original before the plain file is removed. Returns the packed file."""
    path = Path(path)
    data = path.read_bytes()
    packed = lzma.compress(data, preset=PACK_PRESET)
    if lzma.decompress(packed) != data:  # lossless, or nothing is removed
        raise OSError(f"{path}: packing does not round-trip")
    out = atomic_write_bytes(path.with_name(path.name + PACKED), packed)
    path.unlink()
    return out


def pack(folder: str | os.PathLike) -> list[Path]:
    """:func:`pack_jsonl` every ``*.jsonl`` file under ``folder`` (what ``assets/results``
    ships: eval dumps and logs, read back by :func:`read_jsonl`); returns the packed
    files, sorted."""
    return [pack_jsonl(p) for p in sorted(Path(folder).rglob("*.jsonl")) if p.is_file()]


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


def loads_json(text: str | bytes) -> Any:
    """``json.loads(text)``, with every way the text can fail to parse a ``ValueError``:
    malformed JSON (``json.JSONDecodeError``, already one) and, in its place, the
    ``RecursionError`` of arrays or objects nested deeper than Python's parser goes (a
    line of 100,000 ``[`` is valid JSON that crashes ``json.loads``)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("not readable as JSON: nested too deeply") from None


MAX_JSON_BYTES = 64 << 20
"""Largest JSON file :func:`read_json_file` reads (64 MiB): a model's ``config.json``,
``rlcd.json`` or ``checksums.json`` is a few KiB, a run's ``config.json`` less."""


def read_json_file(path: str | os.PathLike, limit: int = MAX_JSON_BYTES) -> Any:
    """The JSON value in the regular file ``path``, read without ever blocking or reading
    unbounded: the file is opened non-blocking and refused before any read unless it is a
    regular file (a FIFO, a device such as ``/dev/zero``, a socket or a folder in its
    place), and refused when larger than ``limit`` bytes. Every problem with the file's
    kind or content is one ``ValueError`` ``"<file>: <what>"`` (not a regular file, too
    large, not UTF-8, not JSON, nested too deeply: :func:`loads_json`); a file that cannot
    be opened raises the ``OSError`` of ``open`` (``FileNotFoundError``, ...)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = {stat.S_IFIFO: "a FIFO", stat.S_IFDIR: "a folder", stat.S_IFSOCK: "a socket"}
        raise ValueError(f"{path}: not a regular file ({kind.get(stat.S_IFMT(mode), 'a device')})")
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path}: larger than {limit:,} bytes, too large for a JSON file here")
    try:
        return loads_json(data.decode("utf-8-sig"))
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text (byte 0x{data[err.start]:02x})") from None
    except ValueError as err:
        raise ValueError(f"{path}: not readable as JSON ({err})") from None


def printable(text: object) -> str:
    """``str(text)`` with every character that is not printable (control characters such as
    NUL, ESC and BEL, DEL, C1 controls, line and paragraph separators; tab and newline too)
    written as its Python escape (``\\x1b``, ``\\x00``, ``\\n``, ``\\u2028``), so that
    echoing user data in an error never drives the terminal (``\\x1b]0;...\\x07`` sets a
    window title) or splits the message into lines; printable text, non-ASCII letters
    included, is unchanged. Every error message that quotes a file's content or a user's
    value passes it through here."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


# ------------------------------------------------------------------------ folder locks
class FolderInUseError(OSError):
    """Another process holds the lock of a folder (``FolderLock``); the message names the
    folder and, as far as it recorded itself, the holder."""


class FolderLock:
    """One writer per folder, across processes: an exclusive, non-blocking
    ``fcntl.flock`` on the file ``.<name>.lock`` beside the folder.

    Beside, not inside: the lock also covers creating the folder, moving it aside and
    replacing it whole. ``acquire`` raises ``FolderInUseError`` at once (it never waits)
    when another holder has it, even another ``FolderLock`` of this very process; the
    holder writes its pid, host, start time and command line into the lock file, and the
    error quotes them. ``release`` (idempotent) removes the file and unlocks; the
    operating system unlocks too when the holder exits, killed or not, so a crashed run
    never leaves a stale lock (a lock file left behind by one is taken over). The path is
    resolved first (symbolic links, ``..``), so two spellings of one folder share the lock.
    Without ``fcntl`` (Windows), or on a file system that does not support ``flock``, the
    lock is a no-op.
    """

    def __init__(self, folder: str | os.PathLike):
        real = Path(os.path.realpath(folder))
        self.folder = Path(folder)
        self.file = real.parent / f".{real.name}.lock"
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd is not None

    def acquire(self, hint: str = "", what: str = "folder") -> FolderLock:
        """Take the lock (returns ``self``), or raise ``FolderInUseError`` naming the
        folder (as ``what``, e.g. ``"run folder"``), the holder and ``hint`` (what to do
        instead). Creates the folder's parent directories when missing."""
        if self._fd is not None or fcntl is None:
            return self
        self.file.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(100):  # the holder may remove the file between open and flock
            fd = os.open(self.file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _lock_holder(fd)
                os.close(fd)
                hint = f"; {hint}" if hint else ""
                raise FolderInUseError(
                    f"{what} {self.folder} is in use by {holder}{hint}"
                ) from None
            except OSError as err:  # ENOLCK, EOPNOTSUPP: no flock on this file system
                os.close(fd)
                if err.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    return self
                raise
            try:
                same = os.path.samestat(os.stat(self.file), os.fstat(fd))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # locked a file that was removed meanwhile: lock the new one
        else:
            raise OSError(f"could not lock {self.file}: it keeps being replaced")
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(sys.argv)[:300],
        }
        self._fd = fd
        try:  # who holds it, for the message of the next one who tries
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(record).encode(), 0)
        except BaseException:
            self.release()
            raise
        return self

    def release(self) -> None:
        """Remove the lock file and unlock (nothing when not held)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:  # removed while still locked: a waiting opener then sees another file
            self.file.unlink(missing_ok=True)
        finally:
            os.close(fd)

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _lock_holder(fd: int) -> str:
    """Who holds a lock, from what it wrote into the lock file (``FolderLock.acquire``)."""
    try:
        record = json.loads(os.pread(fd, 4096, 0) or b"{}")
        pid, host = int(record["pid"]), str(record["host"])
        since, command = str(record["since"]), str(record["command"])
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"
    who = "this process" if pid == os.getpid() and host == socket.gethostname() else "process"
    return f"{who} {pid} on {host} since {since} ({command})"


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m rlcd_lab.files.io pack DIR...``: :func:`pack` each folder, printing the
    number of files packed in each."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] != ["pack"] or len(args) < 2:
        sys.exit("usage: python -m rlcd_lab.files.io pack DIR...")
    for folder in args[1:]:
        if not Path(folder).is_dir():
            sys.exit(f"{folder}: not a folder")
    for folder in args[1:]:
        print(f"{folder}: {len(pack(folder))} files packed")


if __name__ == "__main__":
    main()
