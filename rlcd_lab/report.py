"""The paper's tables and figures, generated from a reproduction's summary and runs.

``write_report(root, seeds, eps, title)`` reads the eval dumps under ``root`` through
:mod:`rlcd_lab.results` and writes ``summary.json``, ``report.md``, a self-contained
``report.html`` and ``figures/*.html``:

* Table 1: every run (mean +- s.d. over seeds, after temperature scaling, with its
  training budget in steps) and the paired tests of two-stage RLCD against each run;
* Table 2: the stage-2 forks against their stage-1 checkpoint;
* Table 3 (aleatoric tasks): JSD to ``q`` in bits, single query and the mixture;
* Figure 1: rationale length over training (System-One collapse) and the RMS ratio of
  the score-function to the pathwise gradient over training (gradient dilution);
* Figure 2: risk-coverage curves; Figure 3: Brier and AURC differences with 95% CIs.

``findings_table(summary)`` sets each claim of the paper beside ours (difference, 95% CI,
p) with a plain verdict; ``runs_table(summary)`` lists the runs. The README's result
blocks are these functions' output for the shipped summaries, never typed by hand:
``python -m rlcd_lab.report SUMMARY`` prints them and a test compares.

Verdicts for a directional claim ("RLCD has lower AURC than GRPO"): *reproduces* when
the CI excludes 0 on the paper's side, *does not reproduce* when it excludes 0 on the
other side, *not measurable at this scale* when it contains 0. A claim of no difference
is *consistent* when the CI contains 0. Claims on the fitted temperature compare per-run
means over seeds (T has no per-item values to resample); a tie is *not measurable*.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .io import atomic_write_text, read_jsonl
from .results import FORKS, MATCHED, METRICS, RLCD, STAGE1, RunResult, summarize_runs

LABELS = {
    "base": "base",
    "sft": "SFT+TS",
    "rft": "RFT+TS",
    "rft-kl": "RFT+KL+TS",
    "grpo": "GRPO+TS",
    "endtoend": "per-rationale (end to end, KL)",
    "mixture": "mixture (lam = 1)",
    "calibrate": "RLCD stage 1",
    "reinforce": "RLCD (two-stage)",
    "readout-only": "fork: readout-only",
    "anchor-only": "fork: anchor-only",
    "grpo-cont": "fork: GRPO continuation",
    "reinforce-ace": "fork: RLCD-RL with ACE",
    "endtoend-c": "end to end, weight",
}
ORDER = tuple(LABELS)


def label(run: str) -> str:
    """Display name of a run (``grpo-matched`` -> ``GRPO+TS (matched budget)``)."""
    if run.endswith(MATCHED):
        return f"{label(run[: -len(MATCHED)])} (matched budget)"
    if run.startswith("endtoend-c"):
        return f"{LABELS['endtoend-c']} {run[len('endtoend-c') :]}"
    return LABELS.get(run, run)


def _ordered(runs: Mapping) -> list[str]:
    key = {n: i for i, n in enumerate(ORDER)}
    return sorted(runs, key=lambda r: (key.get(r.removesuffix(MATCHED), len(key)), r))


# ---------------------------------------------------------------------------------------
# Claims of the paper and verdicts
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """One claim: the paired difference ``pair`` (a key of ``summary["paired"]``, e.g.
    ``"reinforce - grpo"``, or ``"fork:<name>"`` for a fork against its stage-1
    checkpoint) on ``metric`` has sign ``direction`` (+1, -1, 0: no difference).
    ``pair`` names the 200-step baselines; matched-budget runs are used when shipped.
    ``aleatoric``: a Table 3 claim (tasks with outcome distributions ``q``)."""

    pair: str
    metric: str
    direction: int
    paper: str
    aleatoric: bool = False


CLAIMS = (
    Claim("reinforce - sft", "accuracy", +1, "92.2% vs 70.4%: RLCD higher"),
    Claim("reinforce - grpo", "accuracy", 0, "92.2% vs 91.8%: no difference"),
    Claim("reinforce - grpo", "aurc", -1, "0.034 vs 0.061: RLCD lower (p < 1e-3)"),
    Claim("reinforce - grpo", "cov_at_eps", +1, "Cov@5% 81% vs 19%: RLCD higher"),
    Claim("reinforce - rft-kl", "brier", -1, "-0.025: RLCD lower (p < 0.01)"),
    Claim("reinforce - rft-kl", "aurc", -1, "-0.041: RLCD lower (p < 0.01)"),
    Claim("reinforce - readout-only", "accuracy", +1, "+3.5 points: RLCD-RL higher"),
    Claim("reinforce - readout-only", "brier", -1, "-0.057: RLCD-RL lower"),
    Claim("fork:readout-only", "brier", +1, "readout-only degrades its checkpoint"),
    Claim("reinforce - anchor-only", "accuracy", +1, "+4.4 points: RLCD-RL higher"),
    Claim("reinforce - grpo-cont", "accuracy", 0, "as good on verify"),
    Claim("mixture - endtoend", "jsd_table3", +1, "0.121 vs 0.075 bits: mixture higher", True),
    Claim("sft - endtoend", "jsd_table3", 0, "0.074 vs 0.075 bits: no difference", True),
)
"""OpenJev-RLCD's claims: Tables 1-2 (GSM8K-Verify; tiny analogue ``verify``) and
Table 3 (ChaosNLI; tiny analogue ``aleatoric``), on Qwen3-1.7B."""


def verdict(diff: Mapping[str, float], direction: int) -> str:
    """The verdict of a paired difference ``{"ci_low", "ci_high"}`` for a claim of sign
    ``direction`` (+1 higher, -1 lower, 0 no difference); see the module docstring."""
    lo, hi = diff["ci_low"], diff["ci_high"]
    if direction == 0:
        return "consistent (CI contains 0)" if lo <= 0 <= hi else "does not reproduce"
    if lo <= 0 <= hi:
        return "not measurable at this scale (CI contains 0)"
    return "reproduces" if (lo > 0) == (direction > 0) else "does not reproduce"


def _p(p: float) -> str:
    return f"{p:.2g}"


def fmt_diff(d: Mapping[str, float]) -> str:
    """``+0.012 [-0.003, +0.020], p = 0.04``."""
    return f"{d['diff']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}], p = {_p(d['p'])}"


def fmt_cell(cell: Mapping, signed: bool = False) -> str:
    """``mean ± s.d.`` over seeds (the mean alone for one seed)."""
    sign = "+" if signed else ""
    if cell.get("sd") is None or (isinstance(cell["sd"], float) and math.isnan(cell["sd"])):
        return f"{cell['mean']:{sign}.3f}"
    return f"{cell['mean']:{sign}.3f} ± {cell['sd']:.3f}"


def _resolve(summary: Mapping, claim: Claim) -> tuple[str, Mapping | None]:
    """The comparison a claim is checked on (the matched-budget baseline when shipped)."""
    if claim.pair.startswith("fork:"):
        fork = claim.pair.removeprefix("fork:")
        return f"{label(fork)} - its stage-1 checkpoint", summary["forks"].get(fork)
    a, b = (r + MATCHED if r + MATCHED in summary["runs"] else r for r in claim.pair.split(" - "))
    name = "RLCD" if a == RLCD else label(a)
    return f"{name} vs {label(b)}", summary["paired"].get(f"{a} - {b}")


def findings_table(summary: Mapping) -> str:
    """Markdown: each paper claim, ours (RLCD - other, 95% CI, two-sided p) and the
    verdict (claims whose runs or metrics are missing from ``summary`` are left out),
    then the fitted temperatures (mean over seeds)."""
    rows = ["| claim (paper: Qwen3-1.7B) | paper | ours: difference [95% CI], p | verdict |"]
    rows.append("|---|---|---|---|")
    aleatoric = any("jsd" in e for e in summary["runs"].values())
    tasks = {c.get("task") for c in summary.get("configs", {}).values()}
    # Tables 1-2's claims are GSM8K-Verify's: on another task, say where the paper's number is from
    where = "" if aleatoric or tasks <= {"verify"} else "GSM8K-Verify: "
    for c in (c for c in CLAIMS if c.aleatoric == aleatoric):
        name, tests = _resolve(summary, c)
        diff = (tests or {}).get(c.metric)
        if diff is None:
            continue
        metric = METRICS[c.metric][0] if c.metric in METRICS else "JSD"
        rows.append(
            f"| {name}: {metric} | {where}{c.paper} | {fmt_diff(diff)} | "
            f"{verdict(diff, c.direction)} |"
        )
    others = (
        []
        if aleatoric
        else [
            o + MATCHED if o + MATCHED in summary["runs"] else o
            for o in ("grpo", "rft-kl")
            if o in summary["runs"] or o + MATCHED in summary["runs"]
        ]
    )
    if RLCD in summary["runs"] and others:
        t = {r: summary["runs"][r]["T"]["mean"] for r in (RLCD, *others)}
        dist = {r: abs(math.log(t[r])) for r in t}  # how far from T = 1
        best = min(dist[r] for r in others)
        if abs(dist[RLCD] - best) <= 1e-9:
            verdict_t = "not measurable at this scale: RLCD ties for closest to 1"
        elif dist[RLCD] < best:
            verdict_t = "reproduces: RLCD closest to 1"
        else:
            verdict_t = "does not reproduce: RLCD not closest to 1"
        names = " / ".join(label(r) for r in t)
        values = " / ".join(fmt_cell(summary["runs"][r]["T"]) for r in t)
        paper_t = f"{where}1.4 / about 7 / about 7"
        rows.append(f"| fitted T, {names} | {paper_t} | {values} | {verdict_t} |")
    return "\n".join(rows) + "\n"


def runs_table(
    summary: Mapping,
    keys: Sequence[str] = ("accuracy", "brier", "aurc", "cov_at_eps", "T", "length"),
) -> str:
    """Markdown: every run's budget (steps) and test metrics after temperature scaling,
    mean ± s.d. over seeds."""
    rows = ["| run | steps | " + " | ".join(METRICS[k][0] for k in keys) + " |"]
    rows.append("|---" * (len(keys) + 2) + "|")
    for run in _ordered(summary["runs"]):
        entry = summary["runs"][run]
        cells = [fmt_cell(entry[k]) for k in keys]
        rows.append(f"| {label(run)} | {entry.get('steps', 0)} | " + " | ".join(cells) + " |")
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


def sweep_table(summary: Mapping, prefix: str = "endtoend-c") -> str:
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


def report_markdown(summary: Mapping, title: str) -> str:
    """``report.md``: the paper's tables for this reproduction."""
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
            "\n## The paper's claims\n",
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
    if any(r.startswith("endtoend-c") for r in summary["runs"]):
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
    return "\n".join(md)


