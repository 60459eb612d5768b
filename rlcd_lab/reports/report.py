"""The paper's tables and figures, generated from a reproduction's summary and runs.

Start at :func:`write_report` (``summary.json``, ``report.md``: :func:`report_markdown`,
``report.html`` and ``figures/*.png``: :func:`report_figures`); it reads the eval dumps
through :mod:`rlcd_lab.reports.results`. :func:`findings_table` judges each of the paper's
findings against ours (:func:`judge`), :func:`what_reproduces` sets every task's verdicts
side by side, :func:`runs_table` lists the runs. The README's result blocks are these
functions' output for the shipped summaries, never typed by hand (:func:`main`; a test
compares). The verdict rules (:mod:`rlcd_lab.math.verdicts`) and the HTML pages and PNG
figures (:mod:`rlcd_lab.drawing.pages`) live below this module."""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from rlcd_lab.drawing.pages import PLOTLY_JS, html_page, write_plotlyjs, write_pngs
from rlcd_lab.files import rundir
from rlcd_lab.files.io import atomic_write_text
from rlcd_lab.math import paper
from rlcd_lab.math.verdicts import (
    fmt_diff,
    fmt_seeds,
    temperature_verdict,
    verdict,
    verdict_head,
)
from rlcd_lab.methods import MATCHED, NO_KL, SWEEP_PREFIX, report_rows
from rlcd_lab.metrics import coverage_ceiling
from rlcd_lab.reports import posthoc
from rlcd_lab.reports.mechanism import (
    NOISE_SE,
    mechanism_table,
    quarter_trend,
    training_accuracy,
)
from rlcd_lab.reports.results import (
    FORKS,
    METRICS,
    N_BOOT,
    N_CLAIM,
    RLCD,
    STAGE1,
    RunResult,
    mean_log,
    rerun,
    rounded,
    summarize_runs,
    summary_json,
)

SWEEP_LABEL = "end to end, weight"
"""The label of Table 4's runs, before their weight."""


def labels() -> dict[str, str]:
    """``{run: label}`` in table order: the base model, the method registry's report rows
    (``methods.report_rows``), then Table 4's sweep and Figure 1's run without the anchor."""
    return {
        "base": "base",
        **report_rows(),
        SWEEP_PREFIX: SWEEP_LABEL,
        NO_KL: "end to end, weight 1, no KL",
    }


def label(run: str) -> str:
    """Display name of a run (``grpo-matched`` -> ``GRPO+TS (matched budget)``)."""
    if run.endswith(MATCHED) and "+" not in run:
        return f"{label(run[: -len(MATCHED)])} (matched budget)"
    if run.startswith(SWEEP_PREFIX):
        return f"{SWEEP_LABEL} {run[len(SWEEP_PREFIX) :]}"
    base, _, name = run.partition("+")
    if name in posthoc.BY_NAME:  # a post-hoc calibrator on a run: grpo-matched+logistic
        return f"{label(base)} + {posthoc.BY_NAME[name].label}"
    return labels().get(run, run)


def _ordered(runs: Mapping) -> list[str]:
    """Runs in table order; a post-hoc calibrator right after the run it recalibrates."""
    key = {n: i for i, n in enumerate(labels())}
    return sorted(runs, key=lambda r: (key.get(r.split("+")[0].removesuffix(MATCHED), len(key)), r))


# ---------------------------------------------------------------------------------------
# Claims of the paper and verdicts (the rules: rlcd_lab.math.verdicts)
# ---------------------------------------------------------------------------------------


T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306}
"""Student-t 97.5% quantiles by degrees of freedom: 95% CIs of per-seed changes (T)."""


def fmt_cell(cell: Mapping, signed: bool = False) -> str:
    """``mean ± s.d.`` over seeds (the mean alone for one seed)."""
    sign = "+" if signed else ""
    if cell.get("sd") is None or (isinstance(cell["sd"], float) and math.isnan(cell["sd"])):
        return f"{cell['mean']:{sign}.3f}"
    return f"{cell['mean']:{sign}.3f} ± {cell['sd']:.3f}"


def summary_kind(summary: Mapping) -> str:
    """The paper's kind of task (:func:`rlcd_lab.math.paper.kind`) of a summary: its
    ``task`` key, else the task its runs' configs name."""
    tasks = {summary["task"]} if "task" in summary else set()
    tasks |= {c["task"] for c in summary.get("configs", {}).values() if "task" in c}
    if len({paper.kind(t) for t in tasks}) != 1:
        raise ValueError(f"a summary needs runs of one kind of task, got tasks {sorted(tasks)}")
    return paper.kind(tasks.pop())


def _seed_interval(cell: Mapping, n: int) -> dict[str, float] | None:
    """95% t-interval of a mean over ``n`` seeds from ``{"mean", "sd"}`` (None: 1 seed)."""
    if cell.get("sd") is None or n < 2:
        return None
    half = T975[min(n - 1, max(T975))] * cell["sd"] / math.sqrt(n)
    return {"diff": cell["mean"], "ci_low": cell["mean"] - half, "ci_high": cell["mean"] + half}


@dataclass(frozen=True)
class Judged:
    """One claim of the paper checked on one summary: ``row`` names the comparison the
    same way for every task (the "What reproduces" table's row), ``name`` the runs
    actually compared, ``ours`` our difference [CI] (p) with the test across seeds and the
    minimal detectable effect, ``verdict`` per :func:`verdict` (marked :func:`borderline`),
    ``diff`` the summary's paired entry (None for the fitted-T claims), ``runs`` the
    summary's names of the runs compared."""

    claim: paper.Claim | paper.TemperatureClaim
    row: str
    name: str
    ours: str
    verdict: str
    diff: Mapping | None = None
    runs: tuple[str, ...] = ()


def _sign(direction: int) -> str:
    return {+1: "higher", -1: "lower", 0: "no difference"}[direction]


BEST_CALIBRATOR = "reinforce - grpo+best"
"""The pair of the claims :func:`claims` adds: RLCD against GRPO recalibrated by the
post-hoc calibrator best on dev (:func:`rlcd_lab.reports.posthoc.best_pair`)."""


def claims(kind: str) -> list[paper.Claim]:
    """The paper's claims for ``kind`` (:data:`rlcd_lab.math.paper.CLAIMS`), then each of
    its ranking claims against GRPO+TS (AURC, Cov@eps) again against GRPO with its best
    dev-fitted post-hoc calibrator (the paper's effect kept: the claim a skeptic checks)."""
    own = list(paper.CLAIMS[kind])
    extra = [
        replace(c, pair=BEST_CALIBRATOR, paper=f"{c.paper}, against GRPO+TS")
        for c in own
        if c.pair == "reinforce - grpo" and c.metric in ("aurc", "cov_at_eps")
    ]
    return own + extra


