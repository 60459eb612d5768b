"""The Jev-compatible decision server: an rlcd_lab checkpoint behind the typed-decision API.

``rlcd-lab serve --checkpoint DIR --port 8000`` (:func:`serve`, or ``create_app(...)`` with
any ASGI server) answers the Jev wire contract (docs/server.md) so that the official client
(PyPI ``typesafe-sdk``) works unchanged against a model trained here:

* ``POST /v1/systemone``: ``{"model", "state", "questions"}`` -> ``{"model", "answers",
  "usage"}`` (the body is validated once with :mod:`rlcd_lab.decide.jev`'s schema;
  :mod:`rlcd_lab.decide` computes the answers);
* ``GET /v1/models``: ``{"models": [{"name", "description", "release_date"}]}``, the
  checkpoint's name and its aliases (default ``jev-latest``, the client's default model);
* ``GET /health``: ``{"status": "ok", "model", "batches", "jobs"}`` (no key needed;
  ``jobs / batches`` is the mean dynamic batch size so far).

The server is transport only; each part in its own module:

* :mod:`.app`: :func:`create_app`, the routes and the request pipeline (validate, check
  the cost budget, batch, answer single-option questions without the model, respond);
* :mod:`.hardening`: limits (:class:`ServerLimits`), the error shape, bounded body
  reading and JSON parsing, the bearer key, request ids and the capacity gate;
* :mod:`.batching`: the :class:`DynamicBatcher` and dropping the work of clients that left;
* :mod:`.connections`: the uvicorn server (:func:`build_server`): connection timeouts and
  bounds, bounded request heads, a bounded graceful shutdown;
* this module: :func:`serve`, the command line's entry point.

Every response carries an ``x-typesafe-request-id`` header (the client's
``response.request_id``). Errors are JSON ``{"detail": [{"loc": [...], "msg": ..., "type":
...}]}``: 422 for a body that is not valid (bad JSON, NaN or a number that overflows to
infinity, an integer of more than ``max_int_digits`` digits, duplicate keys, too deep,
fields outside the schema, wrong types, a state or question text over its character limit,
a request over the cost budget, a question the checkpoint cannot represent), 404 for an
unknown model, 401 for a missing or wrong bearer key, 413 for a body over the size limit,
415 for a missing or other content type or an unsupported encoding, 431 for a request head
over ``max_header_bytes``, 503 with ``Retry-After`` when the queue is full, the queued
work would make the request miss its deadline (admission, :mod:`.batching`), the server is
at capacity (``limit_concurrency`` requests in flight; idle connections hold no slot), a
client already holds ``max_client_connections`` busy connections, or the server is
shutting down (a request still running when the graceful shutdown ends), 500 when the
model code fails on a request (the rest of its batch is still answered, and the
connection stays usable). A Host header outside ``allowed_hosts`` gets Starlette's
plain-text 400 (DNS rebinding).

Security: the server binds 127.0.0.1 unless told otherwise; with an API key every
``/v1`` call needs ``Authorization: Bearer <key>`` (compared in constant time). The state
is untrusted input: it is only rendered into the prompt, never parsed for fields or
options; every object in the body is closed (``extra="forbid"``), so fields outside the
schema are rejected, never passed on. The body is parsed in a worker thread with bounds
(size, nesting, integer digits, finite numbers) and its texts are measured in characters
before anything is tokenised. ``serve`` adds connection timeouts (``timeout_request`` for a
whole request to arrive, ``timeout_keep_alive`` between requests), the capacity limit, a
bound on request heads and bounds on open connections, per client and in all, that close
idle connections first (:class:`TimedH11Protocol`).

Answer time: the default mode ``auto`` (direct, reasoning below the confidence threshold)
applies to a checkpoint whose T was fitted; one whose T was not
(``decide.temperature_fitted``) answers directly unless a request asks otherwise (an
unfitted confidence cannot say when reasoning is worth its time). Every request has a
deadline (``deadline_s`` after it arrived, default :data:`DEFAULT_DEADLINE_S`, below the
official client's 10 s timeout; ``rlcd.deadline_s`` changes it per request): past it no
more rationales are drawn and a question still reasoning is answered by its direct
readout (the ``rlcd`` extension marks it ``deadline_passed``). A request that the work
queued ahead of it would make late is refused at once with a 503 and ``Retry-After``
(:class:`rlcd_lab.server.batching.DynamicBatcher`, from the measured cost of its calls),
never answered late because of the queue. Once bound, :func:`serve` logs its URL (the
port it bound), the model names, the checkpoint and whether a key is required.

Extensions are opt-in: a request may carry ``"rlcd": {"mode", "m", "threshold",
"aggregate", "max_new_tokens", "seed", "deadline_s", "rationales"}``; only then does the
response carry an ``"rlcd"`` object (the options and deadline used, the fitted
calibration temperature under ``"T"``, the prompt format and, per question, the mode that
answered it, the escalation flag and direct confidence in ``auto`` mode,
``deadline_passed`` when the deadline cut its reasoning, the option tokens read and, with
``"rationales": true``, the rationales and their per-rationale readouts).
A choice with one label or a score with one level (the official schema allows both) is
answered without the model: probability 1, confidence 1, mode ``single_option``.

Dynamic batching: concurrent requests wait in an asyncio queue for up to ``max_wait_ms``;
what has arrived by then (at most ``max_batch`` requests) is answered in one
``DecisionModel.decide_batch`` call, in a single worker thread, so forward passes are
shared instead of run one request at a time. Direct answers do not depend on the batch;
sampled rationales (``reason``, escalated ``auto``) are seeded per batch, so they do. When
a client disconnects, its queued request never reaches the model and its running one stops
within one decoding step (``decide_batch``'s ``cancelled``, checked by the sampler before
every step); the server logs one line for it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlcd_lab.decide import DecisionModel  # the class create_app loads checkpoints with
from rlcd_lab.decide.jev import DecisionError
from rlcd_lab.server.app import create_app
from rlcd_lab.server.connections import (
    MAX_CLIENT_CONNECTIONS,
    MAX_CONNECTIONS,
    MAX_HEADER_BYTES,
    build_server,
    check_server_args,
    host_pattern,
    is_loopback,
)
from rlcd_lab.server.hardening import check_number

__all__ = [
    "API_KEY_ENV",
    "LOOPBACK_HOSTS",
    "measure_passes",
    "serve",
    "startup_line",
]

log = logging.getLogger(__name__)
API_KEY_ENV = "RLCD_API_KEY"
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")


def _check_api_key(api_key: str | None) -> str | None:
    """The key to require: ``api_key``, else ``$RLCD_API_KEY`` (unset or empty: none);
    ``ValueError`` unless it is printable ASCII without spaces."""
    if api_key is None:
        api_key = os.environ.get(API_KEY_ENV, "").strip() or None
    if api_key is not None and (
        not (api_key.isascii() and api_key.isprintable()) or " " in api_key
    ):
        raise ValueError("the API key must be printable ASCII without spaces")
    return api_key


def serve(
    checkpoint: str | Path | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    api_key: str | None = None,
    allowed_hosts: Sequence[str] = (),
    log_level: str = "info",
    limit_concurrency: int = 256,
    timeout_keep_alive: float = 5.0,
    timeout_request: float = 15.0,
    timeout_graceful_shutdown: float = 10.0,
    max_connections: int | None = MAX_CONNECTIONS,
    max_client_connections: int | None = MAX_CLIENT_CONNECTIONS,
    max_header_bytes: int = MAX_HEADER_BYTES,
    threads: int | None = 1,
    **kwargs: Any,
) -> None:
    """Load ``checkpoint`` (default: ``default_checkpoint()``) and serve it with uvicorn
    (:func:`build_server`, which binds ``host:port``: ``OSError`` in one line when the
    port is in use) until ``SIGINT``/``SIGTERM``.

    ``api_key`` None reads ``$RLCD_API_KEY`` (unset or empty: no key; the environment
    variable is the way to pass it, a command-line key is visible in ``ps``). Host headers
    accepted: the loopback names, ``host`` and ``allowed_hosts``. Binding a non-loopback
    address without a key logs a warning. Every argument is checked (``ValueError``, one
    line) before the checkpoint is loaded. ``threads``: torch's CPU threads for the
    forward passes (None: torch's default, one per core). One thread keeps the server's
    throughput when other processes load the cores (torch's default lost 3-8x of it on
    2 busy cores, one thread 1.7-2x; ``benchmarks/serve.py --under-load``); a larger
    model on many idle cores wants more. Other ``kwargs`` go to :func:`create_app`.
    """
    if not isinstance(host, str) or not host.strip() or " " in host:
        raise ValueError(f"host must be an address or host name, got {host!r}")
    transport = {
        "timeout_keep_alive": timeout_keep_alive,
        "timeout_request": timeout_request,
        "timeout_graceful_shutdown": timeout_graceful_shutdown,
        "max_header_bytes": max_header_bytes,
        "max_connections": max_connections,
        "max_client_connections": max_client_connections,
    }
    check_server_args(port, **transport)
    if threads is not None:
        check_number("threads", threads, 1, 1024, integer=True)
    api_key = _check_api_key(api_key)
    hosts = [*LOOPBACK_HOSTS, host_pattern(host), *allowed_hosts]
    _configure_logging(log_level)
    if not is_loopback(host) and not api_key:
        log.warning(
            "serving on %s without an API key: anyone who can reach it can use the model (set %s)",
            host,
            API_KEY_ENV,
        )
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    app = create_app(
        checkpoint,
        api_key=api_key,
        allowed_hosts=hosts,
        limit_concurrency=limit_concurrency,
        **kwargs,
    )
    measure_passes(getattr(getattr(app, "state", None), "decider", None))
    server = build_server(app, host=host, port=port, log_level=log_level, **transport)
    log.info("%s", startup_line(app, checkpoint, host, server.sock.getsockname()[1], api_key))
    server.run()


def startup_line(
    app: Any, checkpoint: str | Path | None, host: str, port: int, api_key: str | None
) -> str:
    """The line ``serve`` logs once it is bound: its URL (the port it bound, also for
    ``port=0``), the model names it answers to, the checkpoint they were loaded from and
    whether an API key is required."""
    from rlcd_lab.server.app import default_checkpoint

    bare = host.strip("[]")
    url = f"http://{f'[{bare}]' if ':' in bare else bare}:{port}"
    names = list(getattr(getattr(app, "state", None), "names", None) or ["?"])
    source = checkpoint if checkpoint is not None else default_checkpoint()
    key = "an API key is required (Authorization: Bearer)" if api_key else "no API key is required"
    return (
        f"serving {url}/v1/systemone: model {names[0]!r} (aliases {names[1:]}) from {source}; {key}"
    )


def measure_passes(decider: DecisionModel | None) -> None:
    """Answer one small reasoning request (a direct readout, 2 rationales of at most 8
    tokens, their scoring pass) before serving, so that the deadlines' budget
    (:class:`rlcd_lab.decide.deadlines.PassCosts`) starts from measured passes of every kind:
    an unmeasured kind's estimate is only a guess from the others."""
    if not isinstance(decider, DecisionModel):
        return
    question = {"warm_up": {"type": "noul"}}
    try:
        decider.decide("1+1=2?", question, mode="auto", threshold=1.0, m=2, max_new_tokens=8)
    except DecisionError as err:  # a checkpoint that cannot answer it: measured later
        log.debug("could not measure the model's passes before serving: %s", err.msg)


def _configure_logging(level: str) -> None:
    """The server's own log lines (abandoned requests, model failures, warnings) next to
    uvicorn's, in its format, when nothing else configured the ``rlcd_lab`` logger."""
    from uvicorn.logging import DefaultFormatter

    pkg = logging.getLogger("rlcd_lab")
    if not pkg.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(DefaultFormatter("%(levelprefix)s %(message)s"))
        pkg.addHandler(handler)
        pkg.setLevel(level.upper())
        pkg.propagate = False
