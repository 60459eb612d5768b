"""Paired bootstrap and sign-flip tests: known answers, brute-force enumeration."""

import itertools
import math

import numpy as np
import pytest
import torch

from rlcd_lab import metrics as M
from rlcd_lab.math import stats as S

# ---------------------------------------------------------------------------------------
# paired_bootstrap
# ---------------------------------------------------------------------------------------


def test_bootstrap_identical_inputs_give_zero_and_a_zero_ci():
    a = np.random.default_rng(0).normal(size=50)
    out = S.paired_bootstrap(a, a.copy(), n=500)
    assert out == {"diff": 0.0, "ci_low": 0.0, "ci_high": 0.0, "se": 0.0}


def test_bootstrap_matches_a_loop_reference_with_the_same_draws():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=30), rng.normal(size=30) + 0.2
    out = S.paired_bootstrap(a, b, n=300, seed=7)
    # reference: the documented algorithm, one replicate at a time
    ref_rng = np.random.default_rng(7)
    idx = ref_rng.integers(0, 30, size=(300, 30))
    d = [a[i] - b[i] for i in range(30)]
    reps = [sum(d[j] for j in row) / 30 for row in idx]
    assert out["diff"] == pytest.approx(sum(d) / 30)
    assert out["ci_low"] == pytest.approx(float(np.percentile(reps, 2.5)))
    assert out["ci_high"] == pytest.approx(float(np.percentile(reps, 97.5)))
    # deterministic for a seed; torch tensors accepted
    assert S.paired_bootstrap(torch.tensor(a), torch.tensor(b), n=300, seed=7) == out


def test_bootstrap_custom_stat_with_and_without_axis():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=25), rng.normal(size=25)
    with_axis = S.paired_bootstrap(a, b, n=200, seed=3, stat=np.mean)
    without_axis = S.paired_bootstrap(a, b, n=200, seed=3, stat=lambda x: float(np.mean(x)))
    assert without_axis == pytest.approx(with_axis)
    med = S.paired_bootstrap(a, b, n=200, seed=3, stat=np.median)
    assert med["diff"] == pytest.approx(float(np.median(a - b)))
    assert med["ci_low"] <= med["ci_high"]


def test_bootstrap_ci_covers_the_true_difference_at_about_95_percent():
    # a_i - b_i ~ N(0.5, 1): the true mean difference is 0.5. Over 40 simulated test sets
    # the 95% interval should miss about 2 times (sd of the count ~ 1.4); allow 6.
    misses, widths = 0, []
    for rep in range(40):
        rng = np.random.default_rng(100 + rep)
        b = rng.normal(size=200)
        a = b + 0.5 + rng.normal(size=200)
        out = S.paired_bootstrap(a, b, n=1000, seed=rep)
        misses += not (out["ci_low"] <= 0.5 <= out["ci_high"])
        widths.append(out["ci_high"] - out["ci_low"])
    assert misses <= 6
    # normal theory: width ~ 2 * 1.96 * 1 / sqrt(200) = 0.277
    assert np.mean(widths) == pytest.approx(2 * 1.96 / math.sqrt(200), rel=0.1)


# ---------------------------------------------------------------------------------------
# sign_flip_test
# ---------------------------------------------------------------------------------------


def ref_exact_sign_flip(d):
    """p = #{s : |sum s_i d_i| >= |sum d_i|} / 2^N, enumerating every sign vector."""
    t_obs = abs(sum(d))
    hits = 0
    for signs in itertools.product((1, -1), repeat=len(d)):
        if abs(sum(s * x for s, x in zip(signs, d, strict=True))) >= t_obs - 1e-12:
            hits += 1
    return hits / 2 ** len(d)


def test_sign_flip_identical_inputs_give_p_one():
    a = np.random.default_rng(0).normal(size=100)
    assert S.sign_flip_test(a, a.copy(), n=500) == 1.0  # Monte Carlo branch
    assert S.sign_flip_test(a[:8], a[:8].copy()) == 1.0  # exact branch


