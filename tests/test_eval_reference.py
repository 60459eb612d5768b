"""``run_eval(..., reference=)``: each rationale's log-probability under the model and
under a reference (the base a policy was trained from), and the KL estimate between them,
checked on tiny models against what they must be."""

from __future__ import annotations

import math

import torch

from rlcd_lab.evaluate import run_eval
from rlcd_lab.lm.model import tiny_model
from rlcd_lab.tasks.items import TaskItem

ITEMS = [TaskItem(str(i), ("Q: 1?", "Q: 22?")[i % 2], ("Y", "N"), i % 2) for i in range(4)]
KW = dict(mode="reason", m=3, max_new_tokens=12, batch_size=2, seed=5)


def test_against_itself_the_reference_scores_the_rationales_as_the_sampler_did(
    tokenizer, marker_lm
):
    """The model as its own reference: the scoring pass gives each rationale the log-prob
    the sampler recorded (two code paths, float32 sums: a tolerance scaled to the sum's
    size), so the KL estimate is 0 to that rounding."""
    rows = run_eval(marker_lm, tokenizer, ITEMS, reference=marker_lm, **KW)
    for row in rows:
        assert len(row["logp"]) == len(row["logp_reference"]) == KW["m"]
        for a, b in zip(row["logp"], row["logp_reference"], strict=True):
            assert abs(a - b) <= 1e-5 * (1 + abs(a)), row["uid"]
        assert abs(row["kl_reference"]) <= 1e-5 * (1 + max(map(abs, row["logp"])))


def test_a_uniform_reference_gives_every_token_minus_log_v(tokenizer, marker_lm):
    """A reference whose final norm is zero has logits 0: every token, the marker's and a
    sampled end-of-text's included, costs log V nats. So ``-logp_reference / log V`` is
    the rationale's scored tokens, its sampled length or one more (a sampled EOS), and
    ``kl_reference`` is the mean of ``logp - logp_reference`` over the item's rationales."""
    uniform = tiny_model(tokenizer, seed=1, hidden_size=32, layers=2)
    with torch.no_grad():
        uniform.model.norm.weight.zero_()
    log_v = math.log(uniform.config.vocab_size)
    rows = run_eval(marker_lm, tokenizer, ITEMS, reference=uniform, **KW)
    plain = run_eval(marker_lm, tokenizer, ITEMS, **KW)
    for row, same in zip(rows, plain, strict=True):
        assert {k: v for k, v in row.items() if k in same} == same  # the rest unchanged
        for lp_ref, n in zip(row["logp_reference"], row["lengths"], strict=True):
            tokens = -lp_ref / log_v
            assert abs(tokens - round(tokens)) < 1e-4 and round(tokens) in (n, n + 1)
        diffs = [a - b for a, b in zip(row["logp"], row["logp_reference"], strict=True)]
        assert abs(row["kl_reference"] - sum(diffs) / len(diffs)) < 1e-9
    assert not {"logp", "logp_reference", "kl_reference"} & set(plain[0])  # only on request


def test_direct_answers_have_no_rationale_to_diverge_on(tokenizer, marker_lm):
    rows = run_eval(marker_lm, tokenizer, ITEMS, mode="direct", reference=marker_lm)
    assert all(r["logp_reference"] == [0.0] and r["kl_reference"] == 0.0 for r in rows)


def test_eval_command_records_the_kl_to_a_reference(tiny_base, tmp_path, capsys):
    """``rlcd-lab eval --reference``: the rows carry the fields, the summary their mean
    (a checkpoint against itself: 0 to rounding)."""
    import json

    from rlcd_lab.cli import main
    from rlcd_lab.files.io import read_jsonl

    out = tmp_path / "rows.jsonl"
    argv = ["eval", "--checkpoint", str(tiny_base), "--task", "verify", "--split", "dev"]
    argv += ["--limit", "3", "--max-new-tokens", "4", "--out", str(out)]
    capsys.readouterr()
    main([*argv, "--reference", str(tiny_base)])
    summary = json.loads(capsys.readouterr().out)
    rows = list(read_jsonl(out))
    mean = sum(r["kl_reference"] for r in rows) / len(rows)
    assert summary["kl_reference"] == mean and abs(mean) < 1e-4
