"""The ASGI app: routes, error handlers and the request pipeline of ``POST /v1/systemone``.

:func:`create_app` checks its arguments, loads the checkpoint and wires three routes to a
:class:`_Service`: read the body with bounds, validate it once with the Jev schema, check
the character limits and the cost budget, queue what needs the model in the
:class:`DynamicBatcher` (single-option questions need none), write the response.
What guards the door (limits, error shape, key, request ids, capacity) is :mod:`.hardening`'s.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, replace
from datetime import date, datetime
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware

from rlcd_lab.decide import DecisionModel, answering
from rlcd_lab.decide.answering import DecideOptions, Decision, with_options
from rlcd_lab.decide.jev import (
    MAX_LABEL_CHARS,
    DecisionError,
    Question,
    RlcdOptions,
    SystemOneRequest,
    state_text,
)
from rlcd_lab.files.assets import default_checkpoint as pick_default
from rlcd_lab.files.assets import shipped_checkpoints
from rlcd_lab.server.batching import DynamicBatcher, answer_unless_gone
from rlcd_lab.server.hardening import (
    REQUEST_ID_KEY,
    ApiError,
    Capacity,
    ClientGone,
    Gate,
    GuardedRoute,
    ServerLimits,
    authorize,
    check_hosts,
    check_number,
    decompress,
    error_entry,
    error_response,
    parse_json,
    read_body,
    validation_detail,
)
from rlcd_lab.server.options import ServeOptions

log = logging.getLogger(__package__)


def default_checkpoint() -> Path:
    """The shipped checkpoint the server answers with when none is given: the one the
    dashboard opens with (``rlcd_lab.files.assets.default_checkpoint``: the tiny ``verify``
    two-stage RLCD model)."""
    found = shipped_checkpoints()
    if not found:
        raise FileNotFoundError("no shipped checkpoints under assets/; pass --checkpoint")
    return found[pick_default(list(found))]


# --------------------------------------------------------------------------- a request
@dataclass
class _Parsed:
    """A validated request, its typed questions and the character counts the cost checks
    need (a question is measured as its JSON with every field)."""

    req: SystemOneRequest
    questions: dict[str, Question]
    state_chars: int
    question_chars: dict[str, int]


def load_request(raw: bytes, encoding: str, limits: ServerLimits) -> _Parsed:
    """Decompress, parse, validate (once, with the Jev schema) and measure a body (CPU
    work: run it off the event loop)."""
    body = parse_json(decompress(raw, encoding, limits.max_body_bytes), limits)
    try:
        req = SystemOneRequest.model_validate(body)
        text = state_text(req.state)
    except ValidationError as err:
        raise ApiError(422, "", "", detail=validation_detail(err)) from None
    except DecisionError as err:  # an empty state
        raise ApiError(422, err.msg, "missing", ["body", *err.loc]) from None
    chars = {
        n: len(json.dumps(q.model_dump(), ensure_ascii=False)) for n, q in req.questions.items()
    }
    return _Parsed(req, req.typed_questions(), len(text), chars)


def check_cost(
    parsed: _Parsed,
    asked: Sequence[str],
    opts: DecideOptions,
    new_tokens: int,
    limits: ServerLimits,
) -> None:
    """Character limits and the per-request cost budget of the ``asked`` questions (those
    the model answers), before any tokenising."""
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


# --------------------------------------------------------------------------- the response
def response_body(
    name: str,
    result: Decision,
    opts: DecideOptions | None,
    decider: DecisionModel,
    deadline_s: float | None = None,
) -> dict:
    """The wire response for ``result``; the ``rlcd`` extension only when the request asked
    (``opts``: its options), with the request's deadline as seconds from its arrival."""
    out = {"model": name, "answers": result.answers, "usage": result.usage}
    if opts is not None:
        shown = {k: v for k, v in asdict(opts).items() if k not in ("details", "deadline")}
        shown["max_new_tokens"] = opts.max_new_tokens or decider.default_new_tokens
        shown["deadline_s"] = deadline_s
        out["rlcd"] = {
            "options": shown,
            "T": decider.T,  # the fitted calibration temperature
            "prompt_format": decider.prompt_format,
            "answers": result.details,
        }
    return out


