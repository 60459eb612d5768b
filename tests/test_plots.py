"""Plotly figures: inspect fig.to_dict() against the metrics they display."""

import json

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

from rlcd_lab import metrics as M
from rlcd_lab.drawing import plots as P


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


# ---------------------------------------------------------------------------------------
# Several runs on panels, category ticks, legend lines, the mode bar
# ---------------------------------------------------------------------------------------


def test_run_style_keeps_coinciding_runs_apart():
    styles = [P.run_style(i) for i in range(len(P.RUN_DASHES))]
    assert len({s["line"]["dash"] for s in styles}) == len(styles)  # distinct patterns
    assert len({s["marker"]["symbol"] for s in styles}) == len(styles)  # distinct markers
    widths = [s["line"]["width"] for s in styles]
    # each later run thinner (3, 2.25, 1.5, 1.0) down to the floor: drawn on top, the
    # earlier, wider line still shows around it
    assert widths[:4] == [3.0, 2.25, 1.5, 1.0] and min(widths) == P.RUN_MIN_WIDTH
    assert [s["line"]["color"] for s in styles] == list(P.COLORS[: len(styles)])


def test_run_panels_styles_ranges_and_axis_titles():
    # two runs with identical logs: the case where one line hid the other
    rows = [{"step": s, "forced_rate": 0.0, "reward": s - 2.0, "length": 20.0} for s in range(5)]
    panels = {"length": "length", "forced_rate": "forced", "reward": "reward"}
    fig = P.run_panels({"a": rows, "b": rows}, panels, cols=2, rates=["forced_rate"])
    d = fig.to_dict()
    a, b = d["data"][:3], d["data"][3:]
    assert [t["meta"] for t in a] == [{"run": "a", "column": c} for c in panels]
    assert all(t["y"] == u["y"] for t, u in zip(a, b, strict=True))  # they coincide...
    for t, u in zip(a, b, strict=True):  # ...and stay apart in style, b thinner on top
        assert t["line"]["dash"] != u["line"]["dash"]
        assert t["marker"]["symbol"] != u["marker"]["symbol"]
        assert u["line"]["width"] < t["line"]["width"]
        assert t["mode"] == "lines+markers"  # 5 points <= MARKER_MAX_POINTS
    assert [t["showlegend"] for t in d["data"]] == [True, False, False] * 2
    lay = d["layout"]
    # panels row by row: length (x, y), forced_rate (x2, y2), reward (x3, y3)
    assert lay["yaxis2"]["range"] == list(P.RATE_RANGE)  # all-zero rate on [0, 1]
    assert P.RATE_RANGE[0] < 0 < 1 < P.RATE_RANGE[1]
    assert lay["yaxis"]["rangemode"] == "tozero"  # lengths >= 0
    assert "rangemode" not in lay["yaxis3"] and "range" not in lay["yaxis3"]  # rewards < 0
    # "step" under the lowest panel of each column: reward (row 2) and forced_rate (row 1,
    # nothing below it); length has reward below it
    assert lay["xaxis3"]["title"]["text"] == "step" and lay["xaxis2"]["title"]["text"] == "step"
    assert lay["xaxis2"]["showticklabels"] is True
    assert "title" not in lay["xaxis"]
    assert lay["height"] == P.DEFAULT_HEIGHT + 240  # two rows
    assert [a["text"] for a in lay["annotations"]] == list(panels.values())


def test_run_panels_smooths_long_curves_except_raw_columns():
    rows = [{"step": s, "v": float(s % 2), "acc": float(s % 2)} for s in range(30)]
    fig = P.run_panels({"r": rows}, {"v": "v", "acc": "acc"}, smooth=10, raw=["acc"])
    v, acc = fig.to_dict()["data"]
    # trailing mean of 0, 1, 0, 1, ...: 0, 1/2, 1/3, 2/4, ..., then 5/10 from step 9 on
    assert v["y"][:4] == pytest.approx([0.0, 0.5, 1 / 3, 0.5])
    assert v["y"][9:] == pytest.approx([0.5] * 21)
    assert acc["y"] == [float(s % 2) for s in range(30)]
    # 20 points (= 2 * smooth) are shown as they are
    short = P.run_panels({"r": rows[:20]}, {"v": "v"}, smooth=10).to_dict()["data"][0]
    assert short["y"] == [float(s % 2) for s in range(20)]
    with pytest.raises(ValueError, match="no panels"):
        P.run_panels({"r": rows}, {})


