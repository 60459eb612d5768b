"""The copy sampling paths (``--sampler bf16`` and ``fast``, ``decoding.CopySampler``): a
merged copy of the weights (bfloat16, or float32 with its matrices packed for oneDNN)
draws the rationales; the trained float32 model scores them.

Stated tolerances (the shipped verify base, 32 test questions x 4 rationales, 48 tokens;
measured on an AMD EPYC with avx512_bf16: 253 of 256 rationales identical on 64
questions, the copy's readout within 7e-6 of float32's, its log pi(r) within 0.14):
at least 90% of the rationales identical to the float32 draw, the copy's own readout
within 1e-3 of float32's. Packed float32 steps (``llama.PackedLinears``): logits within
1e-5 of the model's own (relative, whole batch; measured 7e-7 on SmolLM2), at least 95% of
the rationales identical. What the estimator uses (the readout and log pi(r) of the
trained model) stays float32 and bit-equal to the float32 path on identical rationales.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from rlcd_lab.files.assets import ASSETS
from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.reader import decoding, llama
from rlcd_lab.reader.decoding import CopySampler, _Steps, kv_sampler, plain_copy
from rlcd_lab.reader.llama import PackedLinears, _attention
from rlcd_lab.reader.prompts import build_prompt, encode_prompts, left_pad
from rlcd_lab.reader.rationales import eos_ids, mix_seed, sample_questions
from rlcd_lab.reader.reading import score_rationales
from rlcd_lab.reader.sampling import pad_id
from rlcd_lab.tasks import load_task_items

BASE = ASSETS / "checkpoints" / "base-verify"


@pytest.fixture(scope="module")
def verify_base():
    return load_checkpoint(BASE, "cpu")


def draws(model, tok, meta, sampler, n=32):
    items = load_task_items("verify", "test")[:n]
    return sample_questions(
        model, tok, [it.prompt for it in items], [it.options for it in items], 4, 48,
        marker=meta["marker"], sep=meta["sep"], seed=0, sampler=sampler,
    )  # fmt: skip


def test_bf16_draw_is_scored_in_float32(verify_base):
    model, tok, meta = verify_base
    r32, opt32 = draws(model, tok, meta, kv_sampler)
    r16, opt16 = draws(model, tok, meta, CopySampler(torch.bfloat16))
    same = torch.tensor([a == b for a, b in zip(r32.texts, r16.texts, strict=True)])
    assert same.float().mean() >= 0.9, f"{int(same.sum())} of {len(same)} identical"
    with torch.no_grad():
        u32, logits32, lp32 = score_rationales(model, r32, opt32)
        u16, logits16, lp16 = score_rationales(model, r16, opt16)
    for t in (u16, logits16, lp16):
        assert t.dtype == torch.float32
    assert next(model.parameters()).dtype == torch.float32  # the copy never touched it
    assert torch.equal(u16[same], u32[same]) and torch.equal(lp16[same], lp32[same])
    copy16 = plain_copy(model, torch.bfloat16)
    with torch.no_grad():
        u_copy = score_rationales(copy16, r32, opt32)[0].float()
    assert (u_copy - u32).abs().max() <= 1e-3


def test_plain_copy_merges_a_lora_adapter(tokenizer, tiny_lm):
    """The merged copy computes what the adapter-wrapped model computes (float32, to
    rounding), as a plain frozen transformers model."""
    from peft import LoraConfig, PeftModel, get_peft_model

    torch.manual_seed(0)
    lora = get_peft_model(copy.deepcopy(tiny_lm), LoraConfig(r=2, target_modules="all-linear"))
    for name, p in lora.named_parameters():
        if "lora_B" in name:  # B = 0 at initialisation: give the adapter an effect
            torch.nn.init.normal_(p, std=0.5)
    merged = plain_copy(lora, torch.float32)
    assert not isinstance(merged, PeftModel) and type(merged) is type(tiny_lm)
    assert not any(p.requires_grad for p in merged.parameters()) and not merged.training
    ids = tokenizer("Q: 12?\nab Answer:", return_tensors="pt").input_ids
    with torch.no_grad():
        want, got = lora(ids).logits, merged(ids).logits
        assert not torch.allclose(want, tiny_lm(ids).logits, atol=1e-3)  # the adapter acts
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_plain_copy_of_lora_is_the_merged_deep_copy_sharing_frozen_weights(tokenizer, tiny_lm):
    """A LoRA model's copy is built without copying the wrapper (``merged_lora_copy``):
    the same tensors, bit for bit, as merging a deep copy (peft's ``merge_and_unload``),
    tied weights still tied, the frozen weights shared with the model (not copied) and the
    trained ones copied; the model itself is left as it was. An adapter it does not cover
    (DoRA) is merged from a deep copy."""
    from peft import LoraConfig, get_peft_model

    from rlcd_lab.lm.loading import merge_adapter, merged_lora_copy

    lora = lora_on(tiny_lm, r=2).train()
    trained = {n: p.detach().clone() for n, p in lora.named_parameters() if p.requires_grad}
    got, want = plain_copy(lora, torch.float32), merge_adapter(copy.deepcopy(lora))
    a, b = got.state_dict(), want.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert got.generation_config.to_dict() == want.generation_config.to_dict()
    assert got.get_output_embeddings().weight is got.get_input_embeddings().weight
    assert not any(p.requires_grad for p in got.parameters()) and not got.training
    base = dict(lora.get_base_model().named_parameters())
    assert got.model.norm.weight.data_ptr() == base["model.norm.weight"].data_ptr()
    q = "model.layers.0.self_attn.q_proj"
    assert got.get_parameter(f"{q}.weight").data_ptr() != base[f"{q}.base_layer.weight"].data_ptr()
    now = {n: p for n, p in lora.named_parameters() if p.requires_grad}
    assert now.keys() == trained.keys() and all(torch.equal(now[n], trained[n]) for n in now)
    ids = tokenizer("Q: 12?\nab Answer:", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(got(ids).logits, want(ids).logits)
    torch.manual_seed(0)
    dora = LoraConfig(r=2, target_modules="all-linear", use_dora=True)
    dora_model = get_peft_model(copy.deepcopy(tiny_lm), dora)
    assert merged_lora_copy(dora_model) is None
    assert type(plain_copy(dora_model, torch.float32)) is type(tiny_lm)


def lora_on(model, r=4, seed=0):
    """``model`` wrapped in a LoRA adapter on every linear layer, ``B`` drawn non-zero (at
    PEFT's initialisation ``B = 0`` and the adapter does nothing)."""
    from peft import LoraConfig, get_peft_model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        lora = get_peft_model(copy.deepcopy(model), LoraConfig(r=r, target_modules="all-linear"))
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.02)
    return lora.eval()


def parts_at_a_near_tie(lora, merged, tok, ids, mask, seeds, ref, out, tol=1e-4) -> bool:
    """Whether every row where ``out``'s tokens differ from ``ref``'s parts at a near tie:
    at the first differing token, the two tokens' noisy scores under the adapter
    (``logits + Gumbel noise`` of the row's own generator, temperature 1) are within
    ``tol`` of each other, and the merged copy's logits there are within ``tol`` of the
    adapter's (a flip by rounding, never a different distribution)."""
    for i in range(len(ref.tokens)):
        a, b = ref.tokens[i].tolist(), out.tokens[i].tolist()
        t = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        if t is None:
            continue
        row = torch.cat([ids[i][mask[i].bool()], ref.tokens[i, :t]])[None]
        with torch.no_grad():
            za, zb = lora(row).logits[0, -1], merged(row).logits[0, -1]
        gen = torch.Generator().manual_seed(seeds[i])
        u = [torch.rand(za.shape[-1], generator=gen) for _ in range(t + 1)][-1]
        score = za - torch.log(-torch.log(u))
        if abs(score[a[t]] - score[b[t]]) > tol or (za - zb).abs().max() > tol:
            return False
    return True


@pytest.mark.parametrize("packed", [False, True])
def test_training_draws_from_a_merged_copy(verify_base, monkeypatch, packed):
    """``--sampler hf`` on a LoRA model draws from a float32 copy with the adapter merged
    (``decoding.merged_sampler``, packed for oneDNN at ``FAST_MIN_PARAMS`` parameters and
    more), made once per step, and writes the adapter's own rationales: token for token
    what ``kv_sampler`` draws from the PeftModel, a row allowed to part only at a near tie
    of the adapter's noisy scores (``parts_at_a_near_tie``; the merged logits differ from
    the adapter's by float32 reassociation, about 1e-6). A plain model, or a forward
    wrapped on the instance (``--bf16``), keeps drawing from the model itself."""
    from rlcd_lab.methods.configs import SamplingConfig
    from rlcd_lab.train.common import pick_sampler

    model, tok, meta = verify_base
    if packed:
        if not PackedLinears.available(model):
            pytest.skip("no oneDNN float32 products")
        monkeypatch.setattr(decoding, "FAST_MIN_PARAMS", 0)
    lora = lora_on(model)
    sampler = pick_sampler(SamplingConfig(sampler="hf"), lora)
    assert isinstance(sampler, CopySampler) and sampler.dtype == torch.float32
    assert sampler.pack is packed
    assert pick_sampler(SamplingConfig(sampler="hf"), model) is kv_sampler
    items = load_task_items("verify", "test")[:16]
    prompts = [build_prompt(tok, it.prompt, marker=meta["marker"]) for it in items]
    ids, mask = left_pad(encode_prompts(tok, prompts), pad_id(tok), "cpu")
    ids, mask = ids.repeat_interleave(4, 0), mask.repeat_interleave(4, 0)
    seeds = [mix_seed(mix_seed(3, i), j) for i in range(len(items)) for j in range(4)]
    args = dict(row_seeds=seeds, max_new_tokens=48, marker=meta["marker"], eos=eos_ids(model))
    ref = kv_sampler(lora, tok, ids, mask, **args)
    out = sampler(lora, tok, ids, mask, **args)
    assert not isinstance(sampler.copy, type(lora)) and sampler.copy.training is False
    assert (sampler.packed is not None) is packed
    assert parts_at_a_near_tie(lora, sampler.copy, tok, ids, mask, seeds, ref, out)
    plain = kv_sampler(model, tok, ids, mask, **args)
    assert not torch.equal(plain.tokens, ref.tokens)  # the adapter changes the draw
    made = sampler.copy
    sampler(lora, tok, ids[:4], mask[:4], **{**args, "row_seeds": seeds[:4]})
    assert sampler.copy is made  # once per step: the next copy waits for ``sync``
    assert pick_sampler(SamplingConfig(sampler="hf"), wrapped(lora)) is kv_sampler


def test_pack_frozen_scores_within_the_packed_rounding(verify_base, monkeypatch):
    """Training's KL anchor multiplies through oneDNN's packed matrices
    (``decoding.pack_frozen``, ``PackedLinears.bind``) from ``FAST_MIN_PARAMS``
    parameters on: its logits agree with the plain products' (``PackedLinears.agrees``,
    1e-5 of their norm), so each rationale's ``log pi_ref(r)``, a sum over its ``n``
    tokens, lies within ``n`` times 1e-5 of the largest logit of the plain one. A smaller
    model is returned untouched."""
    model, tok, meta = verify_base
    if not PackedLinears.available(model):
        pytest.skip("no oneDNN float32 products")
    plain = copy.deepcopy(model)
    assert decoding.pack_frozen(plain) is plain
    assert not any("forward" in vars(m) for m in plain.modules())
    monkeypatch.setattr(decoding, "FAST_MIN_PARAMS", 0)
    packed = decoding.pack_frozen(copy.deepcopy(model))
    linears = [m for m in packed.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all("forward" in vars(m) for m in linears)
    rats, opts = draws(model, tok, meta, None, n=8)
    with torch.no_grad():
        want, got = model(rats.input_ids).logits, packed(rats.input_ids).logits
        assert PackedLinears(model).agrees(got, want)
        lp, lp_packed = (
            score_rationales(model, rats, opts)[2],
            score_rationales(packed, rats, opts)[2],
        )
    bound = rats.logp_mask.sum(1) * 1e-5 * want.abs().max()
    assert ((lp_packed - lp).abs() <= bound).all()


def test_evaluation_reads_a_packed_merged_copy(verify_base, monkeypatch):
    """``run_eval`` of a LoRA model from ``FAST_MIN_PARAMS`` parameters on reads through
    the merged copy with its matrices packed (``decoding.pack_frozen``): the prompts, the
    decoding steps (``LlamaSteps`` on the bound packing, ``llama.bound_packing``) and the
    readouts multiply through oneDNN's products. Against the unpacked copy's evaluation
    (the tiny model's own, under ``FAST_MIN_PARAMS``): the same rationales but where
    rounding reverses a near tie (the sampler-level bound is
    ``test_training_draws_from_a_merged_copy``; at most one row of 32 here), readouts
    within the packed rounding (1e-4 of the logits); the caller's model is left as it
    was."""
    from rlcd_lab import evaluate

    model, tok, meta = verify_base
    if not PackedLinears.available(model):
        pytest.skip("no oneDNN float32 products")
    lora = lora_on(model)
    items = load_task_items("verify", "test")[:16]
    kw = dict(m=2, max_new_tokens=48, seed=0, marker=meta["marker"], sep=meta["sep"])
    want = evaluate.run_eval(lora, tok, items, **kw)
    monkeypatch.setattr(decoding, "FAST_MIN_PARAMS", 0)
    copies, fast = [], []
    monkeypatch.setattr(
        evaluate, "pack_frozen", lambda m: copies.append(decoding.pack_frozen(m)) or copies[-1]
    )
    call = decoding._Steps.__call__

    def spy(self, tokens):
        out = call(self, tokens)
        fast.append(self.fast is not None and self.fast.linear is llama._packed_linear)
        return out

    monkeypatch.setattr(decoding._Steps, "__call__", spy)
    got = evaluate.run_eval(lora, tok, items, **kw)
    [packed] = copies
    assert llama.bound_packing(packed) is not None and fast[-1]
    assert llama.bound_packing(lora) is None
    assert not any("forward" in vars(m) for m in lora.modules())
    same = 0
    for g, w in zip(got, want, strict=True):
        for j in range(2):
            if g["rationales"][j] == w["rationales"][j]:
                same += 1
                torch.testing.assert_close(
                    torch.tensor(g["logits"][j]), torch.tensor(w["logits"][j]), rtol=1e-4, atol=1e-4
                )
    assert same >= 31, same


def wrapped(lora):
    """``lora`` with its inner forward set on the instance, as ``--bf16``'s autocast does."""
    inner = lora.get_base_model()
    inner.forward = torch.autocast("cpu", dtype=torch.bfloat16)(inner.forward)
    return lora


def test_copy_follows_the_trained_weights(verify_base):
    """After ``sync`` (an optimizer step) the next draw copies the new weights."""
    model, tok, meta = copy.deepcopy(verify_base[0]), verify_base[1], verify_base[2]
    sampler = CopySampler(torch.bfloat16)
    draws(model, tok, meta, sampler, n=2)
    first = sampler.copy
    w = model.lm_head.weight
    with torch.no_grad():
        w.add_(1.0)
    draws(model, tok, meta, sampler, n=2)
    assert sampler.copy is first  # no step: no new copy
    sampler.sync()
    draws(model, tok, meta, sampler, n=2)
    assert sampler.copy is not first
    assert torch.equal(sampler.copy.lm_head.weight, w.detach().to(torch.bfloat16))


def test_training_with_the_bf16_sampler(tmp_path):
    """Two reinforce steps with ``--sampler bf16`` train the float32 weights."""
    import json

    from rlcd_lab.methods.configs import preset
    from rlcd_lab.train import train

    cfg = preset(
        "reinforce", task="verify", init=BASE, out=tmp_path / "r", steps=2, batch_size=2, m=4,
        max_new_tokens=24, eval_every=0, eval_items=4, test_items=4, device="cpu", sampler="bf16",
    )  # fmt: skip
    run = train(cfg)
    log = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]
    assert len(log) == 2 and all(r["grad_norm"] > 0 for r in log)
    trained = load_checkpoint(run / "final", "cpu")[0]
    assert next(trained.parameters()).dtype == torch.float32


needs_onednn = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN"
)


