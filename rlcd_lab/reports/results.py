"""A run's results, read from its eval dumps, and the paper's paired statistics.

The one place that turns eval dumps (``run/eval/test.jsonl``, ``dev.jsonl`` and
``test-m<M>.jsonl``, the format of :func:`rlcd_lab.evaluate.run_eval`) into numbers; the
reproduction's report, the notebooks, the dashboard's Routing tab and the server's model
card all read runs through it. Numpy only (importing it loads no torch).

Start at :func:`load_run` (or :func:`from_rows` for rows in memory): a :class:`RunResult`,
whose :meth:`RunResult.view` is what the Routing tab draws; :func:`paired` tests method A
against method B over the same items and seeds; :func:`summarize_runs` is every number of
a reproduction."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from rlcd_lab import metrics
from rlcd_lab.files import rundir
from rlcd_lab.files.io import read_jsonl
from rlcd_lab.math import routing, stats
from rlcd_lab.methods import GRPO_STAGE1, MATCHED, METHOD_TABLE, SWEEP_PREFIX, mechanism_runs
from rlcd_lab.metrics import DEFAULT_EPS
from rlcd_lab.reports.mechanism import mechanism
from rlcd_lab.summary import dump_logits, summarize

RLCD = "reinforce"
"""The run every other run is compared with: two-stage RLCD."""
STAGE1 = "calibrate"
READOUT_ONLY = "readout-only"
"""Figure 3's reference: the fork that continues stage 1 (the readout alone)."""
FORKS = (RLCD, *(name for name, m in METHOD_TABLE.items() if m.role == "fork"))
"""Table 2: stage-2 continuations from the same stage-1 checkpoint: RLCD-RL and the method
registry's forks (``reinforce-ace``: RLCD-RL with the optional ACE reward, ``rlcd-lab
reproduce --ace``)."""
CONTINUES = {**{fork: STAGE1 for fork in FORKS}, GRPO_STAGE1: "grpo"}
"""The runs that continue another run's final checkpoint, and that run: their budget in
a summary counts both."""
PER_ITEM = ("accuracy", "brier", "nll")
"""Metrics that are means of per-item values (paired over items averaged over seeds)."""
CURVE = ("aurc", "cov_at_eps")
"""Whole-curve metrics (per seed, averaged; items resampled jointly across seeds)."""
METRICS = {  # summary key -> (column, key in summary.summarize's row)
    "accuracy": ("acc", "ts_accuracy"),
    "brier": ("Brier", "ts_brier"),
    "nll": ("NLL", "ts_nll"),
    "ece": ("ECE", "ts_ece"),
    "aurc": ("AURC", "ts_aurc"),
    "cov_at_eps": ("Cov@eps", "ts_cov_at_eps"),
    "T": ("T", "T"),
    "length": ("length", "mean_length"),
}
TABLE3_PAIRS = (("mixture", "endtoend"), ("sft", "endtoend"))
"""Table 3's comparisons besides RLCD's (same budget): mixture objective and cross-entropy
against the per-rationale objective."""
N_BOOT = 2000
"""Bootstrap replicates and Monte Carlo sign-flip patterns of every paired test."""
N_CLAIM = 4000
"""Replicates of a paired test a claim of the paper is judged on (:func:`rerun`)."""
RNG_SEEDS = (0, 1, 2, 3, 4)
"""The bootstrap RNG seeds a claim's test is run under: the first gives the numbers shown,
the others whether its verdict depends on the draw (a cell marked "borderline")."""


SUMMARY_DIGITS = 10
"""Significant digits of every float a summary file holds. The numbers recompute from
the dumps to about 1e-14 (relative) on any CPU: numpy's AVX-512 and AVX2 kernels differ
in the last bits of ``exp`` and ``log``, and the fitted T is a root found to float64
precision (:func:`rlcd_lab.metrics.fit_temperature`). Rounded to 10 digits, a recomputed
summary is byte-identical to the shipped one unless a value lies within that noise of a
rounding boundary (about 1e-4 per value), far below anything a table shows (3 digits)."""


