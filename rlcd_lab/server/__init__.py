"""The Jev-compatible decision server: an rlcd_lab checkpoint behind the typed-decision API.

``rlcd-lab serve --checkpoint DIR --port 8000`` (:func:`.serving.serve`, or
``create_app(...)`` with any ASGI server) answers the Jev wire contract (docs/server.md) so
that the official client (PyPI ``typesafe-sdk``) works unchanged against a model trained
here:

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
* :mod:`.options`: :class:`~.options.ServeOptions`, every option from the command line to
  the app;
* :mod:`.serving`: :func:`~.serving.serve`, the command line's entry point.

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
deadline (``deadline`` seconds after it arrived, :class:`~.options.ServeOptions`, below the
official client's 10 s timeout; ``rlcd.deadline_s`` changes it per request): past it no
more rationales are drawn and a question still reasoning is answered by its direct
readout (the ``rlcd`` extension marks it ``deadline_passed``). A request that the work
queued ahead of it would make late is refused at once with a 503 and ``Retry-After``
(:class:`rlcd_lab.server.batching.DynamicBatcher`, from the measured cost of its calls),
never answered late because of the queue. Once bound, :func:`~.serving.serve` logs its URL (the
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
