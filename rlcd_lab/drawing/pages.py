"""The HTML pages and PNG figures of the reports: one self-standing page per report.

:func:`html_page` renders a report's Markdown and its plotly figures into one page that
loads plotly.js from a file beside the reports (:func:`plotly_src`, :func:`write_plotlyjs`:
every page opens offline, nothing is inlined or fetched), and :func:`write_pngs` writes
static copies of the figures when plotly can export images. The reproductions' reports
(:mod:`rlcd_lab.reports.report`), the difficulty map
(:mod:`rlcd_lab.reports.difficulty`) and the bench reports (:mod:`rlcd_lab.bench`) write their
pages with it; plotly and markdown-it are imported inside the functions that use them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlcd_lab.files.io import atomic_write_bytes


def write_pngs(figs: Mapping, folder: Path) -> list[Path]:
    """Each figure as ``folder/<name>.png`` (1000 x 560) when plotly can export images
    (the ``kaleido`` package and a Chrome/Chromium: ``pip install kaleido``); else nothing.
    Returns the files written."""
    import importlib.util

    import plotly.io as pio

    if not figs or importlib.util.find_spec("kaleido") is None:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{name}.png" for name in figs]
    pio.write_images(list(figs.values()), paths, width=1000, height=560)
    return paths


PLOTLY_JS = "plotly.min.js"
"""The plotly.js that every ``report.html`` loads from its parent folder (``../``), one
copy for all the reports beside each other (``assets/results/plotly.min.js``)."""


def write_plotlyjs(folder: Path) -> Path:
    """``folder/plotly.min.js``: the installed plotly's own bundled plotly.js, so that the
    reports in ``folder``'s subfolders open offline; written only when missing or
    different (another plotly version). Returns the file."""
    from importlib.resources import files

    path = Path(folder) / PLOTLY_JS
    js = (files("plotly") / "package_data" / PLOTLY_JS).read_bytes()
    if not path.is_file() or path.read_bytes() != js:
        atomic_write_bytes(path, js)
    return path


def plotly_src(folder: Path) -> str:
    """The ``src`` of plotly.js for a page written in ``folder``: the nearest
    ``plotly.min.js`` in ``folder``'s parent or further up (e.g. the shared
    ``assets/results/plotly.min.js``), relative to ``folder``; else one written by
    :func:`write_plotlyjs` into the parent (``../plotly.min.js``). Never a network address:
    every page opens offline."""
    folder = Path(folder).resolve()
    for up in folder.parents:
        if (up / PLOTLY_JS).is_file():
            return Path(os.path.relpath(up / PLOTLY_JS, folder)).as_posix()
    write_plotlyjs(folder.parent)
    return f"../{PLOTLY_JS}"


FIGURE_DIGITS = 5
"""Significant digits of the numbers a page's figures carry: far finer than a plot shows,
and a page a third the size of one that writes every float in full."""


def _rounded(value: Any, digits: int = FIGURE_DIGITS) -> Any:
    """``value`` (a figure's JSON form, ``to_plotly_json``: dicts, lists, numbers, strings)
    with every float rounded to ``digits`` significant digits; integers, strings,
    non-finite floats and numpy arrays (which plotly writes as compact binary) as they
    are."""
    import math

    import numpy as np

    if isinstance(value, dict):
        return {k: _rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v, digits) for v in value]
    if isinstance(value, (float, np.floating)) and math.isfinite(value):
        return float(f"{float(value):.{digits}g}")
    return value


def html_page(title: str, md: str, figs: Mapping[str, Any], src: str) -> str:
    """A self-standing report page: the Markdown ``md`` rendered (tables included), then the
    plotly ``figs`` under "Figures", each in a div named after it, their numbers to
    ``FIGURE_DIGITS`` significant digits (the same figures give the same bytes); plotly.js
    loads once from ``src`` (:func:`plotly_src`), never inlined."""
    import plotly.io as pio
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark").enable("table").render(md)
    divs = "".join(
        pio.to_html(
            _rounded(f.to_plotly_json()),
            full_html=False,
            include_plotlyjs=src if i == 0 else False,
            div_id=name,
        )
        for i, (name, f) in enumerate(figs.items())
    )
    style = (
        "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;font-size:14px}td,th{border:1px solid #ccc;"
        "padding:3px 8px;text-align:right}td:first-child{text-align:left}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
        f"<style>{style}</style></head><body>{body}<h2>Figures</h2>{divs}"
        "</body></html>"
    )
