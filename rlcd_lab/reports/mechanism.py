"""Why a finding does or does not reproduce: the steps of the paper's mechanism, measured.

:func:`run_mechanism` measures one run (one seed), :func:`mechanism` averages a group of
seeds; ``results.summarize_runs`` stores it in a summary under ``mechanism`` and
:func:`mechanism_table` renders the "Why" table of docs/results.md from it. Measures that
do not apply (no arithmetic in the rationales, no log, one kind of answer) are None.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from rlcd_lab import metrics
from rlcd_lab.files import rundir
from rlcd_lab.files.io import read_jsonl
from rlcd_lab.methods import METHOD_TABLE
from rlcd_lab.tasks.worked import OPERATIONS, written

PER_RATIONALE_KL = "rlcd_lab.train.rlcd"
"""The loop (``METHOD_TABLE[method].loop``) that logs ``kl`` per rationale; the others log
it per token."""

SATURATED = 0.99
"""A readout whose top probability exceeds this is counted as saturated (near one-hot)."""

_NUMBER = r"-?\d+(?:\.\d+)?"
_EQUATION = re.compile(rf"({_NUMBER})\s*(mod|[-+*x/^])\s*({_NUMBER})\s*=\s*({_NUMBER})")
_ROOT = re.compile(rf"sqrt\(({_NUMBER})\)\s*=\s*({_NUMBER})")
_VERDICT = re.compile(r"\b(same|diff|different)\b\W*$")


def _holds(value: float | complex | None, written_result: str) -> bool:
    """Whether ``value`` written as a worked rationale writes numbers (``worked.written``:
    integers plain, else to 4 decimals) is the result a rationale wrote."""
    if not isinstance(value, float) or not math.isfinite(value):
        return False
    return float(written(value)) == float(written_result)


def _truths(rationale: str) -> list[bool]:
    """Whether each equation a rationale states holds: ``a op b = c`` (``op`` one of ``+ - *
    x / ^ mod``, the worked operations) and ``sqrt(a) = c``; a division by zero, a complex
    or overflowing power, a root of a negative number are false."""
    out = []
    for a, op, b, c in _EQUATION.findall(rationale):
        try:
            value = OPERATIONS["*" if op == "x" else op](float(a), float(b))
        except (ZeroDivisionError, OverflowError):
            value = None
        out.append(_holds(value, c))
    out += [float(a) >= 0 and _holds(math.sqrt(float(a)), c) for a, c in _ROOT.findall(rationale)]
    return out


def slipped(rationale: str) -> bool | None:
    """Whether a rationale states a false equation (:func:`_truths`: the worked operations
    ``+ - * x / ^ mod`` and ``sqrt``, integers or decimals): True if any is false, False if
    all are true, None if it states none."""
    truths = _truths(rationale)
    return None if not truths else not all(truths)


def equations(rationale: str) -> int:
    """How many equations (:func:`_truths`) a rationale states."""
    return len(_truths(rationale))


def stratified_auroc(conf: np.ndarray, positive: np.ndarray, strata: np.ndarray) -> float | None:
    """AUROC of ``conf`` for ``positive`` vs the rest within each stratum, averaged with
    weights proportional to the stratum's size; strata holding only one kind are left out.

    ``sum_s n_s AUROC_s / sum_s n_s`` over the strata ``s`` with both kinds; None when no
    stratum has both. Shapes ``[N]``. Higher: ``conf`` ranks positives above the rest
    among comparable items; what the strata alone explain (one stratum riskier than
    another) does not count."""
    keep = [s for s in np.unique(strata) if 0 < positive[strata == s].sum() < (strata == s).sum()]
    if not keep:
        return None
    sizes = np.array([(strata == s).sum() for s in keep], dtype=float)
    aucs = [metrics.auroc(conf[strata == s], positive[strata == s]) for s in keep]
    return float(np.dot(sizes, aucs) / sizes.sum())


def verdict(rationale: str) -> int | None:
    """The option a verification rationale concludes: 0 when it ends with "same", 1 with
    "diff"/"different", None otherwise."""
    m = _VERDICT.search(rationale.strip())
    return None if m is None else (0 if m.group(1) == "same" else 1)


def _end(values: Sequence[float | None]) -> float | None:
    """Mean of the last quarter of the logged (not None) values; None when none is."""
    kept = [v for v in values if v is not None]
    return float(np.mean(kept[-max(1, len(kept) // 4) :])) if kept else None


def _trend(values: Sequence[float]) -> float | None:
    """Mean of the last quarter minus the mean of the quarter before (None: too short)."""
    q = len(values) // 4
    if q < 1:
        return None
    return float(np.mean(values[-q:]) - np.mean(values[-2 * q : -q]))


TRAIN_ACCURACY = ("accuracy_u", "correct", "kept", "reward")
"""The training accuracy each loop logs, the first of these a log holds: the RLCD family's
``accuracy_u`` (the readout's top option right), RLCR's ``correct``, RFT's ``kept`` and
GRPO's ``reward`` (a sampled answer right); each a mean over the step's rationales."""

NOISE_SE = 2.0
"""A change within this many standard errors of 0 reads "flat within noise"."""


def training_accuracy(log: Sequence[Mapping]) -> list[float]:
    """The logged training accuracy (:data:`TRAIN_ACCURACY`) of a run's log rows, one value
    per step that logged it; [] when the log holds none."""
    key = next((k for k in TRAIN_ACCURACY if any(r.get(k) is not None for r in log)), None)
    return [] if key is None else [r[key] for r in log if r.get(key) is not None]


def quarter_trend(per_seed: Sequence[Sequence[float]]) -> dict | None:
    """Per-quarter means of a value logged every step, over seeds, with a noise band.

    Each seed's steps are cut into four quarters of ``n // 4`` steps (the last ``n mod 4``
    steps join no quarter: the quarters stay equal); ``quarters[i]`` is the mean over seeds
    of each seed's quarter mean and ``se[i]`` its standard error, the steps of a quarter
    taken as independent draws around its level: ``sqrt(sum_s var_s / q) / S`` (``var_s``
    the sample variance of seed ``s``'s ``q`` values, ``S`` seeds). ``change`` is the last
    quarter minus the one before, ``se_change = sqrt(se[2]^2 + se[3]^2)``, and ``reading``
    "still rising" / "falling" when ``change`` is more than :data:`NOISE_SE` standard
    errors above / below 0, else "flat within noise". ``steps``: values per seed (the
    fewest). None when a seed logged fewer than 8 values (two per quarter)."""
    n = min(len(v) for v in per_seed)
    q = n // 4
    if q < 2:
        return None
    parts = np.array(
        [[np.asarray(v[i * q : (i + 1) * q], float) for i in range(4)] for v in per_seed]
    )
    means = parts.mean(-1).mean(0)
    se = np.sqrt((parts.var(-1, ddof=1) / q).sum(0)) / len(per_seed)
    change, se_change = means[3] - means[2], float(np.hypot(se[2], se[3]))
    reading = "flat within noise"
    if abs(change) > NOISE_SE * se_change:
        reading = "still rising" if change > 0 else "falling"
    return {
        "steps": n,
        "quarters": [float(m) for m in means],
        "se": [float(e) for e in se],
        "change": float(change),
        "se_change": se_change,
        "reading": reading,
    }


def run_mechanism(run: str | Path, T: float) -> dict[str, float | None]:
    """The mechanism's measures of one run (each explained at :data:`COLUMNS`), its test
    dump read with its fitted temperature ``T``."""
    rows = read_jsonl(rundir.eval_file(run, "test"))
    z = metrics.pad_ragged([r["logits"] for r in rows], -np.inf)
    labels = np.array([r["label"] for r in rows])
    raw = metrics.apply_temperature(z, 1.0)  # the raw readout: T = 1
    conf, correct = metrics.confidence_and_correct(metrics.apply_temperature(z, T), labels)
    texts = [(r.get("rationales") or [""])[0] for r in rows]  # a dump may hold none
    direct = None
    if rundir.has_eval(run, rundir.DIRECT):
        d = read_jsonl(rundir.eval_file(run, rundir.DIRECT))
        zd = metrics.pad_ragged([r["logits"] for r in d], -np.inf)
        direct = float(np.mean(zd.argmax(1) == np.array([r["label"] for r in d])))
    out: dict[str, float | None] = {
        "direct_accuracy": direct,
        "accuracy": float(correct.mean()),
        "saturated": float((raw.max(1) > SATURATED).mean()),
        "confidence": float(raw.max(1).mean()),
        "T": float(T),
        "auroc": metrics.auroc(conf, correct) if 0 < correct.sum() < len(correct) else None,
        "forced": float(np.mean([np.mean(r.get("forced") or [False]) for r in rows])),
    }
    _, risks = metrics.risk_coverage_curve(conf, correct)
    out["risk_ratio"] = float(risks[len(risks) // 2 - 1] / risks[-1]) if risks[-1] > 0 else None
    slips = [slipped(t) for t in texts]
    known = np.array([s is not None for s in slips])
    slip = np.array([bool(s) for s in slips])
    wrong = ~correct & known
    out["slipped_errors"] = float(slip[wrong].mean()) if wrong.any() else None
    clean = ~slip & known
    has_both = (slip & known).any() and clean.any()
    out["slip_auroc"] = metrics.auroc(conf[known], clean[known]) if has_both else None
    steps = np.array([equations(t) for t in texts])
    out["slip_auroc_steps"] = stratified_auroc(conf[known], clean[known], steps[known])
    verdicts = [verdict(t) for t in texts]
    said = np.array([v is not None for v in verdicts])
    top = raw.argmax(1)
    out["follows"] = (
        float(np.mean([top[i] == verdicts[i] for i in np.flatnonzero(said)]))
        if said.any()
        else None
    )
    log = rundir.read_log(run) if rundir.log_path(run).exists() else []
    out["readout_variance"] = _end([r.get("readout_variance") for r in log])
    out["kl_end"] = kl = _end([r.get("kl") for r in log])
    length = _end([r.get("rationale_length") for r in log if r.get("kl") is not None])
    method = METHOD_TABLE.get(rundir.read_config(run).get("method", ""))
    per_rationale = method is not None and method.loop == PER_RATIONALE_KL
    out["kl_token_end"] = out["kl_seq_end"] = None
    if kl is not None and length:
        out["kl_token_end"] = kl / length if per_rationale else kl
        out["kl_seq_end"] = kl if per_rationale else kl * length
    out["reward_trend"] = _trend([r["reward"] for r in log if r.get("reward") is not None])
    out["dev_trend"] = _trend([r["dev_brier"] for r in log if r.get("dev_brier") is not None])
    return out


def mechanism(runs: Sequence[str | Path], Ts: Sequence[float]) -> dict[str, float | None]:
    """:func:`run_mechanism` of each seed's run, averaged (a measure None for any seed is
    None)."""
    per_seed = [run_mechanism(r, t) for r, t in zip(runs, Ts, strict=True)]
    return {
        k: None if any(p[k] is None for p in per_seed) else float(np.mean([p[k] for p in per_seed]))
        for k in per_seed[0]
    }


COLUMNS = (
    ("direct_accuracy", "acc direct", "{:.3f}"),
    ("accuracy", "acc", "{:.3f}"),
    ("saturated", "max u > 0.99", "{:.0%}"),
    ("confidence", "mean max u", "{:.3f}"),
    ("readout_variance", "var u across rationales", "{:.3f}"),
    ("T", "T", "{:.2f}"),
    ("auroc", "AUROC", "{:.3f}"),
    ("risk_ratio", "risk top half / all", "{:.2f}"),
    ("slipped_errors", "errors with a slip", "{:.0%}"),
    ("slip_auroc", "AUROC clean vs slip", "{:.3f}"),
    ("slip_auroc_steps", "same steps", "{:.3f}"),
    ("follows", "readout = verdict", "{:.0%}"),
    ("forced", "forced marker", "{:.1%}"),
    ("kl_end", "KL end (nats)", "{:.2f}"),
    ("kl_token_end", "KL / token", "{:.4f}"),
    ("kl_seq_end", "KL / rationale", "{:.2f}"),
    ("reward_trend", "reward trend", "{:+.3f}"),
    ("dev_trend", "dev Brier trend", "{:+.3f}"),
)
"""The "Why" table's columns: summary key, header, format.

