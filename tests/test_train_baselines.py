"""Baseline loops (SFT, RFT, GRPO, Dr. GRPO): they run, log, save, and compute the stated losses."""

import json
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from rlcd_lab.files.rundir import read_config, read_log
from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.methods import METHOD_TABLE, configured
from rlcd_lab.tasks import load_task_items
from rlcd_lab.train import train
from rlcd_lab.train.common import QuestionStream, k3_kl

TINY = dict(
    task="aleatoric",
    batch_size=2,
    m=3,
    max_new_tokens=5,
    eval_every=0,
    test_items=3,
    save_every=2,
    device="cpu",
    lr=1e-2,
)


@pytest.mark.parametrize("method", ["sft", "rft", "grpo", "drgrpo"])
def test_baseline_runs_and_saves(tmp_path, tiny_base, method):
    cfg = configured(
        METHOD_TABLE[method].config, TINY, init=tiny_base, out=tmp_path / method, steps=2
    )
    run = train(cfg)
    log = read_log(run)
    assert [r["step"] for r in log] == [0, 1] and all(
        torch.isfinite(torch.tensor(r["loss"])) for r in log
    )
    _, _, meta = load_checkpoint(run / "final")
    assert meta["method"] == cfg.method and meta["metrics"]["test"]["n"] == 3
    if method == "drgrpo":  # GRPO's loop, Dr. GRPO's advantages
        assert (cfg.method, read_config(run)["advantage"]) == ("grpo", "group-mean")
    dump = [json.loads(line) for line in (run / "eval" / "test.jsonl").read_text().splitlines()]
    if method == "sft":  # evaluated in direct mode: no rationale
        assert all(r["rationales"] == [""] for r in dump)
    else:
        assert 0 <= log[0].get("kept", log[0].get("reward")) <= 1


def test_sft_first_loss_is_the_label_cross_entropy(tmp_path, tiny_base, tokenizer):
    run = train(
        configured(METHOD_TABLE["sft"].config, TINY, init=tiny_base, out=tmp_path / "sft", steps=1)
    )
    batch = QuestionStream(load_task_items("aleatoric", "train"), 2, seed=0).batch(0)
    model, _, _ = load_checkpoint(tiny_base)
    losses = []
    for item, y in zip(batch.items, batch.y, strict=True):
        ids = tokenizer(item.prompt + "\nAnswer: ", return_tensors="pt").input_ids  # bridge " "
        logits = model(ids).logits[0, -1]
        target = tokenizer.convert_tokens_to_ids(item.options[int(y)])
        losses.append(F.cross_entropy(logits[None], torch.tensor([target])))
    assert read_log(run)[0]["loss"] == pytest.approx(float(torch.stack(losses).mean()), rel=1e-5)


def test_grpo_kl_starts_at_zero(tmp_path, tiny_base):
    run = train(
        replace(METHOD_TABLE["grpo"].config, init=tiny_base, out=tmp_path / "g", steps=1, **TINY)
    )
    assert read_log(run)[0]["kl"] == pytest.approx(0.0, abs=1e-6)


def test_k3_kl_estimator():
    # E_{x~p}[k3] = KL(p || r): check by exact enumeration over a 3-symbol alphabet
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    r = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    expected = (p * (p / r).log()).sum()
    assert (p * k3_kl(p.log(), r.log())).sum().item() == pytest.approx(expected.item(), rel=1e-12)
    assert (k3_kl(p.log(), r.log()) >= 0).all()


@pytest.mark.parametrize(("method", "m", "ok"), [("grpo", 1, False), ("rft", 1, True)])
def test_too_few_rationales_are_refused_before_the_run(tmp_path, tiny_base, method, m, ok):
    """GRPO's group-normalized reward needs two rationales per question (with one, every
    advantage is NaN); RFT trains with one. Checked before the run folder exists."""
    from rlcd_lab.train.common import check_train_config

    cfg = replace(
        METHOD_TABLE[method].config, init=tiny_base, out=tmp_path / method, **(TINY | {"m": m})
    )
    if ok:
        check_train_config(cfg)
        return
    with pytest.raises(ValueError, match=r"--m \(--num-rationales\) must be >= 2 for grpo"):
        train(cfg)
    assert not cfg.out.exists()
