"""RFT / STaR baseline: clone the trajectories whose sampled answer is correct.

Per step, for B questions with outcomes Y and M rationales each (Zelikman et al. 2022,
"STaR"; OpenJev-RLCD sec. 4, "RFT/STaR+TS"):

1. sample M rationales on-policy, then an answer ``a_i ~ u(r_i)`` (over the options);
2. keep the trajectories with ``a_i = Y``;
3. loss = token-mean negative log-likelihood of the kept trajectories (rationale and
   answer tokens; the mean over the micro-batch's tokens on all processes) + ``beta`` x
   the k3 estimate of ``KL(pi || pi_ref)`` (``common.token_kl``; ``beta = 0``: RFT
   without the anchor, which the paper finds collapses to empty rationales on knowledge
   tasks).
"""

from __future__ import annotations

import time
from pathlib import Path

from rlcd_lab.files.rundir import releases_run
from rlcd_lab.methods.configs import RFTConfig  # the settings (no torch)
from rlcd_lab.reader.reading import score_rationales
from rlcd_lab.train.common import rationale_stats, sample_answers, sample_batch, setup, token_kl


@releases_run
def train(cfg: RFTConfig) -> Path:
    """Run (or resume) RFT; returns the run directory."""
    s = setup(cfg, needs_ref=cfg.beta > 0)
    m = cfg.m
    for step in (bar := s.steps("rft")):
        t0, rows = time.perf_counter(), []
        for batch in s.micro_batches(step):
            b, y = len(batch.items), batch.y.to(s.device)

            # 1. rationales, then one forward with gradient; a sampled answer per rationale
            rats, option_ids = sample_batch(s, batch)
            t_sample = time.perf_counter()
            u, _, tok_lp = score_rationales(s.wrapped, rats, option_ids, per_token=True)
            answer, logp_answer = sample_answers(u, cfg.seed, batch, m)

            # 2. keep the correct trajectories; 3. their token-mean NLL (+ KL anchor): the
            # token count of all processes' micro-batches, times W as DDP averages gradients
            keep = answer == y.repeat_interleave(m)
            logp = tok_lp.sum(-1) + logp_answer
            n_tokens = rats.lengths.to(s.device) + 1  # rationale tokens + the answer token
            kept_tokens = s.total((n_tokens * keep).sum()).clamp_min(1)
            loss = -(logp * keep).sum() * s.acc.num_processes / kept_tokens
            kl = token_kl(s, rats, option_ids, tok_lp)
            if kl is not None:
                loss = loss + cfg.beta * kl
            s.backward(loss)

            row = {"loss": loss.item(), "kept": float(keep.float().mean())}
            row |= rationale_stats(
                u.detach().view(b, m, -1), rats.lengths.view(b, m), rats.forced.view(b, m)
            )
            row |= {"kl": None if kl is None else kl.item(), "time_sample": t_sample - t0}
            rows.append(row)
        rows[0]["grad_norm"] = s.step()
        rows[0]["time_step"] = time.perf_counter() - t0
        s.end_step(step, rows)
        bar.set_postfix(loss=f"{rows[0]['loss']:.3f}", kept=f"{rows[0]['kept']:.2f}", refresh=False)
    return s.finish()
