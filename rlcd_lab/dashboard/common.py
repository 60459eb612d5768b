"""Helpers shared by the dashboard's tabs: finding runs and checkpoints, naming them.

The shipped artefacts under ``assets/`` and the runs trained locally (:func:`local_runs`,
:func:`trained_checkpoints`) are listed by name; a typed name is opened with
:func:`resolve_dir`, only under the allowed places inside :func:`confined_to`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import gradio as gr
import plotly.graph_objects as go

from rlcd_lab.files import rundir
from rlcd_lab.files.assets import ASSETS, shipped_checkpoints, shipped_runs, tiny_verify_first
from rlcd_lab.files.io import jsonl_path
from rlcd_lab.lm.pretrained import SMOLLM2_DEFAULT_DIR
from rlcd_lab.methods import compared

CHECKPOINT_ENV = "RLCD_CHECKPOINT"
"""Environment variable naming the checkpoint directory the Ask tab opens with (instead of
``rlcd_lab.files.assets.default_checkpoint``)."""

RUNS_DIR = Path("runs")
"""Where locally trained runs are looked for (relative to the working directory)."""
MAX_LOCAL_RUNS = 200
"""At most this many local run directories are listed (the first in sorted order)."""
CHECKPOINT_FILES = ("config.json", "adapter_config.json")
"""A checkpoint directory holds a model (``config.json``) or a PEFT adapter."""


def compact_layout(fig: go.Figure, offset: float = 0.22) -> go.Figure:
    """A horizontal legend under the plot (``offset`` of the plot height below it) and
    narrow side margins, so a figure keeps most of its width on a phone; returns ``fig``."""
    fig.update_layout(
        legend={"orientation": "h", "yanchor": "top", "y": -offset, "x": 0},
        margin={"l": 50, "r": 20},
    )
    return fig


def run_choices(root: str | Path = ASSETS) -> list[str]:
    """Names of the shipped runs under ``root`` (see :func:`rlcd_lab.files.assets.shipped_runs`)."""
    return list(shipped_runs(root))


def checkpoint_choices(root: str | Path = ASSETS) -> list[str]:
    """Names of the shipped checkpoints under ``root``."""
    return list(shipped_checkpoints(root))


def local_runs(runs_root: str | Path = RUNS_DIR) -> list[Path]:
    """Run directories under ``runs_root`` (:func:`rlcd_lab.files.rundir.list_runs`), in
    sorted order, nested ones too (``runs/real/<task>/seed-17/reinforce``); none when it does
    not exist. A run's own subdirectories (checkpoints, eval dumps) are not searched.

    Besides the shipped artefacts under ``assets/`` the dashboard lists what was trained
    locally: every run directory under :data:`RUNS_DIR` (``runs/`` of the working directory,
    where ``rlcd-lab train`` writes by default; a directory whose ``config.json`` is a training
    config, :func:`rlcd_lab.files.rundir.is_run_dir`). Its ``final/`` checkpoint is offered in
    the Ask, Compare and Batch tabs, its eval dumps in the Routing tab and its ``log.jsonl`` in
    the Runs tab, under the run's path (e.g. ``runs/verify-s0/reinforce``).
    """
    return rundir.list_runs(runs_root, limit=MAX_LOCAL_RUNS)


def _run_name(run: Path, runs_root: str | Path) -> str:
    """A local run's dashboard name: its path as ``runs_root`` was given (``runs/x/y``)."""
    return (Path(runs_root) / run.relative_to(Path(runs_root).expanduser())).as_posix()


def local_run_choices(
    runs_root: str | Path = RUNS_DIR, required: str = rundir.TEST_DUMP
) -> list[str]:
    """Names (paths) of the local runs that hold ``required`` (``eval/test.jsonl`` for
    the Routing tab, ``log.jsonl`` for the Runs tab; or packed, ``.jsonl.xz``)."""
    runs = local_runs(runs_root)
    return [_run_name(r, runs_root) for r in runs if jsonl_path(r / required).exists()]


def trained_checkpoints(runs_root: str | Path = RUNS_DIR) -> list[str]:
    """The ``final/`` checkpoints of the local runs (a ``final/`` with ``rlcd.json``), as
    paths ``<run>/final``."""
    return [
        _run_name(r, runs_root) + "/" + rundir.FINAL
        for r in local_runs(runs_root)
        if rundir.has_final(r)
    ]