The headline (OpenJev-RLCD sec. 5.1, Figure 2) rests on steps that can each be checked in a
run's eval dumps and training log:

1. reasoning helps: accuracy after the rationale (the paper: 87% on GSM8K-Verify) against
   the same model answering directly (``direct_accuracy``, 56% in the paper; measured for
   the base model, whose run holds a ``test-direct`` dump);
2. after reasoning GRPO's readout is near one-hot (``saturated``: share of test items whose
   raw readout max is above 0.99) and needs a large fitted T (about 7), RLCD's hedges
   (``confidence``: mean raw max; T about 1.4), and a readout that varies across the
   rationales of a question is what Proposition 1 credits (``readout_variance``: the
   training log's ``E_r ||u(x, r) - p(x)||^2`` over the question's sampled rationales,
   mean over the last quarter of steps; 0 after System-One collapse);
3. temperature scaling cannot repair a ranking: with two options it changes no order, so
   selective prediction follows the readout's ranking (``auroc``: AUROC of the calibrated
   confidence for right vs wrong answers; ``risk_ratio``: error rate of the most confident
   half over the error rate of all, 1 for a ranking that knows nothing, 0 for a perfect one);
4. what decides the ranking on a verification task is whether the readout notices a slipped
   rationale: ``slipped_errors`` (share of wrong answers whose rationale holds a false
   equation), ``slip_auroc`` (AUROC of the confidence for clean vs slipped rationales: 0.5
   means the readout cannot tell them apart), ``slip_auroc_steps`` (the same AUROC within
   rationales of equally many equations, averaged by their share: where longer chains
   slip more, a readout that only knows which questions are long ranks slipped rationales
   low overall yet scores 0.5 here; equal to ``slip_auroc`` when every rationale states
   as many) and ``follows`` (share of readouts whose top
   option is the rationale's own verdict, "same" for the first option, "different" for the
   second);
