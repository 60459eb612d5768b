"""Post-hoc baselines: a trained run's readout recalibrated on dev, as rows of the tables.

A post-hoc calibrator is one entry of :data:`CALIBRATORS` (:class:`Calibrator`) and a
row of ``rlcd_lab.methods.METHOD_TABLE`` (role ``post-hoc``: its label): fitted on a
run's dev items only, applied to its test items, per seed, reading the run's readout after
its dev-fitted temperature and the question's features
(:data:`rlcd_lab.tasks.features.QUESTION_FEATURES`). Start at :func:`add_posthoc`, which
adds them to a summary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from rlcd_lab import metrics
from rlcd_lab.files import rundir
from rlcd_lab.math import calibrators as cal
from rlcd_lab.methods import METHOD_TABLE
from rlcd_lab.reports.results import METRICS, RLCD, RunResult, mean_sd, paired
from rlcd_lab.tasks import load_task_items
from rlcd_lab.tasks.features import feature_matrix
from rlcd_lab.tasks.synthetic import TASKS

BASES = ("grpo-matched", "grpo")
"""The run a summary's calibrators recalibrate: the first of these it holds."""
FOLDS = 5
"""Folds of the cross-fitting on dev that chooses the best calibrator."""
CONF_CLIP = 1e-6


@dataclass(frozen=True)
class Split:
    """One split of a run as a calibrator reads it: raw ``logits (N, K)``, ``probs`` after
    the run's dev-fitted T, ``labels (N,)`` and question ``features (N, F)``."""

    logits: np.ndarray
    probs: np.ndarray
    labels: np.ndarray
    features: np.ndarray

    def take(self, idx: np.ndarray) -> Split:
        """The items ``idx``."""
        return Split(self.logits[idx], self.probs[idx], self.labels[idx], self.features[idx])


Fitted = Callable[[Split], np.ndarray]
"""A fitted calibrator: a split -> its recalibrated probabilities ``(N, K)``."""


def with_confidence(probs: np.ndarray, c: np.ndarray, present: np.ndarray) -> np.ndarray:
    """``probs (N, K)`` with the top option's probability set to ``c (N,)`` (clipped to
    ``[1e-6, 1 - 1e-6]``) and the other ``present (N, K)`` options sharing ``1 - c`` as
    they shared theirs (evenly where they held nothing); absent options keep 0.

    A confidence ``c`` becomes a distribution by giving the top option ``c`` and the others
    ``1 - c`` in proportion to the scaled readout (``c`` kept in ``[1e-6, 1 - 1e-6]``).
    """
    c = np.clip(c, CONF_CLIP, 1 - CONF_CLIP)
    top = probs.argmax(1)
    rows = np.arange(len(probs))
    others = np.where(present, probs, 0.0)
    others[rows, top] = 0.0
    total = others.sum(1, keepdims=True)
    mask = present.astype(np.float64)
    mask[rows, top] = 0.0
    even = mask / np.maximum(mask.sum(1, keepdims=True), 1)
    share = np.where(total > 0, others / np.where(total > 0, total, 1), even)
    out = share * (1 - c)[:, None]
    out[rows, top] = c
    return out


def margin(probs: np.ndarray) -> np.ndarray:
    """``log p_top - log p_second`` of each row (the scaled readout's margin, nats)."""
    logp = np.log(np.maximum(np.sort(probs, axis=1)[:, ::-1][:, :2], metrics.EPS))
    return logp[:, 0] - logp[:, 1]


def _groups(features: np.ndarray) -> list[tuple]:
    return [tuple(row) for row in features.tolist()]


def fit_group_ts(dev: Split) -> Fitted:
    """A temperature per question group (all features equal), fitted on dev."""
    by_group, t_all = cal.fit_group_temperature(dev.logits, dev.labels, _groups(dev.features))

    def apply(split: Split) -> np.ndarray:
        t = np.array([by_group.get(g, t_all) for g in _groups(split.features)])
        return metrics.apply_temperature(split.logits / t[:, None], 1.0)

    return apply


