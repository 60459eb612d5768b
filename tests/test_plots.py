"""Plotly figures: inspect fig.to_dict() against the metrics they display."""

import json

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

from rlcd_lab import metrics as M
from rlcd_lab import plots as P


def case(n, k, seed):
    rng = np.random.default_rng(seed)
    p = M.softmax(rng.normal(size=(n, k)) * 2.0)
    y = rng.integers(0, k, size=n)
    return p, y


# ---------------------------------------------------------------------------------------
# Reliability diagram
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "k"), [(1, 2), (200, 2), (200, 10)])
def test_reliability_diagram_traces_and_ece(n, k):
    p, y = case(n, k, k)
    fig = P.reliability_diagram(p, y, n_bins=10, title="t")
    assert isinstance(fig, go.Figure)
    d = fig.to_dict()
    names = [t["name"] for t in d["data"]]
    assert names == ["perfect calibration", "accuracy", "gap", "mean confidence", "count"]
    ece = M.ece(p, y, 10)
    assert d["layout"]["meta"]["ece"] == ece
    assert [a["text"] for a in d["layout"]["annotations"]] == [f"ECE = {ece:.4f}"]
    bins = M.reliability_bins(p.max(1), p.argmax(1) == y, 10)
    keep = bins["count"] > 0
    diag, acc, gap, marks, count = d["data"]
    assert diag["x"] == [0.0, 1.0] and diag["y"] == [0.0, 1.0]
    assert acc["y"] == pytest.approx(bins["accuracy"][keep].tolist())
    # bin centres (i + 1/2) / n of the non-empty bins
    assert acc["x"] == pytest.approx([(i + 0.5) / 10 for i in np.flatnonzero(keep)])
    # each gap bar spans accuracy -> mean confidence
    tops = np.array(gap["base"]) + np.array(gap["y"])
    assert tops.tolist() == pytest.approx(bins["confidence"][keep].tolist())
    assert marks["x"] == pytest.approx(bins["confidence"][keep].tolist())
    # histogram underneath: all bins, counts sum to N, on the second row's axes
    assert count["y"] == bins["count"].tolist() and sum(count["y"]) == n
    assert count["yaxis"] == "y2" and acc.get("yaxis", "y") == "y"
    assert d["layout"]["title"]["text"] == "t"
    json.dumps(d["data"])  # plain lists, no numpy / base64 payloads


def test_reliability_diagram_accepts_torch():
    p, y = case(50, 3, 0)
    a = P.reliability_diagram(torch.tensor(p), torch.tensor(y)).to_dict()
    b = P.reliability_diagram(p, y).to_dict()
    assert a["data"] == b["data"]


# ---------------------------------------------------------------------------------------
# Risk-coverage
# ---------------------------------------------------------------------------------------


def two_models():
    rng = np.random.default_rng(1)
    correct_a = rng.random(300) < 0.8
    conf_a = np.clip(0.6 + 0.3 * correct_a + rng.normal(0, 0.1, 300), 0, 1)
    correct_b = rng.random(300) < 0.7
    conf_b = rng.uniform(0.5, 1.0, 300)
    return {"rlcd": (conf_a, correct_a), "grpo": (conf_b, correct_b)}


def test_risk_coverage_figure_legend_and_lines_match_metrics():
    models = two_models()
    fig = P.risk_coverage_figure(models, eps=0.05)
    d = fig.to_dict()
    names = [t["name"] for t in d["data"]]
    aurc = {m: M.aurc(*cc) for m, cc in models.items()}
    cov = {m: M.coverage_at_risk(*cc, 0.05) for m, cc in models.items()}
    assert names == [
        f"rlcd (AURC={aurc['rlcd']:.4f})",
        "rlcd oracle",
        "rlcd Cov@0.05",
        f"grpo (AURC={aurc['grpo']:.4f})",
        "grpo Cov@0.05",
        "risk = 0.05",
    ]
    curve_a, oracle_a, vline_a, curve_b, vline_b, hline = d["data"]
    # the legend's number and the exact meta value are metrics.aurc
    for trace, m in ((curve_a, "rlcd"), (curve_b, "grpo")):
        assert trace["meta"]["aurc"] == aurc[m]
        assert float(trace["name"].split("AURC=")[1].rstrip(")")) == pytest.approx(
            aurc[m], abs=5e-5
        )
        # the plotted curve is the risk-coverage curve; its mean is the AURC
        assert np.mean(trace["y"]) == pytest.approx(aurc[m])
    # vertical lines at Cov@eps, horizontal line at eps
    assert vline_a["x"] == [cov["rlcd"], cov["rlcd"]]
    assert vline_b["x"] == [cov["grpo"], cov["grpo"]]
    assert hline["y"] == [0.05, 0.05] and hline["x"] == [0.0, 1.0]
    # Cov@eps is the last coverage whose risk is <= eps on the plotted curve
    xs, ys = np.array(curve_a["x"]), np.array(curve_a["y"])
    assert xs[ys <= 0.05 + 1e-12].max() == cov["rlcd"]
    # oracle: max(0, k - C) / k, pointwise below the model's curve
    conf_a, correct_a = models["rlcd"]
    c = int(correct_a.sum())
    assert oracle_a["y"] == pytest.approx([max(0, k - c) / k for k in range(1, 301)])
    assert np.all(np.array(oracle_a["y"]) <= ys + 1e-12)
    json.dumps(d["data"])


