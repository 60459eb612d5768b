"""The run-directory format: the one place that spells a run's file names.

Standard library and :mod:`rlcd_lab.files.io` only (no torch, no numpy), so results,
reports, the dashboard and reproduce read runs without loading the training stack. A run
folder holds ``config.json`` (:data:`CONFIG`), ``log.jsonl`` (:data:`LOG`),
``checkpoints/step-N/`` (:data:`CHECKPOINTS`), ``eval/<split>.jsonl`` (:data:`EVAL`, plain
or packed: :func:`eval_path`), ``final/`` (:data:`FINAL`) and ``done.json`` (:data:`DONE`);
a reproduction puts its runs under ``root/seed-<s>/<run>/`` (:func:`seed_dir`).
:class:`RunDir` opens a run for training (the lock, resume, overwrite); writing a
checkpoint needs torch and is ``rlcd_lab.train.common.save_step``'s.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import shutil
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlcd_lab.files.io import (
    FolderLock,
    atomic_write_jsonl,
    atomic_write_text,
    jsonl_files,
    jsonl_path,
    read_json_file,
    read_jsonl,
)

CONFIG = "config.json"  # the resolved training config (config_dict), its RUN_PATHS, CONTENTS
LOG = "log.jsonl"  # one row per step (read_log)
EVAL = "eval"  # eval/<split>.jsonl: one row per item (eval_file); test-m<M>: M rationales
CHECKPOINTS = "checkpoints"  # checkpoints/step-N/: complete once STATE_FILE is in it
FINAL = "final"  # the trained checkpoint (final_dir, has_final)
DONE = "done.json"  # reproduce's marker of a finished job
STATE_FILE = "trainer_state.json"  # {"step": N}
OPTIMIZER_FILE = "optimizer.safetensors"  # (+ optimizer.json)
META_FILE = "rlcd.json"
"""A checkpoint's own metadata (``rlcd_lab.lm.model``), e.g. ``final/rlcd.json``."""
CHECKSUMS = "checksums.json"
"""A checkpoint's sha256 of every file (written by ``rlcd_lab.lm.checkpoint.write_checksums``);
here, without torch, to name a checkpoint by its content."""
SUMMARY = "summary.json"
"""A reproduction's numbers (``rlcd_lab.reports.results.summarize_runs``), beside its seeds."""
TUNE = "tune"
"""``OUT/<task>/tune/``, beside the seeds: a reproduction's learning-rate tuning runs
(``lr-<value>/<task>/seed-<s>/<run>``) and ``choice.json`` (``rlcd_lab.reproduce.tune``)."""
TEST_DUMP = f"{EVAL}/test.jsonl"
"""A run's test dump, relative to the run folder (what makes a run show in the Routing tab)."""
MIXTURE_PREFIX = "test-m"
"""``eval/test-m<M>.jsonl``: the test items read with M rationales each."""
INTERNAL = frozenset({FINAL, CHECKPOINTS, EVAL})
"""A run's own subfolders: never searched for runs (:func:`list_runs`)."""


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be used as it is: unreadable or malformed
    ``config.json`` / ``rlcd.json``, corrupt or modified weights (checksum, safetensors
    header), tensors that do not fit the model config, non-finite weights, a trainer
    state that is not one. The message names the file and the problem (defined here,
    without torch)."""


# ------------------------------------------------------------------------------ paths
def config_file(run: str | Path) -> Path:
    """``run/config.json``."""
    return Path(run) / CONFIG


def log_file(run: str | Path) -> Path:
    """``run/log.jsonl`` (its plain name: write it, or read it with ``read_jsonl``)."""
    return Path(run) / LOG


def log_path(run: str | Path) -> Path:
    """The file holding the run's log rows: ``log.jsonl`` or, shipped, ``log.jsonl.xz``
    (``log_path(run).exists()``: whether the run has a log)."""
    return jsonl_path(log_file(run))


def eval_dir(run: str | Path) -> Path:
    """``run/eval``."""
    return Path(run) / EVAL


def eval_file(run: str | Path, name: str) -> Path:
    """``run/eval/<name>.jsonl`` by its plain name (``name``: ``dev``, ``test``,
    ``test-m4``): write it there; :func:`rlcd_lab.files.io.read_jsonl` reads it plain or packed."""
    return eval_dir(run) / f"{name}.jsonl"


def eval_path(run: str | Path, name: str) -> Path:
    """The file that holds the eval dump ``name``: plain, else packed (``.jsonl.xz``);
    ``eval_path(run, name).exists()``: whether the run has it."""
    return jsonl_path(eval_file(run, name))


def has_eval(run: str | Path, name: str = "test") -> bool:
    """Whether the run has the eval dump ``name`` (plain or packed)."""
    return eval_path(run, name).exists()


DIRECT = "test-direct"
"""The base model's test items answered directly (no rationale: the question, the marker,
the readout), beside its ``test`` dump read after a rationale: does reasoning help."""


def mixture_name(m: int) -> str:
    """The eval dump name of the test items read with ``m`` rationales: ``test-m<m>``."""
    return f"{MIXTURE_PREFIX}{m}"


def mixture_dumps(run: str | Path) -> list[tuple[int, Path]]:
    """``(M, plain file)`` of every ``eval/test-m<M>.jsonl`` dump (plain or packed),
    ascending in M; a name whose tail is not a number is skipped."""
    out = []
    for f in jsonl_files(eval_dir(run), f"{MIXTURE_PREFIX}*.jsonl"):
        tail = f.stem[len(MIXTURE_PREFIX) :]
        if tail.isdigit():
            out.append((int(tail), f))
    return sorted(out)


def eval_files(run: str | Path) -> list[Path]:
    """Every eval dump of the run by its plain name, sorted (``jsonl_path`` finds each)."""
    return jsonl_files(eval_dir(run))


def final_dir(run: str | Path) -> Path:
    """``run/final``: the trained checkpoint."""
    return Path(run) / FINAL


def has_final(run: str | Path) -> bool:
    """Whether ``run/final`` is a finished checkpoint (it holds ``rlcd.json``)."""
    return (final_dir(run) / META_FILE).is_file()


def done_file(run: str | Path) -> Path:
    """``run/done.json``: written by reproduce once the job is complete."""
    return Path(run) / DONE


def step_dir(run: str | Path, step: int) -> Path:
    """``run/checkpoints/step-<step>``."""
    return Path(run) / CHECKPOINTS / f"step-{step}"


def step_dirs(run: str | Path) -> list[tuple[int, Path]]:
    """``(step, folder)`` of every complete step checkpoint (one holding ``STATE_FILE``),
    ascending in step."""
    out = []
    for d in (Path(run) / CHECKPOINTS).glob("step-*"):
        m = re.fullmatch(r"step-(\d+)", d.name)
        if m and (d / STATE_FILE).exists():
            out.append((int(m.group(1)), d))
    return sorted(out)


def seed_dir(root: str | Path, seed: int) -> Path:
    """``root/seed-<seed>``: one seed's runs of a reproduction."""
    return Path(root) / f"seed-{seed}"


