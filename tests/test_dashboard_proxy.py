"""The dashboard's per-address queue share cannot be escaped with ``X-Forwarded-For``.

uvicorn (as gradio launches it) believed forwarded headers from 127.0.0.1, so a local
client sending a new ``X-Forwarded-For`` per session was a new address each time: 40 of 40
events accepted where the share allows ``MAX_CLIENT_EVENTS``. Now only the proxies named
in ``$RLCD_TRUSTED_PROXIES`` are believed (none by default). The dashboard is launched for
real (uvicorn's middleware decides the address); the requests its route saw are then
pushed into a fresh :class:`ui.FairQueue`, which nothing drains, so the counts are exact.
"""

from __future__ import annotations

import asyncio
import os
import socket

import gradio as gr
import httpx
import pytest
from gradio.data_classes import PredictBodyInternal
from starlette.requests import Request

from rlcd_lab.dashboard import common, ui

SESSIONS = 40  # one event each, each with its own X-Forwarded-For


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_dashboard() -> ui.Dashboard:
    with ui.Dashboard(analytics_enabled=False) as demo:
        button, out = gr.Button("go"), gr.Textbox()
        button.click(lambda: "ok", outputs=out, api_name="go")
    demo.queue(max_size=ui.QUEUE_MAX_SIZE)
    return demo


def seen_requests(forwarded: list[str]) -> list[Request]:
    """Launch a dashboard on a free loopback port, send one request per
    ``X-Forwarded-For`` value, and return the requests its app saw."""
    demo = tiny_dashboard()
    seen: list[Request] = []
    port = free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    try:

        async def probe(request: Request) -> dict:
            seen.append(request)
            return {"client": request.client.host}

        demo.server_app.add_api_route("/test-probe", probe)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False) as http:
            for value in forwarded:
                r = http.get("/test-probe", headers={"X-Forwarded-For": value})
                assert r.status_code == 200, r.text
    finally:
        demo.close()
    return seen


def accepted(requests: list[Request]) -> int:
    """How many of one event per request (each its own session) a fresh queue accepts."""
    demo = tiny_dashboard()
    queue = demo._queue
    assert isinstance(queue, ui.FairQueue)
    fn_index = next(i for i, f in demo.fns.items() if f.api_name == "go")

    async def push_all() -> int:
        n = 0
        for i, request in enumerate(requests):
            body = PredictBodyInternal(
                session_hash=f"s{i}", fn_index=fn_index, data=[], request=request
            )
            ok, *_ = await queue.push(body, request, None)
            n += ok
        return n

    return asyncio.run(push_all())


@pytest.fixture()
def no_proxy_env(monkeypatch):
    monkeypatch.delenv(common.TRUSTED_PROXIES_ENV, raising=False)
    monkeypatch.delenv("FORWARDED_ALLOW_IPS", raising=False)


def test_forwarded_headers_from_one_address_share_its_cap(no_proxy_env):
    """40 sessions from 127.0.0.1, each claiming another address: all are 127.0.0.1, and
    the queue accepts ``MAX_CLIENT_EVENTS`` of their events (it accepted all 40)."""
    forwarded = [f"10.1.{i}.7" for i in range(SESSIONS)]
    requests = seen_requests(forwarded)
    assert [r.client.host for r in requests] == ["127.0.0.1"] * SESSIONS
    assert accepted(requests) == ui.MAX_CLIENT_EVENTS < SESSIONS
    assert "FORWARDED_ALLOW_IPS" not in os.environ  # launch put the environment back


def test_a_named_proxy_is_believed(no_proxy_env, monkeypatch):
    """With ``RLCD_TRUSTED_PROXIES=127.0.0.1`` (a proxy on this machine) each forwarded
    address is its own client, each within its own share."""
    monkeypatch.setenv(common.TRUSTED_PROXIES_ENV, "127.0.0.1")
    assert common.trusted_proxies() == "127.0.0.1"
    forwarded = [f"10.1.{i}.7" for i in range(SESSIONS)]
    requests = seen_requests(forwarded)
    assert [r.client.host for r in requests] == forwarded
    assert accepted(requests) == SESSIONS


def test_trusted_proxies_reads_the_environment(monkeypatch):
    monkeypatch.delenv(common.TRUSTED_PROXIES_ENV, raising=False)
    monkeypatch.delenv("FORWARDED_ALLOW_IPS", raising=False)
    assert common.trusted_proxies() == ""
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "10.0.0.0/8")  # uvicorn's own, when set
    assert common.trusted_proxies() == "10.0.0.0/8"
    monkeypatch.setenv(common.TRUSTED_PROXIES_ENV, " 192.168.1.2 ")
    assert common.trusted_proxies() == "192.168.1.2"
    with common.forwarded_trust() as trusted:
        assert trusted == "192.168.1.2" == os.environ["FORWARDED_ALLOW_IPS"]
    assert os.environ["FORWARDED_ALLOW_IPS"] == "10.0.0.0/8"