@pytest.mark.parametrize(("oracle", "n_traces"), [("first", 6), ("each", 7), ("none", 5)])
def test_risk_coverage_oracle_options(oracle, n_traces):
    fig = P.risk_coverage_figure(two_models(), eps=0.1, oracle=oracle)
    names = [t["name"] for t in fig.to_dict()["data"]]
    assert len(names) == n_traces
    assert sum(n.endswith("oracle") for n in names) == {"first": 1, "each": 2, "none": 0}[oracle]
    assert names[-1] == "risk = 0.1"
    with pytest.raises(ValueError):
        P.risk_coverage_figure(two_models(), oracle="best")


def test_risk_coverage_all_wrong_puts_the_line_at_zero():
    conf = np.linspace(0.9, 0.6, 5)
    d = P.risk_coverage_figure({"m": (conf, np.zeros(5, bool))}).to_dict()
    assert d["data"][0]["meta"] == {"model": "m", "aurc": 1.0, "cov_at_eps": 0.0}
    assert d["data"][2]["x"] == [0.0, 0.0]


# ---------------------------------------------------------------------------------------
# Per-rationale bars
# ---------------------------------------------------------------------------------------


def test_rationale_bars_default_mixture_and_hover():
    u = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.4, 0.4, 0.2]])
    texts = ["short", "x" * 500, "third"]
    fig = P.rationale_bars(u, ["A", "B", "C"], texts=texts, max_hover_chars=20)
    d = fig.to_dict()
    assert [t["name"] for t in d["data"]] == ["r1", "r2", "r3", "mixture"]
    for i in range(3):
        assert d["data"][i]["x"] == ["A", "B", "C"]
        assert d["data"][i]["y"] == u[i].tolist()
    mix = d["data"][3]
    # mixture p = row mean = (1.2/3, 1.4/3, 0.4/3)
    assert mix["y"] == pytest.approx([1.2 / 3, 1.4 / 3, 0.4 / 3])
    # diversity (1/M) sum_i ||u_i - p||^2, computed by hand-rolled loops
    p = [sum(u[i][k] for i in range(3)) / 3 for k in range(3)]
    div = sum(sum((u[i][k] - p[k]) ** 2 for k in range(3)) for i in range(3)) / 3
    assert mix["meta"]["diversity"] == pytest.approx(div)
    assert d["data"][0]["hovertext"] == ["short"] * 3
    assert len(d["data"][1]["hovertext"][0]) == 20  # truncated, ellipsis included
    assert d["layout"]["barmode"] == "group"


def test_rationale_bars_given_mixture_and_errors():
    u = torch.tensor([[0.5, 0.5], [1.0, 0.0]])
    d = P.rationale_bars(u, mixture=[0.9, 0.1]).to_dict()
    assert d["data"][-1]["y"] == [0.9, 0.1]
    assert d["data"][0]["x"] == ["0", "1"]  # default option names
    with pytest.raises(ValueError):
        P.rationale_bars(u, ["only one"])
    with pytest.raises(ValueError):
        P.rationale_bars(u, texts=["a"])
    with pytest.raises(ValueError):
        P.rationale_bars(u[0])


# ---------------------------------------------------------------------------------------
# Training curves
# ---------------------------------------------------------------------------------------

ROWS = [
    {"step": 0, "loss": 1.0, "grad_norm": 3.0},
    {"step": 1, "loss": 0.8},
    {"step": 2, "loss": None, "grad_norm": 2.0, "dev_ece": 0.1},
    {"step": 3, "loss": 0.5, "grad_norm": float("nan"), "note": "x"},
    {"loss": 0.1},  # no step: skipped everywhere
]


def test_training_curves_skip_rows_missing_a_column():
    d = P.training_curves(ROWS, ["loss", "grad_norm"]).to_dict()
    loss, gn = d["data"]
    assert loss["name"] == "loss" and loss["x"] == [0.0, 1.0, 3.0] and loss["y"] == [1.0, 0.8, 0.5]
    assert gn["x"] == [0.0, 2.0] and gn["y"] == [3.0, 2.0]
    # default columns: every numeric key except x, in first-seen order
    d = P.training_curves(ROWS).to_dict()
    assert [t["name"] for t in d["data"]] == ["loss", "grad_norm", "dev_ece"]
    # a single column name works; a missing column gives an empty trace
    d = P.training_curves(ROWS, "dev_ece").to_dict()
    assert d["data"][0]["x"] == [2.0]
    assert P.training_curves(ROWS, "absent").to_dict()["data"][0]["x"] == []


def test_training_curves_from_log_jsonl_and_separate_axes(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS[:2]) + "\n\n")
    for src in (path, str(path)):
        d = P.training_curves(src, ["loss"]).to_dict()
        assert d["data"][0]["y"] == [1.0, 0.8]
    d = P.training_curves(ROWS, ["loss", "grad_norm"], separate=True).to_dict()
    assert [t.get("yaxis", "y") for t in d["data"]] == ["y", "y2"]
    assert d["layout"]["xaxis2"]["title"]["text"] == "step"
    # another x column
    d = P.training_curves([{"t": 1, "a": 2}, {"t": 2, "a": 3}], ["a"], x="t").to_dict()
    assert d["data"][0]["x"] == [1.0, 2.0]
    assert d["layout"]["xaxis"]["title"]["text"] == "t"
