"""The paper-vs-ours tables: verdicts from CIs, and README blocks that are the module's
output for the shipped summaries (never hand-copied numbers)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from rlcd_lab.assets import ASSETS
from rlcd_lab.report import findings_table, sweep_table, update_readme, verdict

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
        name: {"accuracy": {"mean": a}, "T": {"mean": t, "sd": None}, "cov_at_eps": {"mean": c}}
        for name, a, t, c in zip(("reinforce", "grpo", "rft-kl"), acc, T, cov, strict=True)
    }
    d = {"diff": -0.02, "ci_low": -0.05, "ci_high": -0.001, "p": 0.03}
    paired = {"reinforce - grpo": {"aurc": d}}
    return {"eps": 0.05, "runs": runs, "paired": paired, "forks": {}}


def test_findings_table_rows_by_hand():
    table = findings_table(summary_of((0.9, 0.9, 0.8), (1.3, 6.0, 0.1), (0.5, 0.2, 0.1)))
    rows = table.splitlines()
    assert rows[2] == (
        "| RLCD vs GRPO+TS: AURC | 0.034 vs 0.061: RLCD lower (p < 1e-3) | "
        "-0.020 [-0.050, -0.001], p = 0.03 | reproduces |"
    )
    # |log 1.3| = 0.26 is below |log 6| = 1.79 and |log 0.1| = 2.30: closest to 1
    assert rows[3].endswith("| 1.300 / 6.000 / 0.100 | reproduces: RLCD closest to 1 |")
    worse = findings_table(summary_of((0.9, 0.9, 0.8), (3.0, 2.0, 4.0), (0.1, 0.2, 0.1)))
    assert "does not reproduce: RLCD not closest to 1" in worse
    capped = findings_table(summary_of((0.2, 0.2, 0.2), (50.0, 50.0, 37.0), (0.0, 0.0, 0.0)))
    # 50 is farther from 1 than 37
    assert "| 50.000 / 50.000 / 37.000 | does not reproduce: RLCD not closest to 1 |" in capped
    tied = findings_table(summary_of((0.2, 0.2, 0.2), (50.0, 50.0, 50.0), (0.1, 0.0, 0.0)))
    assert "not measurable at this scale: RLCD ties for closest to 1" in tied


def test_claims_use_the_matched_budget_baseline_when_it_exists():
    summary = summary_of((0.9, 0.9, 0.8), (1.3, 6.0, 0.1), (0.5, 0.2, 0.1))
    summary["runs"]["grpo-matched"] = summary["runs"]["grpo"] | {"T": {"mean": 9.0, "sd": 1.0}}
    far = {"diff": 0.02, "ci_low": 0.01, "ci_high": 0.03, "p": 0.001}
    summary["paired"]["reinforce - grpo-matched"] = {"aurc": far}
    rows = findings_table(summary).splitlines()
    assert rows[2].startswith("| RLCD vs GRPO+TS (matched budget): AURC |")
    assert rows[2].endswith("| +0.020 [+0.010, +0.030], p = 0.001 | does not reproduce |")
    assert (
        "GRPO+TS (matched budget) / RFT+KL+TS | 1.4 / about 7 / about 7 | 1.300 / 9.000 ± 1.000"
        in (rows[3])
    )


def test_table3_claims_on_aleatoric_summaries_only():
    jsd = {"diff": 0.05, "ci_low": 0.02, "ci_high": 0.08, "p": 0.001}
    summary = summary_of((0.9, 0.9, 0.8), (1.3, 6.0, 0.1), (0.5, 0.2, 0.1))
    summary["paired"]["mixture - endtoend"] = {"jsd_table3": jsd}
    assert "mixture" not in findings_table(summary)  # no q: a Table 1 summary
    summary["runs"]["mixture"] = {"jsd": {"mean": 0.1, "sd": None}}
    rows = findings_table(summary).splitlines()
    assert rows[2:] == [
        "| mixture (lam = 1) vs per-rationale (end to end, KL): JSD | 0.121 vs 0.075 bits: "
        "mixture higher | +0.050 [+0.020, +0.080], p = 0.001 | reproduces |"
    ]


def test_sweep_table_orders_weights_and_puts_stage1_at_zero():
    cell = {k: {"mean": 0.5, "sd": 0.1} for k in ("accuracy", "brier", "aurc", "T", "length")}
    runs = {
        "endtoend-c1": cell | {"grad_rms_ratio": {"mean": 9.0, "sd": 1.0}},
        "calibrate": cell,
        "endtoend-c0.1": cell | {"grad_rms_ratio": {"mean": 2.5, "sd": None}},
        "grpo": cell,
    }
    rows = sweep_table({"runs": runs}).splitlines()
    assert [r.split(" | ")[0] for r in rows[2:]] == ["| 0", "| 0.1", "| 1"]
    assert rows[2].endswith("| - |") and rows[3].endswith("| 2.500 |")
    assert rows[4].endswith("| 9.000 ± 1.000 |")


def block(name: str) -> str:
    text = README.read_text(encoding="utf-8")
    m = re.search(rf"<!-- {name}:begin.*?-->\n(.*?)<!-- {name}:end -->", text, re.S)
    assert m, f"README has no {name} block"
    return m.group(1)


def test_readme_blocks_are_generated_from_the_shipped_summaries():
    text = README.read_text(encoding="utf-8")
    for name in ("verify", "aleatoric", "real-model"):
        assert block(name).strip(), f"README block {name} is empty"
    assert update_readme(README) == text  # python -m rlcd_lab.report --readme README.md


def test_a_shipped_aurc_ci_recomputes_from_the_dumps_with_the_joint_item_bootstrap():
    """RLCD minus matched-budget GRPO on AURC in the shipped verify summary, recomputed
    from the raw eval dumps: T fitted on dev per seed, AURC per seed averaged, and each
    bootstrap replicate drawing one set of test items for all seeds (loop reference)."""
    from rlcd_lab import metrics
    from rlcd_lab.io import read_jsonl

    root = ASSETS / "results" / "verify"
    summary = json.loads((root / "summary.json").read_text())
    seeds, n = summary["seeds"], summary["n_boot"]
    conf, ok = {}, {}
    for run in ("reinforce", "grpo-matched"):
        conf[run], ok[run] = [], []
        for s in seeds:
            ev = root / f"seed-{s}" / run / "eval"
            dev, test = read_jsonl(ev / "dev.jsonl"), read_jsonl(ev / "test.jsonl")
            T = metrics.fit_temperature([r["logits"] for r in dev], [r["label"] for r in dev])
            p = metrics.apply_temperature([r["logits"] for r in test], T)
            c, r = metrics.confidence_and_correct(p, [r["label"] for r in test])
            conf[run].append(c)
            ok[run].append(r)
    a, b = "reinforce", "grpo-matched"

    def diff(idx):
        return sum(
            metrics.aurc(conf[a][k][idx], ok[a][k][idx])
            - metrics.aurc(conf[b][k][idx], ok[b][k][idx])
            for k in range(len(seeds))
        ) / len(seeds)

    items = len(conf[a][0])
    draws = np.random.default_rng(0).integers(0, items, size=(n, items))
    reps = [diff(i) for i in draws]
    shipped = summary["paired"][f"{a} - {b}"]["aurc"]
    assert shipped["diff"] == pytest.approx(diff(np.arange(items)), abs=1e-12)
    assert shipped["ci_low"] == pytest.approx(np.percentile(reps, 2.5), abs=1e-12)
    assert shipped["ci_high"] == pytest.approx(np.percentile(reps, 97.5), abs=1e-12)


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


def test_paired_table_lists_only_rlcd_minus_each_run():
    """The aleatoric summary also holds Table 3's own pairs (mixture - endtoend, ...): the
    "RLCD minus" table shows RLCD's pairs only, one row per run, each once."""
    from rlcd_lab.report import label, paired_table

    summary = json.loads((ASSETS / "results" / "aleatoric" / "summary.json").read_text())
    assert any(not p.startswith("reinforce - ") for p in summary["paired"])
    rows = paired_table(summary).splitlines()[2:]
    mine = [p.split(" - ")[1] for p in summary["paired"] if p.startswith("reinforce - ")]
    assert sorted(r.split(" | ")[0].removeprefix("| ") for r in rows) == sorted(map(label, mine))
