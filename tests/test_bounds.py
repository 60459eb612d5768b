"""Bounded inputs and one-line errors (issue 62, items 8-10): caps on rationale counts,
seeds and model sizes, folders and split sizes checked before any work, control
characters escaped wherever user data is echoed, NaN refused where it has no meaning."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from rlcd_lab import metrics
from rlcd_lab.cli import MAX_SEED, main
from rlcd_lab.evaluate import MAX_RATIONALES
from rlcd_lab.files.io import printable
from rlcd_lab.tasks import fetch as fetch_mod
from rlcd_lab.tasks.items import MAX_ITEMS, TaskItem, write_items
from rlcd_lab.tasks.split import split_paths
from rlcd_lab.train.pretrain import MAX_PRETRAIN_PARAMETERS


def fails(capsys, argv: list[str], match: str) -> str:
    """``main(argv)`` exits with status 2 and one line ``rlcd-lab: error: ...`` matching
    ``match`` on stderr, all of it printable (no traceback, no raw control character)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("rlcd-lab: error: ") and all(c.isprintable() for c in err[:-1]), err
    assert re.search(match, err), err
    return err


def _items(n: int, prefix: str = "u") -> list[TaskItem]:
    return [TaskItem(f"{prefix}{i}", f"is {i} even?", ("Y", "N"), i % 2) for i in range(n)]


# ------------------------------------------------------------------ caps on counts and sizes
def test_eval_refuses_more_rationales_than_the_cap_before_loading(tmp_path, capsys):
    """--m past MAX_RATIONALES is refused before the checkpoint is opened (a missing one
    here: the cap is what the error names)."""
    args = ["eval", "--checkpoint", str(tmp_path / "none"), "--task", "verify", "--limit", "1"]
    fails(capsys, [*args, "--m", "100000"], f"--m must be at most {MAX_RATIONALES} .*100000")
    fails(capsys, [*args, "--m", str(MAX_RATIONALES)], "checkpoint directory .* does not exist")


def test_train_refuses_more_rationales_than_the_cap(tmp_path, capsys, tiny_base):
    out = tmp_path / "run"
    argv = ["train", "calibrate", "--init", str(tiny_base), "--out", str(out), "--task", "verify"]
    fails(capsys, [*argv, "--m", str(MAX_RATIONALES + 1)], f"--m .* at most {MAX_RATIONALES}")
    assert not out.exists()


