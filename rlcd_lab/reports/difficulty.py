"""A map of when RLCD helps: two-stage RLCD against GRPO at matched budget, in the tiny
``verify`` world at several difficulty levels (:func:`difficulty_map`, one reproduction
per level).

``python -m rlcd_lab.reports.difficulty OUT SLIP=REPRODUCTION ...`` writes ``OUT/map.json``,
``OUT/report.md`` and ``OUT/figures/difficulty.png`` (with kaleido);
``python -m rlcd_lab.reports.report --readme docs/results.md`` renders ``map.json`` as
docs/results.md's table.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from rlcd_lab.drawing.pages import write_pngs
from rlcd_lab.files.io import atomic_write_text
from rlcd_lab.files.rundir import SUMMARY
from rlcd_lab.math import paper
from rlcd_lab.math.verdicts import fmt_diff, verdict
from rlcd_lab.reports.results import summary_json

RLCD_RUN, GRPO_RUN = "reinforce", "grpo-matched"
PAIR = f"{RLCD_RUN} - {GRPO_RUN}"
METRICS = ("aurc", "cov_at_eps")
"""Selective prediction, the paper's headline: AURC (lower is better) and Cov@eps."""


def _claim(metric: str) -> paper.Claim:
    """The paper's GSM8K-Verify claim "RLCD vs GRPO+TS" on ``metric``."""
    (claim,) = (
        c
        for c in paper.CLAIMS["gsm8k-verify"]
        if c.pair == "reinforce - grpo" and c.metric == metric
    )
    return claim


def level_row(slip: float, summary: Mapping) -> dict:
    """One level of the map from its reproduction's ``summary``: the base model's
    accuracy (mean and s.d. over seeds), RLCD's and GRPO's, and for each of
    :data:`METRICS` the paired difference RLCD minus GRPO with its verdict."""
    runs, pair = summary["runs"], summary["paired"][PAIR]
    row = {
        "slip": slip,
        "seeds": summary["seeds"],
        "items": runs[RLCD_RUN]["items"],
        "accuracy": {r: runs[r]["accuracy"] for r in ("base", RLCD_RUN, GRPO_RUN)},
    }
    for metric in METRICS:
        claim = _claim(metric)
        row[metric] = {
            **pair[metric],
            "verdict": verdict(pair[metric], claim.direction, claim.effect),
        }
    return row


def difficulty_map(levels: Mapping[float, Mapping]) -> dict:
    """``{"kind": "difficulty", "eps", "paper", "levels": [row, ...]}`` from ``{slip:
    summary}``, rows from the easiest level (highest base accuracy) to the hardest.

    A level is the verify teacher's carry-drop rate ``slip`` (``rlcd-lab pretrain --task
    verify --slip S``): the items and splits are the same at every level, only the base
    model's reasoning differs, so its accuracy after one rationale falls as ``slip`` grows.
    Each level is one reproduction (``rlcd-lab reproduce --task verify --init BASE --runs
    base calibrate reinforce grpo-matched``); its ``summary.json`` holds the paired
    differences two-stage RLCD minus GRPO+TS (matched budget), after temperature scaling,
    with the same 95% CIs and sign-flip p-values as docs/results.md's claims
    (``rlcd_lab.reports.results``), and they are judged by the same verdict rules
    (``rlcd_lab.math.verdicts``) against the paper's GSM8K-Verify effect
    (``rlcd_lab.math.paper``, section 5.1).
    """
    eps = {s["eps"] for s in levels.values()}
    if len(eps) != 1:
        raise ValueError(f"the levels' reproductions use different eps: {sorted(eps)}")
    rows = [level_row(slip, s) for slip, s in levels.items()]
    rows.sort(key=lambda r: -r["accuracy"]["base"]["mean"])
    claims = {m: _claim(m) for m in METRICS}
    return {
        "kind": "difficulty",
        "eps": eps.pop(),
        "paper": {
            m: {"effect": c.effect, "paper": c.paper, "section": c.section}
            for m, c in claims.items()
        },
        "levels": rows,
    }


def _acc(cell: Mapping) -> str:
    return f"{cell['mean']:.3f} ± {cell['sd']:.3f}"


