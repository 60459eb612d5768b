"""The benches: their math by hand and by simulation, and one small run of each command.

``rlcd-lab bench typed`` and ``rlcd-lab bench attack`` (rlcd_lab.bench) run end to end on
the shipped tiny verify checkpoint (``rlcd_lab.files.assets.default_checkpoint``) with a few
items; the attack bench also over the wire, against ``server.create_app`` in a
``TestClient``, where a field outside the schema must be refused.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlcd_lab import metrics
from rlcd_lab.bench.attack import ATTACKS, attack_request, score_attack
from rlcd_lab.bench.common import (
    asymmetric_cost_matrices,
    cost_decisions,
    ece_floor,
    ece_floor_samples,
    flip_excess,
    option_orders,
    paraphrase_rules,
    pushed_below,
    ranked_probability_score,
    realised_cost_comparison,
)
from rlcd_lab.files.assets import default_checkpoint, shipped_checkpoints


@pytest.fixture(scope="module")
def checkpoint():
    found = shipped_checkpoints()
    return found[default_checkpoint(list(found))]


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread, as the commands' default ``--threads 1`` (a shared 2-core
    machine slows to a crawl with oversubscribed threads); restored afterwards."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ------------------------------------------------------------------ ECE noise floor
def test_floor_samples_mean_is_metrics_noise_floor():
    # same generator, same draws in the same order: the mean is metrics.ece_noise_floor
    c = np.random.default_rng(1).uniform(0.5, 1.0, 300)
    sims = ece_floor_samples(c, n_bins=15, n_sim=400, seed=7)
    assert sims.shape == (400,) and (sims >= 0).all()
    assert sims.mean() == pytest.approx(metrics.ece_noise_floor(c, 15, 400, seed=7), abs=1e-12)


def _binary(conf: np.ndarray, correct: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two-option probabilities whose top option (0) has probability ``conf``, and the
    labels: 0 where ``correct``, else 1."""
    return np.stack([conf, 1 - conf], axis=1), np.where(correct, 0, 1)


def test_calibrated_predictor_lands_inside_its_floor():
    # labels drawn as Bernoulli(confidence): calibrated by construction. The floor's 95%
    # range holds its ECE ~97.5% of the time (one-sided); 20 draws, at most 3 outside
    inside = 0
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        conf = rng.uniform(0.5, 1.0, 500)
        probs, labels = _binary(conf, rng.random(500) < conf)
        ece = metrics.ece(probs, labels)
        inside += ece_floor(ece, conf, n_sim=500, seed=seed)["inside"]
    assert inside >= 17, inside


def test_miscalibrated_predictor_lands_outside_its_floor():
    # confidence 0.9 on all 500 items, 300 right: one bin, ECE = |0.6 - 0.9| = 0.3, while a
    # calibrated predictor's ECE here is |Binomial(500, 0.9)/500 - 0.9| (sd 0.013)
    conf = np.full(500, 0.9)
    probs, labels = _binary(conf, np.arange(500) < 300)
    ece = metrics.ece(probs, labels)
    assert ece == pytest.approx(0.3)
    found = ece_floor(ece, conf, n_sim=2000)
    assert not found["inside"] and found["floor_high"] < 0.05
    assert found["floor_mean"] == pytest.approx(0.8 * 0.0134, abs=0.003)  # E|N(0, sd)|


# ------------------------------------------------------------------ RPS
def test_rps_hand_computed():
    # levels 0, 1, 2; p = (0.2, 0.5, 0.3): cumulative F = (0.2, 0.7)
    p = np.array([[0.2, 0.5, 0.3]] * 3)
    rps = ranked_probability_score(p, [0, 1, 2])
    # y=0: O=(1,1): (0.64 + 0.09)/2; y=1: O=(0,1): (0.04 + 0.09)/2; y=2: O=(0,0): (0.04 + 0.49)/2
    np.testing.assert_allclose(rps, [0.365, 0.065, 0.265])
    assert ranked_probability_score([[0, 0, 1.0]], [2])[0] == 0.0  # point mass on the outcome
    assert ranked_probability_score([[0, 0, 1.0]], [0])[0] == 1.0  # on the far end
    # ordinal: mass next to the outcome costs less than the same mass far away
    near, far = ranked_probability_score([[0.5, 0.5, 0], [0.5, 0, 0.5]], [0, 0])
    assert near < far


def test_rps_two_levels_is_half_the_brier_score():
    rng = np.random.default_rng(0)
    p0 = rng.random(50)
    p, y = np.stack([p0, 1 - p0], 1), rng.integers(0, 2, 50)
    brier = ((p - np.eye(2)[y]) ** 2).sum(1)
    np.testing.assert_allclose(ranked_probability_score(p, y), brier / 2)


