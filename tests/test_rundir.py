"""rlcd_lab.files.rundir: the run-directory format, standard library only."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

from rlcd_lab.files import rundir
from rlcd_lab.files.io import pack_jsonl


def test_import_is_stdlib_only():
    code = (
        "import sys, rlcd_lab.files.rundir; "
        "print(sorted(m for m in ('numpy', 'torch', 'tyro') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _run(path, steps=3):
    path.mkdir(parents=True)
    cfg = {"method": "calibrate", "init": "x", "out": str(path), "steps": steps}
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def test_names_and_packed_dumps(tmp_path):
    run = _run(tmp_path / "runs" / "a")
    assert rundir.config_file(run) == run / "config.json"
    assert rundir.eval_file(run, "test") == run / "eval" / "test.jsonl"
    assert rundir.final_dir(run) == run / "final" and rundir.done_file(run) == run / "done.json"
    assert rundir.step_dir(run, 4) == run / "checkpoints" / "step-4"
    assert rundir.read_config(run)["steps"] == 3 and rundir.read_config(tmp_path) == {}
    assert not rundir.has_eval(run) and rundir.evaluated_runs(tmp_path) == []
    (run / "eval").mkdir()
    for name in ("test", "test-m4", "test-m16", "test-mx"):
        (run / "eval" / f"{name}.jsonl").write_text('{"label": 0}\n')
    pack_jsonl(run / "eval" / "test.jsonl")  # shipped dumps are packed: still found
    assert rundir.has_eval(run, "test") and rundir.eval_path(run, "test").name == "test.jsonl.xz"
    assert [m for m, _ in rundir.mixture_dumps(run)] == [4, 16]  # numeric order, "mx" skipped
    assert rundir.mixture_name(16) == "test-m16"
    assert rundir.evaluated_runs(tmp_path) == [run]
    (run / "log.jsonl").write_text('{"step": 0}\n\n{"step": 1}\n')
    assert [r["step"] for r in rundir.read_log(run)] == [0, 1]
    assert rundir.read_log(run / "log.jsonl") == rundir.read_log(run)


def test_list_runs_skips_a_runs_own_folders_and_model_configs(tmp_path):
    a = _run(tmp_path / "x" / "a")
    b = _run(tmp_path / "y" / "seed-17" / "b")
    (a / "final").mkdir()
    (a / "final" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    _run(a / "eval" / "nested")  # inside a run: never searched
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "steps": 1}))
    assert rundir.list_runs(tmp_path) == [a, b]
    assert rundir.list_runs(tmp_path, limit=1) == [a]
    assert rundir.list_runs(tmp_path / "nope") == []
    assert rundir.is_run_dir(a) and not rundir.is_run_dir(model)


def test_step_dirs_are_the_complete_checkpoints(tmp_path):
    run = _run(tmp_path / "r")
    for step in (2, 10, 4):
        rundir.step_dir(run, step).mkdir(parents=True)
        rundir.RunDir.write_state(rundir.step_dir(run, step), step)
    rundir.step_dir(run, 12).mkdir()  # no trainer state: incomplete
    assert [s for s, _ in rundir.step_dirs(run)] == [2, 4, 10]


@dataclasses.dataclass(frozen=True)
class _Config:
    """A training config's shape: paths, a name that is not a path, numbers."""

    method: str = "calibrate"
    init: Path = Path("base")
    out: Path = Path("runs/a")
    task: str = "verify"
    steps: int = 3
    lr: float = 0.01


def test_a_moved_run_compares_equal_from_any_working_directory(tmp_path, monkeypatch):
    """config.json records each path setting relative to the run folder too (run_paths):
    a run moved together with what it names, opened from another working directory with
    absolute paths, has the same config; the mismatch message names old and new values
    and the options that keep the progress."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / rundir.CHECKSUMS).write_text('{"files": {"w": "00"}}')
    (tmp_path / "runs" / "a").mkdir(parents=True)
    cfg = _Config()
    paths = rundir.run_paths(cfg, cfg.out)
    assert paths == {"init": "../../base", "out": "."}  # "verify" names no file here
    sums = rundir.path_checksums(cfg)
    assert sums == {"init": hashlib.sha256(b'{"files": {"w": "00"}}').hexdigest()}
    record = rundir.config_dict(cfg) | {rundir.RUN_PATHS: paths}
    moved = tmp_path / "moved" / "deeper" / "a"
    moved.parent.mkdir(parents=True)
    (tmp_path / "runs" / "a").rename(moved)
    (tmp_path / "base").rename(tmp_path / "moved" / "base")  # moved with the run
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    new = _Config(init=tmp_path / "moved" / "base", out=moved)
    assert rundir.config_diff(record, new) == ["init", "out"]  # by their text alone
    assert rundir.config_diff(record, new, run=moved) == []
    del record[rundir.RUN_PATHS]  # a record from before run_paths: the init is not found
    assert rundir.config_diff(record, new, run=moved) == ["init"]
    # ... unless its content is recorded: then a copy anywhere is the same checkpoint
    copy = shutil.copytree(tmp_path / "moved" / "base", elsewhere / "copy")
    record[rundir.CONTENTS] = sums
    assert rundir.config_diff(record, dataclasses.replace(new, init=copy), run=moved) == []
    (copy / rundir.CHECKSUMS).write_text('{"files": {"w": "01"}}')  # other weights
    assert rundir.config_diff(record, dataclasses.replace(new, init=copy), run=moved) == ["init"]
    record[rundir.RUN_PATHS] = paths
    changed = dataclasses.replace(new, lr=0.02, task="facts")
    diff = rundir.config_diff(record, changed, run=moved)
    assert diff == ["lr", "task"]
    message = rundir.mismatch_message(moved, record, changed, diff)
    assert "\n" not in message and message.startswith(f"cannot resume {moved}: ")
    assert 'lr (recorded 0.01, given 0.02); task (recorded "verify", given "facts")' in message
    assert 'pass --lr 0.01 --task "verify"; --overwrite would start it over' in message
    # a path outside the working directory is not recorded (no machine folder spelled out)
    outside = _Config(init=tmp_path / "moved" / "base", out=elsewhere / "run")
    assert rundir.run_paths(outside, outside.out) == {"out": "."}