@needs_onednn
def test_packed_steps_agree_with_the_model(verify_base):
    """Packed float32 steps run the compact path and stay within 1e-5 (relative) of the
    model's own forward pass at every step; their draw is nearly the float32 one."""
    model, tok, meta = verify_base
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, model.config.vocab_size, (6, 20), generator=g)
    mask = torch.ones_like(ids)
    mask[:2, :5] = 0  # padded rows: the masked attention
    packed, exact = _Steps(model, ids, mask, 40, PackedLinears(model)), _Steps(model, ids, mask, 40)
    assert torch.equal(packed.prefill(), exact.prefill())  # the prompt: the model's own pass
    tokens = torch.randint(3, model.config.vocab_size, (6,), generator=g)
    for _ in range(12):
        a, b = packed(tokens), exact(tokens)
        assert (a - b).norm() <= 1e-5 * b.norm()
        tokens = b.argmax(-1)
    assert packed.fast is not None and packed.fast.linear is llama._packed_linear
    r32, _ = draws(model, tok, meta, kv_sampler)
    rpk, _ = draws(model, tok, meta, CopySampler(torch.float32))
    same = sum(a == b for a, b in zip(r32.texts, rpk.texts, strict=True))
    assert same >= 0.95 * len(r32.texts), f"{same} of {len(r32.texts)} identical"


