"""The Gradio dashboard (``app.py`` and ``rlcd-lab app`` both call :func:`build_demo`).

Seven tabs, each a set of pure callbacks (tested without a browser) in ``*_tab.py`` and its
layout and wiring in ``*_layout.py`` (shared controls in :mod:`.controls`); :mod:`.ui`
builds the page from the tab list: Ask (:mod:`.ask_tab`), Compare (:mod:`.compare_tab`),
Batch (:mod:`.batch_tab`), Routing (:mod:`.routing_tab`), Runs (:mod:`.runs_tab`),
Proposition 1 (:mod:`.playground`) and Help (:mod:`.help_tab`). Every decision is a
:class:`rlcd_lab.math.routing.DecisionRule`, the same rules the decision server uses.
"""
