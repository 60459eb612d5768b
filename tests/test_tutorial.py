"""Tests of the notebooks' helpers (rlcd_lab.classroom.tutorial, rlcd_lab.math.routing),
numbers by hand.

Scoring eval dumps (rlcd_lab.reports.results) is tested in tests/test_results.py."""

from __future__ import annotations

import json

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

from rlcd_lab import metrics
from rlcd_lab.classroom import tutorial
from rlcd_lab.math import routing
from rlcd_lab.reports import results

# ------------------------------------------------------------------------------ scale


def test_get_scale_defaults_and_validates():
    assert tutorial.get_scale({}) == "default"
    assert tutorial.get_scale({"RLCD_SCALE": "ci"}) == "ci"
    assert tutorial.get_scale({"RLCD_SCALE": " Paper "}) == "paper"
    assert tutorial.get_scale({"RLCD_SCALE": ""}) == "default"
    with pytest.raises(ValueError, match="choose one of"):
        tutorial.get_scale({"RLCD_SCALE": "huge"})


# ---------------------------------------------------------------- proper vs not proper


def test_linear_score_picks_the_outcome_probability():
    u = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    assert torch.allclose(tutorial.linear_score(u, 0), torch.tensor([0.7, 0.1]))
    assert torch.allclose(tutorial.linear_score(u, torch.tensor([1, 2])), torch.tensor([0.2, 0.8]))


def test_binary_expected_scores_by_hand():
    # q1 = 0.3, report p = 0.5: Brier 2 u.q - ||u||^2 = 2 (0.5*0.7 + 0.5*0.3) - 0.5 = 0.5;
    # log 0.7 log 0.5 + 0.3 log 0.5 = log 0.5; linear u.q = 0.5;
    # spherical u.q / ||u|| = 0.5 / sqrt(0.5) = sqrt(0.5).
    grid = [0.5]
    assert tutorial.binary_expected_scores(0.3, grid, "brier")[0] == pytest.approx(0.5)
    assert tutorial.binary_expected_scores(0.3, grid, "log")[0] == pytest.approx(np.log(0.5))
    assert tutorial.binary_expected_scores(0.3, grid, "linear")[0] == pytest.approx(0.5)
    assert tutorial.binary_expected_scores(0.3, grid, "spherical")[0] == pytest.approx(np.sqrt(0.5))
    # report p = 1 when q1 = 0.3: log score -inf (0.7 log 0), Brier 2*0.3 - 1 = -0.4
    assert tutorial.binary_expected_scores(0.3, [1.0], "log")[0] == -np.inf
    assert tutorial.binary_expected_scores(0.3, [1.0], "brier")[0] == pytest.approx(-0.4)


@pytest.mark.parametrize("q1", [0.1, 0.3, 0.62, 0.9])
def test_best_report_proper_vs_linear(q1):
    # strictly proper rules peak at the truth (on the 0.001 grid); the linear one at a vertex
    for rule in ("brier", "log", "spherical"):
        assert tutorial.best_report(q1, rule) == pytest.approx(q1, abs=1e-3)
    assert tutorial.best_report(q1, "linear") == (1.0 if q1 > 0.5 else 0.0)


# ------------------------------------------------------------------ run logs: dilution


def test_gradient_dilution_rms_ratio_by_hand():
    rows = [
        {"step": 0, "grad_pathwise": 1.0, "grad_score_function": 3.0},
        {"step": 1, "loss": 0.5},  # no gradient terms logged at this step
        {"step": 2, "grad_pathwise": 3.0, "grad_score_function": 4.0},
        {"step": 3, "grad_pathwise": None, "grad_score_function": 2.0},
    ]
    d = results.gradient_dilution(rows)
    assert d["steps"].tolist() == [0.0, 2.0]
    assert d["ratio"].tolist() == pytest.approx([3.0, 4.0 / 3.0])
    # RMS(sf) = sqrt((9 + 16)/2) = sqrt(12.5); RMS(pw) = sqrt((1 + 9)/2) = sqrt(5)
    assert d["rms_ratio"] == pytest.approx(np.sqrt(12.5 / 5.0))
    assert np.isnan(results.gradient_dilution([{"step": 0}])["rms_ratio"])
    no_pathwise = [{"step": 0, "grad_pathwise": 0.0, "grad_score_function": 2.0}]
    assert results.gradient_dilution(no_pathwise)["rms_ratio"] == np.inf


@pytest.mark.parametrize("ratio", [0.0, 1.0, 3.0, 10.0])
def test_adam_signal_step_follows_one_over_sqrt(ratio):
    # per coordinate: m -> s_i, v -> (1 + ratio^2) s_i^2, so the step along s is
    # lr / sqrt(1 + ratio^2) per coordinate (up to the noise in m and Adam's epsilon)
    got = tutorial.adam_signal_step(ratio, dim=4000, steps=300)
    assert got == pytest.approx(1.0 / np.sqrt(1.0 + ratio**2), rel=0.1)


