"""The Jev-compatible decision server: an rlcd_lab checkpoint behind the typed-decision API.

``rlcd-lab serve --checkpoint DIR --port 8000`` (or ``create_app(...)`` with any ASGI
server) answers the Jev wire contract (README, "Decision server") so that the official client
(PyPI ``typesafe-sdk``) works unchanged against a model trained here:

* ``POST /v1/systemone``: ``{"model", "state", "questions"}`` -> ``{"model", "answers",
  "usage"}`` (``rlcd_lab.decide`` computes the answers);
* ``GET /v1/models``: ``{"models": [{"name", "description", "release_date"}]}``, the
  checkpoint's name and its aliases (default ``jev-latest``, the client's default model);
* ``GET /health``: ``{"status": "ok", "model", "batches", "jobs"}`` (no key needed;
  ``jobs / batches`` is the mean dynamic batch size so far).

Errors are JSON ``{"detail": [{"loc": [...], "msg": ..., "type": ...}]}``: 422 for a body
that is not valid (bad JSON, NaN, duplicate keys, too deep, fields outside the schema,
wrong types, a question the checkpoint cannot represent), 404 for an unknown model, 401
for a missing or wrong bearer key, 413 for a body over the size limit, 415 for an
unsupported content type or encoding, 503 when the queue is full, 500 when the model code
fails on a request (the rest of its batch is still answered).

Security: the server binds 127.0.0.1 unless told otherwise; with an API key every
``/v1`` call needs ``Authorization: Bearer <key>`` (compared in constant time). The state
is untrusted input: it is only rendered into the prompt, never parsed for fields or
options; every object in the body is closed (``extra="forbid"``), so fields outside the
schema are rejected, never passed on.

Extensions are opt-in: a request may carry ``"rlcd": {"mode", "m", "threshold",
"aggregate", "max_new_tokens", "seed", "rationales"}``; only then does the response carry
an ``"rlcd"`` object (the mode and temperature used and, per question, the mode that
answered it, the escalation flag and direct confidence in ``auto`` mode, the option tokens
read and, with ``"rationales": true``, the rationales and their per-rationale readouts).

Dynamic batching: concurrent requests wait in an asyncio queue for up to ``max_wait_ms``;
what has arrived by then (at most ``max_batch`` requests) is answered in one
``DecisionModel.decide_batch`` call, in a single worker thread, so forward passes are
shared instead of run one request at a time. Direct answers do not depend on the batch;
sampled rationales (``reason``, escalated ``auto``) are seeded per batch, so they do.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import re
import zlib
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, suppress
from dataclasses import asdict, dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
)
from starlette.exceptions import HTTPException as StarletteHTTPException

from .assets import default_checkpoint as pick_default
from .assets import shipped_checkpoints
from .decide import (
    MAX_CHOICE_OPTIONS,
    MAX_LABEL_CHARS,
    MAX_SCORE_LEVELS,
    MIN_OPTIONS,
    DecideOptions,
    Decision,
    DecisionError,
    DecisionModel,
    with_options,
)

log = logging.getLogger(__name__)
DEFAULT_ALIASES = ("jev-latest",)
API_KEY_ENV = "RLCD_API_KEY"
_SURROGATE = re.compile("[\ud800-\udfff]")


# --------------------------------------------------------------------------- limits
@dataclass(frozen=True)
class ServerLimits:
    """Request limits. ``max_body_bytes`` applies to the body as received and after
    decompression; ``max_state_tokens`` to the rendered state; ``max_depth`` to nesting
    of JSON objects and arrays anywhere in the body. Choice options (2..255) and score
    levels (2..10) are fixed by the wire contract (``rlcd_lab.decide``)."""

    max_body_bytes: int = 1 << 20
    max_questions: int = 32
    max_state_tokens: int = 4096
    max_depth: int = 32
    max_pending: int = 256


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
    criteria: dict[Label, Content | None] = Field(
        min_length=MIN_OPTIONS, max_length=MAX_CHOICE_OPTIONS
    )


class ScoreQuestion(_Closed):
    type: Literal["score"]
    instructions: Content | None = None
    criteria: list[Content] = Field(min_length=MIN_OPTIONS, max_length=MAX_SCORE_LEVELS)


WireQuestion = Annotated[NoulQuestion | ChoiceQuestion | ScoreQuestion, Field(discriminator="type")]


class RlcdOptions(_Closed):
    """Opt-in extensions; fields left out keep the server's defaults."""

    mode: Literal["direct", "reason", "auto"] | None = None
    m: int | None = Field(None, ge=1, le=16)
    threshold: float | None = Field(None, ge=0.0, le=1.0, allow_inf_nan=False)
    aggregate: Literal["mixture", "single"] | None = None
    max_new_tokens: int | None = Field(None, ge=1, le=1024)
    seed: int | None = Field(None, ge=0, le=2**31 - 1)
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


