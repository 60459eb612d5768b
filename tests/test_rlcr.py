"""RLCR: the reward, the confidence parser, the stated distribution, the policy-gradient
loss (by hand and by exact enumeration) and a short run on the shipped verify base."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from rlcd_lab import metrics
from rlcd_lab.files.assets import ASSETS
from rlcd_lab.files.rundir import read_log
from rlcd_lab.methods import METHOD_TABLE
from rlcd_lab.reader.prompts import left_pad
from rlcd_lab.reader.rationales import sample_questions
from rlcd_lab.reader.verbal import (
    confidence_logprobs,
    confidence_tokens,
    parse_confidence,
    stated_logits,
    stated_probs,
    token_confidences,
)
from rlcd_lab.reproduce import ReproduceConfig, plan, stated_view
from rlcd_lab.train import train
from rlcd_lab.train.rlcr import digit_bin, policy_gradient_loss, rlcr_reward

NAN = math.nan


# ------------------------------------------------------------------------------ reward
@pytest.mark.parametrize(
    ("correct", "c", "reward"),
    [
        (1.0, 0.9, 0.99),  # 1 - (0.9 - 1)^2
        (0.0, 0.9, -0.81),  # 0 - (0.9 - 0)^2
        (1.0, 1.0, 1.0),  # the best case
        (0.0, 1.0, -1.0),  # the worst case
        (0.0, 0.0, 0.0),  # wrong, and said so
        (1.0, 0.5, 0.75),
        (1.0, NAN, 0.0),  # unparsable: Brier term -1
        (0.0, NAN, -1.0),
    ],
)
def test_rlcr_reward_hand_cases(correct, c, reward):
    got = rlcr_reward(torch.tensor([correct]), torch.tensor([c], dtype=torch.float64))
    assert got.item() == pytest.approx(reward, abs=1e-12)


def test_expected_reward_peaks_at_the_true_probability_and_prefers_the_likelier_answer():
    # E R(c) = p (1 - (1 - c)^2) + (1 - p) (-(c^2)) = p - (c - p)^2 - p (1 - p)
    c = torch.linspace(0, 1, 101, dtype=torch.float64)
    for p in (0.7, 0.2, 0.55):
        expected = p * rlcr_reward(torch.ones(101), c) + (1 - p) * rlcr_reward(torch.zeros(101), c)
        assert c[expected.argmax()].item() == pytest.approx(p)
        assert expected.max().item() == pytest.approx(p**2)  # p - p (1 - p)
    # an answer right with 0.6 beats one right with 0.4 at their best confidences: 0.36 > 0.16
    best = {p: max(p - (x - p) ** 2 - p * (1 - p) for x in c.tolist()) for p in (0.6, 0.4)}
    assert best[0.6] == pytest.approx(0.36) and best[0.4] == pytest.approx(0.16)


# ------------------------------------------------------------------------------ parser
@pytest.mark.parametrize(
    ("text", "c"),
    [
        ("0.8", 0.8),
        (".8", 0.8),
        ("80%", 0.8),
        ("80 %", 0.8),
        ("8/10", 0.8),
        ("3 / 4", 0.75),
        ("<confidence>0.8</confidence>", 0.8),
        ("<CONFIDENCE> 65% </CONFIDENCE>", 0.65),
        ("8", 0.85),  # a lone digit: the digit-bin format, (8 + 0.5) / 10
        ("0", 0.05),
        (" 9", 0.95),
        ("80", 0.8),  # a whole number 10..100: percent
        ("1.0", 1.0),
        ("1.", 1.0),
        ("0", 0.05),
        ("Confidence: 0.3", 0.3),
        ("So 3+4=7, right. Confidence: 90%", 0.9),  # after the label, not the 3 or the 7
        ("I add 3 and 4, and I am 0.6 sure", 0.6),  # no label: the last number
        ("junk", None),
        ("", None),
        ("high", None),
        ("<confidence>high</confidence>", None),
        ("1.5", None),
        ("150%", None),
        ("3/0", None),
        ("11/10", None),
        ("250", None),
        (":", None),
    ],
)
def test_parse_confidence(text, c):
    got = parse_confidence(text)
    assert got == (None if c is None else pytest.approx(c))


def test_digit_bins_and_token_confidences(tokenizer):
    p = torch.tensor([0.0, 0.049, 0.1, 0.55, 0.999, 1.0])
    assert digit_bin(p).tolist() == [0, 0, 1, 5, 9, 9]
    conf = confidence_tokens(tokenizer)
    assert conf.digits == tuple(tokenizer.convert_tokens_to_ids(list("0123456789")))
    assert tokenizer.decode(list(conf.cue)) == "\nConfidence: "  # the cue, then the bridge
    got = token_confidences(tokenizer, [conf.digits[7], conf.digits[0], conf.cue[1]])
    assert got[:2].tolist() == pytest.approx([0.75, 0.05]) and math.isnan(got[2])


# --------------------------------------------------------------- stated distribution
def test_stated_distribution_and_its_metrics():
    answer, c = torch.tensor([1, 0]), torch.tensor([0.7, 0.35], dtype=torch.float64)
    p = stated_probs(answer, c, torch.tensor([3, 2]))  # ragged: 3 options, then 2
    assert p.numpy() == pytest.approx(np.array([[0.15, 0.7, 0.15], [0.35, 0.65, 0.0]]))
    z = stated_logits(answer, c, torch.tensor([3, 2]))
    assert z[1, 2].item() == -math.inf
    assert metrics.softmax(z.numpy()) == pytest.approx(p.numpy())
    # Brier (lower is better) of row 0 with label 1: 0.15^2 + 0.3^2 + 0.15^2 = 0.135
    assert metrics.brier(p[:1].numpy(), np.array([1])) == pytest.approx(0.135)
    # with K = 2 the multiclass Brier is twice RLCR's squared error (c - 1[a = y])^2
    a, cc, y = torch.tensor([0, 1, 1]), torch.tensor([0.9, 0.2, 0.6]), np.array([0, 0, 1])
    pp = stated_probs(a, cc, 2).numpy()
    sq = [(0.9 - 1) ** 2, 0.2**2, (0.6 - 1) ** 2]
    assert metrics.brier(pp, y) == pytest.approx(2 * np.mean(sq))


def test_confidence_logprobs_read_after_answer_and_cue(tiny_lm, tokenizer):
    rats, ids = sample_questions(tiny_lm, tokenizer, ["12+3=15?"], [("Y", "N")], 2, 5, seed=[1])
    conf = confidence_tokens(tokenizer)
    answer = torch.tensor([0, 1])
    with torch.no_grad():
        logq = confidence_logprobs(tiny_lm, rats, ids, answer, conf)
        for i in range(2):  # reference: the row's own tokens + answer + cue, one plain forward
            row = rats.input_ids[i][rats.attention_mask[i].bool()].tolist()
            row += [int(ids[0, answer[i]]), *conf.cue]
            x, mask = left_pad([row], 0, "cpu")
            ref = tiny_lm(input_ids=x, attention_mask=mask).logits[0, -1].log_softmax(-1)
            assert torch.allclose(logq[i], ref, atol=1e-5)


# -------------------------------------------------------------------------------- loss
def test_policy_gradient_loss_is_reinforce_with_a_leave_one_out_baseline():
    # A = R - mean of the others: [1 - 0.25, 0 - 0.75, 0.5 - 0.5] = [0.75, -0.75, 0]
    reward = torch.tensor([[1.0, 0.0, 0.5]])
    logp = torch.zeros(3, requires_grad=True)
    policy_gradient_loss(reward, logp, norm=2.0).backward()
    assert logp.grad.tolist() == pytest.approx([-0.125, 0.125, 0.0])  # -A / (B M norm)


def test_expected_loss_gradient_is_minus_the_reward_gradient_by_enumeration():
    """Tabular policy: answer a in {0, 1} (y = 0), then a token t in {0..9, junk} given a.
    Over all ordered pairs of trajectories (M = 2), the expected gradient of the loss
    equals -grad E[R] / norm exactly (the leave-one-out baseline adds no bias)."""
    g = torch.Generator().manual_seed(0)
    theta_a = torch.randn(2, generator=g, dtype=torch.float64, requires_grad=True)
    theta_t = torch.randn(2, 11, generator=g, dtype=torch.float64, requires_grad=True)
    logp = (theta_a.log_softmax(0)[:, None] + theta_t.log_softmax(1)).reshape(-1)  # (22,)
    c = torch.tensor([(d + 0.5) / 10 for d in range(10)] + [NAN], dtype=torch.float64)
    correct = torch.tensor([1.0, 0.0], dtype=torch.float64)[:, None].expand(2, 11)
    reward = rlcr_reward(correct.reshape(-1), c.repeat(2))  # (22,)
    objective = (logp.exp() * reward).sum()
    want = torch.autograd.grad(-objective / 3.0, [theta_a, theta_t], retain_graph=True)
    i, j = torch.meshgrid(torch.arange(22), torch.arange(22), indexing="ij")
    i, j = i.reshape(-1), j.reshape(-1)  # every ordered pair (484 groups of M = 2)
    weight = (logp[i] + logp[j]).exp().detach()  # probability of the pair
    pairs_logp = torch.stack([logp[i], logp[j]], 1)  # (484, 2)
    pairs_reward = torch.stack([reward[i], reward[j]], 1)
    loss = len(i) * policy_gradient_loss(
        pairs_reward, (pairs_logp * weight[:, None]).reshape(-1), 3.0
    )
    got = torch.autograd.grad(loss, [theta_a, theta_t])
    for a, b in zip(got, want, strict=True):
        assert torch.allclose(a, b, atol=1e-12)


# ---------------------------------------------------------------------------- the loop
def test_rlcr_runs_on_the_verify_base_logs_and_dumps_the_stated_confidence(tmp_path):
    base = ASSETS / "checkpoints" / "base-verify"
    cfg = replace(
        METHOD_TABLE["rlcr"].config, init=base, out=tmp_path / "rlcr", steps=3, format_steps=1,
        batch_size=2, m=2, eval_every=0, eval_items=4, test_items=4, device="cpu",
    )  # fmt: skip
    run = train(cfg)
    log = read_log(run)
    assert [r["phase"] for r in log] == ["format", "rl", "rl"]
    for r in log:
        assert -1 <= r["reward"] <= 1 and 0 <= r["format_failure"] <= 1
        assert r["reward"] == pytest.approx(r["correct"] + r["brier"])
    assert log[0]["kl"] is None and log[1]["kl"] == pytest.approx(0.0, abs=1e-3)
    meta = json.loads((run / "final" / "rlcd.json").read_text())
    assert meta["method"] == "rlcr" and meta["confidence_cue"] == "\nConfidence:"
    rows = [json.loads(x) for x in (run / "eval" / "test.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    for r in rows:
        assert "stated_rationale" not in r  # read after the row's own first rationale
        assert r["stated_answer"] == int(np.argmax(r["probs"]))
        p = metrics.softmax(np.array(r["stated_logits"]))
        assert p[r["stated_answer"]] == pytest.approx(r["stated_confidence"])
        assert len(r["confidence_probs"]) == 10 and sum(r["confidence_probs"]) <= 1 + 1e-6
    # the reproduction's second row: the stated confidence scored as a readout
    (job,) = [j for j in plan(ReproduceConfig(seeds=(1,), out=tmp_path))[0] if j.name == "rlcr"]
    view = stated_view(replace(job, out=run, name="rlcr-matched"))
    assert view == tmp_path / "rlcr-stated-matched"
    dump = [json.loads(x) for x in (view / "eval" / "test.jsonl").read_text().splitlines()]
    # the view reads the confidence at float32 resolution (0.65 and float32(0.65) tie)
    for d, r in zip(dump, rows, strict=True):
        assert d["logits"] == pytest.approx(r["stated_logits"], rel=1e-6)
        p = metrics.softmax(np.array(d["logits"]))
        assert p[r["stated_answer"]] == pytest.approx(
            float(np.float32(r["stated_confidence"])), rel=1e-12
        )
    assert json.loads((view / "config.json").read_text())["method"] == "rlcr"


def test_rlcr_needs_two_trajectories_and_runs_at_matched_budget_in_reproduce(tmp_path):
    cfg = replace(METHOD_TABLE["rlcr"].config, out=tmp_path / "r", m=1)
    with pytest.raises(ValueError, match="--m must be >= 2"):
        train(cfg)
    assert not (tmp_path / "r").exists()
    jobs = {j.name: j for j in plan(ReproduceConfig(seeds=(1,), out=tmp_path, steps=7))[0]}
    assert jobs["rlcr-matched"].train.steps == 14 and jobs["rlcr"].train.steps == 7
    assert jobs["rlcr-matched"].train.format_steps == 20 and jobs["rlcr"].train.beta == 0.04