# --------------------------------------------------------------------------- the routes
@dataclass
class _Service:
    """What the routes need: the model and its names, the answering defaults, the limits
    and the key."""

    decider: DecisionModel
    batcher: DynamicBatcher
    name: str
    names: list[str]
    models: list[dict]
    options: DecideOptions
    limits: ServerLimits
    deadline_s: float | None
    api_key: str | None

    async def health(self) -> dict:
        b = self.batcher
        return {"status": "ok", "model": self.name, "batches": b.batches, "jobs": b.jobs}

    async def list_models(self, request: Request) -> dict:
        authorize(request, self.api_key)
        return {"models": self.models}

    async def system_one(self, request: Request) -> JSONResponse:
        arrived = answering.clock()
        authorize(request, self.api_key)
        raw = await read_body(request, self.limits.max_body_bytes)
        encoding = request.headers.get("content-encoding", "")
        parsed = await run_in_threadpool(load_request, raw, encoding, self.limits)
        self._check_request(parsed.req)
        opts, budget = self._request_options(parsed.req.rlcd, arrived)
        fixed = {n: q for n, q in parsed.questions.items() if q.single_option}
        asked = {n: q for n, q in parsed.questions.items() if n not in fixed}
        new_tokens = opts.max_new_tokens or self.decider.default_new_tokens
        check_cost(parsed, list(asked), opts, new_tokens, self.limits)
        result = Decision({}, {"input_tokens": 0, "output_tokens": 0}, {})
        if asked:  # queued before awaiting, so that a full queue is a 503 at once
            units = parsed.state_chars + sum(parsed.question_chars[n] for n in asked)
            queued = self.batcher.put((parsed.req.state, asked, opts), units)  # or a 503
            result = await self._decide(request, queued)
        for n, q in fixed.items():
            result.answers[n] = q.answer([1.0])
            result.details[n] = {"mode": "single_option", "confidence": 1.0, "tokens": []}
        order = list(parsed.questions)
        result.answers = {n: result.answers[n] for n in order}
        result.details = {n: result.details[n] for n in order if n in result.details}
        shown = opts if parsed.req.rlcd is not None else None
        return JSONResponse(response_body(self.name, result, shown, self.decider, budget))

    def _check_request(self, req: SystemOneRequest) -> None:
        if len(req.questions) > self.limits.max_questions:
            raise ApiError(
                422,
                f"at most {self.limits.max_questions} questions per request, "
                f"got {len(req.questions)}",
                "too_many_questions",
                ["body", "questions"],
            )
        if req.model not in self.names:
            raise ApiError(
                404,
                f"model {req.model[:80]!r} not found; available: {self.names}",
                "model_not_found",
                ["body", "model"],
            )

    def _request_options(
        self, ext: RlcdOptions | None, arrived: float
    ) -> tuple[DecideOptions, float | None]:
        """The server's defaults with the request's ``rlcd`` overrides, and its deadline
        (seconds from ``arrived``; None: none)."""
        opts, budget = self.options, self.deadline_s
        if ext is not None:
            opts = with_options(opts, ext.overrides())
            budget = ext.deadline_s or budget
        if budget is not None:
            opts = replace(opts, deadline=arrived + budget)
        return opts, budget

    async def _decide(self, request: Request, queued: asyncio.Future) -> Decision:
        """The model's answers through the batcher; its refusals as 422, failures as 500
        (the batcher's own refusals, :class:`Late`, are 503s)."""
        result = await answer_unless_gone(request, queued)
        if isinstance(result, DecisionError):
            raise ApiError(422, result.msg, "unrepresentable", ["body", *result.loc])
        if isinstance(result, Exception):
            rid = request.scope.get(REQUEST_ID_KEY)
            log.error("the model failed on request %s", rid, exc_info=result)
            raise ApiError(500, "internal error", "internal_error")
        return result


