"""Metrics against brute-force references (plain loops) and hand-worked cases."""

import itertools
import math

import numpy as np
import pytest
import torch

from rlcd_lab import metrics as M

# ---------------------------------------------------------------------------------------
# Brute-force references: plain Python loops over items, written from the definitions.
# ---------------------------------------------------------------------------------------


def ref_argmax(row):
    best = 0
    for k in range(len(row)):
        if row[k] > row[best]:  # strict: ties keep the lowest index
            best = k
    return best


def ref_accuracy(p, y):
    return sum(ref_argmax(p[i]) == y[i] for i in range(len(p))) / len(p)


def ref_nll(p, y, eps=1e-12):
    return sum(-math.log(max(p[i][y[i]], eps)) for i in range(len(p))) / len(p)


def ref_brier(p, y):
    total = 0.0
    for i in range(len(p)):
        for k in range(len(p[i])):
            total += (p[i][k] - (1.0 if k == y[i] else 0.0)) ** 2
    return total / len(p)


def ref_bin(c, n_bins):
    if c == 0.0:
        return 0
    for b in range(n_bins):
        if b / n_bins < c <= (b + 1) / n_bins:
            return b
    raise AssertionError(c)


def ref_ece_conf(conf, correct, n_bins):
    n = len(conf)
    total = 0.0
    for b in range(n_bins):
        members = [i for i in range(n) if ref_bin(conf[i], n_bins) == b]
        if not members:
            continue
        acc = sum(correct[i] for i in members) / len(members)
        cb = sum(conf[i] for i in members) / len(members)
        total += len(members) / n * abs(acc - cb)
    return total


def ref_conf_correct(p, y):
    conf = [max(row) for row in p]
    correct = [ref_argmax(p[i]) == y[i] for i in range(len(p))]
    return conf, correct


def ref_groups(conf):
    # tie groups of equal confidence, most confident first: [(confidence, [items])]
    groups = {}
    for i, c in enumerate(conf):
        groups.setdefault(c, []).append(i)
    return sorted(groups.items(), key=lambda g: -g[0])


def ref_curve(conf, errors):
    # (risks, ends): the k-th risk is the expected error rate of the top k when tied items
    # come in random order: a group with e errors in n items adds e/n per position
    risks, ends, before, k = [], [], 0.0, 0
    for _, items in ref_groups(conf):
        e = sum(errors[i] for i in items)
        for j in range(1, len(items) + 1):
            k += 1
            risks.append((before + j * e / len(items)) / k)
            ends.append(j == len(items))
        before += e
    return risks, ends


def ref_risks(conf, correct):
    return ref_curve(conf, [0 if ok else 1 for ok in correct])[0]


def ref_aurc(conf, correct):
    risks = ref_risks(conf, correct)
    return sum(risks) / len(risks)


def ref_largest(risks, ends, eps):
    best = 0.0
    for k in range(1, len(risks) + 1):
        if ends[k - 1] and risks[k - 1] <= eps + 1e-12:
            best = k / len(risks)
    return best


def ref_cov_at_risk(conf, correct, eps):
    return ref_largest(*ref_curve(conf, [0 if ok else 1 for ok in correct]), eps)


def ref_pred_cov(p, eps):
    conf = [max(row) for row in p]
    return ref_largest(*ref_curve(conf, [1.0 - c for c in conf]), eps)


def ref_temperature_nll(z, y, T):
    total = 0.0
    for i in range(len(z)):
        logsumexp = math.log(sum(math.exp(v / T) for v in z[i]))
        total += logsumexp - z[i][y[i]] / T
    return total / len(z)


def ref_jsd(p, q):
    m = [(a + b) / 2 for a, b in zip(p, q, strict=True)]
    kl_pm = sum(a * math.log2(a / c) for a, c in zip(p, m, strict=True) if a > 0)  # bits
    kl_qm = sum(b * math.log2(b / c) for b, c in zip(q, m, strict=True) if b > 0)
    return 0.5 * kl_pm + 0.5 * kl_qm


