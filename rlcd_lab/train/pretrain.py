"""Pretrain a tiny base reasoning model on a synthetic task's teacher (``rlcd-lab pretrain``).

The base model of the tiny world imitates the task's teacher (``rlcd_lab.tasks.synthetic``):
given ``prompt\\n`` it writes a rationale, then `` Answer: L`` with a label it states with
certainty; given ``prompt\\nAnswer:`` it answers directly (System-One mode). Teacher
rationales contain slips, so the model is wrong with high confidence: overconfident, like
the paper's base model. Cross-entropy on the completion tokens only, AdamW, cosine decay.
The run ends by measuring the model on the dev split (direct vs after reasoning) and
saving a checkpoint whose ``rlcd.json`` holds those numbers.
"""

from __future__ import annotations

import math
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import trange
from transformers import get_cosine_schedule_with_warmup

from rlcd_lab.evaluate import run_eval
from rlcd_lab.lm.checkpoint import MARKER, SEP, check_replaceable, save_checkpoint
from rlcd_lab.lm.model import char_tokenizer, tiny_model, tiny_parameters
from rlcd_lab.reader.prompts import build_prompt
from rlcd_lab.reader.readout import position_ids
from rlcd_lab.summary import summarize
from rlcd_lab.tasks.synthetic import Example, get_task
from rlcd_lab.train.pretrain_config import PretrainConfig, resolved


def demonstrations(task, rng: np.random.Generator, cfg: PretrainConfig) -> list[Example]:
    """One batch of teacher demonstrations; with ``cfg.p_empty > 0`` that fraction of
    them loses its rationale (``p_empty = 0`` draws nothing more from ``rng``)."""
    examples = task.pretraining_examples(rng, cfg.batch_size, cfg.p_direct)
    if not cfg.p_empty:
        return examples
    empty = rng.random(len(examples)) < cfg.p_empty
    return [replace(ex, rationale="") if e else ex for ex, e in zip(examples, empty, strict=True)]


