"""rlcd_lab.reports.mechanism: the measures of the paper's mechanism, on hand-built runs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rlcd_lab import metrics
from rlcd_lab.reports import mechanism


@pytest.mark.parametrize(
    ("text", "slip", "verdict"),
    [
        ("33+60=93;93+20=113;113 vs 113:same", False, 0),
        ("90+25=115;115+83=208;208 vs 218:diff", True, 1),  # 115 + 83 is 198
        ("6 + 7 = 11. 11 vs 11: same.", True, 0),  # 6 + 7 is 13
        ("13 + 8 = 21. 21 vs 22: different.", False, 1),
        ("4 x 5 = 20; 20 - 3 = 18; 18 vs 18: same", True, 0),  # 20 - 3 is 17
        # the rung's worked operations (tasks.worked): division, powers, remainders,
        # roots and decimals written to 4 places
        ("8 / 2 = 4; 6 + 4 = 10. 10 vs 11: different.", False, 1),
        ("18 / 6 = 2. 2 vs 13: different.", True, 1),  # 18 / 6 is 3
        ("7 / 2 = 3.5; 2.5 + 1 = 3.5. 3.5 vs 3.5: same.", False, 0),
        ("2.5 + 1 = 4.5. 4.5 vs 4.5: same.", True, 0),  # read whole: not "5 + 1 = 4"
        ("1 / 3 = 0.3333. 0.3333 vs 1: different.", False, 1),
        ("2 ^ 10 = 1024; -7 mod 3 = 2. 2 vs 2: same.", False, 0),  # Python's remainder
        ("8 / 0 = 0. 0 vs 0: same.", True, 0),  # no value: false
        ("sqrt(16) = 4. 4 vs 4: same.", False, 0),
        ("sqrt(16) = 5. 5 vs 4: different.", True, 1),
        ("recall zgc=F", None, None),  # no arithmetic, no verdict
        ("maybe a", None, None),
    ],
)
def test_slips_and_verdicts_by_hand(text, slip, verdict):
    assert mechanism.slipped(text) is slip
    assert mechanism.verdict(text) == verdict


def _run(tmp_path, logits, labels, texts, forced=None, log=None):
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    rows = [
        {"uid": str(i), "label": y, "q": None, "options": ["Y", "N"], "rationales": [t],
         "forced": [bool(forced and forced[i])], "lengths": [3], "logits": list(z)}
        for i, (z, y, t) in enumerate(zip(logits, labels, texts, strict=True))
    ]  # fmt: skip
    (run / "eval" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if log is not None:
        (run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    return run


def test_one_run_by_hand(tmp_path):
    """Four two-option items, readouts softmax([a, 0]): p(Y) = 0.999, 0.9, 0.8, 0.3.
    Labels Y, Y, N, N: right, right, wrong, right. Item 2's rationale slips (its error);
    item 3's rationale says "different" and its readout agrees; the others say "same"."""
    p = np.array([0.999, 0.9, 0.8, 0.3])
    logits = [[math.log(x / (1 - x)), 0.0] for x in p]
    texts = ["1+1=2 vs 2:same", "2+2=4 vs 4:same", "2+2=5 vs 5:same", "3+3=6 vs 7:diff"]
    log = [
        {"kl": k, "reward": r}
        for k, r in zip([0, 1, 2, 3, 4, 5, 6, 8], [0, 0, 0, 0, 0, 0.1, 0.2, 0.3], strict=True)
    ]
    for row, dev in zip(log[1::2], [0.40, 0.30, 0.25, 0.26], strict=True):  # every 2 steps
        row["dev_brier"] = dev
    for row, var in zip(log, [0.5, 0.4, 0.3, 0.2, 0.1, 0.1, 0.02, None], strict=True):
        row["readout_variance"] = var  # the last step logged none
    run = _run(tmp_path, logits, [0, 0, 1, 1], texts, forced=[0, 0, 0, 1], log=log)
    got = mechanism.run_mechanism(run, T=1.0)
    assert got["accuracy"] == 0.75 and got["T"] == 1.0
    assert got["saturated"] == 0.25  # only 0.999 > 0.99
    assert got["confidence"] == pytest.approx(np.mean([0.999, 0.9, 0.8, 0.7]))
    # confidences 0.999 (right), 0.9 (right), 0.8 (wrong), 0.7 (right): the wrong one
    # is below two right ones and above one -> AUROC 2/3
    assert got["auroc"] == pytest.approx(2 / 3)
    # top half: 0.999 and 0.9, both right -> risk 0; all: 1/4 -> ratio 0
    assert got["risk_ratio"] == 0.0
    assert got["slipped_errors"] == 1.0  # the one error slipped
    # clean (3 items: 0.999, 0.9, 0.7) vs slipped (0.8): 2 of 3 clean above -> 2/3
    assert got["slip_auroc"] == pytest.approx(2 / 3)
    assert got["slip_auroc_steps"] == got["slip_auroc"]  # one equation in each rationale
    assert got["follows"] == 1.0  # top options Y, Y, Y, N; verdicts same, same, same, diff
    assert got["forced"] == 0.25
    assert got["kl_end"] == 7.0  # last quarter of 8 steps: kl 6 and 8
    # 7 logged values: the last quarter is the last one (7 // 4 = 1)
    assert got["readout_variance"] == 0.02
    # last quarter (0.2, 0.3) minus the quarter before (0, 0.1): 0.25 - 0.05
    assert got["reward_trend"] == pytest.approx(0.2)
    # four dev evaluations: the last (0.26) minus the one before (0.25): past its best
    assert got["dev_trend"] == pytest.approx(0.01)


