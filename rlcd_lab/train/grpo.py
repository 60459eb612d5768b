"""GRPO baseline: reward the correctness of a *sampled* answer, group-normalized
(OpenJev-RLCD sec. 4, "GRPO+TS"; Shao et al. 2024, "DeepSeekMath", sec. 4.1).

The readout is trained only through the sampled answer's log-probability, so its
confidence is free to become extreme: the overconfidence that temperature scaling then
has to undo (fitted T far above 1). Start at :func:`train` (the loss of a step)."""

from __future__ import annotations

import time
from pathlib import Path

from rlcd_lab.estimators import group_advantages
from rlcd_lab.files.rundir import releases_run
from rlcd_lab.methods.configs import GRPOConfig  # the settings (no torch)
from rlcd_lab.reader.reading import score_rationales
from rlcd_lab.train.common import rationale_stats, sample_answers, sample_batch, setup, token_kl


@releases_run
def train(cfg: GRPOConfig) -> Path:
    """Run (or resume) GRPO; returns the run directory.

    Per step, for B questions with outcomes Y and M rationales each:

    1. sample M rationales on-policy, then an answer ``a_i ~ u(r_i)`` (over the options);
    2. reward ``R_i = 1[a_i = Y]``; advantage ``A_i = (R_i - mean_j R_j) / (std_j R_j +
       1e-4)`` within the group of M (``advantage="group-std"``; ``"group-mean"``, Dr.
       GRPO's, drops the division by the standard deviation, ``"rloo"`` subtracts the
       other samples' mean: ``estimators.group_advantages``);
    3. loss ``-(1/(B M)) sum_i sg(A_i) log pi(r_i, a_i | x) / L`` with ``L =
       max_new_tokens + 1`` (a constant length normaliser, as in Dr. GRPO) plus ``beta``
       x the k3 estimate of ``KL(pi || pi_ref)``: per rationale the mean over its tokens,
       then the mean over rationales (``common.token_kl``).
    """
    s = setup(cfg, needs_ref=cfg.beta > 0)
    m = cfg.m
    for step in (bar := s.steps("grpo")):
        t0, rows = time.perf_counter(), []
        for batch in s.micro_batches(step):
            b, y = len(batch.items), batch.y.to(s.device)

            # 1. rationales, then one forward with gradient; a sampled answer per rationale
            rats, option_ids = sample_batch(s, batch)
            t_sample = time.perf_counter()
            u, _, tok_lp = score_rationales(s.wrapped, rats, option_ids, per_token=True)
            answer, logp_answer = sample_answers(u, cfg.seed, batch, m)
            logp = tok_lp.sum(-1) + logp_answer

            # 2. correctness reward, advantages within each question's group
            reward = (answer.view(b, m) == y[:, None]).float()
            adv = group_advantages(reward, cfg.advantage)

            # 3. policy-gradient loss + KL anchor on the rationale tokens
            loss = -(adv.view(-1) * logp).mean() / (cfg.max_new_tokens + 1)
            kl = token_kl(s, rats, option_ids, tok_lp)
            if kl is not None:
                loss = loss + cfg.beta * kl
            s.backward(loss)

            row = {"loss": loss.item(), "reward": float(reward.mean())}
            row |= rationale_stats(
                u.detach().view(b, m, -1), rats.lengths.view(b, m), rats.forced.view(b, m)
            )
            row |= {"kl": None if kl is None else kl.item(), "time_sample": t_sample - t0}
            rows.append(row)
        rows[0]["grad_norm"] = s.step()
        rows[0]["time_step"] = time.perf_counter() - t0
        s.end_step(step, rows)
        bar.set_postfix(
            loss=f"{rows[0]['loss']:.3f}", reward=f"{rows[0]['reward']:.2f}", refresh=False
        )
    return s.finish()
