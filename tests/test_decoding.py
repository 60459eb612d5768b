"""``decoding.kv_sampler`` against ``reader.hf_sampler`` (``generate``): the same tokens,
stops and log-probs for the same batch and seeds."""

from __future__ import annotations

import pytest
import torch

from rlcd_lab.reader import decoding, llama
from rlcd_lab.reader.decoding import kv_sampler, prompt_groups
from rlcd_lab.reader.prompts import build_prompt, encode_prompts, left_pad
from rlcd_lab.reader.rationales import default_sampler, hf_sampler, mix_seed, sample_rationales
from rlcd_lab.reader.sampling import Generated, SamplingStopped, pad_id

MARKER = "Answer:"
# the marker model writes "ab Answer: Y" / "ab Answer: N" after the first two prompts;
# the others (and any prompt for the random tiny model) run on to EOS or the token limit
PROMPTS = ["Q: 1?\n", "Q: 22?\n", "Q: 4444?\n", "A much longer question?\n"]


def batch(tokenizer, prompts, m: int, seed: int):
    """The sampler call ``sample_rationales`` makes: left-padded prompts repeated m times."""
    ids, mask = left_pad(encode_prompts(tokenizer, prompts), pad_id(tokenizer), "cpu")
    seeds = [mix_seed(mix_seed(seed, i), j) for i in range(len(prompts)) for j in range(m)]
    return ids.repeat_interleave(m, 0), mask.repeat_interleave(m, 0), seeds


def assert_same(ref: Generated, out: Generated, lp_tol: float = 1e-5) -> None:
    assert torch.equal(out.end, ref.end)
    assert torch.equal(out.hit_marker, ref.hit_marker)
    assert out.tokens.shape == ref.tokens.shape
    for i in range(len(ref.end)):
        n = int(ref.end[i]) if ref.end[i] >= 0 else ref.tokens.shape[1]
        assert out.tokens[i, :n].tolist() == ref.tokens[i, :n].tolist(), f"row {i}"
        torch.testing.assert_close(
            out.token_lp[i, :n], ref.token_lp[i, :n], atol=lp_tol, rtol=lp_tol
        )


def both(model, tokenizer, prompts, m, seed, max_new_tokens=24, **kw):
    ids, mask, seeds = batch(tokenizer, prompts, m, seed)
    eos = [model.generation_config.eos_token_id]
    args = dict(row_seeds=seeds, max_new_tokens=max_new_tokens, marker=MARKER, eos=eos, **kw)
    return (
        hf_sampler(model, tokenizer, ids, mask, **args),
        kv_sampler(model, tokenizer, ids, mask, **args),
    )


def kinds(g: Generated) -> set[str]:
    """How the rows ended: 'marker', 'eos', 'limit'."""
    return {
        "limit" if e < 0 else "marker" if hit else "eos"
        for e, hit in zip(g.end.tolist(), g.hit_marker.tolist(), strict=True)
    }


@pytest.mark.parametrize("m", [1, 4])
@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 1.0), (1.0, 0.9)])
def test_same_tokens_as_generate(tokenizer, tiny_lm, marker_lm, m, temperature, top_p):
    """Several seeds, prompts of different lengths, both tiny models: identical tokens,
    stops and log-probs, with rows ending at the marker, at EOS and at the token limit
    while others go on."""
    seen = set()
    for model in (marker_lm, tiny_lm):
        for seed in range(3):
            ref, out = both(
                model, tokenizer, PROMPTS, m, seed, sampling_temperature=temperature, top_p=top_p
            )
            assert_same(ref, out)
            seen |= kinds(ref)
            if model is marker_lm:  # some rows stop at the marker while others go on
                assert ref.hit_marker.any() and (ref.end != ref.end.max()).any()
    assert seen == {"marker", "eos", "limit"}


def test_the_first_step_can_stop_everything(tokenizer, marker_lm):
    """``max_new_tokens`` 1 and 2: the shortest loops give generate's output too."""
    for limit in (1, 2):
        ref, out = both(marker_lm, tokenizer, PROMPTS[:2], 2, 0, max_new_tokens=limit)
        assert ref.tokens.shape[1] == limit
        assert_same(ref, out)


def test_unpadded_batch_and_unrepeated_prompts(tokenizer, marker_lm):
    """Prompts of one length (no attention mask at all, as generate passes none) and
    a prompt repeated non-consecutively (encoded twice, still the same rows)."""
    same_length = ["Q: 1?\n", "Q: 2?\n", "Q: 1?\n"]
    ref, out = both(marker_lm, tokenizer, same_length, 2, 1)
    assert_same(ref, out)


