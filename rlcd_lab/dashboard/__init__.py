"""The Gradio dashboard (``app.py`` and ``rlcd-lab app`` both call :func:`build_demo`).

Seven tabs, each a set of pure callbacks (tested without a browser) wired in :mod:`.ui`:

* **Ask** (:mod:`.ask_tab`): a shipped checkpoint, a run trained under ``runs/`` (or a
  path) answers a task example or your own question: its model card, M rationales, each
  one's temperature-scaled readout, the mixture, and the decision of the rule in force;
* **Compare** (:mod:`.compare_tab`): two checkpoints on the same question, side by side;
* **Batch** (:mod:`.batch_tab`): a JSONL or CSV file of questions answered, CSV download;
* **Routing** (:mod:`.routing_tab`): decide-or-escalate on the cached eval dumps of one or
  several runs, live in the rule, error budget and costs; risk-coverage, cost and
  reliability figures, the per-run Table 1 metrics, and why nothing is decided when so;
* **Runs** (:mod:`.runs_tab`): training curves from a run's ``log.jsonl``;
* **Proposition 1** (:mod:`.playground`): mixture score = mean score + diversity, live;
* **Help** (:mod:`.help_tab`): a glossary (AURC, Cov@eps, ECE, T, ...) and the notebooks.

Every decision is a :class:`rlcd_lab.routing.DecisionRule` (max p or chance-corrected
confidence, single query or mixture, threshold), the same rules the decision server uses.
"""

from ..assets import default_checkpoint
from .ask_tab import (
    ask,
    ask_model,
    checkpoint_info,
    decision,
    example_fields,
    load_model,
    model_card,
    parse_options,
    reroute,
    temperature_status,
)
from .batch_tab import batch_answers, parse_question_file
from .common import default_runs, local_run_choices, local_runs, trained_checkpoints
from .compare_tab import compare_checkpoints
from .help_tab import help_markdown
from .playground import proposition1_sliders, proposition1_table
from .routing_tab import (
    bayes_threshold,
    cost_curve,
    load_run,
    make_scores,
    nothing_decided_note,
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
    "batch_answers",
    "bayes_threshold",
    "build_demo",
    "checkpoint_info",
    "compare_checkpoints",
    "compare_runs",
    "cost_curve",
    "decision",
    "default_checkpoint",
    "default_runs",
    "example_fields",
    "help_markdown",
    "load_model",
    "load_run",
    "local_run_choices",
    "local_runs",
    "make_scores",
    "model_card",
    "nothing_decided_note",
    "offline_theme",
    "parse_options",
    "parse_question_file",
    "proposition1_sliders",
    "proposition1_table",
    "reroute",
    "route",
    "routing_figures",
    "routing_update",
    "run_curves",
    "run_data",
    "temperature_status",
    "trained_checkpoints",
]
