"""Screenshots at desktop width (headless Chromium): every dashboard tab, opened by its
deep link ``/?tab=<id>``, and the figures of a notebook, each a PNG 1440 px wide that is
not blank; two tabs never give the same picture (the deep link selected the tab); the Ask
button shows on the first screen of a 1400 x 1000 window.

Skipped when Chromium is not installed, unless ``RLCD_LAB_REQUIRE_CHROMIUM=1`` (then it
fails). Notebook figures: only notebook 01's (no training, a few seconds); every notebook
is executed by ``tests/test_notebooks.py`` (slow) and shot by
``python -m rlcd_lab.dashboard.screenshots --out DIR``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from rlcd_lab.dashboard import screenshots, ui

PIL = pytest.importorskip("PIL.Image")

if screenshots.chromium() is None:
    if os.environ.get("RLCD_LAB_REQUIRE_CHROMIUM") == "1":
        raise RuntimeError("RLCD_LAB_REQUIRE_CHROMIUM=1 but chromium is not on PATH")
    pytest.skip(
        "chromium not installed (apt-get install chromium); set RLCD_LAB_REQUIRE_CHROMIUM=1 "
        "to make this an error",
        allow_module_level=True,
    )

MIN_STD = 8.0
"""A blank (single-colour) page has grey-level standard deviation 0; a page with text and
figures on white has tens (the dashboard's tabs: about 30-60 on 0-255)."""


def _pixels(path: Path) -> np.ndarray:
    with PIL.open(path) as img:
        return np.asarray(img.convert("L"), dtype=float)


def _check(path: Path) -> np.ndarray:
    px = _pixels(path)
    assert px.shape[1] == screenshots.DESKTOP_WIDTH, (path, px.shape)
    assert px.std() > MIN_STD, (path, px.std())
    return px


# ------------------------------------------------------------------ the deep link
@pytest.mark.parametrize(
    ("query", "tab"),
    [
        ({"tab": "routing"}, "routing"),
        ({"tab": " Proposition1 "}, "proposition1"),  # case and spaces ignored
        ({"tab": "nope"}, "ask"),  # unknown: the first tab
        ({}, "ask"),
        (None, "ask"),
    ],
)
def test_tab_from_query(query, tab):
    assert ui.tab_from_query(query) == tab


def test_tab_ids_are_the_dashboards_tabs():
    import gradio as gr

    demo = ui.build_demo()
    ids = [b.id for b in demo.blocks.values() if isinstance(b, gr.Tab)]
    assert tuple(ids) == ui.TAB_IDS


def test_select_tab_reads_the_request():
    class Request:
        query_params = {"tab": "runs"}

    assert ui._select_tab(Request()).selected == "runs"


# ------------------------------------------------------------------ the screenshots
def test_every_tab_at_desktop_width(tmp_path):
    with screenshots.serve_dashboard() as url, screenshots.Browser() as browser:
        shots = screenshots.shoot_tabs(url, tmp_path, browser=browser)
        # the Ask button is on the first screen of a 1400 x 1000 window
        bottom = screenshots.button_bottom(url, "ask", "Ask", browser)
    assert bottom is not None and 0 < bottom <= screenshots.FOLD[1], bottom
    assert [p.name for p in shots] == [f"tab-{t}.png" for t in ui.TAB_IDS]
    pictures = {p.name: _check(p) for p in shots}
    # every pair of tabs differs: the deep link opened each tab (a page that ignored it
    # would show the Ask tab seven times)
    names = list(pictures)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            pa, pb = pictures[a], pictures[b]
            same = pa.shape == pb.shape and np.array_equal(pa, pb)
            assert not same, (a, b)


def test_notebook_figures_at_desktop_width(tmp_path):
    nb = screenshots.NOTEBOOK_DIR / "01_proper_scores_and_proposition1.py"
    figures = screenshots.run_notebook(nb)  # in this process: no training in notebook 01
    assert len(figures) >= 4
    shots = screenshots.shoot_figures(figures, tmp_path, "nb01")
    assert len(shots) == len(figures)
    for path in shots:
        px = _check(path)
        assert px.shape[0] >= 400  # the figure's height, not a collapsed div
        assert (path.with_suffix(".html")).exists()
    assert (tmp_path / "plotly.min.js").exists()  # offline: plotly.js beside the pages
