"""Our calibration metrics against two libraries users trust: netcal 1.4.0 and relplot 1.0.3.

* netcal's ``ECE`` is, like ours, top-label, equal-width and weighted by bin size, but its
  bins come from ``np.histogramdd`` on ``np.linspace(0, 1, n + 1)``: ``[i/n, (i+1)/n)``, the
  last one closed. Ours are ``(i/n, (i+1)/n]``. Off the edges the two agree to rounding; a
  confidence exactly on an interior edge goes one bin higher in netcal (worked by hand
  below). netcal also switches to *binary* mode when the labels hold <= 2 distinct values
  (it then scores ``p[:, 1]`` against ``y``), so for K = 2 it is given (confidence, correct).
* relplot's smooth ECE (Blasiok & Nakkiran 2023) kernel-smooths the residuals ``f - y`` with
  a Gaussian whose bandwidth sigma is chosen so that smECE = sigma; binned ECE averages them
  within fixed bins. They agree where the residual is the same everywhere (0, or a constant
  overconfidence d) and differ where residuals of opposite sign lie close together: a bin
  averages them away completely or not at all (by which side of an edge they fall), the
  kernel in part, by how much the bandwidth overlaps them.
"""

import numpy as np
import pytest

from rlcd_lab import metrics as M


@pytest.fixture(scope="module")
def netcal():
    return pytest.importorskip("netcal.metrics")


@pytest.fixture(scope="module")
def relplot():
    return pytest.importorskip("relplot")


def _random_case(seed: int, k: int, n: int = 600) -> tuple[np.ndarray, np.ndarray]:
    """Overconfident probs (labels drawn from a flatter softmax of the same logits)."""
    rng = np.random.default_rng(seed)
    logits = 2.0 * rng.normal(size=(n, k))
    cum = np.cumsum(M.softmax(logits), axis=1)
    labels = np.minimum((cum < rng.random((n, 1))).sum(1), k - 1)
    return M.softmax(1.5 * logits), labels


@pytest.mark.parametrize("n_bins", [10, 15])
@pytest.mark.parametrize("k", range(2, 11))
@pytest.mark.parametrize("seed", range(3))
def test_ece_equals_netcal_off_the_edges(netcal, seed, k, n_bins):
    probs, labels = _random_case(seed, k)
    conf, correct = M.confidence_and_correct(probs, labels)
    edges = np.r_[M.bin_edges(n_bins), np.linspace(0, 1, n_bins + 1)]
    assert not np.isin(np.r_[conf, probs[:, 1]], edges).any()  # no item on an edge
    ref = netcal.ECE(bins=n_bins)
    if k == 2:
        theirs = ref.measure(conf, correct.astype(float))
        # given the (N, 2) probs, netcal measures class 1's calibration instead
        class1 = M.ece_from_confidence(probs[:, 1], labels == 1, n_bins)
        assert ref.measure(probs, labels) == pytest.approx(class1, abs=1e-12)
    else:
        assert np.unique(labels).size >= 3  # else netcal would take binary mode
        theirs = ref.measure(probs, labels)
    assert M.ece(probs, labels, n_bins) == pytest.approx(theirs, abs=1e-12)
    assert M.ece_from_confidence(conf, correct, n_bins) == pytest.approx(theirs, abs=1e-12)


