"""The dashboard's decision functions as API endpoints and MCP tools: :func:`register` adds
the three of :data:`TOOLS` (:func:`ask_question`, :func:`decide`, :func:`route`), and
:func:`document_only_tools` leaves the tabs' own events out of the API page. A tool's
docstring is its MCP description (gradio reads the ``Args``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import gradio as gr

from rlcd_lab.dashboard import ask_tab, routing_tab
from rlcd_lab.dashboard.common import checkpoint_choices, confined_to, env_checkpoint
from rlcd_lab.dashboard.controls import MODEL_CONCURRENCY, MODEL_CONCURRENCY_ID
from rlcd_lab.decide import DecisionModel
from rlcd_lab.decide.jev import DecisionError
from rlcd_lab.files.assets import ASSETS, default_checkpoint
from rlcd_lab.math.routing import DEFAULT_THRESHOLD
from rlcd_lab.metrics import DEFAULT_EPS

TOOLS = ("ask_question", "decide", "route")
"""The endpoints the API page documents and the MCP server lists as tools: gradio serves
every documented endpoint of a launched app as a tool of its MCP server
(``launch(mcp_server=True)``, the default of ``ui.Dashboard``; streamable HTTP at
``/gradio_api/mcp/``). The tabs' own events stay callable by their ``api_name``
(``gradio_client``) but are left out (:func:`document_only_tools`)."""
DECIDE_MODES = ("direct", "reason", "auto")
MODEL_SLOT = {"concurrency_limit": MODEL_CONCURRENCY, "concurrency_id": MODEL_CONCURRENCY_ID}
"""The tools run in the model requests' concurrency group (``controls.MODEL_CONCURRENCY``)."""


def _checkpoint(name: str | None, root: str | Path) -> str:
    """``name``, or the checkpoint the Ask tab opens with when it is empty."""
    name = (name or "").strip()
    return name or env_checkpoint() or default_checkpoint(checkpoint_choices(root)) or ""


def ask_question(
    question: str,
    options: str = "Y, N",
    checkpoint: str = "",
    m: int = 4,
    threshold: float = DEFAULT_THRESHOLD,
    root: str | Path = ASSETS,
) -> dict:
    """The Ask tab's answer (:func:`rlcd_lab.dashboard.ask_tab.ask`, seed 0, sampling
    temperature 1, 64 rationale tokens) in brief: ``answer``, ``confidence`` and
    ``decision`` (``automate`` or ``escalate``) under max p of the first rationale
    against ``threshold``, ``probabilities`` by label, the ``mixture`` over the ``m``
    rationales, ``T`` and whether it was fitted, the ``rule`` and the ``rationales``'
    texts. ``checkpoint`` empty: the Ask tab's first. Raises ``gr.Error`` as the tab does."""
    name = _checkpoint(checkpoint, root)
    *_, r = ask_tab.ask(name, question, options, m, 1.0, 64, 0, threshold, root=root)
    labels = r["options"]
    return {
        "checkpoint": name,
        "answer": r["routing"]["answer"],
        "confidence": r["routing"]["confidence"],
        "decision": r["decision"],
        "rule": r["routing"]["description"],
        "probabilities": dict(zip(labels, r["routing"]["probs"], strict=True)),
        "mixture": dict(zip(labels, r["mixture"], strict=True)),
        "T": r["T"],
        "T_fitted": r["T_fitted"],
        "rationales": [x["text"] for x in r["rationales"]],
    }


def decide(
    state: str,
    question: str = '{"type": "noul"}',
    checkpoint: str = "",
    mode: str = "direct",
    root: str | Path = ASSETS,
) -> dict:
    """One typed question about ``state`` answered as the decision server answers it
    (:meth:`rlcd_lab.decide.DecisionModel.decide` with its defaults and ``mode``):
    ``{"checkpoint", "answer" (the wire answer), "details", "usage"}``. ``question`` is
    a Jev wire question as JSON text (``{"type": "noul"}``, ``{"type": "choice",
    "criteria": {...}}``, ``{"type": "score", "criteria": [...]}``). What the server
    refuses (:class:`rlcd_lab.decide.jev.DecisionError`) raises ``gr.Error`` with its
    message."""
    if mode not in DECIDE_MODES:
        raise gr.Error(f"mode must be one of {list(DECIDE_MODES)}; got {mode!r}")
    ask_tab.check_sizes(state)
    try:
        wire = json.loads(question)
    except (ValueError, RecursionError):
        raise gr.Error(
            'question must be a Jev wire question as JSON, e.g. {"type": "noul"}'
        ) from None
    name = _checkpoint(checkpoint, root)
    engine = DecisionModel.from_reader(ask_tab.load_reader(name, root))
    try:
        out = engine.decide(state, {"q": wire}, mode=mode)
    except DecisionError as err:
        raise gr.Error(err.msg.replace("question 'q': ", "")) from None
    return {
        "checkpoint": name,
        "answer": out.answers["q"],
        "details": out.details.get("q", {}),
        "usage": out.usage,
    }