@pytest.mark.parametrize(
    ("text", "wrapped"),
    [
        ("calibrate", "calibrate"),
        ("anchor-only", "anchor-<br>only"),
        ("rft-kl-matched", "rft-kl-<br>matched"),
        ("endtoend-c0.1", "endtoend-<br>c0.1"),
        ("my_long_name", "my_long_<br>name"),
        ("always escalate now", "always<br>escalate<br>now"),
        ("averyveryverylongname", "averyveryverylongname"),  # no place to break
    ],
)
def test_wrap_label(text, wrapped):
    assert P.wrap_label(text, 10) == wrapped
    assert wrapped.replace("<br>", "").replace(" ", "") == text.replace(" ", "")


def _slider_bars():
    from rlcd_lab.classroom import tutorial

    names = ["anchor-only", "calibrate", "rft-kl-matched"]
    frames = [[go.Bar(x=names, y=[c, 1, 2])] for c in (1, 2)]
    return tutorial.slider_figure(frames, ["1", "2"], prefix="c = "), names


def test_category_ticks_are_horizontal_and_the_slider_below_them():
    fig, names = _slider_bars()
    P.category_ticks(fig, width=10)
    lay = fig.to_dict()["layout"]
    assert lay["xaxis"]["tickangle"] == 0 and lay["xaxis"]["tickvals"] == names
    assert lay["xaxis"]["ticktext"] == [P.wrap_label(n, 10) for n in names]
    # two lines of labels: the slider starts 2 * 16 + 24 px below the plot area
    assert lay["sliders"][0]["pad"]["t"] == 2 * P.TICK_LINE_PX + P.SLIDER_GAP_PX == 56


def test_legend_hline_labels_the_line_in_the_legend():
    fig, _ = _slider_bars()
    P.legend_hline(fig, 0.5, "always escalate")
    d = fig.to_dict()
    assert not d["layout"].get("annotations")  # no text on the plot
    (shape,) = d["layout"]["shapes"]
    assert shape["y0"] == shape["y1"] == 0.5 and shape["xref"] == "x domain"
    entry = d["data"][-1]
    assert entry["name"] == "always escalate" and entry["meta"] == {"y": 0.5}
    assert entry["line"]["dash"] == shape["line"]["dash"] == "dot"
    # every slider step still sets one flag per trace, the entry's always on
    steps = d["layout"]["sliders"][0]["steps"]
    assert [s["args"][0]["visible"] for s in steps] == [[True, False, True], [False, True, True]]


@pytest.mark.parametrize("theme", P.THEMES)
def test_apply_theme_mode_bar_has_no_dark_background(theme):
    # plotly's default mode bar background is half the paper's colour: on the transparent
    # paper, rgba(0, 0, 0, 0.5), a dark bar over the figure
    lay = P.apply_theme(go.Figure(), theme).to_dict()["layout"]
    assert lay["modebar"]["bgcolor"] == P.TRANSPARENT
    assert lay["modebar"]["color"] == P.MODEBAR["color"]


def test_a_report_page_writes_its_figures_numbers_to_five_significant_digits():
    """html_page rounds every float a figure writes as a decimal (in lists, nested too) to
    5 significant digits; integers, strings and non-finite values are kept; a page of the
    same figures is the same bytes."""
    import plotly.graph_objects as go

    from rlcd_lab.drawing.pages import html_page

    fig = go.Figure(
        go.Scatter(
            x=[1 / 3, 2 / 3, 123456.789],
            y=[0.000123456789, float("nan"), 7],
            error_y={"array": [1e-9 / 3, 0.5, 0.25]},
            name="a 0.123456789 name",
        )
    )
    page = html_page("t", "# x\n", {"f": fig}, "../plotly.min.js")
    assert page == html_page("t", "# x\n", {"f": fig}, "../plotly.min.js")
    assert '"x":[0.33333,0.66667,123460.0]' in page
    assert '"y":[0.00012346,null,7]' in page
    assert '"array":[3.3333e-10,0.5,0.25]' in page
    assert '"name":"a 0.123456789 name"' in page  # strings untouched
    assert "0.333333" not in page
