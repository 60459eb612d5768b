"""The RLCD family in one loop: calibrate (stage 1), reinforce (stage 2), end-to-end, mixture.

Per step (OpenJev-RLCD Algorithm 1), for B questions with outcomes Y:

1. sample M rationales per question on-policy, without gradient;
2. one forward pass with gradient gives each rationale's readout ``u`` and ``log pi(r|x)``;
3. the reward of rationale i is the proper score ``R_i = J(u_i, Y)`` of the *reader*'s
   readout (``self``: the model being trained; ``ref``: the frozen anchor model reads the
   rationale; ``none``: no outcome reward at all, the "anchor only" fork), plus the KL
   shaping term ``-beta (log pi_theta(r_i) - log pi_ref(r_i))``;
4. loss = pathwise ``-(1/M) sum R_i`` (or the lambda/mixture estimate) + ``sf_weight`` x the
   leave-one-out score-function term (``rlcd_lab.estimators``); AdamW, clipping.

The methods differ only in their settings (see ``METHODS``):

* ``calibrate``: ``sf_weight = 0``: pathwise only; rationales are on-policy latents.
* ``reinforce``: from the stage-1 checkpoint; ``sf_weight = 0.3``, ``beta = 0.04``, KL
  anchored at the stage-1 model.
* ``endtoend``: ``sf_weight = 1`` from the base model; ``beta = 0`` shows System-One
  collapse, ``beta > 0`` prevents it; a sweep of ``sf_weight`` shows gradient dilution.
* ``mixture``: the lambda objective ``(1 - lam) E_r J + lam J(p, q)`` (``lam = 1``: group).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import torch
import tyro
from tqdm import trange

from ..estimators import grad_norm, gradient_terms, surrogate_terms
from ..evaluate import options_for, padded_option_ids, run_eval, summarize
from ..models import load_checkpoint, save_checkpoint
from ..rationales import sample_rationales, score_rationales
from ..readout import build_prompt
from .common import (
    QuestionStream,
    RunDir,
    load_optimizer,
    load_task_items,
    pick_device,
    rationale_stats,
    step_seed,
)


@dataclass(frozen=True)
class RLCDConfig:
    """Settings shared by the RLCD-family methods (defaults: tiny CPU scale)."""

    method: tyro.conf.Fixed[str] = "calibrate"
    """Which preset of ``METHODS`` this is (recorded in config.json and rlcd.json)."""
    init: Path = Path("assets/checkpoints/base-verify")
    """Checkpoint to start from (stage 2: the stage-1 checkpoint)."""
    out: Path = Path("runs/rlcd")
    """Run directory (config.json, log.jsonl, checkpoints/, eval/)."""
    task: str = "verify"
    """Synthetic task name or a task-item JSONL file (with .train/.dev/.test siblings)."""
    steps: int = 200
    batch_size: int = 8
    """Questions per step."""
    m: int = 4
    """Rationales per question."""
    max_new_tokens: int = 48
    temperature: float = 1.0
    lr: float = 1e-4
    """AdamW learning rate (the paper uses 2e-6 for 1.7B models)."""
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    sf_weight: float = 0.0
    """Weight c of the score-function term (0: stage 1, pathwise only)."""
    beta: float = 0.0
    """KL anchor weight towards the reference model (0: no anchor)."""
    lam: float = 0.0
    """Mixture weight: 0 per-rationale, 1 mixture (group) objective."""
    rule: Literal["brier", "log"] = "brier"
    reader: Literal["self", "ref", "none"] = "self"
    """Who reads the readout that is scored: the trained model, the frozen reference, or
    nobody (no outcome reward: the anchor-only fork)."""
    ref: Path | None = None
    """Reference (anchor) model; default: ``init``."""
    eval_every: int = 50
    eval_items: int = 100
    """Dev items evaluated every ``eval_every`` steps (single query)."""
    test_items: int = 400
    """Test items in the final eval dump (0 skips it)."""
    grad_terms_every: int = 10
    """Log pathwise vs score-function gradient norms every this many steps."""
    save_every: int = 50
    seed: int = 0
    device: str = "auto"
    resume: bool = False
    """Continue the run in ``out`` from its latest checkpoint."""


@dataclass(frozen=True)
class Calibrate(RLCDConfig):
    method: tyro.conf.Fixed[str] = "calibrate"


@dataclass(frozen=True)
class Reinforce(RLCDConfig):
    method: tyro.conf.Fixed[str] = "reinforce"


@dataclass(frozen=True)
class EndToEnd(RLCDConfig):
    method: tyro.conf.Fixed[str] = "endtoend"


@dataclass(frozen=True)
class Mixture(RLCDConfig):
    method: tyro.conf.Fixed[str] = "mixture"


METHODS: dict[str, RLCDConfig] = {
    "calibrate": Calibrate(out=Path("runs/calibrate")),
    "reinforce": Reinforce(
        out=Path("runs/reinforce"), init=Path("runs/calibrate/final"), sf_weight=0.3, beta=0.04
    ),
    "endtoend": EndToEnd(out=Path("runs/endtoend"), sf_weight=1.0),
    "mixture": Mixture(out=Path("runs/mixture"), sf_weight=1.0, lam=1.0),
}


DESCRIPTIONS = {
    "calibrate": "RLCD stage 1: proper score of the readout after own rationales, pathwise only.",
    "reinforce": "RLCD stage 2: same proper score as reward, weight c, KL anchor to stage 1.",
    "endtoend": "Per-rationale objective end to end: System-One collapse, gradient dilution.",
    "mixture": "Lambda objective (1 - lam) E_r J + lam J(p, q); lam = 1: the mixture.",
}


def train(cfg: RLCDConfig) -> Path:
    """Run (or resume) one RLCD-family training run; returns the run directory."""
    run = RunDir(cfg.out, cfg, cfg.resume)
    device = pick_device(cfg.device)
    model, tok, meta = load_checkpoint(run.latest or cfg.init, device)
    needs_ref = cfg.beta > 0 or cfg.reader == "ref"
    ref = (
        load_checkpoint(cfg.ref or cfg.init, device)[0].requires_grad_(False) if needs_ref else None
    )
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if run.latest is not None:
        load_optimizer(run.latest, opt)
    train_items, dev_items = (
        load_task_items(cfg.task, "train"),
        load_task_items(cfg.task, "dev")[: cfg.eval_items],
    )
    stream = QuestionStream(train_items, cfg.batch_size, cfg.seed)
    marker, sep = meta["marker"], meta["sep"]
    eval_kw = dict(max_new_tokens=cfg.max_new_tokens, marker=marker, sep=sep, seed=cfg.seed)
    method = cfg.method
    meta = {**meta, "task": cfg.task, "method": method, "init": str(cfg.init)}

    model.train()
    for step in (
        bar := trange(
            run.start_step, cfg.steps, desc=method, initial=run.start_step, total=cfg.steps
        )
    ):
        t0 = time.perf_counter()
        batch = stream.batch(step)
        opts = options_for(tok, batch.items, marker, sep)
        option_ids = padded_option_ids(opts).to(device)
        b, m = len(batch.items), cfg.m

        # 1. on-policy rationales, no gradient
        prompts = [build_prompt(tok, it.prompt, marker=marker) for it in batch.items]
        rats = sample_rationales(
            model,
            tok,
            prompts,
            m,
            cfg.max_new_tokens,
            bridge=opts[0].bridge,
            marker=marker,
            temperature=cfg.temperature,
            seed=step_seed(cfg.seed, step),
        )
        t_sample = time.perf_counter()

        # 2. one forward with gradient: readout u and log pi(r | x)
        u, _, logp = score_rationales(model, rats, option_ids)
        u, logp = u.view(b, m, -1), logp.view(b, m)

        # 3. reader and KL anchor (the reference model never gets a gradient)
        extra, kl = None, None
        if ref is not None:
            with torch.no_grad():
                ref_u, _, ref_logp = score_rationales(ref, rats, option_ids)
            log_ratio = logp.detach() - ref_logp.view(b, m)
            kl = log_ratio.mean()
            if cfg.beta > 0:
                extra = -cfg.beta * log_ratio
        if cfg.reader == "ref":
            u_read = ref_u.view(b, m, -1)
        elif cfg.reader == "none":  # a constant readout: no outcome reward, no pathwise term
            u_read = torch.where(u > 0, 1.0, 0.0).detach()
            u_read = u_read / u_read.sum(-1, keepdim=True)
        else:
            u_read = u
        y = batch.y.to(device)
        terms = surrogate_terms(u_read, logp, y, cfg.lam, extra, cfg.rule)

        # 4. the loss, the gradient-dilution diagnostics, the update
        loss = terms.loss(cfg.sf_weight)
        row = {"step": step, "loss": loss.item()}
        if cfg.grad_terms_every and step % cfg.grad_terms_every == 0:
            g = gradient_terms(terms, params)
            row["grad_pathwise"] = grad_norm(g["pathwise"])
            row["grad_score_function"] = grad_norm(g["score_function"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        row["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip))
        opt.step()

        row |= rationale_stats(u.detach(), rats.lengths.view(b, m), rats.forced.view(b, m))
        row |= {
            "reward": float(terms.rewards.mean()),
            "accuracy_u": float((u.detach().argmax(-1) == y[:, None]).float().mean()),
            "kl": None if kl is None else float(kl),
            "time_sample": t_sample - t0,
            "time_step": time.perf_counter() - t0,
        }
        if cfg.eval_every and (step + 1) % cfg.eval_every == 0:
            model.eval()
            dev = summarize(run_eval(model, tok, dev_items, **eval_kw))
            model.train()
            row |= {f"dev_{k}": dev[k] for k in ("accuracy", "brier", "ece", "aurc", "mean_length")}
        run.log(row)
        bar.set_postfix(
            loss=f"{row['loss']:.3f}", len=f"{row['rationale_length']:.1f}", refresh=False
        )
        if (step + 1) % cfg.save_every == 0 or step + 1 == cfg.steps:
            run.save(step + 1, model, tok, opt, meta)

    return finish(run, model, tok, meta, cfg, eval_kw)


def finish(run: RunDir, model, tok, meta: dict, cfg, eval_kw: dict) -> Path:
    """Final dev/test eval dumps, temperature fitted on dev, and ``final/`` checkpoint."""
    model.eval()
    dev_rows = run_eval(model, tok, load_task_items(cfg.task, "dev"), **eval_kw)
    run.write_eval("dev", dev_rows)
    result = {"dev": summarize(dev_rows, dev_rows=dev_rows)}
    if cfg.test_items:
        test_rows = run_eval(
            model, tok, load_task_items(cfg.task, "test")[: cfg.test_items], **eval_kw
        )
        run.write_eval("test", test_rows)
        result["test"] = summarize(test_rows, dev_rows=dev_rows)
    meta = {**meta, "step": cfg.steps, "temperature": result["dev"]["T"], "metrics": result}
    save_checkpoint(run.path / "final", model, tok, meta)
    return run.path


def preset(method: str, **overrides) -> RLCDConfig:
    """The default config of ``method`` (see ``METHODS``) with ``overrides`` applied."""
    return replace(METHODS[method], **overrides)