def _comparisons(
    summary: Mapping, claim: paper.Claim
) -> list[tuple[str, str, tuple[str, str] | None, Mapping | None]]:
    """``(row, name, where, diff)`` of each comparison a claim is checked on: the
    matched-budget baseline when shipped; every weight a reproduction ran for
    ``"sweep:*"``. ``where`` is the summary's ``(section, key)`` holding the paired test
    (None for a fork's change of T, an interval over seeds)."""
    metric = METRICS[claim.metric][0] if claim.metric in METRICS else "JSD"
    if claim.pair == "sweep:*":
        out = []
        for w, tests in sorted(summary.get("sweep", {}).items(), key=lambda kv: float(kv[0])):
            row = f"Table 4: end to end at weight {w} vs stage 1: {metric}"
            out.append((row, row, ("sweep", w), tests.get(claim.metric)))
        return out
    if claim.pair.startswith("fork:"):
        fork = claim.pair.removeprefix("fork:")
        row = f"{label(fork)} vs its stage-1 checkpoint: {metric}"
        diff = (summary["forks"].get(fork) or {}).get(claim.metric)
        if claim.metric == "T":
            n = len(summary["runs"].get(fork, {}).get("seeds", summary["seeds"]))
            return [(row, row, None, diff and _seed_interval(diff, n))]
        return [(row, row, ("forks", fork), diff)]
    if claim.pair == BEST_CALIBRATOR:
        key = posthoc.best_pair(summary)
        row = f"RLCD vs GRPO+TS + best dev-fitted calibrator: {metric}"
        if key is None:
            return []
        name = f"RLCD vs {label(key.split(' - ')[1])}: {metric}"
        return [(row, name, ("paired", key), summary["paired"].get(key, {}).get(claim.metric))]
    a, b = claim.pair.split(" - ")
    row = f"{'RLCD' if a == RLCD else label(a)} vs {label(b)}: {metric}"
    a, b = (r + MATCHED if r + MATCHED in summary["runs"] else r for r in (a, b))
    name = f"{'RLCD' if a == RLCD else label(a)} vs {label(b)}: {metric}"
    key = f"{a} - {b}"
    return [(row, name, ("paired", key), summary["paired"].get(key, {}).get(claim.metric))]


def _runs_of(where: tuple[str, str]) -> tuple[str, str]:
    """The two runs (A, B) that a summary's ``(section, key)`` compares."""
    section, key = where
    if section == "paired":
        a, b = key.split(" - ")
        return a, b
    return (SWEEP_PREFIX + key if section == "sweep" else key), STAGE1


def stabilize(summary: dict, loaded: Mapping[str, Sequence[RunResult]], n: int = N_CLAIM) -> dict:
    """``summary`` with the paired test of every claim of the paper it is judged on run
    again at ``n`` replicates under each bootstrap RNG seed of
    :data:`rlcd_lab.reports.results.RNG_SEEDS` (:func:`rlcd_lab.reports.results.rerun`;
    the first seed's numbers are shown), so that :func:`judge` can mark a verdict that
    depends on the draw. Returns ``summary``, changed in place."""
    for claim in claims(summary_kind(summary)):
        for _, _, where, diff in _comparisons(summary, claim):
            if where is not None and diff is not None:
                a, b = _runs_of(where)
                summary[where[0]][where[1]][claim.metric] = rerun(
                    loaded[a], loaded[b], claim.metric, summary["eps"], n
                )
    return summary


def borderline(v: str, others: Sequence[str]) -> str:
    """The verdict ``v`` marked borderline where a verdict under another bootstrap draw
    (``others``) differs in kind (:func:`rlcd_lab.math.verdicts.verdict_head`), e.g.
    ``"reproduces (borderline: not measurable under 1 of 5 bootstrap draws)"``; ``v``
    itself otherwise."""
    head = verdict_head(v)
    flips = [verdict_head(o) for o in others if verdict_head(o) != head]
    if not flips:
        return v
    names = " / ".join(dict.fromkeys(flips))
    return f"{v} (borderline: {names} under {len(flips)} of {len(others) + 1} bootstrap draws)"


def majority_draw(diff: Mapping, direction: int, effect: float | None) -> tuple[dict, str]:
    """The bootstrap draw a claim cell shows, and its verdict: of the test's draw and its
    reruns under other bootstrap RNG seeds (``diff["reruns"]``: their ``ci_low``,
    ``ci_high`` and ``p``; the point estimate is the same), the first whose verdict's kind
    (:func:`rlcd_lab.math.verdicts.verdict_head`) is the most common one (the earlier on a
    tie), marked :func:`borderline` where another draw reads another. Returns ``(diff with
    that draw's CI and p, verdict)``."""
    draws = [dict(diff), *({**diff, **r} for r in diff.get("reruns", ()))]
    verdicts = [verdict(d, direction, effect) for d in draws]
    heads = [verdict_head(v) for v in verdicts]
    i = heads.index(max(dict.fromkeys(heads), key=heads.count))
    return draws[i], borderline(verdicts[i], verdicts[:i] + verdicts[i + 1 :])


def judge(summary: Mapping) -> list[Judged]:
    """Every claim of the summary's kind of task (:data:`rlcd_lab.math.paper.CLAIMS`) that its
    runs can check, with its verdict (marked :func:`borderline` where the test's reruns
    under other bootstrap RNG seeds read another) and our difference with the test across
    seeds and the minimal detectable effect (:func:`rlcd_lab.math.verdicts.fmt_seeds`);
    then the fitted-T claim where the paper makes one. Claims whose runs or metrics are
    missing from ``summary`` are left out."""
    k = summary_kind(summary)
    out = []
    held = {}
    for claim in claims(k):
        for row, name, where, diff in _comparisons(summary, claim):
            if diff is None:
                continue
            runs = _runs_of(where) if where else (claim.pair.removeprefix("fork:"), STAGE1)
            shown, v = majority_draw(diff, claim.direction, claim.effect)
            if claim.pair == "reinforce - grpo":
                held[claim.metric] = v.startswith("reproduces")
            if (
                claim.pair == BEST_CALIBRATOR
                and held.get(claim.metric)
                and not v.startswith("reproduces")
            ):
                v = f"gap closed by the calibrator: {v}"
            ours = fmt_diff(shown) + (f"; {fmt_seeds(diff)}" if "seeds" in diff else "")
            row = f"{row}, {_sign(claim.direction)}"
            out.append(Judged(claim, row, name, ours, v, diff, runs))
    t_claim = paper.TEMPERATURE.get(k)
    others = [
        o + MATCHED if o + MATCHED in summary["runs"] else o
        for o in ("grpo", "rft-kl")
        if o in summary["runs"] or o + MATCHED in summary["runs"]
    ]
    if t_claim is not None and RLCD in summary["runs"] and others:
        t = {r: summary["runs"][r]["T"]["mean"] for r in (RLCD, *others)}
        names = " / ".join(label(r) for r in t)
        values = " / ".join(fmt_cell(summary["runs"][r]["T"]) for r in t)
        v = temperature_verdict(t[RLCD], [t[r] for r in others])
        row = "fitted T: RLCD near 1, GRPO and RFT+KL far from it"
        out.append(Judged(t_claim, row, f"fitted T, {names}", values, v, runs=tuple(t)))
    return out


