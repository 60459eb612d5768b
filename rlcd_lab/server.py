"""The Jev-compatible decision server: an rlcd_lab checkpoint behind the typed-decision API.

``rlcd-lab serve --checkpoint DIR --port 8000`` (or ``create_app(...)`` with any ASGI
server) answers the Jev wire contract (docs/server.md) so that the official client
(PyPI ``typesafe-sdk``) works unchanged against a model trained here:

* ``POST /v1/systemone``: ``{"model", "state", "questions"}`` -> ``{"model", "answers",
  "usage"}`` (``rlcd_lab.decide`` computes the answers);
* ``GET /v1/models``: ``{"models": [{"name", "description", "release_date"}]}``, the
  checkpoint's name and its aliases (default ``jev-latest``, the client's default model);
* ``GET /health``: ``{"status": "ok", "model", "batches", "jobs"}`` (no key needed;
  ``jobs / batches`` is the mean dynamic batch size so far).

Every response carries an ``x-typesafe-request-id`` header (the client's
``response.request_id``). Errors are JSON ``{"detail": [{"loc": [...], "msg": ..., "type":
...}]}``: 422 for a body that is not valid (bad JSON, NaN or a number that overflows to
infinity, an integer of more than ``max_int_digits`` digits, duplicate keys, too deep,
fields outside the schema, wrong types, a state or question text over its character limit,
a request over the cost budget, a question the checkpoint cannot represent), 404 for an
unknown model, 401 for a missing or wrong bearer key, 413 for a body over the size limit,
415 for a missing or other content type or an unsupported encoding, 431 for a request head
over ``max_header_bytes``, 503 with ``Retry-After`` when the queue is full, the server is
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
readout (the ``rlcd`` extension marks it ``deadline_passed``).

Extensions are opt-in: a request may carry ``"rlcd": {"mode", "m", "threshold",
"aggregate", "max_new_tokens", "seed", "deadline_s", "rationales"}``; only then does the
response carry an ``"rlcd"`` object (the mode, deadline and temperature used and, per
question, the mode that answered it, the escalation flag and direct confidence in ``auto``
mode, ``deadline_passed`` when the deadline cut its reasoning, the option tokens read and,
with ``"rationales": true``, the rationales and their per-rationale readouts).
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

import asyncio
import functools
import gc
import hmac
import ipaddress
import json
import logging
import math
import os
import re
import socket
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, suppress
from dataclasses import asdict, dataclass, fields, replace
from datetime import date, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import h11
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
)
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from .assets import default_checkpoint as pick_default
from .assets import shipped_checkpoints
from .decide import (
    MAX_CHOICE_OPTIONS,
    MAX_LABEL_CHARS,
    MAX_SCORE_LEVELS,
    DecideOptions,
    Decision,
    DecisionError,
    DecisionModel,
    Question,
    render,
    with_options,
)

log = logging.getLogger(__name__)
DEFAULT_ALIASES = ("jev-latest",)
API_KEY_ENV = "RLCD_API_KEY"
REQUEST_ID_HEADER = "x-typesafe-request-id"
"""The response header the official client reads as ``response.request_id``."""
DEFAULT_DEADLINE_S = 8.0
"""Seconds a request may take (from its arrival) before its answer is the best so far:
below the official client's default timeout of 10 s."""
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_REQUEST_ID_KEY = "rlcd.request_id"  # where the request id travels in the ASGI scope


# --------------------------------------------------------------------------- limits
@dataclass(frozen=True)
class ServerLimits:
    """Request limits (all positive integers).

    ``max_body_bytes``: the body as received and after decompression; ``max_depth``: nesting
    of JSON objects and arrays anywhere in the body; ``max_int_digits``: digits of a JSON
    integer (longer numbers are refused, as are numbers that overflow to infinity);
    ``max_questions`` per request; ``max_state_chars``: the rendered state (a string as it
    is, JSON otherwise), checked before it is tokenised, then ``max_state_tokens`` on its
    tokens; ``max_question_chars``: one question as JSON (instructions and criteria).
    The cost budget, per request and counting only questions the model answers:
    ``max_prompt_chars`` bounds ``questions x state characters + question characters`` (each
    question's prompt repeats the state), ``max_sampled_tokens`` bounds ``m x max_new_tokens
    x questions`` in ``reason`` and ``auto`` mode (the worst case: every question
    escalates). ``max_pending``: requests queued for the model before 503. Choice labels
    (1..255) and score levels (1..10) are fixed by the wire contract."""

    max_body_bytes: int = 1 << 20
    max_depth: int = 32
    max_int_digits: int = 100
    max_questions: int = 32
    max_state_chars: int = 32_768
    max_state_tokens: int = 4096
    max_question_chars: int = 16_384
    max_prompt_chars: int = 262_144
    max_sampled_tokens: int = 32_768
    max_pending: int = 256

    def validate(self) -> None:
        """Raise ``ValueError`` unless every limit is a positive integer."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{f.name} must be a positive integer, got {value!r}")


def _check_number(
    name: str, value: Any, lo: float, hi: float, *, integer: bool = False, open_lo: bool = False
) -> None:
    """``ValueError`` (one line naming ``name``) unless ``value`` is a finite number in range."""
    kind = "an integer" if integer else "a finite number"
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    ok = ok and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (lo < value if open_lo else lo <= value) and value <= hi
    if not ok:
        bounds = f"({lo:g}, {hi:g}]" if open_lo else f"[{lo:g}, {hi:g}]"
        raise ValueError(f"{name} must be {kind} in {bounds}, got {value!r}")


# --------------------------------------------------------------------------- wire schema
Content = str | dict[str, Any] | list[Any]


def _clean_label(label: str) -> str:
    if label != label.strip():
        raise ValueError("labels must not start or end with whitespace")
    if not label.isprintable():
        raise ValueError("labels must not contain control characters")
    return label


Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_LABEL_CHARS)]
Label = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_LABEL_CHARS), AfterValidator(_clean_label)
]


class _Closed(BaseModel):
    """Every object of the wire form is closed: unknown fields are an error."""

    model_config = ConfigDict(extra="forbid", strict=True)


class NoulCriteria(_Closed):
    true: Content | None = None
    false: Content | None = None


class NoulQuestion(_Closed):
    type: Literal["noul"]
    instructions: Content | None = None
    criteria: NoulCriteria | None = None


class ChoiceQuestion(_Closed):
    type: Literal["choice"]
    instructions: Content | None = None
    criteria: dict[Label, Content | None] = Field(min_length=1, max_length=MAX_CHOICE_OPTIONS)


class ScoreQuestion(_Closed):
    type: Literal["score"]
    instructions: Content | None = None
    criteria: list[Content] = Field(min_length=1, max_length=MAX_SCORE_LEVELS)


WireQuestion = Annotated[NoulQuestion | ChoiceQuestion | ScoreQuestion, Field(discriminator="type")]


class RlcdOptions(_Closed):
    """Opt-in extensions; fields left out keep the server's defaults."""

    mode: Literal["direct", "reason", "auto"] | None = None
    m: int | None = Field(None, ge=1, le=16)
    threshold: float | None = Field(None, ge=0.0, le=1.0, allow_inf_nan=False)
    aggregate: Literal["mixture", "single"] | None = None
    max_new_tokens: int | None = Field(None, ge=1, le=1024)
    seed: int | None = Field(None, ge=0, le=2**31 - 1)
    deadline_s: float | None = Field(None, gt=0.0, le=3600.0, allow_inf_nan=False)
    rationales: bool = False