# --------------------------------------------------------------------------- errors
class ApiError(Exception):
    """An error response in the one shape the server uses:
    ``{"detail": [{"loc", "msg", "type"}]}`` with an HTTP status."""

    def __init__(
        self,
        status: int,
        msg: str,
        kind: str,
        loc: Sequence[str | int] = (),
        headers: dict[str, str] | None = None,
    ):
        super().__init__(msg)
        self.status, self.headers = status, headers
        self.detail = [_error_entry(loc, msg, kind)]


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
def _decompress(data: bytes, encoding: str, limit: int) -> bytes:
    """Undo ``Content-Encoding`` (identity, gzip, zstd when available), at most ``limit``
    bytes out (a compressed bomb stops there)."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return data
    if encoding == "gzip":
        d = zlib.decompressobj(wbits=31)
        try:
            out = d.decompress(data, limit + 1)
        except zlib.error as err:
            raise ApiError(
                422, f"invalid gzip body: {err}", "decompression_error", ["body"]
            ) from None
        if len(out) <= limit and not d.eof:
            raise ApiError(422, "truncated gzip body", "decompression_error", ["body"])
    elif encoding == "zstd":
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
        d = zstd.ZstdDecompressor()
        try:
            out = d.decompress(data, max_length=limit + 1)
        except zstd.ZstdError as err:
            raise ApiError(
                422, f"invalid zstd body: {err}", "decompression_error", ["body"]
            ) from None
        if len(out) <= limit and not d.eof:
            raise ApiError(422, "truncated zstd body", "decompression_error", ["body"])
    else:
        raise ApiError(
            415,
            f"unsupported content encoding {encoding[:40]!r}; use identity, gzip or zstd",
            "unsupported_encoding",
            ["header", "content-encoding"],
        )
    if len(out) > limit:
        raise ApiError(413, f"the body exceeds {limit} bytes", "body_too_large", ["body"])
    return out


async def _read_body(request: Request, limit: int) -> bytes:
    """The raw body, refused (413) as soon as it exceeds ``limit`` bytes."""
    ctype = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if ctype.startswith("multipart/"):
        raise ApiError(
            415,
            "multipart requests carry image assets, which this text model does not support",
            "unsupported_media_type",
            ["header", "content-type"],
        )
    if ctype not in ("application/json", ""):
        raise ApiError(
            415, "send the body as application/json", "unsupported_media_type", ["header"]
        )
    too_large = ApiError(413, f"the body exceeds {limit} bytes", "body_too_large", ["body"])
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    raw = b"".join(chunks)
    return _decompress(raw, request.headers.get("content-encoding", ""), limit)


def _parse_json(raw: bytes, max_depth: int) -> Any:
    """Strict JSON: UTF-8, no NaN/Infinity, no duplicate keys in an object, no lone
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

    if not raw.strip():
        raise ApiError(422, "the body is empty; send a JSON object", "missing", ["body"])
    try:
        text = raw.decode("utf-8")
        obj = json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except UnicodeDecodeError:
        raise bad("the body is not valid UTF-8") from None
    except json.JSONDecodeError as err:
        raise bad(f"invalid JSON: {err.msg} at position {err.pos}") from None
    except RecursionError:
        raise bad(f"JSON nested deeper than {max_depth} levels") from None
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > max_depth:
                raise bad(f"JSON nested deeper than {max_depth} levels")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, child in items:
                if isinstance(key, str) and _SURROGATE.search(key):
                    raise bad("the body contains invalid unicode (a lone surrogate)")
                stack.append((child, depth + 1))
        elif isinstance(value, str) and _SURROGATE.search(value):
            raise bad("the body contains invalid unicode (a lone surrogate)")
    return obj


# --------------------------------------------------------------------------- batching
class Overloaded(Exception):
    """The batcher's queue is full."""