def findings_table(summary: Mapping) -> str:
    """Markdown: each claim of the paper for this summary's kind of task
    (:mod:`rlcd_lab.math.paper`), ours (difference A - B, 95% CI, two-sided p) and the
    verdict (:func:`judge`, by :func:`rlcd_lab.math.verdicts.verdict`: reproduces, smaller
    than the paper's, not measurable, opposite direction; a finding of no difference is
    consistent, not detected or differs)."""
    where = paper.KIND_NAMES[summary_kind(summary)]
    rows = [
        f"| claim (paper: Qwen3-1.7B on {where}) | paper "
        "| ours: difference [95% CI], p; per-seed differences, t and sign-flip p over seeds; "
        "MDE | verdict |"
    ]
    rows.append("|---|---|---|---|")
    for j in judge(summary):
        direction = getattr(j.claim, "direction", None)
        claim = j.name if direction is None else f"{j.name}, {_sign(direction)}"
        rows.append(f"| {claim} | {j.claim.paper} (§{j.claim.section}) | {j.ours} | {j.verdict} |")
    return "\n".join(rows) + "\n"


HEADLINE = "RLCD vs GRPO+TS"
"""The claims the README's headline table keeps: the paper's main comparison."""


HELD = ("reproduces", "consistent")
"""Verdicts (their first clause's start) under which a claim holds on a task."""


def why_column(claim: str, kind: str) -> str:
    """The columns of a task's "Why" table (:func:`rlcd_lab.reports.mechanism.mechanism_table`)
    that explain a claim about ``claim``'s metric on a task of ``kind``: accuracy ->
    ``acc`` (does reasoning help); Brier -> saturation and ``T`` (what temperature scaling
    must undo); AURC and Cov@eps -> ranking (``AUROC``; on a verification task whether the
    readout notices a slipped rationale); fitted T -> ``T`` and the anchor (``KL end``);
    "" for a claim no column measures (JSD)."""
    if "JSD" in claim:
        return ""
    if "fitted T" in claim or ": T," in claim:
        return "T, KL end"
    if "AURC" in claim or "Cov@eps" in claim:
        return "AUROC clean vs slip" if kind == "gsm8k-verify" else "AUROC"
    if "Brier" in claim:
        return "max u > 0.99, T"
    return "acc"


def why_runs(summary: Mapping) -> list[str]:
    """The runs a summary's "Why" table holds, in its order: those with a ``mechanism``
    entry (:data:`rlcd_lab.reports.results.MECHANISM_RUNS` that ran)."""
    return [r for r in summary.get("mechanism", {}) if r in summary["runs"]]


