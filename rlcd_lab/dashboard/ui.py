"""The dashboard's page: the theme, the header and the queue around seven tabs; start at
:func:`build_demo`.

The tabs are built in order from :data:`TABS`; each tab's layout and events live in its
own module (``ask_layout``, ``compare_layout``, ... ``help_layout``: a ``layout(ctx)``
wiring the pure callbacks of ``ask_tab``, ``compare_tab``, ...), what they share in
:mod:`.controls`. Every event has an explicit ``api_name`` (``gradio_client`` calls them
as ``client.predict(..., api_name="/routing")``); the callbacks take the assets root as a
keyword bound in the layouts, so a test can point the whole app at fabricated runs.
Figures follow the page's light or dark theme (:data:`CSS`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
from gradio import queueing
from starlette.middleware import Middleware

from rlcd_lab.dashboard import (
    ask_layout,
    batch_layout,
    compare_layout,
    help_layout,
    mcp_tools,
    playground_layout,
    routing_layout,
    runs_layout,
)
from rlcd_lab.dashboard.common import RUNS_DIR, allowed_places, forwarded_trust
from rlcd_lab.dashboard.controls import TabContext
from rlcd_lab.dashboard.uploads import DELETE_CACHE, MAX_UPLOAD_FILE_BYTES, UploadGuard
from rlcd_lab.files.assets import ASSETS

INTRO = """# rlcd_lab: calibrated decisions from reasoning models
A model writes a rationale that ends in `Answer:`; we **read** its next-token distribution
over the options (the readout *u*) and decide automatically only when the calibrated
confidence is high enough, else escalate to a person. Everything runs on the CPU, offline."""

CSS = """
.dark .js-plotly-plot .main-svg .infolayer text,
.dark .js-plotly-plot .main-svg g[class$="tick"] text,
.dark .js-plotly-plot .main-svg .annotation text,
.dark .js-plotly-plot .main-svg .legendtext {
  fill: var(--body-text-color) !important;
}
.dark .js-plotly-plot .modebar-btn path { fill: var(--body-text-color-subdued) !important; }
th[role="columnheader"] span {
  word-break: normal !important;
  overflow-wrap: normal !important;
}
.js-plotly-plot .plotly .modebar { opacity: 0; transition: opacity 0.3s ease; }
.js-plotly-plot .plotly:hover .modebar,
.js-plotly-plot .plotly:focus-within .modebar { opacity: 1; }
"""
"""Dark mode for the plotly figures: their text takes the theme's text colour (the figures
themselves are transparent, :func:`rlcd_lab.drawing.plots.apply_theme`). Table headers break
between words only (gradio's ``break-word`` split "escalated" across lines in a narrow
column; the column widens to its longest word instead). Plotly's mode bar (toolbar)
shows while the pointer is over a figure or a button in it has the focus: plotly does
that itself (``displayModeBar: "hover"``) only where the browser reports a pointer that
can hover, and gradio passes no plotly config."""

QUEUE_MAX_SIZE = 128
"""Events that may wait in the queue at once (all events and users together; a page load
queues about seven). Past it gradio answers "Queue is full" at once."""
MAX_SESSION_EVENTS = 12
"""Events one browser session (gradio's session hash) may have waiting at once."""
MAX_CLIENT_EVENTS = 24
"""Events one client address may have waiting at once, all its sessions together (a
client can open sessions at will). The address is the connection's peer: an
``X-Forwarded-For`` header counts only from the proxies named in
``$RLCD_TRUSTED_PROXIES`` (``common.trusted_proxies``; none by default)."""
REFRESH_LABEL = "↻ Refresh runs and checkpoints"
"""The header's button that lists runs and checkpoints written since the page loaded (a
page load lists them too: ``controls.on_refresh``)."""
DEFAULT_CONCURRENCY = 2
"""How many calls of one light callback (Routing, Runs, Proposition 1, examples) run at once."""
SYSTEM_FONTS = ["system-ui", "-apple-system", "Segoe UI", "Roboto", "Helvetica", "Arial"]
SYSTEM_MONO = ["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"]


def offline_theme() -> gr.themes.Base:
    """Gradio's default theme with system fonts only: names given as plain strings load
    no stylesheet, so the page fetches no web fonts (no network)."""
    return gr.themes.Default(font=[*SYSTEM_FONTS, "sans-serif"], font_mono=SYSTEM_MONO)


class FairQueue(queueing.Queue):
    """Gradio's queue with a share per user: an event is refused at once (gradio's
    "queue full" answer, HTTP 503, with a message saying why) when its session already has
    :data:`MAX_SESSION_EVENTS` events waiting or its client address
    :data:`MAX_CLIENT_EVENTS`; otherwise gradio's own bound (``max_size``) applies.
    Running events do not count, only waiting ones."""

    max_session_events = MAX_SESSION_EVENTS
    max_client_events = MAX_CLIENT_EVENTS

    def _waiting(self) -> list[queueing.Event]:
        return [e for q in self.event_queue_per_concurrency_id.values() for e in q.queue]

    async def push(self, body: Any, request: Any, username: str | None) -> tuple:
        """Gradio's ``Queue.push`` after the per-session and per-client checks."""
        lock = self.__dict__.setdefault("_fair_lock", asyncio.Lock())
        async with lock:  # the checks and the push, one event at a time
            waiting = self._waiting()
            session = getattr(body, "session_hash", None)
            if session is not None:
                mine = sum(e.session_hash == session for e in waiting)
                if mine >= self.max_session_events:
                    msg = (
                        f"You already have {mine} requests waiting; "
                        "wait for them to finish, then try again."
                    )
                    return False, msg, "queue_full"
            host = _client_host(request)
            if host is not None:
                theirs = sum(_client_host(e.request) == host for e in waiting)
                if theirs >= self.max_client_events:
                    msg = (
                        f"Your address already has {theirs} requests waiting; "
                        "wait for them to finish, then try again."
                    )
                    return False, msg, "queue_full"
            return await super().push(body, request, username)


def _client_host(request: Any) -> str | None:
    client = getattr(request, "client", None)
    return getattr(client, "host", None)


class Dashboard(gr.Blocks):
    """``gr.Blocks`` that launches with :func:`offline_theme` unless told otherwise, and
    whose queue is a :class:`FairQueue`.

    Gradio 6 takes the theme in ``launch()``; ``rlcd-lab app`` and ``app.py`` call a bare
    ``launch()``, so the defaults live here: the theme and :data:`CSS`, the MCP server
    (``mcp_server=True``: the tools of :mod:`.mcp_tools` at ``/gradio_api/mcp/``), uploads
    bounded (``max_file_size`` :data:`rlcd_lab.dashboard.uploads.MAX_UPLOAD_FILE_BYTES` and
    :class:`rlcd_lab.dashboard.uploads.UploadGuard` around the app). ``launch()`` also sets
    which proxies' forwarded headers uvicorn believes (``common.forwarded_trust``: none
    unless configured).
    """

    def launch(self, *args, **kwargs):  # noqa: D102 (gradio's docstring applies)
        kwargs.setdefault("theme", offline_theme())
        kwargs.setdefault("css", CSS)
        kwargs.setdefault("mcp_server", True)
        kwargs.setdefault("max_file_size", MAX_UPLOAD_FILE_BYTES)
        app_kwargs = dict(kwargs.get("app_kwargs") or {})
        app_kwargs["middleware"] = [*app_kwargs.get("middleware", []), Middleware(UploadGuard)]
        kwargs["app_kwargs"] = app_kwargs
        with forwarded_trust():  # uvicorn believes forwarded headers only from these
            return super().launch(*args, **kwargs)

    def queue(self, *args, **kwargs):  # noqa: D102 (gradio's docstring applies)
        out = super().queue(*args, **kwargs)
        self._queue.__class__ = FairQueue  # same state, fair push
        return out


def _copies(n: int):
    """A callback that returns its input ``n`` times (once when ``n == 1``)."""
    return (lambda v: v) if n == 1 else (lambda v: [v] * n)


def _sync(groups: list[tuple]) -> None:
    """Keep the rule controls of every tab equal: a user's change of one moves the same
    control in the other tabs (``.input``: programmatic updates do not echo back).

    The decision rule (confidence measure, single query or mixture, threshold) is set in the
    Ask, Compare, Batch and Routing tabs, so every tab applies the same
    :class:`rlcd_lab.math.routing.DecisionRule` and names it.
    """
    for i in range(len(groups[0])):
        same = [g[i] for g in groups]
        for c in same:
            others = [o for o in same if o is not c]
            c.input(_copies(len(others)), c, others, api_visibility="private")


@dataclass(frozen=True)
class Tab:
    """One tab of the page: its id (``/?tab=<id>``), its label, and the ``layout(ctx)`` that
    builds its components and events inside its ``gr.Tab``."""

    id: str
    label: str
    build: Callable[[TabContext], None]


TABS = (
    Tab("ask", "Ask", ask_layout.layout),
    Tab("compare", "Compare", compare_layout.layout),  # after Ask: it copies Ask's question
    Tab("batch", "Batch", batch_layout.layout),
    Tab("routing", "Routing", routing_layout.layout),
    Tab("runs", "Runs", runs_layout.layout),
    Tab("proposition1", "Proposition 1", playground_layout.layout),
    Tab("help", "Help", help_layout.layout),
)
"""The page's tabs, in order."""
TAB_IDS = tuple(tab.id for tab in TABS)
"""The tabs' ids, in order; ``/?tab=<id>`` opens that tab (:func:`tab_from_query`)."""


def tab_from_query(query: Mapping[str, str] | None) -> str:
    """The tab a page's URL query names (``?tab=routing``, case and spaces ignored), or the
    first tab (``ask``) when it names none or an unknown one."""
    name = str((query or {}).get("tab", "")).strip().lower()
    return name if name in TAB_IDS else TAB_IDS[0]


def _select_tab(request: gr.Request) -> gr.Tabs:
    """On page load: select the tab named by the URL's ``tab`` query parameter."""
    return gr.Tabs(selected=tab_from_query(getattr(request, "query_params", None)))


def build_demo(
    root: str | Path = ASSETS,
    runs_root: str | Path = RUNS_DIR,
    allowed_dirs: Sequence[str | Path] = (),
) -> gr.Blocks:
    """Build the dashboard (not launched) on the checkpoints and runs under ``root``
    (default: the shipped ``assets/``) and the runs trained under ``runs_root`` (default
    ``runs/``), its queue bounded and fair. Its callbacks open
    checkpoints and runs only there, in ``$RLCD_CHECKPOINT``, the converted SmolLM2
    checkpoint and ``allowed_dirs`` (``common.allowed_places``). Every list of runs and
    checkpoints is read again on each page load and by the header's refresh button.
    The documented API (and the MCP server's tools) is :mod:`.mcp_tools`' decision
    functions; the tabs' events stay callable by their ``api_name``. Uploaded files are
    deleted an hour after upload (``delete_cache``, :mod:`.uploads`). ``launch()`` uses
    :func:`offline_theme` and :data:`CSS` and serves the MCP tools.

    The queue is bounded (:data:`QUEUE_MAX_SIZE`: past it a request is turned away at once
    with gradio's "Queue is full" message instead of waiting without end) and shared fairly
    (:class:`FairQueue`): one browser session may have at most :data:`MAX_SESSION_EVENTS`
    events waiting and one client address :data:`MAX_CLIENT_EVENTS`, so one user's burst is
    refused beyond its share instead of filling the queue for everyone. The events that
    run a model (Ask, the Ask that follows a page load, Compare and Batch) share one
    concurrency group of ``controls.MODEL_CONCURRENCY``; the other callbacks are light and pure and
    run :data:`DEFAULT_CONCURRENCY` at a time each, beside a running model request. Together
    with the Ask tab's size limits (``ask_tab.MAX_QUESTION_CHARS``, the model's context) and the
    Batch tab's (``batch_tab.MAX_BATCH_ROWS``) this bounds how long one user's request can
    make the others wait.

    Every callback that opens a checkpoint or a run is confined (``common.confine``) to the
    shipped assets, ``runs/``, ``$RLCD_CHECKPOINT``, the converted SmolLM2 checkpoint and the
    folders the operator allows (``build_demo(allowed_dirs=...)``, ``rlcd-lab app
    --allow-checkpoint-dir``): a typed path elsewhere is refused with a message that does not
    say whether it exists.
    """
    root, runs_root = Path(root), Path(runs_root)
    places = allowed_places(root, runs_root, allowed_dirs)
    with Dashboard(
        title="rlcd_lab dashboard", analytics_enabled=False, delete_cache=DELETE_CACHE
    ) as demo:
        with gr.Row():
            gr.Markdown(INTRO)
            refresh = gr.Button(REFRESH_LABEL, size="sm", scale=0, min_width=200)
        ctx = TabContext(root, runs_root, demo, places, refresh)
        with gr.Tabs() as tabs:
            for tab in TABS:
                with gr.Tab(tab.label, id=tab.id):
                    tab.build(ctx)
        # one rule for every tab: a user's change in one tab moves the others
        _sync(ctx.rules)
        # deep links: /?tab=routing opens the Routing tab
        demo.load(_select_tab, None, tabs, api_visibility="private", show_progress="hidden")
        mcp_tools.register(root, places)
    mcp_tools.document_only_tools(demo)
    demo.queue(max_size=QUEUE_MAX_SIZE, default_concurrency_limit=DEFAULT_CONCURRENCY)
    return demo
