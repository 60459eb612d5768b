"""The difficulty map (rlcd_lab.reports.difficulty): levels read from reproduction summaries,
ordered by the base model's accuracy, judged by the README's verdict rules against the
paper's GSM8K-Verify effects (AURC -0.027, Cov@5% +0.62), written and rendered."""

import json

import pytest

from rlcd_lab.math import paper
from rlcd_lab.reports.difficulty import PAIR, difficulty_map, main
from rlcd_lab.reports.report import readme_block

PAPER_PAIR = "reinforce - grpo"


def _summary(base_acc: float, aurc: tuple, cov: tuple, eps: float = 0.05) -> dict:
    def diff(d, lo, hi, p):
        return {"diff": d, "ci_low": lo, "ci_high": hi, "p": p}

    acc = {"mean": base_acc, "sd": 0.01}
    return {
        "seeds": [17, 23, 29],
        "eps": eps,
        "runs": {
            "base": {"accuracy": acc, "items": 400},
            "reinforce": {"accuracy": {"mean": 0.9, "sd": 0.02}, "items": 400},
            "grpo-matched": {"accuracy": {"mean": 0.88, "sd": 0.03}, "items": 400},
        },
        "paired": {PAIR: {"aurc": diff(*aurc), "cov_at_eps": diff(*cov)}},
    }


LEVELS = {
    # slip: (base accuracy, AURC diff/CI/p, Cov diff/CI/p)
    0.6: _summary(0.62, (-0.03, -0.05, -0.01, 0.004), (0.70, 0.50, 0.90, 0.001)),
    0.05: _summary(0.93, (0.01, -0.01, 0.03, 0.40), (0.01, -0.05, 0.08, 0.70)),
    0.25: _summary(0.80, (0.02, 0.01, 0.03, 0.01), (0.10, 0.05, 0.20, 0.02)),
}
EXPECTED = {  # derived from the rules in report.verdict and the paper's effects
    0.05: ("smaller than the paper's: not significant, CI excludes its effect",) * 2,
    0.25: (
        "opposite direction",  # AURC significantly higher for RLCD
        "smaller than the paper's: same direction, CI excludes its effect",  # +0.10 < 0.62
    ),
    0.6: ("reproduces", "reproduces"),  # both CIs hold the paper's effect
}


def test_levels_are_ordered_by_base_accuracy_and_judged_against_the_paper():
    effects = {c.metric: c.effect for c in paper.CLAIMS["gsm8k-verify"] if c.pair == PAPER_PAIR}
    assert (effects["aurc"], effects["cov_at_eps"]) == (-0.027, 0.62)  # the map's yardstick
    dmap = difficulty_map(LEVELS)
    assert [r["slip"] for r in dmap["levels"]] == [0.05, 0.25, 0.6]  # easiest first
    for row in dmap["levels"]:
        assert (row["aurc"]["verdict"], row["cov_at_eps"]["verdict"]) == EXPECTED[row["slip"]]
        assert row["accuracy"]["base"] == LEVELS[row["slip"]]["runs"]["base"]["accuracy"]
    assert dmap["paper"]["aurc"]["effect"] == -0.027


def test_levels_must_share_eps():
    with pytest.raises(ValueError, match="different eps"):
        difficulty_map({0.05: LEVELS[0.05], 0.6: _summary(0.6, (0, -1, 1, 1), (0, -1, 1, 1), 0.2)})


def test_written_map_renders_as_the_readme_table(tmp_path):
    folders = {}
    for slip, summary in LEVELS.items():
        folders[slip] = tmp_path / f"slip-{slip:g}"
        folders[slip].mkdir()
        (folders[slip] / "summary.json").write_text(json.dumps(summary))
    main([str(tmp_path / "map"), *(f"{s:g}={p}" for s, p in folders.items())])
    dmap = json.loads((tmp_path / "map" / "map.json").read_text())
    table = readme_block(dmap)
    rows = [line for line in table.splitlines() if line.startswith("| 0")]
    assert [r.split(" | ")[0] for r in rows] == ["| 0.05", "| 0.25", "| 0.6"]
    assert "| 0.620 ± 0.010 |" in rows[2] and "opposite direction" in rows[1]
    assert "Cov@5%" in table and "-0.027" in table
    assert (tmp_path / "map" / "report.md").read_text().endswith(table)
    with pytest.raises(SystemExit, match="SLIP=FOLDER"):
        main([str(tmp_path / "map"), "0.05"])
