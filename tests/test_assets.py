"""The shipped base models still load and still behave as assets/README.md says.

Looser than the measured numbers (100 dev items instead of 400 test items), so it guards
against a broken artefact or a code change that breaks it, not against sampling noise.
"""

from pathlib import Path

import pytest

from rlcd_lab.evaluate import run_eval, summarize
from rlcd_lab.models import load_checkpoint
from rlcd_lab.tasks.synthetic import get_task

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "checkpoints"


@pytest.mark.parametrize("task", ["verify", "facts", "aleatoric"])
def test_shipped_base_model(task):
    model, tok, meta = load_checkpoint(ASSETS / f"base-{task}")
    assert meta["task"] == task and meta["method"] == "pretrain"
    items = get_task(task).split("dev")[:100]
    direct = summarize(run_eval(model, tok, items, mode="direct"))
    reason_rows = run_eval(model, tok, items, mode="reason")
    reason = summarize(reason_rows, dev_rows=reason_rows)
    assert reason["forced_rate"] < 0.05  # it writes a rationale and stops at the marker
    assert reason["mean_length"] > 5
    if task == "verify":  # reasoning is computation: far better than answering directly,
        assert reason["accuracy"] - direct["accuracy"] >= 0.10
        assert reason["T"] >= 2 or reason["ece"] >= 0.05  # and overconfident


def test_difficulty_map_bases_are_ordered_by_the_teachers_slip():
    """The difficulty map's bases (assets/README.md): a teacher that drops more carries
    gives a base that reasons to a wrong answer more often (dev: 0.92, 0.81, 0.62)."""
    items = get_task("verify").split("dev")[:100]
    accuracy = {}
    for name, slip in [
        ("base-verify-slip0.05", 0.05),
        ("base-verify", None),
        ("base-verify-slip0.6", 0.6),
    ]:
        model, tok, meta = load_checkpoint(ASSETS / name)
        assert meta["config"].get("slip") == slip
        rows = run_eval(model, tok, items, mode="reason")
        accuracy[name] = summarize(rows, dev_rows=rows)["accuracy"]
    easy, mid, hard = accuracy.values()
    assert easy > mid + 0.03 and mid > hard + 0.08, accuracy


@pytest.mark.smollm2
def test_the_real_rungs_base_writes_its_worked_rationales(smollm2_dir):
    """assets/checkpoints/smollm2-arith-verify (SmolLM2-135M-Instruct taught
    basic-skills-arithmetic-verify by ``rlcd-lab train teach``): it writes the worked format
    and the marker itself, where the untaught model almost never does (benchmarks/RESULTS.md)."""
    from rlcd_lab.reader import read

    model, tok, meta = load_checkpoint(ASSETS / "smollm2-arith-verify")
    assert meta["method"] == "teach" and meta["task"].endswith(
        "basic-skills-arithmetic-verify.jsonl"
    )
    questions = [
        f"Question: {a} + {b} =\nProposed answer: {a + b + d}\nIs the proposed answer correct? "
        "(yes or no)"
        for a, b, d in [(6, 7, 0), (12, 9, 1), (8, 5, 0), (30, 14, -10), (7, 7, 0), (9, 3, 2)]
    ]
    readings = read(model, tok, questions, [("yes", "no")] * 6, max_new_tokens=40, seed=0)
    written = [not r.forced[0] for r in readings]
    worked = [" vs " in r.texts[0] for r in readings]
    assert sum(written) >= 5 and sum(worked) >= 5, [r.texts[0] for r in readings]
