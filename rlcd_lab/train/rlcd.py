"""The RLCD family in one loop: calibrate (stage 1), reinforce (stage 2), end-to-end, mixture.

The methods differ only in their settings (``METHODS``, defined with the configs in
:mod:`rlcd_lab.methods.configs`): ``calibrate`` trains pathwise only (``sf_weight = 0``;
rationales are on-policy latents); ``reinforce`` continues from the stage-1 checkpoint
with the score-function term, KL-anchored at the stage-1 model; ``endtoend``
(``sf_weight = 1`` from the base model) shows System-One collapse at ``beta = 0`` (``beta >
0`` prevents it) and gradient dilution along a sweep of ``sf_weight``; ``mixture`` is the
lambda objective ``(1 - lam) E_r J + lam J(p, q)`` (``lam = 1``: group). Start at
:func:`train` (the step of OpenJev-RLCD Algorithm 1)."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from rlcd_lab.estimators import grad_norm, gradient_terms, surrogate_terms
from rlcd_lab.files.rundir import releases_run
from rlcd_lab.methods.configs import RLCDConfig
from rlcd_lab.reader.reading import score_rationales
from rlcd_lab.train.common import rationale_stats, sample_batch, setup

__all__ = [
    "train",
]


@releases_run
def train(cfg: RLCDConfig) -> Path:
    """Run (or resume) one RLCD-family training run; returns the run directory.

    Per step (OpenJev-RLCD Algorithm 1), for B questions with outcomes Y:

    1. sample M rationales per question on-policy, without gradient;
    2. the scoring pass with gradient gives each rationale's readout ``u`` and
       ``log pi(r|x)``;
    3. the reward of rationale i is the proper score ``R_i = J(u_i, Y)`` of the trained
       model's own readout, plus the KL shaping term ``-beta (log pi_theta(r_i) - log
       pi_ref(r_i))``; ``outcome_reward=False`` drops ``R_i`` from the score-function term
       and keeps the pathwise term (the readout is still trained): the paper's "anchor
       only" control; ``ace > 0`` penalises overconfident errors harder
       (``estimators.ace_advantages``);
    4. loss = pathwise ``-(1/M) sum R_i`` (or the lambda/mixture estimate) + ``sf_weight``
       x the leave-one-out score-function term (``rlcd_lab.estimators``), a mean over
       questions; AdamW, clipping. Each process takes its share of the B questions in
       ``grad_accum`` micro-batches (``Session.micro_batches``); their gradients add up
       to the batch's.
    """
    # the KL shaping reward only reaches the loss through the score-function term
    needs_ref = (cfg.beta > 0 or cfg.ace > 0) and cfg.sf_weight > 0
    s = setup(cfg, needs_ref=needs_ref)
    m = cfg.m
    for step in (bar := s.steps(cfg.method)):
        t0, rows = time.perf_counter(), []
        for batch in s.micro_batches(step):
            b, y = len(batch.items), batch.y.to(s.device)

            # 1. on-policy rationales, no gradient
            rats, option_ids = sample_batch(s, batch)
            t_sample = time.perf_counter()

            # 2. the scoring pass with gradient: readout u and log pi(r | x)
            u, _, logp = score_rationales(s.wrapped, rats, option_ids)
            u, logp = u.view(b, m, -1), logp.view(b, m)

            # 3. the KL anchor (the reference model never gets a gradient)
            extra = kl = log_ratio = None
            if s.ref is not None:
                with torch.no_grad():
                    _, _, ref_logp = score_rationales(s.ref, rats, option_ids)
                log_ratio = logp.detach() - ref_logp.view(b, m)
                kl = float(log_ratio.mean())
                if cfg.beta > 0:
                    extra = -cfg.beta * log_ratio
            terms = surrogate_terms(
                u, logp, y, cfg.lam, extra, cfg.rule, cfg.outcome_reward, cfg.ace, log_ratio
            )

            # 4. the loss (pathwise + c * score function), dilution diagnostics, the gradient
            loss = terms.loss(cfg.sf_weight)
            row = {"loss": loss.item()}
            if cfg.grad_terms_every and step % cfg.grad_terms_every == 0:
                g = gradient_terms(terms, s.params)  # this micro-batch's, on this process
                row["grad_pathwise"] = grad_norm(g["pathwise"])
                row["grad_score_function"] = grad_norm(g["score_function"])
            s.backward(loss)

            row |= rationale_stats(u.detach(), rats.lengths.view(b, m), rats.forced.view(b, m))
            row |= {
                "reward": float(terms.rewards.mean()),
                "accuracy_u": float((u.detach().argmax(-1) == y[:, None]).float().mean()),
                "kl": kl,
                "time_sample": t_sample - t0,
            }
            rows.append(row)
        rows[0]["grad_norm"] = s.step()
        rows[0]["time_step"] = time.perf_counter() - t0
        s.end_step(step, rows)
        bar.set_postfix(loss=f"{rows[0]['loss']:.3f}", refresh=False)
    return s.finish()