def rounded(obj: object, digits: int = SUMMARY_DIGITS) -> object:
    """``obj`` (JSON-like: dicts, lists, numbers, strings) with every finite float rounded
    to ``digits`` significant digits; ints, bools, strings and non-finite floats as they are."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}") if math.isfinite(obj) else obj
    if isinstance(obj, Mapping):
        return {k: rounded(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [rounded(v, digits) for v in obj]
    return obj


def summary_json(summary: Mapping) -> str:
    """The text of a summary file: :func:`rounded` floats, sorted keys, one-space indent."""
    return json.dumps(rounded(summary), indent=1, sort_keys=True)


# ----------------------------------------------------------------------- views of a run
@dataclass(frozen=True)
class Ranked:
    """The items of a view ranked by a confidence ``measure`` (descending, stable on ties,
    :func:`rlcd_lab.metrics.confidence_order`): ``probs (N, K)``, ``labels (N,)``,
    ``confidence (N,)``, ``correct (N,)`` bool; the dev split's ``dev_confidence`` and
    ``dev_correct`` ranked the same way (None without dev). What the Routing tab's cost
    and risk-coverage numbers are computed on (:mod:`rlcd_lab.math.routing`)."""

    probs: np.ndarray
    labels: np.ndarray
    confidence: np.ndarray
    correct: np.ndarray
    dev_confidence: np.ndarray | None
    dev_correct: np.ndarray | None
    measure: str = "max_p"


def _ranked(
    probs: np.ndarray, labels: np.ndarray, measure: str, n_options: np.ndarray | None
) -> tuple[np.ndarray, ...]:
    conf = routing.confidences(probs, measure, n_options)  # type: ignore[arg-type]
    correct = probs.argmax(1) == labels
    order = metrics.confidence_order(conf)
    return probs[order], labels[order], conf[order], correct[order]


def rank(
    probs: np.ndarray,
    labels: np.ndarray,
    measure: str = "max_p",
    n_options: np.ndarray | None = None,
    dev: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None = None,
) -> Ranked:
    """:class:`Ranked` of ``probs (N, K)`` with ``labels (N,)`` under the confidence
    ``measure`` (:func:`rlcd_lab.math.routing.confidences`; ``n_options (N,)``: real options
    per padded row); ``dev`` is ``(probs, labels, n_options)`` of the dev split or None."""
    probs, labels, conf, correct = _ranked(probs, labels, measure, n_options)
    dev_conf = dev_correct = None
    if dev is not None:
        _, _, dev_conf, dev_correct = _ranked(dev[0], dev[1], measure, dev[2])
    return Ranked(probs, labels, conf, correct, dev_conf, dev_correct, measure)


def n_options(logits: np.ndarray) -> np.ndarray:
    """``(N,)`` real options per row of padded ``logits (N, K)`` (finite entries)."""
    return np.isfinite(logits).sum(1)


@dataclass(frozen=True)
class RunView:
    """One reading of a run's test items, what the faces draw: ``calibrated`` (divided by
    the run's fitted ``T``; raw: ``T = 1``) or not, ``aggregate`` ``single`` (the first
    rationale's readout, the paper's single query) or ``mixture`` (the mean of the ``m``
    per-rationale readouts of the run's largest ``test-m<M>`` dump, each scaled by ``T``;
    ``m = 1``: the dumps hold one rationale per item and the view is the single query).

    ``probs (N, K)``, ``labels (N,)``, ``n_options (N,)``; the dev split read as a single
    query (``dev_*``, None without a dev dump). Per-item values: :attr:`correct`,
    :attr:`confidence` (max p), :attr:`brier`, :attr:`nll`; :meth:`ranked` under a
    confidence measure and :meth:`metrics` (Table 1's numbers) are cached.
    """

    calibrated: bool
    aggregate: str
    m: int
    T: float
    probs: np.ndarray
    labels: np.ndarray
    n_options: np.ndarray
    dev_probs: np.ndarray | None = None
    dev_labels: np.ndarray | None = None
    dev_n_options: np.ndarray | None = None
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    @cached_property
    def correct(self) -> np.ndarray:
        """``(N,)`` bool: the argmax (first on ties) is the label."""
        return self.probs.argmax(1) == self.labels

    @cached_property
    def confidence(self) -> np.ndarray:
        """``(N,)`` max p."""
        return self.probs.max(1)

    @cached_property
    def brier(self) -> np.ndarray:
        """``(N,)`` per-item Brier loss (:func:`rlcd_lab.metrics.item_brier`)."""
        return metrics.item_brier(self.probs, self.labels)

    @cached_property
    def nll(self) -> np.ndarray:
        """``(N,)`` per-item NLL in nats (:func:`rlcd_lab.metrics.item_nll`)."""
        return metrics.item_nll(self.probs, self.labels)

    def ranked(self, measure: str = "max_p") -> Ranked:
        """The items (and dev's) ranked by ``measure`` (:func:`rank`), cached."""
        key = ("ranked", measure)
        if key not in self._cache:
            dev = None
            if self.dev_probs is not None:
                dev = (self.dev_probs, self.dev_labels, self.dev_n_options)
            self._cache[key] = rank(self.probs, self.labels, measure, self.n_options, dev)
        return self._cache[key]

    def metrics(self, eps: float = DEFAULT_EPS) -> dict[str, float]:
        """Table 1 metrics of the view (:func:`rlcd_lab.metrics.evaluate`, max p):
        accuracy, brier, nll, ece, aurc, cov_at_eps, pred_cov_at_eps, ..., cached."""
        key = ("metrics", float(eps))
        if key not in self._cache:
            row = metrics.evaluate(self.probs, self.labels, eps=eps)
            self._cache[key] = {k: float(v) for k, v in row.items()}
        return self._cache[key]


def read_readouts(run: str | Path, labels: np.ndarray) -> tuple[int, np.ndarray] | None:
    """``(M, log u (N, M, K))`` of the run's test dump with the most rationales per item
    (the largest ``eval/test-m<M>.jsonl``, else ``eval/test.jsonl``), padded options at
    ``-inf``; None when there is no readable dump or its items are not ``labels``' items,
    in the same order."""
    dumps = rundir.mixture_dumps(run)
    file = dumps[-1][1] if dumps else rundir.eval_file(run, "test")
    try:
        rows = read_jsonl(file)
    except (OSError, ValueError):
        return None
    if len(rows) != len(labels) or any(
        r.get("label") != y for r, y in zip(rows, labels, strict=True)
    ):
        return None
    m = min(len(r["readouts"]) for r in rows)
    k = max(len(r["readouts"][0]) for r in rows)
    logu = np.full((len(rows), m, k), -np.inf)
    for i, r in enumerate(rows):
        u = np.asarray(r["readouts"][:m], dtype=np.float64)
        with np.errstate(divide="ignore"):
            logu[i, :, : u.shape[1]] = np.log(u)
    return m, logu


@dataclass(frozen=True)
class RunResult:
    """One run's test items, read from its eval dumps.

    ``logits (N, K)`` single-query readouts (ragged option counts padded with ``-inf``),
    ``labels (N,)``; ``T`` fitted on dev (``fitted``), else 1; ``row`` is
    :func:`summarize` of test with dev (raw metrics and, when fitted, ``T`` and ``ts_*``);
    ``q (N, K)`` outcome distributions and ``mixture (N, K)`` the mixture of ``m_mixture``
    rationales when the task is aleatoric and the dump exists; ``empty_share`` the share
    of those rationales that are empty (the model switched reasoning off). ``on_disk``:
    read from ``path`` by :func:`load_run` (the mixture view reads its readouts there).
    :meth:`view` gives what the faces draw (calibrated or raw, single query or mixture).
    """

    path: Path
    row: dict
    T: float
    fitted: bool
    logits: np.ndarray
    labels: np.ndarray
    dev_logits: np.ndarray | None = None
    dev_labels: np.ndarray | None = None
    q: np.ndarray | None = None
    mixture: np.ndarray | None = None
    m_mixture: int = 0
    empty_share: float | None = None
    on_disk: bool = False
    _views: dict = field(default_factory=dict, compare=False, repr=False)

    def probs(self, calibrated: bool = True) -> np.ndarray:
        """``(N, K)`` test probabilities, temperature-scaled when ``calibrated``."""
        return metrics.apply_temperature(self.logits, self.T if calibrated else 1.0)

    def dev_probs(self, calibrated: bool = True) -> np.ndarray | None:
        """``(N_dev, K)`` dev probabilities, temperature-scaled when ``calibrated``; None
        without a dev dump."""
        if self.dev_logits is None:
            return None
        return metrics.apply_temperature(self.dev_logits, self.T if calibrated else 1.0)

    @cached_property
    def readouts(self) -> tuple[int, np.ndarray] | None:
        """``(M, log u (N, M, K))`` per-rationale readouts of the run's largest test dump
        (:func:`read_readouts`, read on first use); None for rows not read from disk."""
        return read_readouts(self.path, self.labels) if self.on_disk else None

    def view(self, calibrated: bool = True, aggregate: str = "single") -> RunView:
        """The :class:`RunView` of the test items (cached): single query
        ``softmax(z / T)``, or the mixture ``mean_i softmax(log u_i / T)`` of the M
        readouts of :attr:`readouts` (``softmax(log u / T) = softmax(z / T)``: scaling a
        readout is scaling its logits); ``T = 1`` raw. Dev is always the single query."""
        key = (bool(calibrated), aggregate)
        if key in self._views:
            return self._views[key]
        if aggregate not in routing.AGGREGATES:
            raise ValueError(f"aggregate must be one of {list(routing.AGGREGATES)}")
        T = self.T if calibrated else 1.0
        mix = self.readouts if aggregate == "mixture" else None
        m = 1 if mix is None else mix[0]
        if m == 1:  # one rationale per item: the single query itself
            probs = self.probs(calibrated)
        else:
            _, logu = mix
            n, mm, k = logu.shape
            flat = metrics.apply_temperature(logu.reshape(n * mm, k), T)
            probs = flat.reshape(n, mm, k).mean(1)
        dev = self.dev_logits
        self._views[key] = RunView(
            calibrated=bool(calibrated),
            aggregate=aggregate,
            m=m,
            T=T,
            probs=probs,
            labels=self.labels,
            n_options=n_options(self.logits),
            dev_probs=self.dev_probs(calibrated),
            dev_labels=self.dev_labels,
            dev_n_options=None if dev is None else n_options(dev),
        )
        return self._views[key]

    @property
    def scaled(self) -> np.ndarray:
        """``(N, K)`` test probabilities after temperature scaling (the "+TS" of Table 1)."""
        return self.view(True).probs

    @property
    def confidence(self) -> np.ndarray:
        """``(N,)`` max probability after scaling."""
        return self.view(True).confidence

    @property
    def correct(self) -> np.ndarray:
        """``(N,)`` 1.0 where the argmax is the label."""
        return self.view(True).correct.astype(float)

    @property
    def brier(self) -> np.ndarray:
        """``(N,)`` per-item Brier loss ``sum_k (p_k - 1[k = y])^2`` (lower is better)."""
        return self.view(True).brier

    @property
    def nll(self) -> np.ndarray:
        """``(N,)`` per-item ``-log max(p_y, 1e-12)`` in nats (lower is better)."""
        return self.view(True).nll

    def item_values(self, metric: str) -> np.ndarray:
        """``(N,)`` per-item values whose mean is ``metric`` (accuracy, brier or nll)."""
        return {"accuracy": self.correct, "brier": self.brier, "nll": self.nll}[metric]

    @property
    def jsd(self) -> np.ndarray | None:
        """``(N,)`` JSD(single-query readout after scaling, q) in bits; None without q."""
        return None if self.q is None else metrics.jsd(self.scaled, self.q)

    @property
    def mixture_jsd(self) -> np.ndarray | None:
        """``(N,)`` JSD(mixture of ``m_mixture`` rationales, q) in bits (no scaling)."""
        if self.q is None or self.mixture is None:
            return None
        return metrics.jsd(self.mixture, self.q)

    @property
    def jsd_table3(self) -> np.ndarray | None:
        """``(N,)`` JSD to q in bits of the paper's Table 3 readout: the mixture of the
        run's rationales when it has a mixture dump, else (direct answers, e.g. SFT) the
        single query after temperature scaling."""
        return self.mixture_jsd if self.mixture is not None else self.jsd


def from_rows(
    test: Sequence[dict],
    dev: Sequence[dict] | None = None,
    path: str | Path = "",
    eps: float = DEFAULT_EPS,
    mixture: tuple[int, Sequence[dict]] | None = None,
    on_disk: bool = False,
) -> RunResult:
    """A :class:`RunResult` from eval dump rows already in memory (the format of
    :func:`rlcd_lab.evaluate.run_eval`): ``test`` rows, ``dev`` rows (T is fitted on them;
    None or empty: ``T = 1``, ``fitted = False``) and, optionally, ``(M, rows)`` of a
    mixture dump of M rationales. ``path`` is only recorded (``on_disk``: the rows are
    the run's dumps there, as :func:`load_run` reads them). Raises ValueError for an
    empty test split."""
    if not test:
        raise ValueError(f"{path or 'test rows'}: the test dump is empty")
    dev = list(dev) if dev else None
    row = summarize(test, dev_rows=dev, eps=eps)
    fitted = "T" in row
    q = mix = empty = None
    m_mixture = 0
    if test[0].get("q") is not None:
        q = metrics.pad_ragged([r["q"] for r in test], 0.0)
        if mixture is not None:
            m_mixture, rows = mixture
            mix = metrics.pad_ragged([r["mixture"] for r in rows], 0.0)
            empty = float(np.mean([t == "" for r in rows for t in r["rationales"]]))
    return RunResult(
        path=Path(path),
        row=row,
        T=float(row["T"]) if fitted else 1.0,
        fitted=fitted,
        logits=dump_logits(test),
        labels=np.array([r["label"] for r in test]),
        dev_logits=dump_logits(dev) if dev else None,
        dev_labels=np.array([r["label"] for r in dev]) if dev else None,
        q=q,
        mixture=mix,
        m_mixture=m_mixture,
        empty_share=empty,
        on_disk=on_disk,
    )


def load_run(run: str | Path, eps: float = DEFAULT_EPS) -> RunResult:
    """Read ``run/eval``: ``test.jsonl`` (required), ``dev.jsonl`` (T is fitted on it) and
    the largest ``test-m<M>.jsonl`` mixture dump, if any (:func:`from_rows`), each plain
    or packed (``.jsonl.xz``, :func:`rlcd_lab.files.io.read_jsonl`). ``eps``:
    Cov@eps's error budget. Raises FileNotFoundError (naming the file) when the test dump
    is missing, ValueError when it is empty."""
    run = Path(run)
    if not rundir.has_eval(run, "test"):
        test_file = rundir.eval_file(run, "test")
        raise FileNotFoundError(f"{test_file}: no test dump (run rlcd-lab eval first)")
    test = read_jsonl(rundir.eval_file(run, "test"))
    dev = read_jsonl(rundir.eval_file(run, "dev")) if rundir.has_eval(run, "dev") else None
    mixture = None
    dumps = rundir.mixture_dumps(run)
    if dumps and test and test[0].get("q") is not None:
        mixture = (dumps[-1][0], read_jsonl(dumps[-1][1]))
    return from_rows(test, dev, path=run, eps=eps, mixture=mixture, on_disk=True)


def _seed_names(group: Sequence[RunResult]) -> list[str] | None:
    """Each run's ``seed-<s>`` folder name; None unless every run has a distinct one."""
    names = [r.path.parent.name for r in group]
    ok = len(set(names)) == len(names) and all(n.startswith("seed-") for n in names)
    return names if ok else None


def aligned(
    a: Sequence[RunResult], b: Sequence[RunResult]
) -> tuple[list[RunResult], list[RunResult]]:
    """The runs of A and B at the seeds both have (matched by their ``seed-<s>`` folder),
    in A's order: a method trained at more seeds than another is compared with it on the
    seeds they share. Runs not read from seed folders pair by position (same number of
    seeds). Raises ValueError when they share no seed, or a pair was not evaluated on the
    same test items."""
    na, nb = _seed_names(a), _seed_names(b)
    if na is not None and nb is not None:
        at = {n: r for n, r in zip(nb, b, strict=True)}
        pairs = [(x, at[n]) for n, x in zip(na, a, strict=True) if n in at]
    elif len(a) == len(b):
        pairs = list(zip(a, b, strict=True))
    else:
        pairs = []
    if not pairs:
        raise ValueError(f"A and B share no seed: {len(a)} and {len(b)} runs")
    for x, y in pairs:
        if not np.array_equal(x.labels, y.labels):
            raise ValueError(f"{x.path} and {y.path} were not evaluated on the same test items")
    return [x for x, _ in pairs], [y for _, y in pairs]


def _with_seeds(ci: Mapping[str, float], p: float, per_seed: np.ndarray) -> dict:
    """One paired entry: the item-level ``diff``, CI and ``p``, the bootstrap ``se`` and
    the minimal detectable effect ``mde`` (:func:`rlcd_lab.math.stats.mde`, 80% power),
    and ``seeds``, the test across training seeds (:func:`rlcd_lab.math.stats.seed_test`)."""
    out = {k: ci[k] for k in ("diff", "ci_low", "ci_high")}
    out["p"] = p
    out["se"] = ci["se"]
    out["mde"] = stats.mde(ci["se"])
    out["seeds"] = stats.seed_test(per_seed)
    return out


def paired_items(
    a: Sequence[np.ndarray], b: Sequence[np.ndarray], n: int = N_BOOT, seed: int = 0
) -> dict:
    """Paired test of per-item values (one ``(N,)`` array per seed for each method): each
    item averaged over seeds, then :func:`rlcd_lab.math.stats.paired_bootstrap` (95% CI of
    the mean difference) and :func:`rlcd_lab.math.stats.sign_flip_test` (two-sided p);
    beside them the per-seed mean differences tested across seeds (:func:`_with_seeds`).
    Returns ``{"diff", "ci_low", "ci_high", "p", "se", "mde", "seeds"}`` with
    ``diff = mean(A - B)``."""
    x, y = np.mean(a, axis=0), np.mean(b, axis=0)
    ci = stats.paired_bootstrap(x, y, n=n, seed=seed)
    per_seed = np.mean(a, axis=1) - np.mean(b, axis=1)
    return _with_seeds(ci, stats.sign_flip_test(x, y, n=n, seed=seed), per_seed)


def paired_metric(
    a: Sequence[RunResult],
    b: Sequence[RunResult],
    metric: str,
    eps: float = DEFAULT_EPS,
    n: int = N_BOOT,
    seed: int = 0,
) -> dict | None:
    """One metric of :func:`paired` (None where a JSD is missing for either method)."""
    if metric in PER_ITEM:
        return paired_items(
            [r.item_values(metric) for r in a], [r.item_values(metric) for r in b], n, seed
        )
    if metric in CURVE:
        stat = stats.aurc_rows if metric == "aurc" else stats.cov_rows(eps)
        ca, ra, cb, rb = (
            np.array([getattr(r, k) for r in g]) for g in (a, b) for k in ("confidence", "correct")
        )
        ci = stats.paired_bootstrap_curve(ca, ra, cb, rb, stat, n, seed)
        p = stats.sign_flip_test_curve(ca, ra, cb, rb, stat, n, seed)
        return _with_seeds(ci, p, stats.curve_per_seed(ca, ra, cb, rb, stat))
    va, vb = [getattr(r, metric) for r in a], [getattr(r, metric) for r in b]
    if any(v is None for v in va + vb):
        return None
    return paired_items(va, vb, n, seed)


def paired(
    a: Sequence[RunResult],
    b: Sequence[RunResult],
    eps: float = DEFAULT_EPS,
    n: int = N_BOOT,
    seed: int = 0,
) -> dict[str, dict[str, float]]:
    """Paired tests of method A against method B (one :class:`RunResult` per seed each,
    compared at the seeds both have, :func:`aligned`), after temperature scaling, as the
    paper does it (OpenJev-RLCD sec. 5).

    ``accuracy``, ``brier``, ``nll``: per-item values averaged over seeds
    (:func:`paired_items`). ``aurc`` and ``cov_at_eps``: the metric of each seed,
    averaged over seeds; the bootstrap resamples test items jointly across seeds and the
    sign-flip test swaps A and B on an item in every seed at once
    (:func:`rlcd_lab.math.stats.paired_bootstrap_curve`, :func:`stats.sign_flip_test_curve`).
    ``jsd``, ``mixture_jsd`` and ``jsd_table3`` (bits, per item) when both have them. Every entry is
    ``{"diff", "ci_low", "ci_high", "p", "se", "mde", "seeds"}`` (:func:`_with_seeds`:
    the bootstrap standard error, the minimal detectable effect at 80% power and the test
    across seeds of the per-seed differences), ``diff = A - B``: negative favours A for
    Brier, NLL, AURC and JSD, positive for accuracy and Cov@eps.
    """
    a, b = aligned(a, b)
    out = {}
    for metric in (*PER_ITEM, *CURVE, "jsd", "mixture_jsd", "jsd_table3"):
        entry = paired_metric(a, b, metric, eps, n, seed)
        if entry is not None:
            out[metric] = entry
    return out


def rerun(
    a: Sequence[RunResult],
    b: Sequence[RunResult],
    metric: str,
    eps: float = DEFAULT_EPS,
    n: int = N_CLAIM,
    rng_seeds: Sequence[int] = RNG_SEEDS,
) -> dict:
    """:func:`paired_metric` of ``metric`` at ``n`` replicates under the first of
    ``rng_seeds``, with ``n_boot`` (``n``) and ``reruns``: ``[{"ci_low", "ci_high", "p"}]``
    under each other seed (the same data, another bootstrap draw and set of sign flips),
    from which a verdict's dependence on the draw is read."""
    first, *others = rng_seeds
    a, b = aligned(a, b)
    out = paired_metric(a, b, metric, eps, n, first)
    if out is None:
        raise ValueError(f"{metric} is not measured on both runs")
    out["n_boot"] = n
    out["reruns"] = []
    for seed in others:
        again = paired_metric(a, b, metric, eps, n, seed)
        out["reruns"].append({k: again[k] for k in ("ci_low", "ci_high", "p")})
    return out


def rms(x: Sequence[float] | np.ndarray) -> float:
    """Root mean square ``sqrt(mean(x^2))`` (NaN for an empty input)."""
    a = np.asarray(x, dtype=np.float64)
    return float(np.sqrt(np.mean(a * a))) if a.size else float("nan")


def gradient_dilution(
    rows: Sequence[Mapping[str, Any]],
    pathwise: str = "grad_pathwise",
    score_function: str = "grad_score_function",
) -> dict[str, Any]:
    """Gradient dilution from a run's log rows (OpenJev-RLCD sec. 3.2).

    Uses the rows that hold both norms (the training loops log the global L2 norm of the
    pathwise gradient and of the *unweighted* score-function gradient every
    ``grad_terms_every`` steps). Returns ``steps``, ``pathwise``, ``score_function`` and
    ``ratio`` (per-step ``score_function / pathwise``) as arrays, and the scalar
    ``rms_ratio = RMS(score_function) / RMS(pathwise)``, the statistic the paper reports
    (benchmarks/RESULTS.md sets it beside ours; a ratio of RMS values, not the RMS of the
    per-step ratios). ``rms_ratio`` is NaN when no row holds both norms (or both are 0),
    ``inf`` when the pathwise norm is always 0 (a run without a pathwise term).
    """
    both = [
        r
        for r in rows
        if isinstance(r.get(pathwise), (int, float))
        and isinstance(r.get(score_function), (int, float))
    ]
    steps = np.array([float(r["step"]) for r in both])
    pw = np.array([float(r[pathwise]) for r in both])
    sf = np.array([float(r[score_function]) for r in both])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = sf / pw
        rms_ratio = np.float64(rms(sf)) / np.float64(rms(pw)) if both else float("nan")
    return {
        "steps": steps,
        "pathwise": pw,
        "score_function": sf,
        "ratio": ratio,
        "rms_ratio": float(rms_ratio),
    }


def mean_sd(values: Sequence[float]) -> dict[str, float | None]:
    """``{"mean", "sd"}`` over seeds (sample s.d., ``ddof = 1``; None for one seed: a
    single seed has no spread to report)."""
    v = np.asarray(values, dtype=float)
    return {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if v.size > 1 else None}


def mean_log(logs: Sequence[Sequence[dict]], column: str, offset: int = 0) -> list[dict]:
    """``[{"step", column}]``: ``column`` of each run's log rows averaged over runs at
    every step that all of them logged; ``offset`` is added to the steps (a run
    continued from stage 1 starts where stage 1 ended)."""
    logs = [{r["step"] + offset: r.get(column) for r in rows} for rows in logs]
    steps = sorted(
        set.intersection(*(set(k for k, v in lg.items() if v is not None) for lg in logs))
    )
    return [{"step": s, column: float(np.mean([lg[s] for lg in logs]))} for s in steps]


def dev_curve(logs: Sequence[Sequence[dict]], offset: int = 0) -> list[dict]:
    """The dev curve of a run over its seeds' logs: ``[{"step", "brier"}]``, ``brier`` the
    raw (T = 1) dev Brier that the training loop logs every ``eval_every`` steps
    (``dev_brier``; lower is better), averaged over seeds at the steps all of them logged;
    ``step`` the optimizer steps done when it was measured (the log's 0-based step + 1 +
    ``offset``: a run continued from stage 1 counts stage 1's). Empty when none logged it."""
    return [
        {"step": r["step"] + 1, "brier": r["dev_brier"]}
        for r in mean_log(logs, "dev_brier", offset)
    ]


def choose_lr(scores: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Each run's learning rate from its tuning scores ``{run: {value: dev Brier after
    TS}}`` (values written ``f"{lr:g}"``): the value of the lowest score, the smaller value
    on a tie. Two-stage RLCD takes one value for both stages, the one chosen by the
    two-stage run (``reinforce``) for ``calibrate`` too."""
    lrs = {name: float(min(by_lr, key=lambda v: (by_lr[v], float(v))))
           for name, by_lr in scores.items()}  # fmt: skip
    if RLCD in lrs:
        lrs[STAGE1] = lrs[RLCD]
    return lrs


def tuning(tune: str | Path) -> dict:
    """A reproduction's learning-rate choice (``rlcd_lab.reproduce.tune``) recomputed from
    its tuning runs' dev dumps (``tune``: ``OUT/<task>/tune``, runs
    ``lr-<value>/<task>/seed-<s>/<run>``): ``{"grid": [values], "steps": {run: steps},
    "dev_ts_brier": {run: {value: dev Brier after TS fitted on those dev items}}, "lr":
    choose_lr(...)}`` (two-stage RLCD's steps: both stages). Runs without a training log
    (another run's evaluation) are left out."""
    scores: dict[str, dict[str, float]] = {}
    steps: dict[str, int] = {}
    for run in sorted(Path(tune).glob("lr-*/*/seed-*/*")):
        if not (rundir.log_path(run).exists() and rundir.has_eval(run, "dev")):
            continue
        rows = read_jsonl(rundir.eval_file(run, "dev"))
        cfg = rundir.read_config(run)
        scores.setdefault(run.name, {})[f"{cfg['lr']:g}"] = summarize(rows, rows)["ts_brier"]
        steps[run.name] = cfg["steps"]
    if RLCD in steps and STAGE1 in steps:  # continued from the tuning run's stage 1
        steps[RLCD] += steps[STAGE1]
    grid = sorted({float(v) for by_lr in scores.values() for v in by_lr})
    return {"grid": grid, "steps": steps, "dev_ts_brier": scores, "lr": choose_lr(scores)}


def _steps(run: Path) -> int | None:
    return rundir.read_config(run).get("steps")


def _run_entry(group: Sequence[RunResult], stage1: Path | None) -> dict:
    """A run's ``summary["runs"]`` entry over its seeds (:func:`summarize_runs`): mean and
    s.d. of each metric, its training ``steps`` (plus ``stage1``'s, the run it continued
    from: :data:`CONTINUES`), per-seed rows, JSD columns, mixture size and the
    gradient-dilution ratio."""
    entry = {k: mean_sd([g.row.get(src, np.nan) for g in group]) for k, (_, src) in METRICS.items()}
    entry["steps"] = _steps(group[0].path) or 0
    if stage1 is not None:  # continued from the stage-1 checkpoint
        entry["steps"] += _steps(stage1) or 0
    entry["items"] = len(group[0].labels)
    entry["per_seed"] = [g.row for g in group]
    for key in ("jsd", "mixture_jsd", "jsd_table3"):
        if getattr(group[0], key) is not None:
            entry[key] = mean_sd([float(getattr(g, key).mean()) for g in group])
    if group[0].m_mixture:
        entry["m_mixture"] = group[0].m_mixture
        entry["empty_share"] = mean_sd([g.empty_share for g in group])
    if all(rundir.log_path(g.path).exists() for g in group):
        logs = [rundir.read_log(g.path) for g in group]
        ratios = [gradient_dilution(log)["rms_ratio"] for log in logs]
        if all(np.isfinite(ratios)):
            entry["grad_rms_ratio"] = mean_sd(ratios)
        curve = dev_curve(logs, (_steps(stage1) or 0) if stage1 is not None else 0)
        if curve:
            entry["dev_curve"] = curve
    return entry


def summarize_runs(
    root: str | Path, seeds: Sequence[int], eps: float = DEFAULT_EPS, n: int = N_BOOT
) -> tuple[dict, dict[str, list[RunResult]]]:
    """Every number of a reproduction in ``root/seed-<s>/<run>/eval`` and the loaded runs
    (each run at the seeds where it has a test dump: ``runs[name]["seeds"]`` lists them
    where they are not all of ``seeds``; every pair is compared at the seeds both have).

    Summary keys: ``seeds``, ``eps``, ``units`` (JSD in bits); ``runs[name]``: mean and
    s.d. over seeds of each of ``METRICS`` (after temperature scaling), ``steps`` (the
    training budget, stage 1 included for the runs continued from it; 0 for the base),
    ``per_seed`` rows, ``grad_rms_ratio`` (:func:`gradient_dilution` of each seed's
    training log: RMS score-function / RMS pathwise gradient norm) for runs that log
    both, ``dev_curve`` (:func:`dev_curve`) for runs that log one, and ``jsd`` /
    ``mixture_jsd`` / ``jsd_table3`` (bits) on aleatoric tasks;
    ``paired["reinforce - X"]``: :func:`paired` for every other run X (and the pairs of
    ``TABLE3_PAIRS`` on aleatoric tasks); ``forks[F]``:
    :func:`paired` of each stage-2 fork against its stage-1 checkpoint, plus the mean
    +- s.d. change of ``T`` and ``length``; ``vs_readout[F]``: :func:`paired` of every
    other fork against ``readout-only`` (Figure 3: same checkpoint, stream and budget);
    ``mechanism[name]``: :func:`rlcd_lab.reports.mechanism.mechanism` of the runs of
    ``methods.mechanism_runs()``; ``sweep[W]``: :func:`paired` of Table 4's
    run at score-function weight ``W`` (``SWEEP_PREFIX`` + W) against stage 1 (weight 0);
    ``tuning``: :func:`tuning` of ``root/tune`` where the learning rates were tuned.
    """
    root = Path(root)
    names = sorted(
        {p.name for s in seeds for p in rundir.evaluated_runs(rundir.seed_dir(root, s), "*")}
    )
    loaded: dict[str, list[RunResult]] = {}
    for name in names:
        runs = [rundir.seed_dir(root, s) / name for s in seeds]
        if runs := [r for r in runs if rundir.has_eval(r, "test")]:
            loaded[name] = [load_run(r, eps) for r in runs]
    summary: dict = {
        "seeds": list(seeds),
        "eps": eps,
        "units": {"jsd": "bits", "nll": "nats"},
        "n_boot": n,
        "runs": {},
        "paired": {},
        "forks": {},
        "vs_readout": {},
        "sweep": {},
    }
    for name, group in loaded.items():
        parent = CONTINUES.get(name)
        start = loaded[parent][0].path if parent in loaded else None
        summary["runs"][name] = _run_entry(group, start)
        if len(group) < len(seeds):
            summary["runs"][name]["seeds"] = [int(g.path.parent.name.split("-")[1]) for g in group]
    summary["mechanism"] = {
        name: mechanism([g.path for g in loaded[name]], [g.T for g in loaded[name]])
        for name in mechanism_runs()
        if name in loaded
    }
    if RLCD in loaded:
        for other in loaded:
            if other != RLCD:
                summary["paired"][f"{RLCD} - {other}"] = paired(loaded[RLCD], loaded[other], eps, n)
    if (root / rundir.TUNE).is_dir():
        summary["tuning"] = tuning(root / rundir.TUNE)
    for a, b in TABLE3_PAIRS:
        for sa, sb in ((a, b), (a + MATCHED, b + MATCHED)):
            if sa in loaded and sb in loaded and loaded[sa][0].q is not None:
                summary["paired"][f"{sa} - {sb}"] = paired(loaded[sa], loaded[sb], eps, n)
    if STAGE1 in loaded:
        for fork in (f for f in FORKS if f in loaded):
            tests = paired(loaded[fork], loaded[STAGE1], eps, n)
            pairs = list(zip(*aligned(loaded[fork], loaded[STAGE1]), strict=True))
            for key, src in (("T", "T"), ("length", "mean_length")):
                tests[key] = mean_sd([f.row[src] - c.row[src] for f, c in pairs])
            summary["forks"][fork] = tests
            if fork != READOUT_ONLY and READOUT_ONLY in loaded:
                summary["vs_readout"][fork] = paired(loaded[fork], loaded[READOUT_ONLY], eps, n)
        for name in (r for r in loaded if r.startswith(SWEEP_PREFIX)):
            summary["sweep"][name[len(SWEEP_PREFIX) :]] = paired(
                loaded[name], loaded[STAGE1], eps, n
            )
    return summary, loaded
