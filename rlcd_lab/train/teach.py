"""Teach a pretrained model its task's format and skill before the comparison: teacher-
forced SFT on worked rationales written by rule (``rlcd_lab.tasks.worked``), as the tiny
bases learn theirs from their task's teacher (``rlcd-lab pretrain``).

Start at :func:`train` (the loss); :func:`worked_rationales` gives each question's
rationale. Evaluation then samples the model's own rationales, as for every other method."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from rlcd_lab.files.rundir import releases_run
from rlcd_lab.methods.configs import TeachConfig  # the settings (no torch)
from rlcd_lab.reader.rationales import sample_questions, written_sampler
from rlcd_lab.reader.reading import score_rationales
from rlcd_lab.tasks.worked import WORKED
from rlcd_lab.train.common import setup


def worked_rationales(cfg: TeachConfig, items) -> list[str]:
    """The worked rationale of each item; ``ValueError`` naming the items the rule cannot
    solve (or whose result is not the gold option)."""
    texts = [WORKED[cfg.worked](it) for it in items]
    missing = [it.uid for it, t in zip(items, texts, strict=True) if t is None]
    if missing:
        raise ValueError(
            f"--worked {cfg.worked} writes no rationale for {len(missing)} training items of "
            f"{cfg.task} (first: {missing[:3]}): not its kind of task"
        )
    return texts


@releases_run
def train(cfg: TeachConfig) -> Path:
    """Run (or resume) teach; returns the run directory.

    Per step, for B training questions with worked rationales ``r*``: the model's text
    after the prompt is ``r* + "\\n" + marker`` in place of a sampled rationale
    (``reader.written_sampler``, read exactly as the model's own text would be), and

        loss = - sum_i [ log pi(r*_i, marker | x_i) + log u(r*_i)[y_i] ] / sum_i (|r*_i| + 1)

    the token-mean negative log-likelihood of the rationale with its marker and of the
    gold option under the readout (``score_rationales``).
    """
    s = setup(cfg, needs_ref=False)
    marker, sep = s.meta["marker"], s.meta["sep"]
    items = s.stream.items
    worked = dict(zip((it.uid for it in items), worked_rationales(cfg, items), strict=True))
    for step in (bar := s.steps("teach")):
        t0, rows = time.perf_counter(), []
        for batch in s.micro_batches(step):
            texts = [f"{worked[it.uid]}\n{marker}" for it in batch.items]
            written = s.tok(texts, add_special_tokens=False)["input_ids"]
            rats, option_ids = sample_questions(
                s.model, s.tok, [it.prompt for it in batch.items],
                [it.options for it in batch.items], 1, max(map(len, written)),
                marker=marker, sep=sep, sampler=written_sampler(written),
            )  # fmt: skip
            u, _, logp_r = score_rationales(s.wrapped, rats, option_ids)
            y = batch.y.to(s.device)
            logp = logp_r + torch.log(u.gather(1, y[:, None]).squeeze(1).clamp_min(1e-30))
            n_tokens = s.total(rats.lengths.sum() + len(y))
            loss = -logp.sum() * s.acc.num_processes / n_tokens
            s.backward(loss)
            acc = (u.argmax(-1) == y).float().mean()
            rows.append({"loss": loss.item(), "readout_accuracy": acc.item()})
        rows[0]["grad_norm"] = s.step()
        rows[0]["time_step"] = time.perf_counter() - t0
        s.end_step(step, rows)
        bar.set_postfix(loss=f"{rows[0]['loss']:.3f}", refresh=False)
    return s.finish()