def _standardize(dev: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    keep = dev.std(0) > 0
    mu, sd = dev.mean(0)[keep], dev.std(0)[keep]
    return lambda x: (x[:, keep] - mu) / sd


def fit_logistic(dev: Split) -> Fitted:
    """P(right) from the scaled margin and the standardized features, fitted on dev."""

    def design(split: Split) -> np.ndarray:
        return np.column_stack([margin(split.probs), split.features])

    scale = _standardize(design(dev))
    w = cal.fit_logistic(scale(design(dev)), dev.probs.argmax(1) == dev.labels)
    return lambda split: with_confidence(
        split.probs, cal.predict_logistic(w, scale(design(split))), np.isfinite(split.logits)
    )


def fit_isotonic(dev: Split) -> Fitted:
    """P(right) by isotonic regression on the scaled confidence, fitted on dev."""
    fit = cal.fit_isotonic(dev.probs.max(1), dev.probs.argmax(1) == dev.labels)
    return lambda split: with_confidence(
        split.probs, cal.predict_isotonic(fit, split.probs.max(1)), np.isfinite(split.logits)
    )


@dataclass(frozen=True)
class Calibrator:
    """One post-hoc calibrator: its run-name suffix ``name`` (its row of the method
    registry), ``fit``
    (dev split -> fitted calibrator) and whether it needs question features.

    * ``group-ts``: one temperature per question group (the items sharing every feature's
      value; :func:`rlcd_lab.math.calibrators.fit_group_temperature`), on the raw logits;
    * ``logistic``: P(the answer is right) by logistic regression on the scaled readout's
      margin (log-probability of the top option minus the runner-up's) and the features,
      standardized on dev (:func:`rlcd_lab.math.calibrators.fit_logistic`);
    * ``isotonic``: P(right) by isotonic regression on the scaled confidence
      (:func:`rlcd_lab.math.calibrators.fit_isotonic`).
    """

    name: str
    fit: Callable[[Split], Fitted]
    needs_features: bool = False

    @property
    def label(self) -> str:
        """Its name in tables (its registry row's)."""
        return METHOD_TABLE[self.name].label

    @property
    def role(self) -> str:
        """``post-hoc`` (its registry row's role)."""
        return METHOD_TABLE[self.name].role


CALIBRATORS: list[Calibrator] = [
    Calibrator("group-ts", fit_group_ts, needs_features=True),
    Calibrator("logistic", fit_logistic),
    Calibrator("isotonic", fit_isotonic),
]
"""Every post-hoc calibrator, in table order."""
BY_NAME = {c.name: c for c in CALIBRATORS}


def _features(task: str, uids: Sequence[str | None], split: str) -> np.ndarray:
    """``(N, F)`` question features of the items ``uids`` (``(N, 0)`` for a task with no
    declared features, whose questions are not in the repository, or a dump without uids)."""
    if task not in TASKS or None in uids:
        return np.zeros((len(uids), 0))
    prompts = {it.uid: it.prompt for it in load_task_items(task, split)}
    names, rows = feature_matrix(task, [prompts[u] for u in uids])
    return np.array(rows, dtype=np.float64).reshape(len(uids), len(names))


def splits(run: RunResult, task: str) -> tuple[Split, Split]:
    """The dev and test :class:`Split` of a run read from disk (uids from its dumps)."""
    from rlcd_lab.files.io import read_jsonl

    out = []
    for name, logits, labels, probs in (
        ("dev", run.dev_logits, run.dev_labels, run.dev_probs()),
        ("test", run.logits, run.labels, run.probs()),
    ):
        uids = [r.get("uid") for r in read_jsonl(rundir.eval_file(run.path, name))]
        out.append(Split(logits, probs, labels, _features(task, uids, name)))
    return out[0], out[1]


def calibrated_run(run: RunResult, dev: Split, test: Split, c: Calibrator, eps: float) -> RunResult:
    """``run`` with its probabilities replaced by calibrator ``c`` fitted on ``dev``:
    logits ``log p`` and ``T = 1`` (the calibrator's output is not scaled again); its row
    holds the metrics of those probabilities (also as the ``ts_*`` the tables read)."""
    fitted = c.fit(dev)
    p_test, p_dev = fitted(test), fitted(dev)
    row = metrics.evaluate(p_test, run.labels, eps=eps)
    row.update({f"ts_{k}": v for k, v in list(row.items()) if k not in ("n", "eps")})
    row.update(T=1.0, mean_length=run.row["mean_length"], forced_rate=run.row["forced_rate"])
    with np.errstate(divide="ignore"):
        return replace(
            run,
            row=row,
            T=1.0,
            logits=np.log(p_test),
            dev_logits=np.log(p_dev),
            on_disk=False,
            _views={},
        )


def cv_brier(dev: Split, c: Calibrator, folds: int = FOLDS) -> float:
    """Brier score of ``c``'s cross-fitted dev predictions: item ``i`` in fold ``i mod
    folds`` is predicted by the calibrator fitted on the other folds (lower is better)."""
    fold = np.arange(len(dev.labels)) % folds
    pred = np.zeros_like(dev.probs)
    for f in range(folds):
        fitted = c.fit(dev.take(np.flatnonzero(fold != f)))
        pred[fold == f] = fitted(dev.take(np.flatnonzero(fold == f)))
    return metrics.brier(pred, dev.labels)


def add_posthoc(
    summary: dict, loaded: dict[str, list[RunResult]], task: str, eps: float, n: int
) -> dict:
    """Add every calibrator on the summary's GRPO run (:data:`BASES`) to ``summary`` and
    ``loaded`` (in place): runs ``<base>+<name>`` (mean and s.d. over seeds of each metric,
    ``role: post-hoc``), RLCD's paired tests against each (``n`` replicates), and
    ``summary["posthoc"]``: ``{"base", "features", "cv_dev_brier": {name: mean over
    seeds}, "best"}``. Nothing when the summary has no GRPO run or no RLCD run.

    :func:`add_posthoc` adds, to a summary, each calibrator on GRPO (matched budget when
    shipped) as a run ``<base>+<name>`` (its ``runs`` entry, RLCD's paired tests against it)
    and ``posthoc``: which calibrator is best on dev (the lowest Brier score of its 5-fold
    cross-fitted dev predictions, mean over seeds), the comparison the headline adds.
    """
    base = next((b for b in BASES if b in loaded), None)
    if base is None or RLCD not in loaded or loaded[base][0].dev_logits is None:
        return summary
    data = [splits(r, task) for r in loaded[base]]
    has_features = data[0][0].features.shape[1] > 0
    scores = {}
    for c in CALIBRATORS:
        if c.needs_features and not has_features:
            continue
        name = f"{base}+{c.name}"
        group = [
            calibrated_run(r, d, t, c, eps) for r, (d, t) in zip(loaded[base], data, strict=True)
        ]
        loaded[name] = group
        entry = {
            k: mean_sd([g.row.get(src, np.nan) for g in group]) for k, (_, src) in METRICS.items()
        }
        entry.update(
            steps=summary["runs"][base].get("steps", 0),
            items=len(group[0].labels),
            per_seed=[g.row for g in group],
            role=c.role,
            base=base,
        )
        summary["runs"][name] = entry
        summary["paired"][f"{RLCD} - {name}"] = paired(loaded[RLCD], group, eps, n)
        scores[c.name] = float(np.mean([cv_brier(d, c) for d, _ in data]))
    summary["posthoc"] = {
        "base": base,
        "features": has_features,
        "cv_dev_brier": scores,
        "best": min(scores, key=scores.get),
    }
    return summary


def best_pair(summary: Mapping) -> str | None:
    """The summary's paired key ``reinforce - <base>+<best>`` (None without calibrators)."""
    ph = summary.get("posthoc")
    return None if ph is None else f"{RLCD} - {ph['base']}+{ph['best']}"
