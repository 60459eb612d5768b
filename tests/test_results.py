"""rlcd_lab.reports.results: a run's eval dumps -> per-item values, and the paper's paired tests.

Expectations are derived: per-item means against rlcd_lab.metrics, hand-computed values
for ragged option counts, and brute-force loop references (every sign/swap pattern
enumerated, bootstrap replicates recomputed item by item with metrics.aurc) for paired().
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from rlcd_lab import metrics
from rlcd_lab.reports import results


def _rows(logits, labels, q=None, lengths=3):
    """Eval dump rows (the format of rlcd_lab.evaluate.run_eval) for the given logits."""
    rows = []
    for i, (z, y) in enumerate(zip(logits, labels, strict=True)):
        z = [float(v) for v in z]
        p = np.exp(np.array(z) - max(z))
        p = (p / p.sum()).tolist()
        rows.append(
            {
                "uid": f"item-{i}",
                "label": int(y),
                "q": None if q is None else [float(v) for v in q[i]],
                "options": [chr(65 + k) for k in range(len(z))],
                "rationales": ["r"],
                "forced": [False],
                "lengths": [lengths],
                "readouts": [p],
                "mixture": p,
                "probs": p,
                "logits": z,
            }
        )
    return rows


def _write(run, split, rows):
    (run / "eval").mkdir(parents=True, exist_ok=True)
    (run / "eval" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _random_split(rng, n, k=3, scale=2.0):
    logits = rng.normal(scale=scale, size=(n, k))
    labels = rng.integers(0, k, size=n)
    return logits, labels


# ---------------------------------------------------------------------------------------
# load_run / from_rows
# ---------------------------------------------------------------------------------------


def test_load_run_fits_T_on_dev_and_per_item_means_are_the_metrics(tmp_path):
    rng = np.random.default_rng(0)
    test_logits, test_y = _random_split(rng, 40)
    dev_logits, dev_y = _random_split(rng, 30)
    run = tmp_path / "seed-0" / "reinforce"
    _write(run, "test", _rows(test_logits, test_y))
    _write(run, "dev", _rows(dev_logits, dev_y))
    r = results.load_run(run, eps=0.1)
    T = metrics.fit_temperature(dev_logits, dev_y)
    assert r.fitted and r.T == pytest.approx(T)
    assert r.path == run and r.labels.tolist() == test_y.tolist()
    p = metrics.apply_temperature(test_logits, T)
    np.testing.assert_allclose(r.scaled, p, rtol=1e-12)
    np.testing.assert_allclose(r.probs(False), metrics.softmax(test_logits), rtol=1e-12)
    np.testing.assert_allclose(r.dev_probs(), metrics.apply_temperature(dev_logits, T))
    # the per-item values average to the metrics of the scaled probabilities
    assert r.brier.mean() == pytest.approx(metrics.brier(p, test_y))
    assert r.nll.mean() == pytest.approx(metrics.nll(p, test_y))
    assert r.correct.mean() == pytest.approx(metrics.accuracy(p, test_y))
    assert r.item_values("brier") is not None and r.item_values("accuracy").shape == (40,)
    # ... and to the summary row (summary.summarize) that is kept beside them
    assert r.row["ts_brier"] == pytest.approx(r.brier.mean())
    assert r.row["ts_nll"] == pytest.approx(r.nll.mean())
    assert r.row["ts_accuracy"] == pytest.approx(r.correct.mean())
    assert r.row["ts_aurc"] == pytest.approx(metrics.aurc(r.confidence, r.correct))
    assert r.row["ts_cov_at_eps"] == pytest.approx(
        metrics.coverage_at_risk(r.confidence, r.correct, 0.1)
    )
    assert r.q is None and r.jsd is None and r.mixture_jsd is None


def test_a_run_without_dev_is_not_fitted(tmp_path):
    rng = np.random.default_rng(1)
    logits, y = _random_split(rng, 10)
    run = tmp_path / "base"
    _write(run, "test", _rows(logits, y))
    r = results.load_run(run)
    assert not r.fitted and r.T == 1.0
    assert "T" not in r.row and "ts_brier" not in r.row
    assert r.dev_probs() is None and r.dev_labels is None
    np.testing.assert_allclose(r.scaled, metrics.softmax(logits))
    assert r.brier.mean() == pytest.approx(r.row["brier"])  # raw = "scaled" with T = 1


def test_missing_or_empty_test_dump(tmp_path):
    with pytest.raises(FileNotFoundError, match="test.jsonl"):
        results.load_run(tmp_path / "nope")
    (tmp_path / "empty" / "eval").mkdir(parents=True)
    (tmp_path / "empty" / "eval" / "test.jsonl").write_text("")
    with pytest.raises(ValueError, match="empty"):
        results.load_run(tmp_path / "empty")


def test_ragged_option_counts_by_hand():
    # item 0: K = 2, p = (0.8, 0.2), label 0 -> Brier 0.2^2 + 0.2^2 = 0.08, NLL -log 0.8
    # item 1: K = 3, p = (0.5, 0.3, 0.2), label 2 -> Brier 0.25 + 0.09 + 0.64 = 0.98,
    #         NLL -log 0.2, wrong (argmax 0); the padded third option of item 0 costs nothing
    logits = [np.log([0.8, 0.2]), np.log([0.5, 0.3, 0.2])]
    r = results.from_rows(_rows(logits, [0, 2]))
    assert r.logits.shape == (2, 3) and r.logits[0, 2] == -np.inf
    np.testing.assert_allclose(r.brier, [0.08, 0.98])
    np.testing.assert_allclose(r.nll, [-np.log(0.8), -np.log(0.2)])
    assert r.correct.tolist() == [1.0, 0.0]
    np.testing.assert_allclose(r.confidence, [0.8, 0.5])
    assert r.row["brier"] == pytest.approx(np.mean([0.08, 0.98]))


def test_aleatoric_jsd_in_bits_and_the_largest_mixture_dump(tmp_path):
    # p = (1, 0) against q = (0, 1): disjoint supports, JSD = 1 bit; p = q: 0
    logits = [[30.0, -30.0], [0.0, 0.0]]
    q = [[0.0, 1.0], [0.5, 0.5]]
    run = tmp_path / "mixture"
    _write(run, "test", _rows(logits, [1, 0], q=q))
    texts = {4: [["a", "", "b", "c"]] * 2, 16: [["", "x"] * 8, [""] * 4 + ["y"] * 12]}
    for m, mix in ((4, [[1.0, 0.0], [0.5, 0.5]]), (16, [[0.0, 1.0], [0.5, 0.5]])):
        rows = [{"uid": f"item-{i}", "mixture": mix[i], "rationales": texts[m][i]} for i in (0, 1)]
        _write(run, f"test-m{m}", rows)
    r = results.load_run(run)
    np.testing.assert_allclose(r.jsd, [1.0, 0.0], atol=1e-9)
    assert r.m_mixture == 16  # the largest M, not the last in name order (m4 > m16)
    np.testing.assert_allclose(r.mixture_jsd, [0.0, 0.0], atol=1e-12)
    assert r.empty_share == (8 + 4) / 32  # empty rationales of the 16-rationale dump


# ---------------------------------------------------------------------------------------
# paired(): against loop references
# ---------------------------------------------------------------------------------------

N_ITEMS = 8  # <= stats.EXACT_MAX: the sign-flip p-values are exact enumerations


def _method(rng, y, sharp, noise):
    """One method's runs (two seeds) on the items ``y``: logits favour the label by
    ``sharp`` plus Gaussian noise, so two methods differ but share labels."""
    out = []
    for _ in range(2):
        z = rng.normal(scale=noise, size=(len(y), 2))
        z[np.arange(len(y)), y] += sharp
        dev_z = rng.normal(scale=noise, size=(6, 2))
        dev_y = rng.integers(0, 2, 6)
        dev_z[np.arange(6), dev_y] += sharp
        out.append(results.from_rows(_rows(z, y), _rows(dev_z, dev_y)))
    return out


def _exact_p(t_obs, t_null):
    return np.mean(np.abs(t_null) >= abs(t_obs) - 1e-12 * max(1.0, abs(t_obs)))


def test_paired_equals_a_loop_reference():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, N_ITEMS)
    a, b = _method(rng, y, 2.0, 1.5), _method(rng, y, 0.5, 1.5)
    n, eps = 300, 0.25
    res = results.paired(a, b, eps=eps, n=n, seed=5)
    curve = {
        "aurc": metrics.aurc,
        "cov_at_eps": lambda c, ok: metrics.coverage_at_risk(c, ok, eps),
    }

    # per-item metrics: each item averaged over the two seeds, then A - B
    for name, attr in (("accuracy", "correct"), ("brier", "brier"), ("nll", "nll")):
        xa = (getattr(a[0], attr) + getattr(a[1], attr)) / 2
        xb = (getattr(b[0], attr) + getattr(b[1], attr)) / 2
        d = xa - xb
        assert res[name]["diff"] == pytest.approx(d.mean())
        # bootstrap: n replicates of N items drawn with replacement (one draw per
        # replicate from default_rng(seed).integers), recomputed one by one
        idx = np.random.default_rng(5).integers(0, N_ITEMS, size=(n, N_ITEMS))
        reps = [d[i].mean() for i in idx]
        assert res[name]["ci_low"] == pytest.approx(np.percentile(reps, 2.5))
        assert res[name]["ci_high"] == pytest.approx(np.percentile(reps, 97.5))
        _check_se_mde_and_seeds(
            res[name],
            reps,
            [getattr(a[s], attr).mean() - getattr(b[s], attr).mean() for s in range(2)],
        )
        # exact sign-flip: every one of the 2^N sign vectors
        null = [np.mean(np.array(s) * d) for s in itertools.product((1, -1), repeat=N_ITEMS)]
        assert res[name]["p"] == pytest.approx(_exact_p(d.mean(), np.array(null)))

    # whole-curve metrics: per seed, averaged over seeds; items resampled / swapped jointly
    conf = [[r.confidence for r in g] for g in (a, b)]
    ok = [[r.correct.astype(bool) for r in g] for g in (a, b)]

    def seed_mean_diff(stat, items=None, swap=None):
        diffs = []
        for s in range(2):
            ca, ra, cb, rb = conf[0][s], ok[0][s], conf[1][s], ok[1][s]
            if swap is not None:
                ca, cb = np.where(swap, cb, ca), np.where(swap, ca, cb)
                ra, rb = np.where(swap, rb, ra), np.where(swap, ra, rb)
            if items is not None:
                ca, ra, cb, rb = ca[items], ra[items], cb[items], rb[items]
            diffs.append(stat(ca, ra) - stat(cb, rb))
        return np.mean(diffs)

    for name, stat in curve.items():
        t_obs = seed_mean_diff(stat)
        assert res[name]["diff"] == pytest.approx(t_obs)
        idx = np.random.default_rng(5).integers(0, N_ITEMS, size=(n, N_ITEMS))
        reps = [seed_mean_diff(stat, items=i) for i in idx]
        assert res[name]["ci_low"] == pytest.approx(np.percentile(reps, 2.5))
        assert res[name]["ci_high"] == pytest.approx(np.percentile(reps, 97.5))
        per_seed = [stat(conf[0][s], ok[0][s]) - stat(conf[1][s], ok[1][s]) for s in range(2)]
        _check_se_mde_and_seeds(res[name], reps, per_seed)
        null = [
            seed_mean_diff(stat, swap=np.array(s) < 0)
            for s in itertools.product((1, -1), repeat=N_ITEMS)
        ]
        assert res[name]["p"] == pytest.approx(_exact_p(t_obs, np.array(null)))
    assert set(res) == {"accuracy", "brier", "nll", "aurc", "cov_at_eps"}  # no q: no JSD
    for v in res.values():
        assert set(v) == {"diff", "ci_low", "ci_high", "p", "se", "mde", "seeds"}


def _check_se_mde_and_seeds(entry, reps, per_seed):
    """The bootstrap SE is the replicates' s.d.; MDE = (z_0.975 + z_0.8) SE; the test
    across seeds is a t test (by hand, df = 1: p = 1 - 2 atan(|t|) / pi) and the exact
    sign-flip over the 2^S sign patterns of the per-seed differences."""
    from statistics import NormalDist

    assert entry["se"] == pytest.approx(np.std(reps, ddof=1))
    z = NormalDist().inv_cdf(0.975) + NormalDist().inv_cdf(0.8)
    assert entry["mde"] == pytest.approx(z * entry["se"])
    d = np.array(per_seed)
    seeds = entry["seeds"]
    assert seeds["diffs"] == pytest.approx(d.tolist())
    if d[0] == d[1]:  # no spread across seeds: no t
        assert seeds["t"] is None and seeds["p_t"] is None
    else:
        t = d.mean() / (d.std(ddof=1) / np.sqrt(2))
        assert seeds["t"] == pytest.approx(t)
        assert seeds["p_t"] == pytest.approx(1 - 2 * np.arctan(abs(t)) / np.pi)  # Cauchy, df 1
    flips = [abs(np.mean(np.array(s) * d)) for s in itertools.product((1, -1), repeat=2)]
    assert seeds["p_sign"] == pytest.approx(np.mean(np.array(flips) >= abs(d.mean()) - 1e-12))


def test_paired_identical_runs_and_misaligned_items():
    rng = np.random.default_rng(4)
    y = rng.integers(0, 2, N_ITEMS)
    a = _method(rng, y, 1.0, 1.0)
    for v in results.paired(a, a, n=50).values():
        assert v["diff"] == 0.0 and v["ci_low"] == v["ci_high"] == 0.0 and v["p"] == 1.0
    with pytest.raises(ValueError, match="share no seed"):
        results.paired(a, a[:1])  # not read from seed folders: paired by position
    other = _method(rng, 1 - y, 1.0, 1.0)
    with pytest.raises(ValueError, match="same test items"):
        results.paired(a, other)


def test_paired_jsd_on_aleatoric_runs():
    # two seeds, 3 items with q; A reports q exactly (JSD 0), B is uniform
    q = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    y = [0, 1, 0]
    a = [results.from_rows(_rows(np.log(q), y, q=q)) for _ in range(2)]
    b = [results.from_rows(_rows(np.zeros((3, 2)), y, q=q)) for _ in range(2)]
    res = results.paired(a, b, n=100)
    expected = -metrics.jsd(np.full((3, 2), 0.5), q).mean()
    assert res["jsd"]["diff"] == pytest.approx(expected)
    assert res["jsd"]["ci_high"] < 0
    assert "mixture_jsd" not in res  # no mixture dumps


def test_mean_sd():
    assert results.mean_sd([1.0, 3.0]) == {"mean": 2.0, "sd": pytest.approx(np.sqrt(2.0))}
    assert results.mean_sd([5.0]) == {"mean": 5.0, "sd": None}


# ---------------------------------------------------------------------------------------
# views of a run (what the Routing tab draws) and a torch-free import
# ---------------------------------------------------------------------------------------


def test_importing_results_loads_no_torch():
    # a fresh interpreter: the results layer (and the run-directory format) is numpy only
    import subprocess
    import sys

    code = (
        "import sys, rlcd_lab.reports.results, rlcd_lab.files.rundir; "
        "print(sorted(m for m in ('torch', 'transformers', 'accelerate') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_run_view_single_and_mixture(tmp_path):
    rng = np.random.default_rng(3)
    (test_z, y), (dev_z, dev_y) = _random_split(rng, 12), _random_split(rng, 20)
    run = tmp_path / "run"
    _write(run, "test", _rows(test_z, y))
    _write(run, "dev", _rows(dev_z, dev_y))
    r = results.load_run(run)
    # the single-query views: softmax(z / T) (calibrated) and softmax(z) (raw)
    scaled, raw = r.view(True), r.view(False)
    assert scaled.probs == pytest.approx(metrics.softmax(test_z / r.T))
    assert raw.probs == pytest.approx(metrics.softmax(test_z)) and raw.T == 1.0
    assert scaled.m == 1 and r.view(True, "mixture").m == 1  # one rationale per item
    # per-item values are the metrics' per-item values; their means the metrics
    assert scaled.brier.mean() == pytest.approx(metrics.brier(scaled.probs, y))
    assert scaled.nll.mean() == pytest.approx(metrics.nll(scaled.probs, y))
    assert np.array_equal(scaled.correct, scaled.probs.argmax(1) == y)
    assert r.brier is scaled.brier and r.view(True) is scaled  # cached
    ranked = scaled.ranked("max_p")
    assert np.all(np.diff(ranked.confidence) <= 0) and ranked.dev_confidence.size == 20
    # a mixture dump of M = 3 readouts: the mean of the scaled readouts
    u = metrics.softmax(rng.normal(size=(12, 3, 3)) * 2)
    rows = _rows(test_z, y)
    for row, ui in zip(rows, u, strict=True):
        row["readouts"] = ui.tolist()
    _write(run, "test-m3", rows)
    mix = results.load_run(run).view(True, "mixture")
    want = metrics.softmax(np.log(u) / r.T).mean(1)
    assert mix.m == 3 and mix.probs == pytest.approx(want, abs=1e-12)
    # rows in memory (no path): no readouts to mix, the single query
    mem = results.from_rows(_rows(test_z, y), _rows(dev_z, dev_y))
    assert mem.view(True, "mixture").m == 1
    with pytest.raises(ValueError, match="aggregate"):
        r.view(True, "median")
