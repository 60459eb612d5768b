"""rlcd_lab.math.routing's decision rules against hand numbers and brute force, and the three
places that decide (the dashboard's Ask tab, its Routing tab, the decision server) agreeing
on the same readouts under the same rule."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
from fastapi.testclient import TestClient

from rlcd_lab.dashboard import ask_tab, routing_tab
from rlcd_lab.decide import DecisionModel
from rlcd_lab.decide.answering import DecideOptions
from rlcd_lab.decide.jev import decision_confidence
from rlcd_lab.files.assets import shipped_checkpoints
from rlcd_lab.math import routing
from rlcd_lab.math.routing import (
    DEFAULT_CHANCE_CORRECTED_THRESHOLD,
    DEFAULT_THRESHOLD,
    DecisionRule,
    aggregate_readouts,
    bayes_threshold,
    confidence,
    confidences,
    equivalent_threshold,
    threshold_for_coverage,
)
from rlcd_lab.metrics import DEFAULT_EPS
from rlcd_lab.server.app import create_app
from rlcd_lab.server.options import ServeOptions


def _simplex(rng: np.random.Generator, shape: tuple[int, ...], sharp: float = 3.0) -> np.ndarray:
    z = rng.normal(size=shape) * sharp
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# --------------------------------------------------------------------------- the rule
def test_rule_validates_its_fields():
    assert DecisionRule() == DecisionRule("max_p", DEFAULT_THRESHOLD, "single")
    for bad in (
        dict(measure="entropy"),
        dict(aggregate="vote"),
        dict(threshold=1.5),
        dict(threshold=-0.1),
        dict(threshold=float("nan")),
        dict(threshold="high"),
    ):
        with pytest.raises(ValueError):
            DecisionRule(**bad)
    with pytest.raises(ValueError, match="aggregate"):
        aggregate_readouts([[0.5, 0.5]], "vote")
    with pytest.raises(ValueError, match=r"\(M, K\)"):
        aggregate_readouts(np.zeros((0, 2)))
    with pytest.raises(ValueError, match="measure"):
        confidence([0.5, 0.5], "entropy")


def test_aggregate_and_confidences_by_hand():
    u = [[0.9, 0.1, 0.0], [0.3, 0.6, 0.1]]
    assert aggregate_readouts(u, "single") == pytest.approx([0.9, 0.1, 0.0])
    assert aggregate_readouts(u, "mixture") == pytest.approx([0.6, 0.35, 0.05])
    assert aggregate_readouts([0.2, 0.8], "mixture") == pytest.approx([0.2, 0.8])  # M = 1
    # max p of the mixture 0.6; chance-corrected (3 * 0.6 - 1) / 2 = 0.4
    r = DecisionRule("chance_corrected", 0.45, "mixture").apply(u)
    assert r.confidence == pytest.approx(0.4) and r.answer == 0 and r.decision == "escalate"
    r = DecisionRule("max_p", 0.45, "mixture").apply(u)
    assert r.confidence == pytest.approx(0.6) and r.automate
    # a score: the ordinal confidence 1 - Var / Var_max (mu 1.6, Var 0.44, Var_max 1)
    assert confidence([0.1, 0.2, 0.7], "chance_corrected", "score") == pytest.approx(0.56)
    # vectorised, with padded rows: row 2 has K = 2 real options -> 2 * 0.7 - 1
    p = np.array([[0.5, 0.3, 0.2], [0.7, 0.3, 0.0]])
    assert confidences(p, "max_p") == pytest.approx([0.5, 0.7])
    assert confidences(p, "chance_corrected", [3, 2]) == pytest.approx([0.25, 0.4])
    for row, k in zip(p, [3, 2], strict=True):  # the scalar function on the real options
        assert confidences(p, "chance_corrected", [3, 2])[[3, 2].index(k)] == pytest.approx(
            confidence(row[:k], "chance_corrected")
        )


def test_equivalent_threshold_decides_the_same_items():
    assert equivalent_threshold(0.9, 2, "max_p", "chance_corrected") == pytest.approx(0.8)
    assert equivalent_threshold(0.8, 2, "chance_corrected", "max_p") == pytest.approx(0.9)
    rng = np.random.default_rng(0)
    for k in (2, 3, 5):
        p = _simplex(rng, (2000, k))
        m, c = confidences(p, "max_p"), confidences(p, "chance_corrected")
        for t in (0.3, 0.55, 0.8, 0.95):
            if t >= 1 / k:
                tc = equivalent_threshold(t, k, "max_p", "chance_corrected")
                assert np.array_equal(m >= t, c >= tc - 1e-12)
            tm = equivalent_threshold(t, k, "chance_corrected", "max_p")
            assert np.array_equal(c >= t, m >= tm - 1e-12)
    with pytest.raises(ValueError, match="k >= 2"):
        equivalent_threshold(0.5, 1, "max_p", "chance_corrected")


def test_bayes_threshold_minimises_expected_cost():
    assert bayes_threshold(10.0, 1.0) == pytest.approx(0.9)
    assert bayes_threshold(1.0, 2.0) == 0.0 and bayes_threshold(0.0, 1.0) == 0.0
    assert bayes_threshold(10.0, 1.0, "chance_corrected", 2) == pytest.approx(0.8)
    # brute force: on a grid of calibrated p, "answer" is cheaper exactly at and above t
    rng = np.random.default_rng(1)
    for k, c_w, c_e in ((2, 10.0, 1.0), (3, 4.0, 1.0), (4, 5.0, 2.0)):
        p = _simplex(rng, (3000, k))
        answer_cheaper = (1 - p.max(1)) * c_w <= c_e
        for measure in ("max_p", "chance_corrected"):
            t = bayes_threshold(c_w, c_e, measure, k)
            assert np.array_equal(confidences(p, measure) >= t - 1e-12, answer_cheaper)
    for bad in ((-1.0, 1.0), (1.0, None), (float("inf"), 1.0)):
        with pytest.raises(ValueError):
            bayes_threshold(*bad)


def test_threshold_for_coverage_against_brute_force():
    rng = np.random.default_rng(2)
    for n in (1, 2, 7, 400):
        conf = np.round(rng.uniform(0.3, 1.0, n), 2)  # rounded: ties
        for share in (0.1, 0.5, 0.75, 1.0):
            # the largest candidate threshold that still decides >= share of the items
            best = max(t for t in np.unique(conf) if np.mean(conf >= t) >= share - 1e-12)
            assert threshold_for_coverage(conf, share) == best
    assert threshold_for_coverage(np.arange(400) / 400, 0.5) == pytest.approx(200 / 400)
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="coverage"):
            threshold_for_coverage([0.5], bad)
    with pytest.raises(ValueError, match="at least one"):
        threshold_for_coverage([], 0.5)


def test_one_error_budget_constant():
    assert DEFAULT_EPS == 0.05
    assert inspect.signature(routing.threshold_for_risk).parameters["eps"].default is DEFAULT_EPS
    assert inspect.signature(ask_tab.ask).parameters["threshold"].default is DEFAULT_THRESHOLD
    assert DecideOptions().threshold == DEFAULT_CHANCE_CORRECTED_THRESHOLD == 0.8


# --------------------------------------------------------------------------- agreement
def _ask_result(u: np.ndarray, labels: list[str]) -> dict:
    """What the Ask tab's decision function reads: the result of ``ask_model``."""
    return {"options": labels, "rationales": [{"u": row.tolist()} for row in u]}