def reproduction_folders(root: str | Path) -> list[Path]:
    """Every run folder of the reproduction ``root`` (``OUT/<task>``): each seed's
    (``seed-<s>/<run>``) and the tuning runs (``tune/lr-<value>/<task>/seed-<s>/<run>``),
    sorted."""
    root = Path(root)
    return sorted([*root.glob("seed-*/*"), *root.glob(f"{TUNE}/lr-*/*/seed-*/*")])


# ---------------------------------------------------------------------------- reading
RENAMED_SETTINGS = {"temperature": "sampling_temperature"}
"""Training settings renamed since runs were recorded: ``{old: new}`` (read, never
rewritten: :func:`upgrade_config`)."""


def upgrade_config(cfg: dict) -> dict:
    """A recorded ``config.json`` dict with its settings under their current names
    (:data:`RENAMED_SETTINGS`; a current name already present wins). Returns a new dict in
    the same key order; the file is not touched."""
    if not isinstance(cfg, dict) or not any(old in cfg for old in RENAMED_SETTINGS):
        return cfg
    out: dict = {}
    for key, value in cfg.items():
        new = RENAMED_SETTINGS.get(key)
        if new is None:
            out[key] = value
        elif new not in cfg:
            out[new] = value
    return out


def read_config(run: str | Path) -> dict:
    """The run's ``config.json`` as a dict (settings under their current names,
    :func:`upgrade_config`); ``{}`` when the run has none."""
    path = config_file(run)
    return upgrade_config(read_json_file(path)) if path.exists() else {}