def what_reproduces(
    summaries: Mapping[str, Mapping], only: str = "", why: str | None = None
) -> str:
    """Markdown: one row per claim of the paper (those whose name starts with ``only``),
    one column per task (``{task name: summary}``), each cell the verdict (its first
    clause; :func:`findings_table` has it whole) on that task's kind of claim, our
    difference [95% CI] and the paper's number; "-" where the paper makes no such claim
    for that kind or the task did not run it. A task with none of the kept claims has no
    column. With ``why`` (the results page, relative to the page the table is on; "" on
    that page), a claim that does not hold links to the task's "Why" table
    (``#why-<task>``) naming the columns that explain it (:func:`why_column`), where that
    table holds at least one of the claim's runs (:func:`why_runs`)."""
    judged = {task: {j.row: j for j in judge(s)} for task, s in summaries.items()}
    rows: list[str] = []
    for found in judged.values():
        rows += [r for r in found if r not in rows and r.startswith(only)]
    summaries = {task: s for task, s in summaries.items() if set(judged[task]) & set(rows)}
    kinds = {task: paper.KIND_NAMES[summary_kind(s)] for task, s in summaries.items()}
    head = " | ".join(f"{task} ({kinds[task]})" for task in summaries)
    out = [f"| claim | {head} |", "|---" * (len(summaries) + 1) + "|"]
    for r in rows:
        cells = []
        for task in summaries:
            j = judged[task].get(r)
            if j is None:
                cells.append("-")
                continue
            ours = j.ours.split(", p = ")[0].split("; seeds")[0]
            effect = getattr(j.claim, "effect", None)
            number = f" (paper {effect:+.3f})" if effect is not None else ""
            verdict = j.verdict.split(":")[0].split(" (borderline")[0]
            if "(borderline" in j.verdict:
                verdict += " (borderline)"
            if j.diff is not None and "seeds" in j.diff:
                number += f"; {fmt_seeds(j.diff, short=True)}"
            link = ""
            if (
                why is not None
                and not verdict.startswith(HELD)
                and set(j.runs) & set(why_runs(summaries[task]))
            ):
                col = why_column(r, summary_kind(summaries[task]))
                link = f" -> [why{': ' + col if col else ''}]({why}#why-{task})"
            cells.append(f"**{verdict}** {ours}{number}{link}")
        out.append(f"| {r} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def training_trends(root: Path, summary: Mapping) -> dict[str, dict]:
    """``{run: quarter_trend}`` of the training accuracy
    (:func:`rlcd_lab.reports.mechanism.training_accuracy`) of every run of the reproduction
    at ``root`` over the seeds it was trained on (those with a log, ``root/seed-*/<run>``;
    a run of fewer seeds than the others, its own) whose every log holds it, in table order
    (:func:`rlcd_lab.reports.mechanism.quarter_trend`)."""
    out = {}
    for run in _ordered(summary["runs"]):
        dirs = [rundir.seed_dir(root, s) / run for s in summary["seeds"]]
        dirs = [d for d in dirs if rundir.log_path(d).exists()]
        if not dirs:
            continue
        values = [training_accuracy(rundir.read_log(d)) for d in dirs]
        trend = quarter_trend(values) if all(values) else None
        if trend is not None:
            out[run] = trend
    return out


def training_trend_table(trends: Mapping[str, dict]) -> str:
    """Markdown: :func:`training_trends` as a table (each quarter's mean over seeds ± its
    standard error; the last quarter's change ± :data:`rlcd_lab.reports.mechanism.NOISE_SE`
    standard errors, and its reading), then the sentence that reads it: which runs were
    still rising when they stopped, which flat within noise, which falling."""
    k = f"{NOISE_SE:g}"
    rows = [
        "| run | steps | 1st quarter | 2nd | 3rd | last | last - 3rd (± " + k + " SE) | reading |",
        "|---" * 8 + "|",
    ]
    by_reading: dict[str, list[str]] = {}
    for run, t in trends.items():
        cells = [f"{m:.3f} ± {e:.3f}" for m, e in zip(t["quarters"], t["se"], strict=True)]
        change = f"{t['change']:+.3f} ± {NOISE_SE * t['se_change']:.3f}"
        rows.append(
            f"| {label(run)} | {t['steps']} | "
            + " | ".join(cells)
            + f" | {change} | {t['reading']} |"
        )
        by_reading.setdefault(t["reading"], []).append(
            f"{label(run)} ({t['change']:+.3f} ± {NOISE_SE * t['se_change']:.3f})"
        )
    parts = [
        f"{r} for {', '.join(by_reading[r])}"
        for r in ("still rising", "flat within noise", "falling")
        if r in by_reading
    ]
    lead = (
        ""
        if "still rising" in by_reading
        else "No run's training accuracy was still rising when it stopped. "
    )
    sentence = (
        f"{lead}The last quarter against the one before (± {k} standard errors): "
        + "; ".join(parts)
        + "."
    )
    return "\n".join(rows) + "\n\n" + sentence + "\n"


def coverage_ceiling_reading(summary: Mapping) -> str:
    """The sentence that says whether a task could show the paper's Cov@eps differences:
    for each of the paper's Cov@eps claims of RLCD against a run
    (:data:`rlcd_lab.math.paper.CLAIMS`, the matched-budget run where shipped), the largest
    difference this task allows, RLCD's ceiling
    (:func:`rlcd_lab.metrics.coverage_ceiling` of its accuracy, mean over seeds: an upper
    bound on the mean of the seeds' ceilings, the bound being concave) minus the run's
    Cov@eps, against the paper's difference. "" when the summary has no such claim."""
    eps, runs = summary["eps"], summary["runs"]
    acc = runs[RLCD]["accuracy"]["mean"] if RLCD in runs else None
    found = []
    for claim in paper.CLAIMS[summary_kind(summary)]:
        if claim.metric != "cov_at_eps" or not claim.pair.startswith(f"{RLCD} - "):
            continue
        b = claim.pair.split(" - ")[1]
        b = b + MATCHED if b + MATCHED in runs else b
        if acc is not None and b in runs and claim.effect is not None:
            found.append((b, claim.effect))
    if not found:
        return ""
    ceiling = coverage_ceiling(acc, eps)
    allowed = [ceiling - runs[b]["cov_at_eps"]["mean"] for b, _ in found]
    fits = [a >= e for a, (_, e) in zip(allowed, found, strict=True)]
    pct = f"{eps:.0%}"
    covs = " and ".join(f"{label(b)} {runs[b]['cov_at_eps']['mean']:.3f}" for b, _ in found)
    ups = " and ".join(f"{a:+.3f}" for a in allowed)
    papers = " and ".join(f"{e:+.3f}" for _, e in found)
    if all(fits):
        verdicts = "more than the paper's"
        tail = (
            "The task left room for the paper's differences; where RLCD's fall short, its "
            "ranking, not the task's ceiling, is why."
        )
    else:
        verdicts = "against the paper's"
        tail = "Where the room is less than the paper's difference, this task could not show it."
    return (
        f"How much Cov@{pct} this task allows: a readout decides at most its accuracy over "
        f"{1 - eps:.2f} of the items at a {pct} error rate (a prefix of k items with e errors "
        f"qualifies when e <= {eps:g} k and holds at most the right answers, so "
        f"k (1 - {eps:g}) <= right answers; ranking every right answer first reaches it), "
        f"{ceiling:.3f} for RLCD's accuracy {acc:.3f}. Against Cov@{pct} of {covs}, the "
        f"largest differences this task allows are {ups}, {verdicts} {papers}. {tail}\n"
    )


def runs_table(
    summary: Mapping,
    keys: Sequence[str] = ("accuracy", "brier", "aurc", "cov_at_eps", "T", "length"),
) -> str:
    """Markdown: every run's budget (steps) and test metrics after temperature scaling,
    mean ± s.d. over seeds (a run at fewer seeds than the reproduction names them)."""
    rows = ["| run | steps | " + " | ".join(METRICS[k][0] for k in keys) + " |"]
    rows.append("|---" * (len(keys) + 2) + "|")
    for run in _ordered(summary["runs"]):
        entry = summary["runs"][run]
        cells = [fmt_cell(entry[k]) for k in keys]
        name = label(run) + (
            f" (seeds {', '.join(map(str, entry['seeds']))})" if "seeds" in entry else ""
        )
        rows.append(f"| {name} | {entry.get('steps', 0)} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def _rlcd_pairs(summary: Mapping) -> list[str]:
    """The keys ``"reinforce - X"`` of ``summary["paired"]``, in table order."""
    order = _ordered(summary["runs"])
    pairs = [p for p in summary["paired"] if p.startswith(f"{RLCD} - ")]
    return sorted(pairs, key=lambda p: order.index(p.split(" - ")[1]))


def paired_table(summary: Mapping) -> str:
    """Markdown: two-stage RLCD minus every other run, accuracy, Brier, AURC, Cov@eps."""
    keys = ("accuracy", "brier", "aurc", "cov_at_eps")
    rows = ["| RLCD minus | " + " | ".join(f"Δ {METRICS[k][0]}" for k in keys) + " |"]
    rows.append("|---" * (len(keys) + 1) + "|")
    mine = [p for p in summary["paired"] if p.startswith(f"{RLCD} - ")]  # not Table 3's pairs
    for pair in sorted(mine, key=lambda p: _ordered(summary["runs"]).index(p.split(" - ")[1])):
        res = summary["paired"][pair]
        rows.append(
            f"| {label(pair.split(' - ')[1])} | "
            + " | ".join(fmt_diff(res[k]) for k in keys)
            + " |"
        )
    return "\n".join(rows) + "\n"


def forks_table(summary: Mapping) -> str:
    """Markdown: Table 2, each fork minus its stage-1 checkpoint (paired tests; T and
    length: mean ± s.d. of the change over seeds)."""
    keys = ("accuracy", "brier", "aurc", "cov_at_eps")
    rows = ["| fork | " + " | ".join(f"Δ {METRICS[k][0]}" for k in keys) + " | Δ T | Δ length |"]
    rows.append("|---" * (len(keys) + 3) + "|")
    for fork, res in summary["forks"].items():
        cells = [fmt_diff(res[k]) for k in keys] + [
            fmt_cell(res[k], signed=True) for k in ("T", "length")
        ]
        rows.append(f"| {label(fork)} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def vs_readout_table(summary: Mapping) -> str:
    """Markdown: Figure 3 in numbers, each fork minus ``readout-only`` (paired tests)."""
    keys = ("accuracy", "brier", "aurc", "cov_at_eps")
    rows = ["| fork minus readout-only | " + " | ".join(f"Δ {METRICS[k][0]}" for k in keys) + " |"]
    rows.append("|---" * (len(keys) + 1) + "|")
    for fork, res in summary["vs_readout"].items():
        rows.append(f"| {label(fork)} | " + " | ".join(fmt_diff(res[k]) for k in keys) + " |")
    return "\n".join(rows) + "\n"


def jsd_table(summary: Mapping) -> str:
    """Markdown: Table 3, JSD to ``q`` in bits (lower is better): the single query after
    temperature scaling, and the paper's readout (the mixture of M rationales, or the
    single query for runs that answer directly), with RLCD minus each run on the latter,
    and the share of the mixture's rationales that are empty (reasoning switched off)."""
    runs = [r for r in _ordered(summary["runs"]) if "jsd" in summary["runs"][r]]
    m = max((summary["runs"][r].get("m_mixture", 0) for r in runs), default=0)
    rows = [
        f"| run | steps | JSD single | JSD mixture of {m} (direct: single) "
        f"| RLCD minus run | length | empty rationales (of {m}) |"
    ]
    rows.append("|---" * 7 + "|")
    for r in runs:
        e = summary["runs"][r]
        test = summary["paired"].get(f"{RLCD} - {r}", {}).get("jsd_table3")
        diff = fmt_diff(test) if test else "-"
        t3 = fmt_cell(e["jsd_table3"])
        empty = fmt_cell(e["empty_share"]) if "empty_share" in e else "- (direct)"
        cells = [label(r), str(e["steps"]), fmt_cell(e["jsd"]), t3, diff, fmt_cell(e["length"])]
        cells.append(empty)
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def sweep_table(summary: Mapping, prefix: str = SWEEP_PREFIX) -> str:
    """Markdown: Table 4, the end-to-end objective at each score-function weight (stage 1
    is weight 0), mean ± s.d. over seeds; the last column is gradient dilution, RMS of
    the score-function over RMS of the pathwise gradient norm over training."""
    runs = {0.0: "calibrate"} if "calibrate" in summary["runs"] else {}
    runs |= {float(r[len(prefix) :]): r for r in summary["runs"] if r.startswith(prefix)}
    keys = ("accuracy", "brier", "aurc", "T", "length")
    rows = ["| weight c | " + " | ".join(METRICS[k][0] for k in keys) + " | RMS sf / pathwise |"]
    rows.append("|---" * (len(keys) + 2) + "|")
    for c in sorted(runs):
        e = summary["runs"][runs[c]]
        ratio = fmt_cell(e["grad_rms_ratio"]) if "grad_rms_ratio" in e else "-"
        rows.append(f"| {c:g} | " + " | ".join(fmt_cell(e[k]) for k in keys) + f" | {ratio} |")
    return "\n".join(rows) + "\n"


def dev_curve_table(summary: Mapping) -> str:
    """Markdown: the dev curves (``runs[name]["dev_curve"]``,
    :func:`rlcd_lab.reports.results.dev_curve`), one row per run that logged one, one
    column per step count (a run continued from stage 1 counts stage 1's steps); raw dev
    Brier, mean over seeds; "" where a run did not evaluate; "" (no table) when no run
    logged a curve."""
    curves = {
        run: {p["step"]: p["brier"] for p in summary["runs"][run]["dev_curve"]}
        for run in _ordered(summary["runs"])
        if summary["runs"][run].get("dev_curve")
    }
    if not curves:
        return ""
    steps = sorted(set().union(*curves.values()))
    rows = ["| run | " + " | ".join(map(str, steps)) + " |", "|---" * (len(steps) + 1) + "|"]
    for run, curve in curves.items():
        cells = [f"{curve[s]:.3f}" if s in curve else "" for s in steps]
        rows.append(f"| {label(run)} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def tuning_table(summary: Mapping) -> str:
    """Markdown: the learning-rate grid (``summary["tuning"]``,
    :func:`rlcd_lab.reports.results.tuning`): each tuned run's dev Brier after temperature
    scaling at every grid value, its tuning steps, and the value kept (in bold where it
    was its own lowest score: two-stage RLCD's stage 1 takes the two-stage run's)."""

    def lr(value: float) -> str:  # as the docs write it: 1e-4, 3e-5
        return np.format_float_scientific(value, trim="-", exp_digits=1)

    tune = summary["tuning"]
    grid = [f"{v:g}" for v in tune["grid"]]  # the keys of dev_ts_brier
    rows = ["| run | steps | " + " | ".join(f"lr {lr(v)}" for v in tune["grid"]) + " | lr used |"]
    rows.append("|---" * (len(grid) + 3) + "|")
    for run in _ordered(tune["dev_ts_brier"]):
        by_lr, kept = tune["dev_ts_brier"][run], tune["lr"][run]
        cells = [
            "" if v not in by_lr else
            (f"**{by_lr[v]:.3f}**" if float(v) == kept and by_lr[v] == min(by_lr.values())
             else f"{by_lr[v]:.3f}")
            for v in grid
        ]  # fmt: skip
        rows.append(
            f"| {label(run)} | {tune['steps'][run]} | " + " | ".join(cells) + f" | {lr(kept)} |"
        )
    return "\n".join(rows) + "\n"


def report_markdown(summary: Mapping, title: str) -> str:
    """``report.md``: the paper's tables for this reproduction. Table 1: every run (mean
    ± s.d. over seeds, after temperature scaling, with its training budget in steps) and
    the paired tests of two-stage RLCD against each run; Table 2: the stage-2 forks
    against their stage-1 checkpoint; Table 3 (aleatoric tasks): JSD to ``q`` in bits,
    single query and the mixture; the dev curves (raw dev Brier over training) and, where
    the learning rates were tuned (``reproduce --lr-grid``), each run's dev score at every
    value of the grid."""
    seeds = ", ".join(map(str, summary["seeds"]))
    md = [
        f"# rlcd_lab reproduction: {title}\n",
        f"Seeds {seeds}. Single-query readouts on test after temperature scaling fitted on "
        f"dev; mean ± s.d. over seeds. Cov@eps at eps = {summary['eps']}. `steps`: the "
        "training budget (two-stage RLCD: both stages; `(matched budget)`: a baseline at "
        "RLCD's budget). `length`: mean rationale tokens (0: direct answers).\n",
        "## Table 1: methods\n",
        runs_table(summary),
    ]
    if summary["paired"]:
        md += [
            "\n## Paired tests: two-stage RLCD minus each run\n\nDifference [95% CI], two-sided "
            "sign-flip p. Accuracy and Brier: per-item values averaged over seeds, items "
            "resampled. AURC and Cov@eps: per-seed metrics averaged, test items resampled "
            f"jointly across seeds ({summary.get('n_boot', 2000)} replicates). Negative Brier/"
            "AURC and positive accuracy/Cov@eps favour RLCD.\n",
            paired_table(summary),
            "\n## The paper's claims\n\nEach claim's test runs at more replicates under five "
            "bootstrap RNG seeds (the first shown; *borderline* where another draw reads another "
            "verdict), beside the test across training seeds (per-seed differences, a t test "
            "and an exact sign-flip over seeds) and the minimal detectable effect at 80% power "
            "(MDE = 2.80 x the bootstrap standard error).\n",
            findings_table(summary),
        ]
    if summary["forks"]:
        md += [
            "\n## Table 2: stage-2 continuations from the same stage-1 checkpoint\n\nEach fork "
            "minus its stage-1 checkpoint (same seed): paired tests as above; T and length: "
            "mean ± s.d. of the change. anchor-only is RLCD-RL with the outcome reward removed "
            "(the readout is still trained by the pathwise term).\n",
            forks_table(summary),
        ]
    if summary.get("vs_readout"):
        md += [
            "\n## Figure 3: stage-2 reward matters\n\nEach fork minus readout-only (the "
            "same stage-1 checkpoint, question stream and budget; paired tests as above). "
            "Negative Brier/AURC: the fork's stage-2 reward did better than training the "
            "readout alone.\n",
            vs_readout_table(summary),
        ]
    if any(r.startswith(SWEEP_PREFIX) for r in summary["runs"]):
        md += [
            "\n## Table 4: score-function weight, end to end (KL-anchored, from the base)\n\n"
            "Weight 0 is RLCD stage 1 (pathwise only). The last column is gradient dilution: "
            "the RMS over training of the (unweighted) score-function gradient norm over the "
            "pathwise one.\n",
            sweep_table(summary),
        ]
    if any("jsd" in e for e in summary["runs"].values()):
        md += [
            "\n## Table 3: aleatoric outcomes (JSD to q in bits, lower is better)\n",
            jsd_table(summary),
        ]
    if dev_curve_table(summary):
        md += [
            "\n## Dev curves\n\nRaw dev Brier (T = 1, lower is better) after each number "
            "of training steps, as the training loop logs it, mean over seeds (two-stage RLCD "
            "and its forks count stage 1's steps).\n",
            dev_curve_table(summary),
        ]
    if summary.get("tuning"):
        md += [
            "\n## Learning rates, chosen on dev\n\nEvery run on the first seed once per "
            "value, its dev Brier after temperature scaling; the lowest is kept (bold; "
            "two-stage RLCD's stage 1 takes the two-stage run's value).\n",
            tuning_table(summary),
        ]
    return "\n".join(md)


# ---------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------


def _grad_ratio(logs: Sequence[Sequence[dict]], offset: int = 0) -> list[dict]:
    """Ratio of the score-function to the pathwise gradient norm over training (each
    averaged over runs first)."""
    sf = mean_log(logs, "grad_score_function", offset)
    pw = {r["step"]: r["grad_pathwise"] for r in mean_log(logs, "grad_pathwise", offset)}
    return [
        {"step": r["step"], "sf / pathwise": r["grad_score_function"] / pw[r["step"]]}
        for r in sf
        if pw.get(r["step"])
    ]


def report_figures(summary: Mapping, loaded: Mapping[str, Sequence[RunResult]]) -> dict:
    """``{name: plotly figure}``. Figure 1 (System-One collapse): rationale length,
    readout variance across rationales and the score-function / pathwise gradient ratio
    over training, end to end at weight 1 without (``NO_KL``) and with the KL anchor,
    mean over seeds (every run's curves where the reproduction has neither). Figure 2:
    risk-coverage, seeds pooled. Figure 3: each stage-2 fork minus ``readout-only``
    (Brier and AURC, 95% CIs). ``rlcd_minus_<metric>``: two-stage RLCD minus each run."""
    from rlcd_lab.drawing import plots

    collapse = [n for n in (NO_KL, f"{SWEEP_PREFIX}1") if n in loaded]
    trained = {  # each run's log rows, read once
        n: [rundir.read_log(r.path) for r in loaded[n]]
        for n in collapse or loaded
        if all(rundir.log_path(r.path).exists() for r in loaded[n])
    }
    figs = {}
    if trained:
        stage1 = summary["runs"].get(STAGE1, {}).get("steps", 0)
        start = {n: stage1 if n in FORKS else 0 for n in trained}  # continued from stage 1
        for column, what in (
            ("rationale_length", "rationale length"),
            ("readout_variance", "variance of u across rationales"),
        ):
            curves = {label(n): mean_log(p, column, start[n]) for n, p in trained.items()}
            figs[f"fig1_{column}"] = plots.compare_curves(
                curves, column, title=f"Figure 1: {what} over training (mean over seeds)"
            )
        ratios = {label(n): _grad_ratio(p, start[n]) for n, p in trained.items()}
        ratios = {n: r for n, r in ratios.items() if r}
        if ratios:
            figs["fig1_grad_ratio"] = plots.compare_curves(
                ratios,
                "sf / pathwise",
                title="Figure 1: score-function / pathwise gradient norm over training",
            )
            figs["fig1_grad_ratio"].update_yaxes(type="log")  # spans orders of magnitude
    names = _ordered(loaded)
    pooled = {
        label(n): (
            np.concatenate([r.confidence for r in loaded[n]]),
            np.concatenate([r.correct for r in loaded[n]]),
        )
        for n in names
        if "jsd" not in summary["runs"][n]
    }
    if pooled:
        figs["fig2_risk_coverage"] = plots.risk_coverage_figure(
            pooled, eps=summary["eps"], title="Figure 2: risk-coverage (after TS, seeds pooled)"
        )
    for metric in ("brier", "aurc"):
        name = METRICS[metric][0]
        forks = {label(f): t[metric] for f, t in summary.get("vs_readout", {}).items()}
        if forks:
            figs[f"fig3_{metric}"] = plots.interval_figure(
                forks, f"Figure 3: each fork minus readout-only, {name}", f"Δ {name}"
            )
        diffs = {
            label(p.split(" - ")[1]): summary["paired"][p][metric] for p in _rlcd_pairs(summary)
        }
        if diffs:
            figs[f"rlcd_minus_{metric}"] = plots.interval_figure(
                diffs, f"RLCD minus each run, {name}", f"Δ {name}"
            )
    return figs


def write_report(
    root: Path,
    seeds: Sequence[int],
    eps: float,
    title: str,
    task: str | None = None,
    n_claim: int = N_CLAIM,
) -> dict:
    """``summary.json``, ``report.md``, ``report.html`` (figures with plotly.js from
    ``../plotly.min.js``, which :func:`write_plotlyjs` puts there) and
    ``figures/<name>.png`` (:func:`write_pngs`) in ``root`` from the runs under it;
    returns the summary. ``task`` (recorded as the summary's ``task``; default: the one
    its runs' configs name) decides which of the paper's findings it is judged on; each
    claim's paired test runs at ``n_claim`` replicates under every bootstrap RNG seed
    (:func:`stabilize`)."""
    summary, loaded = summarize_runs(root, seeds, eps)
    if task is not None:
        summary["task"] = rundir.portable_path(task)
    summary["configs"] = {
        f"seed-{s}/{p.parent.name}": json.loads(p.read_text())
        for s in seeds
        for p in sorted(rundir.seed_dir(root, s).glob(f"*/{rundir.CONFIG}"))
    }
    task_name = summary.get("task") or next(
        (c["task"] for c in summary["configs"].values() if "task" in c), ""
    )
    posthoc.add_posthoc(summary, loaded, task_name, eps, N_BOOT)
    stabilize(summary, loaded, n_claim)
    summary = rounded(summary)  # what the file holds is what the report shows
    atomic_write_text(root / rundir.SUMMARY, summary_json(summary))
    md = report_markdown(summary, title)
    atomic_write_text(root / "report.md", md)
    figs = report_figures(summary, loaded)
    write_pngs(figs, root / "figures")
    html = html_page(title, md, figs, f"../{PLOTLY_JS}")
    write_plotlyjs(Path(root).resolve().parent)
    atomic_write_text(root / "report.html", html)
    return summary


def load_summaries(folder: Path) -> dict[str, dict]:
    """``{task: summary}`` of every ``<task>/summary.json`` under ``folder``, in the order
    of the paper's kinds of task (:data:`rlcd_lab.math.paper.KINDS`), then by name."""
    found = {
        p.parent.name: json.loads(p.read_text(encoding="utf-8"))
        for p in folder.glob(f"*/{rundir.SUMMARY}")
    }
    order = {k: i for i, k in enumerate(paper.KINDS)}
    return dict(sorted(found.items(), key=lambda kv: (order[summary_kind(kv[1])], kv[0])))


def readme_block(summary: Mapping, short: bool = False) -> str:
    """What the README shows for a shipped summary: the runs (Table 3 on aleatoric
    tasks), then the paper's claims; for a difficulty map (``rlcd_lab.reports.difficulty``) its
    table; for a bench report (``rlcd_lab.bench``) its Markdown below the title; for a
    speed summary its targets (``short``: the README's few rows)."""
    if summary.get("kind") == "difficulty":
        from rlcd_lab.reports.difficulty import difficulty_table

        return difficulty_table(summary)
    if summary.get("bench") == "speed":  # benchmarks/results/<cpu>/speed.json
        from rlcd_lab.bench.speed import speed_markdown

        return speed_markdown(summary, short)
    if summary.get("bench") in ("typed", "attack"):  # a bench report, below its title
        from rlcd_lab.bench.attack import attack_markdown
        from rlcd_lab.bench.typed import typed_markdown

        md = (typed_markdown if summary["bench"] == "typed" else attack_markdown)(summary)
        body = md.split("\n", 1)[1].lstrip("\n")
        return re.sub(r"(?m)^(#+) ", r"#\1 ", body)  # its sections one level down
    aleatoric = any("jsd" in e for e in summary["runs"].values())
    return (
        (jsd_table(summary) if aleatoric else runs_table(summary)) + "\n" + findings_table(summary)
    )


BLOCK = re.compile(
    r"(<!-- (\S+):begin \(generated from (\S+) by [^)]*\) -->\n)(.*?)(<!-- \2:end -->)", re.S
)
"""A generated block in a Markdown file: ``<!-- NAME:begin (generated from SUMMARY by
...) -->``; SUMMARY a ``summary.json``, or a folder of reproductions
(:func:`what_reproduces`; the block named ``headline`` keeps the :data:`HEADLINE` claims).
A NAME starting ``why-`` holds the summary's "Why" table, ``dev-`` its dev curves,
``tune-`` its learning-rate grid, ``trend-`` its runs' training accuracy by quarter
(:func:`training_trend_table`), ``ceiling-`` the Cov@eps its task allows
(:func:`coverage_ceiling_reading`); ``timing-`` (SUMMARY a folder) the wall times shipped
with its reproductions (:func:`timing_table`); ``hours-`` (SUMMARY one reproduction's
folder) the hours its runs' training steps logged (:func:`logged_hours_table`); any other,
:func:`readme_block`."""


def update_readme(readme: Path) -> str:
    """The text of ``readme`` (the README or a page under docs/) with every generated
    block rewritten from the summary it names (paths relative to the file's folder), plus
    the wall time from the ``timing.json`` beside it when there is one; returns the new
    text (not written)."""
    root = readme.parent

    def fill(m: re.Match) -> str:
        path = root / m.group(3)
        if path.is_dir() and m.group(2).startswith("timing-"):
            return m.group(1) + timing_table(path) + m.group(5)
        if path.is_dir() and m.group(2).startswith("hours-"):
            return m.group(1) + logged_hours_table(path) + m.group(5)
        if path.is_dir():  # every reproduction under it: the "What reproduces" table
            only = HEADLINE if m.group(2) == "headline" else ""
            page = path.parent.parent / RESULTS_PAGE  # where the "Why" tables are
            why = "" if page.resolve() == readme.resolve() else os.path.relpath(page, root)
            table = what_reproduces(load_summaries(path), only, Path(why).as_posix() if why else "")
            return m.group(1) + table + m.group(5)
        summary = json.loads(path.read_text(encoding="utf-8"))
        if m.group(2).startswith("why-"):  # the mechanism's steps, measured
            names = {r: label(r) for r in why_runs(summary)}
            return m.group(1) + mechanism_table(summary, names) + m.group(5)
        if m.group(2).startswith("trend-"):  # training accuracy by quarter, from the logs
            table = training_trend_table(training_trends(path.parent, summary))
            return m.group(1) + table + m.group(5)
        if m.group(2).startswith("ceiling-"):
            return m.group(1) + coverage_ceiling_reading(summary) + m.group(5)
        if m.group(2).startswith("dev-"):
            return m.group(1) + dev_curve_table(summary) + m.group(5)
        if m.group(2).startswith("tune-"):
            return m.group(1) + tuning_table(summary) + m.group(5)
        text = readme_block(summary, short=m.group(2).endswith("-short"))
        timing = path.parent / "timing.json"
        if timing.exists():
            t = json.loads(timing.read_text(encoding="utf-8"))
            where = Path(os.path.relpath(timing, root)).as_posix()
            reused = sum(bool(r.get("reused")) for r in t["runs"])
            if reused:  # it ran in pieces: the file times the last one only
                text += (
                    f"\nWall time of the last of the invocations that ran this reproduction: "
                    f"{t['wall_s'] / 60:.1f} min, {t['jobs']} runs at a time; {reused} of its "
                    f"{len(t['runs'])} runs had finished in earlier ones (`{where}`).\n"
                )
            else:
                text += (
                    f"\nWall time of this reproduction: {t['wall_s'] / 60:.1f} min for "
                    f"{len(t['runs'])} runs, {t['jobs']} at a time (`{where}`).\n"
                )
        return m.group(1) + text + m.group(5)

    return BLOCK.sub(fill, readme.read_text(encoding="utf-8"))


def timing_table(folder: Path) -> str:
    """The wall times shipped with the reproductions under ``folder``, one row per
    ``<task>/timing.json`` (written by ``rlcd-lab reproduce``), by name: its runs, how many
    ran at a time, the wall time. Where some runs had finished in earlier invocations the
    file times the last one only, so the row gives instead the hours of training steps its
    runs logged (:func:`logged_hours`, tuning runs included) and says why."""
    rows = ["| reproduction | runs | at a time | wall time (`timing.json`) |", "|---|---|---|---|"]
    for path in sorted(folder.glob("*/timing.json")):
        t = json.loads(path.read_text(encoding="utf-8"))
        reused = sum(bool(r.get("reused")) for r in t["runs"])
        wall = f"{t['wall_s'] / 60:.1f} min"
        if reused:
            hours = sum(h for by_run in logged_hours(path.parent).values() for h in by_run.values())
            wall = (
                f"ran in pieces ({reused} of its runs had finished before the invocation "
                f"`timing.json` times): {hours:.1f} h of training steps in its runs' logs"
            )
        rows.append(f"| `{path.parent.name}` | {len(t['runs'])} | {t['jobs']} | {wall} |")
    return "\n".join(rows) + "\n"


def logged_hours(root: Path) -> dict[str, dict[str, float]]:
    """Hours of training steps the runs of the reproduction ``root`` (``OUT/<task>``)
    logged: ``{run name: {where: hours}}``, ``where`` the seed folder (``seed-<s>``) of a
    seed's run or ``tune`` for its tuning runs, summed over the learning-rate grid. Each
    run's hours are the ``time_step`` of its ``log.jsonl`` summed: the wall time of its
    steps (sampling, scoring, update) in its own process; loading, evaluations and
    checkpoints are not counted. Folders without a log (the base model's evaluation, a
    stated-confidence view) are left out."""
    out: dict[str, dict[str, float]] = {}
    for run in rundir.reproduction_folders(root):
        if not rundir.log_path(run).exists():
            continue
        where = rundir.TUNE if run.is_relative_to(root / rundir.TUNE) else run.parent.name
        hours = sum(r.get("time_step", 0.0) for r in rundir.read_log(run)) / 3600
        by_run = out.setdefault(run.name, {})
        by_run[where] = by_run.get(where, 0.0) + hours
    return out


def logged_hours_table(root: Path) -> str:
    """:func:`logged_hours` of the reproduction ``root`` as a Markdown table: one row per
    seed (by number), then the tuning runs and the total; one column per run (table
    order), then the row's total; hours to two decimals, a blank where a seed has no such
    run."""
    hours = logged_hours(root)
    runs = _ordered(hours)
    seeds = sorted({w for h in hours.values() for w in h if w != rundir.TUNE},
                   key=lambda w: int(w.removeprefix("seed-")))  # fmt: skip
    places = [*seeds, *([rundir.TUNE] if any(rundir.TUNE in h for h in hours.values()) else [])]
    names = {rundir.TUNE: "tuning (every value of the grid)"}

    def row(name: str, cells: list[float | None]) -> str:
        shown = ["" if c is None else f"{c:.2f}" for c in cells]
        total = sum(c for c in cells if c is not None)
        return f"| {name} | " + " | ".join([*shown, f"{total:.2f}"]) + " |"

    lines = [
        "| hours | " + " | ".join([*(f"`{r}`" for r in runs), "all"]) + " |",
        "|---|" + "---|" * (len(runs) + 1),
        *(row(names.get(w, w), [hours[r].get(w) for r in runs]) for w in places),
        row("total", [sum(hours[r].values()) for r in runs]),
    ]
    return "\n".join(lines) + "\n"


RESULTS_PAGE = "docs/results.md"
"""The page (relative to the repository) holding the "Why" tables, ``## Why: <task>``."""
GENERATED = ("README.md", RESULTS_PAGE, "docs/bench.md", "docs/performance.md")
"""The Markdown files (relative to the repository) that hold generated blocks."""


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m rlcd_lab.reports.report SUMMARY`` prints the README block of a summary.json;
    ``python -m rlcd_lab.reports.report --readme FILE...`` rewrites the generated blocks of each
    Markdown file in place (the README and docs/results.md: :data:`GENERATED`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--readme"]:
        for name in args[1:]:
            atomic_write_text(Path(name), update_readme(Path(name)))
        return
    (path,) = args
    with open(path, encoding="utf-8") as f:
        summary = json.load(f)
    sys.stdout.write(readme_block(summary))


if __name__ == "__main__":
    main()
