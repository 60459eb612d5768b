"""Runs tab: training curves from a run directory's ``log.jsonl``.

Panels group the columns that the training loops log (``rlcd_lab.train``): rationale
length and forced-marker rate (System-One collapse shows as the length dropping to 0),
the variance of the readout across rationales, the pathwise and score-function gradient
norms (gradient dilution: the second is several times the first) and the dev metrics.
A chosen panel the log has no column for is named in the summary with the reason
(:func:`empty_panel_notes`: e.g. a run shorter than its dev evaluation interval). Curves
can be smoothed (:func:`smooth`, an exponential moving average as TensorBoard draws it).
A ``config.json`` that cannot be read is said in one line of the summary; the curves are
still drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import gradio as gr
import numpy as np
import plotly.graph_objects as go

from rlcd_lab.dashboard.common import (
    compact_layout,
    local_run_choices,
    resolve_dir,
    run_choices,
    short_labels,
)
from rlcd_lab.drawing import plots
from rlcd_lab.files import rundir
from rlcd_lab.files.assets import ASSETS
from rlcd_lab.lm.checkpoint import read_meta

PANELS: dict[str, tuple[str, ...]] = {
    "rationale length": ("rationale_length",),
    "forced-marker rate": ("forced_rate",),
    "readout variance": ("readout_variance",),
    "gradient norms": ("grad_pathwise", "grad_score_function"),
    "dev accuracy": ("dev_accuracy",),
    "dev Brier, ECE, AURC": ("dev_brier", "dev_ece", "dev_aurc"),
    "loss, reward, KL": ("loss", "reward", "kl"),
}
DEFAULT_PANELS = [
    "rationale length",
    "readout variance",
    "gradient norms",
    "dev accuracy",
    "dev Brier, ECE, AURC",
]
PANEL_HEIGHT = 230
MAX_SMOOTHING = 0.99
"""Largest smoothing weight the tab takes (1 would draw the first value forever)."""


def _log(run: str, root: str | Path) -> tuple[Path, list[dict]]:
    path = resolve_dir(run, root, rundir.LOG, "run")
    try:
        return path, rundir.read_log(path)
    except (OSError, ValueError) as err:
        raise gr.Error(f"run {run!r}: could not read log.jsonl ({err})") from None


def scan_logs(names: Sequence[str], root: str | Path = ASSETS) -> tuple[list[str], dict[str, str]]:
    """``(columns, unreadable)`` over the logs of the runs ``names`` (a shipped run under
    ``root``, else a run directory such as ``runs/x``; a run without a log is passed
    over): the :func:`numeric_columns` of every readable log in first-seen order, and
    ``{name: why}`` for each log that cannot be read (truncated or corrupt ``.xz``, a line
    that is not JSON or not UTF-8; ``why`` names the file and the line), which the tab
    leaves out instead of failing to start. A partial last line is no problem
    (:func:`rlcd_lab.files.rundir.read_log` ignores it)."""
    columns: dict[str, None] = {}
    unreadable: dict[str, str] = {}
    for name in names:
        log = rundir.log_path(Path(root) / name)  # shipped logs are packed (.jsonl.xz)
        log = log if log.exists() else rundir.log_path(Path(name))
        if not log.exists():
            continue
        try:
            rows = rundir.read_log(log)
        except (OSError, ValueError) as err:
            unreadable[name] = str(err)
            continue
        columns.update(dict.fromkeys(numeric_columns(rows)))
    return list(columns), unreadable


def unreadable_note(unreadable: dict[str, str]) -> str:
    """Markdown naming the runs left out of the tab and why (empty for none)."""
    if not unreadable:
        return ""
    lines = [f"* `{name}`: {why}" for name, why in unreadable.items()]
    return "Left out, their logs cannot be read:\n\n" + "\n".join(lines)


def numeric_columns(rows: Sequence[dict], x: str = "step") -> list[str]:
    """Columns holding a number in some row, except ``x``, in first-seen order."""
    cols: dict[str, None] = {}
    for row in rows:
        for key, v in row.items():
            if key != x and isinstance(v, (int, float)) and not isinstance(v, bool):
                cols.setdefault(key, None)
    return list(cols)


def _rms(rows: Sequence[dict], key: str) -> float:
    v = np.array([r[key] for r in rows if isinstance(r.get(key), (int, float))], np.float64)
    return float(np.sqrt(np.mean(v**2))) if v.size else float("nan")


def read_config(path: Path) -> tuple[dict, str]:
    """``(config, problem)``: the run's ``config.json`` (:func:`rlcd_lab.files.rundir.read_config`;
    ``{}`` when it has none) and ``""``, or ``{}`` and one line saying why it cannot be
    read (not JSON, not UTF-8, nested too deeply, not an object, not a regular file)."""
    try:
        config = rundir.read_config(path)
    except (OSError, ValueError, RecursionError, TypeError, AttributeError) as err:
        why = " ".join(str(err).split()) or type(err).__name__
        return {}, f"config.json cannot be read ({why[:200]}): settings not shown."
    return config, ""


def run_summary(path: Path, rows: Sequence[dict]) -> str:
    """A few lines on a run: method and settings from ``config.json`` (or one line saying
    it cannot be read), the gradient dilution ratio RMS(score-function) / RMS(pathwise)
    when logged, final test metrics and the final evaluation's warnings
    (:func:`warnings_markdown`)."""
    config, problem = read_config(path)
    keys = ("method", "init", "steps", "m", "lr", "beta", "sf_weight", "lam", "rule")
    parts = [f"**{k}** {config[k]}" for k in keys if config.get(k) is not None]
    head = problem or " · ".join(parts) or "no config.json"
    lines = [head, f"{len(rows)} logged steps."]
    if any("grad_pathwise" in r for r in rows):
        ratio = _rms(rows, "grad_score_function") / _rms(rows, "grad_pathwise")
        lines.append(
            f"Gradient norms: RMS(score function) / RMS(pathwise) = **{ratio:.1f}×** "
            "(the paper reports 7-12× at scale: gradient dilution)."
        )
    if rundir.has_final(path):
        meta = read_meta(rundir.final_dir(path))
        test = meta.get("metrics", {}).get("test", {})
        if test:
            keys = ("ts_accuracy", "ts_brier", "ts_ece", "ts_aurc", "ts_cov_at_eps", "T")
            vals = [f"{k.removeprefix('ts_')} {test[k]:.3f}" for k in keys if k in test]
            lines.append("Final test (temperature-scaled): " + ", ".join(vals) + ".")
        if warned := warnings_markdown(meta):
            lines.append(warned)
    return "\n\n".join(lines)


def warnings_markdown(meta: dict) -> str:
    """The warnings a checkpoint's final evaluation stored (``rlcd.json`` ``metrics``
    ``warnings``: ``rlcd_lab.evaluate.eval_warnings``, as ``rlcd-lab train`` prints them)
    as Markdown, one bullet each; empty when there are none."""
    warnings = (meta.get("metrics") or {}).get("warnings")
    if not isinstance(warnings, list) or not warnings:
        return ""
    return "**Warnings** of its final evaluation:\n\n" + "\n".join(f"* {w}" for w in warnings)


def empty_panel_notes(
    chosen: Sequence[str], rows: Sequence[dict], config: dict, x: str = "step"
) -> list[str]:
    """Why each chosen panel has nothing to draw, one line each ("" for none): a dev panel
    of a run whose logged steps end before its first dev evaluation (``eval_every`` in
    ``config.json``; dev is evaluated after step ``eval_every - 1``, ``2 eval_every - 1``,
    ...; 0: only at the end), or a panel whose columns the run's method does not log."""
    present = set(numeric_columns(rows, x))
    steps = [r[x] for r in rows if isinstance(r.get(x), (int, float))]
    notes = []
    for panel in chosen:
        columns = PANELS[panel]
        if any(c in present for c in columns):
            continue
        every = config.get("eval_every")
        if panel.startswith("dev") and isinstance(every, int):
            ran = f"{len(steps)} steps" if steps else "no steps"
            when = f"every {every} steps" if every > 0 else "only at the end (eval_every 0)"
            notes.append(
                f"**{panel}**: empty: this run evaluates on dev {when} and its log holds "
                f"{ran}, so no dev evaluation was logged yet"
            )
        else:
            method = config.get("method") or "this run"
            notes.append(f"**{panel}**: empty: {method} does not log {', '.join(columns)}")
    return notes


