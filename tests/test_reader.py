"""Batched rationale sampling: stop at the marker, forced marker, padding, seeds, logp_r."""

import copy
import math
import os

import pytest
import torch

from rlcd_lab.reader.rationales import (
    _MarkerStop,
    cut_at_marker,
    mix_seed,
    sample_questions,
    sample_rationales,
)
from rlcd_lab.reader.reading import direct_readout, score_rationales
from rlcd_lab.reader.readout import option_token_ids
from rlcd_lab.reader.sampling import SHARE_MIN_PROMPT

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
    assert (tokens[~r.logp_mask] == 0).all()  # only the sampled tokens (EOS included) count
    torch.testing.assert_close(tokens.sum(-1), total)


# ------------------------------------------------------------- marker on decoded text
@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2_dir):
    """SmolLM2-135M-Instruct's BPE tokenizer (conftest's shared offline checkpoint)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


def test_cut_at_marker_char_tokenizer(tokenizer):
    ids = tokenizer("ab Answer:", add_special_tokens=False)["input_ids"]
    assert cut_at_marker(tokenizer, ids) == (len(ids), [], "ab")  # ends exactly on it
    assert cut_at_marker(tokenizer, ids[:-1]) is None  # no marker yet


def test_cut_at_marker_merged_bpe_token(smollm2_tokenizer):
    """SmolLM2's BPE writes "Answer:**" as ['ĠAnswer', ':**']: the rationale is cut before
    the merged token and the rest of the marker (":") is appended, so the readout is taken
    right after "Answer:" as if the model had written ":" alone."""
    tok = smollm2_tokenizer
    ids = tok("So it is B. Answer:**", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids[-2:]) == ["ĠAnswer", ":**"]
    n, tail, text = cut_at_marker(tok, ids)
    assert (n, text) == (len(ids) - 1, "So it is B.")
    assert tok.convert_ids_to_tokens(tail) == [":"]
    assert tok.decode(ids[:n] + tail) == "So it is B. Answer:"
    # the stopping criterion fires at the merged token, not before and not after
    stop = _MarkerStop(tok, "Answer:", prompt_len=0, n=1, eos=[tok.eos_token_id])
    fired = [bool(stop(torch.tensor([ids[: t + 1]]), None)[0]) for t in range(len(ids))]
    assert fired == [False] * (len(ids) - 1) + [True]
    assert stop.end.tolist() == [len(ids)] and stop.hit_marker.tolist() == [True]


def test_merged_marker_in_a_sampled_rationale(smollm2_tokenizer, tokenizer):
    """End to end through ``sample_rationales``: a stub model that writes a fixed token
    sequence containing ':**' yields the rationale, a completed marker and its log-prob."""
    tok = smollm2_tokenizer
    script = tok(" Two. Answer:** B more", add_special_tokens=False)["input_ids"]
    rats = sample_rationales(
        ScriptedLM(script, len(tok)), tok, ["Q?\n"], m=2, max_new_tokens=20, seed=0
    )
    assert rats.texts == ["Two.", "Two."] and not rats.forced.any()
    kept = script[: script.index(tok.convert_tokens_to_ids(":**"))]
    assert rats.lengths.tolist() == [len(kept)] * 2
    for row, mask in zip(rats.input_ids, rats.rationale_mask, strict=True):
        assert tok.decode(row[mask]) == " Two. Answer"
        assert tok.decode(row).endswith("Q?\n Two. Answer:")
    # the scripted model puts probability 1/2 on its next token: log pi(r) = n log(1/2)
    torch.testing.assert_close(rats.logp_r, torch.full((2,), len(kept) * math.log(0.5)))


# ------------------------------------------------------------------ EOS in log pi(r)
def test_a_sampled_eos_counts_in_logp_r(tokenizer, tiny_lm):
    """Rows that end at EOS (forced marker appended) keep the EOS log-prob in log pi(r):
    sampling, the scoring pass and a token-by-token reference agree."""
    prompts = ["Q: 1?\n", "Q: 22?\n", "Q: 333?\n", "Q: 4?\n"]
    r = sample_rationales(tiny_lm, tokenizer, prompts, m=8, max_new_tokens=40, seed=0)
    eos_rows = (r.eos_col >= 0).nonzero()[:, 0].tolist()
    assert eos_rows and r.forced[eos_rows].all()
    _, _, logp = score_rationales(tiny_lm, r, [5, 6])
    torch.testing.assert_close(logp, r.logp_r, atol=1e-4, rtol=1e-5)
    _, _, per_token = score_rationales(tiny_lm, r, [5, 6], per_token=True)
    torch.testing.assert_close(per_token.sum(-1), logp)
    i = eos_rows[0]
    prompt = tokenizer(prompts[i // 8])["input_ids"]
    sampled = r.input_ids[i][r.rationale_mask[i]].tolist()
    total, seq = 0.0, list(prompt)
    for t in [*sampled, tokenizer.eos_token_id]:  # token by token, EOS last
        total += tiny_lm(torch.tensor([seq])).logits[0, -1].log_softmax(-1)[t].item()
        seq.append(t)
    assert abs(total - r.logp_r[i].item()) < 1e-4
    # the sequence itself holds no EOS: the forced marker follows the rationale
    assert tokenizer.eos_token_id not in r.input_ids[i][r.attention_mask[i].bool()].tolist()


class ScriptedLM(torch.nn.Module):
    """A stub causal LM whose ``generate`` writes ``script`` token by token after any
    prompt (honouring the stopping criteria) and reports logits 0 on the script token and
    on token 0, -inf elsewhere: every written token has log-prob log(1/2)."""

    def __init__(self, script: list[int], vocab: int):
        super().__init__()
        self.script, self.vocab = script, vocab
        self.dummy = torch.nn.Parameter(torch.zeros(1))
        self.generation_config = type("G", (), {"eos_token_id": None})()

    @property
    def device(self) -> torch.device:
        return self.dummy.device

    def _logits(self, n: int) -> torch.Tensor:
        z = torch.full((self.vocab,), -math.inf)
        z[self.script[min(n, len(self.script) - 1)]] = 0.0
        z[0] = 0.0
        return z

    def generate(self, input_ids, attention_mask, stopping_criteria,
                 max_new_tokens, **kw):  # fmt: skip
        ids = input_ids
        logits = []
        for n in range(max_new_tokens):
            logits.append(self._logits(n).expand(len(ids), -1))
            ids = torch.cat([ids, torch.full((len(ids), 1), self.script[n])], 1)
            if all(stop(ids, None).all() for stop in stopping_criteria):
                break
        return type("Out", (), {"sequences": ids, "logits": tuple(logits)})()


# ------------------------------------------------- each prompt encoded once in scoring
def _scored(model, rats, share, per_token=False):
    """Outputs and parameter gradients of one scoring pass (a fixed mix of all outputs)."""
    model.zero_grad()
    u, logits, lp = score_rationales(model, rats, [5, 6, 7], per_token, share_prompts=share)
    w = torch.linspace(-1, 1, u.numel()).view(u.shape)
    tw = torch.linspace(0.5, 1.5, lp.shape[-1])
    ((u * w).sum() + logits[:, 0].sum() + (lp * tw).sum()).backward()
    return u.detach(), logits.detach(), lp.detach(), [p.grad.clone() for p in model.parameters()]


def assert_close_to_scale(a, b, rel=1e-6):
    """``|a - b| <= rel * max|b|`` elementwise: equal up to rounding relative to the
    tensor's scale (an element of a gradient can be a near-cancelling sum, so an
    elementwise relative bound would not hold for any fixed tolerance)."""
    torch.testing.assert_close(a, b, atol=rel * float(b.abs().max()), rtol=0)


def _assert_same_pass(model, rats):
    """The shared and the plain pass agree on a float64 copy of ``model``: the same sums
    in another order. transformers' RMSNorm still rounds through float32 (relative
    6e-8 per value), which bounds the differences at ~1e-8 of each tensor's scale here;
    1e-6 leaves a margin on any CPU kernel (in float32 the AVX-512 kernel left 4e-5 in
    one gradient element of scale ~70). A misplaced position or a missed token moves a
    value by ~1e-2 of its scale. The float32 plain pass gives the sampler's log pi(r)."""
    wide = copy.deepcopy(model).double()
    for per_token in (False, True):
        shared = _scored(wide, rats, True, per_token)
        plain = _scored(wide, rats, False, per_token)
        assert shared[0].dtype == shared[2].dtype == torch.float64
        for a, b in zip([*shared[:3], *shared[3]], [*plain[:3], *plain[3]], strict=True):
            assert_close_to_scale(a, b)
    # sampling (incremental decode) and scoring (one pass) in float32: each of the <= 40
    # token log-probs rounds to a few float32 ulps of its logits (|logit| < 10)
    lp = score_rationales(model, rats, [5, 6, 7])[2]
    torch.testing.assert_close(lp, rats.logp_r, atol=1e-4, rtol=1e-5)


