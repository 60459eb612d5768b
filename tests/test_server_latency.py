"""Per-request latency of the decision server on one keep-alive connection, by its causes.

Nagle's algorithm on the server's sockets (made with protocol 0, so asyncio never set
``TCP_NODELAY``) held the end of each response until the client's delayed ACK: some 40 ms
on every request of a keep-alive client (measured: median 44-48 ms; 12 ms with the option
set, of which the batching window's 5 ms). Both causes are checked exactly, with no wall
time: the socket option read back from every accepted connection, and the batching window
counted (each lone request waits one window of ``max_wait_ms``, never more). A bound on
the measured median failed on a busy machine (34-37 ms against 25 ms), so none is
asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
import types

import h11
import pytest

from rlcd_lab.decide import DecisionModel
from rlcd_lab.server import batching
from rlcd_lab.server.app import create_app, default_checkpoint
from rlcd_lab.server.connections import build_server
from rlcd_lab.server.options import ServeOptions

BODY = json.dumps(
    {"model": "jev-latest", "state": "1+1=2?", "questions": {"q": {"type": "noul"}}}
).encode()


@pytest.fixture(scope="module")
def app():
    decider = DecisionModel.from_checkpoint(default_checkpoint())
    return create_app(decider, ServeOptions(mode="direct"))


@contextlib.contextmanager
def running(app):
    """``app`` under ``build_server`` on a free loopback port, in a thread."""
    server = build_server(app, port=0, log_level="warning")
    port = server.sock.getsockname()[1]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(2000):
        if server.started:
            break
        time.sleep(0.01)
    assert server.started
    try:
        yield server, port
    finally:
        server.should_exit = True
        thread.join(15)
        assert not thread.is_alive()


class KeepAlive:
    """One HTTP/1.1 connection, ``TCP_NODELAY`` on the client's side (so that only the
    server's side can delay): each request is written in one ``sendall``."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn = h11.Connection(h11.CLIENT)

    def post(self) -> tuple[int, bytes]:
        headers = [
            ("host", f"127.0.0.1:{self.port}"),
            ("content-type", "application/json"),
            ("content-length", str(len(BODY))),
        ]
        out = self.conn.send(h11.Request(method="POST", target="/v1/systemone", headers=headers))
        out += self.conn.send(h11.Data(data=BODY)) + self.conn.send(h11.EndOfMessage())
        self.sock.sendall(out)
        status, data = 0, b""
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                self.conn.receive_data(self.sock.recv(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                data += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self.conn.start_next_cycle()  # raises unless the connection stays open
                return status, data

    def close(self) -> None:
        self.sock.close()


def test_accepted_connections_have_tcp_nodelay(app):
    """Every accepted connection has ``TCP_NODELAY`` set (read back from its socket)."""
    with running(app) as (server, port):
        client = KeepAlive(port)
        try:
            assert client.post()[0] == 200
            conns = list(server.server_state.connections)
            assert len(conns) == 1
            sock = conns[0].transport.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        finally:
            client.close()


def test_each_keep_alive_request_waits_one_batching_window(app, monkeypatch):
    """25 sequential requests (one question, direct mode) over one keep-alive connection:
    the batcher sleeps exactly once per request, for ``max_wait_ms`` (its window; the
    requests arrive one at a time, so no batch is ever full), and nothing else in it
    sleeps. The batcher's ``asyncio`` is swapped for a view of it whose ``sleep`` records
    its argument."""
    slept: list[float] = []
    real_sleep = asyncio.sleep

    class Recording(types.ModuleType):
        def __getattr__(self, name: str):
            return getattr(asyncio, name)

        @staticmethod
        async def sleep(delay: float, *args):
            slept.append(delay)
            return await real_sleep(delay, *args)

    monkeypatch.setattr(batching, "asyncio", Recording("asyncio"))
    batcher = app.state.batcher
    with running(app) as (_, port):
        client = KeepAlive(port)
        try:
            before = batcher.batches
            for _ in range(25):
                status, data = client.post()
                assert status == 200 and "q" in json.loads(data)["answers"]
        finally:
            client.close()
    assert batcher.batches - before == 25 and batcher.max_wait == 0.005
    assert slept == [batcher.max_wait] * 25