5. the run is the paper's recipe: ``forced`` (share of rationales that never wrote the
   marker), ``kl_end`` (the KL to the anchor as the loop logs it, over the last quarter of
   steps, nats: per rationale, the sum of its tokens' log-ratios, for the RLCD family's
   loop; per token, the mean k3 estimate over a rationale's tokens, for the baselines),
   ``kl_token_end`` and ``kl_seq_end`` (the same per token and per rationale for every
   method, converted with the mean rationale length the log holds for those steps: the
   ratio of the means, as close as batch-mean logs allow), ``reward_trend`` (mean reward
   of the last quarter minus the quarter before: still rising means under-trained) and
   ``dev_trend`` (the same for the dev Brier that training logs every ``eval_every``
   steps, raw: still falling, a negative trend, means under-trained; a rise means it went
   past its best).
"""


def mechanism_table(summary: Mapping, labels: Mapping[str, str]) -> str:
    """The "Why" table (Markdown) of a summary's ``mechanism`` entries, one row per run in
    the summary's order, named by ``labels`` (run name -> label; others left out); "-"
    where a measure does not apply."""
    mech = summary.get("mechanism", {})
    head = "| run | " + " | ".join(h for _, h, _ in COLUMNS) + " |\n"
    head += "|---" * (len(COLUMNS) + 1) + "|\n"
    lines = []
    for name, label in labels.items():
        if name not in mech:
            continue
        cells = ["-" if mech[name][k] is None else f.format(mech[name][k]) for k, _, f in COLUMNS]
        lines.append(f"| {label} | " + " | ".join(cells) + " |\n")
    return head + "".join(lines)
