"""Table 1's row of an evaluation: the metrics of eval dump rows (the format of
:func:`rlcd_lab.evaluate.run_eval`), raw and after temperature scaling fitted on dev.

Training's dev evaluations, the final summaries, the command line's ``eval`` and
:mod:`rlcd_lab.reports.results` all score rows through :func:`summarize`; numpy only
(importing it loads no torch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from rlcd_lab import metrics
from rlcd_lab.metrics import DEFAULT_EPS

STATED_FLOOR = 1e-6
"""The smallest probability a stated distribution gives an option (the floor of
``rlcd_lab.reader.verbal.stated_logits``, which imports torch)."""


def _stated_logits(answer: int, c: float, k: int) -> np.ndarray:
    """``log max(p, STATED_FLOOR)`` of the stated distribution over ``k`` options:
    ``p(answer) = c`` and ``(1 - c) / (k - 1)`` on each other option."""
    p = np.full(k, (1 - c) / max(k - 1, 1))
    p[answer] = c
    return np.log(np.maximum(p, STATED_FLOOR))


def row_logits(row: Mapping) -> list[float]:
    """An eval dump row's logits: ``row["logits"]``, except where they are the row's
    stated confidence (a stated-confidence view, ``rlcr-stated``: its logits are the
    distribution of ``stated_answer`` and ``stated_confidence`` held as float32, to 1e-9;
    an RLCR readout's dump holds the same fields beside its readout's logits). Those are
    rebuilt from the number the stated text carried, the shortest decimal that rounds to
    the float32 value (0.3499999940... is 0.35), so that equal stated confidences are
    equal whichever answer they are stated on ("0.05 on B" and "0.95 on A" are one
    distribution over two options)."""
    c, answer = row.get("stated_confidence"), row.get("stated_answer")
    if c is None or answer is None:
        return row["logits"]
    k = len(row["logits"])
    held = _stated_logits(int(answer), float(np.float32(c)), k)
    if not np.allclose(row["logits"], held, rtol=1e-9, atol=1e-12):
        return row["logits"]  # a readout, with a stated confidence beside it
    return _stated_logits(int(answer), float(str(np.float32(c))), k).tolist()


def dump_logits(rows: Sequence[dict]) -> np.ndarray:
    """``(N, K)`` logits of eval dump rows (:func:`row_logits`), padded with ``-inf`` to
    the most options of any row (``metrics.pad_ragged``)."""
    return metrics.pad_ragged([row_logits(r) for r in rows], -np.inf)


def summarize(
    rows: Sequence[dict], dev_rows: Sequence[dict] | None = None, eps: float = DEFAULT_EPS
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
        dev = (dump_logits(dev_rows), np.array([r["label"] for r in dev_rows]))
    logits = dump_logits(rows)
    out = metrics.evaluate(logits, labels, dev=dev, eps=eps, is_logits=True, q=q)
    out["mean_length"] = float(np.mean([np.mean(r["lengths"]) for r in rows]))
    out["forced_rate"] = float(np.mean([np.mean(r["forced"]) for r in rows]))
    return out
