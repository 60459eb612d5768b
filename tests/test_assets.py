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