def _routing_tab_decides(p: np.ndarray, measure: str, threshold: float) -> bool:
    """The Routing tab's decision on one item whose (aggregated) readout is ``p``."""
    s = routing_tab.make_scores(p[None], np.array([0]), measure)
    return routing_tab.route(s, threshold, 1.0, 1.0)["decided"] == 1.0


@pytest.mark.parametrize("measure", ["max_p", "chance_corrected"])
@pytest.mark.parametrize("aggregate", ["single", "mixture"])
def test_ask_routing_and_server_rules_agree(measure, aggregate):
    rng = np.random.default_rng(3)
    for _ in range(200):
        k, m = int(rng.integers(2, 6)), int(rng.integers(1, 5))
        u = _simplex(rng, (m, k), sharp=rng.uniform(0.2, 4))
        t = float(rng.uniform(0, 1))
        rule = DecisionRule(measure, t, aggregate)
        # independent: numpy by hand
        p = u[0] if aggregate == "single" else u.mean(0)
        c = p.max() if measure == "max_p" else (k * p.max() - 1) / (k - 1)
        expected = "automate" if c >= t else "escalate"
        labels = [f"o{i}" for i in range(k)]
        assert ask_tab.decision(_ask_result(u, labels), rule) == expected
        decides = _routing_tab_decides(p, measure, t)
        assert ("automate" if decides else "escalate") == expected
        if measure == "chance_corrected":  # the server's measure: DecideOptions' rule
            opts = DecideOptions(mode="auto", threshold=t, aggregate=aggregate)
            server_p = opts.rule.probs(u)
            escalated = not opts.rule.automates(decision_confidence("choice", server_p))
            assert server_p == pytest.approx(p)
            assert ("escalate" if escalated else "automate") == expected