@pytest.mark.parametrize("seed", ["-1", str(MAX_SEED + 1)])
@pytest.mark.parametrize(
    "argv",
    [
        ["pretrain", "--steps", "1"],
        ["eval", "--checkpoint", "nowhere", "--limit", "1"],
        ["data", "split", "nowhere.jsonl", "--dev", "1", "--test", "1"],
    ],
)
def test_a_seed_out_of_range_names_the_flag(tmp_path, capsys, argv, seed, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing is written: the seed is checked first
    fails(capsys, [*argv, "--seed", seed], rf"--seed must be an integer in \[0, {MAX_SEED}\]")
    assert not any(tmp_path.iterdir())


def test_pretrain_refuses_a_model_past_the_size_cap(tmp_path, capsys):
    """--hidden-size 100,000 at 4 layers: 100 x 1e5 + 4 x (10 x 1e10 + 2e5) + 1e5 =
    400,010,900,000 parameters (``tiny_parameters``); one line, nothing allocated."""
    out = tmp_path / "base"
    err = fails(
        capsys,
        ["pretrain", "--hidden-size", "100000", "--out", str(out)],
        r"--hidden-size 100000 with --layers 4 makes a model of 400,010,900,000 parameters",
    )
    assert f"at most {MAX_PRETRAIN_PARAMETERS:,}" in err and not out.exists()
    fails(capsys, ["pretrain", "--layers", "100000", "--out", str(out)], "--layers 100000")


def test_tiny_parameters_counts_the_built_model(tokenizer):
    from rlcd_lab.lm.model import tiny_model, tiny_parameters

    for h, layers, heads in [(16, 1, 2), (24, 3, 4), (96, 4, 4)]:
        model = tiny_model(tokenizer, hidden_size=h, layers=layers, heads=heads)
        built = sum(p.numel() for p in model.parameters())
        assert tiny_parameters(len(tokenizer), h, layers) == built


# ------------------------------------------------------------------ split sizes and folders
def test_data_fetch_refuses_impossible_sizes_before_downloading(tmp_path, capsys, monkeypatch):
    def no_download(*args, **kwargs):
        raise AssertionError("downloaded")

    monkeypatch.setattr(fetch_mod, "download", no_download)
    argv = ["data", "fetch", "boolq", "--cache-dir", str(tmp_path), "--force"]
    fails(capsys, [*argv, "--test", "10000000"], rf"--test 10000000 .* at most {MAX_ITEMS:,}")
    fails(capsys, [*argv, "--dev", "0"], "--dev must be at least 1, got 0")
    fails(capsys, [*argv, "--dev", str(MAX_ITEMS // 2), "--test", str(MAX_ITEMS // 2)], "fewer")
    assert not (tmp_path / "downloads").exists()


def test_an_empty_training_split_is_named(tmp_path, capsys, tiny_base):
    task = tmp_path / "x.jsonl"
    write_items(task, _items(10))
    paths = split_paths(task)
    write_items(paths["train"], [])
    write_items(paths["dev"], _items(3, "d"))
    write_items(paths["test"], _items(3, "t"))
    out = tmp_path / "run"
    argv = ["train", "calibrate", "--init", str(tiny_base), "--out", str(out), "--task", str(task)]
    err = fails(capsys, argv, "the train split is empty")
    assert str(paths["train"]) in err and not out.exists()


def test_allow_checkpoint_dir_must_be_an_existing_folder(tmp_path, capsys, monkeypatch):
    import rlcd_lab.cli as cli

    def no_port_check(*args, **kwargs):
        raise AssertionError("went on past the folders")

    monkeypatch.setattr(cli, "check_port_free", no_port_check)
    file = tmp_path / "notes.txt"
    file.write_text("x")
    app = ["app", "--allow-checkpoint-dir", str(tmp_path)]
    fails(capsys, [*app, str(tmp_path / "missing")], r"--allow-checkpoint-dir .*missing does not")
    fails(capsys, [*app, str(file)], r"--allow-checkpoint-dir .*notes.txt is a file")


# ------------------------------------------------------------------ echoed user data
def test_printable_escapes_every_control_character():
    evil = "a\x1b]0;pwned\x07b\x00c\x7f\x85\u2028\t\n"
    shown = printable(evil)
    assert shown == r"a\x1b]0;pwned\x07b\x00c\x7f\x85\u2028\t\n"
    assert all(c.isprintable() for c in shown)
    assert printable("Größe 2 + 2 = 4 \\ ok") == "Größe 2 + 2 = 4 \\ ok"  # unchanged


def test_a_task_line_with_escape_sequences_reaches_the_terminal_escaped(tmp_path, capsys):
    task = tmp_path / "x.jsonl"
    task.write_bytes(b'{"uid": "\x1b]0;pwned\x07\x00"}\n')
    fails(capsys, ["data", "split", str(task), "--dev", "1", "--test", "1"], r"\\x1b]0;pwned")


# ------------------------------------------------------------------ NaN where it has no meaning
def test_aurc_refuses_nan_confidences():
    correct = [1, 0, 1]
    assert metrics.aurc([0.9, 0.5, 0.7], correct) == pytest.approx((0 + 0 + 1 / 3) / 3)
    for fn in (metrics.aurc, metrics.coverage_at_risk, metrics.risk_coverage_curve):
        with pytest.raises(ValueError, match=r"confidence holds 1 NaN value\(s\) \(first at"):
            fn([0.9, math.nan, 0.7], correct)
    with pytest.raises(ValueError, match="index 0"):
        metrics.aurc(np.array([np.nan, np.nan, 0.1]), correct)


@pytest.mark.parametrize("points", ["nan", "inf", "-1", "0"])
def test_grader_points_must_be_finite_and_positive(tmp_path, points, capsys):
    from rlcd_lab.classroom import student
    from rlcd_lab.classroom.assignments import write_assignments

    argv = ["student", "--format", "nbgrader", "--out", str(tmp_path), "--points", points]
    with pytest.raises(SystemExit) as exit_:
        student.main(argv)
    assert (
        exit_.value.code == 2 and "--points must be a finite number > 0" in capsys.readouterr().err
    )
    with pytest.raises(ValueError, match="points must be a finite number > 0"):
        write_assignments("notebooks", tmp_path, "nbgrader", float(points))
    assert not any(tmp_path.iterdir())


def test_exercise_3_3_rejects_the_round_guess():
    """At rho = 10 the toy gives adam_signal_step(10) (about 0.097) and the closed form
    1/sqrt(101) = 0.0995; the guess 0.1 (= 1/rho) is 0.5% off the closed form and 2.8% off
    the toy, past the 0.3% tolerance of both. Three significant digits of either pass."""
    from rlcd_lab.classroom import exercises

    toy = exercises._adam_progress(10.0)
    closed = 1 / math.sqrt(101)
    assert abs(0.1 - closed) > exercises.SHARED_RTOL * closed
    assert exercises.check_per_coordinate_dilution(1, 0.1).ok is False
    assert exercises.check_per_coordinate_dilution(1.0, 0.1, rho=10.0).ok is False
    for good in (toy, closed, round(toy, 4), round(closed, 4)):
        assert exercises.check_per_coordinate_dilution(1, good).ok is True, good
    assert exercises.check_per_coordinate_dilution(1, 0.2, rho=5.0).ok is False  # 1/rho again


def test_a_fifo_as_a_runs_config_is_refused_without_waiting(tmp_path, capsys, tiny_base):
    """A run folder whose config.json is a FIFO: reading it fails at once (a writer is
    let in after 10 s only so that a reader that waits fails this test instead of hanging)."""
    import os
    import threading

    from rlcd_lab.files import rundir

    run = tmp_path / "run"
    run.mkdir()
    fifo = run / "config.json"
    os.mkfifo(fifo)

    def release():
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # nobody waits on it
            pass

    timer = threading.Timer(10, release)
    timer.start()
    try:
        with pytest.raises(ValueError, match=r"config.json: not a regular file \(a FIFO\)"):
            rundir.read_config(run)
        assert not rundir.is_run_dir(run)
        argv = ["train", "calibrate", "--init", str(tiny_base), "--out", str(run), "--resume"]
        fails(capsys, argv, "not a run directory")
    finally:
        timer.cancel()


def test_the_lm_eval_model_caps_rationales_before_loading(tmp_path):
    pytest.importorskip("lm_eval")
    from rlcd_lab.lm_eval_tasks.model import RLCDLM

    with pytest.raises(ValueError, match=f"m must be at most {MAX_RATIONALES}, got 100000"):
        RLCDLM(checkpoint=str(tmp_path / "none"), m=100_000)