# ---------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------


def _mean_log(logs: Sequence[Sequence[dict]], column: str, offset: int = 0) -> list[dict]:
    """``[{"step", column}]``: ``column`` of each run's log rows averaged over runs at
    every step that all of them logged; ``offset`` is added to the steps (a run
    continued from stage 1 starts where stage 1 ended)."""
    logs = [{r["step"] + offset: r.get(column) for r in rows} for rows in logs]
    steps = sorted(
        set.intersection(*(set(k for k, v in lg.items() if v is not None) for lg in logs))
    )
    return [{"step": s, column: float(np.mean([lg[s] for lg in logs]))} for s in steps]


def _grad_ratio(logs: Sequence[Sequence[dict]], offset: int = 0) -> list[dict]:
    """Ratio of the score-function to the pathwise gradient norm over training (each
    averaged over runs first)."""
    sf = _mean_log(logs, "grad_score_function", offset)
    pw = {r["step"]: r["grad_pathwise"] for r in _mean_log(logs, "grad_pathwise", offset)}
    return [
        {"step": r["step"], "sf / pathwise": r["grad_score_function"] / pw[r["step"]]}
        for r in sf
        if pw.get(r["step"])
    ]


def report_figures(summary: Mapping, loaded: Mapping[str, Sequence[RunResult]]) -> dict:
    """``{name: plotly figure}``: Figure 1 (rationale length and gradient RMS ratio over
    training, mean over seeds), Figure 2 (risk-coverage, seeds pooled), Figure 3 (Brier
    and AURC differences, RLCD minus each run, 95% CIs)."""
    from . import plots

    trained = {  # each run's log rows, read once
        n: [read_jsonl(r.path / "log.jsonl") for r in g]
        for n, g in loaded.items()
        if all((r.path / "log.jsonl").exists() for r in g)
    }
    figs = {}
    if trained:
        stage1 = summary["runs"].get(STAGE1, {}).get("steps", 0)
        start = {n: stage1 if n in FORKS else 0 for n in trained}  # continued from stage 1
        logs = {label(n): _mean_log(p, "rationale_length", start[n]) for n, p in trained.items()}
        figs["fig1_rationale_length"] = plots.compare_curves(
            logs,
            "rationale_length",
            title="Figure 1: rationale length over training (mean over seeds)",
        )
        ratios = {label(n): _grad_ratio(p, start[n]) for n, p in trained.items()}
        ratios = {n: r for n, r in ratios.items() if r}
        if ratios:
            figs["fig1_grad_ratio"] = plots.compare_curves(
                ratios,
                "sf / pathwise",
                title="Score-function / pathwise gradient norm over training",
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
        diffs = {
            label(p.split(" - ")[1]): summary["paired"][p][metric] for p in _rlcd_pairs(summary)
        }
        if diffs:
            figs[f"fig3_{metric}"] = plots.interval_figure(
                diffs,
                f"Figure 3: RLCD minus each run, {METRICS[metric][0]}",
                f"Δ {METRICS[metric][0]}",
            )
    return figs


def write_pngs(figs: Mapping, folder: Path) -> list[Path]:
    """Each figure as ``folder/<name>.png`` (1000 x 560) when plotly can export images
    (the ``kaleido`` package and a Chrome/Chromium, as in the dev extra); else nothing.
    Returns the files written."""
    import importlib.util

    import plotly.io as pio

    if not figs or importlib.util.find_spec("kaleido") is None:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{name}.png" for name in figs]
    pio.write_images(list(figs.values()), paths, width=1000, height=560)
    return paths


def write_report(root: Path, seeds: Sequence[int], eps: float, title: str) -> dict:
    """``summary.json``, ``report.md``, ``report.html`` (figures inlined) and
    ``figures/<name>.png`` (:func:`write_pngs`) in ``root`` from the runs under it;
    returns the summary."""
    from markdown_it import MarkdownIt

    summary, loaded = summarize_runs(root, seeds, eps)
    summary["configs"] = {
        f"seed-{s}/{p.parent.name}": json.loads(p.read_text())
        for s in seeds
        for p in sorted((root / f"seed-{s}").glob("*/config.json"))
    }
    atomic_write_text(root / "summary.json", json.dumps(summary, indent=1, sort_keys=True))
    md = report_markdown(summary, title)
    atomic_write_text(root / "report.md", md)
    figs = report_figures(summary, loaded)
    write_pngs(figs, root / "figures")
    body = MarkdownIt("commonmark").enable("table").render(md)
    html_figs = [
        f.to_html(full_html=False, include_plotlyjs="inline" if i == 0 else False)
        for i, f in enumerate(figs.values())
    ]
    style = (
        "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;font-size:14px}td,th{border:1px solid #ccc;"
        "padding:3px 8px;text-align:right}td:first-child{text-align:left}"
    )
    html = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
        f"<style>{style}</style></head><body>{body}<h2>Figures</h2>{''.join(html_figs)}"
        "</body></html>"
    )
    atomic_write_text(root / "report.html", html)
    return summary