class SystemOneRequest(_Closed):
    model: Name
    state: Content
    questions: dict[Name, WireQuestion] = Field(min_length=1)
    assets: dict[str, Any] | None = None
    rlcd: RlcdOptions | None = None

    @field_validator("assets")
    @classmethod
    def _no_assets(cls, value: dict[str, Any] | None) -> None:
        if value is not None:
            raise ValueError("image assets are not supported: this server runs a text model")


def _single_option(question: dict) -> Question | None:
    """The question when it has a single possible answer (a one-label choice, a one-level
    score), else None. Its answer needs no model: probability 1."""
    kind, criteria = question["type"], question.get("criteria")
    if kind == "choice" and len(criteria) == 1:
        (label, desc), *_ = criteria.items()
        return Question("choice", (label,), (desc,), question.get("instructions"))
    if kind == "score" and len(criteria) == 1:
        return Question("score", ("0",), tuple(criteria), question.get("instructions"))
    return None


# --------------------------------------------------------------------------- errors
class ApiError(Exception):
    """An error response in the one shape the server uses:
    ``{"detail": [{"loc", "msg", "type"}]}`` with an HTTP status (``detail`` given: several
    entries at once)."""

    def __init__(
        self,
        status: int,
        msg: str,
        kind: str,
        loc: Sequence[str | int] = (),
        headers: dict[str, str] | None = None,
        detail: list[dict] | None = None,
    ):
        super().__init__(msg)
        self.status, self.headers = status, headers
        self.detail = detail or [_error_entry(loc, msg, kind)]


class ClientGone(Exception):
    """The client disconnected (or its connection timed out) before its answer was sent."""


def _error_entry(loc: Sequence[Any], msg: str, kind: str) -> dict:
    """One error entry; user-controlled parts (dict keys in ``loc``, inputs quoted in
    ``msg``) are truncated so an error never echoes a huge input back."""
    loc = [x if isinstance(x, int) else str(x)[:100] for x in loc]
    return {"loc": loc, "msg": str(msg)[:500], "type": kind}


