"""The uvicorn server around the app: sockets, connection bounds and timeouts, bounded
request heads, and a bounded graceful shutdown (:func:`build_server`).

:class:`TimedH11Protocol` is uvicorn's h11 protocol with a read timeout for a whole
request, a 431 for a request head over ``max_header_bytes``, and bounds on open
connections, per client address and in all, that close idle connections first, so that
idle or slow sockets cannot shut other clients out.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import ipaddress
import json
import logging
import socket
import uuid
from typing import Any

import h11
import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol

from rlcd_lab.server.hardening import REQUEST_ID_HEADER, Capacity, check_number, error_entry

log = logging.getLogger(__package__)
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
        body = json.dumps({"detail": [error_entry([], msg, "overloaded")]}).encode()
        head = (
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nretry-after: 1\r\nconnection: close\r\n"
            f"{REQUEST_ID_HEADER}: {uuid.uuid4().hex}\r\n\r\n"
        )
        self.transport.write(head.encode("ascii") + body)
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        set_nodelay(transport)
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
        body = json.dumps({"detail": [error_entry(loc, msg, kind)]}).encode()
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


def set_nodelay(transport: asyncio.BaseTransport) -> None:
    """Turn Nagle's algorithm off on a TCP connection (``TCP_NODELAY``): a response is
    written in pieces (head, body), and with Nagle on the last piece waits for the
    client's delayed ACK on every keep-alive request. asyncio sets it
    only on sockets whose ``proto`` is ``IPPROTO_TCP``; ours are made with protocol 0
    (:func:`_bind`), and their accepted connections inherit that."""
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:  # already closed by the peer
        pass


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
    family = socket.AF_INET6 if ":" in bare else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # see set_nodelay
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bare, port))
    except OSError as err:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    sock.set_inheritable(True)
    return sock


def is_loopback(host: str) -> bool:
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_pattern(host: str) -> str:
    """The Host header form of a bind address (IPv6 in brackets)."""
    try:
        ipv6 = ipaddress.ip_address(host.strip("[]")).version == 6
    except ValueError:
        return host
    return f"[{host.strip('[]')}]" if ipv6 else host


def check_server_args(
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
    check_number("port", port, 0, 65535, integer=True)
    for name, value in [
        ("timeout_keep_alive", timeout_keep_alive),
        ("timeout_request", timeout_request),
        ("timeout_graceful_shutdown", timeout_graceful_shutdown),
    ]:
        check_number(name, value, 0, 3600, open_lo=True)
    check_number("max_header_bytes", max_header_bytes, 1024, 1 << 20, integer=True)
    for name, bound in (
        ("max_connections", max_connections),
        ("max_client_connections", max_client_connections),
    ):
        if bound is not None:
            check_number(name, bound, 1, 1_000_000, integer=True)


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
    ``Retry-After`` (:class:`Gate`).

    ``freeze_gc``: ``gc.freeze()`` the objects alive now (the loaded model and libraries),
    so that the garbage collector does not scan them: otherwise a body of many small JSON
    nodes triggers collections over all of them that hold the interpreter lock."""
    check_server_args(
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
