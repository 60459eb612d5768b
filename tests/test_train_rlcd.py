"""The RLCD training loop: logs, checkpoints, final eval, readers, and SIGKILL-safe resume."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlcd_lab.files import rundir
from rlcd_lab.files.rundir import RunDir, config_diff, read_log
from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.methods.configs import preset
from rlcd_lab.metrics import fit_temperature
from rlcd_lab.tasks.synthetic import get_task
from rlcd_lab.train.common import QuestionStream
from rlcd_lab.train.rlcd import train

TINY = dict(
    task="aleatoric",
    batch_size=2,
    m=3,
    max_new_tokens=5,
    eval_every=2,
    eval_items=4,
    test_items=4,
    grad_terms_every=1,
    save_every=2,
    device="cpu",
    lr=1e-2,
)


def test_calibrate_logs_saves_and_evaluates(tmp_path, tiny_base):
    run = train(preset("calibrate", init=tiny_base, out=tmp_path / "run", steps=4, **TINY))
    log = read_log(run)
    assert [r["step"] for r in log] == [0, 1, 2, 3]
    for key in (
        "loss",
        "grad_pathwise",
        "grad_score_function",
        "rationale_length",
        "forced_rate",
        "readout_variance",
        "reward",
    ):
        assert all(isinstance(r[key], float) for r in log), key
    assert "dev_brier" in log[1] and "dev_brier" not in log[0]
    # a random model never writes the marker: every rationale is forced (at 5 tokens or EOS)
    assert all(r["forced_rate"] == 1.0 and 0 < r["rationale_length"] <= 5 for r in log)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-2", "step-4"]
    model, _, meta = load_checkpoint(run / "final")
    assert meta["method"] == "calibrate" and meta["step"] == 4
    assert meta["T"] == meta["metrics"]["dev"]["T"]
    # the final evaluation honours --eval-items: T is fitted on the first 4 dev items only
    dev_rows = [json.loads(line) for line in (run / "eval" / "dev.jsonl").read_text().splitlines()]
    dev_items = get_task("aleatoric").split("dev")[: TINY["eval_items"]]
    assert [r["uid"] for r in dev_rows] == [it.uid for it in dev_items]
    refit = fit_temperature([r["logits"] for r in dev_rows], [r["label"] for r in dev_rows])
    assert meta["T"] == refit
    test_rows = [
        json.loads(line) for line in (run / "eval" / "test.jsonl").read_text().splitlines()
    ]
    assert len(test_rows) == 4 and set(test_rows[0]) >= {
        "uid",
        "label",
        "readouts",
        "rationales",
        "mixture",
        "probs",
        "logits",
    }
    assert json.loads((run / "config.json").read_text())["sf_weight"] == 0.0
    # the weights moved
    before, _, _ = load_checkpoint(tiny_base)
    assert any(
        not torch.equal(a, b) for a, b in zip(model.parameters(), before.parameters(), strict=True)
    )


@pytest.mark.parametrize("rule", ["brier", "log", "spherical"])
def test_calibrate_trains_with_every_scoring_rule(tmp_path, tiny_base, rule):
    """Stage 1 is pathwise only, so each step's loss is minus its mean reward, the rule's
    score of the readouts: a spherical score ``u_Y / ||u||`` lies in [0, 1], a log score
    at or below 0, a Brier score in [-1, 1]."""
    run = train(preset("calibrate", init=tiny_base, out=tmp_path / rule, steps=2, rule=rule,
                       **TINY))  # fmt: skip
    log = read_log(run)
    assert all(r["loss"] == pytest.approx(-r["reward"], abs=1e-6) for r in log)
    low, high = {"brier": (-1, 1), "log": (-float("inf"), 0), "spherical": (0, 1)}[rule]
    assert all(low <= r["reward"] <= high for r in log)
    assert json.loads((run / "config.json").read_text())["rule"] == rule


def test_reinforce_kl_is_zero_at_the_anchor_and_anchor_only_trains_the_readout(tmp_path, tiny_base):
    run = train(preset("reinforce", init=tiny_base, out=tmp_path / "r", steps=1, **TINY))
    first = read_log(run)[0]
    assert first["kl"] == pytest.approx(0.0, abs=1e-5)  # step 0: the model is its own anchor
    assert first["grad_score_function"] > 1e-3  # the outcome reward drives it
    run = train(
        preset(
            "reinforce", init=tiny_base, out=tmp_path / "n", steps=2, outcome_reward=False, **TINY
        )
    )
    log = read_log(run)
    # anchor-only: the readout still gets the pathwise gradient of the proper score ...
    assert log[0]["grad_pathwise"] == pytest.approx(first["grad_pathwise"], rel=1e-6)
    # ... but the score-function term carries only the KL reward, 0 at the anchor
    assert log[0]["grad_score_function"] < 1e-6 * first["grad_score_function"]
    assert log[0]["reward"] == pytest.approx(first["reward"], abs=1e-6)  # same stream


def test_a_record_without_a_newer_setting_counts_it_as_default(tmp_path, tiny_base):
    cfg = preset("calibrate", init=tiny_base, out=tmp_path / "run", steps=2, **TINY)
    train(cfg)
    record = json.loads((cfg.out / "config.json").read_text())
    assert config_diff(record, cfg) == []
    del record["bf16"]  # written before the setting existed
    assert config_diff(record, cfg) == []
    assert config_diff(record, replace(cfg, bf16=True)) == ["bf16"]
    record["reader"] = "self"  # a setting the code no longer has is not compared
    assert config_diff(record, cfg) == []
    (cfg.out / "config.json").write_text(json.dumps(record))
    train(replace(cfg, steps=3, resume=True))  # resumes instead of refusing
    assert [r["step"] for r in read_log(cfg.out)] == [0, 1, 2]


def test_stage_two_continues_the_question_stream_where_stage_one_ended(tmp_path, tiny_base):
    items = get_task("aleatoric").split("train")
    whole, later = QuestionStream(items, 2, seed=5), QuestionStream(items, 2, seed=5, start=3)
    for step in range(4):  # questions, outcomes and the seeds' step: the stream's step 3 + s
        a, b = whole.batch(3 + step), later.batch(step)
        assert [i.uid for i in a.items] == [i.uid for i in b.items]
        assert torch.equal(a.y, b.y) and a.step == b.step == 3 + step
    kw = dict(TINY, eval_every=0, test_items=0, grad_terms_every=0)
    stage1 = train(preset("calibrate", init=tiny_base, out=tmp_path / "s1", steps=3, **kw))
    assert load_checkpoint(stage1 / "final")[2]["stream_end"] == 3
    stage2 = train(preset("reinforce", init=stage1 / "final", out=tmp_path / "s2", steps=2, **kw))
    meta = load_checkpoint(stage2 / "final")[2]
    assert (meta["stream_start"], meta["stream_end"]) == (3, 5)
    # the same run told to start at 0 replays stage 1's questions, hence other rewards
    again = train(
        preset(
            "reinforce", init=stage1 / "final", out=tmp_path / "s0", steps=2, stream_start=0, **kw
        )
    )
    assert load_checkpoint(again / "final")[2]["stream_start"] == 0
    assert read_log(again)[0]["reward"] != read_log(stage2)[0]["reward"]
    # a base model was not trained on a stream: its first run starts at 0
    assert load_checkpoint(stage1 / "final")[2]["stream_start"] == 0


def test_existing_run_needs_resume_and_same_config(tmp_path, tiny_base):
    cfg = preset("calibrate", init=tiny_base, out=tmp_path / "run", steps=2, **TINY)
    train(cfg)
    with pytest.raises(FileExistsError, match="--resume"):
        train(cfg)
    with pytest.raises(ValueError, match=r"config differs in lr \(recorded 0.01, given 0.5\)"):
        train(
            preset(
                "calibrate",
                init=tiny_base,
                out=tmp_path / "run",
                steps=2,
                resume=True,
                **(TINY | {"lr": 0.5}),
            )
        )


def test_a_resumed_run_counts_its_progress_bar_from_where_it_stopped(tmp_path, tiny_base, capsys):
    kw = dict(TINY, eval_every=0, test_items=0, grad_terms_every=0)
    train(preset("calibrate", init=tiny_base, out=tmp_path / "run", steps=2, **kw))
    capsys.readouterr()
    train(preset("calibrate", init=tiny_base, out=tmp_path / "run", steps=4, resume=True, **kw))
    bar = capsys.readouterr().err
    shown = re.findall(r"calibrate: +\d+%\|[^|]*\| (\d+)/4 \[", bar)  # each redraw: "| n/4 ["
    assert shown and shown[0] == "2" and shown[-1] == "4" and not {"0", "1"} & set(shown), bar


def test_question_stream_is_a_function_of_seed_and_step():
    items = get_task("aleatoric").split("train")[:10]
    a, b = QuestionStream(items, 4, seed=3), QuestionStream(items, 4, seed=3)
    assert [i.uid for i in a.batch(7).items] == [i.uid for i in b.batch(7).items]
    assert torch.equal(a.batch(7).y, b.batch(7).y)
    # one epoch (steps 0..4 cover 20 positions = 2 epochs) visits every item twice
    uids = [i.uid for s in range(5) for i in a.batch(s).items]
    assert sorted(uids) == sorted([i.uid for i in items] * 2)
    # outcomes are drawn from q, not copied from the label
    many = QuestionStream(items[:1] * 1, 1, seed=0)
    ys = torch.stack([many.batch(s).y[0] for s in range(400)])
    q = torch.tensor(items[0].q)
    freq = torch.bincount(ys, minlength=3).float() / 400
    assert (freq - q).abs().max() < 0.08


def test_sigkill_then_resume_is_bit_identical(tmp_path, tiny_base):
    steps = 40  # long enough (about 0.5 s) that the poll below sees a checkpoint mid-run
    kw = dict(TINY, steps=steps, eval_every=0, test_items=0, grad_terms_every=0, save_every=2)
    ref = train(preset("calibrate", init=tiny_base, out=tmp_path / "ref", **kw))
    killed = tmp_path / "killed"
    code = (  # the parent's thread count: the same sums in the same order, bit for bit
        f"import torch; torch.set_num_threads({torch.get_num_threads()}); "
        "from pathlib import Path; from rlcd_lab.methods.configs import preset; "
        "from rlcd_lab.train.rlcd import train; "
        f"train(preset('calibrate', init=Path({str(tiny_base)!r}), "
        f"out=Path({str(killed)!r}), **{kw!r}))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )

    def saved() -> list[int]:  # complete step checkpoints (older ones are pruned)
        done = (killed / "checkpoints").glob("step-*/trainer_state.json")
        return [int(p.parent.name.removeprefix("step-")) for p in done]

    deadline = time.time() + 120
    while not any(s >= 4 for s in saved()):
        assert proc.poll() is None and time.time() < deadline, (
            "the run ended before it could be killed"
        )
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "final").exists()
    start = RunDir(
        killed, preset("calibrate", init=tiny_base, out=killed, resume=True, **kw), resume=True
    ).start_step
    assert 4 <= start < steps
    train(preset("calibrate", init=tiny_base, out=killed, resume=True, **kw))
    a = load_file(str(ref / "final" / "model.safetensors"))
    b = load_file(str(killed / "final" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    drop = ("time_sample", "time_step")
    strip = lambda r: {k: v for k, v in r.items() if k not in drop}  # noqa: E731
    assert [strip(r) for r in read_log(killed)] == [strip(r) for r in read_log(ref)]


def test_lora_trains_only_the_adapter_and_resumes_identically(tmp_path, tiny_base):
    kw = dict(TINY, eval_every=0, test_items=0, grad_terms_every=2, save_every=2, lora_r=2)
    straight = train(preset("calibrate", init=tiny_base, out=tmp_path / "a", steps=4, **kw))
    assert (straight / "final" / "adapter_model.safetensors").exists()
    assert not (straight / "final" / "model.safetensors").exists()
    model, _, _ = load_checkpoint(straight / "final")
    frozen = load_file(str(tiny_base / "model.safetensors"))
    inside = {
        k.replace("base_model.model.", "").replace(".base_layer", ""): v
        for k, v in model.state_dict().items()
        if "lora_" not in k
    }
    assert all(torch.equal(inside[k], v) for k, v in frozen.items() if k in inside)  # base frozen
    assert sum(k in inside for k in frozen) >= len(frozen) - 1  # (lm_head is tied)
    lora = load_file(str(straight / "final" / "adapter_model.safetensors"))
    assert any(
        k.endswith("lora_B.weight") and v.abs().max() > 0 for k, v in lora.items()
    )  # trained
    # stop after 2 steps, resume to 4: the same adapter as the straight run
    train(preset("calibrate", init=tiny_base, out=tmp_path / "b", steps=2, **kw))
    resumed = train(
        preset("calibrate", init=tiny_base, out=tmp_path / "b", steps=4, resume=True, **kw)
    )
    a = load_file(str(straight / "final" / "adapter_model.safetensors"))
    b = load_file(str(resumed / "final" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (dict(m=1), r"must be >= 2 for calibrate: its leave-one-out baseline"),
        (dict(m=2, lam=0.5), r"must be >= 3 for calibrate: the mixture estimate"),
        (dict(lam=1.5), r"--lam must be in \[0, 1\], got 1.5"),
        (dict(sf_weight=-1.0), "--sf-weight must be finite and >= 0"),
    ],
)
def test_settings_that_fail_at_the_first_step_are_refused_before_the_run(
    tmp_path, tiny_base, overrides, match
):
    """They used to pass the checks, open the run folder and fail in the first step,
    leaving a run behind that refused the corrected command (a config checks its own
    numbers when built, the method's needs before the run)."""
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=match):
        train(preset("calibrate", init=tiny_base, out=out, steps=2, **(TINY | overrides)))
    assert not out.exists()


