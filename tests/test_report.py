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


def test_shipped_real_model_summary_recomputes_from_its_dumps():
    """Every run's T and accuracy in the shipped summary follow from its eval dumps."""
    from rlcd_lab.evaluate import summarize
    from rlcd_lab.io import read_jsonl

    root = ASSETS / "results" / "mmlu-elementary_mathematics"
    summary = json.loads((root / "summary.json").read_text())
    assert set(summary["runs"]) == {"base", "sft", "rft-kl", "grpo", "calibrate", "reinforce"}
    for run, entry in summary["runs"].items():
        ev = root / "seed-17" / run / "eval"
        row = summarize(read_jsonl(ev / "test.jsonl"), dev_rows=read_jsonl(ev / "dev.jsonl"))
        assert row["T"] == pytest.approx(entry["T"]["mean"], rel=1e-9)
        assert row["ts_accuracy"] == pytest.approx(entry["accuracy"]["mean"], abs=1e-12)
        assert row["n"] == 100


def test_shipped_adapter_loads_on_the_smollm2_base(smollm2_dir):
    """A shipped adapter (no tokenizer files, base path of the machine that trained it)
    loads on the offline SmolLM2 and changes its output."""
    import torch

    from rlcd_lab.models import load_checkpoint

    final = ASSETS / "results" / "mmlu-elementary_mathematics" / "seed-17" / "calibrate" / "final"
    assert not (final / "tokenizer.json").exists()
    model, tok, meta = load_checkpoint(final)
    base, _, _ = load_checkpoint(smollm2_dir)
    ids = tok("Answer: B", return_tensors="pt").input_ids
    with torch.no_grad():
        assert not torch.allclose(model(ids).logits, base(ids).logits)
    assert meta["method"] == "calibrate" and meta["task"].endswith("elementary_mathematics.jsonl")
