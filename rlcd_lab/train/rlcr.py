"""RLCR baseline: reward a sampled answer's correctness and the Brier score of the
confidence the model states after it (Damani et al. 2025, "Beyond Binary Rewards:
Training LMs to Reason About Their Uncertainty").

A trajectory is ``tau = (r, a, d)``: a rationale ``r`` sampled on-policy up to the
marker, an answer ``a ~ u(r)`` sampled from the readout (as GRPO and RFT do), then,
after the written cue ``"\\nConfidence:"``, ONE token ``d`` sampled from the model's
next-token distribution over its whole vocabulary: a digit 0..9 states ``c = (d + 0.5) /
10``, anything else is a format failure (``reader.verbal.token_confidences``). Start at
:func:`train` (the loss), :func:`rlcr_reward` and :func:`policy_gradient_loss`; the first
``format_steps`` steps teach the format (:func:`digit_bin`)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from rlcd_lab.estimators import leave_one_out_mean
from rlcd_lab.files.rundir import releases_run
from rlcd_lab.methods.configs import RLCRConfig  # the settings (no torch)
from rlcd_lab.reader.reading import score_rationales
from rlcd_lab.reader.verbal import confidence_logprobs, confidence_tokens, token_confidences
from rlcd_lab.train.common import (
    Batch,
    rationale_stats,
    sample_answers,
    sample_batch,
    setup,
    token_kl,
)


def digit_bin(p: Tensor) -> Tensor:
    """The digit whose bin holds probability ``p``: ``min(floor(10 p), 9)`` (long, same
    shape); the format-learning target for a readout probability ``p``.

    Format first: the bases never wrote a confidence (the tiny ones were pretrained on
    their teacher's text, SmolLM2 taught its format by SFT on text written by rule), and
    RLCR has no teacher. So its first ``format_steps`` steps (part of ``steps``) are
    teacher-forced SFT on the model's OWN sampled rationale and answer followed by
    ``digit_bin(u(r)[a])``: loss ``-(1/(B M)) sum_i log pi(d*_i | r_i, a_i)``. The model
    learns to say what it reads out (as overconfident as its readout is); the RL steps
    then reward calibrating it. Every step logs the reward and format-failure rate of
    sampled confidences, so the format's learning is visible."""
    return (p * 10).floor().long().clamp(0, 9)


def rlcr_reward(correct: Tensor, c: Tensor) -> Tensor:
    """RLCR's reward ``1[a = y] - (c - 1[a = y])^2`` (Damani et al. 2025, eq. 2), in [-1, 1].

    ``correct``: 0/1 float, ``c``: stated confidence (NaN: unparsable, whose Brier term is
    the worst, -1), same shape; returns that shape (higher is better). The Brier term is
    a strictly proper, bounded score of ``c`` for the event "the answer is right": for a
    fixed answer right with probability p, ``E R`` peaks at ``c = p`` (value ``p^2``,
    increasing in p: correctness still decides which answer to give)."""
    brier = torch.where(c.isnan(), -1.0, -((c.nan_to_num(0.0) - correct) ** 2))
    return correct + brier


def policy_gradient_loss(reward: Tensor, logp: Tensor, norm: float) -> Tensor:
    """``-(1/(B M)) sum_i sg(A_i) logp_i / norm`` with ``A_i = R_i - mean_{j != i} R_j``.

    ``reward (B, M)`` per trajectory (detached), ``logp (B M,)`` its log-probability with
    gradient (row-major: question, then trajectory), ``norm`` a constant. A loss (lower is
    better): its gradient is ``-(1/(B M norm)) sum_i A_i grad log pi(tau_i)``, in
    expectation ``-grad E[R] / norm`` (the leave-one-out baseline adds no bias: RLOO,
    Kool et al. 2019, Ahmadian et al. 2024; tested by enumeration)."""
    adv = reward - leave_one_out_mean(reward)
    return -(adv.detach().reshape(-1) * logp).mean() / norm


def sample_tokens(logq: Tensor, seed: int, batch: Batch, m: int) -> Tensor:
    """One token per row, ``d_i ~ exp(logq_i)`` ``(B m, V)``, by inverting the CDF at a
    uniform drawn for the row's place in the whole step (question ``batch.index``,
    trajectory ``0..m-1``), seeded by ``(seed, batch.step)`` (as ``sample_answers``, on a
    stream of its own). Returns ``(B m,)`` long."""
    rng = np.random.default_rng([seed, batch.step, 2])
    width = max(batch.index) + 1
    r = torch.from_numpy(rng.random((width, m))[batch.index].reshape(-1))
    cdf = logq.detach().double().exp().cpu().cumsum(-1)
    token = (cdf < r[:, None] * cdf[:, -1:]).sum(-1).clamp(max=logq.shape[-1] - 1)
    return token.to(logq.device)


@releases_run
def train(cfg: RLCRConfig) -> Path:
    """Run (or resume) RLCR; returns the run directory. Per step, for B questions with
    outcomes Y and M trajectories each: reward ``R_i`` (:func:`rlcr_reward`), leave-one-out
    advantage within the question's group (:func:`policy_gradient_loss`), loss
    ``-(1/(B M)) sum_i sg(A_i) [log pi(r_i) + log u(r_i)[a_i] + log pi(d_i | r_i, a_i)] / L``
    with ``L = max_new_tokens + 2`` (a constant length normaliser, as GRPO's) plus ``beta``
    x the k3 estimate of ``KL(pi || pi_ref)`` on the rationale tokens (``common.token_kl``).
    The final eval dumps also hold the stated confidence (``evaluate.run_eval(...,
    stated=True)``), scored with the same metrics as the readout."""
    if cfg.m < 2:
        raise ValueError(f"--m must be >= 2 for rlcr: its leave-one-out baseline; got {cfg.m}")
    s = setup(cfg, needs_ref=cfg.beta > 0)
    s.meta["confidence_cue"] = cfg.cue
    conf = confidence_tokens(s.tok, cfg.cue, s.meta["sep"])
    digits = torch.tensor(conf.digits, device=s.device)
    m = cfg.m
    for step in (bar := s.steps("rlcr")):
        t0, rows = time.perf_counter(), []
        formatting = step < cfg.format_steps
        for batch in s.micro_batches(step):
            b, y = len(batch.items), batch.y.to(s.device)

            # 1. rationales, one forward (with gradient when reinforcing): the readout u and
            # log pi(r); a sampled answer per rationale; then a second forward over
            # rationale + marker + answer + cue: the confidence token's distribution
            rats, option_ids = sample_batch(s, batch)
            t_sample = time.perf_counter()
            with torch.set_grad_enabled(not formatting):
                u, _, tok_lp = score_rationales(s.wrapped, rats, option_ids, per_token=True)
                answer, logp_answer = sample_answers(u, cfg.seed, batch, m)
            logq = confidence_logprobs(s.wrapped, rats, option_ids, answer, conf)  # (B m, V)

            # 2. a sampled confidence, parsed (NaN: format failure), and RLCR's reward
            token = sample_tokens(logq, cfg.seed, batch, m)
            c = token_confidences(s.tok, token.tolist()).to(s.device)
            correct = (answer == y.repeat_interleave(m)).float()
            reward = rlcr_reward(correct, c).view(b, m)

            # 3. format steps: the digit of its own readout probability (teacher-forced);
            # then the policy gradient on the whole trajectory + KL anchor
            kl = None
            if formatting:
                target = digits[digit_bin(u.gather(1, answer[:, None]).squeeze(1))]
                loss = -logq.gather(1, target[:, None]).mean()
            else:
                logp = tok_lp.sum(-1) + logp_answer + logq.gather(1, token[:, None]).squeeze(1)
                loss = policy_gradient_loss(reward, logp, cfg.max_new_tokens + 2)
                kl = token_kl(s, rats, option_ids, tok_lp)
                if kl is not None:
                    loss = loss + cfg.beta * kl
            s.backward(loss)

            failed = c.isnan()
            row = {
                "phase": "format" if formatting else "rl",
                "loss": loss.item(),
                "reward": float(reward.mean()),
                "correct": float(correct.mean()),
                "brier": float((reward.view(-1) - correct).mean()),
                "format_failure": float(failed.float().mean()),
                "confidence": float(c[~failed].mean()) if (~failed).any() else None,
                "digit_mass": float(logq.detach().exp()[:, digits].sum(-1).mean()),
            }
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
    s.eval_kw |= {"stated": True, "cue": cfg.cue}  # the final eval dumps: stated confidence too
    return s.finish()