def test_log_column_skips_missing_and_non_finite():
    rows = [{"step": 0, "x": 1.0}, {"step": 1}, {"step": 2, "x": float("nan")}, {"step": 3, "x": 2}]
    steps, vals = tutorial.log_column(rows, "x")
    assert steps.tolist() == [0.0, 3.0] and vals.tolist() == [1.0, 2.0]
    assert results.rms([3.0, 4.0]) == pytest.approx(np.sqrt(12.5))


# ---------------------------------------------------------------------- shipped runs


def _fake_run(root, group, variant, method, init, seed=0, task="verify", **extra):
    path = root / group / variant
    (path / "eval").mkdir(parents=True)
    cfg = {"method": method, "task": task, "seed": seed, "init": init, "steps": 10, "beta": 0.0}
    cfg.update(extra)
    (path / "config.json").write_text(json.dumps(cfg))
    (path / "eval" / "test.jsonl").write_text("{}\n")  # discover_runs does not read it
    return path


def test_discover_runs_finds_stage2_parents(tmp_path):
    runs = {
        "runs/v-s0/calibrate": _fake_run(tmp_path, "v-s0", "calibrate", "calibrate", "base"),
        "runs/v-s0/reinforce": _fake_run(
            tmp_path, "v-s0", "reinforce", "reinforce", "runs/v-s0/calibrate/final"
        ),
        "runs/v-s1/reinforce": _fake_run(
            tmp_path, "v-s1", "reinforce", "reinforce", "runs/v-s1/calibrate/final", seed=1
        ),
        "runs/v-s0/anchor": _fake_run(
            tmp_path,
            "v-s0",
            "anchor",
            "reinforce",
            "runs/v-s0/calibrate/final",
            outcome_reward=False,
        ),
        "runs/a/sft": _fake_run(tmp_path, "a", "sft", "sft", "base", task="aleatoric"),
    }
    infos = {i["name"]: i for i in tutorial.discover_runs(runs, task="verify")}
    assert set(infos) == {
        "runs/v-s0/calibrate",
        "runs/v-s0/reinforce",
        "runs/v-s0/anchor",
        "runs/v-s1/reinforce",
    }
    assert infos["runs/v-s0/reinforce"]["parent"] == "runs/v-s0/calibrate"
    assert infos["runs/v-s0/anchor"]["parent"] == "runs/v-s0/calibrate"
    # the anchor-only fork is told apart by its config, not its directory name
    assert infos["runs/v-s0/anchor"]["outcome_reward"] is False
    assert infos["runs/v-s0/reinforce"]["outcome_reward"] is None  # not in its config
    assert infos["runs/v-s1/reinforce"]["parent"] is None  # its stage-1 run is not shipped
    assert infos["runs/v-s0/calibrate"]["parent"] is None
    assert infos["runs/v-s1/reinforce"]["variant"] == "reinforce"
    assert infos["runs/v-s1/reinforce"]["group"] == "v-s1"
    assert infos["runs/v-s1/reinforce"]["seed"] == 1


def test_largest_group_prefers_most_runs_then_name():
    infos = [{"group": g} for g in ("s2", "s1", "s2", "s1", "s0")]
    assert tutorial.largest_group(infos) == "s1"  # s1 and s2 tie at 2: first by name
    assert tutorial.largest_group(infos + [{"group": "s2"}]) == "s2"
    assert tutorial.largest_group([]) is None


def test_slider_figure_visibility():
    frames = [[go.Scatter(x=[0], y=[j]), go.Scatter(x=[1], y=[j])] for j in range(3)]
    fig = tutorial.slider_figure(frames, ["a", "b", "c"], active=1, static=[go.Scatter()])
    assert [t.visible for t in fig.data] == [None, False, False, True, True, False, False]
    steps = fig.layout.sliders[0].steps
    assert steps[2].args[0]["visible"] == [True, False, False, False, False, True, True]
    assert [s.label for s in steps] == ["a", "b", "c"]
    with pytest.raises(ValueError):
        tutorial.slider_figure([[go.Scatter()], []], ["a", "b"])


# ---------------------------------------------------------------------------- routing


def test_threshold_for_risk_observed_and_predicted():
    conf = np.array([0.99, 0.95, 0.9, 0.8, 0.7, 0.6])
    correct = np.array([1, 1, 0, 1, 1, 0], bool)
    # prefix error rates: 0, 0, 1/3, 1/4, 1/5, 2/6 -> largest k with <= 0.25 is k = 5
    # (the prefix k = 3 above the budget does not stop it), with <= 0.2 also k = 5
    assert routing.threshold_for_risk(conf, correct, eps=0.25) == 0.7
    assert routing.threshold_for_risk(conf, correct, eps=0.19) == 0.95
    assert routing.threshold_for_risk(conf, correct, eps=0.0) == 0.95
    assert routing.threshold_for_risk(conf, ~correct, eps=0.0) == float("inf")
    # predicted errors 0.01, 0.05, 0.1, 0.2, ...: prefix means 0.01, 0.03, 0.0533, 0.09
    assert routing.threshold_for_risk(conf, None, eps=0.06) == 0.9


