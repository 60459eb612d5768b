"""SFT baseline: the model answers directly and is trained by cross-entropy on the label.

Per step: B questions with outcomes Y (a fresh ``Y ~ q`` per visit on aleatoric tasks);
the prompt ends with the bare marker (System-One mode) and the loss is
``-log pi(label token of Y | x, "Answer:")`` over the full vocabulary, averaged over the
batch. Evaluation reads the direct answer; temperature scaling is fitted on dev at the
end (SFT+TS in OpenJev-RLCD Table 1).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import trange

from ..reader import build_prompt, encode_prompts, item_options, left_pad, pad_id
from ..readout import position_ids
from .common import setup, update
from .configs import SFTConfig  # the settings (no torch); re-exported here


def train(cfg: SFTConfig) -> Path:
    """Run (or resume) SFT; returns the run directory."""
    s = setup(cfg, needs_ref=False, eval_mode="direct")
    marker, sep = s.meta["marker"], s.meta["sep"]
    pad = pad_id(s.tok)
    for step in (bar := trange(s.run.start_step, cfg.steps, desc="sft", total=cfg.steps)):
        t0 = time.perf_counter()
        batch = s.stream.batch(step)
        opts = item_options(s.tok, [it.options for it in batch.items], marker, sep)
        texts = [
            build_prompt(s.tok, it.prompt, direct=True, marker=marker, options=o.labels)
            for it, o in zip(batch.items, opts, strict=True)
        ]
        rows = encode_prompts(s.tok, texts, [o.bridge for o in opts])
        ids, mask = left_pad(rows, pad, s.device)
        target = torch.tensor(
            [o.ids[int(y)] for o, y in zip(opts, batch.y, strict=True)], device=s.device
        )

        logits = s.model(
            input_ids=ids, attention_mask=mask, position_ids=position_ids(mask)
        ).logits[:, -1]
        loss = F.cross_entropy(logits.float(), target)

        grad = update(s, loss)
        row = {
            "step": step,
            "loss": loss.item(),
            "grad_norm": grad,
            "time_step": time.perf_counter() - t0,
        }
        s.end_step(step, row)
        bar.set_postfix(loss=f"{row['loss']:.3f}", refresh=False)
    return s.finish()
