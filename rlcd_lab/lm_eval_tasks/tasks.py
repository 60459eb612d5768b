"""lm-evaluation-harness task functions: rlcd_lab task items in, Table 1 metrics out.

The task YAML files beside this module (``rlcd_verify.yaml``, ``rlcd_facts.yaml``,
``rlcd_aleatoric.yaml``, all including ``_rlcd_template_yaml``) name these functions with
``!function rlcd_lab.lm_eval_tasks.tasks.<name>``: :func:`load_items` is the data set,
:func:`process_results` keeps each doc's scores and the aggregations (:func:`accuracy`,
:func:`brier`, ...) compute the metrics as ``rlcd-lab eval`` does (:func:`table`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from rlcd_lab import metrics
from rlcd_lab.tasks import load_task_items

if TYPE_CHECKING:
    import datasets

Scored = tuple[int, tuple[float, ...], int, tuple[float, ...] | None]
"""What :func:`process_results` keeps of one doc: ``(index, lls (K,), label, q (K,) or
None)``, ``lls`` the option log-likelihoods in the order of ``options``."""


def load_items(
    items: str = "verify", splits: Sequence[str] = ("test",), **_: object
) -> datasets.DatasetDict:
    """The ``custom_dataset`` of the rlcd tasks: one ``datasets.Dataset`` per split.

    ``items`` (``dataset_kwargs`` in the YAML): a synthetic task name (``verify``,
    ``facts``, ``aleatoric``) or a task-item JSONL file (its split siblings are read, see
    :func:`rlcd_lab.tasks.load_task_items`); ``splits``: which of ``train``, ``dev``,
    ``test`` to build. The harness also passes the task's metadata as keywords; they are
    ignored. Each row: ``uid``, ``prompt``, ``options`` (list of labels), ``label`` (gold
    index), ``q`` (outcome distribution or None) and ``index`` (position in the split).
    ``ValueError`` for an item without a label (the metrics score the label).

    * :func:`load_items` is the ``custom_dataset``: the items of a synthetic task (or a
      task-item JSONL file) from :func:`rlcd_lab.tasks.load_task_items`, built in memory as a
      ``datasets.DatasetDict`` (no hub, no download). A doc is one item: ``uid``, ``prompt``,
      ``options``, ``label``, ``q`` and ``index`` (its position in the split).
    """
    import datasets

    out = {}
    for split in [splits] if isinstance(splits, str) else list(splits):
        rows = []
        for i, it in enumerate(load_task_items(items, split)):
            if it.label is None:
                raise ValueError(f"{items} {split} item {it.uid!r} has no label to score")
            rows.append({**it.to_json(), "index": i})
        out[split] = datasets.Dataset.from_list(rows)
    return datasets.DatasetDict(out)


def _scored(doc: dict, results: Sequence[tuple[float, bool]]) -> Scored:
    lls = tuple(float(ll) for ll, _ in results)
    if len(lls) != len(doc["options"]):
        raise ValueError(
            f"item {doc['uid']!r}: {len(lls)} log-likelihoods for {len(doc['options'])} options"
        )
    q = doc.get("q")
    return int(doc["index"]), lls, int(doc["label"]), None if q is None else tuple(q)


def process_results(doc: dict, results: Sequence[tuple[float, bool]]) -> dict[str, Scored]:
    """Per-doc values of the rlcd tasks without ``jsd``: every metric gets the doc's
    :data:`Scored` tuple (``results``: one ``(loglikelihood, is_greedy)`` per option, in
    option order); the metrics are corpus-level, computed by the aggregations."""
    scored = _scored(doc, results)
    return {name: scored for name in METRICS}


def process_results_q(doc: dict, results: Sequence[tuple[float, bool]]) -> dict[str, Scored]:
    """:func:`process_results` plus ``jsd`` (tasks whose items carry an outcome
    distribution ``q``, e.g. ``rlcd_aleatoric``)."""
    scored = _scored(doc, results)
    return {name: scored for name in (*METRICS, "jsd")}


def table(scored: Sequence[Scored], eps: float = metrics.DEFAULT_EPS) -> dict[str, float]:
    """``metrics.evaluate`` over the docs' log-likelihoods, as
    ``rlcd_lab.summary.summarize`` calls it: docs sorted by ``index``, the ``lls (N,
    K_max)`` padded with ``-inf`` (an absent option has probability 0), used as logits
    (``softmax(log u) = u``), ``q`` padded with 0 when the first doc has one.

    * The harness asks the model for ``loglikelihood(prompt, " " + option)`` of every option
      (``output_type: multiple_choice``). With the ``rlcd`` model
      (:class:`rlcd_lab.lm_eval_tasks.model.RLCDLM`) these are ``log u_k``, the log readout, so
      ``softmax(lls) = u``; any other harness model gives its own option log-likelihoods.
    * :func:`process_results` keeps, per doc, ``(index, lls, label, q)``; the corpus-level
      aggregations (:func:`accuracy`, :func:`brier`, :func:`nll`, :func:`ece`, :func:`aurc`,
      :func:`cov_at_eps`, :func:`pred_cov_at_eps`, :func:`jsd`) compute the metric over all
      docs with :func:`rlcd_lab.metrics.evaluate` (``is_logits=True``, each item over its own
      options via ``metrics.pad_ragged``), exactly as ``rlcd_lab.summary.summarize`` (and so
      ``rlcd-lab eval``) does. No formula is written here.

    Docs are ranked in their task order (``index``) before aggregating, so the tie rule of
    AURC and Cov@eps (stable sort on confidence) sees the items in the order ``rlcd-lab eval``
    does. Cov@eps uses ``metrics.DEFAULT_EPS``; ECE its 15 equal-width bins.
    """
    rows = sorted(scored, key=lambda s: s[0])
    logits = metrics.pad_ragged([s[1] for s in rows], -np.inf)
    labels = np.array([s[2] for s in rows])
    q = metrics.pad_ragged([s[3] for s in rows], 0.0) if rows[0][3] is not None else None
    return metrics.evaluate(logits, labels, eps=eps, is_logits=True, q=q)


def accuracy(scored: Sequence[Scored]) -> float:
    """Top-1 accuracy ``(1/N) sum_i 1[argmax_k u_ik = y_i]`` (``metrics.accuracy``);
    higher is better, in ``[0, 1]``."""
    return table(scored)["accuracy"]


def brier(scored: Sequence[Scored]) -> float:
    """Brier score ``(1/N) sum_i ||u_i - e_{y_i}||^2`` (``metrics.brier``); lower is
    better, in ``[0, 2]``."""
    return table(scored)["brier"]


def nll(scored: Sequence[Scored]) -> float:
    """Negative log-likelihood ``-(1/N) sum_i log max(u_{i, y_i}, 1e-12)`` in nats
    (``metrics.nll``); lower is better."""
    return table(scored)["nll"]


def ece(scored: Sequence[Scored]) -> float:
    """Top-label ECE ``sum_b |B_b|/N |acc_b - conf_b|`` over 15 equal-width bins of
    ``max_k u_ik`` (``metrics.ece``); lower is better, in ``[0, 1]``."""
    return table(scored)["ece"]


def aurc(scored: Sequence[Scored]) -> float:
    """Area under the risk-coverage curve, ``(1/N) sum_k`` error rate of the ``k`` most
    confident docs (``metrics.aurc``; ties keep the task order); lower is better."""
    return table(scored)["aurc"]


def cov_at_eps(scored: Sequence[Scored]) -> float:
    """Cov@eps at ``eps = metrics.DEFAULT_EPS``: the largest share ``k/N`` of the most
    confident docs whose observed error rate is ``<= eps`` (``metrics.coverage_at_risk``);
    higher is better, in ``[0, 1]``."""
    return table(scored)["cov_at_eps"]


def pred_cov_at_eps(scored: Sequence[Scored]) -> float:
    """Label-free Cov@eps: the largest ``k/N`` whose predicted error ``mean(1 - max u)``
    over the top-k is ``<= eps`` (``metrics.predicted_coverage_at_risk``); higher is
    better."""
    return table(scored)["pred_cov_at_eps"]


def jsd(scored: Sequence[Scored]) -> float:
    """Mean Jensen-Shannon divergence (bits) between ``u_i`` and the outcome distribution
    ``q_i`` (``metrics.mean_jsd``); lower is better, in ``[0, 1]``. Needs ``q``."""
    return table(scored)["jsd"]


METRICS: tuple[str, ...] = (
    "accuracy",
    "brier",
    "nll",
    "ece",
    "aurc",
    "cov_at_eps",
    "pred_cov_at_eps",
)
"""The metrics every rlcd task reports (``jsd`` too where items carry ``q``); each name
is also the aggregation function of this module and the key of ``metrics.evaluate``."""