def difficulty_table(dmap: Mapping) -> str:
    """The map as a markdown table: one row per level."""
    cov = f"Cov@{dmap['eps']:.0%}"
    head = (
        f"| slip | base acc | RLCD acc | GRPO acc | RLCD - GRPO: AURC | verdict | "
        f"RLCD - GRPO: {cov} | verdict |\n|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in dmap["levels"]:
        acc = r["accuracy"]
        lines.append(
            f"| {r['slip']:g} | {_acc(acc['base'])} | {_acc(acc[RLCD_RUN])} | "
            f"{_acc(acc[GRPO_RUN])} | {fmt_diff(r['aurc'])} | {r['aurc']['verdict']} | "
            f"{fmt_diff(r['cov_at_eps'])} | {r['cov_at_eps']['verdict']} |"
        )
    names = {"aurc": "AURC", "cov_at_eps": cov}
    paper_note = "; ".join(
        f"{names[m]} {p['effect']:+g} ({p['paper']}, §{p['section']})"
        for m, p in dmap["paper"].items()
    )
    return head + "\n".join(lines) + f"\n\nThe paper's effects on GSM8K-Verify: {paper_note}.\n"


def difficulty_figure(dmap: Mapping):
    """Two panels against the base model's accuracy: RLCD minus GRPO in AURC and in
    Cov@eps, 95% CIs as error bars, the paper's effect dashed, zero dotted."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    names = {
        "aurc": "AURC (negative favours RLCD)",
        "cov_at_eps": f"Cov@{dmap['eps']:.0%} (positive favours RLCD)",
    }
    fig = make_subplots(rows=1, cols=2, subplot_titles=[names[m] for m in METRICS])
    x = [r["accuracy"]["base"]["mean"] for r in dmap["levels"]]
    for col, metric in enumerate(METRICS, start=1):
        d = [r[metric] for r in dmap["levels"]]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[c["diff"] for c in d],
                mode="markers+lines",
                text=[f"slip {r['slip']:g}" for r in dmap["levels"]],
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=[c["ci_high"] - c["diff"] for c in d],
                    arrayminus=[c["diff"] - c["ci_low"] for c in d],
                ),
                name=metric,
                showlegend=False,
            ),
            row=1,
            col=col,
        )
        fig.add_hline(y=0, line_dash="dot", line_color="grey", row=1, col=col)
        fig.add_hline(
            y=dmap["paper"][metric]["effect"],
            line_dash="dash",
            line_color="red",
            annotation_text="the paper's effect",
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text="base model accuracy (one rationale)", row=1, col=col)
    fig.update_layout(
        title="When RLCD helps: two-stage RLCD minus GRPO (matched budget), tiny verify"
    )
    return fig


def write_difficulty_map(out: Path, levels: Mapping[float, Path]) -> dict:
    """Write ``out/map.json``, ``out/report.md`` and (with kaleido)
    ``out/figures/difficulty.png`` from ``{slip: reproduction folder holding
    summary.json}``; returns the map."""
    out = Path(out)
    summaries = {
        s: json.loads((Path(p) / SUMMARY).read_text(encoding="utf-8")) for s, p in levels.items()
    }
    dmap = difficulty_map(summaries)
    dmap["sources"] = {f"{s:g}": str(p) for s, p in levels.items()}
    atomic_write_text(out / "map.json", summary_json(dmap))
    title = "# When RLCD helps: a difficulty map of tiny verify\n\n"
    atomic_write_text(out / "report.md", title + difficulty_table(dmap))
    write_pngs({"difficulty": difficulty_figure(dmap)}, out / "figures")
    return dmap


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m rlcd_lab.reports.difficulty OUT SLIP=FOLDER [SLIP=FOLDER ...]``."""
    out, *pairs = list(sys.argv[1:] if argv is None else argv)
    levels = {}
    for pair in pairs:
        slip, sep, folder = pair.partition("=")
        if not sep:
            raise SystemExit(f"expected SLIP=FOLDER, got {pair!r}")
        levels[float(slip)] = Path(folder)
    write_difficulty_map(Path(out), levels)


if __name__ == "__main__":
    main()