def random_case(n, k, seed, ties=False):
    """Probabilities (n, k) and labels; ``ties`` rounds logits so confidences repeat."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, k)) * 2.0
    if ties:
        z = np.round(z)
    p = M.softmax(z)
    y = rng.integers(0, k, size=n)
    return z, p, y


CASES = [
    (n, k, ties, seed)
    for (n, k), ties, seed in itertools.product(
        [(1, 2), (1, 10), (7, 2), (40, 10), (300, 2), (300, 10)], [False, True], [0]
    )
]


# ---------------------------------------------------------------------------------------
# Accuracy, NLL, Brier
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "k", "ties", "seed"), CASES)
def test_scores_match_brute_force(n, k, ties, seed):
    _, p, y = random_case(n, k, seed, ties)
    pl, yl = p.tolist(), y.tolist()
    assert M.accuracy(p, y) == pytest.approx(ref_accuracy(pl, yl), abs=1e-15)
    assert M.nll(p, y) == pytest.approx(ref_nll(pl, yl), rel=1e-12)
    assert M.brier(p, y) == pytest.approx(ref_brier(pl, yl), rel=1e-12)
    assert isinstance(M.brier(p, y), float)


def test_scores_hand_worked():
    p = [[0.7, 0.2, 0.1], [0.7, 0.2, 0.1]]
    y = [0, 2]
    # item 0: (0.7-1)^2 + 0.2^2 + 0.1^2 = 0.09 + 0.04 + 0.01 = 0.14
    # item 1: 0.7^2 + 0.2^2 + (0.1-1)^2 = 0.49 + 0.04 + 0.81 = 1.34 -> mean 0.74
    assert M.brier(p, y) == pytest.approx(0.74)
    # NLL: (-log 0.7 - log 0.1) / 2
    assert M.nll(p, y) == pytest.approx((-math.log(0.7) - math.log(0.1)) / 2)
    assert M.accuracy(p, y) == 0.5
    # argmax ties go to the lowest index: [0.5, 0.5] predicts class 0
    assert M.accuracy([[0.5, 0.5]], [0]) == 1.0
    assert M.accuracy([[0.5, 0.5]], [1]) == 0.0
    # a zero-probability label is clamped at eps = 1e-12, not inf
    assert M.nll([[1.0, 0.0]], [1]) == pytest.approx(-math.log(1e-12))
    # Brier endpoints: confident right 0, confident wrong 2
    assert M.brier([[1.0, 0.0]], [0]) == 0.0
    assert M.brier([[1.0, 0.0]], [1]) == 2.0


def test_torch_inputs_give_the_same_floats():
    _, p, y = random_case(50, 4, 3)
    pt, yt = torch.tensor(p, dtype=torch.float64), torch.tensor(y)
    for fn in (M.accuracy, M.nll, M.brier, M.ece):
        assert fn(pt, yt) == fn(p, y)
    assert M.to_numpy(torch.ones(2, dtype=torch.bfloat16)).dtype == np.float64
    assert M.to_numpy(torch.ones(2, requires_grad=True)).tolist() == [1.0, 1.0]


# ---------------------------------------------------------------------------------------
# ECE
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "k", "ties", "seed"), CASES)
@pytest.mark.parametrize("n_bins", [1, 10, 15])
def test_ece_matches_brute_force(n, k, ties, seed, n_bins):
    _, p, y = random_case(n, k, seed, ties)
    conf, correct = ref_conf_correct(p.tolist(), y.tolist())
    assert M.ece(p, y, n_bins) == pytest.approx(ref_ece_conf(conf, correct, n_bins), abs=1e-12)


def test_ece_hand_worked_and_bin_edges():
    p = [[0.9, 0.1], [0.8, 0.2], [0.4, 0.6], [0.5, 0.5]]
    y = [0, 1, 1, 1]
    # confidences 0.9 (right), 0.8 (wrong), 0.6 (right), 0.5 (wrong: the tie predicts 0).
    # Two bins (0, 0.5] and (0.5, 1]: 0.5 sits on the edge and goes to the first bin.
    # bin 0: {0.5}: acc 0, conf 0.5 -> 1/4 * 0.5 = 0.125
    # bin 1: {0.9, 0.8, 0.6}: acc 2/3, conf 2.3/3 -> 3/4 * |2/3 - 2.3/3| = 3/4 * 0.1 = 0.075
    assert M.ece(p, y, n_bins=2) == pytest.approx(0.2)
    bins = M.reliability_bins([0.9, 0.8, 0.6, 0.5], [1, 0, 1, 0], n_bins=2)
    assert bins["count"].tolist() == [1, 3]
    assert bins["accuracy"].tolist() == pytest.approx([0.0, 2 / 3])
    assert bins["confidence"].tolist() == pytest.approx([0.5, 2.3 / 3])
    assert bins["edges"].tolist() == [0.0, 0.5, 1.0]
    # confidence exactly 0 -> first bin; exactly 1 -> last bin; an empty bin is NaN
    bins = M.reliability_bins([0.0, 1.0, 0.25], [False, True, True], n_bins=4)
    assert bins["count"].tolist() == [2, 0, 0, 1]
    assert np.isnan(bins["accuracy"][1]) and np.isnan(bins["confidence"][2])
    # edges are exactly i/n, so c = i/n falls in bin i-1 for every n
    for n_bins in (3, 7, 10, 15):
        c = np.arange(1, n_bins + 1) / n_bins
        assert M.bin_index(c, n_bins).tolist() == list(range(n_bins))


@pytest.mark.parametrize("k", [2, 10])
def test_ece_all_correct_and_all_wrong(k):
    rng = np.random.default_rng(k)
    p = M.softmax(rng.normal(size=(60, k)) * 3)
    pred = p.argmax(1)
    conf = p.max(1)
    # all correct: acc_b = 1 in every bin -> ECE = sum_b |B_b|/N (1 - conf_b) = 1 - mean conf
    assert M.ece(p, pred) == pytest.approx(1 - conf.mean())
    assert M.accuracy(p, pred) == 1.0
    # all wrong: acc_b = 0 -> ECE = mean conf
    wrong = (pred + 1) % k
    assert M.ece(p, wrong) == pytest.approx(conf.mean())
    assert M.accuracy(p, wrong) == 0.0


def test_ece_noise_floor_matches_exact_binomial():
    # a single bin (all confidences 0.7, N = 10): ECE = |S/10 - 0.7| with S ~ Bin(10, 0.7),
    # so the floor is E|S/10 - 0.7| = sum_s C(10, s) 0.7^s 0.3^(10-s) |s/10 - 0.7|.
    exact = sum(math.comb(10, s) * 0.7**s * 0.3 ** (10 - s) * abs(s / 10 - 0.7) for s in range(11))
    floor = M.ece_noise_floor(np.full(10, 0.7), n_bins=15, n_sim=20000, seed=0)
    # Monte Carlo sd of the mean is about 0.1 / sqrt(20000) = 7e-4
    assert floor == pytest.approx(exact, abs=3e-3)
    assert M.ece_noise_floor(np.full(10, 0.7), n_sim=500, seed=1) == M.ece_noise_floor(
        np.full(10, 0.7), n_sim=500, seed=1
    )
    # confidences of 1 (or 0) are always right (wrong): no noise
    assert M.ece_noise_floor(np.ones(5), n_sim=50) == 0.0


def test_ece_noise_floor_shrinks_with_n_and_brackets_a_calibrated_sample():
    rng = np.random.default_rng(5)
    small = M.ece_noise_floor(rng.uniform(0.5, 1, 50), n_sim=400)
    big = M.ece_noise_floor(rng.uniform(0.5, 1, 2000), n_sim=400)
    assert big < small
    # a sample that *is* calibrated has ECE of the order of the floor
    conf = rng.uniform(0.5, 1, 2000)
    correct = rng.random(2000) < conf
    assert M.ece_from_confidence(conf, correct) < 3 * big


# ---------------------------------------------------------------------------------------
# Selective prediction
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "k", "ties", "seed"), CASES)
@pytest.mark.parametrize("eps", [0.0, 0.05, 0.3])
def test_selective_metrics_match_brute_force(n, k, ties, seed, eps):
    _, p, y = random_case(n, k, seed, ties)
    conf, correct = ref_conf_correct(p.tolist(), y.tolist())
    cov, risks = M.risk_coverage_curve(conf, correct)
    assert cov.tolist() == pytest.approx([k_ / n for k_ in range(1, n + 1)])
    assert risks.tolist() == pytest.approx(ref_risks(conf, correct), abs=1e-15)
    assert M.aurc(conf, correct) == pytest.approx(ref_aurc(conf, correct), abs=1e-12)
    assert M.coverage_at_risk(conf, correct, eps) == ref_cov_at_risk(conf, correct, eps)
    assert M.predicted_coverage_at_risk(p, eps) == ref_pred_cov(p.tolist(), eps)
    # 1-D confidences are accepted as well
    assert M.predicted_coverage_at_risk(p.max(1), eps) == M.predicted_coverage_at_risk(p, eps)


def test_selective_hand_worked_with_ties():
    conf = [0.9, 0.6, 0.9, 0.3]
    correct = [1, 0, 0, 1]
    # groups: {0, 2} at 0.9 (one error), {1} at 0.6 (an error), {3} at 0.3
    # expected errors in the top k: 0.5, 1, 2, 2 -> risks 0.5/1, 1/2, 2/3, 2/4
    assert M.confidence_order(conf).tolist() == [0, 2, 1, 3]
    _, risks = M.risk_coverage_curve(conf, correct)
    assert risks.tolist() == pytest.approx([0.5, 0.5, 2 / 3, 0.5])
    assert M.aurc(conf, correct) == pytest.approx((0.5 + 0.5 + 2 / 3 + 0.5) / 4)
    # largest group end with risk <= 0.5 is k = 4 (even though k = 3 is above)
    assert M.coverage_at_risk(conf, correct, 0.5) == 1.0
    # k = 1 (risk 0.5) splits the 0.9 group: no threshold selects it
    assert M.coverage_at_risk(conf, correct, 0.1) == 0.0
    # the order of tied items no longer matters
    for pair in ([1, 0], [0, 1]):
        assert M.coverage_at_risk([0.9, 0.9], pair, 0.0) == 0.0
        assert M.coverage_at_risk([0.9, 0.9], pair, 0.5) == 1.0
        assert M.aurc([0.9, 0.9], pair) == pytest.approx(0.5)


@pytest.mark.parametrize("seed", range(6))
def test_tied_risks_are_the_average_over_every_order_of_the_ties(seed):
    """Brute force: each of the 7! orders of 7 items, ranked by a stable sort, puts tied
    items in every relative order equally often; the mean of their curves is the
    tie-averaged curve, and AURC is the mean AURC."""
    rng = np.random.default_rng(seed)
    conf = rng.choice([0.9, 0.7, 0.5], size=7).tolist()
    correct = (rng.random(7) < 0.6).tolist()
    curves = []
    for perm in itertools.permutations(range(7)):
        c = [conf[i] for i in perm]
        ranked = sorted(range(7), key=lambda j: -c[j])  # stable: perm's order within ties
        errs = np.cumsum([0 if correct[perm[j]] else 1 for j in ranked])
        curves.append(errs / np.arange(1, 8))
    np.testing.assert_allclose(
        M.risk_coverage_curve(conf, correct)[1], np.mean(curves, 0), atol=1e-12
    )
    assert M.aurc(conf, correct) == pytest.approx(np.mean(curves), abs=1e-12)
    # stats' row-wise versions agree with the scalar ones
    from rlcd_lab.math import stats

    c2, r2 = np.array([conf]), np.array([correct], dtype=float)
    assert stats.aurc_rows(c2, r2)[0] == pytest.approx(M.aurc(conf, correct), abs=1e-15)
    for eps in (0.0, 0.2, 0.5):
        assert stats.cov_rows(eps)(c2, r2)[0] == M.coverage_at_risk(conf, correct, eps)


def test_predicted_coverage_hand_worked():
    p = [[0.5, 0.5], [0.99, 0.01], [0.05, 0.95], [0.9, 0.1]]
    # ranking by max p: 0.99, 0.95, 0.9, 0.5; predicted errors 0.01, 0.05, 0.1, 0.5
    # prefix means: 0.01, 0.03, 0.16/3 = 0.0533, 0.66/4 = 0.165
    assert M.predicted_coverage_at_risk(p, 0.05) == 0.5
    assert M.predicted_coverage_at_risk(p, 0.03) == 0.5  # equality holds despite rounding
    assert M.predicted_coverage_at_risk(p, 0.2) == 1.0
    assert M.predicted_coverage_at_risk(p, 0.005) == 0.0


@pytest.mark.parametrize("k", [2, 10])
def test_selective_n1_all_correct_all_wrong(k):
    p = M.softmax(np.random.default_rng(k).normal(size=(30, k)))
    conf, pred = p.max(1), p.argmax(1)
    # N = 1
    assert M.aurc(conf[:1], [True]) == 0.0 and M.aurc(conf[:1], [False]) == 1.0
    assert M.coverage_at_risk(conf[:1], [True], 0.05) == 1.0
    assert M.coverage_at_risk(conf[:1], [False], 0.05) == 0.0
    # all correct: every prefix has risk 0
    assert M.aurc(conf, pred == pred) == 0.0
    assert M.coverage_at_risk(conf, pred == pred, 0.0) == 1.0
    # all wrong: every prefix has risk 1; only eps = 1 covers anything
    wrong = np.zeros(30, dtype=bool)
    assert M.aurc(conf, wrong) == 1.0
    assert M.coverage_at_risk(conf, wrong, 0.99) == 0.0
    assert M.coverage_at_risk(conf, wrong, 1.0) == 1.0


def test_oracle_curve_lower_bounds_every_ranking():
    rng = np.random.default_rng(0)
    correct = rng.random(8) < 0.6
    _, oracle = M.oracle_risk_coverage_curve(correct)
    # brute force over every ranking of 8 items would be 40320 orders; use all
    # distinct confidence permutations of a smaller prefix instead (6! = 720)
    c6 = correct[:6]
    _, o6 = M.oracle_risk_coverage_curve(c6)
    best = np.full(6, np.inf)
    for perm in itertools.permutations(range(6)):
        conf = np.empty(6)
        conf[list(perm)] = np.arange(6, 0, -1)  # item perm[j] gets rank j
        _, r = M.risk_coverage_curve(conf, c6)
        best = np.minimum(best, r)
    np.testing.assert_allclose(o6, best)
    # closed form max(0, k - C) / k
    c = int(correct.sum())
    assert oracle.tolist() == pytest.approx([max(0, k - c) / k for k in range(1, 9)])


# ---------------------------------------------------------------------------------------
# Temperature scaling
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("k", "t0"), [(2, 0.5), (5, 2.5), (10, 4.0)])
def test_fit_temperature_recovers_generating_temperature(k, t0):
    rng = np.random.default_rng(k)
    n = 6000
    z = rng.normal(size=(n, k)) * 3.0
    p = M.softmax(z / t0)
    y = np.minimum((p.cumsum(1) < rng.random((n, 1))).sum(1), k - 1)  # y ~ softmax(z / T0)
    t = M.fit_temperature(z, y)
    assert isinstance(t, float)
    assert t == pytest.approx(t0, rel=0.1)


def test_fit_temperature_is_a_local_and_global_minimum():
    rng = np.random.default_rng(1)
    z = rng.normal(size=(120, 4)) * 4.0
    y = rng.integers(0, 4, size=120)
    y[:60] = z[:60].argmax(1)  # half informative: an interior optimum
    t = M.fit_temperature(z, y)
    zl, yl = z.tolist(), y.tolist()
    best = ref_temperature_nll(zl, yl, t)
    assert M.temperature_nll(z, y, t) == pytest.approx(best, rel=1e-12)
    assert best <= ref_temperature_nll(zl, yl, 1.0)
    for factor in (0.99, 1.01, 0.9, 1.1):
        assert best <= ref_temperature_nll(zl, yl, t * factor)
    # and no better point on a coarse scan of the whole range
    scan = [ref_temperature_nll(zl, yl, float(s)) for s in np.geomspace(0.05, 50, 60)]
    assert best <= min(scan) + 1e-12


def test_fit_temperature_boundaries():
    # separable: every label is the argmax -> NLL decreases as T -> 0; lower bound 0.05
    z = np.array([[3.0, 0.0], [0.0, 2.0], [1.0, -1.0]])
    assert M.fit_temperature(z, z.argmax(1)) == pytest.approx(0.05, rel=1e-6)
    # each item seen with both labels: the uniform forecast is optimal -> upper bound 50
    z = np.array([[1.0, -1.0], [1.0, -1.0], [2.0, 0.0], [2.0, 0.0]])
    assert M.fit_temperature(z, [0, 1, 0, 1]) == pytest.approx(50.0, rel=1e-6)


def test_apply_temperature():
    z = np.array([[1.0, 2.0, -0.5], [0.0, 0.0, 3.0]])
    for T in (0.3, 1.0, 7.0):
        p = M.apply_temperature(z, T)
        for i in range(2):
            denom = sum(math.exp(v / T) for v in z[i])
            ref = [math.exp(v / T) / denom for v in z[i]]
            assert p[i].tolist() == pytest.approx(ref, rel=1e-12)
        assert p.argmax(1).tolist() == z.argmax(1).tolist()
    with pytest.raises(ValueError):
        M.apply_temperature(z, 0.0)


# ---------------------------------------------------------------------------------------
# JSD
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [2, 10])
def test_jsd_matches_brute_force_with_zeros(k):
    rng = np.random.default_rng(k)
    p = rng.dirichlet(np.ones(k), size=20)
    q = rng.dirichlet(np.ones(k), size=20)
    p[::3, 0] = 0.0  # some exact zeros on each side
    q[1::3, -1] = 0.0
    p /= p.sum(1, keepdims=True)
    q /= q.sum(1, keepdims=True)
    got = M.jsd(p, q)
    assert got.shape == (20,)
    ref = [ref_jsd(p[i].tolist(), q[i].tolist()) for i in range(20)]
    assert got.tolist() == pytest.approx(ref, rel=1e-12, abs=1e-15)
    assert M.mean_jsd(p, q) == pytest.approx(sum(ref) / 20)
    np.testing.assert_allclose(M.jsd(q, p), got)  # symmetric
    assert np.all(got >= 0) and np.all(got <= 1.0 + 1e-15)  # bits


def test_jsd_known_values():
    p = np.array([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]])
    assert M.jsd(p, p).tolist() == [0.0, 0.0]
    # disjoint supports: m = p/2 + q/2, each KL = 1 bit -> JSD = 1 bit
    assert M.jsd([[1.0, 0.0]], [[0.0, 1.0]])[0] == pytest.approx(1.0)  # bits
    assert M.jsd([0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5]) == pytest.approx(1.0)
    # p = (1, 0), q = (1/2, 1/2): m = (3/4, 1/4)
    # KL(p||m) = log2(4/3); KL(q||m) = 1/2 log2(2/3) + 1/2 log2 2 = 1/2 log2(4/3)
    # JSD = 1/2 log2(4/3) + 1/4 log2(4/3) = 3/4 log2(4/3) bits
    assert M.jsd([1.0, 0.0], [0.5, 0.5]) == pytest.approx(0.75 * math.log2(4 / 3))


# ---------------------------------------------------------------------------------------
# evaluate(): one row of Table 1
# ---------------------------------------------------------------------------------------

BASE_KEYS = {"accuracy", "brier", "nll", "ece", "aurc", "cov_at_eps", "pred_cov_at_eps"}


def test_evaluate_raw_row_matches_the_metric_functions():
    _, p, y = random_case(200, 3, 7)
    row = M.evaluate(p, y, eps=0.1)
    assert set(row) == BASE_KEYS | {"n", "eps"}
    assert row["n"] == 200 and row["eps"] == 0.1
    conf, correct = p.max(1), p.argmax(1) == y
    assert row["accuracy"] == M.accuracy(p, y)
    assert row["brier"] == M.brier(p, y)
    assert row["nll"] == M.nll(p, y)
    assert row["ece"] == M.ece(p, y)
    assert row["aurc"] == M.aurc(conf, correct)
    assert row["cov_at_eps"] == M.coverage_at_risk(conf, correct, 0.1)
    assert row["pred_cov_at_eps"] == M.predicted_coverage_at_risk(p, 0.1)
    assert all(isinstance(v, float) for v in row.values())


def test_evaluate_with_dev_logits_and_q():
    rng = np.random.default_rng(11)
    z = rng.normal(size=(400, 4)) * 3.0
    y = (M.softmax(z / 2.0).cumsum(1) < rng.random((400, 1))).sum(1)
    q = rng.dirichlet(np.ones(4), size=200)
    dev = (z[200:], y[200:])
    row = M.evaluate(z[:200], y[:200], dev=dev, is_logits=True, q=q)
    keys = BASE_KEYS | {"jsd"}
    assert set(row) == keys | {f"ts_{k}" for k in keys} | {"T", "n", "eps"}
    t = M.fit_temperature(*dev)
    assert row["T"] == t
    p_ts = M.apply_temperature(z[:200], t)
    assert row["ts_nll"] == pytest.approx(M.nll(p_ts, y[:200]), rel=1e-12)
    assert row["ts_ece"] == pytest.approx(M.ece(p_ts, y[:200]), abs=1e-12)
    assert row["ts_jsd"] == pytest.approx(M.mean_jsd(p_ts, q), rel=1e-12)
    assert row["jsd"] == pytest.approx(M.mean_jsd(M.softmax(z[:200]), q), rel=1e-12)
    # logits and their softmax give the same raw metrics
    raw = M.evaluate(M.softmax(z[:200]), y[:200])
    for key in BASE_KEYS:
        assert row[key] == pytest.approx(raw[key], abs=1e-12)
    # temperature scaling keeps the argmax
    assert row["ts_accuracy"] == row["accuracy"]


def test_evaluate_probs_use_log_probs_as_logits():
    _, p, y = random_case(300, 5, 2)
    row = M.evaluate(p[:150], y[:150], dev=(p[150:], y[150:]))
    t = M.fit_temperature(np.log(p[150:]), y[150:])
    assert row["T"] == pytest.approx(t)
    p_ts = M.apply_temperature(np.log(p[:150]), t)
    assert row["ts_brier"] == pytest.approx(M.brier(p_ts, y[:150]))
    # softmax(log p / 1) = p: temperature 1 is the identity on probabilities
    np.testing.assert_allclose(M.apply_temperature(np.log(p), 1.0), p, rtol=1e-12)


def test_temperature_slope_is_the_derivative_of_the_nll_in_one_over_t():
    """The slope in beta = 1/T matches a central difference of the brute-force NLL, is
    non-decreasing in beta (convexity), and vanishes at the fitted T, which brackets the
    root between float64 neighbours; an absent option (-inf) is no option at all."""
    rng = np.random.default_rng(3)
    z = rng.normal(size=(80, 3)) * 3.0
    y = rng.integers(0, 3, size=80)
    y[:40] = z[:40].argmax(1)
    zl, yl = z.tolist(), y.tolist()
    h = 1e-5
    for beta in (0.1, 0.7, 2.0):
        fd = (
            ref_temperature_nll(zl, yl, 1 / (beta + h))
            - ref_temperature_nll(zl, yl, 1 / (beta - h))
        ) / (2 * h)
        assert M.temperature_nll_slope(z, y, beta) == pytest.approx(fd, rel=1e-6, abs=1e-9)
    slopes = [M.temperature_nll_slope(z, y, b) for b in np.geomspace(0.02, 20, 50)]
    assert np.all(np.diff(slopes) >= -1e-12)
    t = M.fit_temperature(z, y)
    assert (
        M.temperature_nll_slope(z, y, 1 / t * (1 - 1e-9))
        < 0
        < M.temperature_nll_slope(z, y, 1 / t * (1 + 1e-9))
    )
    padded = np.concatenate([z, np.full((80, 1), -np.inf)], 1)
    assert M.fit_temperature(padded, y) == t


@pytest.mark.parametrize("eps", [0.05, 0.2, 0.34])
def test_coverage_ceiling_is_the_best_any_ranking_reaches(eps):
    """Every right/wrong pattern of up to 5 items, every order of distinct confidences:
    the largest Cov@eps is within 1/N below ``min(1, acc / (1 - eps))`` and none exceeds
    it (brute force against the bound's derivation)."""
    for n in range(1, 6):
        for pattern in itertools.product([False, True], repeat=n):
            correct = np.array(pattern)
            best = max(
                M.coverage_at_risk(np.array(order, dtype=float), correct, eps)
                for order in itertools.permutations(range(n))
            )
            ceiling = M.coverage_ceiling(correct.mean(), eps)
            assert ceiling - 1 / n < best <= ceiling + 1e-12, (pattern, best, ceiling)