def _error_response(status: int, detail: list[dict], headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def _validation_detail(err: ValidationError, prefix: Sequence[str] = ("body",)) -> list[dict]:
    errors = err.errors(include_url=False, include_context=False, include_input=False)
    out = [_error_entry([*prefix, *e["loc"]], e["msg"], e["type"]) for e in errors[:20]]
    if len(errors) > 20:
        out.append(_error_entry(list(prefix), f"{len(errors) - 20} more errors", "too_many_errors"))
    return out


# --------------------------------------------------------------------------- the body
def _zstd_module() -> Any:
    try:
        from compression import zstd  # Python >= 3.14
    except ImportError:
        try:
            from backports import zstd
        except ImportError:
            raise ApiError(
                415,
                "zstd request bodies need the backports.zstd package on the server; "
                "send uncompressed JSON (typesafe-sdk: compression=False)",
                "unsupported_encoding",
                ["header", "content-encoding"],
            ) from None
    return zstd


def _decompress(data: bytes, encoding: str, limit: int) -> bytes:
    """Undo ``Content-Encoding`` (identity, gzip, zstd), at most ``limit`` bytes out (a
    compressed bomb stops there); one gzip member or zstd frame, no trailing data, and a
    zstd window of at most 8 MiB (or twice ``limit``)."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return data

    def bad(msg: str) -> ApiError:
        return ApiError(422, msg, "decompression_error", ["body"])

    if encoding == "gzip":
        d: Any = zlib.decompressobj(wbits=31)
        try:
            out = d.decompress(data, limit + 1)
        except zlib.error as err:
            raise bad(f"invalid gzip body: {err}") from None
    elif encoding == "zstd":
        zstd = _zstd_module()
        window = min(27, max(23, limit.bit_length() + 1))
        d = zstd.ZstdDecompressor(options={zstd.DecompressionParameter.window_log_max: window})
        try:
            out = d.decompress(data, max_length=limit + 1)
        except zstd.ZstdError as err:
            raise bad(f"invalid zstd body: {err}") from None
    else:
        raise ApiError(
            415,
            f"unsupported content encoding {encoding[:40]!r}; use identity, gzip or zstd",
            "unsupported_encoding",
            ["header", "content-encoding"],
        )
    if len(out) > limit:
        raise ApiError(413, f"the body exceeds {limit} bytes", "body_too_large", ["body"])
    if not d.eof:
        raise bad(f"truncated {encoding} body")
    if d.unused_data:
        raise bad(f"trailing data after the {encoding} body")
    return out


async def _read_body(request: Request, limit: int) -> bytes:
    """The raw body, refused (413) as soon as it exceeds ``limit`` bytes; ``ClientGone``
    when the client disconnects (or times out) while sending it. A body of another media
    type (415) is still read first, up to ``limit`` bytes: answering before it is read
    would close the connection on unread data, and the client's operating system may
    then drop the answer for a reset."""
    ctype = request.headers.get("content-type")
    media = (ctype or "").split(";")[0].strip().lower()
    wrong = None
    if media.startswith("multipart/"):
        wrong = "multipart requests carry image assets, which this text model does not support"
    elif media != "application/json":
        got = "no Content-Type" if ctype is None else f"Content-Type {ctype[:60]!r}"
        wrong = f"send the body as application/json (got {got})"
    too_large = ApiError(413, f"the body exceeds {limit} bytes", "body_too_large", ["body"])
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large
            if wrong is None:
                chunks.append(chunk)
    except ClientDisconnect:
        raise ClientGone(f"while sending its body ({size} bytes received)") from None
    if wrong is not None:
        raise ApiError(415, wrong, "unsupported_media_type", ["header", "content-type"])
    return b"".join(chunks)


def _parse_json(raw: bytes, limits: ServerLimits) -> Any:
    """Strict, bounded JSON: UTF-8, no NaN/Infinity, no number that overflows to infinity,
    integers of at most ``max_int_digits`` digits, no duplicate keys in an object, no lone
    surrogates, nesting at most ``max_depth``. Raises ``ApiError`` (422)."""

    def bad(msg: str) -> ApiError:
        return ApiError(422, msg, "json_invalid", ["body"])

    def pairs(items: list[tuple[str, Any]]) -> dict:
        obj: dict = {}
        for key, value in items:
            if key in obj:
                raise bad(f"duplicate key {key[:60]!r} in a JSON object")
            obj[key] = value
        return obj

    def constant(name: str) -> Any:
        raise bad(f"{name} is not valid JSON")

    def integer(text: str) -> int:
        digits = len(text) - text.startswith("-")
        if digits > limits.max_int_digits:
            raise bad(f"an integer with {digits} digits; at most {limits.max_int_digits}")
        return int(text)

    def number(text: str) -> float:
        if len(text) > limits.max_int_digits + 32:
            raise bad(f"a number written with {len(text)} characters")
        value = float(text)
        if not math.isfinite(value):
            raise bad(f"the number {text[:40]} is out of range (it overflows to infinity)")
        return value

    if not raw.strip():
        raise ApiError(422, "the body is empty; send a JSON object", "missing", ["body"])
    try:
        text = raw.decode("utf-8")
        obj = json.loads(
            text,
            object_pairs_hook=pairs,
            parse_constant=constant,
            parse_int=integer,
            parse_float=number,
        )
    except UnicodeDecodeError:
        raise bad("the body is not valid UTF-8") from None
    except json.JSONDecodeError as err:
        raise bad(f"invalid JSON: {err.msg} at position {err.pos}") from None
    except RecursionError:
        raise bad(f"JSON nested deeper than {limits.max_depth} levels") from None
    surrogates = _SURROGATE_ESCAPE.search(text) is not None  # only \u escapes can make them
    if not surrogates and text.count("[") + text.count("{") <= limits.max_depth:
        return obj  # cannot be too deep: nothing to walk
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > limits.max_depth:
                raise bad(f"JSON nested deeper than {limits.max_depth} levels")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, child in items:
                if surrogates and isinstance(key, str) and _SURROGATE.search(key):
                    raise bad("the body contains invalid unicode (a lone surrogate)")
                stack.append((child, depth + 1))
        elif surrogates and isinstance(value, str) and _SURROGATE.search(value):
            raise bad("the body contains invalid unicode (a lone surrogate)")
    return obj


@dataclass
class _Parsed:
    """A validated request with the character counts the cost checks need."""

    req: SystemOneRequest
    questions: dict[str, dict]
    state_chars: int
    question_chars: dict[str, int]


def _load_request(raw: bytes, encoding: str, limits: ServerLimits) -> _Parsed:
    """Decompress, parse, validate and measure a body (CPU work: run it off the event loop)."""
    body = _parse_json(_decompress(raw, encoding, limits.max_body_bytes), limits)
    try:
        req = SystemOneRequest.model_validate(body)
    except ValidationError as err:
        raise ApiError(422, "", "", detail=_validation_detail(err)) from None
    questions = {n: q.model_dump() for n, q in req.questions.items()}
    state_text = render(req.state)
    if not state_text.strip() or req.state in ({}, []):
        raise ApiError(422, "the state is empty", "missing", ["body", "state"])
    chars = {n: len(json.dumps(q, ensure_ascii=False)) for n, q in questions.items()}
    return _Parsed(req, questions, len(state_text), chars)


# --------------------------------------------------------------------------- batching
class Overloaded(Exception):
    """The batcher's queue is full."""


class DynamicBatcher:
    """Collects submitted jobs for up to ``max_wait_ms`` (at most ``max_batch``), then runs
    ``fn(jobs, cancelled) -> results`` once for all of them in a single worker thread;
    ``cancelled(i)`` tells ``fn`` (from its thread) that job ``i``'s caller stopped waiting.

    ``enabled=False`` runs every job on its own (one ``fn([job], ...)`` call each, in
    arrival order): the unbatched baseline. ``submit`` raises :class:`Overloaded` when
    ``max_pending`` jobs are already waiting; cancelling the task awaiting ``submit`` drops
    its job if it has not reached ``fn`` yet, else marks it cancelled. Each running event
    loop gets its own queue and collecting task (created on first use); all of them share
    the one worker thread, so the model is never called concurrently.
    """

    def __init__(
        self,
        fn: Callable[[list[Any], Callable[[int], bool]], list[Any]],
        *,
        enabled: bool = True,
        max_batch: int = 32,
        max_wait_ms: float = 5.0,
        max_pending: int = 256,
    ):
        _check_number("max_batch", max_batch, 1, 4096, integer=True)
        _check_number("max_wait_ms", max_wait_ms, 0, 1000)
        _check_number("max_pending", max_pending, 1, 1 << 20, integer=True)
        self.fn, self.enabled = fn, enabled
        self.max_batch = max_batch if enabled else 1
        self.max_wait = max_wait_ms / 1000.0
        self.max_pending = max_pending
        self.batches = self.jobs = 0  # batches run and jobs answered in them, so far
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlcd-decide")
        self._workers: dict[asyncio.AbstractEventLoop, tuple[asyncio.Queue, asyncio.Task]] = {}

    def _queue(self) -> asyncio.Queue:
        loop = asyncio.get_running_loop()
        for old in [lp for lp in self._workers if lp.is_closed()]:
            del self._workers[old]
        worker = self._workers.get(loop)
        if worker is None or worker[1].done():
            queue: asyncio.Queue = asyncio.Queue()
            worker = self._workers[loop] = (queue, loop.create_task(self._run(queue)))
        return worker[0]

    async def submit(self, job: Any) -> Any:
        """Queue ``job`` and wait for its result (or its exception)."""
        queue = self._queue()
        if queue.qsize() >= self.max_pending:
            raise Overloaded
        future = asyncio.get_running_loop().create_future()
        queue.put_nowait((job, future))
        return await future  # cancelling the caller cancels the future

    async def _run(self, queue: asyncio.Queue) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await queue.get()]
            if self.enabled and self.max_batch > 1 and queue.qsize() < self.max_batch - 1:
                await asyncio.sleep(self.max_wait)  # let concurrent requests join
            while len(batch) < self.max_batch and not queue.empty():
                batch.append(queue.get_nowait())
            batch = [(job, fut) for job, fut in batch if not fut.done()]  # client gone
            if not batch:
                continue
            self.batches, self.jobs = self.batches + 1, self.jobs + len(batch)
            futures = [fut for _, fut in batch]

            def cancelled(i: int, futures: list = futures) -> bool:
                return futures[i].done()  # read from the worker thread: a flag, no callbacks

            try:
                results = await loop.run_in_executor(
                    self._executor, self.fn, [job for job, _ in batch], cancelled
                )
            except Exception as err:  # a bug in the model code: every caller gets a 500
                for fut in futures:
                    if not fut.done():
                        fut.set_exception(err)
                continue
            for fut, result in zip(futures, results, strict=True):
                if not fut.done():
                    fut.set_result(result)

    async def aclose(self) -> None:
        """Stop the running loop's collecting task (the worker thread stays for others)."""
        worker = self._workers.pop(asyncio.get_running_loop(), None)
        if worker is not None:
            worker[1].cancel()
            with suppress(asyncio.CancelledError):
                await worker[1]