class DynamicBatcher:
    """Collects submitted jobs for up to ``max_wait_ms`` (at most ``max_batch``), then runs
    ``fn(jobs) -> results`` once for all of them in a single worker thread.

    ``enabled=False`` runs every job on its own (one ``fn([job])`` call each, in arrival
    order): the unbatched baseline. ``submit`` raises :class:`Overloaded` when
    ``max_pending`` jobs are already waiting. Each running event loop gets its own queue
    and collecting task (created on first use); all of them share the one worker thread,
    so the model is never called concurrently.
    """

    def __init__(
        self,
        fn: Callable[[list[Any]], list[Any]],
        *,
        enabled: bool = True,
        max_batch: int = 32,
        max_wait_ms: float = 5.0,
        max_pending: int = 256,
    ):
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
        return await future

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
            try:
                results = await loop.run_in_executor(
                    self._executor, self.fn, [job for job, _ in batch]
                )
            except Exception as err:  # a bug in the model code: every caller gets a 500
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(err)
                continue
            for (_, fut), result in zip(batch, results, strict=True):
                if not fut.done():
                    fut.set_result(result)

    async def aclose(self) -> None:
        """Stop the running loop's collecting task (the worker thread stays for others)."""
        worker = self._workers.pop(asyncio.get_running_loop(), None)
        if worker is not None:
            worker[1].cancel()
            with suppress(asyncio.CancelledError):
                await worker[1]


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
) -> FastAPI:
    """The ASGI app serving one checkpoint under ``name`` and ``aliases``.

    ``decider``: a loaded :class:`DecisionModel`, a checkpoint directory, or None for
    ``default_checkpoint()``. ``name`` defaults to ``rlcd-<task>-<method>`` from its
    ``rlcd.json``. ``api_key``: None or empty serves without a key (the command line also
    reads ``RLCD_API_KEY``). ``options``: the answers' defaults (mode ``auto``: direct,
    reasoning only below the confidence threshold); a request's ``rlcd`` object overrides
    them. ``batching``, ``max_batch``, ``max_wait_ms``: dynamic batching (see the module
    docstring).
    """
    path = None
    if not isinstance(decider, DecisionModel):
        path = Path(decider) if decider is not None else default_checkpoint()
        decider = DecisionModel.from_checkpoint(path, device=device)
    limits = limits or ServerLimits()
    options = options or DecideOptions(mode="auto")
    options.validate()
    decider.max_state_tokens = min(decider.max_state_tokens, limits.max_state_tokens)
    meta = decider.meta
    if name is None:
        name = f"rlcd-{meta.get('task') or 'model'}-{meta.get('method') or 'checkpoint'}"
    names = list(dict.fromkeys([name, *aliases]))
    info = (
        f"rlcd_lab checkpoint (task {meta.get('task')}, method {meta.get('method')}, "
        f"fitted T {decider.temperature:.3g}, prompt format {decider.prompt_format}, "
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

    def answer(jobs: list) -> list:
        """One shared ``decide_batch``; if it fails, each job alone, so that a request
        which breaks the model code fails by itself, not with its batch."""
        try:
            return decider.decide_batch(jobs)
        except Exception:
            if len(jobs) == 1:
                raise
        out: list = []
        for job in jobs:
            try:
                out.extend(decider.decide_batch([job]))
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
    app.state.decider, app.state.batcher, app.state.names = decider, batcher, names

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

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, err: StarletteHTTPException) -> JSONResponse:
        entry = _error_entry([], str(err.detail), "http_error")
        return _error_response(err.status_code, [entry], getattr(err, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _request_error(_: Request, err: RequestValidationError) -> JSONResponse:
        detail = [_error_entry(e["loc"], e["msg"], e["type"]) for e in err.errors()[:20]]
        return _error_response(422, detail)

    @app.exception_handler(Exception)
    async def _internal(_: Request, err: Exception) -> JSONResponse:
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
        authorize(request)
        body = _parse_json(await _read_body(request, limits.max_body_bytes), limits.max_depth)
        try:
            req = SystemOneRequest.model_validate(body)
        except ValidationError as err:
            return _error_response(422, _validation_detail(err))
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
        opts = options
        if ext is not None:
            overrides = ext.model_dump(exclude={"rationales"})
            opts = with_options(options, {**overrides, "details": ext.rationales})
        questions = {n: q.model_dump() for n, q in req.questions.items()}
        try:
            result = await batcher.submit((req.state, questions, opts))
        except Overloaded:
            raise ApiError(
                503, "the server is busy; retry shortly", "overloaded", [], {"Retry-After": "1"}
            ) from None
        if isinstance(result, DecisionError):
            raise ApiError(422, result.msg, "unrepresentable", ["body", *result.loc])
        if isinstance(result, Exception):
            raise result
        return JSONResponse(_response(name, result, opts if ext is not None else None, decider))

    return app


def _response(
    name: str, result: Decision, opts: DecideOptions | None, decider: DecisionModel
) -> dict:
    """The wire response; the ``rlcd`` extension only when the request asked (``opts``)."""
    out = {"model": name, "answers": result.answers, "usage": result.usage}
    if opts is not None:
        shown = {k: v for k, v in asdict(opts).items() if k != "details"}
        shown["max_new_tokens"] = opts.max_new_tokens or decider.default_new_tokens
        out["rlcd"] = {
            "options": shown,
            "temperature": decider.temperature,
            "prompt_format": decider.prompt_format,
            "answers": result.details,
        }
    return out


def serve(
    checkpoint: str | Path | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    api_key: str | None = None,
    log_level: str = "info",
    **kwargs: Any,
) -> None:
    """Load ``checkpoint`` (default: ``default_checkpoint()``) and serve it with uvicorn.

    ``api_key`` None reads ``$RLCD_API_KEY`` (unset or empty: no key); other ``kwargs`` go
    to :func:`create_app`.
    """
    import uvicorn

    if api_key is None:
        api_key = os.environ.get(API_KEY_ENV, "").strip() or None
    app = create_app(checkpoint, api_key=api_key, **kwargs)
    uvicorn.run(app, host=host, port=port, log_level=log_level)