def test_sign_flip_hand_worked_exact_cases():
    # d = (1, 2, 3): signed sums 6, 4, 2, 0, 0, -2, -4, -6; |.| >= 6 twice -> 2/8
    assert S.sign_flip_test([1, 2, 3], [0, 0, 0]) == 0.25
    # d = (2, 1): sums 3, 1, -1, -3 -> 2/4
    assert S.sign_flip_test([3, 1], [1, 0]) == 0.5
    # d = (1, -1): T = 0, every flip has |T*| >= 0 -> p = 1
    assert S.sign_flip_test([1, 0], [0, 1]) == 1.0
    # N = 1: the two flips give |T*| = |T| -> p = 1
    assert S.sign_flip_test([5.0], [1.0]) == 1.0
    # five equal positive differences: only all-plus and all-minus reach |T| -> 2/32
    assert S.sign_flip_test(np.ones(5), np.zeros(5)) == 2 / 32


@pytest.mark.parametrize("n_items", [4, 10, 16])
def test_sign_flip_exact_matches_enumeration(n_items):
    rng = np.random.default_rng(n_items)
    a, b = rng.normal(size=n_items) + 0.4, rng.normal(size=n_items)
    d = (a - b).tolist()
    assert S.sign_flip_test(a, b) == pytest.approx(ref_exact_sign_flip(d))


def test_sign_flip_monte_carlo_agrees_with_exact():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=12) + 0.5, rng.normal(size=12)
    exact = S.sign_flip_test(a, b)
    mc = S.sign_flip_test(a, b, n=20000, seed=1, exact_max=0)  # force Monte Carlo
    # binomial sd of the estimate: sqrt(p (1 - p) / 20000) <= 0.0036
    assert mc == pytest.approx(exact, abs=0.015)
    # Monte Carlo p-values never reach 0: the floor is 1 / (n + 1)
    big = S.sign_flip_test(np.ones(50) + 5, np.zeros(50), n=999)
    assert big == 1 / 1000


def test_sign_flip_large_shift_and_null_calibration():
    rng = np.random.default_rng(4)
    b = rng.normal(size=200)
    assert S.sign_flip_test(b + 1.0 + rng.normal(size=200), b, n=2000) < 0.01
    # under H0 (symmetric differences) p < 0.05 should happen ~5% of the time
    rejections = 0
    for rep in range(40):
        r = np.random.default_rng(200 + rep)
        rejections += S.sign_flip_test(r.normal(size=40), r.normal(size=40), n=400) < 0.05
    assert rejections <= 7  # expected 2, sd ~ 1.4


# ---------------------------------------------------------------------------------------
# AURC: bootstrap and swap test
# ---------------------------------------------------------------------------------------


def simulate_model(rng, n, skill):
    """Correctness ~ Bernoulli(0.7); confidence = skill * correct + noise (higher = better
    ranking), squashed into (0, 1)."""
    correct = rng.random(n) < 0.7
    conf = 1 / (1 + np.exp(-(skill * correct + rng.normal(size=n))))
    return conf, correct


def test_aurc_bootstrap_identical_and_observed_values():
    rng = np.random.default_rng(0)
    conf, correct = simulate_model(rng, 60, 1.0)
    out = S.paired_bootstrap_curve(conf, correct, conf, correct, n=200)
    assert out["diff"] == 0.0 and out["ci_low"] == 0.0 and out["ci_high"] == 0.0
    conf_b, correct_b = simulate_model(rng, 60, 0.0)
    out = S.paired_bootstrap_curve(conf, correct, conf_b, correct_b, n=200)
    assert out["a"] == M.aurc(conf, correct)
    assert out["b"] == M.aurc(conf_b, correct_b)
    assert out["diff"] == pytest.approx(out["a"] - out["b"])


def test_aurc_bootstrap_matches_a_loop_reference():
    rng = np.random.default_rng(1)
    ca, ra = simulate_model(rng, 25, 2.0)
    cb, rb = simulate_model(rng, 25, 0.5)
    out = S.paired_bootstrap_curve(ca, ra, cb, rb, n=100, seed=5)
    idx = np.random.default_rng(5).integers(0, 25, size=(100, 25))
    reps = [M.aurc(ca[i], ra[i]) - M.aurc(cb[i], rb[i]) for i in idx]
    assert out["ci_low"] == pytest.approx(float(np.percentile(reps, 2.5)))
    assert out["ci_high"] == pytest.approx(float(np.percentile(reps, 97.5)))