def readme_block(summary: Mapping) -> str:
    """What the README shows for a shipped summary: the runs (Table 3 on aleatoric
    tasks), then the paper's claims."""
    aleatoric = any("jsd" in e for e in summary["runs"].values())
    return (
        (jsd_table(summary) if aleatoric else runs_table(summary)) + "\n" + findings_table(summary)
    )


BLOCK = re.compile(
    r"(<!-- (\S+):begin \(generated from (\S+) by [^)]*\) -->\n)(.*?)(<!-- \2:end -->)", re.S
)
"""A generated README block: ``<!-- NAME:begin (generated from SUMMARY by ...) -->``."""


def update_readme(readme: Path) -> str:
    """The text of ``readme`` with every generated block rewritten from the summary it
    names (paths relative to the README's folder), plus the wall time from the
    ``timing.json`` beside it when there is one; returns the new text (not written)."""
    root = readme.parent

    def fill(m: re.Match) -> str:
        path = root / m.group(3)
        text = readme_block(json.loads(path.read_text(encoding="utf-8")))
        timing = path.parent / "timing.json"
        if timing.exists():
            t = json.loads(timing.read_text(encoding="utf-8"))
            text += (
                f"\nWall time of this reproduction: {t['wall_s'] / 60:.1f} min for "
                f"{len(t['runs'])} runs, {t['jobs']} at a time (`{timing.relative_to(root)}`).\n"
            )
        return m.group(1) + text + m.group(5)

    return BLOCK.sub(fill, readme.read_text(encoding="utf-8"))


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m rlcd_lab.report SUMMARY`` prints the README block of a summary.json;
    ``python -m rlcd_lab.report --readme README.md`` rewrites the README's generated
    blocks in place."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--readme"]:
        readme = Path(args[1])
        atomic_write_text(readme, update_readme(readme))
        return
    (path,) = args
    with open(path, encoding="utf-8") as f:
        summary = json.load(f)
    sys.stdout.write(readme_block(summary))


if __name__ == "__main__":
    main()