async def _until_disconnect(receive: Receive) -> None:
    """Return when the client disconnects (call only after the body was read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _answer_unless_gone(request: Request, answer: Awaitable[Any]) -> Any:
    """``await answer``, unless the client disconnects first: then ``answer`` is cancelled
    (its job leaves the queue, or stops at the model's next step) and ``ClientGone``."""
    task = asyncio.ensure_future(answer)
    gone = asyncio.ensure_future(_until_disconnect(request.receive))
    try:
        done, _ = await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
    if task not in done:
        raise ClientGone("while its request waited for the model")
    return task.result()


# --------------------------------------------------------------------------- the gate
@dataclass
class Capacity:
    """At most ``limit`` requests in flight (None: no limit). Open connections do not
    count: an idle one holds no work slot (:class:`TimedH11Protocol` bounds connections,
    per client and in all). ``draining``: the server is shutting down (set by
    :func:`build_server`'s server)."""

    limit: int | None = None
    active: int = 0
    draining: bool = False

    def full(self) -> bool:
        """Whether a new request would go beyond ``limit``."""
        return self.limit is not None and self.active >= self.limit


class _Gate:
    """The outer ASGI layer: a request id on every response (``x-typesafe-request-id``),
    503 with ``Retry-After`` beyond :class:`Capacity`, ``Connection: close`` on any answer
    sent before the request body was read (the connection cannot be reused then), and a
    503 with ``Retry-After`` (not uvicorn's 500 and traceback) for a request the server
    cancels when shutting down (still running past ``timeout_graceful_shutdown``)."""

    def __init__(self, app: ASGIApp, capacity: Capacity) -> None:
        self.app, self.capacity = app, capacity

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = scope[_REQUEST_ID_KEY] = uuid.uuid4().hex
        headers = Headers(scope=scope)
        body_read = headers.get("content-length", "0") == "0" and "transfer-encoding" not in headers

        async def receive_body() -> Message:
            nonlocal body_read
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                body_read = True
            return message

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                out = MutableHeaders(scope=message)
                out[REQUEST_ID_HEADER] = rid
                if not body_read:
                    out["connection"] = "close"
            await send(message)

        if self.capacity.full():
            msg = f"the server is at capacity ({self.capacity.limit}); retry shortly"
            headers = {"Retry-After": "1", "Connection": "close"}  # shed the connection too
            response = _error_response(503, [_error_entry([], msg, "overloaded")], headers)
            await response(scope, receive_body, send_with_id)
            return
        started = False

        async def send_tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send_with_id(message)

        self.capacity.active += 1
        try:
            await self.app(scope, receive_body, send_tracked)
        except asyncio.CancelledError:
            if started or not self.capacity.draining:
                raise
            uncancel = getattr(asyncio.current_task(), "uncancel", None)  # Python >= 3.11
            if uncancel is not None:
                uncancel()  # answered: the cancellation is handled here
            log.info("request %s cancelled: the server is shutting down", rid)
            msg = "the server is shutting down; retry shortly"
            headers = {"Retry-After": "1", "Connection": "close"}
            response = _error_response(503, [_error_entry([], msg, "shutting_down")], headers)
            with suppress(Exception):  # the connection may be gone already
                await response(scope, receive_body, send_with_id)
        finally:
            self.capacity.active -= 1


class _GuardedRoute(APIRoute):
    """A route whose unexpected exceptions become a JSON 500 handled like any other error
    (``ApiError``), so the response is complete and the keep-alive connection stays usable
    (an exception reaching Starlette's outer error handler is re-raised to the server,
    which then drops the connection)."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except (ApiError, ClientGone, StarletteHTTPException, RequestValidationError):
                raise
            except Exception:
                log.exception("internal error (request %s)", request.scope.get(_REQUEST_ID_KEY))
                raise ApiError(500, "internal error", "internal_error") from None

        return guarded


# --------------------------------------------------------------------------- the app
def default_checkpoint() -> Path:
    """The shipped checkpoint the server answers with when none is given: the one the
    dashboard opens with (``rlcd_lab.assets.default_checkpoint``: the tiny ``verify``
    two-stage RLCD model)."""
    found = shipped_checkpoints()
    if not found:
        raise FileNotFoundError("no shipped checkpoints under assets/; pass --checkpoint")
    return found[pick_default(list(found))]


def _release_date(path: Path | None) -> str:
    meta = path / "rlcd.json" if path is not None else None
    if meta is not None and meta.exists():
        return datetime.fromtimestamp(meta.stat().st_mtime).date().isoformat()
    return date.today().isoformat()


def _check_device(device: str) -> None:
    """``ValueError`` for a device torch does not know or does not have here."""
    import torch

    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        msg = f"device must be a torch device such as cpu or cuda, got {device!r}"
        raise ValueError(msg) from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: CUDA is not available on this machine")


def _check_hosts(hosts: Sequence[str]) -> list[str]:
    """Host header patterns as ``TrustedHostMiddleware`` takes them: a name or address
    (``[..]`` around IPv6), ``*.domain``, or ``*`` for any; ``ValueError`` otherwise."""
    out = []
    for host in hosts:
        host = host.strip().lower()
        ok = bool(host) and " " not in host and "/" not in host
        ok = ok and (host == "*" or "*" not in host[1:]) and (host[:1] != "*" or host[:2] == "*.")
        if not ok:
            raise ValueError(f"allowed host {host!r} must be a host name, *.domain or *")
        out.append(host)
    return out


def create_app(
    decider: DecisionModel | str | Path | None = None,
    *,
    name: str | None = None,
    aliases: Sequence[str] = DEFAULT_ALIASES,
    api_key: str | None = None,
    options: DecideOptions | None = None,
    limits: ServerLimits | None = None,
    batching: bool = True,
    max_batch: int = 32,
    max_wait_ms: float = 5.0,
    device: str = "cpu",
    allowed_hosts: Sequence[str] | None = None,
    limit_concurrency: int | None = None,
    deadline_s: float | None = DEFAULT_DEADLINE_S,
    unfitted_auto: bool = False,
    verify: bool = True,
) -> FastAPI:
    """The ASGI app serving one checkpoint under ``name`` and ``aliases``.

    ``decider``: a loaded :class:`DecisionModel`, a checkpoint directory, or None for
    ``default_checkpoint()``. ``name`` defaults to ``rlcd-<task>-<method>`` from its
    ``rlcd.json``. ``api_key``: None or empty serves without a key (the command line also
    reads ``RLCD_API_KEY``). ``options``: the answers' defaults (None: mode ``auto``, direct
    and reasoning only below the confidence threshold); a request's ``rlcd`` object
    overrides them. For a checkpoint whose T was not fitted (``decide.temperature_fitted``)
    a default mode ``auto`` becomes ``direct`` (its confidence cannot say when reasoning is
    worth the time) unless ``unfitted_auto``; a request may still ask for it. ``deadline_s``:
    seconds from a request's arrival after which no more rationales are drawn for it and
    its answer is the best so far (None: no deadline; a request's ``rlcd.deadline_s``
    overrides it). ``verify``: check the checkpoint's checksums when loading it from a
    path (``--no-verify`` skips). ``batching``, ``max_batch``, ``max_wait_ms`` (0..1000):
    dynamic batching (see the module docstring). ``allowed_hosts``: Host header patterns
    (Starlette's ``TrustedHostMiddleware``); None accepts any (``serve`` always passes a
    list).
    ``limit_concurrency``: at most this many requests in flight (open connections do not
    count), beyond it 503 with ``Retry-After``; None: no limit. Arguments are checked
    (``ValueError``) before the checkpoint is loaded.
    """
    limits = limits or ServerLimits()
    limits.validate()
    if options is not None:
        options.validate()
    if deadline_s is not None:
        _check_number("deadline_s", deadline_s, 0, 3600, open_lo=True)
    _check_number("max_batch", max_batch, 1, 4096, integer=True)
    _check_number("max_wait_ms", max_wait_ms, 0, 1000)
    if limit_concurrency is not None:
        _check_number("limit_concurrency", limit_concurrency, 1, 1_000_000, integer=True)
    hosts = None if allowed_hosts is None else _check_hosts(allowed_hosts)
    for n in [name, *aliases] if name is not None else aliases:
        if not isinstance(n, str) or not 1 <= len(n) <= MAX_LABEL_CHARS or not n.isprintable():
            raise ValueError(f"model names must be 1..{MAX_LABEL_CHARS} printable characters")
    path = None
    if not isinstance(decider, DecisionModel):
        _check_device(device)
        path = Path(decider) if decider is not None else default_checkpoint()
        decider = DecisionModel.from_checkpoint(path, device=device, verify=verify)
    decider.max_state_tokens = min(decider.max_state_tokens, limits.max_state_tokens)
    options = options or DecideOptions(mode="auto")
    if options.mode == "auto" and not (decider.temperature_fitted or unfitted_auto):
        options = replace(options, mode="direct")
    meta = decider.meta
    if name is None:
        task = Path(str(meta.get("task") or "model")).name.removesuffix(".jsonl")
        name = f"rlcd-{task}-{meta.get('method') or 'checkpoint'}"
    names = list(dict.fromkeys([name, *aliases]))
    info = (
        f"rlcd_lab checkpoint (task {meta.get('task')}, method {meta.get('method')}, "
        f"{'fitted' if decider.temperature_fitted else 'unfitted'} T "
        f"{decider.temperature:.3g}, prompt format {decider.prompt_format}, "
        f"default mode {options.mode})"
    )
    released = _release_date(path)
    models = [
        {
            "name": n,
            "description": info if n == name else f"alias of {name}: {info}",
            "release_date": released,
        }
        for n in names
    ]

    def answer(jobs: list, cancelled: Callable[[int], bool]) -> list:
        """One shared ``decide_batch``; if it fails, each job alone, so that a request
        which breaks the model code fails by itself, not with its batch."""
        try:
            return decider.decide_batch(jobs, cancelled)
        except Exception:
            if len(jobs) == 1:
                raise
        out: list = []
        for i, job in enumerate(jobs):
            try:
                out.extend(decider.decide_batch([job], lambda _, i=i: cancelled(i)))
            except Exception as err:
                out.append(err)
        return out

    batcher = DynamicBatcher(
        answer,
        enabled=batching,
        max_batch=max_batch,
        max_wait_ms=max_wait_ms,
        max_pending=limits.max_pending,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await batcher.aclose()

    app = FastAPI(
        title="rlcd_lab decision server",
        description="Jev-compatible typed decisions (POST /v1/systemone).",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.router.route_class = _GuardedRoute
    capacity = Capacity(limit_concurrency)
    if hosts is not None:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=hosts, www_redirect=False)
    app.add_middleware(_Gate, capacity=capacity)  # outermost: its id is on every answer
    app.state.decider, app.state.batcher, app.state.names = decider, batcher, names
    app.state.capacity = capacity

    def authorize(request: Request) -> None:
        if not api_key:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        ok = scheme.lower() == "bearer" and hmac.compare_digest(
            token.strip().encode("utf-8", "replace"), api_key.encode("utf-8")
        )
        if not ok:
            raise ApiError(
                401,
                "missing or invalid API key (send Authorization: Bearer <key>)",
                "unauthorized",
                ["header", "authorization"],
                {"WWW-Authenticate": "Bearer"},
            )

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, err: ApiError) -> JSONResponse:
        return _error_response(err.status, err.detail, err.headers)

    @app.exception_handler(ClientGone)
    async def _client_gone(request: Request, err: ClientGone) -> Response:
        log.info(
            "%s %s abandoned: the client went away %s (request %s)",
            request.method,
            request.url.path,
            err,
            request.scope.get(_REQUEST_ID_KEY),
        )
        return Response(status_code=499)  # nobody reads it (nginx's "client closed request")

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, err: StarletteHTTPException) -> JSONResponse:
        entry = _error_entry([], str(err.detail), "http_error")
        return _error_response(err.status_code, [entry], getattr(err, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _request_error(_: Request, err: RequestValidationError) -> JSONResponse:
        detail = [_error_entry(e["loc"], e["msg"], e["type"]) for e in err.errors()[:20]]
        return _error_response(422, detail)

    @app.exception_handler(Exception)
    async def _internal(_: Request, err: Exception) -> JSONResponse:  # outside the routes
        log.exception("internal error", exc_info=err)
        return _error_response(500, [_error_entry([], "internal error", "internal_error")])

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "model": name, "batches": batcher.batches, "jobs": batcher.jobs}

    @app.get("/v1/models")
    async def list_models(request: Request) -> dict:
        authorize(request)
        return {"models": models}

    @app.post("/v1/systemone")
    async def system_one(request: Request) -> JSONResponse:
        arrived = time.monotonic()
        authorize(request)
        raw = await _read_body(request, limits.max_body_bytes)
        encoding = request.headers.get("content-encoding", "")
        parsed = await run_in_threadpool(_load_request, raw, encoding, limits)
        req = parsed.req
        if len(req.questions) > limits.max_questions:
            raise ApiError(
                422,
                f"at most {limits.max_questions} questions per request, got {len(req.questions)}",
                "too_many_questions",
                ["body", "questions"],
            )
        if req.model not in names:
            raise ApiError(
                404,
                f"model {req.model[:80]!r} not found; available: {names}",
                "model_not_found",
                ["body", "model"],
            )
        ext = req.rlcd
        opts, budget = options, deadline_s
        if ext is not None:
            overrides = ext.model_dump(exclude={"rationales", "deadline_s"})
            opts = with_options(options, {**overrides, "details": ext.rationales})
            budget = ext.deadline_s or budget
        if budget is not None:
            opts = replace(opts, deadline=arrived + budget)
        fixed = {n: q for n, q in parsed.questions.items() if _single_option(q) is not None}
        asked = {n: q for n, q in parsed.questions.items() if n not in fixed}
        _check_cost(parsed, asked, opts, opts.max_new_tokens or decider.default_new_tokens)
        result = Decision({}, {"input_tokens": 0, "output_tokens": 0}, {})
        if asked:
            try:
                result = await _answer_unless_gone(
                    request, batcher.submit((req.state, asked, opts))
                )
            except Overloaded:
                raise ApiError(
                    503, "the server is busy; retry shortly", "overloaded", [], {"Retry-After": "1"}
                ) from None
            if isinstance(result, DecisionError):
                raise ApiError(422, result.msg, "unrepresentable", ["body", *result.loc])
            if isinstance(result, Exception):
                rid = request.scope.get(_REQUEST_ID_KEY)
                log.error("the model failed on request %s", rid, exc_info=result)
                raise ApiError(500, "internal error", "internal_error")
        for n, q in fixed.items():
            result.answers[n] = _single_option(q).answer([1.0])
            result.details[n] = {"mode": "single_option", "confidence": 1.0, "tokens": []}
        order = list(parsed.questions)
        result.answers = {n: result.answers[n] for n in order}
        result.details = {n: result.details[n] for n in order if n in result.details}
        shown = opts if ext is not None else None
        return JSONResponse(_response(name, result, shown, decider, budget))

    def _check_cost(parsed: _Parsed, asked: dict, opts: DecideOptions, new_tokens: int) -> None:
        """Character limits and the per-request cost budget, before any tokenising."""
        if parsed.state_chars > limits.max_state_chars:
            raise ApiError(
                422,
                f"the state has {parsed.state_chars} characters; at most {limits.max_state_chars}",
                "too_long",
                ["body", "state"],
            )
        for n, chars in parsed.question_chars.items():
            if chars > limits.max_question_chars:
                raise ApiError(
                    422,
                    f"question {n[:60]!r} has {chars} characters (as JSON); "
                    f"at most {limits.max_question_chars}",
                    "too_long",
                    ["body", "questions", n],
                )
        prompt = len(asked) * parsed.state_chars + sum(parsed.question_chars[n] for n in asked)
        if prompt > limits.max_prompt_chars:
            raise ApiError(
                422,
                f"the prompts of this request would hold about {prompt} characters "
                f"(questions x state + questions); at most {limits.max_prompt_chars}: "
                "send fewer questions per request or a shorter state",
                "budget_exceeded",
                ["body"],
            )
        sampled = opts.m * new_tokens * len(asked) if opts.mode != "direct" else 0
        if sampled > limits.max_sampled_tokens:
            raise ApiError(
                422,
                f"this request may sample m x max_new_tokens x questions = {opts.m} x "
                f"{new_tokens} x {len(asked)} = {sampled} rationale tokens; at most "
                f"{limits.max_sampled_tokens}: lower rlcd.m or rlcd.max_new_tokens, or send "
                "fewer questions",
                "budget_exceeded",
                ["body", "rlcd"],
            )

    return app


def _response(
    name: str,
    result: Decision,
    opts: DecideOptions | None,
    decider: DecisionModel,
    deadline_s: float | None = None,
) -> dict:
    """The wire response; the ``rlcd`` extension only when the request asked (``opts``),
    with the request's deadline as seconds from its arrival (``deadline_s``)."""
    out = {"model": name, "answers": result.answers, "usage": result.usage}
    if opts is not None:
        shown = {k: v for k, v in asdict(opts).items() if k not in ("details", "deadline")}
        shown["max_new_tokens"] = opts.max_new_tokens or decider.default_new_tokens
        shown["deadline_s"] = deadline_s
        out["rlcd"] = {
            "options": shown,
            "temperature": decider.temperature,
            "prompt_format": decider.prompt_format,
            "answers": result.details,
        }
    return out