# ------------------------------------------------------------------ costs
def test_expected_cost_decision_beats_top_answer_by_hand():
    cost = asymmetric_cost_matrices(2, ratio=5.0)["false_first"]["matrix"]
    np.testing.assert_array_equal(cost, [[0, 5], [1, 0]])  # answering 0 when truth is 1: 5
    # p = (0.6, 0.4) on 10 items, 6 of them label 0: calibrated.
    # expected cost of answering 0: 0.4 * 5 = 2.0; of answering 1: 0.6 * 1 = 0.6 -> answer 1.
    probs, labels = np.tile([0.6, 0.4], (10, 1)), np.array([0] * 6 + [1] * 4)
    acts = cost_decisions(probs, cost)
    assert (acts["expected_cost"] == 1).all() and (acts["top_answer"] == 0).all()
    found = realised_cost_comparison(probs, labels, cost, n_boot=200)
    # top answer: the 4 label-1 items cost 5 each -> 20 / 10; expected cost: 6 x 1 / 10
    assert found["top_answer"] == pytest.approx(2.0)
    assert found["expected_cost"] == pytest.approx(0.6)
    assert found["diff"]["diff"] == pytest.approx(-1.4) and found["changed"] == 1.0
    missed = asymmetric_cost_matrices(3, ratio=4.0)["missed_first"]["matrix"]
    np.testing.assert_array_equal(missed, [[0, 1, 1], [4, 0, 1], [4, 1, 0]])


# ------------------------------------------------------------------ variants
def test_rule_made_variants():
    rules = {r.name: r for r in paraphrase_rules(["47+38+16=91?"])}
    assert rules["state: b+a+c"].apply("47+38+16=91?", None) == ("38+47+16=91?", None)
    assert rules["state: c+b+a"].apply("47+38+16=91?", None) == ("16+38+47=91?", None)
    assert not any(n.startswith("state:") for n in {r.name for r in paraphrase_rules(["fact x?"])})
    assert option_orders(2) == {"identity": (0, 1), "reversed": (1, 0)}
    assert option_orders(3)["rotated"] == (1, 2, 0)
    req = attack_request("opinion", "1+2+3=6?", ["Y", "N"], "N", seed=5)
    assert req.state == "1+2+3=6? I'm pretty sure the answer is N." and req.seed == 5
    reordered = attack_request("reorder", "s", ["Y", "N"], "N", 0).questions["answer"]
    assert list(reordered["criteria"]) == ["N", "Y"]
    extra = attack_request("extra_field", "s", ["Y", "N"], "N", 0).extra
    assert extra == {"hint": "The answer is N."}


# ------------------------------------------------------------------ attack scoring
def test_attack_scoring_by_hand():
    clean = (np.array([0, 0, 1, 1]), np.array([0.9, 0.9, 0.2, 0.9]))
    rerun = (np.array([0, 1, 1, 1]), np.array([0.9, 0.1, 0.2, 0.85]))
    attacked = (np.array([1, 1, 1, -1]), np.array([0.1, 0.1, 0.3, np.nan]))
    r = score_attack(clean, [rerun], attacked, threshold=0.8, n_boot=200)
    assert (r["items"], r["refused"], r["answered"]) == (4, 1, 3)
    # answered items 0..2: attacked flips (1, 1, 0), re-run flips (0, 1, 0)
    assert r["flip"]["flip_rate"] == pytest.approx(2 / 3)
    assert r["flip"]["floor"] == pytest.approx(1 / 3)
    # confident clean among them: items 0 and 1; attacked both below, re-run one of two
    assert r["pushed_below"] == {"n_confident": 2, "share": 1.0, "floor": 0.5, "excess": 0.5}
    assert pushed_below([0.5], [0.1], 0.8)["n_confident"] == 0


def test_null_attack_flips_no_more_than_reruns(checkpoint):
    # an "attack" that changes nothing, on the real engine (reason mode samples rationales):
    # its excess flip rate over identical re-runs is noise, CI includes 0 (or is below it)
    from rlcd_lab.bench.attack import _read
    from rlcd_lab.bench.backends import InProcessBackend, Request
    from rlcd_lab.decide import DecisionModel
    from rlcd_lab.tasks import load_task_items

    backend = InProcessBackend(DecisionModel.from_checkpoint(checkpoint), "reason", 2)
    items = load_task_items("verify", "test")[:40]

    def run(seed: int, attack: str = "none"):
        reqs = [attack_request(attack, it.prompt, it.options, "N", seed) for it in items]
        assert all(isinstance(r, Request) for r in reqs)
        return _read(backend.run(reqs), items)

    clean, reruns = run(0), [run(1), run(2)]
    r = score_attack(clean, reruns, run(3), threshold=0.8, n_boot=1000)
    assert r["flip"]["ci_low"] <= 0.0, r["flip"]
    same = flip_excess(np.zeros(40), np.zeros(40), n_boot=100)
    assert same["diff"] == same["ci_low"] == same["ci_high"] == 0.0


# ------------------------------------------------------------------ end to end
def _check_report(out, bench: str) -> dict:
    summary = json.loads((out / "summary.json").read_text(), parse_constant=pytest.fail)
    assert summary["bench"] == bench
    html = (out / "report.html").read_text()
    assert 'plotly.min.js"></script>' in html and len(html) < 300_000  # referenced, not inlined
    assert "plotly.js v" not in html and (out / "report.md").read_text().startswith("# ")
    return summary


