"""What stands between the network and the model: limits (:class:`ServerLimits`), the one
error shape (:class:`ApiError`, :func:`error_entry`), bounded body reading and JSON
parsing (:func:`read_body`, :func:`decompress`, :func:`parse_json`), the bearer key
(:func:`authorize`), Host checks (:func:`check_hosts`), and :class:`Gate`, the outermost
ASGI layer (request ids, the capacity limit, shutdown); :class:`GuardedRoute` turns an
unexpected exception into a JSON 500 that keeps the connection usable.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import re
import uuid
import zlib
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, fields
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__package__)
REQUEST_ID_HEADER = "x-typesafe-request-id"
"""The response header the official client reads as ``response.request_id``."""
REQUEST_ID_KEY = "rlcd.request_id"  # where the request id travels in the ASGI scope
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


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


def check_number(
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
        self.detail = detail or [error_entry(loc, msg, kind)]


class ClientGone(Exception):
    """The client disconnected (or its connection timed out) before its answer was sent."""


def error_entry(loc: Sequence[Any], msg: str, kind: str) -> dict:
    """One error entry; user-controlled parts (dict keys in ``loc``, inputs quoted in
    ``msg``) are truncated so an error never echoes a huge input back."""
    loc = [x if isinstance(x, int) else str(x)[:100] for x in loc]
    return {"loc": loc, "msg": str(msg)[:500], "type": kind}


def error_response(status: int, detail: list[dict], headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def validation_detail(err: ValidationError, prefix: Sequence[str] = ("body",)) -> list[dict]:
    """A pydantic error as entries (at most 20, then one saying how many more)."""
    errors = err.errors(include_url=False, include_context=False, include_input=False)
    out = [error_entry([*prefix, *e["loc"]], e["msg"], e["type"]) for e in errors[:20]]
    if len(errors) > 20:
        out.append(error_entry(list(prefix), f"{len(errors) - 20} more errors", "too_many_errors"))
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


def decompress(data: bytes, encoding: str, limit: int) -> bytes:
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


async def read_body(request: Request, limit: int) -> bytes:
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


def _bad_json(msg: str) -> ApiError:
    return ApiError(422, msg, "json_invalid", ["body"])


def _json_hooks(max_int_digits: int) -> dict[str, Callable]:
    """``json.loads`` hooks that refuse duplicate keys, NaN/Infinity, integers of more
    than ``max_int_digits`` digits and numbers that overflow to infinity."""

    def pairs(items: list[tuple[str, Any]]) -> dict:
        obj: dict = {}
        for key, value in items:
            if key in obj:
                raise _bad_json(f"duplicate key {key[:60]!r} in a JSON object")
            obj[key] = value
        return obj

    def constant(name: str) -> Any:
        raise _bad_json(f"{name} is not valid JSON")

    def integer(text: str) -> int:
        digits = len(text) - text.startswith("-")
        if digits > max_int_digits:
            raise _bad_json(f"an integer with {digits} digits; at most {max_int_digits}")
        return int(text)

    def number(text: str) -> float:
        if len(text) > max_int_digits + 32:
            raise _bad_json(f"a number written with {len(text)} characters")
        value = float(text)
        if not math.isfinite(value):
            raise _bad_json(f"the number {text[:40]} is out of range (it overflows to infinity)")
        return value

    return {
        "object_pairs_hook": pairs,
        "parse_constant": constant,
        "parse_int": integer,
        "parse_float": number,
    }


def _check_tree(obj: Any, max_depth: int, surrogates: bool) -> None:
    """Walk a parsed body: nesting at most ``max_depth``; with ``surrogates``, no lone
    surrogate in a key or string."""
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > max_depth:
                raise _bad_json(f"JSON nested deeper than {max_depth} levels")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, child in items:
                if surrogates and isinstance(key, str) and _SURROGATE.search(key):
                    raise _bad_json("the body contains invalid unicode (a lone surrogate)")
                stack.append((child, depth + 1))
        elif surrogates and isinstance(value, str) and _SURROGATE.search(value):
            raise _bad_json("the body contains invalid unicode (a lone surrogate)")


def parse_json(raw: bytes, limits: ServerLimits) -> Any:
    """Strict, bounded JSON: UTF-8, no NaN/Infinity, no number that overflows to infinity,
    integers of at most ``max_int_digits`` digits, no duplicate keys in an object, no lone
    surrogates, nesting at most ``max_depth``. Raises ``ApiError`` (422)."""
    if not raw.strip():
        raise ApiError(422, "the body is empty; send a JSON object", "missing", ["body"])
    try:
        text = raw.decode("utf-8")
        obj = json.loads(text, **_json_hooks(limits.max_int_digits))
    except UnicodeDecodeError:
        raise _bad_json("the body is not valid UTF-8") from None
    except json.JSONDecodeError as err:
        raise _bad_json(f"invalid JSON: {err.msg} at position {err.pos}") from None
    except RecursionError:
        raise _bad_json(f"JSON nested deeper than {limits.max_depth} levels") from None
    surrogates = _SURROGATE_ESCAPE.search(text) is not None  # only \u escapes can make them
    if surrogates or text.count("[") + text.count("{") > limits.max_depth:
        _check_tree(obj, limits.max_depth, surrogates)  # else it cannot be too deep
    return obj


# --------------------------------------------------------------------------- who may ask
def authorize(request: Request, api_key: str | None) -> None:
    """Nothing without a key; else ``ApiError`` 401 unless the request carries
    ``Authorization: Bearer <api_key>`` (compared in constant time)."""
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


def check_hosts(hosts: Sequence[str]) -> list[str]:
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


def _unavailable(msg: str, kind: str) -> JSONResponse:
    """503 with ``Retry-After``, closing the connection (shed it too)."""
    headers = {"Retry-After": "1", "Connection": "close"}
    return error_response(503, [error_entry([], msg, kind)], headers)


class Gate:
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
        rid = scope[REQUEST_ID_KEY] = uuid.uuid4().hex
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
            await _unavailable(msg, "overloaded")(scope, receive_body, send_with_id)
            return
        await self._forward(scope, receive_body, send_with_id, rid)

    async def _forward(self, scope: Scope, receive: Receive, send: Send, rid: str) -> None:
        """Run the app holding a work slot; a request cancelled by the shutdown before it
        answered gets a 503."""
        started = False

        async def send_tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        self.capacity.active += 1
        try:
            await self.app(scope, receive, send_tracked)
        except asyncio.CancelledError:
            if started or not self.capacity.draining:
                raise
            uncancel = getattr(asyncio.current_task(), "uncancel", None)  # Python >= 3.11
            if uncancel is not None:
                uncancel()  # answered: the cancellation is handled here
            log.info("request %s cancelled: the server is shutting down", rid)
            response = _unavailable("the server is shutting down; retry shortly", "shutting_down")
            with suppress(Exception):  # the connection may be gone already
                await response(scope, receive, send)
        finally:
            self.capacity.active -= 1


class GuardedRoute(APIRoute):
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
                log.exception("internal error (request %s)", request.scope.get(REQUEST_ID_KEY))
                raise ApiError(500, "internal error", "internal_error") from None

        return guarded