def encode_examples(
    tokenizer, examples: list[Example]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``(ids, mask, labels)``; labels are -100 except on the completion.

    Reasoning demonstrations: prompt ``question\n``, completion ``rationale Answer: L``.
    Direct ones: prompt ``question\nAnswer:``, completion `` L``. The marker right after
    a bare question is taught only by reasoning demonstrations with an empty rationale
    (``PretrainConfig.p_empty``): without them the base model always reasons unless it is
    handed the marker, and the System-One shortcut is out of RL's reach.
    """
    prompts = [
        build_prompt(tokenizer, ex.prompt, direct=ex.direct, marker=MARKER) for ex in examples
    ]
    bodies = [
        (f"{ex.rationale} {MARKER}" if not ex.direct else "") + f"{SEP}{ex.label}"
        for ex in examples
    ]
    p_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]  # batched (fast path)
    b_ids = tokenizer(bodies, add_special_tokens=False)["input_ids"]
    width = max(len(p) + len(b) for p, b in zip(p_ids, b_ids, strict=True))
    ids = torch.full((len(examples), width), tokenizer.pad_token_id)
    labels = torch.full((len(examples), width), -100)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for i, (p, b) in enumerate(zip(p_ids, b_ids, strict=True)):
        row = torch.tensor(p + b)
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
        labels[i, len(p) : len(row)] = row[len(p) :]
    return ids, mask, labels


def measure_base(model, tokenizer, items, *, max_new_tokens: int = 48, seed: int = 0) -> dict:
    """Direct vs after-reasoning metrics on ``items`` (single query, no temperature scaling;
    ``T`` is fitted on the same items to read the overconfidence)."""
    out = {}
    for mode in ("direct", "reason"):
        rows = run_eval(
            model, tokenizer, items, mode=mode, max_new_tokens=max_new_tokens, seed=seed
        )
        s = summarize(rows, dev_rows=rows)
        keys = ("accuracy", "brier", "nll", "ece", "aurc", "T", "mean_length", "forced_rate", "jsd")
        out[mode] = {k: s[k] for k in keys if k in s}
    return out


MAX_PRETRAIN_PARAMETERS = 50_000_000
"""Largest model ``rlcd-lab pretrain`` builds (``lm.model.tiny_parameters``): 200 MB of
float32 weights, 800 MB with AdamW's state; the shipped base models have 379,104."""


def check_pretrain_config(cfg: PretrainConfig) -> Path:
    """Reject settings the run cannot use, before it trains; returns the output directory.

    Sizes and counts positive, ``lr`` finite and > 0, fractions in [0, 1], heads dividing
    the hidden size, at most :data:`MAX_PRETRAIN_PARAMETERS` parameters, and an ``out``
    that ``save_checkpoint`` may write: missing or empty, or a checkpoint with
    ``overwrite`` (never another folder). ``ValueError`` / ``FileExistsError`` otherwise."""
    cfg = resolved(cfg)
    lows = dict(steps=1, batch_size=1, hidden_size=1, layers=1, heads=1, eval_items=1)
    for name, low in {**lows, "warmup": 0, "max_new_tokens": 1}.items():
        if getattr(cfg, name) < low:
            raise ValueError(
                f"--{name.replace('_', '-')} must be >= {low}, got {getattr(cfg, name)}"
            )
    if not (math.isfinite(cfg.lr) and cfg.lr > 0):
        raise ValueError(f"--lr must be finite and > 0, got {cfg.lr}")
    for name in ("p_direct", "p_empty"):
        if not 0 <= getattr(cfg, name) <= 1:
            raise ValueError(
                f"--{name.replace('_', '-')} must be in [0, 1], got {getattr(cfg, name)}"
            )
    if cfg.slip is not None:
        if not cfg.task.startswith("verify"):
            raise ValueError(f"--slip is a verify teacher setting, not {cfg.task}'s")
        if not 0 <= cfg.slip <= 1:
            raise ValueError(f"--slip must be in [0, 1], got {cfg.slip}")
    if cfg.hidden_size % cfg.heads:
        raise ValueError(
            f"--hidden-size {cfg.hidden_size} is not a multiple of --heads {cfg.heads}"
        )
    size = tiny_parameters(len(char_tokenizer()), cfg.hidden_size, cfg.layers)
    if size > MAX_PRETRAIN_PARAMETERS:
        raise ValueError(
            f"--hidden-size {cfg.hidden_size} with --layers {cfg.layers} makes a model of "
            f"{size:,} parameters; pretrain builds tiny models of at most "
            f"{MAX_PRETRAIN_PARAMETERS:,} (the shipped ones: --hidden-size 96, --layers 4)"
        )
    out = check_replaceable(cfg.out or Path(f"runs/base-{cfg.task}"))
    if out.is_dir() and any(out.iterdir()) and not cfg.overwrite:
        raise FileExistsError(f"{out} already holds a checkpoint; pass --overwrite to replace it")
    return out


def pretrain(cfg: PretrainConfig) -> Path:
    """Run the pretraining loop of ``cfg`` and save the base checkpoint (with its checksums,
    ``models.save_checkpoint``); returns its path. Settings are checked first
    (``check_pretrain_config``)."""
    out = check_pretrain_config(cfg)
    cfg = resolved(cfg)
    task = get_task(cfg.task, **({} if cfg.slip is None else {"slip": cfg.slip}))
    tokenizer = char_tokenizer()
    model = tiny_model(
        tokenizer, seed=cfg.seed, hidden_size=cfg.hidden_size, layers=cfg.layers, heads=cfg.heads
    )
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.01)
    sched = get_cosine_schedule_with_warmup(opt, cfg.warmup, cfg.steps)
    rng = np.random.default_rng(cfg.seed)
    torch.manual_seed(cfg.seed)
    model.train()
    for _ in (bar := trange(cfg.steps, desc=f"pretrain {cfg.task}")):
        ids, mask, labels = encode_examples(tokenizer, demonstrations(task, rng, cfg))
        loss = model(
            input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), labels=labels
        ).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
    model.eval()
    dev = task.split("dev")[: cfg.eval_items]
    measured = measure_base(model, tokenizer, dev, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed)
    meta = {
        "task": cfg.task,
        "method": "pretrain",
        "step": cfg.steps,
        "options": list(task.options),
        "metrics": {"dev": measured},
        "config": {  # what was trained: --overwrite is about the folder
            k: str(v) if isinstance(v, Path) else v
            for k, v in asdict(cfg).items()
            if k != "overwrite"
        },
    }
    return save_checkpoint(out, model, tokenizer, meta)