def test_aurc_bootstrap_ci_covers_the_population_difference():
    # "true" AURC difference from one very large sample of the same two models
    big = np.random.default_rng(999)
    ca, ra = simulate_model(big, 200_000, 2.0)
    cb, rb = simulate_model(big, 200_000, 0.0)
    truth = M.aurc(ca, ra) - M.aurc(cb, rb)
    assert truth < -0.05  # the skilled ranking is clearly better
    misses = 0
    for rep in range(25):
        rng = np.random.default_rng(rep)
        ca, ra = simulate_model(rng, 300, 2.0)
        cb, rb = simulate_model(rng, 300, 0.0)
        out = S.paired_bootstrap_curve(ca, ra, cb, rb, n=400, seed=rep)
        misses += not (out["ci_low"] <= truth <= out["ci_high"])
    # AURC is slightly biased at finite N, so allow more than the nominal ~1.25 misses
    assert misses <= 5


def test_aurc_swap_test_hand_worked_and_enumeration():
    # A: conf (0.9, 0.8), correct (1, 0): risks 0, 1/2 -> AURC 1/4
    # B: conf (0.9, 0.8), correct (0, 1): risks 1, 1/2 -> AURC 3/4; T = -1/2
    # swap item 0: A' correct (0, 0) -> 1, B' (1, 1) -> 0: T = 1
    # swap item 1: A' (1, 1) -> 0, B' (0, 0) -> 1: T = -1; swap both: T = 1/2
    # all four |T*| >= 1/2 -> p = 1
    conf = [0.9, 0.8]
    assert S.sign_flip_test_curve(conf, [1, 0], conf, [0, 1]) == 1.0
    # brute-force enumeration of every swap pattern on a random small case
    rng = np.random.default_rng(2)
    ca, ra = simulate_model(rng, 9, 3.0)
    cb, rb = simulate_model(rng, 9, -1.0)
    t_obs = abs(M.aurc(ca, ra) - M.aurc(cb, rb))
    hits = 0
    for swap in itertools.product((False, True), repeat=9):
        s = np.array(swap)
        ta = M.aurc(np.where(s, cb, ca), np.where(s, rb, ra))
        tb = M.aurc(np.where(s, ca, cb), np.where(s, ra, rb))
        hits += abs(ta - tb) >= t_obs - 1e-12
    assert S.sign_flip_test_curve(ca, ra, cb, rb) == pytest.approx(hits / 2**9)


def test_aurc_swap_test_identical_and_large_shift():
    rng = np.random.default_rng(3)
    conf, correct = simulate_model(rng, 80, 1.0)
    assert S.sign_flip_test_curve(conf, correct, conf, correct, n=300) == 1.0
    # same correctness; A ranks every correct item first, B ranks every error first
    correct = rng.random(150) < 0.6
    good = np.where(correct, 0.9, 0.5) + rng.uniform(0, 0.05, 150)
    bad = np.where(correct, 0.5, 0.9) + rng.uniform(0, 0.05, 150)
    p = S.sign_flip_test_curve(good, correct, bad, correct, n=500)
    assert p < 0.01
    assert p == 1 / 501  # no random swap pattern gets close


def test_curve_stats_per_row_equal_the_metrics():
    rng = np.random.default_rng(4)
    conf = rng.random((30, 12)).round(1)  # ties, to exercise the stable ranking
    correct = rng.random((30, 12)) < 0.6
    correct[0] = False  # Cov@eps = 0 when even the top item is wrong
    aurc = S.aurc_rows(conf, correct.astype(float))
    cov = S.cov_rows(0.2)(conf, correct.astype(float))
    for i in range(30):
        assert aurc[i] == pytest.approx(M.aurc(conf[i], correct[i]), abs=1e-15)
        assert cov[i] == M.coverage_at_risk(conf[i], correct[i], 0.2)


