"""A run's results, read from its eval dumps, and the paper's paired statistics.

The one place that turns eval dumps (``run/eval/test.jsonl``, ``dev.jsonl`` and
``test-m<M>.jsonl``, the format of :func:`rlcd_lab.evaluate.run_eval`) into numbers; the
reproduction's report, the notebooks, the dashboard's Routing tab and the server's model
card all read runs through it.

* :func:`load_run`: one run, after temperature scaling fitted on dev (``T = 1`` and
  ``fitted = False`` without a dev dump), as a :class:`RunResult` with per-item values;
  :func:`from_rows` does the same for dump rows already in memory.
* :func:`paired`: method A against method B over the same test items and seeds, as the
  paper does it (OpenJev-RLCD sec. 5): accuracy, Brier and NLL per item averaged over
  seeds (bootstrap over items, sign-flip p); AURC and Cov@eps computed per seed and
  averaged, with test items resampled (or swapped) jointly across seeds. One set of
  names for every metric: ``{"diff", "ci_low", "ci_high", "p"}``, ``diff = A - B``.
* :func:`summarize_runs`: every run of a reproduction: mean and s.d. over seeds of each
  metric, the paired tests of two-stage RLCD against every other run, Table 2 (each
  stage-2 fork against its stage-1 checkpoint) and Table 3 (JSD to ``q``, in bits).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from . import metrics, stats
from .evaluate import summarize
from .io import jsonl_files, jsonl_path, read_jsonl
from .metrics import DEFAULT_EPS

RLCD = "reinforce"
"""The run every other run is compared with: two-stage RLCD."""
STAGE1 = "calibrate"
MATCHED = "-matched"
SWEEP_PREFIX = "endtoend-c"
"""Prefix of Table 4's runs: the end-to-end objective at score-function weight W."""
NO_KL = "endtoend-nokl"
"""Figure 1's System-One collapse: the end-to-end objective at weight 1 without a KL
anchor (beside ``endtoend-c1``, the same with it)."""
READOUT_ONLY = "readout-only"
"""Figure 3's reference: the fork that continues stage 1 (the readout alone)."""
FORKS = ("reinforce", "readout-only", "anchor-only", "grpo-cont", "reinforce-ace")
"""Table 2: stage-2 continuations from the same stage-1 checkpoint (``reinforce-ace``:
RLCD-RL with the optional ACE reward, ``rlcd-lab reproduce --ace``)."""
PER_ITEM = ("accuracy", "brier", "nll")
"""Metrics that are means of per-item values (paired over items averaged over seeds)."""
CURVE = ("aurc", "cov_at_eps")
"""Whole-curve metrics (per seed, averaged; items resampled jointly across seeds)."""
METRICS = {  # summary key -> (column, key in evaluate.summarize's row)
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


@dataclass(frozen=True)
class RunResult:
    """One run's test items, read from its eval dumps.

    ``logits (N, K)`` single-query readouts (ragged option counts padded with ``-inf``),
    ``labels (N,)``; ``T`` fitted on dev (``fitted``), else 1; ``row`` is
    :func:`rlcd_lab.evaluate.summarize` of test with dev (raw metrics and, when fitted,
    ``T`` and ``ts_*``); ``q (N, K)`` outcome distributions and ``mixture (N, K)`` the
    mixture of ``m_mixture`` rationales when the task is aleatoric and the dump exists;
    ``empty_share`` the share of those rationales that are empty (the model switched
    reasoning off).
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
    def scaled(self) -> np.ndarray:
        """``(N, K)`` test probabilities after temperature scaling (the "+TS" of Table 1)."""
        return self.probs(True)

    @property
    def confidence(self) -> np.ndarray:
        """``(N,)`` max probability after scaling."""
        return self.scaled.max(1)

    @property
    def correct(self) -> np.ndarray:
        """``(N,)`` 1.0 where the argmax is the label."""
        return (self.scaled.argmax(1) == self.labels).astype(float)

    @property
    def brier(self) -> np.ndarray:
        """``(N,)`` per-item Brier loss ``sum_k (p_k - 1[k = y])^2`` (lower is better)."""
        onehot = np.zeros_like(self.scaled)
        onehot[np.arange(len(self.labels)), self.labels] = 1.0
        return ((self.scaled - onehot) ** 2).sum(1)  # padded options: p = 0, no cost

    @property
    def nll(self) -> np.ndarray:
        """``(N,)`` per-item ``-log max(p_y, 1e-12)`` in nats (lower is better)."""
        p_y = self.scaled[np.arange(len(self.labels)), self.labels]
        return -np.log(np.maximum(p_y, metrics.EPS))

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


def _logits(rows: Sequence[dict]) -> np.ndarray:
    return metrics.pad_ragged([r["logits"] for r in rows], -np.inf)


def from_rows(
    test: Sequence[dict],
    dev: Sequence[dict] | None = None,
    path: str | Path = "",
    eps: float = DEFAULT_EPS,
    mixture: tuple[int, Sequence[dict]] | None = None,
) -> RunResult:
    """A :class:`RunResult` from eval dump rows already in memory (the format of
    :func:`rlcd_lab.evaluate.run_eval`): ``test`` rows, ``dev`` rows (T is fitted on them;
    None or empty: ``T = 1``, ``fitted = False``) and, optionally, ``(M, rows)`` of a
    mixture dump of M rationales. ``path`` is only recorded. Raises ValueError for an
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
        logits=_logits(test),
        labels=np.array([r["label"] for r in test]),
        dev_logits=_logits(dev) if dev else None,
        dev_labels=np.array([r["label"] for r in dev]) if dev else None,
        q=q,
        mixture=mix,
        m_mixture=m_mixture,
        empty_share=empty,
    )


