"""The Gradio dashboard (``app.py`` and ``rlcd-lab app`` both call :func:`build_demo`).

Seven tabs, each a set of pure callbacks (tested without a browser) in ``*_tab.py`` and its
layout and wiring in ``*_layout.py`` (shared controls in :mod:`.controls`); :mod:`.ui` loops
over the tab list:

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

Every decision is a :class:`rlcd_lab.math.routing.DecisionRule` (max p or chance-corrected
confidence, single query or mixture, threshold), the same rules the decision server uses.
"""
