"""Papercuts a new user hit, one test each (each failed before its fix).

1. ``make notebooks``: JupyterLab refused the pairs (an ``.ipynb`` newer than its ``.py``),
   now one ``.py`` per tutorial;
2. a tutorial run as a script printed megabytes of plotly JSON;
3. notebook 04's risk-coverage figure: 13 runs, 10 colours, a cut legend;
4. the Routing tab's cost plot: the data squeezed into a corner; headers broken mid-word;
5. ``torchrun``: every rank printed the result JSON;
6. ``rlcd-lab data fetch`` did not say what it wrote where; no sources listed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlcd_lab.classroom import tutorial
from rlcd_lab.cli import _print_json, main
from rlcd_lab.drawing import plots
from rlcd_lab.tasks import fetch as fetch_mod
from rlcd_lab.tasks.items import TaskItem, write_items
from rlcd_lab.tasks.split import split_paths

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"


# ------------------------------------------------------------------ 1. make notebooks
def test_jupyterlab_opens_each_tutorial_as_one_notebook(tmp_path):
    """jupytext's contents manager (what JupyterLab runs) opens every tutorial .py as a
    notebook and lists nothing beside it: the tutorials are no longer paired with an
    .ipynb twin, which JupyterLab refused when the .ipynb was the newer file (and which
    doubled the file browser's entries)."""
    from jupyter_server.services.contents.largefilemanager import LargeFileManager
    from jupytext.sync_contentsmanager import build_sync_jupytext_contents_manager_class

    for src in NOTEBOOKS.glob("[0-9][0-9]_*.py"):
        shutil.copy2(src, tmp_path / src.name)
    shutil.copy2(ROOT / "jupytext.toml", tmp_path / "jupytext.toml")  # the repository's
    lab = build_sync_jupytext_contents_manager_class(LargeFileManager)(root_dir=str(tmp_path))
    listed = [m["name"] for m in lab.get("")["content"] if m["name"] != "jupytext.toml"]
    assert sorted(listed) == sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.py"))
    for name in listed:
        model = lab.get(name)
        assert model["type"] == "notebook" and model["content"]["cells"], name
        lab.save(model, name)  # saving writes the .py alone, as it was
        assert sorted(p.name for p in tmp_path.glob("*[!l]")) == sorted(listed), name
        assert (tmp_path / name).read_text() == (NOTEBOOKS / name).read_text(), name


# ------------------------------------------------------------- 2. tutorials as scripts
def test_plotly_renderer_embeds_in_jupyter_and_stays_quiet_in_scripts(monkeypatch):
    assert not tutorial.in_jupyter_kernel()  # pytest is no Jupyter kernel
    assert tutorial.plotly_renderer({}) == ""
    assert tutorial.plotly_renderer({"PLOTLY_RENDERER": "browser"}) == "browser"

    class ZMQInteractiveShell:  # the class name ipykernel's shell has
        pass

    class FakeIPython:
        @staticmethod
        def get_ipython():
            return ZMQInteractiveShell()

    monkeypatch.setitem(sys.modules, "IPython", FakeIPython)
    assert tutorial.in_jupyter_kernel()
    assert tutorial.plotly_renderer({"PLOTLY_RENDERER": "browser"}) == "plotly_mimetype"


def test_help_tab_points_to_jupyter_and_says_what_a_script_run_shows():
    from rlcd_lab.dashboard.help_tab import help_markdown

    text = help_markdown()
    assert "`make app`" in text and "jupyter lab notebooks/" in text
    assert "no figures" in text and "PLOTLY_RENDERER=browser" in text


@pytest.mark.slow
def test_tutorial_run_as_a_script_prints_no_figure_json(tmp_path):
    """A tutorial run as a script at ``ci`` scale prints its own lines, not its figures
    (notebook 04 printed 5 MB of figure JSON and plotly.js before the fix; the rule,
    ``tutorial.plotly_renderer``, is every notebook's: checked on notebook 01, 18 figures
    in a few seconds)."""
    env = {**os.environ, "RLCD_SCALE": "ci", "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    env.pop("PLOTLY_RENDERER", None)
    script = NOTEBOOKS / "01_proper_scores_and_proposition1.py"
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "SCALE = ci" in out  # the notebook's own prints still come
    assert len(out.encode()) < 20_000, len(out)
    for figure_json in ('"data":', '"layout":', "application/vnd.plotly", "<script"):
        assert figure_json not in out


# ------------------------------------------------------ 3. risk-coverage of many runs
def _models(n: int, items: int = 60) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    return {f"run {i}": (rng.uniform(0.5, 1.0, items), rng.random(items) < 0.7) for i in range(n)}


def test_risk_coverage_gives_24_runs_distinct_colours_and_a_legend_that_fits():
    fig = plots.risk_coverage_figure(_models(24), oracle="each").to_dict()
    lines = [t for t in fig["data"] if t["mode"] == "lines"]
    styles = [(t["line"]["color"], t["line"].get("dash", "solid")) for t in lines]
    assert len(set(styles)) == len(styles)  # curves, oracles, Cov@eps lines, eps line
    curves = [t for t in lines if "AURC=" in t["name"]]
    assert len({t["line"]["color"] for t in curves}) == 24
    # notebook 04's case: 13 runs, Cov@eps lines (toggled with their curve, no entry)
    fig = plots.risk_coverage_figure(_models(13), oracle="none").to_dict()
    entries = [t for t in fig["data"] if t.get("showlegend", True)]
    assert len(entries) == 13 + 1  # the curves and the eps line
    colours = [t["line"]["color"] for t in fig["data"] if "AURC=" in t["name"]]
    assert len(set(colours)) == 13  # SFT (2nd) and the 12th run shared a red before
    # a right-hand legend starts at the plot's top (plotly's 100 px margin) and is
    # scrolled (cut) past the figure's bottom: the height leaves room for every entry
    for n in (13, 24, 40):
        fig = plots.risk_coverage_figure(_models(n), oracle="each").to_dict()
        entries = [t for t in fig["data"] if t.get("showlegend", True)]
        height = fig["layout"].get("height", plots.DEFAULT_HEIGHT)
        assert height - plots.DEFAULT_TOP >= plots.LEGEND_ENTRY_PX * len(entries), n
    assert "height" not in plots.risk_coverage_figure(_models(2)).to_dict()["layout"]


# ------------------------------------------------------------------- 4. the Routing tab
def test_cost_plot_x_range_is_the_data_with_a_margin():
    # y[j] holds on (t[j-1], t[j]]; the last piece (0.7, 1] is the flat "escalate all"
    t, y = [0.5, 0.55, 0.6, 0.7, 1.0], [3.0, 2.0, 1.0, 1.5, 1.2]
    fig = plots.threshold_curves({"m": (t, y)}, vlines={"t*": 0.9}).to_dict()
    lo, hi = 0.5, 0.7  # the lowest threshold; where the last piece starts
    pad = plots.X_MARGIN * (hi - lo)
    assert fig["layout"]["xaxis"]["range"] == pytest.approx([lo - pad, hi + pad])
    (note,) = fig["layout"]["annotations"]  # the line at 0.9 is off the axis: an arrow
    assert note["text"] == "t* = 0.9 →" and note["x"] == 1.0
    # the minimum is always in range, even on the last piece
    fig = plots.threshold_curves({"m": (t, [3.0, 2.0, 2.5, 2.2, 1.0])}).to_dict()
    assert fig["layout"]["xaxis"]["range"][1] > 1.0
    assert not fig["layout"].get("annotations")


def test_routing_cost_plot_fills_its_axis_with_the_shipped_runs():
    from rlcd_lab.dashboard.common import default_runs
    from rlcd_lab.dashboard.routing_tab import degenerate_reason, load_run, routing_figures
    from rlcd_lab.files.assets import shipped_runs

    chosen = default_runs(list(shipped_runs()))
    _, costs = routing_figures(chosen, 10.0, 1.0, True)
    d = costs.to_dict()
    x0, x1 = d["layout"]["xaxis"]["range"]
    curves = [t for t in d["data"] if "t_min" in (t.get("meta") or {})]
    at_chance = [r for r in chosen if degenerate_reason(run := load_run(r), run.scores(True))]
    assert len(curves) == len(chosen) - len(at_chance)  # runs at chance are left out
    lo = min(min(t["x"]) for t in curves)
    hi = max(max(t["x"][-2], t["meta"]["t_min"]) for t in curves)
    assert x0 < lo and x1 > hi
    assert (x1 - x0) <= (hi - lo) * (1 + 2 * plots.X_MARGIN) + 1e-12  # no empty stretch


def test_table_headers_break_between_words_only():
    from rlcd_lab.dashboard import ui

    rule = ui.CSS.split('th[role="columnheader"] span {', 1)[1].split("}", 1)[0]
    assert "word-break: normal" in rule and "overflow-wrap: normal" in rule


# ------------------------------------------------------------------------- 5. torchrun
@pytest.mark.parametrize(("rank", "prints"), [(None, True), ("0", True), ("1", False)])
def test_result_json_printed_by_rank_0_only_with_a_newline(monkeypatch, capsys, rank, prints):
    if rank is None:
        monkeypatch.delenv("RANK", raising=False)
    else:
        monkeypatch.setenv("RANK", rank)
    _print_json({"run": "x", "brier": 0.25})
    out = capsys.readouterr().out
    if prints:
        assert out.endswith("}\n") and json.loads(out) == {"run": "x", "brier": 0.25}
    else:
        assert out == ""


# ----------------------------------------------------------------------- 6. data fetch
def _items(n: int) -> list[TaskItem]:
    return [TaskItem(f"u{i}", f"question {i}?", ("A", "B"), label=i % 2) for i in range(n)]


def test_data_fetch_says_what_it_wrote_where(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"

    def fake_fetch(name, cache_dir, **kw):  # what fetch leaves: the file and its splits
        out = fetch_mod.output_path(name, cache_dir)
        fetch_mod.write_splits(out, _items(50), kw["dev"], kw["test"], kw["seed"])
        return write_items(out, _items(50))

    monkeypatch.setattr(fetch_mod, "fetch", fake_fetch)
    main(["data", "fetch", "boolq", "--cache-dir", str(cache), "--dev", "5", "--test", "10"])
    out = capsys.readouterr().out
    path = cache / "boolq.jsonl"
    assert out == f"wrote {path} (50 items; splits boolq.{{train,dev,test}}.jsonl: 35 / 5 / 10)\n"
    main(["data", "fetch", "boolq", "--cache-dir", str(cache)])
    assert capsys.readouterr().out.startswith(f"already in the cache: {path} (50 items;")
    # the default cache, as the help says
    default = Path("~/.cache/rlcd_lab/data").expanduser()
    assert fetch_mod.output_path("mmlu") == default / "mmlu.jsonl"
    assert fetch_mod.output_path("bigbench:a/b") == default / "bigbench" / "a.b.jsonl"
    assert all(p.parent == default for p in split_paths(default / "mmlu.jsonl").values())


def test_data_fetch_message_for_gsm8k_records(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    path.write_text('{"question": "1+1?", "answer": "#### 2"}\n' * 3)
    assert fetch_mod.fetch_message(path) == (
        f"wrote {path} (3 records, GSM8K's format: the input of data convert gsm8k-verify)"
    )


def test_data_list_names_every_source_and_file(tmp_path, capsys):
    main(["data", "list", "--cache-dir", str(tmp_path)])
    out = capsys.readouterr().out
    for name in fetch_mod.known_names():
        if name.startswith("bigbench:") and name != "bigbench:<task>":
            assert name.split(":")[1] in out  # the examples, on the last line
            continue
        src = fetch_mod.source(name)
        assert "https://" in src and "PyPI" in src, name  # URL, the archive
        assert src in out, name
    for name in (*fetch_mod.OLMO_TASKS, *fetch_mod.OLMO_VERIFY, "mmlu"):
        assert f"{name}  ->  {tmp_path / (name + '.jsonl')}\n" in out
    licenses = ("MIT", "CC BY-SA 4.0", "CC BY-SA 3.0", "ODC-BY", "Apache-2.0")
    assert all(lic in out for lic in licenses)
    with pytest.raises(ValueError, match="unknown data set"):
        fetch_mod.source("imagenet")
