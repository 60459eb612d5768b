"""The real-model switches of every training loop: bf16 autocast, gradient checkpointing,
LoRA, and (``gpu``-marked, skipped without CUDA) a few steps on a GPU."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from rlcd_lab.files.rundir import read_log
from rlcd_lab.methods.configs import preset
from rlcd_lab.train.common import sample_batch, setup
from rlcd_lab.train.rlcd import train

SMALL = dict(task="aleatoric", batch_size=2, m=3, max_new_tokens=5, eval_every=0, test_items=4)


def test_bf16_autocasts_forward_but_keeps_float32_weights(tmp_path, tiny_base):
    cfg = preset("reinforce", init=tiny_base, out=tmp_path / "r", bf16=True, device="cpu", **SMALL)
    s = setup(cfg, needs_ref=True)
    ids = torch.tensor([[5, 6, 7]])
    assert s.model(input_ids=ids).logits.dtype == torch.bfloat16
    assert s.ref(input_ids=ids).logits.dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in s.model.parameters())


def test_checkpointing_keeps_sampling_and_the_first_step_unchanged(tmp_path, tiny_base):
    """Sampling switches to eval mode (KV cache), so checkpointing changes nothing but memory:
    same rationales, same loss and gradient norm on the first step."""
    kw = dict(init=tiny_base, steps=1, device="cpu", lora_r=4, **SMALL)
    plain = preset("calibrate", out=tmp_path / "a", **kw)
    ckpt = preset("calibrate", out=tmp_path / "b", gradient_checkpointing=True, **kw)
    a = setup(replace(plain, out=tmp_path / "sa"), needs_ref=False)
    b = setup(replace(ckpt, out=tmp_path / "sb"), needs_ref=False)
    assert b.model.is_gradient_checkpointing and a.model.training and b.model.training
    batch = a.stream.batch(0)
    ra, rb = sample_batch(a, batch)[0], sample_batch(b, batch)[0]
    assert ra.texts == rb.texts and torch.equal(ra.input_ids, rb.input_ids)
    assert b.model.training  # back in training mode after sampling
    la, lb = read_log(train(plain))[0], read_log(train(ckpt))[0]
    assert lb["loss"] == pytest.approx(la["loss"], rel=1e-5)
    assert lb["grad_norm"] == pytest.approx(la["grad_norm"], rel=1e-4)


def test_bf16_checkpointed_lora_run_trains(tmp_path, tiny_base):
    cfg = preset(
        "reinforce",
        init=tiny_base,
        out=tmp_path / "r",
        steps=2,
        bf16=True,
        gradient_checkpointing=True,
        lora_r=4,
        device="cpu",
        **SMALL,
    )
    log = read_log(train(cfg))
    assert [r["step"] for r in log] == [0, 1]
    assert all(math.isfinite(r["loss"]) and r["grad_norm"] > 0 for r in log)


@pytest.mark.gpu
def test_calibrate_then_reinforce_on_cuda(tmp_path, tiny_base):
    kw = dict(steps=2, bf16=True, gradient_checkpointing=True, device="cuda", **SMALL)
    stage1 = train(preset("calibrate", init=tiny_base, out=tmp_path / "c", **kw))
    log = read_log(train(preset("reinforce", init=stage1 / "final", out=tmp_path / "r", **kw)))
    assert all(math.isfinite(r["loss"]) for r in log)
    assert torch.cuda.max_memory_allocated() > 0


def test_a_bf16_checkpoint_trains_in_float32(tmp_path, tokenizer):
    """A bf16 checkpoint (as most hub models ship) is trained in float32: after 2 steps at
    lr 1e-6 most weights have moved (a bf16 weight of size ~0.05 cannot move by less than
    ~2e-4, so in bf16 almost none would), and final/ is saved in float32 unless
    --save-dtype says otherwise."""
    from safetensors.torch import load_file

    from rlcd_lab.lm.checkpoint import save_checkpoint
    from rlcd_lab.lm.model import tiny_model

    bf16 = save_checkpoint(
        tmp_path / "bf16", tiny_model(tokenizer, seed=0).to(torch.bfloat16), tokenizer
    )
    start = load_file(str(bf16 / "model.safetensors"))
    assert all(v.dtype == torch.bfloat16 for v in start.values())
    kw = dict(init=bf16, steps=2, lr=1e-6, device="cpu", **SMALL)
    s = setup(preset("calibrate", out=tmp_path / "probe", **kw), needs_ref=False)
    assert all(p.dtype == torch.float32 for p in s.model.parameters())
    run = train(preset("calibrate", out=tmp_path / "run", **kw))
    end = load_file(str(run / "final" / "model.safetensors"))
    assert all(v.dtype == torch.float32 for v in end.values())
    moved = sum(int((end[k] != start[k].float()).sum()) for k in start)
    total = sum(v.numel() for v in start.values())
    assert moved / total > 0.5
    half = train(preset("calibrate", out=tmp_path / "half", save_dtype="bfloat16", **kw))
    saved = load_file(str(half / "final" / "model.safetensors"))
    assert all(v.dtype == torch.bfloat16 for v in saved.values())