def read_log(run: str | Path) -> list[dict]:
    """The rows of a run's ``log.jsonl`` (``run`` is the run directory or the file; plain
    or packed). A partial last line (the run was killed while writing it) is ignored; any
    other unreadable line is a ``ValueError`` naming the file and the line
    (:func:`rlcd_lab.files.io.read_jsonl`)."""
    path = Path(run)
    return read_jsonl(log_file(path) if path.is_dir() else path, partial_last=True)


_RUN_KEYS = frozenset({"method", "init", "out", "steps"})


def is_run_dir(path: str | Path) -> bool:
    """Whether ``path`` is a run directory: its ``config.json`` is a training config (it
    records ``method``, ``init``, ``out``, ``steps``; a model's ``config.json`` does not)."""
    try:
        cfg = read_json_file(config_file(path))
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and _RUN_KEYS <= cfg.keys() and "model_type" not in cfg


def list_runs(root: str | Path, limit: int | None = None) -> list[Path]:
    """Run directories under ``root`` (:func:`is_run_dir`), in sorted order, nested ones
    too (``runs/real/<task>/seed-17/reinforce``), at most ``limit``; none when ``root``
    does not exist. A run's own subfolders and hidden folders are not searched."""
    root = Path(root).expanduser()
    if not root.is_dir():
        return []
    found: list[Path] = []
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in INTERNAL and not d.startswith("."))
        if CONFIG in files and is_run_dir(top):
            found.append(Path(top))
            dirs.clear()  # a run's subdirectories are its own
            if limit is not None and len(found) >= limit:
                break
    return found


def evaluated_runs(root: str | Path, pattern: str = "**") -> list[Path]:
    """Run folders under ``root`` matching ``pattern`` (a glob of the run folder, e.g.
    ``"*"`` for the runs right under it) that hold a test dump (plain or packed), sorted."""
    return [f.parent.parent for f in jsonl_files(root, f"{pattern}/{EVAL}/test.jsonl")]


# ---------------------------------------------------------------------------- configs
def portable_path(value: Any) -> Any:
    """An absolute path string as another machine can read it: relative to the working
    directory when under it (``assets/checkpoints/base-verify``), ``~/...`` when under the
    home directory (``~/.cache/rlcd_lab/data/x.jsonl``); anything else as it is."""
    if not isinstance(value, str) or not os.path.isabs(value):
        return value
    for root, prefix in ((Path.cwd(), ""), (Path.home(), "~/")):
        try:
            return prefix + Path(value).relative_to(root).as_posix()
        except ValueError:
            continue
    return value


def config_dict(cfg: Any) -> dict:
    """A frozen config dataclass as JSON-ready dict (paths as strings, made portable by
    :func:`portable_path`: a config names no directory of the machine that wrote it)."""
    raw = json.loads(json.dumps(dataclasses.asdict(cfg), default=str))
    return {k: portable_path(v) for k, v in raw.items()}


RUN_OPTIONS = ("resume", "overwrite", "verify")
"""Settings about opening the run, not about what it trains: never compared."""
RUN_PATHS = "run_paths"
"""The ``config.json`` key that records each path setting relative to the run folder
(:func:`run_paths`), beside the setting itself (relative to the working directory)."""
CONTENTS = "path_checksums"
"""The ``config.json`` key that records the content of each setting naming a checkpoint
(:func:`path_checksums`): the same checkpoint anywhere else is the same setting."""


def _resolved(path: str | Path) -> str:
    """``path`` (``~`` expanded, relative to the working directory) with every link and
    ``..`` resolved."""
    return os.path.realpath(os.path.expanduser(path))


def run_paths(cfg: Any, run: str | Path) -> dict[str, str]:
    """Each setting of the config dataclass ``cfg`` that names a path (a ``Path`` value, or
    a string naming an existing file or folder such as a task file), relative to the run
    folder ``run``: ``{"init": "../../assets/checkpoints/base-verify", "out": "."}``. Only
    paths that lie, like the run, under the working directory are recorded (a relative
    path to anywhere else would spell out the machine's folders); so a run folder moved or
    copied with what it names (a reproduction's tree, a repository) still finds them, from
    any working directory (:func:`config_diff`)."""
    cwd, base = Path.cwd(), _resolved(run)
    if not Path(base).is_relative_to(cwd):
        return {}
    out = {}
    for field in dataclasses.fields(cfg):
        value = getattr(cfg, field.name)
        if not isinstance(value, str | Path) or not str(value):
            continue
        if isinstance(value, str) and not os.path.exists(os.path.expanduser(value)):
            continue  # a name (a synthetic task, a method), not a path
        target = _resolved(value)
        if Path(target).is_relative_to(cwd):
            out[field.name] = Path(os.path.relpath(target, base)).as_posix()
    return out