@pytest.fixture()
def one_thread():
    """Bit-for-bit claims hold for one CPU thread (with more, the math library may split a
    product differently for different shapes); ``make test`` leaves torch's default."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_fast_steps_are_used_when_bit_identical(tokenizer, marker_lm, monkeypatch, one_thread):
    """A plain LlamaForCausalLM decodes through ``llama.LlamaSteps`` after the first step
    exactly when that step's logits equal the model's own forward pass bit for bit (a
    run-time check on the machine it runs on: whether they are equal depends on the CPU
    kernel), and either way gives generate's tokens with its log-probs."""
    calls, fast_out, step_out = [], [], []
    fast_call, step_call = llama.LlamaSteps.__call__, decoding._Steps.__call__

    def fast(self, *args):
        calls.append(1)
        fast_out.append(fast_call(self, *args))
        return fast_out[-1]

    def step(self, *args):
        step_out.append(step_call(self, *args))
        return step_out[-1]

    monkeypatch.setattr(llama.LlamaSteps, "__call__", fast)
    monkeypatch.setattr(decoding._Steps, "__call__", step)
    ref, out = both(marker_lm, tokenizer, PROMPTS, 4, 0, max_new_tokens=30)
    # the first decoding step returns the model's own logits, computed beside the fast ones
    kept = torch.equal(fast_out[0], step_out[0])
    assert len(calls) == (ref.tokens.shape[1] - 1 if kept else 1)
    assert_same(ref, out, lp_tol=1e-6)  # a few float32 ulps of |log-prob| < 10


def test_fast_steps_not_kept_when_they_differ(tokenizer, marker_lm, monkeypatch, one_thread):
    """When the fast steps' first logits differ from the model's forward pass in the last
    bit, the model's forward runs every step: still generate's tokens."""
    calls = []
    real = llama.LlamaSteps.__call__

    def off_by_a_bit(self, *args):
        calls.append(1)
        return torch.nextafter(real(self, *args), torch.tensor(float("inf")))

    monkeypatch.setattr(llama.LlamaSteps, "__call__", off_by_a_bit)
    ref, out = both(marker_lm, tokenizer, PROMPTS, 4, 0, max_new_tokens=30)
    assert_same(ref, out, lp_tol=0.0)
    assert len(calls) == 1


def test_peft_wrapped_model(tokenizer, marker_lm):
    """A LoRA adapter (non-zero, so it changes the logits) on the marker model: the
    model's own forward with a KV cache gives generate's tokens."""
    import copy

    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    model = get_peft_model(copy.deepcopy(marker_lm), lora).eval()
    assert not llama.LlamaSteps.supports(model)
    ref, out = both(model, tokenizer, PROMPTS, 4, 2)
    assert_same(ref, out)
    plain, _ = both(marker_lm, tokenizer, PROMPTS, 4, 2)
    assert not torch.equal(plain.token_lp, ref.token_lp)  # the adapter did something


def test_default_sampler_is_kv_sampler(tokenizer, marker_lm):
    """``sample_rationales`` without a sampler uses ``kv_sampler`` for a transformers
    model and gives what it gives with ``hf_sampler``."""
    assert default_sampler(marker_lm) is kv_sampler
    assert default_sampler(object()) is hf_sampler  # e.g. an object offering only generate
    args = (marker_lm, tokenizer, PROMPTS, 3, 20)
    fast = sample_rationales(*args, seed=4)
    slow = sample_rationales(*args, seed=4, sampler=hf_sampler)
    assert torch.equal(fast.input_ids, slow.input_ids) and fast.texts == slow.texts
    assert torch.equal(fast.forced, slow.forced) and torch.equal(fast.eos_col, slow.eos_col)
    torch.testing.assert_close(fast.logp_r, slow.logp_r, atol=1e-5, rtol=1e-5)


def test_prompt_groups():
    ids = torch.tensor([[0, 5], [0, 5], [6, 5], [0, 5], [0, 5]])
    mask = torch.tensor([[0, 1], [0, 1], [1, 1], [0, 1], [1, 1]])
    first, group = prompt_groups(ids, mask)
    assert first.tolist() == [True, False, True, True, True]  # same ids, other mask: new
    assert group.tolist() == [0, 0, 1, 2, 3]


def test_bad_arguments(tokenizer, tiny_lm):
    ids, mask, seeds = batch(tokenizer, PROMPTS[:1], 2, 0)
    kw = dict(marker=MARKER, eos=[2])
    with pytest.raises(ValueError, match="row seeds"):
        kv_sampler(tiny_lm, tokenizer, ids, mask, row_seeds=seeds[:1], max_new_tokens=4, **kw)
    with pytest.raises(ValueError, match="max_new_tokens"):
        kv_sampler(tiny_lm, tokenizer, ids, mask, row_seeds=seeds, max_new_tokens=0, **kw)


