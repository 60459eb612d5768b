"""Shared pieces of the benches: pure math, rule-made request variants, the report writer.

Math (pure functions on numpy arrays, no I/O): the ECE noise floor
(:func:`ece_floor_samples`, :func:`ece_floor`), :func:`ranked_probability_score`, realised
cost (:func:`asymmetric_cost_matrices`, :func:`realised_cost_comparison`) and attack
scoring (:func:`flip_excess`, :func:`pushed_below`). Variants are made by rules, never by a
model (:func:`paraphrase_rules`, :func:`option_orders`); :func:`write_report` writes a
bench's summary and report.
"""

from __future__ import annotations

import json
import os
import platform
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlcd_lab.drawing.pages import html_page, plotly_src
from rlcd_lab.files.io import atomic_write_text
from rlcd_lab.math.routing import realized_costs
from rlcd_lab.math.stats import paired_bootstrap
from rlcd_lab.metrics import ArrayLike, bin_index, to_numpy

FLOOR_LEVEL = 0.95
"""Central share of the simulated calibrated ECEs that makes the noise floor's range."""


# ------------------------------------------------------------------------- ECE noise floor
def ece_floor_samples(
    confidence: ArrayLike, n_bins: int = 15, n_sim: int = 2000, seed: int = 0
) -> np.ndarray:
    """ECEs of a perfectly calibrated predictor with the given confidences, ``(n_sim,)``.

    Each simulation draws ``correct_i ~ Bernoulli(c_i)`` independently for every item
    (``numpy.random.default_rng(seed)``, the draws of :func:`rlcd_lab.metrics.ece_noise_floor`
    in the same order, so ``ece_floor_samples(...).mean()`` equals it) and computes the
    top-label ECE with the bins of :func:`rlcd_lab.metrics.ece`:
    ``ECE = sum_b |sum_{i in B_b} correct_i - sum_{i in B_b} c_i| / N``.
    Shapes: ``confidence (N,)`` in [0, 1] -> ``(n_sim,)``. A model's ECE inside the central
    95% of these values is indistinguishable from finite-sample noise; lower ECE is better
    but a calibrated model does not get below this floor. Bröcker & Smith (2007),
    "Increasing the reliability of reliability diagrams" (consistency resampling).
    """
    c = to_numpy(confidence, np.float64).reshape(-1)
    if c.size == 0:
        raise ValueError("need at least one item")
    if n_sim < 1:
        raise ValueError(f"n_sim must be >= 1, got {n_sim}")
    rng = np.random.default_rng(seed)
    b = bin_index(c, n_bins)
    conf_sum = np.bincount(b, weights=c, minlength=n_bins)
    onehot = np.zeros((c.size, n_bins))
    onehot[np.arange(c.size), b] = 1.0
    out = []
    chunk = max(1, 2_000_000 // c.size)  # metrics.ece_noise_floor's chunks: the same draws
    for start in range(0, n_sim, chunk):
        s = min(chunk, n_sim - start)
        correct = (rng.random((s, c.size)) < c).astype(np.float64)
        out.append(np.abs(correct @ onehot - conf_sum).sum(axis=1) / c.size)
    return np.concatenate(out)


def floor_summary(ece: float, sims: ArrayLike, level: float = FLOOR_LEVEL) -> dict[str, Any]:
    """A model's ECE beside simulated calibrated ECEs ``sims (S,)`` (:func:`ece_floor_samples`).

    Returns ``{"ece", "floor_mean", "floor_low", "floor_high", "inside", "excess", "level",
    "n_sim"}``: ``floor_low``/``floor_high`` are the ``(1 - level)/2`` and ``(1 + level)/2``
    quantiles of ``sims``; ``inside`` is ``ece <= floor_high`` (what a calibrated predictor
    could show by chance; below ``floor_low`` counts as inside too: luck, not
    miscalibration); ``excess = ece - floor_mean`` (lower is better).
    """
    s = to_numpy(sims, np.float64).reshape(-1)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(s, [alpha, 1.0 - alpha])
    return {
        "ece": float(ece),
        "floor_mean": float(s.mean()),
        "floor_low": float(lo),
        "floor_high": float(hi),
        "inside": bool(ece <= hi),
        "excess": float(ece - s.mean()),
        "level": level,
        "n_sim": int(s.size),
    }


def ece_floor(
    ece: float,
    confidence: ArrayLike,
    n_bins: int = 15,
    n_sim: int = 2000,
    seed: int = 0,
    level: float = FLOOR_LEVEL,
) -> dict[str, Any]:
    """:func:`floor_summary` of ``ece`` against :func:`ece_floor_samples` of ``confidence
    (N,)`` (the confidences the ECE was computed from, usually ``max_k p_k``)."""
    return floor_summary(ece, ece_floor_samples(confidence, n_bins, n_sim, seed), level)


# ------------------------------------------------------------------------- ordinal scores
def ranked_probability_score(probs: ArrayLike, labels: ArrayLike) -> np.ndarray:
    """Ranked probability score of ordinal forecasts, per item ``(N,)``; lower is better.

    ``RPS_i = (1 / (L - 1)) sum_{k=0}^{L-2} (F_ik - O_ik)^2`` with the forecast's cumulative
    ``F_ik = sum_{j<=k} p_ij`` and the outcome's ``O_ik = 1[y_i <= k]``, over levels
    ``0..L-1``. Shapes: ``probs (N, L)`` rows on the simplex (L >= 2), ``labels (N,)`` ints
    in ``[0, L)``. In [0, 1]: 0 for a point mass on the outcome, 1 for a point mass on the
    far end. Strictly proper, and mass near the outcome costs less than mass far from it
    (unlike the Brier score). Epstein (1969), "A scoring system for probability forecasts of
    ranked categories"; Murphy (1971) (the 1/(L-1) normalisation).
    """
    p = to_numpy(probs, np.float64)
    y = to_numpy(labels).astype(np.int64).reshape(-1)
    if p.ndim != 2 or p.shape[1] < 2 or p.shape[0] != y.size:
        raise ValueError(f"probs must be (N, L >= 2) for N = {y.size} labels, got {p.shape}")
    if ((y < 0) | (y >= p.shape[1])).any():
        raise ValueError("labels must be in [0, L)")
    levels = p.shape[1]
    cdf = np.cumsum(p, axis=1)[:, :-1]
    outcome = (y[:, None] <= np.arange(levels - 1)[None]).astype(np.float64)
    return ((cdf - outcome) ** 2).sum(axis=1) / (levels - 1)


# ------------------------------------------------------------------------- costs
def asymmetric_cost_matrices(k: int, ratio: float = 5.0) -> dict[str, dict[str, Any]]:
    """Two asymmetric ``(K, K)`` cost matrices ``cost[a, y]`` (answer ``a``, truth ``y``;
    0 on the diagonal, 1 for a plain error, lower is better):

    * ``false_first``: answering option 0 when the truth is another costs ``ratio`` (for
      verify, ``Y`` = "the proposed sum is right": a false accept);
    * ``missed_first``: answering another option when the truth is option 0 costs
      ``ratio`` (a false reject).

    Returns ``{name: {"matrix": (K, K) array, "description": str}}``.
    """
    if k < 2 or ratio <= 0:
        raise ValueError(f"need k >= 2 and ratio > 0, got k={k}, ratio={ratio}")
    plain = 1.0 - np.eye(k)
    first = plain.copy()
    first[0, 1:] = ratio
    missed = plain.copy()
    missed[1:, 0] = ratio
    return {
        "false_first": {
            "matrix": first,
            "description": f"answering the first option wrongly costs {ratio:g}, other errors 1",
        },
        "missed_first": {
            "matrix": missed,
            "description": f"missing the first option costs {ratio:g}, other errors 1",
        },
    }


def cost_decisions(probs: ArrayLike, cost: ArrayLike) -> dict[str, np.ndarray]:
    """Actions of two rules under ``cost (K, K)`` for ``probs (N, K)``, each ``(N,)`` ints:
    ``expected_cost``: ``argmin_a sum_y p_iy cost[a, y]`` (the Bayes rule, optimal for
    calibrated ``p``; :func:`rlcd_lab.math.routing.bayes_actions`); ``top_answer``:
    ``argmax_k p_ik`` (ignores the costs). Ties: lowest index."""
    from rlcd_lab.math.routing import bayes_actions

    p = to_numpy(probs, np.float64)
    return {"expected_cost": bayes_actions(p, cost), "top_answer": np.argmax(p, axis=1)}


def realised_cost_comparison(
    probs: ArrayLike, labels: ArrayLike, cost: ArrayLike, n_boot: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """Mean realised cost per decision (lower is better) of the two rules of
    :func:`cost_decisions`, ``cost[a_i, y_i]`` averaged over items
    (:func:`rlcd_lab.math.routing.realized_costs`), and their paired difference
    ``expected_cost - top_answer`` with a percentile bootstrap CI over items
    (:func:`rlcd_lab.math.stats.paired_bootstrap`; negative favours deciding by expected cost).
    Shapes: ``probs (N, K)``, ``labels (N,)``, ``cost (K, K)``."""
    actions = cost_decisions(probs, cost)
    per_item = {k: realized_costs(a, labels, cost) for k, a in actions.items()}
    diff = paired_bootstrap(per_item["expected_cost"], per_item["top_answer"], n=n_boot, seed=seed)
    return {
        "expected_cost": float(per_item["expected_cost"].mean()),
        "top_answer": float(per_item["top_answer"].mean()),
        "diff": diff,
        "changed": float((actions["expected_cost"] != actions["top_answer"]).mean()),
    }


# ------------------------------------------------------------------------- attack scoring
def flip_excess(
    flips: ArrayLike, floor: ArrayLike, n_boot: int = 2000, seed: int = 0
) -> dict[str, float]:
    """Flip rate of an attack minus the noise floor, with a paired bootstrap CI over items.

    ``flips (N,)``: 1 where the attacked decision differs from the clean one; ``floor
    (N,)``: per item the share of identical re-runs (other seeds) whose decision differs
    from the clean one. Returns ``{"flip_rate": mean(flips), "floor": mean(floor),
    "diff": mean(flips - floor), "ci_low", "ci_high"}``
    (:func:`rlcd_lab.math.stats.paired_bootstrap`). Lower is better: an excess whose CI
    includes 0 is no more than sampling noise; above 0, the edit moves decisions.
    """
    f = to_numpy(flips, np.float64).reshape(-1)
    g = to_numpy(floor, np.float64).reshape(-1)
    out = paired_bootstrap(f, g, n=n_boot, seed=seed)
    return {"flip_rate": float(f.mean()), "floor": float(g.mean()), **out}


def pushed_below(
    clean_confidence: ArrayLike, other_confidence: ArrayLike, threshold: float
) -> dict[str, float]:
    """Among items whose clean decision is confident (``clean >= threshold``, the routing
    rule's "automate"), the share whose other (attacked or re-run) confidence falls below
    the threshold (``escalate``). Shapes: ``(N,)`` each. Returns ``{"n_confident", "share"}``
    (``share`` NaN when no item is confident). Lower is better."""
    c = to_numpy(clean_confidence, np.float64).reshape(-1)
    o = to_numpy(other_confidence, np.float64).reshape(-1)
    confident = c >= threshold
    n = int(confident.sum())
    share = float((o[confident] < threshold).mean()) if n else float("nan")
    return {"n_confident": n, "share": share}


# ------------------------------------------------------------------------- variants
_VERIFY = re.compile(r"^(\d+)\+(\d+)\+(\d+)=(\d+)\?$")

INSTRUCTION_TEMPLATES = (
    None,  # the engine's default instructions
    "Which option is correct?",
    "Pick the one answer that applies.",
)
"""Rewordings of the question text (``instructions``); ``None`` keeps the default."""


@dataclass(frozen=True)
class Rewrite:
    """A rule that rewords a request without changing its meaning: ``name``, and
    ``apply(state, instructions) -> (state, instructions)``."""

    name: str
    apply: Callable[[Any, Any], tuple[Any, Any]]


def _verify_swap(state: Any, instructions: Any, order: tuple[int, int, int]) -> tuple[Any, Any]:
    m = _VERIFY.match(state) if isinstance(state, str) else None
    if not m:
        return state, instructions
    terms = m.groups()[:3]
    return "+".join(terms[i] for i in order) + f"={m[4]}?", instructions


def paraphrase_rules(states: Sequence[Any]) -> list[Rewrite]:
    """The rule-made paraphrases for these states: the identity, every instruction template
    and, where every state matches a known task format, state rewrites that keep the
    meaning (verify ``a+b+c=p?``: ``b+a+c=p?`` and ``c+b+a=p?``, addition commutes).
    Task-format checkpoints do not see instructions, so for them only state rewrites
    change the prompt."""
    rules = [Rewrite("identity", lambda s, i: (s, i))]
    for t in INSTRUCTION_TEMPLATES[1:]:
        rules.append(Rewrite(f"instructions: {t}", lambda s, i, t=t: (s, t)))
    if states and all(isinstance(s, str) and _VERIFY.match(s) for s in states):
        for order, name in (((1, 0, 2), "b+a+c"), ((2, 1, 0), "c+b+a")):
            rules.append(Rewrite(f"state: {name}", lambda s, i, o=order: _verify_swap(s, i, o)))
    return rules


def option_orders(k: int) -> dict[str, tuple[int, ...]]:
    """Distinct rule-made orders of ``k`` options: ``identity``, ``reversed`` and (k > 2)
    ``rotated`` by one; each a permutation ``perm`` (the new list is ``[opts[j] for j in
    perm]``)."""
    orders = {"identity": tuple(range(k)), "reversed": tuple(range(k - 1, -1, -1))}
    if k > 2:
        orders["rotated"] = tuple(list(range(1, k)) + [0])
    return orders


# ------------------------------------------------------------------------- items
def bench_items(task: str, split: str, n: int, need_labels: bool = True) -> list:
    """The first ``n`` items of a task split (:func:`rlcd_lab.tasks.load_task_items`);
    ``ValueError`` when there are none or, with ``need_labels``, one has no label."""
    from rlcd_lab.tasks import load_task_items

    items = load_task_items(task, split)[:n]
    if not items:
        raise ValueError(f"task {task} has no {split} items")
    if need_labels and any(it.label is None for it in items):
        raise ValueError(f"task {task} {split}: every item needs a label for this bench")
    return items


def probs_in_order(answer: Mapping[str, Any], labels: Sequence[str]) -> np.ndarray:
    """A choice or score answer's probabilities as a ``(K,)`` array in ``labels`` order
    (choice: the criteria labels; score: ``"0", "1", ...``)."""
    probs = answer["probabilities"]
    return np.array([float(probs[str(label)]) for label in labels])


def cpu_name() -> str:
    """The CPU model (``/proc/cpuinfo``'s ``model name``; else ``platform.processor()``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")
"""The CPU flags that decide torch's and oneDNN's kernels (vector width, bfloat16, AMX)."""


def machine() -> str:
    """The CPU as every performance figure names it: model name, cores and which of
    :data:`CPU_FLAGS` it has (a figure means something only beside its machine)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        info = ""
    flags = next(
        (ln.split(":", 1)[1].split() for ln in info.splitlines() if ln.startswith("flags")), []
    )
    have = " ".join(f for f in CPU_FLAGS if f in flags) or "none of " + " ".join(CPU_FLAGS)
    return f"{cpu_name()}, {os.cpu_count()} cores, flags: {have}"


# ------------------------------------------------------------------------- reports
def fmt(x: Any, digits: int = 3) -> str:
    """A number for a Markdown cell (``-`` for None or NaN)."""
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "-"
    if isinstance(x, bool | str):
        return str(x)
    return f"{x:.{digits}f}"


def table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def jsonable(x: Any) -> Any:
    """``x`` with numpy scalars and arrays as Python numbers and lists, tuples as lists and
    non-finite floats as None (strict JSON)."""
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple | np.ndarray):
        return [jsonable(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x


def write_report(
    out: Path, summary: Mapping[str, Any], md: str, figs: Mapping[str, Any], title: str
) -> dict[str, Path]:
    """``summary.json``, ``report.md`` and ``report.html`` in ``out``, each written
    atomically (:func:`rlcd_lab.files.io.atomic_write_text`); the HTML is
    :func:`rlcd_lab.drawing.pages.html_page`, loading the nearest shared plotly.js
    (:func:`rlcd_lab.drawing.pages.plotly_src`). Returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"summary": out / "summary.json", "markdown": out / "report.md"}
    atomic_write_text(
        paths["summary"],
        json.dumps(jsonable(summary), indent=1, sort_keys=True, allow_nan=False) + "\n",
    )
    atomic_write_text(paths["markdown"], md)
    paths["html"] = out / "report.html"
    atomic_write_text(paths["html"], html_page(title, md, figs, plotly_src(out)))
    return paths
