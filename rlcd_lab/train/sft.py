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

from ..reader import build_prompt, encode_prompts, item_options, left_pad, pad_id
from ..readout import position_ids
from .common import releases_run, setup
from .configs import SFTConfig  # the settings (no torch); re-exported here


@releases_run
def train(cfg: SFTConfig) -> Path:
    """Run (or resume) SFT; returns the run directory."""
    s = setup(cfg, needs_ref=False, eval_mode="direct")
    marker, sep = s.meta["marker"], s.meta["sep"]
    pad = pad_id(s.tok)
    for step in (bar := s.steps("sft")):
        t0, rows = time.perf_counter(), []
        for batch in s.micro_batches(step):
            opts = item_options(s.tok, [it.options for it in batch.items], marker, sep)
            texts = [
                build_prompt(s.tok, it.prompt, direct=True, marker=marker, options=o.labels)
                for it, o in zip(batch.items, opts, strict=True)
            ]
            rows_ids = encode_prompts(s.tok, texts, [o.bridge for o in opts])
            ids, mask = left_pad(rows_ids, pad, s.device)
            target = torch.tensor(
                [o.ids[int(y)] for o, y in zip(opts, batch.y, strict=True)], device=s.device
            )

            logits = s.wrapped(
                input_ids=ids, attention_mask=mask, position_ids=position_ids(mask)
            ).logits[:, -1]
            loss = F.cross_entropy(logits.float(), target)
            s.backward(loss)
            rows.append({"loss": loss.item()})
        rows[0]["grad_norm"] = s.step()
        rows[0]["time_step"] = time.perf_counter() - t0
        s.end_step(step, rows)
        bar.set_postfix(loss=f"{rows[0]['loss']:.3f}", refresh=False)
    return s.finish()