def _checksum(path: str | Path) -> str | None:
    """The sha256 of ``path``'s ``checksums.json`` (which lists the sha256 of every file of
    a checkpoint: its content); None when ``path`` holds none."""
    file = Path(os.path.expanduser(path)) / CHECKSUMS
    try:
        return hashlib.sha256(file.read_bytes()).hexdigest() if file.is_file() else None
    except OSError:
        return None


def path_checksums(cfg: Any) -> dict[str, str]:
    """Each ``Path`` setting of the config dataclass ``cfg`` that names a checkpoint with a
    ``checksums.json`` (``init``, ``ref``), as the sha256 of that file: wherever that
    checkpoint is found later, it is the same (:func:`config_diff`)."""
    out = {}
    for field in dataclasses.fields(cfg):
        value = getattr(cfg, field.name)
        if isinstance(value, Path) and (digest := _checksum(value)) is not None:
            out[field.name] = digest
    return out


def _same_path(name: str, old: dict, new: Any, run: str | Path | None) -> bool:
    """Whether the recorded setting ``old[name]`` and the path ``new`` name the same file:
    as recorded (from the working directory), through the record's path from the run
    folder ``run`` (:func:`run_paths`) as the run folder is now, or a checkpoint with the
    recorded content (:func:`path_checksums`) wherever it is; ``out`` is the run folder."""
    if run is None or not isinstance(new, str | Path) or not str(new):
        return False
    recorded_sum = (old.get(CONTENTS) or {}).get(name)
    if recorded_sum is not None and recorded_sum == _checksum(new):
        return True
    target = _resolved(new)
    if name == "out":
        return target == _resolved(run)
    recorded = old.get(name)
    from_run = (old.get(RUN_PATHS) or {}).get(name)
    candidates = [recorded] if isinstance(recorded, str) and recorded else []
    if isinstance(from_run, str):
        candidates.append(str(Path(run) / from_run))
    return any(_resolved(c) == target for c in candidates)


def config_diff(
    old: dict, cfg: Any, ignore: tuple[str, ...] = RUN_OPTIONS, run: str | Path | None = None
) -> list[str]:
    """The settings in which a recorded ``config.json`` (``old``) differs from ``cfg``; a
    setting the record lacks (added to the code after it was written) counts as its
    default, and one the code no longer has is not compared, so runs recorded before stay
    resumable and reusable; a renamed one is compared under its new name
    (:func:`upgrade_config`). ``ignore``: settings never compared (default ``RUN_OPTIONS``).
    ``run``: the run folder the record is in, as it is now; then a path setting that is
    spelled otherwise but names the same file is the same (from the working directory, or
    from the run folder through the record's :data:`RUN_PATHS`), as is a checkpoint with
    the recorded content (:data:`CONTENTS`) wherever it is, and ``out`` is the run folder
    itself: a moved or copied run, or one opened from another working directory, compares
    equal."""
    old = upgrade_config(old)
    new, defaults = config_dict(cfg), config_dict(type(cfg)())
    return sorted(
        k
        for k in new
        if k not in ignore
        and old.get(k, defaults.get(k)) != new[k]
        and not _same_path(k, old, getattr(cfg, k), run)
    )


def _flag(name: str, value: Any) -> str:
    """The command-line option that sets ``name`` to ``value`` (``--lr 0.01``, ``--bf16``,
    ``--no-bf16``), the value as JSON (control characters escaped)."""
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else flag.replace("--", "--no-", 1)
    if value is None:
        return f"{flag} None"
    return f"{flag} {value if isinstance(value, int | float) else json.dumps(value)}"


