"""Evaluation: run a checkpoint on task items and score its readouts.

``run_eval`` produces one row per item (the eval-dump format shared by training,
reproduce and the dashboard):
``uid``, ``label``, ``q``, ``options``, ``rationales`` (M texts), ``forced`` and
``lengths`` (per rationale), ``readouts`` (M x K), ``mixture`` (mean readout),
``probs`` and ``logits`` (the single-query readout: the first rationale's). In
``direct`` mode there is one empty rationale: the prompt ends with the bare marker.
``summarize`` turns rows into the paper's Table 1 row via ``metrics.evaluate``.
``run_eval(..., progress=True)`` (``rlcd-lab eval``) shows a tqdm bar over the items read,
on stderr.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tqdm import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from . import metrics
from .reader import Mode, read
from .readout import MARKER, SEP
from .tasks import TaskItem


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
    progress: bool = False,
) -> list[dict]:
    """Eval-dump rows for ``items`` (see the module docstring), read by
    :func:`rlcd_lab.reader.read` (batched, seeded); each item over its own options.

    ``progress``: a tqdm bar on stderr over the items read, advancing one batch of
    ``batch_size`` at a time (``TQDM_DISABLE=1`` in the environment hides it). The rows do
    not depend on it.
    """
    bar = tqdm(total=len(items), desc=f"eval {mode}", unit="item") if progress else None
    try:
        readings = read(
            model, tokenizer, [it.prompt for it in items], [it.options for it in items],
            mode=mode, m=m, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
            marker=marker, sep=sep, batch_size=batch_size,
            on_batch=None if bar is None else bar.update,
        )  # fmt: skip
    finally:
        if bar is not None:
            bar.close()
    return [
        {
            "uid": it.uid,
            "label": it.label,
            "q": None if it.q is None else list(it.q),
            "options": list(it.options),
            "rationales": r.texts,
            "forced": r.forced,
            "lengths": r.lengths,
            "readouts": r.u.tolist(),
            "mixture": r.mixture.tolist(),
            "probs": r.u[0].tolist(),
            "logits": r.logits[0].tolist(),
        }
        for it, r in zip(items, readings, strict=True)
    ]


def summarize(
    rows: Sequence[dict], dev_rows: Sequence[dict] | None = None, eps: float = metrics.DEFAULT_EPS
) -> dict:
    """Table 1 row for single-query readouts (``metrics.evaluate``), plus rationale stats.

    With ``dev_rows`` the temperature is fitted on dev and every metric is repeated after
    scaling (``ts_`` prefix). Adds ``mean_length`` (sampled tokens per rationale) and
    ``forced_rate``. Items may have different numbers of options: logits are padded with
    ``-inf`` (probability 0) and ``q`` with 0 (``metrics.pad_ragged``), so every metric of
    an item is computed over its own options.
    """
    labels = np.array([r["label"] for r in rows])
    q = metrics.pad_ragged([r["q"] for r in rows], 0.0) if rows[0]["q"] is not None else None
    dev = None
    if dev_rows is not None:
        dev = (
            metrics.pad_ragged([r["logits"] for r in dev_rows], -np.inf),
            np.array([r["label"] for r in dev_rows]),
        )
    logits = metrics.pad_ragged([r["logits"] for r in rows], -np.inf)
    out = metrics.evaluate(logits, labels, dev=dev, eps=eps, is_logits=True, q=q)
    out["mean_length"] = float(np.mean([np.mean(r["lengths"]) for r in rows]))
    out["forced_rate"] = float(np.mean([np.mean(r["forced"]) for r in rows]))
    return out