def load_run(run: str | Path, eps: float = DEFAULT_EPS) -> RunResult:
    """Read ``run/eval``: ``test.jsonl`` (required), ``dev.jsonl`` (T is fitted on it) and
    the largest ``test-m<M>.jsonl`` mixture dump, if any (:func:`from_rows`), each plain
    or packed (``.jsonl.xz``, :func:`rlcd_lab.io.read_jsonl`). ``eps``:
    Cov@eps's error budget. Raises FileNotFoundError (naming the file) when the test dump
    is missing, ValueError when it is empty."""
    run = Path(run)
    ev = run / "eval"
    if not jsonl_path(ev / "test.jsonl").exists():
        raise FileNotFoundError(f"{ev / 'test.jsonl'}: no test dump (run rlcd-lab eval first)")
    test = read_jsonl(ev / "test.jsonl")
    dev = read_jsonl(ev / "dev.jsonl") if jsonl_path(ev / "dev.jsonl").exists() else None
    mixture = None
    dumps = sorted(jsonl_files(ev, "test-m*.jsonl"), key=lambda p: int(p.stem[len("test-m") :]))
    if dumps and test and test[0].get("q") is not None:
        mixture = (int(dumps[-1].stem[len("test-m") :]), read_jsonl(dumps[-1]))
    return from_rows(test, dev, path=run, eps=eps, mixture=mixture)


def _check_aligned(a: Sequence[RunResult], b: Sequence[RunResult]) -> None:
    if len(a) != len(b) or not a:
        raise ValueError(f"need the same number (>= 1) of seeds for A and B: {len(a)}, {len(b)}")
    for x, y in zip(a, b, strict=True):
        if not np.array_equal(x.labels, y.labels):
            raise ValueError(f"{x.path} and {y.path} were not evaluated on the same test items")