def smooth(values: Sequence[float], weight: float) -> list[float]:
    """The exponential moving average of ``values`` with ``weight`` in ``[0, 1)``, debiased
    as TensorBoard draws it: ``s_i = weight s_{i-1} + (1 - weight) v_i`` from ``s_0 = 0``,
    shown as ``s_i / (1 - weight^(i+1))`` (so the first point is ``v_0``); ``weight`` 0
    returns the values."""
    out, s = [], 0.0
    for i, v in enumerate(values):
        s = weight * s + (1.0 - weight) * float(v)
        out.append(s / (1.0 - weight ** (i + 1)))
    return out


def smoothed_rows(rows: Sequence[dict], weight: float, x: str = "step") -> list[dict]:
    """``rows`` with every numeric column but ``x`` smoothed (:func:`smooth`) over the rows
    that hold it, in log order; other rows and keys unchanged. Raises ``gr.Error`` for a
    weight outside ``[0, MAX_SMOOTHING]``."""
    weight = float(weight or 0.0)
    if not 0.0 <= weight <= MAX_SMOOTHING:
        raise gr.Error(f"smoothing must be in [0, {MAX_SMOOTHING}]; got {weight:g}")
    out = [dict(r) for r in rows]
    if weight == 0.0:
        return out
    for column in numeric_columns(rows, x):
        held = [r for r in out if _number(r.get(column))]
        for r, v in zip(held, smooth([r[column] for r in held], weight), strict=True):
            r[column] = v
    return out


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)


