"""The paper's findings next to ours, as text generated from a reproduction's summary.

``findings_table(summary)`` turns the ``summary.json`` that ``rlcd-lab reproduce`` writes
into a markdown table: one row per claim of OpenJev-RLCD's Table 1 (two-stage RLCD vs
SFT+TS, GRPO+TS and RFT+KL+TS), the paired difference with its bootstrap 95% CI and
sign-flip p-value, and a plain verdict. ``runs_table(summary)`` lists every run's metrics.
The README's result blocks are this module's output, never typed by hand
(``python -m rlcd_lab.report SUMMARY`` prints them; a test compares).

Verdicts for a directional claim ("RLCD has lower AURC than GRPO"): *reproduces* when
the CI excludes 0 on the paper's side, *does not reproduce* when it excludes 0 on the
other side, *not measurable at this scale* when it contains 0. A claim of no difference
is *consistent* when the CI contains 0. Claims on the fitted temperature and on Cov@eps
compare per-run means (no CI: the summary has none for them); a tie (e.g. every run's T
at the fitting range's cap, every Cov@eps 0) is *not measurable at this scale*.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

RLCD = "reinforce"
LABELS = {
    "base": "base",
    "sft": "SFT+TS",
    "rft": "RFT+TS",
    "rft-kl": "RFT+KL+TS",
    "grpo": "GRPO+TS",
    "calibrate": "RLCD stage 1",
    "reinforce": "RLCD (two-stage)",
}


@dataclass(frozen=True)
class Claim:
    """One paired claim: ``RLCD - other`` on ``metric`` has sign ``direction`` (0: none)."""

    other: str
    metric: str
    direction: int
    paper: str


CLAIMS = (
    Claim("sft", "accuracy", +1, "92.2% vs 70.4%: RLCD higher"),
    Claim("grpo", "accuracy", 0, "92.2% vs 91.8%: no difference"),
    Claim("grpo", "aurc", -1, "0.034 vs 0.061: RLCD lower (p < 1e-3)"),
    Claim("rft-kl", "brier", -1, "-0.025: RLCD lower (p < 0.01)"),
    Claim("rft-kl", "aurc", -1, "-0.041: RLCD lower (p < 0.01)"),
)


def verdict(diff: Mapping[str, float], direction: int) -> str:
    """The verdict of a paired difference ``{"ci_low", "ci_high"}`` for a claim of sign
    ``direction`` (+1 higher, -1 lower, 0 no difference); see the module docstring."""
    lo, hi = diff["ci_low"], diff["ci_high"]
    if direction == 0:
        return "consistent (CI contains 0)" if lo <= 0 <= hi else "does not reproduce"
    if lo <= 0 <= hi:
        return "not measurable at this scale (CI contains 0)"
    return "reproduces" if (lo > 0) == (direction > 0) else "does not reproduce"


def _diff(d: Mapping[str, float]) -> str:
    return f"{d['mean_diff']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}], p = {d['p']:.2g}"


def _best(ours: float, others: Sequence[float], lower: bool, tol: float = 1e-9) -> bool | None:
    """Whether ``ours`` beats every value of ``others`` (None: it ties the best of them)."""
    best = min(others) if lower else max(others)
    if abs(ours - best) <= tol:
        return None
    return ours < best if lower else ours > best


def _order_verdict(best: bool | None, what: str) -> str:
    if best is None:
        return f"not measurable at this scale: RLCD ties for {what}"
    return f"reproduces: RLCD {what}" if best else f"does not reproduce: RLCD not {what}"


def _mean(summary: Mapping, run: str, key: str) -> float:
    return summary["runs"][run][key]["mean"]


def findings_table(summary: Mapping) -> str:
    """Markdown: each paper claim, ours with CI, and the verdict (claims whose runs are
    missing from ``summary`` are left out)."""
    rows = ["| claim (paper: Qwen3-1.7B) | paper | ours: RLCD - other [95% CI] | verdict |"]
    rows.append("|---|---|---|---|")
    for c in CLAIMS:
        diff = summary["paired"].get(f"{RLCD} - {c.other}", {}).get(c.metric)
        if diff is None:
            continue
        name = f"RLCD vs {LABELS[c.other]}: {c.metric}"
        rows.append(f"| {name} | {c.paper} | {_diff(diff)} | {verdict(diff, c.direction)} |")
    others = [r for r in ("grpo", "rft-kl") if r in summary["runs"]]
    if RLCD in summary["runs"] and others:
        t = {r: _mean(summary, r, "T") for r in (RLCD, *others)}
        names = " / ".join(LABELS[r] for r in t)
        dist = {r: abs(math.log(t[r])) for r in t}  # how far from T = 1
        best = _best(dist[RLCD], [dist[r] for r in others], lower=True)
        rows.append(
            f"| fitted T, {names} | 1.4 / about 7 / about 7 | "
            + " / ".join(f"{t[r]:.2f}" for r in t)
            + f" (no CI) | {_order_verdict(best, 'closest to 1')} |"
        )
        cov = {r: _mean(summary, r, "cov_at_eps") for r in t}
        best = _best(cov[RLCD], [cov[r] for r in others], lower=False)
        rows.append(
            f"| Cov@{summary['eps']:.0%}, {names} | 81% / 19% / 12% | "
            + " / ".join(f"{cov[r]:.0%}" for r in t)
            + f" (no CI) | {_order_verdict(best, 'highest')} |"
        )
    return "\n".join(rows) + "\n"


def runs_table(summary: Mapping, order: Sequence[str] = tuple(LABELS)) -> str:
    """Markdown: every run's test metrics after temperature scaling (mean over seeds)."""
    cols = ("accuracy", "brier", "ece", "aurc", "cov_at_eps", "T", "length")
    rows = ["| run | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for run in [r for r in order if r in summary["runs"]]:
        cells = [f"{_mean(summary, run, k):.3f}" for k in cols]
        rows.append(f"| {LABELS[run]} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m rlcd_lab.report SUMMARY``: print both tables for a summary.json."""
    (path,) = sys.argv[1:] if argv is None else argv
    with open(path, encoding="utf-8") as f:
        summary = json.load(f)
    sys.stdout.write(runs_table(summary) + "\n" + findings_table(summary))


if __name__ == "__main__":
    main()
