"""Classroom mode (rlcd_lab.classroom.student): every exercise check accepts a right answer, rejects
a wrong one and says "not answered yet" for None, with the right answers derived here
independently (closed forms, plain numpy on the files), and no obvious guess passes any
exercise; the notebooks' answer cells call
them; ``write_student`` drops every solution cell (tests/test_notebooks.py runs the copies);
the JupyterLab setting and the install of ``make app``."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jupytext
import numpy as np
import pandas as pd
import pytest

from rlcd_lab.classroom import exercises, student
from rlcd_lab.classroom.exercises import Feedback
from rlcd_lab.files.assets import ASSETS
from rlcd_lab.files.io import read_jsonl

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
SOLUTIONS = REPO / exercises.SOLUTIONS_DIR
VERIFY = ASSETS / "results" / "verify" / "seed-17"


def right(f: Feedback) -> None:
    assert f.ok is True and str(f).startswith("correct: "), f


def wrong(f: Feedback) -> None:
    assert f.ok is False and str(f).startswith("not yet: "), f


def unanswered(f: Feedback) -> None:
    assert f.ok is None and "not answered yet" in str(f), f


def nothing(f: Feedback) -> None:
    assert f.ok is None and str(f).startswith("nothing to check"), f


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_run(path: Path, config: dict, log: list[dict] | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    if log is not None:
        write_jsonl(path / "log.jsonl", log)
    return path


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# ------------------------------------------------------------------------- the answers
def aurc(conf: np.ndarray, correct: np.ndarray) -> float:
    """Mean over k of the error rate of the k most confident items (stable order)."""
    order = np.argsort(-conf, kind="stable")
    err = 1.0 - correct[order]
    return float(np.mean(np.cumsum(err) / np.arange(1, len(err) + 1)))


def cov_at_risk(conf: np.ndarray, correct: np.ndarray, eps: float) -> float:
    order = np.argsort(-conf, kind="stable")
    risk = np.cumsum(1.0 - correct[order]) / np.arange(1, len(conf) + 1)
    ok = np.flatnonzero(risk <= eps + 1e-12)
    return (ok[-1] + 1) / len(conf) if ok.size else 0.0


# ------------------------------------------------------------------------- notebook 1
def twice_linear_gain(q1: float) -> float:
    """E[2 u_Y] at the best report (the vertex on q's side: 2 max(q1, 1 - q1)) minus at
    the truthful report p = q1 (2 (q1^2 + (1 - q1)^2)); 0.24 at q1 = 0.7."""
    return 2 * max(q1, 1 - q1) - 2 * (q1**2 + (1 - q1) ** 2)


def test_twice_linear_score():
    assert math.isclose(twice_linear_gain(0.7), 0.24)
    for q1 in (0.7, 0.3):
        best = float(q1 > 0.5)  # 2 u.q is linear in p: the vertex on q's side
        gain = twice_linear_gain(q1)
        right(exercises.check_twice_linear_score(best, gain, q1=q1))
        right(exercises.check_twice_linear_score(np.float64(best), round(gain, 3), q1=q1))
        wrong(exercises.check_twice_linear_score(q1, 0.0, q1=q1))  # the proper answer
        wrong(exercises.check_twice_linear_score(best, 0.0, q1=q1))  # p right, no gain
        wrong(exercises.check_twice_linear_score(best, gain / 2, q1=q1))  # once the linear
    wrong(exercises.check_twice_linear_score("one", 0.24))
    wrong(exercises.check_twice_linear_score(True, 0.24))
    unanswered(exercises.check_twice_linear_score(None, 0.24))


def log_and_brier_gaps(u: np.ndarray, q: np.ndarray) -> tuple[float, float]:
    """Proposition 1's gap J(p, q) - E_r J(u(r), q) under the log score, sum_k q_k
    (log p_k - E_r log u_k), and under Brier, E_r ||u(r) - p||^2."""
    p = u.mean(0)
    return float(q @ np.log(p) - np.mean(np.log(u) @ q)), float(((u - p) ** 2).sum(1).mean())


def test_log_score_gap():
    u, q = np.array(exercises.LOG_GAP_READOUTS), np.array(exercises.LOG_GAP_Q)
    log_gap, brier_gap = log_and_brier_gaps(u, q)
    assert log_gap > 0 and abs(log_gap - brier_gap) > 0.1  # >= 0 (Jensen), not Brier's
    right(exercises.check_log_score_gap(log_gap, brier_gap))
    right(exercises.check_log_score_gap(np.float32(log_gap), round(brier_gap, 3)))
    wrong(exercises.check_log_score_gap(brier_gap, brier_gap))  # Proposition 1's form
    wrong(exercises.check_log_score_gap(log_gap, log_gap))
    wrong(exercises.check_log_score_gap(True, False))
    rng = np.random.default_rng(1)  # any readouts and q
    for _ in range(5):
        u, q = rng.dirichlet(np.ones(3), 4), rng.dirichlet(np.ones(3))
        right(exercises.check_log_score_gap(*log_and_brier_gaps(u, q), readouts=u, q=q))
    unanswered(exercises.check_log_score_gap(None, None))


@pytest.mark.parametrize("q1", [0.7, 0.9])
def test_certainty_threshold(q1):
    lam = 2 * q1 - 1  # 1/2 + (2 q1 - 1) / (2 lam) = 1
    right(exercises.check_certainty_threshold(lam, q1=q1))
    right(exercises.check_certainty_threshold(round(lam, 2), q1=q1))
    wrong(exercises.check_certainty_threshold(1.0, q1=q1))
    wrong(exercises.check_certainty_threshold(q1, q1=q1))
    unanswered(exercises.check_certainty_threshold(None))


# ------------------------------------------------------------------------- notebook 2
def test_lr_run(tmp_path):
    lengths = [20.0 - i for i in range(20)]  # 20 steps: the last 10% are 2 steps
    log = [{"step": i, "rationale_length": v} for i, v in enumerate(lengths)]
    run = write_run(tmp_path / "lr", {"lr": 1e-3, "beta": 0.0}, log)
    expected = np.mean(lengths[-2:])
    right(exercises.check_lr_run(run, expected))
    wrong(exercises.check_lr_run(run, np.mean(lengths[:2])))
    unanswered(exercises.check_lr_run(run, None))
    other = write_run(tmp_path / "other", {"lr": 3e-4, "beta": 0.0}, log)
    f = exercises.check_lr_run(other, expected)
    wrong(f)
    assert "lr=0.0003" in str(f)
    anchored = write_run(tmp_path / "kl", {"lr": 1e-3, "beta": 0.04}, log)
    wrong(exercises.check_lr_run(anchored, expected))
    nothing(exercises.check_lr_run(None, expected))


def test_mean_top_probability(tmp_path):
    probs = [[0.9, 0.1], [0.4, 0.6], [0.5, 0.5]]
    run = tmp_path / "run"
    write_jsonl(run / "eval" / "dev.jsonl", [{"probs": p} for p in probs])
    expected = np.mean([max(p) for p in probs])
    right(exercises.check_mean_top_probability(run, expected))
    right(exercises.check_mean_top_probability(run / "eval" / "dev.jsonl", expected))
    wrong(exercises.check_mean_top_probability(run, np.mean([min(p) for p in probs])))
    unanswered(exercises.check_mean_top_probability(run, None))
    nothing(exercises.check_mean_top_probability(None, expected))


def test_kl_price():
    base = ASSETS / "checkpoints" / "base-facts"
    dev = json.loads((base / "rlcd.json").read_text())["metrics"]["dev"]
    gain = dev["reason"]["brier"] - dev["direct"]["brier"]
    price = 0.04 * math.log(100)
    winner = "direct" if gain > price else "reason"
    loser = {"direct": "reason", "reason": "direct"}[winner]
    right(exercises.check_kl_price(price, gain, winner))
    right(exercises.check_kl_price(round(price, 3), round(gain, 3), winner.upper()))
    wrong(exercises.check_kl_price(price, gain, loser))
    wrong(exercises.check_kl_price(0.04 * math.log(50), gain, winner))  # the p = 0.02 price
    wrong(exercises.check_kl_price(price, -gain, winner))
    unanswered(exercises.check_kl_price(price, gain, None))


# ------------------------------------------------------------------------- notebook 3
def rms_ratio(log: list[dict]) -> float:
    """RMS of the logged score-function norms over RMS of the pathwise ones, on the last
    half of the rows that log both (the middle one of an odd count included)."""
    both = [r for r in log if "grad_pathwise" in r and "grad_score_function" in r]
    both = both[len(both) // 2 :]
    sf = np.array([r["grad_score_function"] for r in both], float)
    pw = np.array([r["grad_pathwise"] for r in both], float)
    return float(np.sqrt(np.mean(sf**2)) / np.sqrt(np.mean(pw**2)))


def test_stage1_weight(tmp_path):
    log = [
        {"step": 0, "grad_pathwise": 0.1, "grad_score_function": 3.0},
        {"step": 1},
        {"step": 2, "grad_pathwise": 0.2, "grad_score_function": 1.0},
        {"step": 3, "grad_pathwise": 0.4, "grad_score_function": 1.0},
    ]
    # the last half of the three logged steps: steps 2 and 3
    ratio = math.sqrt((1 + 1) / 2) / math.sqrt((0.04 + 0.16) / 2)  # = sqrt(10) = 3.16
    assert math.isclose(rms_ratio(log), ratio)
    run = write_run(tmp_path / "calibrate", {"sf_weight": 0.0}, log)
    right(exercises.check_stage1_weight(0, ratio, run))
    right(exercises.check_stage1_weight(0.0, round(ratio, 2), run))
    wrong(exercises.check_stage1_weight(1.0, ratio, run))
    wrong(exercises.check_stage1_weight(0, 3.0 / 0.1, run))  # the first step's ratio
    everything = math.sqrt((9 + 1 + 1) / 3) / math.sqrt((0.01 + 0.04 + 0.16) / 3)
    wrong(exercises.check_stage1_weight(0, everything, run))  # every step: section 2's
    wrong(exercises.check_stage1_weight(0, 0, run))
    unanswered(exercises.check_stage1_weight(None, ratio, run))
    bare = write_run(tmp_path / "bare", {"sf_weight": 0.0}, [{"step": 0}])
    nothing(exercises.check_stage1_weight(0, ratio, bare))
    # the default: the shipped verify stage-1 run, which logs a nonzero norm at c = 0
    shipped = json.loads((VERIFY / "calibrate" / "config.json").read_text())["sf_weight"]
    ratio = rms_ratio(read_jsonl(VERIFY / "calibrate" / "log.jsonl"))
    assert shipped == 0 and ratio > 0
    right(exercises.check_stage1_weight(shipped, ratio))


def test_sweep_ordering():
    sweep = {0.0: VERIFY / "calibrate", 0.3: VERIFY / "reinforce", 1.0: VERIFY / "grpo"}
    brier = {}
    for c, run in sweep.items():
        stored = json.loads((run / "final" / "rlcd.json").read_text())["metrics"]
        brier[c] = (stored.get("test") or stored["dev"])["ts_brier"]
    best_first = sorted(brier, key=brier.get)
    spread = max(brier.values()) - min(brier.values())
    assert spread > 0
    right(exercises.check_sweep_ordering(sweep, best_first, spread))
    wrong(exercises.check_sweep_ordering(sweep, best_first[::-1], spread))
    wrong(exercises.check_sweep_ordering(sweep, best_first[:2], spread))
    wrong(exercises.check_sweep_ordering(sweep, "0.3, 0, 1", spread))
    wrong(exercises.check_sweep_ordering(sweep, best_first, 0.0))
    wrong(exercises.check_sweep_ordering(sweep, best_first, min(brier.values())))
    # the notebook shows 4 decimals: neither the spread rounded to them nor the spread of
    # the rounded Briers passes (each is off by more than the tolerance, checked here)
    rounded = (round(spread, 4), round(max(brier.values()), 4) - round(min(brier.values()), 4))
    for copied in rounded:
        assert abs(copied - spread) > exercises.SPREAD_TOL * (1 + spread)
        wrong(exercises.check_sweep_ordering(sweep, best_first, copied))
    # the spread summed in another order (float64 rounding) passes
    right(
        exercises.check_sweep_ordering(
            sweep, best_first, -(min(brier.values()) - max(brier.values()))
        )
    )
    unanswered(exercises.check_sweep_ordering(sweep, None, spread))
    unanswered(exercises.check_sweep_ordering(sweep, best_first, None))
    nothing(exercises.check_sweep_ordering({}, best_first, spread))


def test_per_coordinate_dilution():
    right(exercises.check_per_coordinate_dilution(1.0, 1 / math.sqrt(1 + 10**2)))
    right(exercises.check_per_coordinate_dilution(1.0, 1 / math.sqrt(1 + 5**2), rho=5.0))
    wrong(exercises.check_per_coordinate_dilution(1 / math.sqrt(101), 1 / math.sqrt(101)))
    wrong(exercises.check_per_coordinate_dilution(1.0, 1.0))
    unanswered(exercises.check_per_coordinate_dilution(None, 0.1))


# ------------------------------------------------------------------------- notebook 4
@pytest.fixture(scope="module")
def grpo():
    from rlcd_lab.reports import results

    return results.load_run(VERIFY / "grpo")


def test_aurc_before_after(grpo):
    raw = grpo.probs(False)
    a_raw = aurc(raw.max(1), (raw.argmax(1) == grpo.labels).astype(float))
    ts = grpo.scaled
    a_ts = aurc(ts.max(1), (ts.argmax(1) == grpo.labels).astype(float))
    right(exercises.check_aurc_before_after(grpo, a_raw, a_ts))
    wrong(exercises.check_aurc_before_after(grpo, a_raw + 0.05, a_ts))
    wrong(exercises.check_aurc_before_after(grpo, a_raw, a_ts - 0.05))
    unanswered(exercises.check_aurc_before_after(grpo, None, a_ts))
    nothing(exercises.check_aurc_before_after(None, a_raw, a_ts))


def test_coverage_at_risk(grpo):
    ts = grpo.scaled
    conf, correct = ts.max(1), (ts.argmax(1) == grpo.labels).astype(float)
    for eps in (0.02, 0.05):
        cov = cov_at_risk(conf, correct, eps)
        right(exercises.check_coverage_at_risk(grpo, cov, eps=eps))
        wrong(exercises.check_coverage_at_risk(grpo, cov + 0.1, eps=eps))
    cov = cov_at_risk(conf, correct, 0.05)
    if cov > 0:
        f = exercises.check_coverage_at_risk(grpo, 100 * cov, eps=0.05)
        wrong(f)
        assert "fraction" in str(f)
    unanswered(exercises.check_coverage_at_risk(grpo, None))


def test_fair_budget(tmp_path):
    s1 = write_run(tmp_path / "calibrate", {"steps": 3})
    s2 = write_run(tmp_path / "reinforce", {"steps": 5})
    right(exercises.check_fair_budget(s1, s2, 8))
    wrong(exercises.check_fair_budget(s1, s2, 5))
    unanswered(exercises.check_fair_budget(s1, s2, None))
    nothing(exercises.check_fair_budget(s1, tmp_path / "not-trained", 8))


# ------------------------------------------------------------------------- notebook 5
def test_lambda_run():
    run = ASSETS / "results" / "aleatoric" / "seed-17" / "mixture"
    lam = json.loads((run / "config.json").read_text())["lam"]
    rows = read_jsonl(run / "eval" / "test.jsonl")  # shipped packed: test.jsonl.xz
    p, q = softmax(np.array([r["logits"] for r in rows])), np.array([r["q"] for r in rows])
    m = (p + q) / 2

    def kl(a):  # KL(a || m) in bits, 0 log 0 = 0
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(a > 0, a * np.log2(a / m), 0.0).sum(1)

    jsd = float(np.mean(0.5 * kl(p) + 0.5 * kl(q)))
    right(exercises.check_lambda_run(run, jsd, lam=lam))
    wrong(exercises.check_lambda_run(run, jsd + 0.05, lam=lam))
    f = exercises.check_lambda_run(run, jsd, lam=0.5 if lam != 0.5 else 0.25)
    wrong(f)
    assert "lam=" in str(f)
    unanswered(exercises.check_lambda_run(run, None, lam=lam))
    nothing(exercises.check_lambda_run(None, jsd))


def test_diversity_term():
    rng = np.random.default_rng(0)
    rows = [{"readouts": rng.dirichlet(np.ones(3), 4).tolist()} for _ in range(5)]
    u = np.array([r["readouts"] for r in rows])
    expected = float(np.mean(((u - u.mean(1, keepdims=True)) ** 2).sum(-1).mean(-1)))
    right(exercises.check_diversity_term(rows, expected))
    wrong(exercises.check_diversity_term(rows, 2 * expected))
    unanswered(exercises.check_diversity_term(rows, None))
    nothing(exercises.check_diversity_term(None, expected))


def test_urn_forecast():
    for prompt in ("urn 3a1b2c?", "urn 1a0b1c?"):
        counts = np.array([int(c) for c in re.findall(r"(\d)[abc]", prompt)], float)
        q = (counts / counts.sum()).tolist()
        f = exercises.check_urn_forecast(q, prompt)
        if f.ok is None:  # that urn is not among the task's items
            nothing(f)
            continue
        right(f)
        wrong(exercises.check_urn_forecast([1 / 3] * 3, prompt))
        wrong(exercises.check_urn_forecast(q[:2], prompt))
    unanswered(exercises.check_urn_forecast(None))


# ------------------------------------------------------------------------- notebook 6
def fake_runs(rng: np.random.Generator, n: int = 400) -> dict:
    """The notebook's ``data``: per run its variant and test probabilities (Y first)."""
    p_y = rng.uniform(0, 1, n)
    return {
        "results/verify/seed-0/reinforce": {
            "variant": "reinforce",
            "p_test": np.stack([p_y, 1 - p_y], 1),
        },
        "results/verify/seed-0/grpo": {"variant": "grpo", "p_test": np.full((n, 2), 0.5)},
    }


def test_escalation_band():
    # accept costs c_FA p_N, reject p_Y, escalate 0.5: escalate iff 0.5 < p_Y < 1 - 0.5/c_FA
    runs = fake_runs(np.random.default_rng(0))
    p_y = runs["results/verify/seed-0/reinforce"]["p_test"][:, 0]
    for c_fa in (5.0, 10.0):
        band = (0.5, 1 - 0.5 / c_fa)
        share = float(np.mean((p_y > band[0]) & (p_y < band[1])))
        assert 0.3 < share < 0.5
        right(exercises.check_escalation_band(band, share, runs, c_fa=c_fa))
        right(exercises.check_escalation_band(list(band), round(share, 3), runs, c_fa=c_fa))
        wrong(exercises.check_escalation_band((), share, runs, c_fa=c_fa))
        wrong(exercises.check_escalation_band("never", 0.0, runs, c_fa=c_fa))
        wrong(exercises.check_escalation_band((0.5, 0.99), share, runs, c_fa=c_fa))
        wrong(exercises.check_escalation_band(band, share + 0.05, runs, c_fa=c_fa))
        wrong(exercises.check_escalation_band(band, 100 * share, runs, c_fa=c_fa))
    # c_FA = 1: the band is empty, so no item is escalated
    right(exercises.check_escalation_band((), 0.0, runs, c_fa=1))
    right(exercises.check_escalation_band("never", 0, runs, c_fa=1))
    wrong(exercises.check_escalation_band((0.4, 0.6), 0.0, runs, c_fa=1))
    # another run: grpo's constant readout sits at the band's lower end, never inside
    right(exercises.check_escalation_band((0.5, 0.9), 0.0, runs, c_fa=5, variant="grpo"))
    unanswered(exercises.check_escalation_band(None, None, runs))
    unanswered(exercises.check_escalation_band((0.5, 0.95), None, runs))
    nothing(exercises.check_escalation_band((0.5, 0.95), 0.4, {}))
    nothing(exercises.check_escalation_band((0.5, 0.95), 0.4, runs, variant="sft"))


def fake_cascades(rng: np.random.Generator) -> dict:
    out = {}
    for task, n in (("a", 40), ("b", 60)):
        direct = rng.dirichlet(np.ones(2), n)
        out[task] = {
            "direct": direct,
            "direct_dev": rng.dirichlet(np.ones(2) * 0.3, n),
            "reason": rng.dirichlet(np.ones(2), n),
            "y": rng.integers(0, 2, n),
            "tokens_reason": rng.integers(5, 20, n).astype(float),
        }
    # task a: the raw readout is the scaled one (T = 1); task b: a flattened one (T = 4)
    out["a"]["direct_raw"] = out["a"]["direct"]
    out["b"]["direct_raw"] = softmax(np.log(out["b"]["direct"]) / 4)
    return out


def predicted_accuracy(out: dict, t: float) -> float:
    """The mean confidence of the readout the cascade uses: direct where its max >= t."""
    direct = out["direct"].max(1)
    return float(np.where(direct >= t, direct, out["reason"].max(1)).mean())


def test_label_free_accuracy():
    cascades = fake_cascades(np.random.default_rng(0))
    chosen = {"a": 0.7, "b": 1.01}  # b: always reason
    answers = {t: predicted_accuracy(c, chosen[t]) for t, c in cascades.items()}
    assert answers["b"] == cascades["b"]["reason"].max(1).mean()
    right(exercises.check_label_free_accuracy(cascades, chosen, answers))
    right(exercises.check_label_free_accuracy(cascades, pd.Series(chosen), answers))
    wrong(
        exercises.check_label_free_accuracy(cascades, chosen, {**answers, "a": answers["a"] - 0.01})
    )
    wrong(exercises.check_label_free_accuracy(cascades, chosen, {"a": answers["a"]}))
    wrong(exercises.check_label_free_accuracy(cascades, chosen, dict.fromkeys(answers, math.inf)))
    always_direct = {t: c["direct"].max(1).mean() for t, c in cascades.items()}
    wrong(exercises.check_label_free_accuracy(cascades, chosen, always_direct))
    observed = {
        t: np.mean(
            np.where(c["direct"].max(1) >= chosen[t], c["direct"].argmax(1), c["reason"].argmax(1))
            == c["y"]
        )
        for t, c in cascades.items()
    }
    wrong(exercises.check_label_free_accuracy(cascades, chosen, observed))  # needs labels
    unanswered(exercises.check_label_free_accuracy(cascades, chosen, None))
    nothing(exercises.check_label_free_accuracy({}, chosen, answers))
    nothing(exercises.check_label_free_accuracy(cascades, {"a": 0.7}, answers))


def raw_accuracy_change(cascades: dict, thresholds: np.ndarray) -> dict[str, float]:
    def accuracy(direct, out):
        return np.array(
            [
                np.mean(
                    np.where(direct.max(1) < t, out["reason"].argmax(1), direct.argmax(1))
                    == out["y"]
                )
                for t in thresholds
            ]
        )

    return {
        t: float(np.abs(accuracy(c["direct_raw"], c) - accuracy(c["direct"], c)).max())
        for t, c in cascades.items()
    }


def test_raw_cascade():
    cascades = fake_cascades(np.random.default_rng(0))
    thresholds = np.linspace(0.5, 1.0, 26)
    change = raw_accuracy_change(cascades, thresholds)
    assert change["a"] == 0 and change["b"] > 0  # the fixture differs where it should
    right(exercises.check_raw_cascade(cascades, thresholds, change))
    right(exercises.check_raw_cascade(cascades, thresholds, {"a": 0, "b": round(change["b"], 3)}))
    wrong(exercises.check_raw_cascade(cascades, thresholds, "b"))  # which task: not enough
    wrong(exercises.check_raw_cascade(cascades, thresholds, {"a": 0.0, "b": 0.0}))
    wrong(exercises.check_raw_cascade(cascades, thresholds, {"b": change["b"]}))
    wrong(exercises.check_raw_cascade(cascades, thresholds, {**change, "b": change["b"] + 0.02}))
    unanswered(exercises.check_raw_cascade(cascades, thresholds, None))


# ------------------------------------------------------------- no answer is a guess
# Obvious guesses for any answer: the stub's own value (None), constants, non-finite
# numbers, booleans, empty containers and words.
GUESSES = (None, 0, 1, 0.5, -1, 2, 100, math.inf, -math.inf, math.nan, True, False)
GUESSES += ("", "yes", "no", "never", (), [])


def exercise_cases(tmp_path: Path) -> dict[str, tuple]:
    """Every check with data like the notebook's: ``check name -> (call, right, computed,
    options)``. ``call(*answers)`` runs the check on its data; ``right``: the reference
    solution (derived here as in the tests above); ``computed``: the indices of the
    answers that need the computation (data-dependent or derived numbers; the others are
    a report's vertex, a weight read off a config, the winner of two computed numbers, an
    ordering, an analytic band); ``options``: per answer, the choices a student could
    guess among besides :data:`GUESSES` (both options of a two-way choice, every
    ordering, each task, the analytic parts' own values)."""
    from itertools import permutations

    from rlcd_lab.reports import results

    cases: dict[str, tuple] = {}
    c = exercises
    # notebook 1
    cases["check_twice_linear_score"] = (
        lambda p, g: c.check_twice_linear_score(p, g, q1=0.7),
        (1.0, twice_linear_gain(0.7)),
        (1,),
        ((0.7, 0.0), (0.7, 0.3, 0.0, 1.4, 1.16)),  # the truthful report, the two scores
    )
    u, q = np.array(exercises.LOG_GAP_READOUTS), np.array(exercises.LOG_GAP_Q)
    cases["check_log_score_gap"] = (
        c.check_log_score_gap,
        log_and_brier_gaps(u, q),
        (0, 1),
        ((), ()),
    )
    cases["check_certainty_threshold"] = (
        lambda lam: c.check_certainty_threshold(lam, q1=0.7),
        (0.4,),
        (0,),
        ((0.7, 0.3),),  # q_1 itself, 1 - q_1
    )
    # notebook 2
    lengths = [31.0 - 0.7 * i for i in range(20)]
    log = [{"step": i, "rationale_length": v} for i, v in enumerate(lengths)]
    lr_run = write_run(tmp_path / "lr", {"lr": 1e-3, "beta": 0.0}, log)
    cases["check_lr_run"] = (
        lambda x: c.check_lr_run(lr_run, x),
        (float(np.mean(lengths[-2:])),),
        (0,),
        ((8.0, 9.0),),  # the empty rationale's length
    )
    rng = np.random.default_rng(3)
    probs = rng.dirichlet(np.ones(2), 50)
    dump = write_jsonl(
        tmp_path / "run" / "eval" / "dev.jsonl", [{"probs": p.tolist()} for p in probs]
    )
    cases["check_mean_top_probability"] = (
        lambda x: c.check_mean_top_probability(dump, x),
        (float(probs.max(1).mean()),),
        (0,),
        ((),),
    )
    dev = json.loads((ASSETS / "checkpoints" / "base-facts" / "rlcd.json").read_text())
    gain = dev["metrics"]["dev"]["reason"]["brier"] - dev["metrics"]["dev"]["direct"]["brier"]
    price = 0.04 * math.log(100)
    cases["check_kl_price"] = (
        c.check_kl_price,
        (price, gain, "direct" if gain > price else "reason"),
        (1,),
        ((price,), (), ("direct", "reason")),
    )
    # notebook 3
    shipped_log = read_jsonl(VERIFY / "calibrate" / "log.jsonl")
    cases["check_stage1_weight"] = (
        c.check_stage1_weight,
        (0.0, rms_ratio(shipped_log)),
        (1,),
        ((0.0, 1.0), (7.0, 10.0, 12.0)),  # the paper's 7-12x
    )
    sweep = {0.0: VERIFY / "calibrate", 0.3: VERIFY / "reinforce", 1.0: VERIFY / "grpo"}
    brier = {}
    for w, run in sweep.items():
        stored = json.loads((run / "final" / "rlcd.json").read_text())["metrics"]
        brier[w] = (stored.get("test") or stored["dev"])["ts_brier"]
    cases["check_sweep_ordering"] = (
        lambda o, d: c.check_sweep_ordering(sweep, o, d),
        (sorted(brier, key=brier.get), max(brier.values()) - min(brier.values())),
        (1,),
        ([list(o) for o in permutations(sweep)], ()),
    )
    cases["check_per_coordinate_dilution"] = (
        lambda a, b: c.check_per_coordinate_dilution(a, b, rho=10.0),
        (1.0, 1 / math.sqrt(101)),
        (1,),
        ((1.0,), ()),
    )
    # notebook 4
    grpo = results.load_run(VERIFY / "grpo")
    ts, raw = grpo.scaled, grpo.probs(False)
    cases["check_aurc_before_after"] = (
        lambda a, b: c.check_aurc_before_after(grpo, a, b),
        (
            aurc(raw.max(1), (raw.argmax(1) == grpo.labels).astype(float)),
            aurc(ts.max(1), (ts.argmax(1) == grpo.labels).astype(float)),
        ),
        (0, 1),
        ((), ()),
    )
    conf, correct = ts.max(1), (ts.argmax(1) == grpo.labels).astype(float)
    cases["check_coverage_at_risk"] = (
        lambda x: c.check_coverage_at_risk(grpo, x, eps=0.02),
        (cov_at_risk(conf, correct, 0.02),),
        (0,),
        ((0.02, 0.98),),
    )
    s1 = write_run(tmp_path / "calibrate", {"steps": 3})
    s2 = write_run(tmp_path / "reinforce", {"steps": 5})
    cases["check_fair_budget"] = (
        lambda x: c.check_fair_budget(s1, s2, x),
        (8,),
        (0,),
        ((3, 5),),  # one stage's budget
    )
    # notebook 5
    mixture = ASSETS / "results" / "aleatoric" / "seed-17" / "mixture"
    mixture_jsd = results.load_run(mixture).row["jsd"]
    lam = json.loads((mixture / "config.json").read_text())["lam"]
    cases["check_lambda_run"] = (
        lambda x: c.check_lambda_run(mixture, x, lam=lam),
        (mixture_jsd,),
        (0,),
        ((),),
    )
    rows = [{"readouts": rng.dirichlet(np.ones(3), 4).tolist()} for _ in range(5)]
    readouts = np.array([r["readouts"] for r in rows])
    diversity = ((readouts - readouts.mean(1, keepdims=True)) ** 2).sum(-1).mean()
    cases["check_diversity_term"] = (
        lambda x: c.check_diversity_term(rows, x),
        (float(diversity),),
        (0,),
        ((),),
    )
    cases["check_urn_forecast"] = (
        lambda x: c.check_urn_forecast(x, "urn 3a1b2c?"),
        ([3 / 6, 1 / 6, 2 / 6],),
        (0,),
        (([1 / 3] * 3, [1, 0, 0], [0, 1, 0], [0, 0, 1], [0.5, 0.5, 0], [3, 1, 2]),),
    )
    # notebook 6
    runs = fake_runs(rng)
    p_y = runs["results/verify/seed-0/reinforce"]["p_test"][:, 0]
    cases["check_escalation_band"] = (
        lambda b, x: c.check_escalation_band(b, x, runs, c_fa=10),
        ((0.5, 0.95), float(np.mean((p_y > 0.5) & (p_y < 0.95)))),
        (1,),
        (((), "never", (0.5, 0.95), (0.5, 0.9), (0.0, 1.0), (0.5, 1.0)), ()),
    )
    cascades = fake_cascades(rng)
    chosen = {"a": 0.7, "b": 1.01}
    tasks = sorted(cascades)
    per_task = [dict.fromkeys(tasks, g) for g in GUESSES] + tasks
    cases["check_label_free_accuracy"] = (
        lambda x: c.check_label_free_accuracy(cascades, chosen, x),
        ({t: predicted_accuracy(o, chosen[t]) for t, o in cascades.items()},),
        (0,),
        (per_task,),
    )
    thresholds = np.linspace(0.5, 1.0, 26)
    cases["check_raw_cascade"] = (
        lambda x: c.check_raw_cascade(cascades, thresholds, x),
        (raw_accuracy_change(cascades, thresholds),),
        (0,),
        (per_task,),
    )
    return cases


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    return exercise_cases(tmp_path_factory.mktemp("exercises"))


def test_every_exercise_has_a_guessing_case(cases):
    assert sorted(cases) == sorted(c for checks in exercises.CHECKS.values() for c in checks)


@pytest.mark.parametrize("check", [c for checks in exercises.CHECKS.values() for c in checks])
def test_no_exercise_is_passed_by_a_guess(cases, check):
    """The reference solution passes; the stub (every answer None), every obvious guess
    given for all answers at once, and every guess for an answer that needs the
    computation, even with all the other answers right, do not. A check passes only when
    every answer matches, so no combination of guesses passes either: each exercise
    needs a finite, data-dependent number, graded with a tolerance."""
    call, right_answers, computed, options = cases[check]
    right(call(*right_answers))
    assert call(*[None] * len(right_answers)).ok is None  # the stub
    assert computed, f"{check}: no answer needs the computation"
    for guess in GUESSES:
        f = call(*[guess] * len(right_answers))
        assert f.ok is not True, (check, guess, f)
    for i in computed:
        for guess in (*GUESSES, *options[i]):
            answers = list(right_answers)
            answers[i] = guess
            f = call(*answers)
            assert f.ok is not True, (check, i, guess, f)
    for i, choices in enumerate(options):  # the choices alone do not pass either
        for guess in choices:
            answers = [
                guess if j == i else (GUESSES[1] if j in computed else right_answers[j])
                for j in range(len(right_answers))
            ]
            assert call(*answers).ok is not True, (check, i, guess)


# --------------------------------------------------------------- notebooks and checks
def test_feedback_prints_its_message():
    f = Feedback(True, "correct: yes")
    assert str(f) == repr(f) == "correct: yes"


@pytest.mark.parametrize("name", sorted(exercises.CHECKS))
def test_answer_cells_call_their_checks(name):
    """Each notebook has one answer cell, between the exercises and the first solution,
    with every answer None and a call to each of its three checks."""
    nb = exercises.with_solutions(NOTEBOOKS / f"{name}.py", SOLUTIONS)
    text = [c.source for c in nb.cells]
    start = next(i for i, s in enumerate(text) if "## Exercises" in s)
    first_solution = next(i for i, c in enumerate(nb.cells) if exercises.is_solution(c))
    (cell,) = [c for c in nb.cells[start + 1 : first_solution] if c.cell_type == "code"]
    for check in exercises.CHECKS[name]:
        assert callable(getattr(exercises, check))
        assert f"exercises.{check}(" in cell.source, check
    assigned = re.findall(r"^(\w+) = (.+?)(?:  #.*)?$", cell.source, re.M)
    assert assigned and all(value == "None" for _, value in assigned), assigned


def test_every_check_is_listed():
    listed = {c for checks in exercises.CHECKS.values() for c in checks}
    defined = {n for n in dir(exercises) if n.startswith("check_")}
    assert listed == defined
    assert all(len(checks) == 3 for checks in exercises.CHECKS.values())
    assert sorted(exercises.CHECKS) == sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.py"))


# --------------------------------------------------------------------- student copies
def test_write_student_drops_every_solution(tmp_path):
    """``make student`` on the full notebooks (``make solutions``) drops their solutions:
    the copies are the tutorials' cells."""
    full_dir, out = tmp_path / "full", tmp_path / "student"
    sources = student.write_solutions(NOTEBOOKS, full_dir, SOLUTIONS)
    assert [p.name for p in sources] == sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.py"))
    paths = student.write_student(full_dir, out, formats=("ipynb", "py:percent"))
    assert [p.name for p in paths] == sorted(
        f"{s.stem}{ext}" for s in sources for ext in (".ipynb", ".py")
    )
    for src in sources:
        full = jupytext.read(src)
        kept = [c.source for c in jupytext.read(NOTEBOOKS / src.name).cells]
        solved = [c.source for c in jupytext.read(SOLUTIONS / src.name).cells]
        assert [c.source for c in full.cells] == kept + solved and solved
        assert full.metadata["jupytext"]["formats"] == "py:percent"  # opens as a notebook
        for ext in (".ipynb", ".py"):
            nb = jupytext.read(out / f"{src.stem}{ext}")
            assert not any("solution" in c.metadata.get("tags", []) for c in nb.cells)
            assert [c.source for c in nb.cells] == kept
        raw = json.loads((out / f"{src.stem}.ipynb").read_text())
        assert "jupytext" not in raw["metadata"]  # not paired: saving writes no .py
        assert raw["metadata"]["kernelspec"]["name"] == "python3"
    with pytest.raises(ValueError, match="overwrite"):
        student.write_student(NOTEBOOKS, NOTEBOOKS)
    with pytest.raises(FileNotFoundError):
        student.write_student(tmp_path / "empty", out)


def test_with_solutions_takes_only_solution_cells_apart(tmp_path):
    """A tutorial holding a solution cell, or a solutions file holding another cell, is
    refused with a line naming both files; a missing solutions file names itself."""
    name = "01_x.py"
    tagged = '# %% tags=["solution"]\nx = 1\n'
    for text, solutions in ((tagged, tagged), ("# %%\nx = 2\n", "# %%\nx = 1\n")):
        (tmp_path / "nb").mkdir(exist_ok=True)
        (tmp_path / "sol").mkdir(exist_ok=True)
        tutorial = jupytext.reads(text, fmt="py:percent")
        jupytext.write(tutorial, tmp_path / "nb" / name, fmt="py:percent")
        (tmp_path / "sol" / name).write_text(solutions)
        with pytest.raises(ValueError, match="must hold no solution cell"):
            exercises.with_solutions(tmp_path / "nb" / name, tmp_path / "sol")
    (tmp_path / "sol" / name).write_text(tagged)
    full = exercises.with_solutions(tmp_path / "nb" / name, tmp_path / "sol")
    assert [c.source for c in full.cells] == ["x = 2", "x = 1"]
    assert exercises.is_solution(full.cells[1]) and not exercises.is_solution(full.cells[0])
    with pytest.raises(FileNotFoundError, match="missing"):
        exercises.with_solutions(tmp_path / "nb" / name, tmp_path / "elsewhere")


def test_command_line_and_makefile(tmp_path, capsys):
    out = tmp_path / "copies"
    assert student.main(["student", "--src", str(NOTEBOOKS), "--out", str(out)]) == 0
    listed = capsys.readouterr().out.split()
    assert listed == [str(p) for p in sorted(out.glob("*.ipynb"))] and len(listed) == 6
    full = tmp_path / "full"
    argv = ["solutions", "--src", str(NOTEBOOKS), "--solutions", str(SOLUTIONS)]
    assert student.main([*argv, "--out", str(full)]) == 0
    listed = capsys.readouterr().out.split()
    assert listed == [str(p) for p in sorted(full.glob("*.py"))] and len(listed) == 6
    # a wrong directory: one line naming it, no traceback
    for bad in (["--src", str(tmp_path / "none")], ["--solutions", str(tmp_path / "none")]):
        with pytest.raises(SystemExit) as err:
            student.main(["solutions", "--src", str(NOTEBOOKS), "--out", str(full), *bad])
        assert err.value.code == 2
        message = capsys.readouterr().err.strip().splitlines()[-1]
        assert str(tmp_path / "none") in message and "Traceback" not in message
    if shutil.which("make") is None:
        pytest.skip("no make")
    dry = subprocess.run(
        ["make", "-n", "-W", ".venv/.installed", "student", "solutions", "notebooks"]
        + ["STUDENT_OUT=elsewhere", "SOLUTIONS_OUT=there"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert "-m rlcd_lab.classroom.student student --src notebooks --out elsewhere" in dry.stdout
    assert "-m rlcd_lab.classroom.student solutions --src notebooks --out there" in dry.stdout
    assert "-m rlcd_lab.classroom.student notebooks" in dry.stdout
    ignored = (REPO / ".gitignore").read_text().splitlines()
    assert "/student/" in ignored and "/solutions/" in ignored


def test_no_student_facing_notebook_holds_a_solution(tmp_path):
    """What a student opens after a clone (``notebooks/``) and what ``make student`` hands
    out hold no solution cell, nor a line of one (its worked comments, its calls of the
    checks with the answers); the solutions are in ``instructors/solutions/``, one file per
    tutorial, every cell tagged ``solution`` and hidden. (tests/test_notebooks.py tries
    every number of the tutorials' text and outputs as each exercise's answer.)"""
    tutorials = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py"))
    solution_files = sorted(SOLUTIONS.iterdir())
    assert [p.name for p in solution_files] == [p.name for p in tutorials]
    lines = set()
    for path in solution_files:
        cells = jupytext.read(path).cells
        assert cells and all(exercises.is_solution(c) for c in cells), path.name
        assert all(c.metadata["jupyter"]["source_hidden"] for c in cells), path.name
        for cell in cells:
            lines |= {
                line.strip()
                for line in cell.source.splitlines()
                if len(line.strip()) >= 20 and (line.lstrip().startswith("#") or "check_" in line)
            }
    assert len(lines) >= 3 * len(tutorials)  # something to look for in each tutorial
    handed = student.write_student(NOTEBOOKS, tmp_path, formats=("ipynb", "py:percent"))
    shipped = [  # what a clone holds there (not a local run's caches)
        p
        for p in NOTEBOOKS.rglob("*")
        if p.is_file()
        and not any(d.startswith((".", "__")) for d in p.relative_to(NOTEBOOKS).parts)
    ]
    assert tutorials and set(tutorials) <= set(shipped)
    for path in shipped + handed:
        if path.suffix in (".py", ".ipynb"):
            assert not any(exercises.is_solution(c) for c in jupytext.read(path).cells), path
        text = path.read_text()
        assert not [line for line in lines if line in text], path


# ------------------------------------------------------------------ JupyterLab
def test_every_tutorial_is_one_file_of_the_python3_kernel():
    """Each tutorial is its .py alone (no .ipynb twin to list beside it), and its header
    names the kernel as the python3 kernelspec of ipykernel does: JupyterLab writes the
    kernel's kernelspec into the notebook it opens, so another display name would mark
    every freshly opened tutorial as modified."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("python3")
    for src in NOTEBOOKS.glob("[0-9][0-9]_*.py"):
        meta = jupytext.read(src).metadata
        assert meta["jupytext"]["formats"] == "py:percent", src.name
        assert meta["kernelspec"]["display_name"] == spec.display_name, src.name
        assert meta["kernelspec"]["name"] == "python3", src.name


def test_tutorials_open_with_what_the_kernel_reports_and_save_unchanged(tmp_path):
    """JupyterLab writes the kernel's kernelspec and language_info into the notebook it
    opens and marks it modified when they differ: the contents manager that make app
    configures gives each tutorial exactly what a started python3 kernel reports, and
    saving the notebook it opened writes the .py as it was."""
    import asyncio

    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import start_new_kernel

    from rlcd_lab.classroom.jupyterlab import TutorialContentsManager

    km, kc = start_new_kernel(kernel_name="python3")
    try:
        reply = kc.kernel_info(reply=True, timeout=60)["content"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    spec = KernelSpecManager().get_kernel_spec("python3")
    for src in NOTEBOOKS.glob("[0-9][0-9]_*.py"):
        shutil.copy2(src, tmp_path / src.name)
    shutil.copy2(REPO / "jupytext.toml", tmp_path / "jupytext.toml")
    lab = TutorialContentsManager(root_dir=str(tmp_path))
    for src in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py")):
        model = asyncio.run(lab.get(src.name))
        meta = model["content"]["metadata"]
        assert meta["language_info"] == reply["language_info"], src.name
        assert meta["kernelspec"] == {
            "display_name": spec.display_name,
            "language": spec.language,
            "name": "python3",
        }
        asyncio.run(lab.save(model, src.name))
        assert (tmp_path / src.name).read_text() == src.read_text(), src.name
    config = json.loads(student.set_contents_manager(tmp_path / "etc").read_text())
    path = config["ServerApp"]["contents_manager_class"]
    module, name = path.rsplit(".", 1)
    assert getattr(__import__(module, fromlist=[name]), name) is TutorialContentsManager


def test_make_app_installs_no_grader_and_opens_tutorials_as_notebooks():
    """The install step of ``make app`` (the .venv stamp) installs no grader and sets
    JupyterLab's default viewer; ``make test`` installs the graders into .venv-graders
    and its grader tests run them there, required."""
    if shutil.which("make") is None:
        pytest.skip("no make")
    app = subprocess.run(
        ["make", "-n", "-B", "app"], cwd=REPO, capture_output=True, text=True
    ).stdout
    installs = [line for line in app.splitlines() if "pip install" in line]
    assert installs and not any(
        "graders" in line or "nbgrader" in line or "otter" in line for line in installs
    ), installs
    assert "-m rlcd_lab.classroom.student notebooks" in app
    test = subprocess.run(
        ["make", "-n", "-B", "test"], cwd=REPO, capture_output=True, text=True
    ).stdout
    graders = [line for line in test.splitlines() if "pip install" in line and "graders" in line]
    assert graders and all(line.startswith(".venv-graders/bin/python") for line in graders)
    assert f"RLCD_LAB_GRADERS_PYTHON={REPO / '.venv-graders/bin/python'}" in test
    assert "RLCD_LAB_REQUIRE_GRADERS=1" in test


def test_lab_opens_python_files_as_notebooks(tmp_path, monkeypatch):
    from jupyter_server.services.config.manager import ConfigManager

    settings = tmp_path / "labconfig" / "default_setting_overrides.json"
    settings.parent.mkdir(parents=True)
    other = {"@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"}}
    other["@jupyterlab/docmanager-extension:plugin"] = {"defaultViewers": {"markdown": "X"}}
    settings.write_text(json.dumps(other))
    assert student.set_default_viewer(tmp_path) == settings
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(tmp_path))  # as JupyterLab reads it
    overrides = ConfigManager(config_dir_name="labconfig").get("default_setting_overrides")
    viewers = overrides["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]
    assert viewers == {"markdown": "X", "python": student.JUPYTEXT_VIEWER}
    assert overrides["@jupyterlab/apputils-extension:themes"] == {"theme": "JupyterLab Dark"}
    labext = Path(sys.prefix) / "share" / "jupyter" / "labextensions"
    lab_js = list(labext.glob("*jupytext*/**/*.js"))
    if lab_js:  # the installed jupytext extension registers that viewer name
        assert any(student.JUPYTEXT_VIEWER in p.read_text(errors="ignore") for p in lab_js)