@pytest.mark.parametrize(("method", "per_rationale"), [("reinforce", True), ("grpo", False)])
def test_kl_per_token_and_per_rationale_for_every_method(tmp_path, method, per_rationale):
    """The RLCD family's loop logs KL per rationale, the baselines' per token: both are
    converted with the logged rationale length of the same steps (last quarter of 8:
    kl 6 and 8, lengths 10 and 30, mean 20)."""
    log = [
        {"kl": k, "rationale_length": n} for k, n in zip(range(8), [5] * 6 + [10, 30], strict=True)
    ]
    log[-1]["kl"] = 8
    run = _run(tmp_path, [[1.0, 0.0]], [0], ["1+1=2 vs 2:same"], log=log)
    (run / "config.json").write_text(json.dumps({"method": method}))
    got = mechanism.run_mechanism(run, T=1.0)
    assert got["kl_end"] == 7.0
    if per_rationale:
        assert got["kl_seq_end"] == 7.0 and got["kl_token_end"] == pytest.approx(7.0 / 20)
    else:
        assert got["kl_token_end"] == 7.0 and got["kl_seq_end"] == pytest.approx(7.0 * 20)


def test_equations_counts_every_worked_operation():
    assert mechanism.equations("8 / 2 = 4; sqrt(16) = 4; 6 + 4 = 10. 10 vs 11: different.") == 3
    assert mechanism.equations("33+60=93;93+20=113;113 vs 113:same") == 2
    assert mechanism.equations("recall zgc=F") == 0


def test_stratified_auroc_by_hand():
    """Short chains (1 equation) mostly clean, long ones (2) mostly slipped, and within
    each length the readout gives every rationale the same confidence: overall the clean
    ones rank above (9 of 16 pairs above, 6 tied: 0.75), within a length it knows nothing
    (0.5 each)."""
    conf = np.array([0.9, 0.9, 0.9, 0.9, 0.6, 0.6, 0.6, 0.6])
    clean = np.array([1, 1, 1, 0, 1, 0, 0, 0], dtype=bool)
    steps = np.array([1, 1, 1, 1, 2, 2, 2, 2])
    assert metrics.auroc(conf, clean) == pytest.approx(0.75)
    assert mechanism.stratified_auroc(conf, clean, steps) == pytest.approx(0.5)
    # sizes 4 and 2, AUROCs 1 and 0: (4 * 1 + 2 * 0) / 6; a stratum of one kind left out
    conf = np.array([0.9, 0.8, 0.2, 0.1, 0.3, 0.7, 0.5])
    clean = np.array([1, 1, 0, 0, 1, 0, 1], dtype=bool)
    steps = np.array([1, 1, 1, 1, 2, 2, 3])
    assert mechanism.stratified_auroc(conf, clean, steps) == pytest.approx(2 / 3)
    assert mechanism.stratified_auroc(conf, clean, np.arange(7)) is None  # no stratum has both
    assert [mechanism.equations(t) for t in ("1+2=3;3+4=7;7 vs 7:same", "recall a")] == [2, 0]


