"""The paper-vs-ours tables: verdicts from CIs, and README blocks that are the module's
output for the shipped summaries (never hand-copied numbers)."""

from __future__ import annotations

import json
import re

import pytest

from rlcd_lab.assets import ASSETS
from rlcd_lab.report import findings_table, runs_table, verdict

README = ASSETS.parent / "README.md"


@pytest.mark.parametrize(
    ("lo", "hi", "direction", "expected"),
    [
        (0.01, 0.2, +1, "reproduces"),
        (-0.2, -0.01, -1, "reproduces"),
        (0.01, 0.2, -1, "does not reproduce"),
        (-0.1, 0.1, -1, "not measurable at this scale (CI contains 0)"),
        (-0.1, 0.1, 0, "consistent (CI contains 0)"),
        (0.05, 0.1, 0, "does not reproduce"),
    ],
)
def test_verdicts(lo, hi, direction, expected):
    assert verdict({"ci_low": lo, "ci_high": hi}, direction) == expected


def summary_of(acc, T, cov) -> dict:
    runs = {
        name: {"accuracy": {"mean": a}, "T": {"mean": t}, "cov_at_eps": {"mean": c}}
        for name, a, t, c in zip(("reinforce", "grpo", "rft-kl"), acc, T, cov, strict=True)
    }
    d = {"mean_diff": -0.02, "ci_low": -0.05, "ci_high": -0.001, "p": 0.03}
    return {"eps": 0.05, "runs": runs, "paired": {"reinforce - grpo": {"aurc": d}}}


def test_findings_table_rows_by_hand():
    table = findings_table(summary_of((0.9, 0.9, 0.8), (1.3, 6.0, 0.1), (0.5, 0.2, 0.1)))
    rows = table.splitlines()
    assert rows[2] == (
        "| RLCD vs GRPO+TS: aurc | 0.034 vs 0.061: RLCD lower (p < 1e-3) | "
        "-0.020 [-0.050, -0.001], p = 0.03 | reproduces |"
    )
    # |log 1.3| = 0.26 is below |log 6| = 1.79 and |log 0.1| = 2.30: closest to 1
    assert rows[3].endswith("| 1.30 / 6.00 / 0.10 (no CI) | reproduces: RLCD closest to 1 |")
    assert rows[4].endswith("| 50% / 20% / 10% (no CI) | reproduces: RLCD highest |")
    worse = findings_table(summary_of((0.9, 0.9, 0.8), (3.0, 2.0, 4.0), (0.1, 0.2, 0.1)))
    assert "does not reproduce: RLCD not closest to 1" in worse
    assert "does not reproduce: RLCD not highest" in worse
    capped = findings_table(summary_of((0.2, 0.2, 0.2), (50.0, 50.0, 37.0), (0.0, 0.0, 0.0)))
    assert "| 50.00 / 50.00 / 37.00 (no CI) | does not reproduce: RLCD not closest to 1 |" in (
        capped
    )  # 50 is farther from 1 than 37
    assert "| 0% / 0% / 0% (no CI) | not measurable at this scale: RLCD ties for highest |" in (
        capped
    )
    tied = findings_table(summary_of((0.2, 0.2, 0.2), (50.0, 50.0, 50.0), (0.1, 0.0, 0.0)))
    assert "not measurable at this scale: RLCD ties for closest to 1" in tied


def readme_block(name: str) -> str:
    text = README.read_text(encoding="utf-8")
    m = re.search(rf"<!-- {name}:begin.*?-->\n(.*?)<!-- {name}:end -->", text, re.S)
    assert m, f"README has no {name} block"
    return m.group(1)


def test_readme_real_model_block_is_generated_from_the_shipped_summary():
    summary = json.loads((ASSETS / "results" / "mmlu-elementary_mathematics" / "summary.json")
                         .read_text())  # fmt: skip
    assert readme_block("real-model") == runs_table(summary) + "\n" + findings_table(summary)