def route(
    run: str,
    threshold: float = DEFAULT_THRESHOLD,
    eps: float = DEFAULT_EPS,
    cost_wrong: float = routing_tab.DEFAULT_COST_WRONG,
    cost_escalate: float = routing_tab.DEFAULT_COST_ESCALATE,
    measure: str = "max_p",
    root: str | Path = ASSETS,
) -> dict:
    """A run's routing numbers at ``threshold`` on its test dump, temperature-scaled, the
    single query (:func:`rlcd_lab.dashboard.routing_tab.routing_update`): the ``rule``
    and the run's numbers (``coverage``, ``risk`` (None: nothing decided), ``decided``,
    ``errors``, ``escalated``, ``cost``, ``cov_at_eps``, ``dev_threshold``, ``aurc``...)."""
    *_, out = routing_tab.routing_update(
        [run], threshold, eps, cost_wrong, cost_escalate, True, measure, "single", root=root
    )
    return {"rule": out["rule"], "run": run, **out["runs"][run]}


def register(root: str | Path, places: Sequence[Path]) -> None:
    """Add :data:`TOOLS` as API endpoints of the ``gr.Blocks`` being built (call inside its
    ``with`` block), on the assets ``root``, each confined to ``places`` and answering
    JSON text (an MCP client reads it as the tool's text content)."""

    def ask_question(
        question: str,
        options: str = "Y, N",
        checkpoint: str = "",
        m: int = 4,
        threshold: float = DEFAULT_THRESHOLD,
    ) -> str:
        """Ask a checkpoint a question: it writes m rationales ending in 'Answer:', its
        readout over the option labels is calibrated with its fitted temperature, and the
        answer is decided automatically when its confidence (max p of the first rationale)
        is at least the threshold, else escalated.

        Args:
            question: the question, e.g. '33+60+20=113?' for the tiny verify checkpoints
            options: comma-separated option labels, each a single token of the model (Y, N)
            checkpoint: a shipped checkpoint name or a run's final/ folder; empty: the default
            m: rationales to sample, 1 to 64
            threshold: decide automatically when the confidence is at least this, in [0, 1]
        Returns:
            JSON: answer, confidence, decision (automate or escalate), probabilities by label, the
            mixture over the rationales, the temperature T, the rule and the rationales
        """
        with confined_to(places):
            return json.dumps(_ask(question, options, checkpoint, m, threshold, root=root))

    def decide(
        state: str,
        question: str = '{"type": "noul"}',
        checkpoint: str = "",
        mode: str = "direct",
    ) -> str:
        """Answer a typed question about a state as the rlcd_lab decision server does (Jev
        wire form): a noul (yes/no) gives p(yes), a choice the most likely label and its
        chance-corrected confidence, a score the expected level.

        Args:
            state: the text the question is about, e.g. '33+60+20=113?'
            question: the question as JSON, e.g. {"type": "noul"} or {"type": "choice", "criteria": {"yes": null, "no": null}}
            checkpoint: a shipped checkpoint name or a run's final/ folder; empty: the default
            mode: direct (one readout), reason (sample rationales) or auto (reason when unsure)
        Returns:
            JSON: the wire answer, per-question details (mode, confidence, escalated) and token usage
        """  # noqa: E501 (gradio reads each argument's description from one line)
        with confined_to(places):
            return json.dumps(_decide(state, question, checkpoint, mode, root=root))

    def route(
        run: str,
        threshold: float = DEFAULT_THRESHOLD,
        eps: float = DEFAULT_EPS,
        cost_wrong: float = routing_tab.DEFAULT_COST_WRONG,
        cost_escalate: float = routing_tab.DEFAULT_COST_ESCALATE,
    ) -> str:
        """Route a finished run's cached test answers at a threshold: which share is decided
        automatically, its error, the escalations and the expected cost per item, with the
        run's AURC and Cov@eps (temperature-scaled max p of the single query).

        Args:
            run: a shipped run, e.g. results/verify-mixed/seed-17/reinforce, or a run folder
            threshold: decide automatically when the confidence is at least this, in [0, 1]
            eps: the error budget for Cov@eps and the dev threshold, in (0, 1)
            cost_wrong: cost of a wrong automated decision
            cost_escalate: cost of escalating an item to a person
        Returns:
            JSON: the rule and the run's coverage, risk, decided, errors, escalated, cost, aurc
        """
        with confined_to(places):
            return json.dumps(_route(run, threshold, eps, cost_wrong, cost_escalate, root=root))

    for fn in (ask_question, decide, route):
        gr.api(fn, api_name=fn.__name__, **MODEL_SLOT)


_ask, _decide, _route = ask_question, decide, route


def document_only_tools(demo: gr.Blocks) -> None:
    """Leave every public endpoint of ``demo`` but :data:`TOOLS` out of the API page and
    the MCP tool list (``api_visibility="undocumented"``: still callable by name)."""
    for fn in demo.fns.values():
        if fn.api_visibility == "public" and fn.api_name not in TOOLS:
            fn.api_visibility = "undocumented"
