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
from pathlib import Path

from tqdm import trange

from ..reader import score_rationales
from .common import (
    rationale_stats,
    sample_answers,
    sample_batch,
    setup,
    token_kl,
    update,
)
from .configs import RFTConfig  # the settings (no torch); re-exported here


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
        t_sample = time.perf_counter()
        u, _, tok_lp = score_rationales(s.model, rats, option_ids, per_token=True)
        answer, logp_answer = sample_answers(u, cfg.seed, step)

        # 2. keep the correct trajectories; 3. their token-mean NLL (+ KL anchor)
        keep = answer == y.repeat_interleave(m)
        logp = tok_lp.sum(-1) + logp_answer
        n_tokens = rats.lengths.to(s.device) + 1  # rationale tokens + the answer token
        loss = -(logp * keep).sum() / (n_tokens * keep).sum().clamp_min(1)
        kl = token_kl(s, rats, option_ids, tok_lp)
        if kl is not None:
            loss = loss + cfg.beta * kl
        grad = update(s, loss)

        row = {
            "step": step,
            "loss": loss.item(),
            "grad_norm": grad,
            "kept": float(keep.float().mean()),
        }
        row |= rationale_stats(
            u.detach().view(b, m, -1), rats.lengths.view(b, m), rats.forced.view(b, m)
        )
        row |= {"kl": None if kl is None else kl.item(), "time_sample": t_sample - t0}
        row["time_step"] = time.perf_counter() - t0
        s.end_step(step, row)
        bar.set_postfix(loss=f"{row['loss']:.3f}", kept=f"{row['kept']:.2f}", refresh=False)
    return s.finish()