def test_prompt_len_marks_each_rows_prompt(tokenizer, tiny_lm):
    prompts = ["Q: 1?\n", "Q: 22?\n", "Q: 333?\n"]
    r = sample_rationales(tiny_lm, tokenizer, prompts, m=2, max_new_tokens=6, seed=0)
    for i, row in enumerate(r.input_ids):
        real = row[r.attention_mask[i].bool()].tolist()
        assert real[: int(r.prompt_len[i])] == tokenizer(prompts[i // 2])["input_ids"]


def test_encoding_each_prompt_once_gives_the_plain_pass(tokenizer, tiny_lm, marker_lm):
    """Outputs (sum and per-token log-probs, readout) and gradients of the shared-prompt
    pass equal the plain pass's: prompts of different lengths, rows stopped at the
    marker (marker_lm), forced at the limit and ended by EOS (tiny_lm), options per row."""
    prompts = ["Q: 1?\n", "Q: 22?\n", "Q: 333?\n", "Q: 4?\n"]
    for model, kw in (
        (marker_lm, dict(m=3, max_new_tokens=12)),
        (tiny_lm, dict(m=8, max_new_tokens=40)),
    ):
        r = sample_rationales(model, tokenizer, prompts, seed=0, **kw)
        if model is tiny_lm:
            assert (r.eos_col >= 0).any() and r.forced.all()
        else:
            assert (~r.forced).any()
        _assert_same_pass(copy.deepcopy(model).train(), r)  # as in training (no dropout)
    assert not marker_lm.training  # the session's model is left as it was


def _forward_calls(model, rats, share=None):
    """The ``input_ids`` shape of each forward call of one scoring pass."""
    calls = []
    hook = model.register_forward_pre_hook(
        lambda mod, args, kw: calls.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        score_rationales(model, rats, [5, 6], share_prompts=share)
    finally:
        hook.remove()
    return calls


def _packed_shapes(rats, tokenizer, prompts):
    """The packed pass's calls, counted by hand: the prompts' common head once (one row),
    then one row per question, its prompt's rest and its rationales' continuations."""
    enc = [tokenizer(p)["input_ids"] for p in prompts]
    head = min(len(os.path.commonprefix(enc)), min(map(len, enc)) - 1) if len(enc) > 1 else 0
    conts = (rats.attention_mask.sum(1) - rats.prompt_len).view(len(enc), rats.m).sum(1)
    width = max(len(e) - head + int(c) for e, c in zip(enc, conts, strict=True))
    return ([(1, head)] if head else []) + [(len(enc), width)]


def test_prompts_are_packed_from_32_tokens_on(tokenizer, tiny_lm):
    long_prompt = ["Q: " + "1234567890" * 4 + "?\n", "Q: " + "2" * 35 + "?\n"]
    short = sample_rationales(tiny_lm, tokenizer, PROMPTS, m=4, max_new_tokens=30, seed=0)
    long = sample_rationales(tiny_lm, tokenizer, long_prompt, m=4, max_new_tokens=4, seed=0)
    assert SHARE_MIN_PROMPT == 32
    assert int(short.prompt_len.max()) < 32
    assert _forward_calls(tiny_lm, short) == [tuple(short.input_ids.shape)]  # plain
    assert int(long.prompt_len.min()) >= 32
    assert _forward_calls(tiny_lm, long) == _packed_shapes(long, tokenizer, long_prompt)
    assert _forward_calls(tiny_lm, long, share=False) == [tuple(long.input_ids.shape)]
    assert _forward_calls(tiny_lm, short, share=True) == _packed_shapes(short, tokenizer, PROMPTS)
    one = sample_rationales(tiny_lm, tokenizer, long_prompt, m=1, max_new_tokens=4, seed=0)
    assert _forward_calls(tiny_lm, one, share=True) == [tuple(one.input_ids.shape)]
    # gradient checkpointing drops the cache when gradients flow: the plain pass
    tiny_lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    tiny_lm.train()
    assert _forward_calls(tiny_lm, long, share=True) == [tuple(long.input_ids.shape)]
    with torch.no_grad():
        assert len(_forward_calls(tiny_lm, long, share=True)) == 2


def test_a_common_head_of_the_prompts_is_encoded_once_and_gives_the_plain_pass(tokenizer, tiny_lm):
    """Prompts that share a head of 32 tokens or more (a system text, worked examples):
    the head once, then one row per question (its prompt's rest, its continuations), and the
    outputs and gradients of the plain pass; prompts of different lengths, so the rests
    are padded inside the rows."""
    head = "System: " + "0123456789" * 4 + "\n"
    prompts = [head + "Q: 1?\n", head + "Q: 22?\n", head + "Q: 3 33 333?\n"]
    r = sample_rationales(tiny_lm, tokenizer, prompts, m=3, max_new_tokens=12, seed=2)
    assert len({int(n) for n in r.prompt_len}) > 1
    assert _forward_calls(tiny_lm, r) == _packed_shapes(r, tokenizer, prompts)
    _assert_same_pass(copy.deepcopy(tiny_lm).train(), r)


def test_shared_prompt_pass_under_ddp(tokenizer, tiny_lm, tmp_path):
    """Two forward calls, one backward through DistributedDataParallel (a gloo group of
    one process): the gradients of the plain pass."""
    import torch.distributed as dist

    r = sample_rationales(tiny_lm, tokenizer, PROMPTS, m=3, max_new_tokens=10, seed=1)
    tiny_lm.double()  # the two passes sum in another order: compared in float64
    plain = _scored(tiny_lm, r, False)[3]
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(tiny_lm)
        ddp.zero_grad()
        u, _, lp = score_rationales(ddp, r, [5, 6, 7], share_prompts=True)
        (u[:, 0].sum() + lp.sum()).backward()
        shared = [p.grad.clone() for p in tiny_lm.parameters()]
        tiny_lm.zero_grad()
        u, _, lp = score_rationales(tiny_lm, r, [5, 6, 7], share_prompts=False)
        (u[:, 0].sum() + lp.sum()).backward()
        for a, p in zip(shared, tiny_lm.parameters(), strict=True):
            assert_close_to_scale(a, p.grad)
    finally:
        dist.destroy_process_group()
    assert plain  # the fixture model has gradients at all


# ------------------------------------------------------------------------ the Reader
def test_reader_calibrated_readout_is_softmax_of_logits_over_T(tokenizer, tiny_lm):
    from rlcd_lab.reader import Reader

    T = 1.7
    reader = Reader(tiny_lm, tokenizer, {"T": T, "method": "calibrate"})
    assert reader.T == T and reader.T_fitted and reader.prompt_format == "plain"
    opts = option_token_ids(tokenizer, ["Y", "N"])
    questions = ["Q: 1?", "Q: 22?"]
    readings = reader.read(questions, [["Y", "N"]] * 2, mode="direct")
    for q, r in zip(questions, readings, strict=True):
        # by hand: one forward pass over "question \n Answer:" + the bridge, the option
        # logits at the last position, softmax(z / T) in float64
        ids = tokenizer(q + "\nAnswer:", add_special_tokens=False)["input_ids"] + list(opts.bridge)
        with torch.no_grad():
            last = tiny_lm(input_ids=torch.tensor([ids])).logits[0, -1]
        z = last[list(opts.ids)].double()
        torch.testing.assert_close(r.logits[0].double(), z, atol=1e-5, rtol=0)
        by_hand = torch.softmax(z / T, -1).numpy()
        assert reader.calibrated(r)[0] == pytest.approx(by_hand, abs=1e-6)
        assert r.u[0].numpy() == pytest.approx(torch.softmax(z, -1).numpy(), abs=1e-6)  # raw
        # calibrate is exactly softmax(logits / T) of the reading's own logits
        exact = torch.softmax(r.logits.double() / T, -1).numpy()
        assert reader.calibrate(r.logits) == pytest.approx(exact, abs=1e-15)
    # reason mode: the readings read() gives, calibrated row by row
    (r,) = reader.read(["Q: 1?"], [["Y", "N"]], m=3, max_new_tokens=6, seed=4)
    assert reader.calibrated(r) == pytest.approx(
        torch.softmax(r.logits.double() / T, -1).numpy(), abs=1e-15
    )
    # a base checkpoint's recorded T = 1 is not a fit; an explicit T is
    assert not Reader(tiny_lm, tokenizer, {"method": "pretrain", "T": 1.0}).T_fitted
    assert Reader(tiny_lm, tokenizer, {}, T=2.0).T_fitted
    with pytest.raises(ValueError, match="positive and finite"):
        Reader(tiny_lm, tokenizer, {}, T=0.0)


def test_reader_direct_shares_the_prefix_and_matches_one_pass(tokenizer, tiny_lm):
    from rlcd_lab.reader import Reader

    reader = Reader(tiny_lm, tokenizer)
    opts = option_token_ids(tokenizer, ["Y", "N"])
    rows = [
        reader.encode(reader.prompt(q, direct=True)) + list(opts.bridge)
        for q in ("state 1. Q: a?", "state 1. Q: bb?", "other. Q: c?")
    ]
    groups = [rows[:2], rows[2:]]
    option_ids = torch.tensor([list(opts.ids)] * 3)
    u, z = reader.direct(groups, option_ids)
    u1, z1 = reader.direct(groups, option_ids, share_prefix=False)
    torch.testing.assert_close(z, z1, atol=1e-5, rtol=0)
    texts = [reader.prompt(q, direct=True) for q in ("state 1. Q: a?",)]
    u_ref, _ = direct_readout(tiny_lm, tokenizer, texts, opts.ids, opts.bridge)
    torch.testing.assert_close(u[:1], u_ref, atol=1e-5, rtol=0)


def test_context_rule_is_one_function_for_decide_and_the_ask_tab(tokenizer, marker_lm, monkeypatch):
    """decide (task format: the state is the prompt) and the Ask tab read "1" * n as the
    same prompt "1" * n + "\\n"; with 8 rationale tokens, the marker (7) and the bridge (1)
    it needs n + 17 positions of marker_lm's 512: both accept 495 and refuse 496, through
    the same ``Reader.check_fits``."""
    from rlcd_lab.dashboard.ask_tab import ask_model
    from rlcd_lab.decide import DecisionModel
    from rlcd_lab.decide.jev import DecisionError
    from rlcd_lab.reader import ContextTooLong, Reader

    calls = []
    real = Reader.check_fits

    def spy(self, *args, **kwargs):
        try:
            return real(self, *args, **kwargs)
        except ContextTooLong as err:
            calls.append((err.prompt_tokens, err.needed, err.n_ctx))
            raise

    monkeypatch.setattr(Reader, "check_fits", spy)
    meta = {"options": ["Y", "N"]}
    dm = DecisionModel(marker_lm, tokenizer, meta)
    assert dm.prompt_format == "task" and dm.n_ctx == 512
    noul = {"q": {"type": "noul"}}
    assert dm.decide("1" * 495, noul, mode="reason", m=1, max_new_tokens=8).answers["q"]
    with pytest.raises(DecisionError, match="needs 513 positions.*at most 512"):
        dm.decide("1" * 496, noul, mode="reason", m=1, max_new_tokens=8)
    assert ask_model(
        Reader(marker_lm, tokenizer, meta), "1" * 495, ["Y", "N"], m=1, max_new_tokens=8
    )
    with pytest.raises(ValueError, match="prompt is 497 tokens.*needs 513 positions"):
        ask_model(Reader(marker_lm, tokenizer, meta), "1" * 496, ["Y", "N"], m=1, max_new_tokens=8)
    assert calls == [(497, 513, 512)] * 2  # the same refusal, from the same rule
    # direct mode needs the prompt (with the marker) and the bridge only
    reader = Reader(marker_lm, tokenizer, meta)
    assert reader.check_question("1" * 496, ["Y", "N"], mode="direct") == (504, 505)


def test_generate_text_is_seeded_per_prompt_and_stops_at_eos(tokenizer, tiny_lm):
    from rlcd_lab.reader.decoding import kv_sampler
    from rlcd_lab.reader.rationales import generate_text, hf_sampler, mix_seed

    prompts = ["Q: 1?\n", "Q: 22?\n", "Q: 333?\n"]
    seeds = [mix_seed(7, i) for i in range(3)]
    both = generate_text(tiny_lm, tokenizer, prompts, 12, seed=7)
    assert len(both) == 3 and all(len(t) <= 12 for t in both)
    alone = [
        generate_text(tiny_lm, tokenizer, [p], 12, seed=[s])[0]
        for p, s in zip(prompts, seeds, strict=True)
    ]
    assert alone == both  # a text depends on its prompt and seed, not on the batch
    assert generate_text(tiny_lm, tokenizer, prompts, 12, seed=7, sampler=hf_sampler) == both
    assert generate_text(tiny_lm, tokenizer, prompts, 12, seed=8) != both
    # EOS ends a row (and is not decoded): a head whose logits put EOS far ahead
    eos = tokenizer.eos_token_id
    model = copy.deepcopy(tiny_lm)
    model.generation_config.eos_token_id = eos
    head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=True)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
        head.bias[eos] = 100.0
    model.lm_head = head
    seen = []

    def spy(*args, **kwargs):  # the default sampler, its arguments and output recorded
        seen.append((kwargs, kv_sampler(*args, **kwargs)))
        return seen[-1][1]

    assert generate_text(model, tokenizer, prompts, 12, seed=7, sampler=spy) == [""] * 3
    ((kwargs, out),) = seen
    assert kwargs["marker"] is None and kwargs["eos"] == [eos]  # free text: no marker
    assert out.end.tolist() == [1, 1, 1] and out.tokens[:, 0].tolist() == [eos] * 3


def _with_input_shapes(model, fn, *args):
    """``fn(*args)`` and the ``input_ids`` shape of each forward call of ``model`` in it."""
    shapes = []
    hook = model.register_forward_pre_hook(
        lambda _, a, kw: shapes.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        return fn(*args), shapes
    finally:
        hook.remove()


@pytest.mark.parametrize("m", [1, 3])
def test_readout_after_shares_the_common_prefix_and_equals_the_scoring_pass(
    tokenizer, tiny_lm, marker_lm, m
):
    """Evaluation's readout (``readout_after``): the prefix common to every row (>= 32
    tokens) runs once, the rest on its keys and values, logits at the last column only;
    ``u`` and ``logits`` equal the scoring pass's to float32 rounding (1e-5 relative,
    values of order 1-10), rows ending at the marker, at EOS and forced, options per row.
    Below 32 common tokens it is one plain pass."""
    from rlcd_lab.reader.reading import readout_after

    system = "You check sums. Think step by step, then answer.\n"
    opts = torch.tensor([[5, 6, -1], [5, 6, 7]])
    for model in (marker_lm, tiny_lm):
        r = sample_rationales(
            model, tokenizer, [system + p for p in PROMPTS], m=m, max_new_tokens=12, seed=0
        )
        (u, z), shapes = _with_input_shapes(model, readout_after, model, r, opts)
        assert shapes[0] == (1, len(system + "Q: ")) and len(shapes) == 2  # common to all rows
        with torch.no_grad():
            u_ref, z_ref, _ = score_rationales(model, r, opts, share_prompts=False)
        torch.testing.assert_close(u, u_ref, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(z, z_ref, atol=1e-5, rtol=1e-5)
        assert torch.isinf(z[: m * 1, 2]).all()  # the first prompt's absent third option
    short = sample_rationales(tiny_lm, tokenizer, PROMPTS, m=m, max_new_tokens=8, seed=0)
    assert _forward_calls(tiny_lm, short) == [tuple(short.input_ids.shape)]
    u, z = readout_after(tiny_lm, short, [5, 6])
    with torch.no_grad():
        torch.testing.assert_close(
            z, score_rationales(tiny_lm, short, [5, 6])[1], atol=1e-5, rtol=1e-5
        )


@pytest.mark.parametrize("system", ["", "You check sums. Think step by step, then answer.\n"])
@pytest.mark.parametrize("m", [1, 3])
def test_readout_on_the_samplers_prompt_cache_equals_the_scoring_pass(
    tokenizer, tiny_lm, marker_lm, m, system
):
    """``sample_rationales(keep_prompt=True)`` keeps each row's keys and values after its
    prompt and the rationale tokens it fed the model (all it drew but the last; with and
    without a shared prefix in the prefill, rows leaving the batch at the marker, at EOS
    or running to the limit); ``readout_after`` then runs only what the cache lacks (one
    call, as wide as the longest such rest: the last drawn token if kept, the marker's
    rest, the bridge) and equals the scoring pass to float32 rounding; ``read`` takes that
    path by default."""
    from rlcd_lab.reader.decoding import kv_sampler
    from rlcd_lab.reader.reading import read, readout_after

    opts = torch.tensor([[5, 6, -1], [5, 6, 7]])
    drawn = []

    def spy(*args, **kwargs):  # the tokens each row drew
        out = kv_sampler(*args, **kwargs)
        w = out.tokens.shape[1]
        drawn.extend(int(e) if e >= 0 else w for e in out.end.tolist())
        return out

    for model in (marker_lm, tiny_lm):
        prompts = [system + p for p in PROMPTS]
        kw = dict(m=m, max_new_tokens=12, seed=0)
        drawn.clear()
        r = sample_rationales(model, tokenizer, prompts, keep_prompt=True, sampler=spy, **kw)
        assert r.prompt_cache is not None
        plain = sample_rationales(model, tokenizer, prompts, **kw)
        assert plain.prompt_cache is None and plain.texts == r.texts
        (u, z), shapes = _with_input_shapes(model, readout_after, model, r, opts)
        after_prompt = r.attention_mask.sum(1) - r.prompt_len
        cached = torch.minimum(torch.tensor(drawn) - 1, r.lengths)
        assert shapes == [(len(r.texts), int((after_prompt - cached).max()))]
        assert shapes[0][1] < int(after_prompt.max())  # the rationales are not read again
        with torch.no_grad():
            u_ref, z_ref, _ = score_rationales(model, plain, opts, share_prompts=False)
        torch.testing.assert_close(u, u_ref, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(z, z_ref, atol=1e-5, rtol=1e-5)
    labels = [["Y", "N"], ["Y", "N", "Q"]]
    readings = read(marker_lm, tokenizer, [system + p for p in PROMPTS], labels, m=m, seed=3)
    r, ids = sample_questions(
        marker_lm, tokenizer, [system + p for p in PROMPTS], labels, m, 64,
        seed=[mix_seed(3, i) for i in range(2)],
    )  # fmt: skip
    with torch.no_grad():
        _, z_ref, _ = score_rationales(marker_lm, r, ids)
    got = torch.cat(
        [
            torch.nn.functional.pad(x.logits, (0, 3 - x.logits.shape[1]), value=-math.inf)
            for x in readings
        ]
    )
    torch.testing.assert_close(got, z_ref, atol=1e-5, rtol=1e-5)


def test_the_reader_says_why_its_T_is_not_fitted(tiny_lm, tokenizer):
    """``T_note``: the reason ``temperature_fitted`` gives, empty for a fitted or explicit T."""
    from rlcd_lab.reader import Reader

    base = Reader(tiny_lm, tokenizer, {"method": "pretrain", "T": 1.0})
    assert (base.T_fitted, base.T_note) == (
        False,
        "method pretrain: a base model, never calibrated",
    )
    assert Reader(tiny_lm, tokenizer, {}).T_note == "no T in rlcd.json"
    assert Reader(tiny_lm, tokenizer, {"method": "calibrate", "T": 1.3}).T_note == ""
    assert Reader(tiny_lm, tokenizer, {"method": "pretrain"}, T=2.0).T_note == ""


def test_readout_after_masks_cached_tokens_the_rationale_does_not_keep(tokenizer, marker_lm):
    """A rationale cut inside a merged marker token keeps fewer tokens than the sampler fed
    the model: ``readout_after`` masks the cached columns past the kept ones and reads the
    row as it stands. Here every row's last kept token is taken out of its sequence (its
    keys and values stay in the cache): the readout equals the one without the cache."""
    from dataclasses import replace

    from rlcd_lab.reader.prompts import left_pad
    from rlcd_lab.reader.reading import readout_after

    opts = torch.tensor([[5, 6, -1], [5, 6, 7]])
    kw = dict(m=3, max_new_tokens=12, seed=0, keep_prompt=True)
    r = sample_rationales(marker_lm, tokenizer, PROMPTS, **kw)
    assert (r.lengths > 0).all()
    rows = [
        row[mask.bool()].tolist() for row, mask in zip(r.input_ids, r.attention_mask, strict=True)
    ]
    for row, p, n in zip(rows, r.prompt_len.tolist(), r.lengths.tolist(), strict=True):
        del row[p + n - 1]
    ids, mask = left_pad(rows, 0, "cpu")
    short = replace(r, input_ids=ids, attention_mask=mask, lengths=r.lengths - 1)
    u, z = readout_after(marker_lm, short, opts)
    u_ref, z_ref = readout_after(marker_lm, replace(short, prompt_cache=None), opts)
    torch.testing.assert_close(u, u_ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(z, z_ref, atol=1e-5, rtol=1e-5)
    full_u, _ = readout_after(marker_lm, replace(r, prompt_cache=None), opts)
    assert not torch.allclose(u, full_u, atol=1e-4)  # the dropped tokens mattered


def test_a_loaded_adapter_is_read_merged_with_its_own_texts(tmp_path, tokenizer, marker_lm):
    """``Reader.load`` (the server's path) and the dashboard's ``load_reader`` merge a LoRA
    adapter into its weights once, at load (``loading.merge_adapter``): a plain model,
    whose readings have the adapter's own rationale texts and readouts within float32
    rounding (1e-5) of reading through the PeftModel."""
    from peft import LoraConfig, PeftModel, get_peft_model

    from rlcd_lab.dashboard import ask_tab
    from rlcd_lab.lm.checkpoint import save_checkpoint
    from rlcd_lab.lm.loading import load_checkpoint
    from rlcd_lab.reader import Reader

    base = save_checkpoint(tmp_path / "base", copy.deepcopy(marker_lm), tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        lora = get_peft_model(
            load_checkpoint(base)[0], LoraConfig(r=2, target_modules="all-linear")
        )
        for name, p in lora.named_parameters():
            if "lora_B" in name:  # B = 0 at initialisation: give the adapter an effect
                torch.nn.init.normal_(p, std=0.05)
    adapter = save_checkpoint(tmp_path / "adapter", lora, tokenizer)
    peft_model, tok, meta = load_checkpoint(adapter)
    assert isinstance(peft_model, PeftModel)
    reader = Reader.load(adapter)
    assert not isinstance(reader.model, PeftModel) and not reader.model.training
    served = ask_tab.load_reader(str(adapter)).model
    assert not isinstance(served, PeftModel)
    labels = [["Y", "N"]] * len(PROMPTS)
    want = Reader(peft_model, tok, meta).read(PROMPTS, labels, m=3, max_new_tokens=12)
    got = reader.read(PROMPTS, labels, m=3, max_new_tokens=12)
    assert [r.texts for r in got] == [r.texts for r in want]
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=1e-5)
    plain = Reader(marker_lm, tok, meta).read(PROMPTS, labels, m=3, max_new_tokens=12)
    assert any(  # the adapter changes the readings
        not torch.allclose(a.logits, b.logits, atol=1e-3) for a, b in zip(plain, want, strict=True)
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_token_log_probs_is_cross_entropy(dtype):
    """``TokenLogProbs`` returns ``-F.cross_entropy(reduction="none")``'s values bit for
    bit, and its gradient ``g (onehot - softmax)`` is within the rounding of the dtype:
    both it and autograd's cross-entropy gradient lie within the bound of the exact one
    (in float64 from the same inputs) that rounding allows: ``log p = x - lse`` is off by
    about ``eps (|x| + |lse|)``, so ``p`` by that relative error plus its own (``eps``),
    and the product with ``g`` and the sum add ``eps |g|`` each; twice that is asserted."""
    import torch.nn.functional as F

    from rlcd_lab.reader.reading import TokenLogProbs

    gen = torch.Generator().manual_seed(0)
    x = (4 * torch.randn(40, 3000, generator=gen, dtype=dtype)).requires_grad_()
    t = torch.randint(0, 3000, (40,), generator=gen)
    g = torch.randn(40, generator=gen, dtype=dtype)
    got = TokenLogProbs.apply(x, t)
    (grad,) = torch.autograd.grad(got, x, g)
    want = -F.cross_entropy(x, t, reduction="none")
    (want_grad,) = torch.autograd.grad(want, x, g)
    assert torch.equal(got, want)
    xd, gd, eps = x.detach().double(), g.double()[:, None], torch.finfo(dtype).eps
    p, lse = xd.softmax(-1), xd.logsumexp(-1, keepdim=True)
    exact = -p * gd
    exact[torch.arange(40), t] += g.double()
    bound = 2 * eps * gd.abs() * (p * (xd.abs() + lse.abs() + 1) + 2)
    assert ((grad.double() - exact).abs() <= bound).all()
    assert ((want_grad.double() - exact).abs() <= bound).all()


def test_last_column_logits_come_from_a_contiguous_block(tokenizer, tiny_lm):
    """Where only each row's last logits are wanted (``readout.keep_last``: the readout,
    the sampler's prefill), the output layer gets the rows' last hidden states as one
    contiguous block (a strided slice makes the CPU's product read the whole output
    matrix once per row), and the readout equals the one read from all logits up to
    float32 rounding."""
    from rlcd_lab.reader.decoding import kv_sampler
    from rlcd_lab.reader.prompts import encode_prompts, left_pad
    from rlcd_lab.reader.readout import option_logits, position_ids, readout

    seen = []
    head = tiny_lm.get_output_embeddings()
    hook = head.register_forward_pre_hook(lambda _, args: seen.append(args[0].is_contiguous()))
    ids, mask = left_pad(encode_prompts(tokenizer, ["Q: 1?", "Q: 12+3?", "Q: ab"]), 0, "cpu")
    opts = torch.tensor([5, 6, 7])
    try:
        with torch.no_grad():
            u, logits = readout(tiny_lm, ids, mask, opts)
            kv_sampler(tiny_lm, tokenizer, ids, mask, row_seeds=[0, 1, 2], max_new_tokens=2,
                       marker=None, eos=[])  # fmt: skip
    finally:
        hook.remove()
    assert len(seen) >= 2 and all(seen)
    with torch.no_grad():
        full = tiny_lm(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask))
    want = option_logits(full.logits[:, -1], opts)
    torch.testing.assert_close(logits, want, atol=1e-5 * float(want.abs().max()), rtol=1e-5)
