"""What the Routing tab opens on and says to a first-time visitor: the runs of one task
where the idea shows (:data:`FIRST_VIEW`), and a note with the AURC of RLCD and GRPO there
and where RLCD loses (:data:`CONTRAST`), read from the shipped dumps."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import gradio as gr

from rlcd_lab import metrics
from rlcd_lab.dashboard.common import default_runs, local_run_choices, run_choices
from rlcd_lab.dashboard.routing_tab import load_run
from rlcd_lab.files.assets import ASSETS

FIRST_VIEW = "results/verify-mixed/seed-17"
"""The shipped runs the tab opens on (``default_runs`` of this folder): the tiny
``verify-mixed`` task, where two-stage RLCD's AURC is the lowest (the paper's headline)."""
CONTRAST = "results/verify/seed-17"
"""The shipped runs the first view's note names as where RLCD loses (tiny ``verify``)."""


def first_view(names: Sequence[str]) -> list[str]:
    """The runs the tab opens on: :func:`rlcd_lab.dashboard.common.default_runs` of the
    runs under :data:`FIRST_VIEW`, else of all ``names``."""
    chosen = default_runs([n for n in names if n.startswith(FIRST_VIEW + "/")])
    return chosen or default_runs(names)


def _aurc_words(folder: str, root: str | Path) -> str | None:
    """ "RLCD's AURC a vs GRPO's b (lower: RLCD wins)" for a shipped folder, None without it."""
    try:
        r, g = (load_run(f"{folder}/{kind}", root) for kind in ("reinforce", "grpo"))
    except gr.Error:
        return None
    a, b = (metrics.aurc(d.scaled.confidence, d.scaled.correct) for d in (r, g))
    verdict = "lower: RLCD wins" if a < b else "higher: RLCD loses"
    return f"two-stage RLCD's AURC is **{a:.4f}** against GRPO's **{b:.4f}** ({verdict})"


def first_view_note(root: str | Path = ASSETS) -> str:
    """What the first view shows, in words, with the AURC of RLCD and GRPO on
    :data:`FIRST_VIEW` and :data:`CONTRAST` read from their dumps (temperature-scaled,
    single query); "" when the shipped runs are not under ``root``."""
    here, there = _aurc_words(FIRST_VIEW, root), _aurc_words(CONTRAST, root)
    if here is None:
        return ""
    note = (
        f"**What you are looking at:** decide-or-escalate on the cached test dumps of "
        f"`{FIRST_VIEW}` (the tiny verify-mixed task): two-stage RLCD (`reinforce`) against "
        f"GRPO, RFT and SFT, each temperature-scaled on dev. Here {here}, but most of "
        "that edge is knowing which sums are long (they slip more): over its ten seeds, GRPO "
        "recalibrated on dev by a calibrator that sees the sum's length ranks about as well "
        "(docs/results.md, post-hoc baselines). Move t to trade automatic decisions for "
        "escalations."
    )
    if there is not None:
        note += (
            f" RLCD does not win everywhere: on `{CONTRAST}` (the tiny verify task) {there}; "
            "pick those runs to see it."
        )
    return note


def run_names(root: str | Path, runs_root: str | Path) -> list[str]:
    """The runs the tab lists now: the shipped ones under ``root``, then those under
    ``runs_root`` that hold a test dump."""
    names = run_choices(root)
    return names + [n for n in local_run_choices(runs_root) if n not in names]