def test_the_http_server_escalates_what_the_dashboard_would():
    """Through the server's HTTP app (base verify checkpoint, a Y/N choice): the direct
    readout p of each state, then ``auto`` at threshold t; the Ask and Routing tabs'
    decisions on p under the chance-corrected single-query rule are the server's."""
    dm = DecisionModel.from_checkpoint(shipped_checkpoints()["checkpoints/base-verify"])
    app = create_app(dm, ServeOptions(name="m", alias=(), mode="direct"))
    states = ["33+60+20=113?", "47+38+16=91?", "12+34+56=102?", "90+90+90=260?", "5+5+5=15?"]
    q = {"v": {"type": "choice", "criteria": {"Y": "right", "N": "wrong"}}}
    with TestClient(app) as client:
        post = lambda state, **rlcd: client.post(  # noqa: E731
            "/v1/systemone", json={"model": "m", "state": state, "questions": q, "rlcd": rlcd}
        ).json()
        probs = []
        for state in states:
            ans = post(state, mode="direct")["answers"]["v"]["probabilities"]
            probs.append(np.array([ans["Y"], ans["N"]]))
        conf = [2 * p.max() - 1 for p in probs]
        t = float(np.median(conf))
        rule = DecisionRule("chance_corrected", t, "single")
        for state, p, c in zip(states, probs, conf, strict=True):
            det = post(state, mode="auto", threshold=t, m=1, max_new_tokens=8)["rlcd"]["answers"]
            server = "escalate" if det["v"]["escalated"] else "automate"
            assert det["v"]["direct_confidence"] == pytest.approx(c, abs=1e-9)
            assert ask_tab.decision(_ask_result(p[None], ["Y", "N"]), rule) == server
            decides = _routing_tab_decides(p, "chance_corrected", t)
            assert ("automate" if decides else "escalate") == server
            assert server == ("automate" if c >= t else "escalate")
    assert not math.isnan(t)


def test_cost_model_counts_wrong_decisions_and_escalations():
    # 5 items ranked 0.9 (right), 0.8 (wrong), 0.8 (right), 0.6 (wrong), 0.3 (right)
    conf = np.array([0.8, 0.3, 0.9, 0.6, 0.8])
    correct = np.array([False, True, True, False, True])
    # t = 0.7 decides 3 items (1 wrong) and escalates 2: (10 * 1 + 1 * 2) / 5
    at = routing.expected_cost(conf, correct, 0.7, 10.0, 1.0)
    assert at["cost"] == pytest.approx(12 / 5) and at["escalated"] == 2 and at["errors"] == 1
    assert {k: at[k] for k in ("coverage", "risk", "decided", "errors")} == routing.decided_risk(
        correct, conf >= 0.7
    )
    t, cost = routing.cost_curve(conf, correct, 10.0, 1.0)
    # distinct thresholds 0.3, 0.6, 0.8, 0.9 and t = 1 (decide nothing)
    assert t.tolist() == [0.3, 0.6, 0.8, 0.9, 1.0]
    want = [(10 * 2 + 0) / 5, (10 * 2 + 1) / 5, (10 * 1 + 2) / 5, (0 + 4) / 5, 5 / 5]
    assert cost == pytest.approx(want)
    for tj, cj in zip(t, cost, strict=True):
        assert routing.expected_cost(conf, correct, tj, 10.0, 1.0)["cost"] == pytest.approx(cj)
    with pytest.raises(ValueError, match="non-negative"):
        routing.expected_cost(conf, correct, 0.5, -1.0, 1.0)
    assert routing.decided_risk([True, False], [False, False])["risk"] == 0.0
