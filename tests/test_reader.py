"""Batched rationale sampling: stop at the marker, forced marker, padding, seeds, logp_r."""

import torch

from rlcd_lab.reader import direct_readout, sample_rationales, score_rationales
from rlcd_lab.readout import option_token_ids

PROMPTS = ["Q: 1?\n", "Q: 22?\n"]  # different lengths: left padding is exercised


def decoded_rows(tokenizer, rats):
    return [
        tokenizer.decode(ids[mask.bool()])
        for ids, mask in zip(rats.input_ids, rats.attention_mask, strict=True)
    ]


def test_stops_at_the_marker(tokenizer, marker_lm):
    opts = option_token_ids(tokenizer, ["Y", "N"])
    r = sample_rationales(
        marker_lm, tokenizer, PROMPTS, m=3, max_new_tokens=30, bridge=opts.bridge, seed=0
    )
    assert r.texts == ["ab"] * 6
    assert not r.forced.any()
    assert r.lengths.tolist() == [len("ab Answer:")] * 6  # one token per character
    assert decoded_rows(tokenizer, r) == [p + "ab Answer: " for p in PROMPTS for _ in range(3)]
    assert r.prompt_index.tolist() == [0, 0, 0, 1, 1, 1]
    # the rationale mask covers exactly the sampled characters "ab Answer:"
    for ids, mask in zip(r.input_ids, r.rationale_mask, strict=True):
        assert tokenizer.decode(ids[mask]) == "ab Answer:"
    u, _, _ = score_rationales(marker_lm, r, opts.ids)
    assert (u[:3, 0] > 0.9).all() and (u[3:, 1] > 0.9).all()  # the overfit labels Y / N
    # same readout as reading the written-out text directly
    direct, _ = direct_readout(
        marker_lm, tokenizer, [p + "ab Answer:" for p in PROMPTS], opts.ids, opts.bridge
    )
    torch.testing.assert_close(u[::3], direct, atol=1e-5, rtol=1e-5)


def test_forced_marker_at_the_length_limit(tokenizer, marker_lm):
    opts = option_token_ids(tokenizer, ["Y", "N"])
    r = sample_rationales(
        marker_lm, tokenizer, PROMPTS, m=2, max_new_tokens=4, bridge=opts.bridge, seed=0
    )
    assert r.forced.all()
    assert r.lengths.tolist() == [4] * 4
    assert r.texts == ["ab A"] * 4
    assert decoded_rows(tokenizer, r) == [p + "ab AAnswer: " for p in PROMPTS for _ in range(2)]
    for ids, mask in zip(r.input_ids, r.rationale_mask, strict=True):
        assert tokenizer.decode(ids[mask]) == "ab A"  # the forced marker is not "sampled"


def test_seeded_sampling_is_deterministic(tokenizer, tiny_lm):
    kw = dict(m=4, max_new_tokens=16)
    a = sample_rationales(tiny_lm, tokenizer, PROMPTS, seed=1, **kw)
    b = sample_rationales(tiny_lm, tokenizer, PROMPTS, seed=1, **kw)
    c = sample_rationales(tiny_lm, tokenizer, PROMPTS, seed=2, **kw)
    assert a.texts == b.texts and torch.equal(a.input_ids, b.input_ids)
    assert a.texts != c.texts
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    sample_rationales(tiny_lm, tokenizer, PROMPTS, seed=5, **kw)
    assert torch.equal(torch.rand(1), before)  # the global RNG is left untouched


def test_scoring_pass_logp_equals_sampling_logprobs(tokenizer, tiny_lm, marker_lm):
    opts = option_token_ids(tokenizer, ["Y", "N"])
    for model in (tiny_lm, marker_lm):  # random model: forced rows; marker model: stopped rows
        r = sample_rationales(
            model, tokenizer, PROMPTS, m=3, max_new_tokens=12, bridge=opts.bridge, seed=3
        )
        u, logits, logp = score_rationales(model, r, opts.ids)
        torch.testing.assert_close(logp, r.logp_r, atol=1e-4, rtol=1e-5)
        assert u.shape == logits.shape == (6, 2)
        # the scoring pass carries gradients to the model
        (logp.sum() + u[:, 0].sum()).backward()
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
        model.zero_grad()


def test_brute_force_logp_of_one_rationale(tokenizer, tiny_lm):
    r = sample_rationales(tiny_lm, tokenizer, ["Q: 1?\n"], m=1, max_new_tokens=6, seed=0)
    prompt = tokenizer("Q: 1?\n").input_ids
    sampled = r.input_ids[0][r.rationale_mask[0]].tolist()
    total, seq = 0.0, list(prompt)
    for t in sampled:  # token by token, no cache, no padding
        logits = tiny_lm(torch.tensor([seq])).logits[0, -1]
        total += logits.log_softmax(-1)[t].item()
        seq.append(t)
    assert abs(total - r.logp_r.item()) < 1e-4


def test_per_prompt_options(tokenizer, tiny_lm):
    ids = tokenizer.convert_tokens_to_ids(["A", "B", "C"])
    r = sample_rationales(tiny_lm, tokenizer, PROMPTS, m=2, max_new_tokens=5, seed=0)
    u, _, _ = score_rationales(tiny_lm, r, torch.tensor([ids, ids[:2] + [-1]]))
    assert (u[2:, 2] == 0).all() and (u[:2, 2] > 0).all()
    torch.testing.assert_close(u.sum(-1), torch.ones(4))


def test_per_token_logprobs_sum_to_logp_r(tokenizer, tiny_lm):
    r = sample_rationales(tiny_lm, tokenizer, PROMPTS, m=2, max_new_tokens=7, seed=4)
    _, _, total = score_rationales(tiny_lm, r, [5, 6])
    _, _, tokens = score_rationales(tiny_lm, r, [5, 6], per_token=True)
    assert tokens.shape == (4, r.input_ids.shape[1] - 1)
    assert (tokens[~r.rationale_mask[:, 1:]] == 0).all()
    torch.testing.assert_close(tokens.sum(-1), total)