def mismatch_message(run: str | Path, old: dict, cfg: Any, diff: list[str]) -> str:
    """One line on why the run in ``run`` (recorded config ``old``) cannot go on with
    ``cfg``: each differing setting with its recorded and given value (a recorded path as
    it is found from the run folder now, when it is), and the options that continue the
    run with its progress kept; ``--overwrite`` deletes the progress."""
    old = upgrade_config(old)
    defaults = config_dict(type(cfg)())
    given, wanted = config_dict(cfg), {}
    for name in diff:
        value = old.get(name, defaults.get(name))
        from_run = (old.get(RUN_PATHS) or {}).get(name)
        if isinstance(from_run, str) and os.path.exists(Path(run) / from_run):
            value = os.path.normpath(Path(run) / from_run)
        wanted[name] = value
    parts = [
        f"{name} (recorded {json.dumps(wanted[name])}, given {json.dumps(given[name])})"
        for name in diff
    ]
    flags = " ".join(_flag(name, wanted[name]) for name in diff)
    return (
        f"cannot resume {run}: its config differs in {'; '.join(parts)}; to continue it with "
        f"its progress, pass {flags}; --overwrite would start it over and delete its progress"
    )


# ---------------------------------------------------------------------------- RunDir
class RunDir:
    """``config.json``, ``log.jsonl``, ``checkpoints/step-N/`` and ``eval/`` of one run.

    Opening an existing run directory with ``resume`` resumes it: the config must match
    (except ``steps`` and ``RUN_OPTIONS``; paths as :func:`config_diff` compares them with
    the run folder where it is now, so a moved or copied run resumes; a mismatch is one
    :func:`mismatch_message`), the latest complete checkpoint gives
    ``start_step``, and log lines past it (written after that checkpoint by a run that
    was killed) are dropped. Without ``resume`` an existing run is an error
    (``FileExistsError``) unless ``overwrite``: the old run is then moved aside (to
    ``.<name>.replaced`` beside it), deleted by ``commit()`` once the new run has started,
    or put back by ``abandon()``. A path that exists and is neither a run directory nor
    empty is never written to or deleted (``FileExistsError``).

    Before anything else it takes the run folder's lock (``io.FolderLock`` on
    ``.<name>.lock`` beside it, so it also covers the move aside): while another process
    holds it, opening fails at once with ``io.FolderInUseError`` (an ``OSError``) naming
    the folder and the holder, whatever ``resume`` and ``overwrite`` say. ``close()``
    (after the run) and ``abandon()`` release it, as does the process's exit.

    Checkpoints are written by ``rlcd_lab.train.common.save_step`` (torch) into
    :meth:`checkpoint` and thinned by :meth:`prune`.
    """

    def __init__(self, path: Path, cfg, resume: bool, overwrite: bool = False):
        # ``..`` resolved by its text: "x/../run" with no folder x is still the run "run"
        self.path = Path(os.path.normpath(path))
        self.config = config_dict(cfg)
        self._fresh = False  # a new run: abandon removes what opening it wrote
        self._made_dir = False  # ... including the directory itself
        self._replaced: Path | None = None  # the old run, moved aside by overwrite
        cfg_file = config_file(self.path)
        if resume and overwrite:
            raise ValueError("--resume and --overwrite exclude each other; pass one")
        self._lock = FolderLock(self.path).acquire(
            "wait for that training to end, or choose another --out", what="run folder"
        )
        self._release = weakref.finalize(self, self._lock.release)  # also if never closed
        _OPEN_RUNS[self._lock.file] = self
        try:
            self._open(cfg, resume, overwrite, cfg_file)
        except BaseException:
            self.close()
            raise

    def _open(self, cfg, resume: bool, overwrite: bool, cfg_file: Path) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise FileExistsError(f"run directory {self.path} exists and is not a directory")
        occupied = self.path.is_dir() and any(self.path.iterdir())
        if occupied and not is_run_dir(self.path):
            raise FileExistsError(
                f"{self.path} exists and is not a run directory (no training config.json); "
                "choose another --out"
            )
        if occupied and not resume:
            if not overwrite:
                raise FileExistsError(
                    f"{self.path} already holds a run; pass --resume to continue it or "
                    "--overwrite to replace it"
                )
            self._move_aside()
            occupied = False
        if occupied:
            old = read_json_file(cfg_file)
            diff = config_diff(old, cfg, ignore=("steps", *RUN_OPTIONS), run=self.path)
            if diff:
                raise ValueError(mismatch_message(self.path, old, cfg, diff))
        self._fresh, self._made_dir = not occupied, not self.path.exists()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            paths = {RUN_PATHS: run_paths(cfg, self.path), CONTENTS: path_checksums(cfg)}
            atomic_write_text(cfg_file, json.dumps(self.config | paths, indent=2))
            self.latest = self._latest()
            self.start_step = 0 if self.latest is None else self._step_of(self.latest)
            self._truncate_log()
        except BaseException:
            self.abandon()
            raise

    def close(self) -> None:
        """Release the run folder's lock (the run has ended; idempotent)."""
        self._release()
        if _OPEN_RUNS.get(self._lock.file) is self:
            del _OPEN_RUNS[self._lock.file]

    def _move_aside(self) -> None:
        if self.path.is_symlink():
            raise FileExistsError(f"{self.path} is a symbolic link; --overwrite replaces folders")
        aside = self.path.with_name(f".{self.path.name}.replaced")
        if aside.exists():  # left by an overwrite that was killed: it was to be deleted
            shutil.rmtree(aside)
        os.replace(self.path, aside)
        self._replaced = aside

    def commit(self) -> None:
        """The new run has started: delete the run that ``overwrite`` moved aside."""
        if self._replaced is not None:
            shutil.rmtree(self._replaced, ignore_errors=True)
            self._replaced = None
        self._fresh = False

    def abandon(self) -> None:
        """The run could not start: remove what opening it created, put back a run that
        ``overwrite`` moved aside (a resumed run keeps its files) and release the lock."""
        try:
            if self._fresh and self._made_dir:
                shutil.rmtree(self.path, ignore_errors=True)
            elif self._fresh:  # an empty folder given as --out: empty it again
                for sub in self.path.iterdir():
                    shutil.rmtree(sub) if sub.is_dir() else sub.unlink()
            if self._replaced is not None:
                os.replace(self._replaced, self.path)
                self._replaced = None
            self._fresh = False
        finally:
            self.close()

    @staticmethod
    def _step_of(ckpt: Path) -> int:
        file = ckpt / STATE_FILE
        try:
            step = read_json_file(file)["step"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise CheckpointError(f"{file}: not a trainer state ({err!r})") from err
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise CheckpointError(f"{file}: 'step' must be an integer >= 0, got {step!r}")
        return step

    def _latest(self) -> Path | None:
        steps = step_dirs(self.path)
        return steps[-1][1] if steps else None

    def _truncate_log(self) -> None:
        log = log_file(self.path)
        if not log.exists():
            return
        keep = []
        for n, row in enumerate(read_log(log), 1):  # a partial last line is dropped
            step = row.get("step")
            if not isinstance(step, int) or isinstance(step, bool):
                raise ValueError(f"{log}: row {n} needs an integer 'step', got {step!r}")
            if step < self.start_step:
                keep.append(row)
        atomic_write_jsonl(log, keep)

    def log(self, row: dict) -> None:
        """Append one JSON line (``row`` must hold ``step``)."""
        with open(log_file(self.path), "a", encoding="utf-8") as f:
            f.write(json.dumps(row, default=float) + "\n")

    def checkpoint(self, step: int) -> Path:
        """Where the checkpoint of ``step`` goes: ``checkpoints/step-<step>``."""
        return step_dir(self.path, step)

    @staticmethod
    def write_state(folder: Path, step: int) -> None:
        """Write ``STATE_FILE`` (``{"step": step}``) into a checkpoint being written: the
        last file, it marks the checkpoint complete."""
        (Path(folder) / STATE_FILE).write_text(json.dumps({"step": step}))

    def prune(self, keep: int = 2) -> None:
        """Delete all but the ``keep`` newest complete step checkpoints."""
        for _, d in step_dirs(self.path)[:-keep]:
            shutil.rmtree(d, ignore_errors=True)

    def write_eval(self, name: str, rows: list[dict]) -> Path:
        """Eval dump ``eval/<name>.jsonl`` (one row per item), atomically."""
        return atomic_write_jsonl(eval_file(self.path, name), rows)


_OPEN_RUNS: weakref.WeakValueDictionary[Path, RunDir] = weakref.WeakValueDictionary()
"""The runs this process has open (holding their folder's lock), by lock file."""


def releases_run(loop: Callable[[Any], Path]) -> Callable[[Any], Path]:
    """Decorate a training loop ``train(cfg)``: however it ends (returned, raised,
    interrupted), the lock on ``cfg.out`` that its run took in this process is released,
    so the same process can resume or replace the run right away."""

    @functools.wraps(loop)
    def run(cfg: Any) -> Path:
        key = FolderLock(cfg.out).file
        before = _OPEN_RUNS.get(key)  # a run open before the call is not this loop's
        try:
            return loop(cfg)
        finally:
            opened = _OPEN_RUNS.get(key)
            if opened is not None and opened is not before:
                opened.close()

    return run