def test_selective_risk_by_hand():
    conf = np.array([0.99, 0.95, 0.9, 0.8, 0.7, 0.6])
    correct = np.array([1, 1, 0, 1, 1, 0], bool)
    r = routing.selective_risk(conf, correct, 0.8)
    assert r == {"coverage": 4 / 6, "risk": 1 / 4, "decided": 4.0, "errors": 1.0}
    assert routing.selective_risk(conf, correct, 2.0)["risk"] == 0.0
    # the threshold from the dev set reproduces Cov@eps on the same set
    t = routing.threshold_for_risk(conf, correct, 0.25)
    assert routing.selective_risk(conf, correct, t)["coverage"] == pytest.approx(
        metrics.coverage_at_risk(conf, correct, 0.25)
    )


def test_bayes_actions_with_asymmetric_costs_and_escalation():
    # verify-like: option 0 = "Y" (accept), 1 = "N" (reject). Accepting a wrong proposal
    # costs 10, rejecting a right one 1, escalating 0.5 whatever the truth.
    cost = routing.decision_cost_matrix(2, [[0.0, 10.0], [1.0, 0.0]], escalate=0.5)
    assert cost.tolist() == [[0.0, 10.0], [1.0, 0.0], [0.5, 0.5]]
    probs = np.array([[0.99, 0.01], [0.9, 0.1], [0.3, 0.7], [0.6, 0.4]])
    # expected costs: accept 10 p_N, reject p_Y, escalate 0.5
    #   item 0: 0.1, 0.99, 0.5 -> accept; item 1: 1.0, 0.9, 0.5 -> escalate
    #   item 2: 7.0, 0.3, 0.5 -> reject; item 3: 4.0, 0.6, 0.5 -> escalate
    ec = routing.expected_costs(probs, cost)
    assert ec[1].tolist() == pytest.approx([1.0, 0.9, 0.5])
    acts = routing.bayes_actions(probs, cost)
    assert acts.tolist() == [0, 2, 1, 2]
    assert routing.realized_costs(acts, [0, 1, 0, 0], cost).tolist() == [0.0, 0.5, 1.0, 0.5]
    # default: 0-1 loss, no escalation
    assert routing.decision_cost_matrix(3).tolist() == (1 - np.eye(3)).tolist()


def test_cascade_mixes_direct_and_reason_accuracy():
    direct = np.array([[0.95, 0.05], [0.6, 0.4], [0.2, 0.8], [0.55, 0.45], [0.1, 0.9]])
    reason = np.array([[0.1, 0.9], [0.9, 0.1], [0.7, 0.3], [0.2, 0.8], [0.3, 0.7]])
    labels = np.array([0, 0, 1, 1, 1])
    tokens = np.array([40, 42, 44, 46, 48])
    probs, routed = routing.cascade(direct, reason, 0.75)
    # direct confidences 0.95, 0.6, 0.8, 0.55, 0.9: items 1 and 3 go to reasoning
    assert routed.tolist() == [False, True, False, True, False]
    assert probs[1].tolist() == [0.9, 0.1] and probs[0].tolist() == [0.95, 0.05]
    curve = routing.cascade_curve(direct, reason, labels, tokens, [0.0, 0.75, 1.01])
    # threshold 0: all direct -> correct 1, 1, 1, 0, 1 -> 0.8, no tokens
    # threshold 1.01: all reasoned -> correct 0, 1, 0, 1, 1 -> 0.6, tokens mean 44
    # threshold 0.75: kept items 0, 2, 4 (all right directly), routed 1, 3 (both right)
    assert curve["accuracy"].tolist() == pytest.approx([0.8, 1.0, 0.6])
    assert curve["reason_fraction"].tolist() == pytest.approx([0.0, 0.4, 1.0])
    assert curve["mean_tokens"].tolist() == pytest.approx([0.0, (42 + 46) / 5, 44.0])
    # the mix identity: (1 - f) acc_direct(kept) + f acc_reason(routed)
    f = routed.mean()
    mix = (1 - f) * (direct[~routed].argmax(1) == labels[~routed]).mean() + f * (
        reason[routed].argmax(1) == labels[routed]
    ).mean()
    assert curve["accuracy"][1] == pytest.approx(mix)
    assert curve["brier"][0] == pytest.approx(metrics.brier(direct, labels))
