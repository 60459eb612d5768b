"""Post-hoc calibrators (issue 63, item 1): each fit checked against a reference, fitted
on dev only, and their rows in the shipped summaries."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rlcd_lab import metrics
from rlcd_lab.math import calibrators as cal
from rlcd_lab.reports import posthoc, report
from rlcd_lab.tasks.features import QUESTION_FEATURES, carries, feature_matrix, term_count

RESULTS = Path(__file__).resolve().parents[1] / "assets" / "results"


def _brute_isotonic(y: np.ndarray) -> np.ndarray:
    """The monotone fit by brute force over small integer problems: the isotonic
    regression's value at i is max_{a <= i} min_{b >= i} mean(y[a..b]) (the min-max
    formula, Barlow et al. 1972, Theorem 1.4)."""
    n = len(y)
    return np.array(
        [max(min(y[a : b + 1].mean() for b in range(i, n)) for a in range(i + 1)) for i in range(n)]
    )


@pytest.mark.parametrize("seed", range(6))
def test_isotonic_matches_the_min_max_formula_and_sklearn(seed):
    rng = np.random.default_rng(seed)
    score = rng.integers(0, 6, size=15).astype(float)  # ties in the score
    y = (rng.random(15) < 0.2 + 0.12 * score).astype(float)
    x, v = cal.fit_isotonic(score, y)
    # pool equal scores first, weighting by their count: expand to one entry per item
    order = np.argsort(score, kind="stable")
    pooled = np.array([y[score == s].mean() for s in score[order]])
    brute = _brute_isotonic(pooled)
    assert cal.predict_isotonic((x, v), score[order]) == pytest.approx(brute)
    assert np.all(np.diff(v) >= -1e-15)
    sk = pytest.importorskip("sklearn.isotonic")
    ref = sk.IsotonicRegression(out_of_bounds="clip").fit(score, y)
    assert cal.predict_isotonic((x, v), x) == pytest.approx(ref.predict(x))


def test_isotonic_predicts_the_step_below():
    x, v = cal.fit_isotonic([0.1, 0.5, 0.9], [0, 1, 1])
    assert cal.predict_isotonic((x, v), [0.0, 0.1, 0.3, 0.5, 0.95]).tolist() == [0, 0, 0, 1, 1]


def test_logistic_is_the_stationary_point_of_the_penalized_likelihood():
    """Gradient zero at the fit (Newton's fixed point), and with no penalty it matches
    sklearn's unpenalized fit where installed; one feature in closed form: with y = x on
    {0, 1} data of equal counts the fit is logit of each cell's mean."""
    rng = np.random.default_rng(0)
    f = rng.normal(size=(300, 3))
    y = (rng.random(300) < 1 / (1 + np.exp(-(0.5 + f @ [1.0, -2.0, 0.3])))).astype(float)
    w = cal.fit_logistic(f, y)
    x = np.column_stack([np.ones(300), f])
    p = 1 / (1 + np.exp(-(x @ w)))
    pen = cal.RIDGE * 300 * np.r_[0.0, w[1:]]
    assert np.abs(x.T @ (p - y) + pen).max() < 1e-9
    w0 = cal.fit_logistic(f, y, ridge=0.0)
    # closed form on a binary feature: cells of 4/10 and 7/10 right
    xb = np.r_[np.zeros(10), np.ones(10)]
    yb = np.r_[np.ones(4), np.zeros(6), np.ones(7), np.zeros(3)]
    wb = cal.fit_logistic(xb, yb, ridge=0.0)
    logit = lambda q: np.log(q / (1 - q))  # noqa: E731
    assert wb == pytest.approx([logit(0.4), logit(0.7) - logit(0.4)], abs=1e-9)
    lm = pytest.importorskip("sklearn.linear_model")
    ref = lm.LogisticRegression(penalty=None, tol=1e-12, max_iter=10000).fit(f, y)
    assert w0 == pytest.approx(np.r_[ref.intercept_, ref.coef_[0]], abs=1e-5)


def test_group_temperature_is_the_temperature_of_each_group():
    rng = np.random.default_rng(1)
    z = rng.normal(size=(60, 2)) * 4
    y = rng.integers(0, 2, 60)
    groups = [i % 3 for i in range(60)]
    by_group, t_all = cal.fit_group_temperature(z, y, groups, min_group=20)
    for g in range(3):
        idx = [i for i in range(60) if groups[i] == g]
        assert by_group[g] == metrics.fit_temperature(z[idx], y[idx])
    assert t_all == metrics.fit_temperature(z, y)
    assert cal.fit_group_temperature(z, y, groups, min_group=21)[0] == {}  # too few each


def test_question_features_read_the_terms_never_the_proposal():
    assert term_count("47+38+16=91?") == 3 and carries("47+38+16=91?") == 2
    assert carries("47+38+16=91?") == carries("47+38+16=101?")
    assert {f.task for f in QUESTION_FEATURES} >= {"verify", "verify-mixed"}
    names, rows = feature_matrix("verify-mixed", ["10+20=30?"])
    assert names == ["terms", "carries"] and rows == [[2.0, 0.0]]
    with pytest.raises(ValueError, match="not a verify question"):
        carries("fact abc?")


def _split(rng, n):
    logits = rng.normal(size=(n, 2)) * 3
    labels = rng.integers(0, 2, n)
    feats = rng.integers(2, 4, size=(n, 1)).astype(float)
    return posthoc.Split(logits, metrics.softmax(logits / 2.0), labels, feats)


@pytest.mark.parametrize("c", posthoc.CALIBRATORS, ids=lambda c: c.name)
def test_a_calibrator_reads_dev_only(c):
    """The fitted calibrator is a function of dev: test labels changed, the test
    predictions are the same; dev labels changed, they move."""
    rng = np.random.default_rng(2)
    dev, test = _split(rng, 120), _split(rng, 80)
    flipped = posthoc.Split(test.logits, test.probs, 1 - test.labels, test.features)
    assert c.fit(dev)(test) == pytest.approx(c.fit(dev)(flipped))
    other = posthoc.Split(dev.logits, dev.probs, rng.integers(0, 2, 120), dev.features)
    assert not np.allclose(c.fit(dev)(test), c.fit(other)(test))
    p = c.fit(dev)(test)
    assert p.sum(1) == pytest.approx(np.ones(80))


def test_with_confidence_keeps_the_others_in_proportion():
    p = np.array([[0.6, 0.3, 0.1, 0.0], [1.0, 0.0, 0.0, 0.0]])
    present = np.array([[True, True, True, False], [True, True, True, True]])
    out = posthoc.with_confidence(p, np.array([0.8, 0.5]), present)
    assert out[0] == pytest.approx([0.8, 0.15, 0.05, 0.0])  # the absent option stays 0
    assert out[1] == pytest.approx([0.5, 0.5 / 3, 0.5 / 3, 0.5 / 3])  # evenly: none held any


def test_cross_fitted_dev_brier_uses_each_fold_held_out():
    """Item i is predicted by the calibrator fitted without fold i mod 5: the Brier
    score equals the loop over folds by hand."""
    rng = np.random.default_rng(3)
    dev = _split(rng, 50)
    c = posthoc.BY_NAME["isotonic"]
    pred = np.zeros_like(dev.probs)
    for f in range(5):
        held = np.arange(50) % 5 == f
        pred[held] = c.fit(dev.take(np.flatnonzero(~held)))(dev.take(np.flatnonzero(held)))
    assert posthoc.cv_brier(dev, c) == pytest.approx(metrics.brier(pred, dev.labels))


@pytest.mark.parametrize("task", ["verify", "verify-mixed", "facts"])
def test_shipped_summaries_hold_the_calibrators_and_the_headline_row(task):
    """Each calibrator on GRPO is a run of the summary (role post-hoc) with RLCD's paired
    test against it; the best on dev is the lowest cross-fitted dev Brier; the headline
    (RLCD vs GRPO+TS) gains the row against it, and where the calibrator closes a gap
    that held against GRPO+TS the verdict says so."""
    summary = json.loads((RESULTS / task / "summary.json").read_text())
    ph = summary["posthoc"]
    assert ph["best"] == min(ph["cv_dev_brier"], key=ph["cv_dev_brier"].get)
    for name in ph["cv_dev_brier"]:
        run = f"{ph['base']}+{name}"
        assert summary["runs"][run]["role"] == "post-hoc"
        assert f"reinforce - {run}" in summary["paired"]
    judged = {j.row: j for j in report.judge(summary)}
    rows = [r for r in judged if r.startswith("RLCD vs GRPO+TS + best dev-fitted calibrator")]
    assert rows
    for r in rows:
        metric = r.split(": ")[1].split(",")[0]
        against_ts = judged.get(r.replace(" + best dev-fitted calibrator", ""))
        held = against_ts is not None and against_ts.verdict.startswith("reproduces")
        closed = held and not judged[r].verdict.startswith("reproduces")
        assert judged[r].verdict.startswith("gap closed by the calibrator") == closed, metric


def test_the_readme_reads_the_calibrator_on_verify_mixed_as_its_summary_holds_it():
    """The README's reading of the post-hoc baseline on `verify-mixed`: the AURC of GRPO
    recalibrated by the best dev-fitted calibrator, RLCD's difference against it (not
    significant: the gap closed) and the t test across seeds against GRPO+TS (significant
    at ten seeds)."""
    readme = " ".join((RESULTS.parents[1] / "README.md").read_text(encoding="utf-8").split())
    summary = json.loads((RESULTS / "verify-mixed" / "summary.json").read_text())
    best = summary["posthoc"]["best"]
    runs, paired = summary["runs"], summary["paired"]
    cal_run = f"grpo-matched+{best}"
    d = paired[f"reinforce - {cal_run}"]["aurc"]
    assert d["ci_low"] < 0 < d["ci_high"]  # "not significant"
    seeds = paired["reinforce - grpo-matched"]["aurc"]["seeds"]
    assert seeds["p_t"] < 0.05 and len(seeds["diffs"]) == 10
    aurc = {r: runs[r]["aurc"]["mean"] for r in (cal_run, "grpo-matched", "reinforce")}
    assert (
        f"has AURC {aurc[cal_run]:.3f} (GRPO+TS "
        f"{aurc['grpo-matched']:.3f}, RLCD {aurc['reinforce']:.3f}), "
        f"and RLCD's edge over it is {d['diff']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}], "
        f"not significant" in readme
    )
    assert f"across items and across seeds (t test p = {seeds['p_t']:.2f})" in readme
    assert best == "logistic" and "through a logistic calibrator on its scaled margin" in readme