# --------------------------------------------------------------------------- serving
MAX_HEADER_BYTES = 16_384
"""Default bound on a request's head (request line and header fields): beyond it, 431."""
MAX_CONNECTIONS = 512
"""Default bound on open connections in all (idle ones are closed first to make room)."""
MAX_CLIENT_CONNECTIONS = 64
"""Default bound on the open connections of one client address."""


class _CappedH11(h11.Connection):
    """h11's server side that refuses a request head over ``max_header_bytes`` (also when
    it arrives in one piece, which h11's incomplete-event bound alone does not catch);
    ``refused`` keeps the status h11 suggests for the last protocol error (431: too big)."""

    def __init__(self, max_header_bytes: int) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=max_header_bytes)
        self.max_header_bytes = max_header_bytes
        self.refused = 400

    def next_event(self) -> Any:
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as err:
            self.refused = err.error_status_hint
            raise
        if isinstance(event, h11.Request):
            head = len(event.method) + len(event.target) + 12
            head += sum(len(name) + len(value) + 4 for name, value in event.headers)
            if head > self.max_header_bytes:
                self.refused = 431
                raise h11.RemoteProtocolError("request header fields too large", 431)
        return event


class TimedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a read timeout, bounded request heads and a bounded
    number of connections, none of which lets idle sockets shut others out.

    * A whole request (headers and body) must arrive within ``timeout_request`` seconds of
      the connection opening or of the previous response, else the connection is closed
      (slow-header and slow-body clients, connections that never send a request).
      uvicorn's own ``timeout_keep_alive`` still closes idle keep-alive connections earlier.
    * A request head (request line and header fields) over ``max_header_bytes`` is
      answered 431 and the connection closed.
    * At most ``max_client_connections`` open connections per client address and
      ``max_connections`` in all (None: no bound). A connection beyond either bound makes
      room by closing the longest-idle connection concerned (idle: no request in
      progress); when none is idle it is answered 503 with ``Retry-After`` and closed.
      Idle connections never hold a work slot (:class:`Capacity` counts requests only).
    """

    def __init__(
        self,
        *args: Any,
        timeout_request: float,
        max_header_bytes: int = MAX_HEADER_BYTES,
        max_connections: int | None = MAX_CONNECTIONS,
        max_client_connections: int | None = MAX_CLIENT_CONNECTIONS,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.conn = _CappedH11(max_header_bytes)
        self.timeout_request = timeout_request
        self.max_connections = max_connections
        self.max_client_connections = max_client_connections
        self._read_timer: asyncio.TimerHandle | None = None
        self._idle_since = 0.0

    def _arm(self) -> None:
        self._disarm()
        self._read_timer = self.loop.call_later(self.timeout_request, self._read_timed_out)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _read_timed_out(self) -> None:
        self._read_timer = None
        if not self.transport.is_closing():
            log.debug("closing a connection: no complete request in %ss", self.timeout_request)
            self.transport.close()

    def idle(self) -> bool:
        """No request in progress: nothing (or only part of a request head) received
        since the connection opened or since the last response was sent."""
        done = self.cycle is None or self.cycle.response_complete
        return done and self.conn.their_state is h11.IDLE and not self.transport.is_closing()

    def _make_room(self) -> bool:
        """Apply the connection bounds to this new connection; False when it was refused."""
        others = [c for c in self.connections if c is not self]
        host = self.client[0] if self.client else None
        bounds = []
        if self.max_client_connections is not None and host is not None:
            mine = [c for c in others if c.client and c.client[0] == host]
            bounds.append((mine, self.max_client_connections))
        if self.max_connections is not None:
            bounds.append((others, self.max_connections))
        for group, bound in bounds:
            group = [c for c in group if not c.transport.is_closing()]
            if len(group) < bound:
                continue
            idle = [c for c in group if isinstance(c, TimedH11Protocol) and c.idle()]
            if not idle:
                self._refuse()
                return False
            oldest = min(idle, key=lambda c: c._idle_since)
            log.debug("closing an idle connection from %s to make room", oldest.client)
            oldest.transport.close()
        return True

    def _refuse(self) -> None:
        """Answer 503 (too many connections) before any request and close."""
        log.debug("refusing a connection from %s: too many connections", self.client)
        msg = "too many open connections; retry shortly"
        body = json.dumps({"detail": [_error_entry([], msg, "overloaded")]}).encode()
        head = (
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nretry-after: 1\r\nconnection: close\r\n"
            f"{REQUEST_ID_HEADER}: {uuid.uuid4().hex}\r\n\r\n"
        )
        self.transport.write(head.encode("ascii") + body)
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._idle_since = self.loop.time()
        if self._make_room():
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):  # the request is in
            self._disarm()

    def send_400_response(self, msg: str) -> None:
        """An h11 protocol error (a malformed request, a head too large): 400 or 431,
        JSON in the server's error shape with a request id, then close."""
        status, loc, kind = 400, [], "bad_request"
        if self.conn.refused == 431:
            status, loc, kind = 431, ["header"], "header_too_large"
            msg = f"the request head exceeds {self.conn.max_header_bytes} bytes"
        body = json.dumps({"detail": [_error_entry(loc, msg, kind)]}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"connection", b"close"),
            (REQUEST_ID_HEADER.encode(), uuid.uuid4().hex.encode()),
        ]
        try:
            self.transport.write(self.conn.send(h11.Response(status_code=status, headers=headers)))
            self.transport.write(self.conn.send(h11.Data(data=body)))
            self.transport.write(self.conn.send(h11.EndOfMessage()))
        except h11.LocalProtocolError:  # nothing more can be sent on this connection
            pass
        self.transport.close()

    def on_response_complete(self) -> None:
        self._idle_since = self.loop.time()
        self._arm()  # before the base class handles a pipelined request (which disarms)
        super().on_response_complete()


