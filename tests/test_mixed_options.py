"""Questions with their own number of options (2..K, as 17% of MMLU-Pro): every metric is
computed per item over its own options, and a mixed 4-to-10-option task trains and
evaluates end to end."""

from __future__ import annotations

import numpy as np
import pytest

from rlcd_lab import metrics
from rlcd_lab.files.io import read_jsonl
from rlcd_lab.files.rundir import read_log
from rlcd_lab.methods.configs import GRPOConfig, preset
from rlcd_lab.summary import summarize
from rlcd_lab.tasks.items import TaskItem, write_items
from rlcd_lab.train import grpo
from rlcd_lab.train.rlcd import train as train_rlcd

LETTERS = "ABCDEFGHIJ"


def per_item_reference(logits: list[list[float]], labels: list[int], T: float = 1.0) -> dict:
    """Brier, NLL, accuracy, ECE and AURC computed item by item over each item's own
    options (no padding anywhere)."""
    probs = [np.exp(np.asarray(z) / T - np.max(np.asarray(z) / T)) for z in logits]
    probs = [p / p.sum() for p in probs]
    brier = np.mean(
        [((p - np.eye(len(p))[y]) ** 2).sum() for p, y in zip(probs, labels, strict=True)]
    )
    nll = np.mean([-np.log(p[y]) for p, y in zip(probs, labels, strict=True)])
    conf = np.array([p.max() for p in probs])
    correct = np.array([int(p.argmax()) == y for p, y in zip(probs, labels, strict=True)])
    return {
        "brier": brier,
        "nll": nll,
        "accuracy": correct.mean(),
        "ece": metrics.ece_from_confidence(conf, correct),
        "aurc": metrics.aurc(conf, correct),
    }


def test_ragged_metrics_equal_per_item_metrics():
    rng = np.random.default_rng(0)
    ks = [2, 4, 10, 7, 3, 10, 5, 4] * 5
    logits = [list(rng.normal(size=k) * 3) for k in ks]
    # labels drawn from softmax(z / 2): an overconfident model, fitted T inside (1, 50)
    labels = [int(rng.choice(len(z), p=metrics.softmax(np.asarray(z) / 2))) for z in logits]
    padded = metrics.pad_ragged(logits, -np.inf)
    assert padded.shape == (40, 10) and np.isneginf(padded[0, 2:]).all()
    row = metrics.evaluate(padded, labels, dev=(padded, labels), is_logits=True)
    assert 1.2 < row["T"] < 10
    ref = per_item_reference(logits, labels)
    for key, value in ref.items():
        assert row[key] == pytest.approx(value, rel=1e-12, abs=1e-12)
    # temperature scaling keeps absent options at probability 0
    scaled = per_item_reference(logits, labels, T=row["T"])
    for key, value in scaled.items():
        assert row[f"ts_{key}"] == pytest.approx(value, rel=1e-9, abs=1e-12)
    # the fitted T minimises the per-item NLL: nudging it either way is worse
    for t in (row["T"] * 0.98, row["T"] * 1.02):
        assert per_item_reference(logits, labels, T=t)["nll"] > scaled["nll"]
    # probabilities: an exact 0 (absent option) stays 0 under temperature scaling
    probs = metrics.pad_ragged([list(metrics.softmax(z)) for z in logits], 0.0)
    from_probs = metrics.evaluate(probs, labels, dev=(probs, labels))
    assert from_probs["ts_brier"] == pytest.approx(row["ts_brier"], rel=1e-6)


def mixed_task(path, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    items = []
    for i in range(n):
        k = int(rng.integers(4, 11))
        options = tuple(LETTERS[:k])
        text = " ".join(f"{o}) {int(rng.integers(100))}" for o in options)
        items.append(TaskItem(f"q{i}", f"Pick one: {text}", options, int(rng.integers(k))))
    write_items(path, items)


def test_a_mixed_4_to_10_option_task_trains_and_evaluates(tmp_path, tiny_base):
    for split, n in (("train", 12), ("dev", 6), ("test", 6)):
        mixed_task(tmp_path / f"mixed.{split}.jsonl", n, seed=len(split))
    task = str(tmp_path / "mixed.jsonl")
    kw = dict(
        init=tiny_base, task=task, steps=2, batch_size=4, m=2, max_new_tokens=6,
        eval_every=1, eval_items=6, test_items=6, device="cpu",
    )  # fmt: skip
    runs = [
        train_rlcd(preset("calibrate", out=tmp_path / "cal", **kw)),
        grpo.train(GRPOConfig(out=tmp_path / "grpo", **kw)),
    ]
    for run in runs:
        log = read_log(run)
        assert [r["step"] for r in log] == [0, 1]
        assert all(np.isfinite(r["loss"]) and np.isfinite(r["dev_brier"]) for r in log)
        rows = read_jsonl(run / "eval" / "test.jsonl")
        assert len({len(r["options"]) for r in rows}) > 1  # the test split mixes K
        for r in rows:  # each item read over its own options only
            k = len(r["options"])
            assert len(r["logits"]) == len(r["probs"]) == k
            assert all(len(u) == k for u in r["readouts"])
            assert sum(r["probs"]) == pytest.approx(1, abs=1e-5)
        dev = read_jsonl(run / "eval" / "dev.jsonl")
        got = summarize(rows, dev_rows=dev)
        ref = per_item_reference([r["logits"] for r in rows], [r["label"] for r in rows])
        for key in ("brier", "nll", "accuracy", "ece", "aurc"):
            assert got[key] == pytest.approx(ref[key], rel=1e-9, abs=1e-12)


def test_mmlu_pro_format_converts_splits_trains_and_evaluates(tmp_path, tiny_base):
    """The command-line path a user takes with MMLU-Pro (items with 4 to 10 options):
    data convert -> data split -> train 2 steps -> eval, without error."""
    import json

    from rlcd_lab.cli import main

    rng = np.random.default_rng(1)
    raw = tmp_path / "mmlu_pro_test.jsonl"
    with open(raw, "w", encoding="utf-8") as f:
        for i in range(14):
            k = 4 + i % 7  # 4..10 options
            answer = int(rng.integers(k))
            record = {
                "question_id": i,
                "question": f"Which value is {i}?",
                "options": [f"value {j}" for j in range(k)],
                "answer": LETTERS[answer],
                "answer_index": answer,
                "cot_content": "",
                "category": "math",
                "src": "test",
            }
            f.write(json.dumps(record) + "\n")
    items = tmp_path / "mmlu-pro.jsonl"
    main(["data", "convert", "mmlu-pro", str(raw), str(items)])
    main(["data", "split", str(items), "--dev", "3", "--test", "4"])
    run = tmp_path / "run"
    main([
        "train", "calibrate", "--init", str(tiny_base), "--task", str(items), "--out", str(run),
        "--steps", "2", "--batch-size", "3", "--m", "2", "--max-new-tokens", "4",
        "--eval-every", "1", "--test-items", "4", "--device", "cpu",
    ])  # fmt: skip
    assert [r["step"] for r in read_log(run)] == [0, 1]
    out = tmp_path / "eval.jsonl"
    main(["eval", "--checkpoint", str(run / "final"), "--task", str(items), "--out", str(out)])
    rows = read_jsonl(out)
    assert len(rows) == 4 and len({len(r["options"]) for r in rows}) > 1
    assert all(len(r["probs"]) == len(r["options"]) for r in rows)
