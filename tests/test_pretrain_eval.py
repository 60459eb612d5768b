"""Pretraining loop and evaluation on a few steps of the tiny world."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rlcd_lab import metrics
from rlcd_lab.evaluate import run_eval
from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.summary import summarize
from rlcd_lab.tasks.items import TaskItem
from rlcd_lab.tasks.synthetic import Example, get_task
from rlcd_lab.train.pretrain import demonstrations, encode_examples, pretrain
from rlcd_lab.train.pretrain_config import PretrainConfig, resolved


def test_encode_examples_masks_the_prompt(tokenizer):
    exs = [
        Example("1+2+3=6?", "1+2=3;3+3=6;6 vs 6:same", "Y", False),
        Example("urn 1a1b0c?", "", "A", True),
    ]
    ids, mask, labels = encode_examples(tokenizer, exs)
    bodies = ["1+2=3;3+3=6;6 vs 6:same Answer: Y", " A"]  # direct: the marker is prompt
    for i, ex in enumerate(exs):
        text = tokenizer.decode(ids[i][mask[i].bool()])
        assert text == ex.prompt + "\n" + ("Answer:" if ex.direct else "") + bodies[i]
        assert tokenizer.decode(labels[i][labels[i] >= 0]) == bodies[i]  # loss on the completion
    assert mask[1, -1] == 0  # right padding


def test_task_defaults_are_the_shipped_settings_and_empty_rationales():
    cfg = resolved(PretrainConfig(task="facts"))
    assert (cfg.steps, cfg.batch_size, cfg.p_empty) == (3000, 64, 0.02)
    assert resolved(PretrainConfig(task="verify", steps=7)).steps == 7  # explicit wins
    task = get_task("facts")
    plain = PretrainConfig(task="facts", batch_size=400, p_empty=0.0)
    a = demonstrations(task, np.random.default_rng(1), plain)
    b = task.pretraining_examples(np.random.default_rng(1), 400, plain.p_direct)
    assert a == b  # p_empty = 0: the teacher's stream, untouched (rebuilds stay identical)
    c = demonstrations(task, np.random.default_rng(1), replace(plain, p_empty=0.25))
    assert [ex.prompt for ex in c] == [ex.prompt for ex in a]
    emptied = [x.rationale == "" and y.rationale != "" for x, y in zip(c, a, strict=True)]
    assert 0.15 < np.mean(emptied) / np.mean([not ex.direct for ex in a]) < 0.35


def test_pretrain_writes_a_measured_checkpoint(tmp_path):
    cfg = PretrainConfig(
        task="aleatoric",
        out=tmp_path / "base",
        steps=3,
        batch_size=8,
        hidden_size=16,
        layers=1,
        heads=2,
        eval_items=6,
        max_new_tokens=8,
        warmup=1,
    )
    path = pretrain(cfg)
    model, tok, meta = load_checkpoint(path)
    assert meta["task"] == "aleatoric" and meta["method"] == "pretrain" and meta["step"] == 3
    for mode in ("direct", "reason"):
        m = meta["metrics"]["dev"][mode]
        assert 0 <= m["accuracy"] <= 1 and m["T"] > 0
    assert meta["metrics"]["dev"]["direct"]["mean_length"] == 0
    assert meta["config"]["out"] == str(Path(tmp_path / "base"))


def test_run_eval_rows_and_summary(tokenizer, marker_lm):
    items = [TaskItem("a", "Q: 1?", ("Y", "N"), 0), TaskItem("b", "Q: 22?", ("Y", "N"), 0)]
    rows = run_eval(marker_lm, tokenizer, items, mode="reason", m=3, max_new_tokens=20)
    assert [r["uid"] for r in rows] == ["a", "b"]
    assert rows[0]["rationales"] == ["ab"] * 3 and rows[0]["forced"] == [False] * 3
    assert rows[0]["lengths"] == [10] * 3
    np.testing.assert_allclose(rows[0]["mixture"], np.mean(rows[0]["readouts"], 0), rtol=1e-6)
    assert rows[0]["probs"] == rows[0]["readouts"][0]
    # marker_lm says Y after "Q: 1?" and N after "Q: 22?": one right, one confidently wrong
    s = summarize(rows)
    assert s["accuracy"] == 0.5 and s["mean_length"] == 10 and s["forced_rate"] == 0
    probs = np.array([r["probs"] for r in rows])
    assert s["brier"] == pytest.approx(metrics.brier(probs, [0, 0]), rel=1e-5)
    direct = run_eval(marker_lm, tokenizer, items, mode="direct")
    assert direct[0]["rationales"] == [""] and direct[0]["lengths"] == [0]
    with pytest.raises(ValueError, match="mode must be"):
        run_eval(marker_lm, tokenizer, items, mode="think")


def test_aleatoric_summary_has_jsd(tokenizer, tiny_lm):
    items = get_task("aleatoric").split("dev")[:4]
    rows = run_eval(tiny_lm, tokenizer, items, mode="direct")
    s = summarize(rows, dev_rows=rows)
    p = np.array([r["probs"] for r in rows])
    q = np.array([r["q"] for r in rows])
    assert s["jsd"] == pytest.approx(metrics.mean_jsd(p, q), rel=1e-5)
    assert "T" in s and "ts_accuracy" in s