def checkpoint_dir(name: str, root: str | Path) -> Path:
    """The checkpoint directory a dashboard name refers to (see :func:`resolve_dir`): one
    holding ``config.json`` or an adapter's ``adapter_config.json``."""
    return resolve_dir(name, root, CHECKPOINT_FILES, "checkpoint")


TRUSTED_PROXIES_ENV = "RLCD_TRUSTED_PROXIES"
"""Environment variable naming the proxies whose ``X-Forwarded-For`` the dashboard
believes: comma-separated addresses or networks (uvicorn's ``forwarded_allow_ips``
syntax, ``*`` for any). Unset: none, so a client cannot pick its own address."""


def trusted_proxies() -> str:
    """The proxies whose forwarded headers give a client's address (the per-address queue
    share, ``ui.MAX_CLIENT_EVENTS``): ``$RLCD_TRUSTED_PROXIES``, else uvicorn's own
    ``$FORWARDED_ALLOW_IPS`` when set, else none (``""``). uvicorn's default, which gradio
    keeps, believes any request from 127.0.0.1, so every local client (or anything
    relayed through a local process) could send a new ``X-Forwarded-For`` per session and
    escape its share."""
    for name in (TRUSTED_PROXIES_ENV, "FORWARDED_ALLOW_IPS"):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return ""


@contextmanager
def forwarded_trust() -> Iterator[str]:
    """While inside, uvicorn's ``FORWARDED_ALLOW_IPS`` is :func:`trusted_proxies` (gradio
    builds its uvicorn config without one, and uvicorn then reads the variable); the
    previous value is put back after."""
    before = os.environ.get("FORWARDED_ALLOW_IPS")
    os.environ["FORWARDED_ALLOW_IPS"] = trusted = trusted_proxies()
    try:
        yield trusted
    finally:
        if before is None:
            os.environ.pop("FORWARDED_ALLOW_IPS", None)
        else:
            os.environ["FORWARDED_ALLOW_IPS"] = before


def env_checkpoint() -> str | None:
    """The checkpoint named by ``$RLCD_CHECKPOINT`` (stripped; None when unset or empty)."""
    return os.environ.get(CHECKPOINT_ENV, "").strip() or None


def local_checkpoints(smollm2_dir: str | Path = SMOLLM2_DEFAULT_DIR) -> list[str]:
    """Checkpoints offered besides the shipped ones: ``$RLCD_CHECKPOINT`` when set (listed
    even when it is not there, so the Ask tab says why it cannot be used), then the SmolLM2
    checkpoint when it has been converted (``rlcd-lab gguf smollm2``) at ``smollm2_dir``. Nothing
    is downloaded or converted here."""
    out = []
    env = env_checkpoint()
    if env:
        out.append(env)
    smollm2 = Path(smollm2_dir)
    full = smollm2.expanduser()
    if (full / "config.json").is_file() and (full / "rlcd.json").is_file():
        same = env is not None and Path(env).expanduser().resolve() == full.resolve()
        if not same:
            out.append(str(smollm2))
    return out


def _kind(leaf: str) -> int | None:
    """Position of a run's leaf name in the method registry's dashboard comparison
    (``methods.compared``; ``rft*`` counts as rft)."""
    for i, kind in enumerate(compared()):
        if leaf.startswith(kind) if kind == "rft" else leaf.endswith(kind):
            return i
    return None


def default_runs(names: Sequence[str]) -> list[str]:
    """The default comparison: the runs named ``*reinforce``, ``*grpo``, ``rft*`` and
    ``*sft`` that share a parent directory (one task and seed) with a ``*reinforce`` run,
    the first such parent in sorted order (the tiny ``verify`` task's first:
    :func:`rlcd_lab.files.assets.tiny_verify_first`), RLCD first; else the first four."""
    groups: dict[str, list[str]] = {}
    for name in names:
        parent, _, leaf = name.rpartition("/")
        groups.setdefault(parent, []).append(leaf)
    for parent in sorted(groups, key=lambda p: (*tiny_verify_first(p), p)):
        leaves = [leaf for leaf in groups[parent] if _kind(leaf) is not None]
        if any(_kind(leaf) == 0 for leaf in leaves):
            leaves.sort(key=lambda leaf: (_kind(leaf), leaf))
            return [f"{parent}/{leaf}" if parent else leaf for leaf in leaves]
    return list(names[:4])


