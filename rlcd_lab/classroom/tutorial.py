"""Small helpers the tutorial notebooks share (``notebooks/*.py``).

The notebooks only import from ``rlcd_lab``; the computations they need that are not a
loss, a metric or a training loop live here: the ``SCALE`` switch, the plotly renderer
(embedded in Jupyter, silent as a script), a non-proper score as
a counterexample, expected-score curves for the binary case, the gradient-dilution ratio
from a run's log, finding shipped runs and what their configs say,
and a plotly slider figure. Pure functions (file readers aside); no printing. Scoring a
run's eval dumps (temperature scaling, per-item values, paired tests over seeds) is
:mod:`rlcd_lab.reports.results`; display names of runs are :func:`rlcd_lab.reports.report.label`.

Directions: scores are *higher is better*, as in :mod:`rlcd_lab.scoring`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import plotly.graph_objects as go
import torch
from torch import Tensor

from rlcd_lab.files import rundir
from rlcd_lab.scoring import expected_score

# ------------------------------------------------------------------------------ scale
SCALES: tuple[str, ...] = ("ci", "default", "paper")
"""``ci``: each notebook in under a minute on a 2-core CPU (what the tests run);
``default``: a few minutes on a laptop CPU; ``paper``: print the commands for real models
on GPUs instead of running them."""


def get_scale(env: Mapping[str, str] | None = None, var: str = "RLCD_SCALE") -> str:
    """The notebook scale from the environment variable ``RLCD_SCALE`` (default
    ``"default"``); raises ``ValueError`` for anything outside :data:`SCALES`."""
    env = os.environ if env is None else env
    scale = env.get(var, "default").strip().lower() or "default"
    if scale not in SCALES:
        raise ValueError(f"{var}={scale!r}: choose one of {SCALES}")
    return scale


# ---------------------------------------------------------------------------- display
NOTEBOOK_RENDERER = "plotly_mimetype"
"""Plotly's renderer in Jupyter: each figure as its JSON (``application/vnd.plotly.v1+json``),
drawn by the plotly.js of JupyterLab's ``jupyterlab-plotly`` extension (shipped with
plotly, loaded once per session, offline); no figure embeds plotly.js, so an executed
notebook stays small."""


def in_jupyter_kernel() -> bool:
    """Whether this code runs in a Jupyter kernel (JupyterLab, nbclient, VS Code's
    notebooks: IPython's ``ZMQInteractiveShell``), not as a plain script."""
    import sys

    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"


def plotly_renderer(env: Mapping[str, str] | None = None) -> str:
    """The notebooks' ``plotly.io.renderers.default``: :data:`NOTEBOOK_RENDERER` in a
    Jupyter kernel; run as a script (``python notebooks/NN_*.py``), the environment
    variable ``PLOTLY_RENDERER`` if set (e.g. ``browser``: each figure in a browser tab),
    else ``""``: ``fig.show()`` shows nothing. The notebook renderer outside Jupyter would
    print every figure's JSON and plotly.js to stdout (megabytes)."""
    if in_jupyter_kernel():
        return NOTEBOOK_RENDERER
    env = os.environ if env is None else env
    return env.get("PLOTLY_RENDERER", "")


# ---------------------------------------------------------------- proper vs not proper
ToyRule = Literal["brier", "log", "spherical", "linear"]


def linear_score(u: Tensor, y: int | Tensor) -> Tensor:
    """The *linear* score ``J(u, y) = u_y``: the probability put on the outcome.

    Shapes: ``u (..., K)``, ``y`` int or ``(...)`` -> ``(...)``. Higher is better, in
    ``[0, 1]``. Not proper: its expectation ``E_{Y~q} J(u, Y) = u.q`` is linear in ``u``,
    so it is maximised at the vertex ``e_k`` of the most likely outcome ``k = argmax q``,
    not at ``u = q``; it rewards overconfidence. Gneiting & Raftery (2007), sec. 2 (the
    linear score as the standard example of an improper rule); it is also the expected
    RLVR reward of an answer sampled from ``u`` (OpenJev-RLCD, Corollary 1).
    """
    y = torch.as_tensor(y, device=u.device, dtype=torch.long).expand(u.shape[:-1])
    return u.gather(-1, y.unsqueeze(-1)).squeeze(-1)


def expected_toy_score(u: Tensor, q: Tensor, rule: ToyRule = "brier") -> Tensor:
    """``E_{Y~q} J(u, Y)`` for a proper rule (:func:`rlcd_lab.scoring.expected_score`) or
    the improper ``"linear"`` one (``u.q``). Shapes ``u, q (..., K)`` -> ``(...)``;
    higher is better."""
    if rule == "linear":
        return (u * q).sum(-1)
    return expected_score(u, q, rule)


def binary_expected_scores(q1: float, grid: Sequence[float], rule: ToyRule = "brier") -> np.ndarray:
    """Expected score of reporting ``u = (1 - p, p)`` for each ``p`` in ``grid`` when the
    outcome is 1 with probability ``q1``: ``E_{Y~Bern(q1)} J(u, Y)``.

    Returns a float64 array of ``len(grid)`` values (higher is better; ``-inf`` for the
    log score at a report of 0 or 1 that puts zero mass on a possible outcome). For a
    strictly proper rule the curve peaks at ``p = q1``; for ``"linear"`` it is a straight
    line peaking at ``p = 1`` if ``q1 > 1/2`` (at 0 if ``q1 < 1/2``).
    """
    p = torch.as_tensor(np.asarray(grid, dtype=np.float64))
    u = torch.stack([1.0 - p, p], -1)
    q = torch.tensor([1.0 - q1, q1], dtype=torch.float64)
    with np.errstate(divide="ignore"):
        return expected_toy_score(u, q, rule).numpy()


def best_report(q1: float, rule: ToyRule = "brier", n_grid: int = 1001) -> float:
    """The ``p`` on the grid ``linspace(0, 1, n_grid)`` that maximises
    :func:`binary_expected_scores` (the first one on ties)."""
    grid = np.linspace(0.0, 1.0, n_grid)
    return float(grid[int(np.argmax(binary_expected_scores(q1, grid, rule)))])


# ------------------------------------------------------------------ run logs: dilution
def log_column(rows: Sequence[Mapping[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    """``(steps, values)`` of one ``log.jsonl`` column, keeping only the rows that hold a
    finite number for ``key`` (e.g. ``grad_pathwise`` is logged every few steps)."""
    pts = [
        (float(r["step"]), float(r[key]))
        for r in rows
        if isinstance(r.get(key), (int, float))
        and not isinstance(r.get(key), bool)
        and math.isfinite(r[key])
    ]
    return np.array([s for s, _ in pts]), np.array([v for _, v in pts])


def adam_signal_step(
    ratio: float,
    dim: int = 2000,
    steps: int = 300,
    lr: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    seed: int = 0,
) -> float:
    """How far Adam moves along a constant signal when noise of ``ratio`` times its norm
    is added to every gradient, relative to Adam's step without noise.

    Simulates ``steps`` Adam updates (``torch.optim.Adam``, float64) of a ``dim``-vector
    with gradients ``g_t = s + ratio * n_t``: ``s`` a fixed vector of norm 1 (all
    coordinates ``1/sqrt(dim)``), ``n_t`` fresh Gaussian noise of expected norm 1, drawn
    from ``torch.Generator().manual_seed(seed)``. Returns the distance travelled along
    ``-s`` divided by ``lr * steps * sqrt(dim)`` (the noiseless distance: Adam's
    normalised step is ``lr`` per coordinate), so 1 means no dilution. Adam divides
    by the root of the second moment ``v ~ (1 + ratio^2) / dim`` per coordinate, so the
    result is close to ``1 / sqrt(1 + ratio^2)``: a score-function term ten times
    the pathwise one cuts the pathwise progress about tenfold (OpenJev-RLCD sec. 3.2,
    "gradient dilution"; Kingma & Ba 2015, "Adam").
    """
    gen = torch.Generator().manual_seed(seed)
    x = torch.zeros(dim, dtype=torch.float64, requires_grad=True)
    s = torch.full((dim,), dim**-0.5, dtype=torch.float64)
    opt = torch.optim.Adam([x], lr=lr, betas=betas)
    for _ in range(steps):
        noise = torch.randn(dim, generator=gen, dtype=torch.float64) * dim**-0.5
        x.grad = s + ratio * noise
        opt.step()
    travelled = -float(x.detach() @ s)
    return travelled / (lr * steps * dim**0.5)


# ---------------------------------------------------------------------- shipped runs
CONFIG_KEYS = (
    "method",
    "advantage",
    "task",
    "seed",
    "init",
    "steps",
    "beta",
    "sf_weight",
    "lam",
    "reader",
    "outcome_reward",
)
"""The ``config.json`` fields :func:`run_info` reports (None where a method lacks one)."""


def run_info(run: str | Path, name: str | None = None) -> dict[str, Any]:
    """What a run directory says about itself: ``name`` (default: the directory),
    ``variant`` (the directory's own name, e.g. ``reinforce`` or ``rft-kl``: runs of one
    variant with different seeds share it), ``group`` (the parent directory's name, e.g.
    ``verify-s0``), ``path``, and from ``config.json`` the fields in :data:`CONFIG_KEYS`
    (None where missing)."""
    path = Path(run)
    cfg = rundir.read_config(path)
    return {
        "name": name or path.as_posix(),
        "variant": path.name,
        "group": path.parent.name,
        "path": path,
        **{k: cfg.get(k) for k in CONFIG_KEYS},
    }


def discover_runs(runs: Mapping[str, str | Path], task: str | None = None) -> list[dict[str, Any]]:
    """:func:`run_info` of every run in ``runs`` (e.g. ``assets.shipped_runs()``), keeping
    only ``task`` when given, plus ``parent``: the name of the run in ``runs`` whose
    ``final`` checkpoint this run started from (a stage-2 fork of a stage-1 run), else
    None. The parent is matched by path suffix, because ``config.json`` records the
    ``init`` path as it was when the run was trained (e.g.
    ``runs/reproduce/verify/seed-17/calibrate/final``
    for a run now shipped as ``assets/results/verify/seed-17/calibrate``)."""
    infos = [run_info(p, name) for name, p in runs.items()]
    if task is not None:
        infos = [i for i in infos if i["task"] == task]
    for info in infos:
        info["parent"] = None
        init = Path(str(info["init"] or ""))
        if init.name != rundir.FINAL:
            continue
        for other in infos:
            tail = other["path"].parts[-2:]
            if other is not info and len(init.parts) >= 3 and init.parts[-3:-1] == tail:
                info["parent"] = other["name"]
    return infos


def largest_group(infos: Sequence[Mapping[str, Any]]) -> str | None:
    """The ``group`` (e.g. one seed's directory) holding the most runs among ``infos``
    (from :func:`discover_runs`), the alphabetically first on ties; None when empty.
    Figures that show one run per variant use it to pick a single seed."""
    counts: dict[str, int] = {}
    for i in infos:
        counts[i["group"]] = counts.get(i["group"], 0) + 1
    return min(counts, key=lambda g: (-counts[g], g)) if counts else None


# ------------------------------------------------------------------------------ plots
def slider_figure(
    frames: Sequence[Sequence[go.BaseTraceType]],
    labels: Sequence[str],
    prefix: str = "",
    active: int = 0,
    static: Sequence[go.BaseTraceType] = (),
    title: str = "",
) -> go.Figure:
    """A plotly figure with a slider that shows one group of traces at a time.

    ``frames[j]`` holds the traces of slider position ``j`` (labelled ``labels[j]``);
    ``static`` traces are always visible. Every group must hold the same number of
    traces. Works in a static HTML export (no Python callback): each slider step sets the
    ``visible`` flags, stored in ``layout.sliders[0].steps[j].args[0]["visible"]``.
    """
    if len(frames) != len(labels) or not frames:
        raise ValueError(f"{len(frames)} frames for {len(labels)} labels")
    width = {len(f) for f in frames}
    if len(width) != 1:
        raise ValueError("every slider position needs the same number of traces")
    (w,) = width
    fig = go.Figure()
    for t in static:
        fig.add_trace(t)
    for j, group in enumerate(frames):
        for t in group:
            t.visible = j == active
            fig.add_trace(t)
    steps = []
    for j, label in enumerate(labels):
        visible = [True] * len(static) + [k // w == j for k in range(len(frames) * w)]
        steps.append({"method": "update", "args": [{"visible": visible}], "label": str(label)})
    fig.update_layout(
        title=title,
        sliders=[{"active": active, "currentvalue": {"prefix": prefix}, "steps": steps}],
    )
    return fig