def paired_items(
    a: Sequence[np.ndarray], b: Sequence[np.ndarray], n: int = N_BOOT, seed: int = 0
) -> dict[str, float]:
    """Paired test of per-item values (one ``(N,)`` array per seed for each method): each
    item averaged over seeds, then :func:`rlcd_lab.stats.paired_bootstrap` (95% CI of
    the mean difference) and :func:`rlcd_lab.stats.sign_flip_test` (two-sided p).
    Returns ``{"diff", "ci_low", "ci_high", "p"}`` with ``diff = mean(A - B)``."""
    x, y = np.mean(a, axis=0), np.mean(b, axis=0)
    ci = stats.paired_bootstrap(x, y, n=n, seed=seed)
    return {**ci, "p": stats.sign_flip_test(x, y, n=n, seed=seed)}


def paired(
    a: Sequence[RunResult],
    b: Sequence[RunResult],
    eps: float = DEFAULT_EPS,
    n: int = N_BOOT,
    seed: int = 0,
) -> dict[str, dict[str, float]]:
    """Paired tests of method A against method B (one :class:`RunResult` per seed each,
    aligned by seed, same test items), after temperature scaling.

    ``accuracy``, ``brier``, ``nll``: per-item values averaged over seeds
    (:func:`paired_items`). ``aurc`` and ``cov_at_eps``: the metric of each seed,
    averaged over seeds; the bootstrap resamples test items jointly across seeds and the
    sign-flip test swaps A and B on an item in every seed at once
    (:func:`rlcd_lab.stats.paired_bootstrap_curve`, :func:`stats.sign_flip_test_curve`).
    ``jsd``, ``mixture_jsd`` and ``jsd_table3`` (bits, per item) when both have them. Every entry is
    ``{"diff", "ci_low", "ci_high", "p"}``, ``diff = A - B``: negative favours A for
    Brier, NLL, AURC and JSD, positive for accuracy and Cov@eps.
    """
    _check_aligned(a, b)
    out = {
        m: paired_items([r.item_values(m) for r in a], [r.item_values(m) for r in b], n, seed)
        for m in PER_ITEM
    }
    conf = [np.array([r.confidence for r in g]) for g in (a, b)]
    corr = [np.array([r.correct for r in g]) for g in (a, b)]
    for name, stat in (("aurc", stats.aurc_rows), ("cov_at_eps", stats.cov_rows(eps))):
        ci = stats.paired_bootstrap_curve(conf[0], corr[0], conf[1], corr[1], stat, n, seed)
        p = stats.sign_flip_test_curve(conf[0], corr[0], conf[1], corr[1], stat, n, seed)
        out[name] = {"diff": ci["diff"], "ci_low": ci["ci_low"], "ci_high": ci["ci_high"], "p": p}
    for key in ("jsd", "mixture_jsd", "jsd_table3"):
        va, vb = [getattr(r, key) for r in a], [getattr(r, key) for r in b]
        if all(v is not None for v in va + vb):
            out[key] = paired_items(va, vb, n, seed)
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
    ``rms_ratio = RMS(score_function) / RMS(pathwise)``, the paper's 7-12x statistic
    (a ratio of RMS values, not the RMS of the per-step ratios). ``rms_ratio`` is NaN
    when no row holds both norms (or both are 0), ``inf`` when the pathwise norm is always
    0 (a run without a pathwise term).
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


def _steps(run: Path) -> int | None:
    cfg = run / "config.json"
    return json.loads(cfg.read_text())["steps"] if cfg.exists() else None


