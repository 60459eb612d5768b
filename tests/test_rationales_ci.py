"""benchmarks/rationales_ci.py: the bootstrap intervals of a run read with one rationale per
test item and with the mixture of several, on runs built by hand, and the rung's measured
answer as docs/results.md quotes it."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from rlcd_lab import metrics
from rlcd_lab.files.io import read_jsonl
from rlcd_lab.files.rundir import eval_path

REPO = Path(__file__).resolve().parents[1]
PATH = REPO / "benchmarks" / "rationales_ci.py"
spec = importlib.util.spec_from_file_location("rationales_ci", PATH)
ci = importlib.util.module_from_spec(spec)
sys.modules["rationales_ci"] = ci
spec.loader.exec_module(ci)


def _softmax(z):
    p = np.exp(np.asarray(z, dtype=np.float64) - max(z))
    return (p / p.sum()).tolist()


def _run(path: Path, logits, labels, second=None) -> Path:
    """A run folder: test and dev dumps of single readouts ``logits``, and a ``test-m2``
    dump whose first readout is the single one and whose second is ``second`` (default:
    the first again)."""
    (path / "eval").mkdir(parents=True)
    rows = []
    for i, (z, y) in enumerate(zip(logits, labels, strict=True)):
        u = _softmax(z)
        rows.append({"uid": f"item-{i}", "label": y, "q": None, "options": ["A", "B"],
                     "rationales": ["r"], "forced": [False], "lengths": [3], "logits": z,
                     "readouts": [u], "mixture": u, "probs": u})  # fmt: skip
    mixed = [
        r | {"readouts": [r["readouts"][0], r["readouts"][0] if second is None else second[i]]}
        for i, r in enumerate(rows)
    ]
    for name, dump in (("test", rows), ("dev", rows), ("test-m2", mixed)):
        text = "".join(json.dumps(r) + "\n" for r in dump)
        (path / "eval" / f"{name}.jsonl").write_text(text)
    return path


LOGITS = [[2.0, 0.0], [0.0, 1.0], [1.5, 0.0], [0.0, 0.5], [0.2, 0.0], [3.0, 0.0]]
LABELS = [0, 1, 1, 1, 0, 0]


def test_a_readings_own_interval_bootstraps_its_aurc_and_brier(tmp_path):
    """Alone, a reading's value is its AURC and mean Brier (``metrics``); against itself
    the paired difference is 0 in every replicate; a reader right on every item with one
    confidence has AURC 0 and s.e. 0."""
    view = ci.load_run(_run(tmp_path / "a", LOGITS, LABELS)).view(True, "single")
    own = ci.interval(view, n=300)
    assert own["aurc"]["value"] == pytest.approx(metrics.aurc(view.confidence, view.correct))
    assert own["brier"]["value"] == pytest.approx(metrics.brier(view.probs, view.labels))
    assert own["aurc"]["ci_low"] <= own["aurc"]["value"] <= own["aurc"]["ci_high"]
    assert own["aurc"]["se"] > 0 and own["brier"]["se"] > 0
    paired = ci.interval(view, view, n=300)
    assert all(paired[m] == {"value": 0, "ci_low": 0, "ci_high": 0, "se": 0} for m in paired)
    right = ci.load_run(_run(tmp_path / "b", [[1.0, 0.0]] * 4, [0] * 4)).view(True, "single")
    assert ci.interval(right, n=300)["aurc"] == {"value": 0, "ci_low": 0, "ci_high": 0, "se": 0}


def test_a_mixture_of_copies_of_the_first_rationale_is_the_single_reading(tmp_path):
    """Every rationale's readout the first one's: the mixture is the single readout, so both
    readings' intervals are the same; a second readout that differs moves the mixture's."""
    same = ci.measure(_run(tmp_path / "same", LOGITS, LABELS), None, n=300)
    assert same["m"] == 2 and same["single"]["paired"] is None
    for metric in ("aurc", "brier"):
        for key, value in same["single"]["own"][metric].items():
            assert same["mixture"]["own"][metric][key] == pytest.approx(value, abs=1e-12)
    other = [[0.5, 0.5]] * len(LABELS)
    moved = ci.measure(_run(tmp_path / "moved", LOGITS, LABELS, other), None, n=300)
    assert moved["mixture"]["own"]["brier"]["value"] != same["mixture"]["own"]["brier"]["value"]


def test_a_run_without_a_dump_of_several_rationales_is_refused(tmp_path):
    run = _run(tmp_path / "a", LOGITS, LABELS)
    (run / "eval" / "test-m2.jsonl").unlink()
    with pytest.raises(ValueError, match="test-m<M>"):
        ci.measure(run, None, n=10)


FAIR = REPO / "assets" / "results" / "basic-skills-arithmetic-verify-pairs" / "seed-17"


def test_the_shipped_dump_of_several_rationales_draws_the_test_dumps_first_rationale():
    """The rung's ``test-m8`` dump of seed 17's RLCD: the test dump's items in its order,
    the first of its rationales the test dump's, its readout the same to float32 rounding
    (the batch it was read in differs)."""
    run = FAIR / "reinforce"
    single, several = (read_jsonl(eval_path(run, name)) for name in ("test", "test-m8"))
    assert [r["uid"] for r in several] == [r["uid"] for r in single]
    assert all(len(r["readouts"]) == 8 for r in several)
    assert [r["rationales"][0] for r in several] == [r["rationales"][0] for r in single]
    first = np.array([r["readouts"][0] for r in several])
    np.testing.assert_allclose(first, [r["readouts"][0] for r in single], atol=1e-5)


def test_the_results_page_quotes_the_rungs_measured_answer():
    """docs/results.md's reading of several rationales per test item is the script's output
    on the shipped dumps (seed 17: RLCD alone and paired with GRPO+TS's single readout):
    each s.e., value and correlation it quotes, and the directions it reads from them."""
    out = ci.measure(FAIR / "reinforce", FAIR / "grpo-matched")
    text = " ".join((REPO / "docs" / "results.md").read_text(encoding="utf-8").split())
    one, mix, m = out["single"], out["mixture"], out["m"]
    narrow = []
    for metric, name, what in (
        ("aurc", "AURC", "the AURC itself"),
        ("brier", "Brier score", "the score"),
    ):
        a, b = one["own"][metric], mix["own"][metric]
        assert (
            f"s.e. of its {name} goes from {a['se']:.4f} with one rationale to {b['se']:.4f} "
            f"with the mixture of {m} ({what} from {a['value']:.3f} to {b['value']:.3f})"
        ) in text
        narrow.append(1 - b["se"] / a["se"])
        pa, pb = one["paired"][metric]["se"], mix["paired"][metric]["se"]
        assert f"{name}: from {pa:.4f} to {pb:.4f}" in text
        assert pb > pa  # "the difference's s.e. widens instead"
    assert min(narrow) > 0
    assert f"RLCD's own intervals narrow by {narrow[0]:.0%} and {narrow[1]:.0%}" in text
    assert mix["corr"] < one["corr"]
    assert f"(correlation {mix['corr']:.2f}, against {one['corr']:.2f} for RLCD's single" in text