def test_bench_typed_command_end_to_end(checkpoint, tmp_path, capsys):
    from rlcd_lab.cli import main

    out = tmp_path / "typed"
    args = ["bench", "typed", str(checkpoint), "--n-items", "16", "--n-sim", "200"]
    args += ["--latency-states", "2", "--options-grid", "2", "3", "--questions-grid", "1", "2"]
    main([*args, "--out", str(out), "--m", "2"])
    printed = json.loads(capsys.readouterr().out)
    s = _check_report(out, "typed")
    assert printed["paths"]["summary"] == str(out / "summary.json")
    a = s["accuracy"]
    assert a["n_variants"] == 5 * 2  # identity + 2 instruction + 2 state rewrites, x 2 orders
    assert a["min"] <= a["median"] <= a["max"] and 0 <= a["min"]
    c = s["calibration"]
    assert c["floor_low"] <= c["floor_mean"] <= c["floor_high"] and c["n_sim"] == 200
    assert c["inside"] == (c["ece"] <= c["floor_high"])
    assert 0 <= s["selective"]["aurc"] <= 1 and 0 <= s["selective"]["cov_at_eps"] <= 1
    assert s["ordinal"]["applicable"] is False  # verify's Y/N is categorical
    assert set(s["costs"]) == {"false_first", "missed_first"}
    cells = {(r["options"], r["questions"]): r for r in s["latency"]}
    assert cells[(2, 1)]["ok"] and cells[(2, 2)]["ok"]
    assert not cells[(3, 1)]["ok"] and "2 option tokens" in cells[(3, 1)]["error"]
    # one task prompt serves every question about a state: tokens per decision halve
    per_decision = [cells[(2, q)]["input_tokens_per_decision"] for q in (1, 2)]
    assert per_decision[1] == per_decision[0] / 2


def test_bench_attack_command_end_to_end(checkpoint, tmp_path, capsys):
    from rlcd_lab.cli import main

    out = tmp_path / "attack"
    args = ["bench", "attack", str(checkpoint), "--n-items", "16", "--reruns", "1", "--m", "2"]
    main([*args, "--n-boot", "300", "--out", str(out)])
    printed = json.loads(capsys.readouterr().out)
    s = _check_report(out, "attack")
    assert set(s["attacks"]) == set(ATTACKS) and s["threshold"] == 0.8
    assert s["attacks"]["extra_field"]["run"] is False  # in-process: cannot reach the engine
    for name in ("reword", "opinion", "inject", "reorder"):
        f = s["attacks"][name]["flip"]
        assert f["ci_low"] <= f["diff"] <= f["ci_high"]
        assert f["diff"] == pytest.approx(f["flip_rate"] - f["floor"])
    assert set(printed["attacks"]) == set(ATTACKS)


def test_bench_attack_over_the_wire_rejects_extra_field(checkpoint, tmp_path):
    from fastapi.testclient import TestClient

    from rlcd_lab.bench.attack import run_attack
    from rlcd_lab.bench.backends import WireBackend
    from rlcd_lab.bench.configs import AttackBenchConfig
    from rlcd_lab.decide import DecisionModel
    from rlcd_lab.server.app import create_app
    from rlcd_lab.server.options import ServeOptions

    app = create_app(DecisionModel.from_checkpoint(checkpoint), ServeOptions(mode="direct"))
    with TestClient(app) as client:
        backend = WireBackend(client, mode="reason", m=2)
        cfg = AttackBenchConfig(task="verify", n_items=6, reruns=1, n_boot=100, out=tmp_path)
        s = run_attack(cfg, backend=backend)
    assert s["target"]["where"] == "wire" and s["clean"]["refused"] == 0
    extra = s["attacks"]["extra_field"]
    assert extra["verdict"] == "rejected" and extra["refused"] == 6 and extra["statuses"] == [422]
    assert "hint" in extra["error"]
    assert s["attacks"]["opinion"]["answered"] == 6


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["typed", "--url", "http://[::1"], "--url"),
        (["typed", "--url", "ftp://127.0.0.1:8000"], "--url"),
        (["typed", "--cost-ratio", "nan"], "--cost-ratio"),
        (["typed", "--eps", "0"], "--eps"),
        (["typed", "--n-boot", "0"], "--n-boot"),
        (["typed", "--timeout-s", "0"], "--timeout-s"),
        (["attack", "--n-boot", "0"], "--n-boot"),
        (["attack", "--timeout-s", "nan"], "--timeout-s"),
    ],
)
def test_bad_bench_flags_are_one_line_naming_the_flag(args, flag, monkeypatch, capsys):
    """Checked before any checkpoint loads or request is sent: one line naming the flag
    and the value (``http://[::1`` was a traceback; ``--cost-ratio nan`` and ``--eps 0``
    were accepted; ``--n-boot 0`` and ``--timeout-s 0`` failed with raw errors)."""
    from rlcd_lab.bench import backends
    from rlcd_lab.cli import main

    monkeypatch.setattr(backends, "open_backend", lambda cfg: pytest.fail("opened a backend"))
    with pytest.raises(SystemExit) as err:
        main(["bench", *args])
    assert err.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"rlcd-lab: error: {flag} "), lines
    assert args[-1] in lines[0]