def test_a_record_with_the_old_temperature_key_resumes(tmp_path, tiny_base):
    """config.json files written before the rename hold the sampling temperature under
    ``"temperature"``: read (never rewritten) as ``sampling_temperature``."""
    cfg = preset("calibrate", init=tiny_base, out=tmp_path / "run", steps=2, **TINY)
    train(cfg)
    record = json.loads((cfg.out / "config.json").read_text())
    old = {("temperature" if k == "sampling_temperature" else k): v for k, v in record.items()}
    assert "sampling_temperature" not in old and old["temperature"] == 1.0
    assert config_diff(old, cfg) == []  # compares equal to the new field
    assert config_diff(old, replace(cfg, sampling_temperature=2.0)) == ["sampling_temperature"]
    assert config_diff({**old, "temperature": 2.0}, cfg) == ["sampling_temperature"]
    (cfg.out / "config.json").write_text(json.dumps(old))
    read = rundir.read_config(cfg.out)  # under the new name, in the same place
    assert read == record and list(read) == list(record)
    assert json.loads((cfg.out / "config.json").read_text()) == old  # the file untouched
    train(replace(cfg, steps=3, resume=True))  # resumes instead of refusing
    assert [r["step"] for r in read_log(cfg.out)] == [0, 1, 2]


def test_a_moved_run_resumes_from_its_checkpoint_from_another_working_directory(
    tmp_path, tiny_base, monkeypatch
):
    """A run trained from relative paths, moved (under the same tree as its init) and
    resumed from another working directory with absolute paths, goes on from its step-2
    checkpoint: the two logged steps are kept as they were, one more step is trained. A
    copy elsewhere with a copy of its init (recognised by its checksums.json) goes on too."""
    monkeypatch.chdir(tmp_path)
    kw = dict(TINY, eval_every=0, test_items=0, grad_terms_every=0, save_every=2)
    cfg = preset("calibrate", init=tiny_base.relative_to(tmp_path), out=Path("runs/a"),
                 steps=2, **kw)  # fmt: skip
    train(cfg)
    before = read_log(tmp_path / "runs" / "a")
    moved = tmp_path / "moved" / "a"
    moved.parent.mkdir()
    (tmp_path / "runs" / "a").rename(moved)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    again = replace(cfg, init=tiny_base, out=moved, steps=3, resume=True)
    train(again)
    log = read_log(moved)
    assert [r["step"] for r in log] == [0, 1, 2] and log[:2] == before  # continued at 2
    assert load_checkpoint(moved / "final")[2]["step"] == 3
    # a copy out of that tree, with a copy of its init (the same content), goes on too
    copy = shutil.copytree(moved, tmp_path / "elsewhere" / "copy")
    shutil.copytree(tiny_base, tmp_path / "elsewhere" / "base-copy")
    train(replace(again, init=Path("base-copy"), out=Path("copy"), steps=4))
    assert [r["step"] for r in read_log(copy)] == [0, 1, 2, 3] and read_log(copy)[:3] == log
    with pytest.raises(ValueError, match=r"differs in lr \(recorded 0.01, given 0.02\); .* "
                       r"pass --lr 0.01; --overwrite would start it over"):  # fmt: skip
        train(replace(again, steps=4, lr=0.02))
    assert rundir.step_dirs(moved)[-1][0] == 3  # the progress is kept
