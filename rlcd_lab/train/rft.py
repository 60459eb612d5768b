"""RFT / STaR baseline: clone the trajectories whose sampled answer is correct.

Per step, for B questions with outcomes Y and M rationales each (Zelikman et al. 2022,
"STaR"; OpenJev-RLCD sec. 4, "RFT/STaR+TS"):

1. sample M rationales on-policy, then an answer ``a_i ~ u(r_i)`` (over the options);
2. keep the trajectories with ``a_i = Y``;
3. loss = token-mean negative log-likelihood of the kept trajectories (rationale and
   answer tokens) + ``beta`` x the mean per-token k3 estimate of ``KL(pi || pi_ref)``
   over all sampled rationale tokens (``beta = 0``: RFT without the anchor, which the
   paper finds collapses to empty rationales on knowledge tasks).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch
import tyro
from tqdm import trange

from ..rationales import score_rationales
from .common import TrainConfig, k3_kl, rationale_stats, sample_batch, setup, step_seed


@dataclass(frozen=True)
class RFTConfig(TrainConfig):
    """Settings of the RFT/STaR baseline (clone correct trajectories; optional KL)."""

    method: tyro.conf.Fixed[str] = "rft"
    out: Path = Path("runs/rft")


def train(cfg: RFTConfig) -> Path:
    """Run (or resume) RFT; returns the run directory."""
    s = setup(cfg, needs_ref=cfg.beta > 0)
    b, m = cfg.batch_size, cfg.m
    for step in (bar := trange(s.run.start_step, cfg.steps, desc="rft", total=cfg.steps)):
        t0 = time.perf_counter()
        batch = s.stream.batch(step)
        y = batch.y.to(s.device)

        # 1. rationales, then one forward with gradient; a sampled answer per rationale
        rats, option_ids = sample_batch(s, batch, step)
        u, _, tok_lp = score_rationales(s.model, rats, option_ids, per_token=True)
        gen = torch.Generator().manual_seed(step_seed(cfg.seed, step, salt=1))
        answer = torch.multinomial(u.detach().cpu(), 1, generator=gen).squeeze(-1).to(s.device)

        # 2. keep the correct trajectories; 3. their token-mean NLL (+ KL anchor)
        keep = answer == y.repeat_interleave(m)
        logp = tok_lp.sum(-1) + u.gather(-1, answer[:, None]).squeeze(-1).log()
        n_tokens = rats.lengths.to(s.device) + 1  # rationale tokens + the answer token
        loss = -(logp * keep).sum() / (n_tokens * keep).sum().clamp_min(1)
        kl = None
        if s.ref is not None:
            with torch.no_grad():
                _, _, ref_lp = score_rationales(s.ref, rats, option_ids, per_token=True)
            mask = rats.rationale_mask[:, 1:]
            kl = k3_kl(tok_lp[mask], ref_lp[mask]).mean() if mask.any() else tok_lp.sum() * 0
            loss = loss + cfg.beta * kl

        s.opt.zero_grad(set_to_none=True)
        loss.backward()
        grad = float(torch.nn.utils.clip_grad_norm_(s.params, cfg.grad_clip))
        s.opt.step()

        row = {
            "step": step,
            "loss": loss.item(),
            "grad_norm": grad,
            "kept": float(keep.float().mean()),
        }
        row |= rationale_stats(
            u.detach().view(b, m, -1), rats.lengths.view(b, m), rats.forced.view(b, m)
        )
        row |= {"kl": None if kl is None else float(kl), "time_step": time.perf_counter() - t0}
        s.end_step(step, row)
        bar.set_postfix(loss=f"{row['loss']:.3f}", kept=f"{row['kept']:.2f}", refresh=False)
    return s.finish()
