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

from rlcd_lab.files.rundir import releases_run
from rlcd_lab.methods.configs import SFTConfig  # the settings (no torch)
from rlcd_lab.reader.reading import direct_logits
from rlcd_lab.train.common import setup


@releases_run
def train(cfg: SFTConfig) -> Path:
    """Run (or resume) SFT; returns the run directory."""
    s = setup(cfg, needs_ref=False, eval_mode="direct")
    marker, sep = s.meta["marker"], s.meta["sep"]
    for step in (bar := s.steps("sft")):
        t0, rows = time.perf_counter(), []
        for batch in s.micro_batches(step):
            # the direct reading's logits over the whole vocabulary (reader.direct_logits)
            logits, opts = direct_logits(
                s.wrapped, s.tok, [it.prompt for it in batch.items],
                [it.options for it in batch.items], marker=marker, sep=sep, device=s.device,
            )  # fmt: skip
            target = torch.tensor(
                [o.ids[int(y)] for o, y in zip(opts, batch.y, strict=True)], device=s.device
            )
            loss = F.cross_entropy(logits.float(), target)
            s.backward(loss)
            rows.append({"loss": loss.item()})
        rows[0]["grad_norm"] = s.step()
        rows[0]["time_step"] = time.perf_counter() - t0
        s.end_step(step, rows)
        bar.set_postfix(loss=f"{rows[0]['loss']:.3f}", refresh=False)
    return s.finish()