def run_curves(
    run: str,
    panels: Sequence[str] | None = None,
    smoothing: float = 0.0,
    root: str | Path = ASSETS,
) -> tuple[go.Figure, str]:
    """``(stacked training curves of the chosen panels, run summary markdown)``, the
    curves smoothed with weight ``smoothing`` (:func:`smoothed_rows`); panels whose
    columns the log does not hold are left out and named in the summary with the reason
    (:func:`empty_panel_notes`)."""
    path, rows = _log(run, root)
    present = set(numeric_columns(rows))
    chosen = DEFAULT_PANELS if panels is None else list(panels)
    unknown = [p for p in chosen if p not in PANELS]
    if unknown:
        raise gr.Error(f"unknown panels {unknown}; choose from {list(PANELS)}")
    groups = [tuple(c for c in PANELS[p] if c in present) for p in chosen]
    groups = [g for g in groups if g]
    summary = run_summary(path, rows)
    notes = empty_panel_notes(chosen, rows, read_config(path)[0])
    if notes:
        summary += "\n\n" + "\n".join(f"- {n}" for n in notes)
    if not groups:
        return plots.apply_theme(
            go.Figure()
        ), summary + "\n\nNone of the chosen panels is in this log."
    rows = smoothed_rows(rows, smoothing)
    fig = plots.training_curves(rows, groups, separate=True, title=f"Training curves: {run}")
    height = max(320, PANEL_HEIGHT * len(groups))
    fig = compact_layout(fig, 70 / height)
    fig.update_layout(height=height, margin={"b": 110})
    return plots.apply_theme(fig), summary


def compare_runs(
    runs: Sequence[str] | None, column: str, smoothing: float = 0.0, root: str | Path = ASSETS
) -> go.Figure:
    """One logged ``column`` of several runs on one axis, smoothed with weight
    ``smoothing`` (:func:`smoothed_rows`)."""
    runs = list(runs or [])
    if not runs:
        return plots.apply_theme(go.Figure())
    if not column:
        raise gr.Error("choose a column to compare")
    labels = short_labels(runs)
    logs = {labels[r]: smoothed_rows(_log(r, root)[1], smoothing) for r in runs}
    fig = plots.compare_curves(logs, column, title=f"{column} by run")
    return plots.apply_theme(compact_layout(fig))


def run_names(root: str | Path, runs_root: str | Path) -> tuple[list[str], list[str], dict]:
    """``(names, columns, unreadable)`` the tab lists now: the shipped runs under ``root``
    and the runs with a ``log.jsonl`` under ``runs_root``, less those whose log cannot be
    read (``unreadable``, :func:`scan_logs`), and the logged columns of the others."""
    names = run_choices(root)
    names += [n for n in local_run_choices(runs_root, rundir.LOG) if n not in names]
    columns, unreadable = scan_logs(names, root)
    return [n for n in names if n not in unreadable], columns, unreadable