def test_smollm2_same_tokens_as_generate(smollm2_dir):
    """SmolLM2-135M-Instruct (grouped-query attention, byte-level BPE, chat prompts with
    the few-shot example): 2 prompts x 4 rows, 16 tokens, rows ending at the marker, at
    EOS and at the limit; identical tokens and stops, log-probs within 1e-5."""
    from rlcd_lab.lm.loading import load_checkpoint

    model, tok, meta = load_checkpoint(smollm2_dir)
    prompts = [
        build_prompt(tok, q, marker=meta["marker"], options=("yes", "no"))
        for q in ("Is 7 a prime number?", "Is the sky green?")
    ]
    ids, mask, seeds = batch(tok, prompts, 4, 0)
    args = dict(row_seeds=seeds, max_new_tokens=16, marker=meta["marker"], eos=[2])
    ref = hf_sampler(model, tok, ids, mask, **args)
    out = kv_sampler(model, tok, ids, mask, **args)
    assert kinds(ref) == {"marker", "eos", "limit"}
    assert_same(ref, out)


@pytest.mark.parametrize("sampler", [kv_sampler, hf_sampler])
def test_should_stop_ends_sampling_within_one_step(tokenizer, tiny_lm, sampler):
    """Cancellable decoding: once ``should_stop()`` turns true, no further forward pass runs
    and ``SamplingStopped`` is raised (a client that left no longer costs the server
    the rest of its rationales); while it stays false, the tokens are unchanged."""
    ids, mask, seeds = batch(tokenizer, PROMPTS, 2, 0)
    args = dict(row_seeds=seeds, max_new_tokens=40, marker=MARKER, eos=[])
    forwards: list[int] = []
    handle = tiny_lm.register_forward_pre_hook(lambda *_: forwards.append(1))
    try:
        with pytest.raises(SamplingStopped):
            sampler(tiny_lm, tokenizer, ids, mask, should_stop=lambda: len(forwards) >= 5, **args)
        assert len(forwards) == 5  # the pass that made it true was the last
    finally:
        handle.remove()
    ref = sampler(tiny_lm, tokenizer, ids, mask, **args)
    assert_same(ref, sampler(tiny_lm, tokenizer, ids, mask, should_stop=lambda: False, **args))


def test_sample_rationales_passes_should_stop_only_when_given(tokenizer, marker_lm):
    seen: list[set] = []

    def plain(model, tok, ids, mask, **kw):  # a sampler that predates should_stop
        seen.append(set(kw))
        return hf_sampler(model, tok, ids, mask, **kw)

    rats = sample_rationales(marker_lm, tokenizer, ["Q: 1?\n"], 2, 16, seed=0, sampler=plain)
    assert "should_stop" not in seen[-1] and rats.texts == ["ab", "ab"]
    with pytest.raises(SamplingStopped):
        sample_rationales(
            marker_lm, tokenizer, ["Q: 1?\n"], 2, 8, seed=0, sampler=plain, should_stop=lambda: True
        )
    assert "should_stop" in seen[-1]


SHARED = "You check sums. Think step by step, then answer.\n"  # 49 tokens: above the rule


@pytest.mark.parametrize("model_name", ["marker_lm", "tiny_lm"])
def test_a_shared_prompt_prefix_is_encoded_once_with_generate_s_tokens(
    tokenizer, model_name, request, monkeypatch
):
    """Prompts starting with the same system text (>= SHARE_MIN_PROMPT tokens, of unequal
    lengths after it): the prefix runs once (a prefill call of one row), and the tokens,
    stops and log-probs are generate's, rows stopping at different steps."""
    from rlcd_lab.reader.sampling import SHARE_MIN_PROMPT

    model = request.getfixturevalue(model_name)
    prompts = [SHARED + p for p in PROMPTS]
    assert len(SHARED) >= SHARE_MIN_PROMPT
    ids, mask, seeds = batch(tokenizer, prompts, 3, 1)
    args = dict(row_seeds=seeds, max_new_tokens=20, marker=MARKER, eos=[2])
    ref = hf_sampler(model, tokenizer, ids, mask, **args)
    shapes = []
    handle = model.register_forward_pre_hook(
        lambda _, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)),
        with_kwargs=True,
    )
    try:
        out = kv_sampler(model, tokenizer, ids, mask, **args)
    finally:
        handle.remove()
    assert_same(ref, out)
    rest = max(len(p) for p in PROMPTS)
    assert shapes[:2] == [(1, len(SHARED)), (len(PROMPTS), rest)]  # prefix once, then rests


def test_the_shared_prefix_needs_the_rule_s_length(tokenizer, marker_lm, monkeypatch):
    """A common prefix shorter than SHARE_MIN_PROMPT runs in one prefill call."""
    calls = []
    monkeypatch.setattr(decoding._Steps, "_prefill_shared", lambda *a: calls.append(a))
    both(marker_lm, tokenizer, ["Q: 1?\n", "Q: 22?\n"], 2, 0, max_new_tokens=4)
    assert calls == []
