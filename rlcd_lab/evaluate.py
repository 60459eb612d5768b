"""Evaluation: run a checkpoint on task items and score its readouts.

``run_eval`` produces one row per item (the eval-dump format of DESIGN.md sec. 4):
``uid``, ``label``, ``q``, ``options``, ``rationales`` (M texts), ``forced`` and
``lengths`` (per rationale), ``readouts`` (M x K), ``mixture`` (mean readout),
``probs`` and ``logits`` (the single-query readout: the first rationale's). In
``direct`` mode there is one empty rationale: the prompt ends with the bare marker.
``summarize`` turns rows into the paper's Table 1 row via ``metrics.evaluate``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from . import metrics
from .rationales import readout_texts, sample_rationales, score_rationales
from .readout import MARKER, SEP, OptionTokens, build_prompt, option_token_ids
from .tasks import TaskItem

Mode = Literal["direct", "reason"]


def options_for(
    tokenizer: PreTrainedTokenizerBase,
    items: Sequence[TaskItem],
    marker: str = MARKER,
    sep: str = SEP,
) -> list[OptionTokens]:
    """Option tokens of each item (computed once per distinct option tuple)."""
    cache: dict[tuple[str, ...], OptionTokens] = {}
    for item in items:
        if item.options not in cache:
            cache[item.options] = option_token_ids(tokenizer, item.options, marker, sep)
    return [cache[item.options] for item in items]


def padded_option_ids(options: Sequence[OptionTokens]) -> torch.Tensor:
    """``(B, K_max)`` option ids, -1 where an item has fewer options."""
    k = max(len(o) for o in options)
    return torch.tensor([list(o.ids) + [-1] * (k - len(o)) for o in options])


@torch.no_grad()
def run_eval(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    items: Sequence[TaskItem],
    *,
    mode: Mode = "reason",
    m: int = 1,
    max_new_tokens: int = 64,
    batch_size: int = 64,
    temperature: float = 1.0,
    seed: int = 0,
    marker: str = MARKER,
    sep: str = SEP,
) -> list[dict]:
    """Eval-dump rows for ``items`` (see the module docstring); batched and seeded."""
    if mode not in ("direct", "reason"):
        raise ValueError(f"mode must be 'direct' or 'reason', got {mode!r}")
    options = options_for(tokenizer, items, marker, sep)
    bridges = {o.bridge for o in options}
    if len(bridges) != 1:
        raise ValueError("items mix option formats that need different bridge tokens")
    rows: list[dict] = []
    for start in range(0, len(items), batch_size):
        batch, opts = items[start : start + batch_size], options[start : start + batch_size]
        ids = padded_option_ids(opts)
        if mode == "direct":
            texts = [build_prompt(tokenizer, it.prompt, direct=True, marker=marker) for it in batch]
            u, logits = readout_texts(model, tokenizer, texts, ids, opts[0].bridge)
            u, logits = u[:, None], logits[:, None]
            rats = [[""] for _ in batch]
            forced = np.zeros((len(batch), 1), bool)
            lengths = np.zeros((len(batch), 1), int)
        else:
            prompts = [build_prompt(tokenizer, it.prompt, marker=marker) for it in batch]
            r = sample_rationales(
                model,
                tokenizer,
                prompts,
                m,
                max_new_tokens,
                bridge=opts[0].bridge,
                marker=marker,
                temperature=temperature,
                seed=seed + start,
            )
            u, logits, _ = score_rationales(model, r, ids)
            u, logits = u.view(len(batch), m, -1), logits.view(len(batch), m, -1)
            rats = [r.texts[i * m : (i + 1) * m] for i in range(len(batch))]
            forced = r.forced.view(len(batch), m).cpu().numpy()
            lengths = r.lengths.view(len(batch), m).cpu().numpy()
        u, logits = u.float().cpu().numpy(), logits.float().cpu().numpy()
        for i, it in enumerate(batch):
            k = len(it.options)
            rows.append(
                {
                    "uid": it.uid,
                    "label": it.label,
                    "q": None if it.q is None else list(it.q),
                    "options": list(it.options),
                    "rationales": rats[i],
                    "forced": forced[i].tolist(),
                    "lengths": lengths[i].tolist(),
                    "readouts": u[i, :, :k].tolist(),
                    "mixture": u[i, :, :k].mean(0).tolist(),
                    "probs": u[i, 0, :k].tolist(),
                    "logits": logits[i, 0, :k].tolist(),
                }
            )
    return rows


def summarize(
    rows: Sequence[dict], dev_rows: Sequence[dict] | None = None, eps: float = 0.05
) -> dict:
    """Table 1 row for single-query readouts (``metrics.evaluate``), plus rationale stats.

    With ``dev_rows`` the temperature is fitted on dev and every metric is repeated after
    scaling (``ts_`` prefix). Adds ``mean_length`` (sampled tokens per rationale) and
    ``forced_rate``. All items must share K.
    """
    labels = np.array([r["label"] for r in rows])
    q = np.array([r["q"] for r in rows]) if rows[0]["q"] is not None else None
    dev = None
    if dev_rows is not None:
        dev = (np.array([r["logits"] for r in dev_rows]), np.array([r["label"] for r in dev_rows]))
    out = metrics.evaluate(
        np.array([r["logits"] for r in rows]), labels, dev=dev, eps=eps, is_logits=True, q=q
    )
    out["mean_length"] = float(np.mean([np.mean(r["lengths"]) for r in rows]))
    out["forced_rate"] = float(np.mean([np.mean(r["forced"]) for r in rows]))
    return out