def short_labels(names: Sequence[str]) -> dict[str, str]:
    """Legend names: the last two path components (``verify-s0/reinforce``), or the full
    name where two runs would share a label."""
    short = {n: "/".join(Path(n).parts[-2:]) for n in names}
    counts = {s: list(short.values()).count(s) for s in short.values()}
    return {n: (s if counts[s] == 1 else n) for n, s in short.items()}


_PLACES: ContextVar[tuple[Path, ...] | None] = ContextVar("rlcd_dashboard_places", default=None)


def allowed_places(
    root: str | Path, runs_root: str | Path = RUNS_DIR, extra: Sequence[str | Path] = ()
) -> tuple[Path, ...]:
    """The folders the launched dashboard may open (resolved): the assets ``root``,
    ``runs_root``, ``$RLCD_CHECKPOINT`` when set, the SmolLM2 checkpoint's folder
    (``rlcd-lab gguf smollm2``) and the operator's ``extra`` folders."""
    places = [Path(root), Path(runs_root), SMOLLM2_DEFAULT_DIR, *map(Path, extra)]
    env = env_checkpoint()
    if env:
        places.append(Path(env))
    return tuple(dict.fromkeys(p.expanduser().resolve() for p in places))


@contextmanager
def confined_to(places: Sequence[Path]) -> Iterator[None]:
    """Within this block (this thread or task), :func:`resolve_dir` opens only folders
    under ``places`` (resolved paths, :func:`allowed_places`).

    Confinement: a name typed into a checkpoint or run field is a path on the server. Inside
    :func:`confined_to` (the launched dashboard runs every callback there, see
    :func:`confine`), :func:`resolve_dir` opens only folders under the allowed places: the
    shipped assets, ``runs/``, ``$RLCD_CHECKPOINT``, the converted SmolLM2 checkpoint and the
    folders the operator allows (``rlcd-lab app --allow-checkpoint-dir``); any other name gets
    one message that does not say whether the path exists. Called directly (a notebook, the
    tests), the callbacks open any folder.
    """
    token = _PLACES.set(tuple(places))
    try:
        yield
    finally:
        _PLACES.reset(token)


def confine(fn: Callable[..., Any], places: Sequence[Path]) -> Callable[..., Any]:
    """``fn`` run inside :func:`confined_to` ``(places)``: the form the dashboard wires
    its callbacks in (the signature, seen through ``__wrapped__``, is ``fn``'s)."""

    @functools.wraps(fn)
    def confined(*args: Any, **kwargs: Any) -> Any:
        with confined_to(places):
            return fn(*args, **kwargs)

    return confined


def _inside(path: Path, places: Sequence[Path]) -> bool:
    """Whether ``path`` (symbolic links followed) lies in one of ``places``."""
    try:
        full = path.expanduser().resolve()
    except (OSError, RuntimeError, ValueError):
        return False
    return any(full == place or full.is_relative_to(place) for place in places)


def resolve_dir(name: str, root: str | Path, required: str | Sequence[str], what: str) -> Path:
    """The directory a dashboard name refers to: ``root/name`` (a shipped artefact) or the
    path ``name`` itself; it must hold ``required`` (one of them, when several; a JSONL
    file plain or packed, :func:`rlcd_lab.files.io.jsonl_path`). Raises
    ``gr.Error`` naming the places looked at. Inside :func:`confined_to`, only places
    under the allowed folders are looked at, and a name with none gets one message that
    says nothing about the server's files."""
    name = (name or "").strip()
    if not name:
        raise gr.Error(f"choose a {what}")
    files = [required] if isinstance(required, str) else list(required)
    candidates = [Path(root) / name]
    with suppress(RuntimeError):  # ~unknownuser
        candidates.append(Path(name).expanduser())
    places = _PLACES.get()
    if places is not None:
        candidates = [path for path in candidates if _inside(path, places)]
        if not candidates:
            raise gr.Error(
                f"{what} {name[:120]!r} is not available here: choose a shipped one, one "
                "trained under runs/, or one in a folder the operator allows"
            )
    for path in candidates:
        try:
            if any(jsonl_path(path / f).exists() for f in files):
                return path
        except (OSError, ValueError):
            continue
    wanted = " or ".join(files)
    where = " nor in ".join(str(path) for path in candidates) or "no place"
    raise gr.Error(f"{what} {name!r} not found: no {wanted} in {where}")