def test_direct_accuracy_comes_from_the_direct_dump(tmp_path):
    """The base run's test items answered directly: accuracy of their own argmax (three
    of four right), beside the accuracy after reasoning; None without the dump."""
    run = _run(tmp_path, [[1.0, 0.0], [0.0, 1.0]], [0, 0], ["a", "b"])
    assert mechanism.run_mechanism(run, T=1.0)["direct_accuracy"] is None
    logits = [[2.0, 1.0], [0.5, 0.1], [0.0, 3.0], [-1.0, 0.0]]
    rows = [{"label": y, "logits": z} for z, y in zip(logits, [0, 0, 1, 0], strict=True)]
    (run / "eval" / "test-direct.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = mechanism.run_mechanism(run, T=1.0)
    assert got["direct_accuracy"] == 0.75 and got["accuracy"] == 0.5


def test_a_run_without_arithmetic_or_log_has_none_of_those(tmp_path):
    run = _run(tmp_path, [[1.0, 0.0], [0.0, 1.0]], [0, 0], ["recall a", "recall b"])
    got = mechanism.run_mechanism(run, T=2.0)
    assert got["slipped_errors"] is None and got["slip_auroc"] is None
    assert got["slip_auroc_steps"] is None
    assert got["follows"] is None and got["kl_end"] is None and got["reward_trend"] is None
    assert got["dev_trend"] is None and got["readout_variance"] is None
    table = mechanism.mechanism_table({"mechanism": {"x": got}}, {"x": "X run"})
    assert table.splitlines()[2].startswith("| X run | - | 0.500 |") and "| - |" in table


def test_quarter_trend_by_hand():
    """Two seeds of 9 steps: quarters of 2 steps (the 9th joins none). Seed a's quarters
    are (0, 0), (1, 1), (2, 2), (3, 5): no spread except the last, variance 2; seed b's
    (0, 0), (1, 1), (2, 2), (3, 3). Quarter means over seeds 0, 1, 2, 3.5; SE of the last
    sqrt((2 / 2 + 0) ) / 2 = 0.5, of the third 0: change 1.5 > 2 x 0.5, still rising."""
    from rlcd_lab.reports.mechanism import quarter_trend

    a = [0, 0, 1, 1, 2, 2, 3, 5, 99]
    b = [0, 0, 1, 1, 2, 2, 3, 3, -99]
    t = quarter_trend([a, b])
    assert t["steps"] == 9 and t["quarters"] == [0.0, 1.0, 2.0, 3.5]
    assert t["se"] == [0.0, 0.0, 0.0, 0.5]
    assert (t["change"], t["se_change"], t["reading"]) == (1.5, 0.5, "still rising")
    # the last quarter (3.25 + 1.75) / 2 = 2.5, 0.5 above the third on an SE of 0.5: flat
    assert (
        quarter_trend([[0, 0, 1, 1, 2, 2, 2.25, 4.25], [0, 0, 1, 1, 2, 2, 1.75, 1.75]])["reading"]
        == "flat within noise"
    )
    down = quarter_trend([[4, 4, 3, 3, 2, 2, 0, 0]])  # no spread: any change is beyond noise
    assert (down["change"], down["reading"]) == (-2.0, "falling")
    assert quarter_trend([[1, 2, 3, 4, 5, 6, 7]]) is None  # under two steps a quarter


def test_training_accuracy_reads_each_loops_own_column():
    """RLCD logs ``accuracy_u`` (beside its proper-score ``reward``), GRPO ``reward``, RFT
    ``kept``, RLCR ``correct`` (beside its ``reward``); SFT none."""
    from rlcd_lab.reports.mechanism import training_accuracy

    rlcd = [{"reward": -0.3, "accuracy_u": 0.5}, {"reward": -0.2, "accuracy_u": 0.75}]
    assert training_accuracy(rlcd) == [0.5, 0.75]
    assert training_accuracy([{"reward": 1.0}, {"reward": 0.5, "dev_brier": 0.2}]) == [1.0, 0.5]
    assert training_accuracy([{"kept": 0.25}, {"kept": None}]) == [0.25]
    assert training_accuracy([{"reward": 0.9, "correct": 0.5}]) == [0.5]
    assert training_accuracy([{"loss": 1.0}]) == []