def summarize_runs(
    root: str | Path, seeds: Sequence[int], eps: float = DEFAULT_EPS, n: int = N_BOOT
) -> tuple[dict, dict[str, list[RunResult]]]:
    """Every number of a reproduction in ``root/seed-<s>/<run>/eval`` (runs missing for
    a seed are left out) and the loaded runs.

    Summary keys: ``seeds``, ``eps``, ``units`` (JSD in bits); ``runs[name]``: mean and
    s.d. over seeds of each of ``METRICS`` (after temperature scaling), ``steps`` (the
    training budget, stage 1 included for the runs continued from it; 0 for the base),
    ``per_seed`` rows, ``grad_rms_ratio`` (:func:`gradient_dilution` of each seed's
    training log: RMS score-function / RMS pathwise gradient norm) for runs that log
    both, and ``jsd`` / ``mixture_jsd`` / ``jsd_table3`` (bits) on aleatoric tasks;
    ``paired["reinforce - X"]``: :func:`paired` for every other run X (and the pairs of
    ``TABLE3_PAIRS`` on aleatoric tasks); ``forks[F]``:
    :func:`paired` of each stage-2 fork against its stage-1 checkpoint, plus the mean
    +- s.d. change of ``T`` and ``length``; ``vs_readout[F]``: :func:`paired` of every
    other fork against ``readout-only`` (Figure 3: same checkpoint, stream and budget);
    ``sweep[W]``: :func:`paired` of Table 4's
    run at score-function weight ``W`` (``SWEEP_PREFIX`` + W) against stage 1 (weight 0).
    """
    root = Path(root)
    names = sorted(
        {
            p.parent.parent.name
            for s in seeds
            for p in jsonl_files(root / f"seed-{s}", "*/eval/test.jsonl")
        }
    )
    loaded: dict[str, list[RunResult]] = {}
    for name in names:
        runs = [root / f"seed-{s}" / name for s in seeds]
        if all(jsonl_path(r / "eval" / "test.jsonl").exists() for r in runs):
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
        entry = {
            k: mean_sd([g.row.get(src, np.nan) for g in group]) for k, (_, src) in METRICS.items()
        }
        entry["steps"] = _steps(group[0].path) or 0
        if name in FORKS and STAGE1 in loaded:  # continued from the stage-1 checkpoint
            entry["steps"] += _steps(loaded[STAGE1][0].path) or 0
        entry["items"] = len(group[0].labels)
        entry["per_seed"] = [g.row for g in group]
        for key in ("jsd", "mixture_jsd", "jsd_table3"):
            if getattr(group[0], key) is not None:
                entry[key] = mean_sd([float(getattr(g, key).mean()) for g in group])
        if group[0].m_mixture:
            entry["m_mixture"] = group[0].m_mixture
            entry["empty_share"] = mean_sd([g.empty_share for g in group])
        logs = [g.path / "log.jsonl" for g in group]
        if all(jsonl_path(p).exists() for p in logs):
            ratios = [gradient_dilution(read_jsonl(p))["rms_ratio"] for p in logs]
            if all(np.isfinite(ratios)):
                entry["grad_rms_ratio"] = mean_sd(ratios)
        summary["runs"][name] = entry
    if RLCD in loaded:
        for other in loaded:
            if other != RLCD:
                summary["paired"][f"{RLCD} - {other}"] = paired(loaded[RLCD], loaded[other], eps, n)
    for a, b in TABLE3_PAIRS:
        for sa, sb in ((a, b), (a + MATCHED, b + MATCHED)):
            if sa in loaded and sb in loaded and loaded[sa][0].q is not None:
                summary["paired"][f"{sa} - {sb}"] = paired(loaded[sa], loaded[sb], eps, n)
    if STAGE1 in loaded:
        for fork in (f for f in FORKS if f in loaded):
            tests = paired(loaded[fork], loaded[STAGE1], eps, n)
            for key, src in (("T", "T"), ("length", "mean_length")):
                tests[key] = mean_sd(
                    [
                        f.row[src] - c.row[src]
                        for f, c in zip(loaded[fork], loaded[STAGE1], strict=True)
                    ]
                )
            summary["forks"][fork] = tests
            if fork != READOUT_ONLY and READOUT_ONLY in loaded:
                summary["vs_readout"][fork] = paired(loaded[fork], loaded[READOUT_ONLY], eps, n)
        for name in (r for r in loaded if r.startswith(SWEEP_PREFIX)):
            summary["sweep"][name[len(SWEEP_PREFIX) :]] = paired(
                loaded[name], loaded[STAGE1], eps, n
            )
    return summary, loaded