def test_curve_bootstrap_resamples_items_jointly_across_seeds():
    # 3 seeds on the same 20 items: statistic = mean over seeds of the per-seed difference,
    # each replicate applies one item draw to every seed (loop reference)
    rng = np.random.default_rng(6)
    a = [simulate_model(rng, 20, 2.0) for _ in range(3)]
    b = [simulate_model(rng, 20, 0.5) for _ in range(3)]
    ca, ra = np.array([x[0] for x in a]), np.array([x[1] for x in a])
    cb, rb = np.array([x[0] for x in b]), np.array([x[1] for x in b])
    for stat, metric in (
        (S.aurc_rows, M.aurc),
        (S.cov_rows(0.25), lambda c, r: M.coverage_at_risk(c, r, 0.25)),
    ):
        out = S.paired_bootstrap_curve(ca, ra, cb, rb, stat=stat, n=150, seed=2)
        per_seed = [metric(ca[s], ra[s]) - metric(cb[s], rb[s]) for s in range(3)]
        assert out["diff"] == pytest.approx(np.mean(per_seed), abs=1e-12)
        idx = np.random.default_rng(2).integers(0, 20, size=(150, 20))
        reps = [
            np.mean([metric(ca[s][i], ra[s][i]) - metric(cb[s][i], rb[s][i]) for s in range(3)])
            for i in idx
        ]
        assert out["ci_low"] == pytest.approx(float(np.percentile(reps, 2.5)), abs=1e-12)
        assert out["ci_high"] == pytest.approx(float(np.percentile(reps, 97.5)), abs=1e-12)


def test_curve_swap_test_swaps_items_jointly_across_seeds():
    rng = np.random.default_rng(7)
    a = [simulate_model(rng, 8, 3.0) for _ in range(2)]
    b = [simulate_model(rng, 8, -1.0) for _ in range(2)]
    ca, ra = np.array([x[0] for x in a]), np.array([x[1] for x in a])
    cb, rb = np.array([x[0] for x in b]), np.array([x[1] for x in b])

    def t(swap):
        s = np.array(swap)
        return np.mean(
            [
                M.aurc(np.where(s, cb[k], ca[k]), np.where(s, rb[k], ra[k]))
                - M.aurc(np.where(s, ca[k], cb[k]), np.where(s, ra[k], rb[k]))
                for k in range(2)
            ]
        )

    t_obs = abs(t([False] * 8))
    hits = sum(abs(t(sw)) >= t_obs - 1e-12 for sw in itertools.product((False, True), repeat=8))
    assert S.sign_flip_test_curve(ca, ra, cb, rb) == pytest.approx(hits / 2**8)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auroc_is_the_share_of_right_wrong_pairs_ranked_right(seed):
    """Brute force over every (right, wrong) pair, ties counting one half; coarse
    confidences so that ties occur."""
    rng = np.random.default_rng(seed)
    conf = rng.integers(0, 5, size=40) / 4
    correct = rng.random(40) < 0.6
    pairs = [
        1.0 if r > w else 0.5 if r == w else 0.0
        for r, w in itertools.product(conf[correct], conf[~correct])
    ]
    assert M.auroc(conf, correct) == pytest.approx(np.mean(pairs), abs=1e-12)
    assert M.auroc(conf, ~correct) == pytest.approx(1 - np.mean(pairs), abs=1e-12)
    with pytest.raises(ValueError, match="right and wrong"):
        M.auroc(conf, np.ones(40, bool))


def test_wilson_interval_hand_computed():
    # k=5, n=10, z=1.96: (0.5 + 0.19208 -+ 1.96 sqrt(0.025 + 0.009604)) / 1.38416
    lo, hi = S.wilson_interval(5, 10)
    half = 1.959963984540054 * math.sqrt(0.025 + 1.959963984540054**2 / 400)
    centre = 0.5 + 1.959963984540054**2 / 20
    assert (lo, hi) == pytest.approx(
        (
            (centre - half) / (1 + 1.959963984540054**2 / 10),
            (centre + half) / (1 + 1.959963984540054**2 / 10),
        )
    )
    assert (lo, hi) == pytest.approx((0.2366, 0.7634), abs=1e-4)  # the textbook value
    assert S.wilson_interval(0, 20)[0] == 0.0 and S.wilson_interval(20, 20)[1] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="0 <= k <= n"):
        S.wilson_interval(3, 2)
