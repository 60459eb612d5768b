"""The Gradio dashboard (``app.py`` and ``rlcd-lab app`` both call :func:`build_demo`).

Four tabs, each a set of pure callbacks (tested without a browser) wired in :mod:`.ui`:

* **Ask** (:mod:`.ask_tab`): a shipped checkpoint (or a path) answers a task example or your
  own question: M rationales, each one's temperature-scaled readout, the mixture, the
  single-query answer and its routing decision at the threshold;
* **Routing** (:mod:`.routing_tab`): decide-or-escalate on the cached eval dumps of one or
  several runs, live in the threshold, error budget and costs; risk-coverage, cost and
  reliability figures and the per-run Table 1 metrics;
* **Runs** (:mod:`.runs_tab`): training curves from a run's ``log.jsonl``;
* **Proposition 1** (:mod:`.playground`): mixture score = mean score + diversity, live.
"""

from ..assets import default_checkpoint
from .ask_tab import (
    ask,
    ask_model,
    checkpoint_info,
    example_fields,
    load_model,
    parse_options,
    reroute,
)
from .common import default_runs
from .playground import proposition1_sliders, proposition1_table
from .routing_tab import (
    bayes_threshold,
    cost_curve,
    load_run,
    route,
    routing_figures,
    routing_update,
    run_data,
)
from .runs_tab import compare_runs, run_curves
from .ui import build_demo, offline_theme

__all__ = [
    "ask",
    "ask_model",
    "bayes_threshold",
    "build_demo",
    "checkpoint_info",
    "compare_runs",
    "cost_curve",
    "default_checkpoint",
    "default_runs",
    "example_fields",
    "load_model",
    "load_run",
    "offline_theme",
    "parse_options",
    "proposition1_sliders",
    "proposition1_table",
    "reroute",
    "route",
    "routing_figures",
    "routing_update",
    "run_curves",
    "run_data",
]