def _add_error_handlers(app: FastAPI) -> None:
    """Every error as ``{"detail": [{"loc", "msg", "type"}]}``; a client that left gets
    one log line and an unread 499."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, err: ApiError) -> JSONResponse:
        return error_response(err.status, err.detail, err.headers)

    @app.exception_handler(ClientGone)
    async def _client_gone(request: Request, err: ClientGone) -> Response:
        log.info(
            "%s %s abandoned: the client went away %s (request %s)",
            request.method,
            request.url.path,
            err,
            request.scope.get(REQUEST_ID_KEY),
        )
        return Response(status_code=499)  # nobody reads it (nginx's "client closed request")

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, err: StarletteHTTPException) -> JSONResponse:
        entry = error_entry([], str(err.detail), "http_error")
        return error_response(err.status_code, [entry], getattr(err, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _request_error(_: Request, err: RequestValidationError) -> JSONResponse:
        detail = [error_entry(e["loc"], e["msg"], e["type"]) for e in err.errors()[:20]]
        return error_response(422, detail)

    @app.exception_handler(Exception)
    async def _internal(_: Request, err: Exception) -> JSONResponse:  # outside the routes
        log.exception("internal error", exc_info=err)
        return error_response(500, [error_entry([], "internal error", "internal_error")])


# --------------------------------------------------------------------------- the model
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


def _release_date(path: Path | None) -> str:
    meta = path / "rlcd.json" if path is not None else None
    if meta is not None and meta.exists():
        return datetime.fromtimestamp(meta.stat().st_mtime).date().isoformat()
    return date.today().isoformat()


def _model_list(
    decider: DecisionModel, name: str, names: list[str], mode: str, path: Path | None
) -> list[dict]:
    """``GET /v1/models``'s entries: the checkpoint's name, then its aliases."""
    meta = decider.meta
    info = (
        f"rlcd_lab checkpoint (task {meta.get('task')}, method {meta.get('method')}, "
        f"{'fitted' if decider.T_fitted else 'unfitted'} T "
        f"{decider.T:.3g}, prompt format {decider.prompt_format}, "
        f"default mode {mode})"
    )
    released = _release_date(path)
    return [
        {
            "name": n,
            "description": info if n == name else f"alias of {name}: {info}",
            "release_date": released,
        }
        for n in names
    ]


def _isolating(decider: DecisionModel) -> Callable[[list, Callable[[int], bool]], list]:
    """The batcher's function: one shared ``decide_batch``; if it fails, each job alone,
    so that a request which breaks the model code fails by itself, not with its batch."""

    def answer(jobs: list, cancelled: Callable[[int], bool]) -> list:
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

    return answer


def _check_args(
    limits: ServerLimits,
    options: DecideOptions | None,
    deadline_s: float | None,
    max_batch: int,
    max_wait_ms: float,
    limit_concurrency: int | None,
) -> None:
    """``ValueError`` (one line) for an app setting out of range."""
    limits.validate()
    if options is not None:
        options.validate()
    if deadline_s is not None:
        check_number("deadline_s", deadline_s, 0, 3600, open_lo=True)
    check_number("max_batch", max_batch, 1, 4096, integer=True)
    check_number("max_wait_ms", max_wait_ms, 0, 1000)
    if limit_concurrency is not None:
        check_number("limit_concurrency", limit_concurrency, 1, 1_000_000, integer=True)


def _check_names(names: Sequence[Any]) -> None:
    """``ValueError`` unless every model name is a printable string of wire length."""
    for n in names:
        if not isinstance(n, str) or not 1 <= len(n) <= MAX_LABEL_CHARS or not n.isprintable():
            raise ValueError(f"model names must be 1..{MAX_LABEL_CHARS} printable characters")


# --------------------------------------------------------------------------- the app
def create_app(
    decider: DecisionModel | str | Path | None = None,
    opts: ServeOptions | None = None,
    *,
    limits: ServerLimits | None = None,
    max_batch: int = 32,
    allowed_hosts: Sequence[str] | None = None,
    unfitted_auto: bool = False,
) -> FastAPI:
    """The ASGI app serving one checkpoint as ``opts`` says (None: the defaults of
    :class:`ServeOptions`).

    ``decider``: a loaded :class:`DecisionModel`, or a checkpoint directory (None:
    ``opts.checkpoint``, else ``default_checkpoint()``) loaded on ``opts.device``, its
    checksums checked unless not ``opts.verify``. Its names: ``opts.name`` (None:
    ``rlcd-<task>-<method>`` from its ``rlcd.json``) and ``opts.alias``. ``opts.api_key``:
    None or empty serves without a key (:func:`~.serving.serve` reads ``RLCD_API_KEY``).
    The answers' defaults are ``opts.mode``, ``opts.m`` and ``opts.threshold``; a request's
    ``rlcd`` object overrides them. For a checkpoint whose T was not fitted
    (``decide.temperature_fitted``) a default mode ``auto`` becomes ``direct`` (its
    confidence cannot say when reasoning is worth the time) unless ``unfitted_auto``; a
    request may still ask for it. ``opts.deadline``: seconds from a request's arrival after
    which no more rationales are drawn for it and its answer is the best so far (None: no
    deadline; a request's ``rlcd.deadline_s`` overrides it). ``opts.batching``,
    ``max_batch``, ``opts.max_wait_ms`` (0..1000): dynamic batching (see :mod:`.batching`).
    ``opts.limit_concurrency``: at most this many requests in flight (open connections do
    not count), beyond it 503 with ``Retry-After``. ``allowed_hosts``: Host header
    patterns (Starlette's ``TrustedHostMiddleware``); None accepts any (``serve`` passes
    the loopback names, ``opts.host`` and ``opts.allowed_host``). Arguments are checked
    (``ValueError``) before the checkpoint is loaded.
    """
    opts = opts or ServeOptions()
    limits = limits or ServerLimits()
    options = DecideOptions(mode=opts.mode, m=opts.m, threshold=opts.threshold)
    _check_args(limits, options, opts.deadline, max_batch, opts.max_wait_ms, opts.limit_concurrency)
    hosts = None if allowed_hosts is None else check_hosts(allowed_hosts)
    name, aliases = opts.name, opts.alias
    _check_names([name, *aliases] if name is not None else aliases)
    path = None
    if not isinstance(decider, DecisionModel):
        _check_device(opts.device)
        checkpoint = decider if decider is not None else opts.checkpoint
        path = Path(checkpoint) if checkpoint is not None else default_checkpoint()
        decider = DecisionModel.from_checkpoint(path, device=opts.device, verify=opts.verify)
    decider.max_state_tokens = min(decider.max_state_tokens, limits.max_state_tokens)
    if options.mode == "auto" and not (decider.T_fitted or unfitted_auto):
        options = replace(options, mode="direct")
    if name is None:
        task = Path(str(decider.meta.get("task") or "model")).name.removesuffix(".jsonl")
        name = f"rlcd-{task}-{decider.meta.get('method') or 'checkpoint'}"
    names = list(dict.fromkeys([name, *aliases]))
    batcher = DynamicBatcher(
        _isolating(decider),
        enabled=opts.batching,
        max_batch=max_batch,
        max_wait_ms=opts.max_wait_ms,
        max_pending=limits.max_pending,
        deadline=lambda job: job[2].deadline,
        clock=lambda: answering.clock(),  # the deadlines' clock (a test may replace it)
    )
    models = _model_list(decider, name, names, options.mode, path)
    service = _Service(
        decider, batcher, name, names, models, options, limits, opts.deadline, opts.api_key
    )
    return _build(service, Capacity(opts.limit_concurrency), hosts)


def _build(service: _Service, capacity: Capacity, hosts: list[str] | None) -> FastAPI:
    """The FastAPI app around ``service``: middleware, error handlers, routes, state."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await service.batcher.aclose()

    app = FastAPI(
        title="rlcd_lab decision server",
        description="Jev-compatible typed decisions (POST /v1/systemone).",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.router.route_class = GuardedRoute
    if hosts is not None:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=hosts, www_redirect=False)
    app.add_middleware(Gate, capacity=capacity)  # outermost: its id is on every answer
    app.state.decider, app.state.batcher = service.decider, service.batcher
    app.state.names, app.state.capacity = service.names, capacity
    _add_error_handlers(app)
    app.get("/health")(service.health)
    app.get("/v1/models")(service.list_models)
    app.post("/v1/systemone")(service.system_one)
    return app