class _Server(uvicorn.Server):
    """uvicorn's server on a socket bound in advance (:func:`build_server`), which tells
    the app's :class:`Capacity` when a shutdown starts (``draining``)."""

    def __init__(
        self, config: uvicorn.Config, sock: socket.socket, capacity: Capacity | None
    ) -> None:
        super().__init__(config)
        self.sock, self.capacity = sock, capacity

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        await super().serve(sockets=sockets or [self.sock])

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.capacity is not None:
            self.capacity.draining = True
        await super().shutdown(sockets)


def _bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not listening yet); ``OSError`` with one line
    naming the address when that fails (e.g. the port is in use)."""
    bare = host.strip("[]")
    sock = socket.socket(socket.AF_INET6 if ":" in bare else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bare, port))
    except OSError as err:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    sock.set_inheritable(True)
    return sock


def _is_loopback(host: str) -> bool:
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_pattern(host: str) -> str:
    """The Host header form of a bind address (IPv6 in brackets)."""
    try:
        ipv6 = ipaddress.ip_address(host.strip("[]")).version == 6
    except ValueError:
        return host
    return f"[{host.strip('[]')}]" if ipv6 else host


def _check_server_args(
    port: int,
    timeout_keep_alive: float,
    timeout_request: float,
    timeout_graceful_shutdown: float,
    max_header_bytes: int,
    max_connections: int | None,
    max_client_connections: int | None,
) -> None:
    """``ValueError`` (one line) for a transport setting out of range: :func:`serve` checks
    them before loading the checkpoint, :func:`build_server` for any other caller."""
    _check_number("port", port, 0, 65535, integer=True)
    for name, value in [
        ("timeout_keep_alive", timeout_keep_alive),
        ("timeout_request", timeout_request),
        ("timeout_graceful_shutdown", timeout_graceful_shutdown),
    ]:
        _check_number(name, value, 0, 3600, open_lo=True)
    _check_number("max_header_bytes", max_header_bytes, 1024, 1 << 20, integer=True)
    for name, bound in (
        ("max_connections", max_connections),
        ("max_client_connections", max_client_connections),
    ):
        if bound is not None:
            _check_number(name, bound, 1, 1_000_000, integer=True)


def build_server(
    app: FastAPI,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    timeout_keep_alive: float = 5.0,
    timeout_request: float = 15.0,
    timeout_graceful_shutdown: float = 10.0,
    max_header_bytes: int = MAX_HEADER_BYTES,
    max_connections: int | None = MAX_CONNECTIONS,
    max_client_connections: int | None = MAX_CLIENT_CONNECTIONS,
    freeze_gc: bool = True,
) -> uvicorn.Server:
    """A uvicorn server for ``app``, its socket bound to ``host:port`` now (``OSError``,
    one line, when that fails: a port in use), with connection timeouts, bounded request
    heads and connection bounds (:class:`TimedH11Protocol`, ``timeout_keep_alive``), and a
    bounded graceful shutdown: after ``SIGTERM``, requests still running after
    ``timeout_graceful_shutdown`` seconds are cancelled and answered 503 with
    ``Retry-After`` (:class:`_Gate`).

    ``freeze_gc``: ``gc.freeze()`` the objects alive now (the loaded model and libraries,
    some 400k objects), so that the garbage collector no longer scans them: otherwise a
    body of many small JSON nodes triggers collections that hold the interpreter lock for
    most of a second (measured: parsing 250k empty lists took 0.7 s, 0.04 s frozen)."""
    _check_server_args(
        port, timeout_keep_alive, timeout_request, timeout_graceful_shutdown,
        max_header_bytes, max_connections, max_client_connections,
    )  # fmt: skip
    protocol = functools.partial(
        TimedH11Protocol,
        timeout_request=timeout_request,
        max_header_bytes=max_header_bytes,
        max_connections=max_connections,
        max_client_connections=max_client_connections,
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=protocol,  # type: ignore[arg-type]
        timeout_keep_alive=timeout_keep_alive,  # type: ignore[arg-type]
        timeout_graceful_shutdown=timeout_graceful_shutdown,  # type: ignore[arg-type]
        h11_max_incomplete_event_size=max_header_bytes,
    )
    server = _Server(config, _bind(host, port), getattr(app.state, "capacity", None))
    if freeze_gc:
        gc.freeze()
    return server


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
    _check_server_args(
        port, timeout_keep_alive, timeout_request, timeout_graceful_shutdown,
        max_header_bytes, max_connections, max_client_connections,
    )  # fmt: skip
    if threads is not None:
        _check_number("threads", threads, 1, 1024, integer=True)
    if api_key is None:
        api_key = os.environ.get(API_KEY_ENV, "").strip() or None
    if (
        api_key is not None
        and not (api_key.isascii() and api_key.isprintable())
        or " " in (api_key or "")
    ):
        raise ValueError("the API key must be printable ASCII without spaces")
    hosts = [*LOOPBACK_HOSTS, _host_pattern(host), *allowed_hosts]
    _configure_logging(log_level)
    if not _is_loopback(host) and not api_key:
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
    build_server(
        app,
        host=host,
        port=port,
        log_level=log_level,
        timeout_keep_alive=timeout_keep_alive,
        timeout_request=timeout_request,
        timeout_graceful_shutdown=timeout_graceful_shutdown,
        max_header_bytes=max_header_bytes,
        max_connections=max_connections,
        max_client_connections=max_client_connections,
    ).run()


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