@pytest.mark.parametrize("masked", [False, True])
def test_single_query_attention_is_sdpa(masked):
    """``_attention`` (scores in float32, two batched products) computes what
    ``F.scaled_dot_product_attention`` computes for one query per head, grouped heads
    on their key/value head, to float32 rounding."""
    g = torch.Generator().manual_seed(1)
    b, kv, groups, t, d = 3, 2, 3, 7, 8
    q = torch.randn(b, kv * groups, 1, d, generator=g)
    k, v = torch.randn(b, kv, t, d, generator=g), torch.randn(b, kv, t, d, generator=g)
    mask = torch.ones(b, 1, 1, t, dtype=torch.bool)
    mask[0, ..., :3] = False
    m = mask if masked else None
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3, enable_gqa=True)
    got = _attention(q.reshape(b, kv, groups, d), k, v, m, 0.3).reshape(b, -1, 1, d)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


def test_fast_sampler_keeps_small_models_exact(verify_base, monkeypatch):
    """``--sampler fast``: the model itself below ``FAST_MIN_PARAMS`` parameters (a copy
    would be slower there), else a packed copy in the machine's fast dtype."""
    model = verify_base[0]
    assert decoding.fast_sampler(model) is kv_sampler
    monkeypatch.setattr(decoding, "FAST_MIN_PARAMS", 0)
    sampler = decoding.fast_sampler(model)
    assert isinstance(sampler, CopySampler) and sampler.dtype == decoding.fast_dtype("cpu")
    assert decoding.fast_dtype("cpu") in (torch.float32, torch.bfloat16)


def test_questions_per_call_by_model_size(verify_base, monkeypatch):
    """Eval's sampler calls: 64 questions on the tiny models (overhead-bound: wider never
    hurts), ``WIDE_ROWS`` rows' worth on larger ones, at least one question."""
    model = verify_base[0]
    assert decoding.questions_per_call(model, 4) == 64
    monkeypatch.setattr(decoding, "FAST_MIN_PARAMS", 0)
    assert decoding.questions_per_call(model, 4) == decoding.WIDE_ROWS // 4
    assert decoding.questions_per_call(model, 1) == decoding.WIDE_ROWS
    assert decoding.questions_per_call(model, 10 * decoding.WIDE_ROWS) == 1