def test_ece_netcal_differ_only_on_edges(netcal):
    # 4 bins: the edges i/4 are exact in binary and equal np.linspace(0, 1, 5), so only the
    # closed side differs. Items (confidence, right?): (0.5, yes) and (0.75, no) on edges,
    # (0.625, yes) and (0.375, no) inside bins; labels 0, 1, 2 keep netcal multi-class.
    assert np.array_equal(M.bin_edges(4), np.linspace(0, 1, 5))
    probs = np.array(
        [[0.5, 0.25, 0.25], [0.75, 0.125, 0.125], [0.625, 0.25, 0.125], [0.375, 0.3125, 0.3125]]
    )
    labels = np.array([0, 1, 0, 2])
    # ours, (i/4, (i+1)/4]: {0.375, 0.5} in bin 1, 1 of 2 right; {0.625, 0.75} in bin 2, 1 of 2
    ours = 2 / 4 * abs(1 / 2 - (0.375 + 0.5) / 2) + 2 / 4 * abs(1 / 2 - (0.625 + 0.75) / 2)
    # netcal, [i/4, (i+1)/4): 0.375 alone in bin 1 (wrong), {0.5, 0.625} in bin 2 (both
    # right), 0.75 alone in bin 3 (wrong): each edge item moves up one bin
    theirs = 1 / 4 * 0.375 + 2 / 4 * abs(1 - (0.5 + 0.625) / 2) + 1 / 4 * 0.75
    got_ours, got_theirs = M.ece(probs, labels, 4), netcal.ECE(bins=4).measure(probs, labels)
    assert got_ours == pytest.approx(ours, abs=1e-12)
    assert got_theirs == pytest.approx(theirs, abs=1e-12)
    assert got_theirs - got_ours == pytest.approx(theirs - ours, abs=1e-12)
    assert abs(theirs - ours) > 0.1
    # nudged just above their edges, the two items land in netcal's bins under both rules
    nudge = 2.0**-30
    probs[:2] += [[nudge, 0.0, -nudge]]
    assert M.ece(probs, labels, 4) == pytest.approx(netcal.ECE(bins=4).measure(probs, labels))


def _groups(spec: list[tuple[float, int]], n: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """``n`` items at each confidence ``c``, exactly ``m`` of them right, per ``(c, m)``."""
    f = np.repeat([c for c, _ in spec], n)
    y = np.concatenate([np.r_[np.ones(m), np.zeros(n - m)] for _, m in spec])
    return f, y


def _binned_by_hand(spec: list[tuple[float, int]], n: int = 200) -> float:
    """ECE when every group has its own bin: the mean over groups of |m/n - c|."""
    return float(np.mean([abs(m / n - c) for c, m in spec]))


def test_smece_zero_when_calibrated(relplot):
    # accuracy m/n equals the confidence in each group: each group's residuals sum to 0, so
    # the smoothed residual is 0 at every bandwidth, and every bin's gap is 0
    f, y = _groups([(c, round(200 * c)) for c in (0.55, 0.65, 0.75, 0.85, 0.95)])
    assert M.ece_from_confidence(f, y, 10) < 1e-12
    assert relplot.smECE(f, y) < 1e-9


@pytest.mark.parametrize("d", [0.05, 0.1, 0.2])
def test_smece_equals_constant_overconfidence(relplot, d):
    # accuracy exactly c - d in every group: the residual is d everywhere, so the smoothed
    # residual is d * D(t) / (D(t) + 1e-4) (D the smoothed count, 1e-4 relplot's guard
    # against 0/0), i.e. d wherever there is data, whatever the bandwidth
    spec = [(c, round(200 * (c - d))) for c in (0.65, 0.75, 0.85, 0.95)]
    f, y = _groups(spec)
    assert M.ece_from_confidence(f, y, 10) == pytest.approx(_binned_by_hand(spec), abs=1e-12)
    assert _binned_by_hand(spec) == pytest.approx(d, abs=1e-12)
    assert relplot.smECE(f, y) == pytest.approx(d, abs=1e-3)


def test_smece_differs_where_signs_mix(relplot):
    # +-0.1 residuals 0.06 apart inside one bin (0.6, 0.7]: the bin cancels them exactly,
    # the kernel only where the two Gaussians overlap, so 0 < smECE < 0.1
    f, y = _groups([(0.62, 144), (0.68, 116)])
    assert M.ece_from_confidence(f, y, 10) < 1e-12
    assert 1e-6 < relplot.smECE(f, y) < 0.1 - 1e-6
    # the same residuals 0.02 apart across the edge 0.6: the bins keep both gaps (ECE 0.1),
    # the kernel still cancels them in part
    spec = [(0.59, 138), (0.61, 102)]
    f, y = _groups(spec)
    assert M.ece_from_confidence(f, y, 10) == pytest.approx(_binned_by_hand(spec), abs=1e-12)
    assert _binned_by_hand(spec) == pytest.approx(0.1, abs=1e-12)
    assert relplot.smECE(f, y) < 0.1 - 1e-6
