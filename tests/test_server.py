"""The Jev-compatible server: the official SDK end to end, error shapes, batching, fuzzing.

A uvicorn server runs in a thread on a free loopback port and the real ``typesafe-sdk``
client talks to it; expected answers come from ``DecisionModel.decide`` on the same
checkpoint (itself checked against the raw readout in ``tests/test_decide.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import select
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from types import SimpleNamespace

import h11
import httpx
import pytest
import torch
from fastapi.testclient import TestClient

from rlcd_lab.decide import DecisionModel, answering
from rlcd_lab.decide.answering import DecideOptions, Decision
from rlcd_lab.decide.jev import DecisionError
from rlcd_lab.lm.checkpoint import read_meta
from rlcd_lab.server.app import create_app, default_checkpoint
from rlcd_lab.server.batching import DynamicBatcher, Late
from rlcd_lab.server.connections import build_server
from rlcd_lab.server.hardening import REQUEST_ID_HEADER, ServerLimits
from rlcd_lab.server.options import ServeOptions

typesafe_sdk = pytest.importorskip("typesafe_sdk")
from typesafe_sdk import (  # noqa: E402
    Choice,
    Noul,
    RetryPolicy,
    Score,
    TypeSafeAuthenticationError,
    TypeSafeClient,
    TypeSafeNotFoundError,
    TypeSafeUnprocessableEntityError,
)

KEY = "test-key-123"
STATES = ["33+60+20=113?", "47+38+16=91?", "12+34+56=102?", "90+90+90=260?", "10+20+30=60?"]
QUESTIONS = {
    "right": {"type": "noul", "instructions": "Is the proposed sum right?"},
    "verdict": {"type": "choice", "criteria": {"Y": "right", "N": "wrong"}},
    "level": {"type": "score", "criteria": ["right", "wrong"]},
}


def close(a, b, tol: float = 1e-5) -> bool:
    """Nested answers equal: same keys and strings, numbers within ``tol``."""
    if isinstance(a, dict):
        return (
            isinstance(b, dict) and a.keys() == b.keys() and all(close(a[k], b[k], tol) for k in a)
        )
    if isinstance(a, float | int) and not isinstance(a, bool):
        return abs(a - b) <= tol
    return a == b


@pytest.fixture(scope="module")
def decider():
    return DecisionModel.from_checkpoint(default_checkpoint())


@pytest.fixture(scope="module")
def app(decider):
    return create_app(
        decider,
        ServeOptions(api_key=KEY, mode="direct", max_wait_ms=50.0),
        limits=ServerLimits(max_body_bytes=400_000, max_questions=8),
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(app, **kwargs):
    """``app`` under the server ``rlcd-lab serve`` runs (``build_server``: timeouts, capacity)
    on a free loopback port, in a thread; yields ``(base_url, server)``."""
    port = free_port()
    server = build_server(app, port=port, log_level="warning", **kwargs)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started and time.time() < deadline:
        time.sleep(0.01)
    assert server.started
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        thread.join(15)
        assert not thread.is_alive()


@pytest.fixture(scope="module")
def live(app):
    """The app under the real server on a free loopback port; yields the base URL."""
    with running(app) as (url, _):
        yield url


@pytest.fixture(scope="module")
def client(app):
    with TestClient(app, raise_server_exceptions=False) as c:
        c.headers["Authorization"] = f"Bearer {KEY}"
        yield c


def sdk(base_url: str, key: str = KEY) -> TypeSafeClient:
    return TypeSafeClient(base_url=base_url, api_key=key, retry=RetryPolicy(max_retries=0))


# --------------------------------------------------------------------------- the SDK


@pytest.fixture(autouse=True)
def _torch_threads():
    """``serve`` sets torch's thread count: give the other tests theirs back."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_official_sdk_end_to_end(live, decider):
    with sdk(live) as c:
        names = [m.name for m in c.models.list().models]
        assert names == ["rlcd-verify-reinforce", "jev-latest"]
        r = c.system_one(  # the client's default model name: jev-latest
            state=STATES[0],
            questions={
                "right": Noul(instructions="Is the proposed sum right?"),
                "verdict": Choice(criteria={"Y": "right", "N": "wrong"}),
                "level": Score(criteria=["right", "wrong"]),
            },
        )
    assert r.model == "rlcd-verify-reinforce"
    want = decider.decide(STATES[0], QUESTIONS, mode="direct")
    assert r.nouls["right"].noul == pytest.approx(want.answers["right"]["noul"], abs=1e-9)
    verdict = r.choices["verdict"]
    assert verdict.choice == want.answers["verdict"]["choice"]
    assert verdict.confidence == pytest.approx(want.answers["verdict"]["confidence"], abs=1e-9)
    assert verdict.probabilities == pytest.approx(want.answers["verdict"]["probabilities"])
    level = r.scores["level"]  # the SDK keys score maps by int
    assert level.legend == {0: "right", 1: "wrong"}
    p = level.probabilities
    assert level.score == pytest.approx(0 * p[0] + 1 * p[1], abs=1e-12)
    assert level.score == pytest.approx(want.answers["level"]["score"], abs=1e-9)
    assert r.usage.input_tokens == want.usage["input_tokens"] and r.usage.output_tokens == 0
    assert set(r.raw_http_response.json()) == {"model", "answers", "usage"}


def test_sdk_errors_map_to_its_exceptions(live):
    with sdk(live, key="wrong") as c, pytest.raises(TypeSafeAuthenticationError):
        c.models.list()
    with sdk(live) as c:
        with pytest.raises(TypeSafeNotFoundError, match="not found"):
            c.system_one(state=STATES[0], questions={"q": Noul(instructions="?")}, model="x")
        with pytest.raises(TypeSafeUnprocessableEntityError, match="2 option tokens") as err:
            c.system_one(state=STATES[0], questions={"q": Choice(criteria=dict.fromkeys("abc"))})
        assert err.value.body["detail"][0]["loc"] == ["body", "questions", "q", "criteria"]


def test_sdk_compressed_body(live, decider):
    pytest.importorskip("backports.zstd")  # the SDK compresses bodies >= 1 KiB with it
    long = "Answer about the arithmetic. " * 60  # instructions are not shown to the tiny model
    with sdk(live) as c:
        r = c.system_one(state=STATES[1], questions={"q": Noul(instructions=long)})
    assert r.raw_http_response.request.headers.get("content-encoding") == "zstd"
    want = decider.decide(STATES[1], {"q": {"type": "noul"}}).answers["q"]["noul"]
    assert r.nouls["q"].noul == pytest.approx(want, abs=1e-9)


# --------------------------------------------------------------------------- error shapes
def assert_error(resp: httpx.Response, status: int, loc: list, kind: str | None = None) -> None:
    assert resp.status_code == status, resp.text
    detail = resp.json()["detail"]
    assert isinstance(detail, list) and detail
    for entry in detail:
        assert set(entry) == {"loc", "msg", "type"} and isinstance(entry["msg"], str)
    assert detail[0]["loc"] == loc, detail
    if kind is not None:
        assert detail[0]["type"] == kind


def body(**overrides) -> dict:
    return {"model": "jev-latest", "state": STATES[0], "questions": QUESTIONS, **overrides}


def test_labels_are_matched_by_meaning_not_position(client, decider):
    """The issue's case: ``{"yes": "right", "no": "wrong"}`` and the same criteria in the
    other order answer the same label with the same probabilities (those of
    ``DecisionModel`` on the same checkpoint); labels whose meaning is ambiguous are a 422
    naming them."""
    post = lambda b: client.post("/v1/systemone", json=b)  # noqa: E731
    state = "47+38+16=91?"
    orders = [{"yes": "right", "no": "wrong"}, {"no": "wrong", "yes": "right"}]
    answers = []
    for criteria in orders:
        r = post(body(state=state, questions={"v": {"type": "choice", "criteria": criteria}}))
        assert r.status_code == 200, r.text
        answers.append(r.json()["answers"]["v"])
    assert answers[0]["choice"] == answers[1]["choice"]
    assert close(answers[0]["probabilities"], answers[1]["probabilities"])
    p_yes = decider.decide(state, {"q": {"type": "noul"}}, mode="direct").answers["q"]["noul"]
    assert answers[0]["probabilities"]["yes"] == pytest.approx(p_yes, abs=1e-6)
    r = post(body(questions={"v": {"type": "choice", "criteria": {"Y": "wrong", "N": "right"}}}))
    assert_error(r, 422, ["body", "questions", "v", "criteria"])
    msg = r.json()["detail"][0]["msg"]
    assert "'Y'" in msg and "'N'" in msg and "more than one" in msg


def test_validation_errors_are_422_with_locations(client):
    post = lambda b: client.post("/v1/systemone", json=b)  # noqa: E731
    q = {"type": "choice", "criteria": {"Y": None, "N": None}}
    assert_error(
        post({"model": "jev-latest", "questions": QUESTIONS}), 422, ["body", "state"], "missing"
    )
    assert_error(post(body(state=5)), 422, ["body", "state", "str"])
    assert_error(post(body(extra=1)), 422, ["body", "extra"], "extra_forbidden")
    assert_error(
        post(body(questions={"q": {**q, "weight": 2}})),
        422,
        ["body", "questions", "q", "choice", "weight"],
        "extra_forbidden",
    )
    assert_error(
        post(body(questions={"q": {"type": "choice", "criteria": {}}})),
        422,
        ["body", "questions", "q", "choice", "criteria"],
        "too_short",
    )
    assert_error(
        post(body(questions={"q": {"type": "choice", "criteria": {"Y": None, "": None}}})),
        422,
        ["body", "questions", "q", "choice", "criteria", "", "[key]"],
    )
    assert_error(
        post(body(questions={"q": {"type": "box"}})),
        422,
        ["body", "questions", "q"],
        "union_tag_invalid",
    )
    assert_error(
        post(body(questions={f"q{i}": q for i in range(9)})),
        422,
        ["body", "questions"],
        "too_many_questions",
    )
    assert_error(post(body(assets={"img": {}})), 422, ["body", "assets"])
    many = {"type": "choice", "criteria": {str(i): None for i in range(256)}}
    assert_error(
        post(body(questions={"q": many})),
        422,
        ["body", "questions", "q", "choice", "criteria"],
        "too_long",
    )
    dup = '{"model": "jev-latest", "state": "1+1=2?", "questions": {"q": {"type": "choice", '
    dup += '"criteria": {"Y": null, "Y": "again", "N": null}}}}'
    resp = client.post("/v1/systemone", content=dup, headers={"content-type": "application/json"})
    assert_error(resp, 422, ["body"], "json_invalid")
    assert "duplicate key 'Y'" in resp.json()["detail"][0]["msg"]


def test_other_error_statuses_share_the_shape(client, app):
    assert_error(client.post("/v1/systemone", json=body(model="gpt")), 404, ["body", "model"])
    anon = TestClient(app)
    resp = anon.post("/v1/systemone", json=body())
    assert_error(resp, 401, ["header", "authorization"], "unauthorized")
    assert resp.headers["www-authenticate"] == "Bearer"
    assert_error(anon.get("/v1/models"), 401, ["header", "authorization"])
    assert anon.get("/health").json()["status"] == "ok"  # no key needed
    big = body(state="1" * 500_000)
    assert_error(client.post("/v1/systemone", json=big), 413, ["body"], "body_too_large")
    bomb = gzip.compress(json.dumps(big).encode())  # small on the wire, large unpacked
    resp = client.post(
        "/v1/systemone",
        content=bomb,
        headers={"content-type": "application/json", "content-encoding": "gzip"},
    )
    assert_error(resp, 413, ["body"], "body_too_large")
    resp = client.post("/v1/systemone", files={"image": ("a.png", b"x")})
    assert_error(resp, 415, ["header", "content-type"])
    assert_error(client.get("/v1/nothing"), 404, [])


def test_extensions_are_opt_in(client, decider):
    plain = client.post("/v1/systemone", json=body()).json()
    assert set(plain) == {"model", "answers", "usage"}
    assert set(plain["answers"]["right"]) == {"type", "noul"}
    assert set(plain["answers"]["verdict"]) == {"type", "choice", "confidence", "probabilities"}
    assert set(plain["answers"]["level"]) == {
        "type",
        "score",
        "confidence",
        "legend",
        "probabilities",
    }
    # its own deadline (the longest): the check of the rationales below must not depend
    # on how fast a busy machine samples them
    rlcd = {"mode": "auto", "threshold": 0.5, "m": 2, "rationales": True, "seed": 3}
    ext = client.post("/v1/systemone", json=body(rlcd={**rlcd, "deadline_s": 3600})).json()
    assert ext["rlcd"]["options"]["mode"] == "auto"
    fitted = read_meta(default_checkpoint())["T"]  # the checkpoint's fitted T
    assert fitted != 1.0 and ext["rlcd"]["T"] == pytest.approx(fitted)
    assert "temperature" not in ext["rlcd"]  # one word per temperature: T is the fitted one
    for name, det in ext["rlcd"]["answers"].items():
        direct = decider.decide(STATES[0], QUESTIONS).details[name]["confidence"]
        assert det["escalated"] == (direct < 0.5)  # the direct verify readout is near chance
        assert det["direct_confidence"] == pytest.approx(direct, abs=1e-6)
        if det["escalated"]:
            assert len(det["rationales"]) == 2 and len(det["readouts"]) == 2
    bad = client.post("/v1/systemone", json=body(rlcd={"mode": "slow"}))
    assert_error(bad, 422, ["body", "rlcd", "mode"], "literal_error")


def test_the_state_cannot_inject_fields(client, decider):
    state = {"model": "x", "questions": {"evil": {"type": "noul"}}, "rlcd": {"mode": "reason"}}
    q = {"right": {"type": "choice", "criteria": {"Y": None, "N": None}}}
    resp = client.post("/v1/systemone", json=body(state=state, questions=q))
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert set(out) == {"model", "answers", "usage"} and set(out["answers"]) == {"right"}
    assert close(out["answers"], decider.decide(state, q).answers, 1e-9)
    text = '"}, "rlcd": {"mode": "reason"}, "questions": {"evil": {"type": "noul"}}'
    resp = client.post("/v1/systemone", json=body(state=text, questions=q))
    assert resp.status_code == 200 and set(resp.json()["answers"]) == {"right"}


# --------------------------------------------------------------------------- batching
def test_concurrent_requests_are_batched_and_agree(live, app, decider):
    batcher = app.state.batcher
    before = (batcher.batches, batcher.jobs)

    def ask(state: str) -> dict:
        r = httpx.post(
            f"{live}/v1/systemone",
            json=body(state=state),
            headers={"Authorization": f"Bearer {KEY}"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        return r.json()["answers"]

    states = STATES * 2
    with ThreadPoolExecutor(len(states)) as pool:
        answers = list(pool.map(ask, states))
    batches, jobs = batcher.batches - before[0], batcher.jobs - before[1]
    assert jobs == len(states) and batches < jobs  # some requests shared forward passes
    for state, got in zip(states, answers, strict=True):
        assert close(got, decider.decide(state, QUESTIONS).answers, 1e-5)
    # the unbatched server gives the same answers
    solo = create_app(decider, ServeOptions(mode="direct", batching=False))
    with TestClient(solo) as c:
        for state, got in zip(states[:3], answers[:3], strict=True):
            assert close(c.post("/v1/systemone", json=body(state=state)).json()["answers"], got)


def test_a_failing_request_does_not_fail_its_batch(decider):
    dm = DecisionModel(decider.model, decider.tokenizer, decider.meta)
    real = dm.decide_batch

    def flaky(requests, cancelled=None):  # a model-code failure triggered by one request only
        if any(state == "1+1=2?" for state, _, _ in requests):
            raise RuntimeError("boom")
        return real(requests, cancelled)

    dm.decide_batch = flaky
    app = create_app(dm, ServeOptions(mode="direct", max_wait_ms=100.0))

    async def go() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            states = [STATES[0], "1+1=2?", STATES[1]]
            return await asyncio.gather(
                *(c.post("/v1/systemone", json=body(state=s)) for s in states)
            )

    ok, bad, ok2 = asyncio.run(go())
    assert app.state.batcher.batches == 1 and app.state.batcher.jobs == 3  # one batch
    assert_error(bad, 500, [], "internal_error")
    assert ok.status_code == ok2.status_code == 200
    assert close(ok.json()["answers"], decider.decide(STATES[0], QUESTIONS).answers, 1e-6)


# --------------------------------------------------------------------------- fuzzing
HOSTILE: list = [
    None,
    [],
    "state",
    12,
    {},
    {"model": None, "state": None, "questions": None},
    body(model=["jev-latest"]),
    body(model="x" * 5000),
    body(state=""),
    body(state="   "),
    body(state=[]),
    body(state={}),
    body(state={"a": None}),
    body(state=True),
    body(state=1e308),
    body(state="9" * 60_000),
    body(state="🙂" * 1000 + "\u202e\u0000"),
    body(state=[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["x"]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]),
    body(questions={}),
    body(questions=[]),
    body(questions={"": {"type": "noul"}}),
    body(questions={"q" * 1000: {"type": "noul"}}),
    body(questions={"q": {"type": "noul", "criteria": {"maybe": "x"}}}),
    body(questions={"q": {"type": "noul", "criteria": "yes"}}),
    body(questions={"q": {"type": "noul", "instructions": 7}}),
    body(questions={"q": {"type": "choice", "criteria": {str(i): None for i in range(10_000)}}}),
    body(questions={"q": {"type": "choice", "criteria": {"Y\n": None, "N": None}}}),
    body(questions={"q": {"type": "choice", "criteria": {" Y": None, "N": None}}}),
    body(questions={"q": {"type": "choice", "criteria": {"Y": 5, "N": None}}}),
    body(questions={"q": {"type": "choice", "criteria": {"é": None, "ü": None}}}),
    body(questions={"q": {"type": "score", "criteria": []}}),
    body(questions={"q": {"type": "score", "criteria": ["a", None]}}),
    body(questions={"q": {"type": "score", "criteria": [str(i) for i in range(11)]}}),
    body(questions={"q": {"type": "score", "criteria": ["a", "b"], "extra": {"a": 1}}}),
    body(questions={"q": {"type": ["noul"]}}),
    body(questions={"q": {"type": "NOUL"}}),
    body(rlcd={"m": -1}),
    body(rlcd={"m": 10**12}),
    body(rlcd={"m": "4"}),
    body(rlcd={"threshold": True}),
    body(rlcd={"threshold": 2}),
    body(rlcd={"max_new_tokens": 0}),
    body(rlcd={"unknown": 1}),
    body(rlcd=[]),
    body(assets=None),
    body(rlcd={"mode": "reason", "m": 1, "max_new_tokens": 1}),
]
RAW = [
    b"",
    b"{",
    b"not json",
    b'{"model": NaN}',
    b'{"model": "jev-latest", "state": Infinity, "questions": {}}',
    b"[" * 100_000 + b"]" * 100_000,
    b"[" * 40 + b"]" * 40,
    b'{"model": "jev-latest", "state": "\\ud800", "questions": {"q": {"type": "noul"}}}',
    b'{"a": 1, "a": 2}',
    b"\xff\xfe\x00",
    json.dumps(body()).encode("utf-16"),
]


def test_hostile_bodies_never_give_a_5xx(client):
    for i, hostile in enumerate(HOSTILE):
        resp = client.post("/v1/systemone", json=hostile)
        assert resp.status_code < 500, (i, resp.text[:300])
        if resp.status_code != 200:
            assert resp.json()["detail"][0]["loc"][0] in ("body", "header"), (i, resp.text)
    for i, raw in enumerate(RAW):
        resp = client.post(
            "/v1/systemone", content=raw, headers={"content-type": "application/json"}
        )
        assert 400 <= resp.status_code < 500, (i, resp.text[:300])
    for encoding, raw in [("gzip", b"garbage"), ("zstd", b"garbage"), ("br", b"x"), ("gzip", b"")]:
        headers = {"content-type": "application/json", "content-encoding": encoding}
        resp = client.post("/v1/systemone", content=raw, headers=headers)
        assert 400 <= resp.status_code < 500, (encoding, resp.text)
    resp = client.post("/v1/systemone", content=b"{}", headers={"content-type": "text/plain"})
    assert resp.status_code == 415
    # still healthy and still right
    assert client.get("/health").status_code == 200
    assert client.post("/v1/systemone", json=body()).status_code == 200


# --------------------------------------------------------------------------- hardening
class Raw:
    """One HTTP/1.1 connection driven by hand (h11), to see exactly what the server does
    with it: keep-alive, closing, timeouts."""

    def __init__(self, url: str, timeout: float = 10.0):
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.conn = h11.Connection(h11.CLIENT)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, method: str, path: str, body: bytes = b"", headers=()) -> tuple:
        """Send one request, read its response: ``(status, headers, body)``; raises
        ``ConnectionError`` when the server closes instead of answering."""
        if self.conn.our_state is h11.DONE:
            self.conn.start_next_cycle()
        hdrs = [("Host", "127.0.0.1"), ("Content-Length", str(len(body))), *headers]
        out = self.conn.send(h11.Request(method=method, target=path, headers=hdrs))
        if body:
            out += self.conn.send(h11.Data(data=body))
        self.send(out + self.conn.send(h11.EndOfMessage()))
        status, got, chunks = None, {}, []
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                data = self.sock.recv(65536)
                if not data:
                    raise ConnectionError("the server closed the connection without answering")
                self.conn.receive_data(data)
            elif isinstance(event, h11.Response):
                status = event.status_code
                got = {k.decode().lower(): v.decode() for k, v in event.headers}
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return status, got, b"".join(chunks)

    def closed_within(self, seconds: float) -> bool:
        """Whether the server closes this connection within ``seconds`` (reading and
        discarding whatever it sends first)."""
        deadline = time.time() + seconds
        while time.time() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.time()))
            try:
                if not self.sock.recv(65536):
                    return True
            except TimeoutError:
                return False
            except ConnectionResetError:
                return True
        return False

    def close(self) -> None:
        self.sock.close()


def post_raw(client, raw: bytes, **headers) -> httpx.Response:
    return client.post(
        "/v1/systemone", content=raw, headers={"content-type": "application/json", **headers}
    )


def stub(decider, decide_batch) -> DecisionModel:
    """A copy of ``decider`` answering with ``decide_batch(self_real, requests, cancelled)``."""
    dm = DecisionModel(decider.model, decider.tokenizer, decider.meta)
    real = dm.decide_batch
    dm.decide_batch = lambda requests, cancelled=None: decide_batch(real, requests, cancelled)
    return dm


def test_huge_integers_and_infinite_numbers_are_422_before_the_model(client, app):
    """Python refuses int(text) beyond 4300 digits inside the JSON parser (was a 500, which
    the official client retries twice); 1e999 parses to inf (a 500 after the model ran when
    in a score level, shown to the model as "Infinity" in the state)."""
    jobs = app.state.batcher.jobs
    q = '{"q": {"type": "noul"}}'
    cases = {
        f'{{"model": "jev-latest", "state": {{"n": {"7" * 5000}}}, "questions": {q}}}': "digits",
        f'{{"model": "jev-latest", "state": [{"1" * 101}], "questions": {q}}}': "101 digits",
        f'{{"model": "jev-latest", "state": "1+1=2?", "questions": {q}, "x": -{"9" * 4301}}}': (
            "digits"
        ),
        '{"model": "jev-latest", "state": "1+1=2?", "questions": {"q": {"type": "score", '
        '"criteria": [{"level": 1e999}, "b"]}}}': "out of range",
        '{"model": "jev-latest", "state": {"x": 1e999}, "questions": ' + q + "}": "out of range",
        '{"model": "jev-latest", "state": [-1E+400], "questions": ' + q + "}": "out of range",
        '{"model": "jev-latest", "state": "1+1=2?", "questions": '
        + q
        + ', "rlcd": {"threshold": 1e999}}': "out of range",
    }
    for raw, msg in cases.items():
        resp = post_raw(client, raw.encode())
        assert_error(resp, 422, ["body"], "json_invalid")
        assert msg in resp.json()["detail"][0]["msg"], resp.text
    assert app.state.batcher.jobs == jobs  # refused before any model work
    ok = f'{{"model": "jev-latest", "state": {{"n": {"7" * 100}, "f": 1e300}}, "questions": {q}}}'
    assert post_raw(client, ok.encode()).status_code == 200  # the limit is 100 digits


def test_a_500_keeps_the_connection_usable(decider):
    """An error answered by Starlette's outermost handler is re-raised to uvicorn, which then
    drops the keep-alive connection: the next request on it got no reply."""

    def flaky(real, requests, cancelled):
        if requests[0][0] == "1+1=2?":
            raise RuntimeError("boom")
        if requests[0][0] == "2+2=4?":  # an answer that cannot be written as JSON
            return [Decision({"q": {"type": "noul", "noul": float("nan")}}, {}, {})]
        return real(requests, cancelled)

    app = create_app(stub(decider, flaky), ServeOptions(mode="direct"))
    good = json.dumps(body(state=STATES[0])).encode()
    with running(app) as (url, _):
        conn = Raw(url)
        for bad_state in ["1+1=2?", "2+2=4?"]:
            status, headers, content = conn.request(
                "POST",
                "/v1/systemone",
                json.dumps(body(state=bad_state)).encode(),
                [("Content-Type", "application/json")],
            )
            assert status == 500 and json.loads(content)["detail"][0]["type"] == "internal_error"
            assert headers.get("connection") != "close"
            status, _, content = conn.request(
                "POST", "/v1/systemone", good, [("Content-Type", "application/json")]
            )
            assert status == 200, content
        conn.close()


def test_an_abandoned_upload_is_one_log_line(live, caplog):
    caplog.set_level(logging.INFO, logger="rlcd_lab.server")
    uvicorn_log = logging.getLogger("uvicorn.error")
    uvicorn_log.addHandler(caplog.handler)
    try:
        conn = Raw(live)
        conn.send(
            b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer test-key-123"
            b"\r\nContent-Length: 1000\r\n\r\n" + b'{"model": "jev-latest", "state": "'
        )
        time.sleep(0.2)
        conn.close()
        deadline = time.time() + 10
        while time.time() < deadline and not any("abandoned" in r.message for r in caplog.records):
            time.sleep(0.05)
        time.sleep(0.2)
    finally:
        uvicorn_log.removeHandler(caplog.handler)
    records = [r for r in caplog.records if r.name in ("rlcd_lab.server", "uvicorn.error")]
    assert len(records) == 1, [r.getMessage() for r in records]
    assert "abandoned" in records[0].message and "while sending its body" in records[0].message
    assert records[0].levelno == logging.INFO and records[0].exc_info is None
    assert httpx.get(f"{live}/health").status_code == 200


def test_work_for_a_client_that_left_is_cancelled(decider, caplog):
    """Queued: it never reaches the model. Running: the model's next step sees it."""
    caplog.set_level(logging.INFO, logger="rlcd_lab.server")
    release, seen, steps = threading.Event(), [], []

    def slow(real, requests, cancelled):
        seen.extend(state for state, _, _ in requests)
        if requests[0][0] == "block":
            release.wait(20)
        if requests[0][0] == "long":
            for step in range(400):  # a long reason-mode job (8 s), one step at a time
                if cancelled(0):
                    steps.append(step)
                    break
                time.sleep(0.02)
        return real([(STATES[0], q, o) for _, q, o in requests], cancelled)

    app = create_app(stub(decider, slow), ServeOptions(mode="direct", batching=False))

    def post(url: str, state: str, timeout: float = 30) -> httpx.Response:
        return httpx.post(f"{url}/v1/systemone", json=body(state=state), timeout=timeout)

    with running(app) as (url, _), ThreadPoolExecutor(2) as pool:
        blocked = pool.submit(post, url, "block")
        while "block" not in seen:
            time.sleep(0.01)
        with pytest.raises(httpx.TimeoutException):  # queued behind "block", then gone
            post(url, "gone", timeout=0.5)
        deadline = time.time() + 10
        while time.time() < deadline and not any("abandoned" in r.message for r in caplog.records):
            time.sleep(0.02)
        release.set()
        assert blocked.result().status_code == 200
        assert post(url, STATES[1]).status_code == 200
        assert "gone" not in seen  # the queued request never reached the model
        t0 = time.perf_counter()
        with pytest.raises(httpx.TimeoutException):
            post(url, "long", timeout=0.5)
        assert post(url, STATES[2]).status_code == 200
        assert time.perf_counter() - t0 < 5.0  # not the 8 s the abandoned job would take
        assert steps and steps[0] < 100  # it stopped at a step soon after the client left
    abandoned = [r for r in caplog.records if "abandoned" in r.message]
    assert len(abandoned) == 2 and all(r.exc_info is None for r in abandoned)


LONG = "1" * 200 + "?"  # the tiny verify model writes no marker here: every row runs to the end
HEAVY = {"mode": "reason", "m": 16, "max_new_tokens": 256}  # the one question


@pytest.fixture()
def slow_steps():
    """``(decider, calls)``: the shipped verify checkpoint with every forward pass slowed by
    20 ms (a forward pre-hook, which also keeps the sampler on the model's own forward) and
    their start times in ``calls``. A HEAVY request about LONG then samples for 256 steps:
    over 5 s."""
    decider = DecisionModel.from_checkpoint(default_checkpoint())
    calls: list[float] = []

    def slow(module, args):
        calls.append(time.perf_counter())
        time.sleep(0.02)

    handle = decider.model.register_forward_pre_hook(slow)
    yield decider, calls
    handle.remove()


def test_running_work_of_a_client_that_left_stops_within_a_step(slow_steps, caplog):
    """The client of a HEAVY request leaves at 0.3 s, after it reached the model: its work
    stops at the next decoding step (it used to run to the end, over 5 s here), and the
    next request is answered within 1 s of an idle server's answer time."""
    caplog.set_level(logging.INFO, logger="rlcd_lab.server")
    decider, calls = slow_steps
    app = create_app(decider, ServeOptions(mode="direct"))
    with running(app) as (url, _):

        def post(payload: dict, timeout: float) -> httpx.Response:
            return httpx.post(f"{url}/v1/systemone", json=payload, timeout=timeout)

        t0 = time.perf_counter()
        assert post(body(), 10).status_code == 200
        idle = time.perf_counter() - t0
        with pytest.raises(httpx.TimeoutException):
            post(body(state=LONG, rlcd=HEAVY), 0.3)
        at_leave = len(calls)
        assert at_leave > 3  # it was sampling when the client left
        time.sleep(0.3)  # some 12 steps of the abandoned job, had it gone on
        assert len(calls) - at_leave <= 2  # the step under way, then it stopped
        t0 = time.perf_counter()
        assert post(body(), 30).status_code == 200
        waited = time.perf_counter() - t0
    assert waited < idle + 1.0, (waited, idle)
    assert sum("abandoned" in r.message for r in caplog.records) == 1


FAKE_PASS_S, FAKE_TOKEN_S = 0.001, 0.0002
"""The fake clock's cost of a forward pass: 1 ms, plus 0.2 ms per token it reads (the new
tokens only: one per row for a decoding step), so that scoring M long rationales costs
far more than a decoding step, as with SmolLM2 on a CPU."""


@pytest.fixture()
def fake_clock(monkeypatch):
    """``(decider, now)``: the shipped verify checkpoint on a fake clock that moves only
    when the model runs (``answering.clock``, which deadlines, arrival times and the
    measured pass costs are read on; ``now[0]`` is its time): a forward pass costs
    :data:`FAKE_PASS_S` plus :data:`FAKE_TOKEN_S` per token. Nothing here depends on the
    machine's speed. A forward pre-hook, which also keeps the sampler on the model's own
    forward."""
    decider = DecisionModel.from_checkpoint(default_checkpoint())
    now = [1000.0]

    def tick(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        n = ids.numel() if ids is not None else kwargs["inputs_embeds"].shape[:2].numel()
        now[0] += FAKE_PASS_S + FAKE_TOKEN_S * n

    handle = decider.model.register_forward_pre_hook(tick, with_kwargs=True)
    monkeypatch.setattr(answering, "clock", lambda: now[0])
    yield decider, now
    handle.remove()


def timeline(decider, now, monkeypatch, opts: DecideOptions) -> tuple[float, float]:
    """One HEAVY request about LONG without a deadline on the fake clock (which also
    measures the reader's pass costs): the fake seconds from its start to its scoring
    pass, and to its answer."""
    starts: list[float] = []
    real = decider.reader.score
    monkeypatch.setattr(
        decider.reader, "score", lambda *a, **k: starts.append(now[0]) or real(*a, **k)
    )
    t0 = now[0]
    out = decider.decide_batch([(LONG, QUESTIONS, opts)])[0]
    monkeypatch.setattr(decider.reader, "score", real)
    assert not any("deadline_passed" in d for d in out.details.values())
    assert len(starts) == 1  # one chunk: 3 prompts x 16 rationales
    return starts[0] - t0, now[0] - t0


@pytest.mark.parametrize("mode", ["reason", "auto"])
def test_the_deadline_covers_the_readout(fake_clock, monkeypatch, mode):
    """A request whose sampling ends before its deadline but whose scoring pass would end
    after it (the issue: sampling was bounded, the readout after it not) returns by the
    deadline (fake clock: exactly, no margin), its questions answered by their direct
    readouts and flagged ``deadline_passed``; with time for everything it reasons."""
    decider, now = fake_clock
    opts = DecideOptions(mode=mode, threshold=1.0, m=16, max_new_tokens=256)
    sampled, total = timeline(decider, now, monkeypatch, opts)
    assert total - sampled > 0.5  # the scoring pass (and fallback readouts) cost real time
    want = decider.decide(LONG, QUESTIONS, mode="direct")
    budget = (sampled + total) / 2  # sampling ends before it, the scoring pass after it
    t0 = now[0]
    out = decider.decide_batch([(LONG, QUESTIONS, replace(opts, deadline=t0 + budget))])[0]
    assert now[0] - t0 <= budget, (now[0] - t0, budget)  # it used to take ``total``
    assert close(out.answers, want.answers, 1e-6)
    for det in out.details.values():
        assert det["mode"] == "direct" and det["deadline_passed"] is True
    t0 = now[0]
    out = decider.decide_batch([(LONG, QUESTIONS, replace(opts, deadline=t0 + 3 * total))])[0]
    assert now[0] - t0 <= 3 * total
    assert all(d["mode"] == "reason" and "deadline_passed" not in d for d in out.details.values())


def test_a_deadline_answers_with_the_direct_readout(fake_clock, monkeypatch):
    """Reasoning that would outlast the request's deadline is cut there and the question
    answered by its direct readout (the best answer so far), flagged in the extension; the
    response comes by the deadline (fake clock, after one request has measured the pass
    costs: the first pass of a fresh model cannot be budgeted)."""
    decider, now = fake_clock
    timeline(decider, now, monkeypatch, DecideOptions(mode="reason", m=16, max_new_tokens=256))
    app = create_app(decider, ServeOptions(mode="direct", deadline=0.5))
    want = decider.decide(LONG, QUESTIONS, mode="direct")
    with TestClient(app) as c:
        for rlcd, budget in (
            ({**HEAVY, "rationales": True}, 0.5),
            ({**HEAVY, "deadline_s": 0.3}, 0.3),
        ):
            t0 = now[0]
            resp = c.post("/v1/systemone", json=body(state=LONG, rlcd=rlcd))
            assert now[0] - t0 <= budget  # the 256 steps alone take 2.7 fake seconds
            assert resp.status_code == 200, resp.text
            out = resp.json()
            assert close(out["answers"], want.answers, 1e-6)
            assert out["rlcd"]["options"]["deadline_s"] == budget
            for det in out["rlcd"]["answers"].values():
                assert det["mode"] == "direct" and det["deadline_passed"] is True
            assert out["usage"]["output_tokens"] == 0
        auto = {"mode": "auto", "threshold": 1.0, "m": 16, "max_new_tokens": 256}
        out = c.post("/v1/systemone", json=body(state=LONG, rlcd=auto)).json()
        assert close(out["answers"], want.answers, 1e-6)  # auto: its direct answers stand
        assert all(d["escalated"] and d["deadline_passed"] for d in out["rlcd"]["answers"].values())


def test_a_batch_runs_in_deadline_order(decider):
    """Requests batched together with deadlines far apart run as separate model calls,
    the earliest deadline first, each answered when its call returns: none waits for work
    done for a later deadline (the default deadlines of one batch lie within
    ``deadline_slack`` and share one call)."""
    calls: list[list[str]] = []
    real = decider.decide_batch

    def spy(requests, cancelled=None):
        calls.append([state for state, _, _ in requests])
        return real(requests, cancelled)

    dm = DecisionModel(decider.model, decider.tokenizer, decider.meta)
    dm.decide_batch = spy
    app = create_app(dm, ServeOptions(mode="direct", max_wait_ms=200.0, deadline=None))

    async def go() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            budgets = [(STATES[0], 60.0), (STATES[1], 5.0), (STATES[2], 60.1), (STATES[3], None)]
            return await asyncio.gather(
                *(
                    c.post("/v1/systemone", json=body(state=s, rlcd={"deadline_s": d} if d else {}))
                    for s, d in budgets
                )
            )

    assert all(r.status_code == 200 for r in asyncio.run(go()))
    assert app.state.batcher.batches == 1  # one batch, three calls: 5 s, 60 s (two), none
    assert calls == [[STATES[1]], [STATES[0], STATES[2]], [STATES[3]]]


class FakeModel:
    """A batcher's ``fn`` on a fake clock: a call over ``u`` work units (the jobs' ``"units"``)
    takes exactly ``CALL_S + UNIT_S u`` fake seconds, plus a job's ``"extra"`` seconds (a
    call running longer than measured); each job's result is the clock when its call
    ended. Nothing depends on the machine's speed."""

    CALL_S, UNIT_S = 1.0, 0.01

    def __init__(self) -> None:
        self.now = [1000.0]
        self.calls: list[list[str]] = []

    def __call__(self, jobs: list[dict], cancelled) -> list[float]:
        self.calls.append([j["name"] for j in jobs])
        units = sum(j["units"] for j in jobs)
        self.now[0] += self.CALL_S + self.UNIT_S * units + sum(j.get("extra", 0) for j in jobs)
        return [self.now[0]] * len(jobs)

    def batcher(self) -> DynamicBatcher:
        return DynamicBatcher(
            self, max_wait_ms=0, deadline=lambda j: j.get("deadline"), clock=lambda: self.now[0]
        )


def _job(model: FakeModel, name: str, units: float, budget: float | None, **kw) -> dict:
    deadline = None if budget is None else model.now[0] + budget
    return {"name": name, "units": units, "deadline": deadline, **kw}


async def _measured(model: FakeModel) -> DynamicBatcher:
    """A batcher that has measured three calls (100, 300 and 200 units: 2, 4 and 4.5 s, the
    last 1.5 s slower than the line ``1 + 0.01 u``), so that its estimate is the least
    squares line through them (mean 200 units and 3.5 s, slope (150 + 50) / 20000 = 0.01:
    ``1.5 + 0.01 u``) times the largest ratio of a measured to a fitted call (4.5 / 3.5 =
    9 / 7): :func:`est`."""
    batcher = model.batcher()
    for units, extra in ((100, 0.0), (300, 0.0), (200, 1.5)):
        await batcher.submit(_job(model, "warm", units, None, extra=extra), units)
    for units in (100, 200, 300):
        assert batcher.estimate(units) == pytest.approx(est(units))
    return batcher


def est(units: float) -> float:
    """:func:`_measured`'s estimate: 9/7 (1.5 + 0.01 u): 3.21 s for 100 units, 4.5 s for
    200, 5.79 s for 300."""
    return 9 / 7 * (1.5 + 0.01 * units)


def test_admission_refuses_a_job_the_queue_would_make_late():
    """Three jobs of 100 units, each with 5 s to go, arrive at once: one call over the
    first two is estimated at 4.5 s (in time), over all three at 5.8 s (late), so the third
    is refused at once with Late, Retry-After the 4.5 s estimated for the two ahead of it.
    The two admitted are answered before their deadline. A job with no deadline is never
    refused; one that could not be answered in time even by an idle server (3.2 s of work,
    1 s to go) is refused behind a queue and taken by an idle server (best effort)."""
    model = FakeModel()

    async def go():
        batcher = await _measured(model)
        jobs = [_job(model, n, 100, 5.0) for n in "abc"]
        a, b = (batcher.put(j, 100) for j in jobs[:2])
        with pytest.raises(Late) as late:
            batcher.put(jobs[2], 100)
        assert late.value.retry_after == pytest.approx(est(200))  # the 2 queued: 4.5 s
        with pytest.raises(Late):  # 3.2 s of work, 1 s to go, behind a queue
            batcher.put(_job(model, "behind", 100, 1.0), 100)
        done = await asyncio.gather(a, b)
        assert all(t <= j["deadline"] for t, j in zip(done, jobs[:2], strict=True))
        hopeless = _job(model, "hopeless", 100, 1.0)
        untimed = _job(model, "untimed", 10_000, None)
        await asyncio.gather(batcher.submit(hopeless, 100), batcher.submit(untimed, 10_000))
        assert batcher.refused == 2
        await batcher.aclose()

    asyncio.run(go())
    assert model.calls[3:] == [["a", "b"], ["hopeless"], ["untimed"]]


def test_admission_rechecks_when_a_group_starts():
    """Two jobs admitted with 16 s to go (one call over both: 4.5 s) whose group starts
    12 s later (the clock moved while they were queued): one call over both would end
    past the first deadline, over the first alone (3.2 s) it ends in time, so the first
    runs and the second gets Late (Retry-After: the 3.2 s of the call ahead); nobody is
    answered after their deadline."""
    model = FakeModel()

    async def go():
        batcher = await _measured(model)
        a, b = _job(model, "a", 100, 16.0), _job(model, "b", 100, 16.1)
        futures = [batcher.put(j, 100) for j in (a, b)]
        model.now[0] += 12.0  # before the collector runs: 12 s in the queue
        results = await asyncio.gather(*futures, return_exceptions=True)
        await batcher.aclose()
        return a, results

    a, (t_a, late) = asyncio.run(go())
    assert model.calls[3:] == [["a"]]  # 12 + 3.2 <= 16 alone; 12 + 4.5 > 16 with b
    assert t_a <= a["deadline"]
    assert isinstance(late, Late) and late.retry_after == pytest.approx(est(100))


def test_a_deadline_the_queue_cannot_meet_is_a_503_with_retry_after(decider, monkeypatch):
    """Refused at arrival or when its group starts (the batcher's Late): a JSON 503 with
    ``Retry-After`` (the estimated seconds of the work ahead, rounded up, at least 1),
    before any model work; the official client retries on it."""
    app = create_app(decider, ServeOptions(mode="direct"))
    batcher = app.state.batcher
    with TestClient(app, raise_server_exceptions=False) as c:
        monkeypatch.setattr(batcher, "put", lambda job, units: (_ for _ in ()).throw(Late(2.2)))
        r = c.post("/v1/systemone", json=body())
        assert_error(r, 503, [], "deadline_unmeetable")
        assert r.headers["retry-after"] == "3" and "deadline" in r.json()["detail"][0]["msg"]
        monkeypatch.undo()

        def refuse_all(group):
            for e in group:
                e.future.set_exception(Late(0.2))
            return []

        monkeypatch.setattr(batcher, "_admit", refuse_all)
        r = c.post("/v1/systemone", json=body())
        assert_error(r, 503, [], "deadline_unmeetable")
        assert r.headers["retry-after"] == "1"
    assert batcher.jobs == 1 and batcher.batches == 1  # collected, then refused unanswered


def test_an_unfitted_checkpoint_answers_directly_by_default(decider):
    """A base checkpoint's T = 1 is not fitted: the default auto mode would escalate on a
    confidence that says nothing about when reasoning helps; it answers directly."""
    from rlcd_lab.files.assets import shipped_checkpoints

    base = DecisionModel.from_checkpoint(shipped_checkpoints()["checkpoints/base-verify"])
    assert not base.T_fitted and decider.T_fitted
    for dm, kwargs, mode in (
        (base, {}, "direct"),
        (base, {"unfitted_auto": True}, "auto"),
        (decider, {}, "auto"),
    ):
        app = create_app(dm, **kwargs)
        with TestClient(app) as c:
            out = c.post("/v1/systemone", json=body(rlcd={})).json()
            assert out["rlcd"]["options"]["mode"] == mode
            assert f"default mode {mode}" in c.get("/v1/models").json()["models"][0]["description"]
    with TestClient(create_app(base)) as c:  # a request may still ask for auto
        out = c.post("/v1/systemone", json=body(rlcd={"mode": "auto", "threshold": 1.0})).json()
        assert all(d["escalated"] for d in out["rlcd"]["answers"].values())


@pytest.mark.smollm2
def test_official_sdk_on_smollm2_within_its_timeout(smollm2_dir):
    """The SDK's ordinary request (four questions, its default 10 s timeout, no retries)
    against SmolLM2, whose T is not fitted: by default answered directly; with auto forced
    (three of the four escalated, 11.5-12.7 s before) the deadline returns in time."""
    torch.set_num_threads(1)
    decider = DecisionModel.from_checkpoint(smollm2_dir)
    questions = {
        "positive": Noul(instructions="Is the review positive?"),
        "topic": Choice(criteria={"food": "about the food", "service": None, "price": None}),
        "stars": Score(criteria=["bad", "fine", "great"]),
        "recommend": Noul(instructions="Would the writer come back?"),
    }
    state = "The soup was cold and the waiter ignored us, but the bread was lovely."
    for kwargs in ({}, {"unfitted_auto": True, "deadline": 3.0}):
        deadline = {k: v for k, v in kwargs.items() if k == "deadline"}
        auto = {k: v for k, v in kwargs.items() if k != "deadline"}
        app = create_app(decider, ServeOptions(api_key=KEY, **deadline), **auto)
        with running(app) as (url, _), sdk(url) as c:
            t0 = time.perf_counter()
            r = c.system_one(state=state, questions=questions)
            elapsed = time.perf_counter() - t0
        assert elapsed < 10.0, (kwargs, elapsed)
        assert set(r.nouls) == {"positive", "recommend"} and r.choices["topic"].choice
        assert 0.0 <= r.scores["stars"].score <= 2.0
    assert not decider.T_fitted  # why the default is direct


def test_decide_batch_skips_cancelled_requests(decider, monkeypatch):
    opts = DecideOptions(mode="direct")
    out = decider.decide_batch(
        [(STATES[0], QUESTIONS, opts), (STATES[1], QUESTIONS, opts)], lambda i: i == 1
    )
    assert close(out[0].answers, decider.decide(STATES[0], QUESTIONS, mode="direct").answers)
    assert isinstance(out[1], DecisionError) and "cancelled" in out[1].msg
    calls = []
    real = decider.reader.sample
    monkeypatch.setattr(decider.reader, "sample", lambda *a, **k: calls.append(1) or real(*a, **k))
    checks = iter([False])  # alive when planned, gone before the reason phase
    out = decider.decide_batch(
        [(STATES[0], QUESTIONS, DecideOptions(mode="reason", m=2))], lambda i: next(checks, True)
    )
    assert isinstance(out[0], DecisionError) and calls == []
    out = decider.decide_batch([(STATES[0], QUESTIONS, DecideOptions(mode="reason", m=2))])
    assert not isinstance(out[0], DecisionError) and calls == [1]  # the hook, not the mode


def test_texts_are_measured_in_characters_before_tokenising(client, app, decider):
    jobs = app.state.batcher.jobs
    calls = []
    real = decider._encode
    decider._encode = lambda text: calls.append(len(text)) or real(text)
    try:
        resp = client.post("/v1/systemone", json=body(state="1" * 300_000))
        assert_error(resp, 422, ["body", "state"], "too_long")
        assert "300000 characters" in resp.json()["detail"][0]["msg"]
        resp = client.post("/v1/systemone", json=body(state=[[]] * 50_000))  # 200k as JSON
        assert_error(resp, 422, ["body", "state"], "too_long")
        long_q = {"q": {"type": "noul", "instructions": "x" * 20_000}}
        resp = client.post("/v1/systemone", json=body(questions=long_q))
        assert_error(resp, 422, ["body", "questions", "q"], "too_long")
    finally:
        del decider._encode
    assert calls == [] and app.state.batcher.jobs == jobs


def test_the_event_loop_answers_while_a_body_of_tiny_nodes_is_parsed(decider):
    """750 KB of empty arrays: parsed in a worker thread, with the loaded model's objects
    frozen out of the garbage collector (before: /health waited 1.1 s)."""
    raw = b'{"model": "jev-latest", "state": [' + b",".join([b"[]"] * 250_000) + b"]}"
    waits: list[float] = []

    def poll(live: str) -> None:
        with httpx.Client(base_url=live) as h:
            h.get("/health")
            t_end = time.time() + 1.5
            while time.time() < t_end:
                t0 = time.perf_counter()
                assert h.get("/health").status_code == 200
                waits.append(time.perf_counter() - t0)
                time.sleep(0.005)

    app = create_app(decider, ServeOptions(mode="direct"))  # 1 MiB bodies
    with running(app) as (live, _), ThreadPoolExecutor(1) as pool:
        polling = pool.submit(poll, live)
        time.sleep(0.1)
        for _ in range(3):
            resp = httpx.post(
                f"{live}/v1/systemone",
                content=raw,
                headers={"content-type": "application/json"},
                timeout=30,
            )
            assert resp.status_code == 422
        polling.result()
    assert max(waits) < 0.5, sorted(waits)[-5:]


def test_connection_timeouts(app, caplog):
    """Idle, slow-header and slow-body connections are closed (they were held forever)."""
    caplog.set_level(logging.INFO, logger="rlcd_lab.server")
    with running(app, timeout_request=0.5, timeout_keep_alive=0.3) as (url, server):
        idle, slow_head, slow_body, kept = Raw(url), Raw(url), Raw(url), Raw(url)
        slow_head.send(b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        slow_body.send(
            b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer test-key-123"
            b"\r\nContent-Length: 500\r\n\r\n{"
        )
        status, headers, _ = kept.request("GET", "/health")
        assert status == 200 and len(headers[REQUEST_ID_HEADER]) == 32
        for conn in (idle, slow_head, slow_body, kept):
            assert conn.closed_within(5)
            conn.close()
        while server.server_state.connections:
            time.sleep(0.01)
        fast = Raw(url)
        for _ in range(3):  # a client that keeps sending keeps its connection
            assert fast.request("GET", "/health")[0] == 200
            time.sleep(0.1)
        fast.close()
    assert sum("abandoned" in r.message for r in caplog.records) == 1  # the slow body


def test_idle_connections_hold_no_work_slot(decider):
    """257 sockets that send nothing used to count against --limit-concurrency (256): /health
    and every request answered 503 until the 15 s request timeout. Idle sockets now hold no
    work slot, and beyond a client's connection bound its longest-idle ones are closed."""
    app = create_app(decider, ServeOptions(mode="direct", limit_concurrency=256))
    with running(app, timeout_request=30) as (url, server):
        idle = [Raw(url) for _ in range(257)]
        t0 = time.perf_counter()
        resp = httpx.get(f"{url}/health")
        assert resp.status_code == 200 and time.perf_counter() - t0 < 2.0
        assert httpx.post(f"{url}/v1/systemone", json=body(), timeout=10).status_code == 200
        # one address keeps at most max_client_connections (64) open: the oldest idle went
        assert len(server.server_state.connections) <= 64
        assert idle[0].closed_within(2) and not idle[-1].closed_within(0.1)
        for conn in idle:
            conn.close()


def test_connection_bounds_refuse_only_when_nothing_is_idle(decider):
    release = threading.Event()

    def slow(real, requests, cancelled):
        release.wait(20)
        return real(requests, cancelled)

    app = create_app(stub(decider, slow), ServeOptions(mode="direct", batching=False))
    with running(app, max_client_connections=2, max_connections=4) as (url, server):
        with ThreadPoolExecutor(2) as pool:
            busy = [pool.submit(httpx.post, f"{url}/v1/systemone", json=body()) for _ in range(2)]
            while app.state.capacity.active < 2:
                time.sleep(0.01)
            resp = httpx.get(f"{url}/health")  # both of this address's connections are busy
            assert_error(resp, 503, [], "overloaded")
            assert resp.headers["retry-after"] == "1" and resp.headers[REQUEST_ID_HEADER]
            release.set()
            assert [f.result().status_code for f in busy] == [200, 200]
        idle = [Raw(url) for _ in range(10)]  # idle ones make room for the newest
        assert Raw(url).request("GET", "/health")[0] == 200
        assert len(server.server_state.connections) <= 4
        for conn in idle:
            conn.close()


def test_in_flight_requests_beyond_capacity_get_a_503(decider):
    release = threading.Event()

    def slow(real, requests, cancelled):
        release.wait(20)
        return real(requests, cancelled)

    app = create_app(stub(decider, slow), ServeOptions(mode="direct", limit_concurrency=1))

    async def go() -> tuple:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            first = asyncio.ensure_future(c.post("/v1/systemone", json=body()))
            await asyncio.sleep(0.3)
            second = await c.post("/v1/systemone", json=body())
            release.set()
            return await first, second

    first, second = asyncio.run(go())
    assert first.status_code == 200
    assert_error(second, 503, [], "overloaded")
    assert second.headers["retry-after"] == "1"


def test_sdk_request_ids_zstd_and_single_option_questions(live, decider):
    pytest.importorskip("backports.zstd")
    from typesafe_sdk import TypeSafeAPIError

    long = "Answer about the arithmetic. " * 60  # >= 1 KiB: the SDK sends zstd
    with sdk(live) as c:
        r = c.system_one(
            state=STATES[2],
            questions={
                "right": Noul(instructions=long),
                "only": Choice(criteria={"Y": "the one label"}),
                "level": Score(criteria=["the one level"]),
            },
        )
        assert r.raw_http_response.request.headers.get("content-encoding") == "zstd"
        assert len(r.request_id) == 32 and int(r.request_id, 16) >= 0
        with pytest.raises(TypeSafeAPIError) as err:
            c.system_one(state=STATES[0], questions={"q": Noul(instructions="?")}, model="x")
        assert err.value.request_id and err.value.request_id != r.request_id
    assert r.choices["only"].choice == "Y" and r.choices["only"].confidence == 1.0
    assert r.choices["only"].probabilities == {"Y": 1.0}
    assert r.scores["level"].score == 0.0 and r.scores["level"].probabilities == {0: 1.0}
    assert r.scores["level"].confidence == 1.0
    want = decider.decide(STATES[2], {"q": {"type": "noul"}}).answers["q"]["noul"]
    assert r.nouls["right"].noul == pytest.approx(want, abs=1e-9)
    assert list(r.raw_http_response.json()["answers"]) == ["right", "only", "level"]


def test_zstd_and_gzip_bodies_are_bounded(client):
    from backports import zstd

    raw = json.dumps(body()).encode()
    for encoding, packed in [("zstd", zstd.compress(raw)), ("gzip", gzip.compress(raw))]:
        assert post_raw(client, packed, **{"content-encoding": encoding}).status_code == 200
        resp = post_raw(client, packed + packed, **{"content-encoding": encoding})
        assert_error(resp, 422, ["body"], "decompression_error")
        assert "trailing data" in resp.json()["detail"][0]["msg"]
        resp = post_raw(client, packed[:-4], **{"content-encoding": encoding})
        assert_error(resp, 422, ["body"], "decompression_error")
    bomb = zstd.compress(json.dumps(body(state="1" * 500_000)).encode())
    assert_error(post_raw(client, bomb, **{"content-encoding": "zstd"}), 413, ["body"])
    wide = zstd.ZstdCompressor(options={zstd.CompressionParameter.window_log: 27})
    frame = wide.compress(raw, mode=zstd.ZstdCompressor.FLUSH_FRAME)  # no size: 128 MiB window
    resp = post_raw(client, frame, **{"content-encoding": "zstd"})
    assert resp.status_code in (200, 422)  # small frames may shrink the window; never a 5xx


def test_content_type_and_host_are_checked(decider):
    app = create_app(decider, ServeOptions(mode="direct"), allowed_hosts=["localhost"])
    with TestClient(app, base_url="http://localhost") as c:
        raw = json.dumps(body()).encode()
        resp = c.post("/v1/systemone", content=raw)  # no Content-Type: was read as JSON
        assert_error(resp, 415, ["header", "content-type"], "unsupported_media_type")
        assert "no Content-Type" in resp.json()["detail"][0]["msg"]
        for ctype in ["text/plain", "application/x-www-form-urlencoded", "application/jsonx"]:
            resp = c.post("/v1/systemone", content=raw, headers={"content-type": ctype})
            assert resp.status_code == 415
        ok = c.post("/v1/systemone", content=raw, headers={"content-type": "application/json"})
        assert ok.status_code == 200
        resp = c.get("/health", headers={"host": "attacker.example"})  # DNS rebinding
        assert resp.status_code == 400 and resp.headers[REQUEST_ID_HEADER]
        assert c.get("/health", headers={"host": "localhost:8000"}).status_code == 200


def test_serve_checks_its_arguments_before_loading(monkeypatch, caplog):
    import rlcd_lab.server.serving as server_mod

    def no_load(*args, **kwargs):
        raise AssertionError("the checkpoint must not be loaded")

    monkeypatch.setattr(DecisionModel, "from_checkpoint", no_load)
    monkeypatch.setattr(server_mod, "_configure_logging", lambda level: None)
    bad = [
        ({"max_wait_ms": float("inf")}, "max_wait_ms"),
        ({"max_wait_ms": float("nan")}, "max_wait_ms"),
        ({"max_wait_ms": -1.0}, "max_wait_ms"),
        ({"max_batch": 0}, "max_batch"),
        ({"port": 70_000}, "port"),
        ({"limit_concurrency": 0}, "limit_concurrency"),
        ({"timeout_request": float("inf")}, "timeout_request"),
        ({"timeout_keep_alive": 0.0}, "timeout_keep_alive"),
        ({"threshold": float("nan")}, "threshold"),
        ({"m": 0}, "m must"),
        ({"allowed_host": ("a*b",)}, "allowed host"),
        ({"device": "warp-drive"}, "device"),
        ({"api_key": "two words"}, "API key"),
        ({"host": ""}, "host"),
        ({"name": ""}, "model names"),
        ({"limits": ServerLimits(max_depth=0)}, "max_depth"),
        ({"threads": 0}, "threads"),
        ({"threads": 1.5}, "threads"),
    ]
    for kwargs, msg in bad:
        opts = {k: v for k, v in kwargs.items() if k in ServeOptions.__dataclass_fields__}
        rest = {k: v for k, v in kwargs.items() if k not in opts}
        with pytest.raises(ValueError, match=msg) as err:
            server_mod.serve(ServeOptions(**opts), **rest)
        assert "\n" not in str(err.value)
    monkeypatch.delenv("RLCD_API_KEY", raising=False)
    caplog.set_level(logging.WARNING, logger="rlcd_lab.server")
    with pytest.raises(AssertionError, match="must not be loaded"):
        server_mod.serve(ServeOptions(host="0.0.0.0"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "without an API key" in warnings[0]
    caplog.clear()
    monkeypatch.setenv("RLCD_API_KEY", "secret")
    with pytest.raises(AssertionError, match="must not be loaded"):
        server_mod.serve(ServeOptions(host="0.0.0.0"))
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_the_command_line_reports_a_bad_flag_in_one_line(monkeypatch, capsys):
    import rlcd_lab.server.serving as server_mod
    from rlcd_lab.cli import main

    monkeypatch.setattr(server_mod, "_configure_logging", lambda level: None)
    with pytest.raises(SystemExit) as err:
        main(["serve", "--max-wait-ms", "inf"])
    said = f"{err.value.code if not isinstance(err.value.code, int) else ''}"
    said += capsys.readouterr().err
    assert "max_wait_ms" in said and "inf" in said and said.strip().count("\n") == 0


def test_serve_accepts_loopback_names_and_the_bound_host(monkeypatch):
    import rlcd_lab.server.serving as server_mod

    seen = {}

    def fake_create_app(checkpoint, opts, **kwargs):
        seen.update(kwargs, limit_concurrency=opts.limit_concurrency)
        raise RuntimeError("stop here")

    monkeypatch.setattr(server_mod, "create_app", fake_create_app)
    monkeypatch.setattr(server_mod, "_configure_logging", lambda level: None)
    with pytest.raises(RuntimeError, match="stop here"):
        server_mod.serve(ServeOptions(host="::1", allowed_host=("lab.example",)))
    assert seen["allowed_hosts"] == ["localhost", "127.0.0.1", "[::1]", "[::1]", "lab.example"]
    assert seen["limit_concurrency"] == 256
    # --threads is applied before the model is loaded (default 1)
    monkeypatch.setattr(
        server_mod, "create_app", lambda *a, **k: seen.update(n=torch.get_num_threads())
    )
    bound = SimpleNamespace(getsockname=lambda: ("127.0.0.1", 8000))
    fake = SimpleNamespace(run=int, sock=bound)
    monkeypatch.setattr(server_mod, "build_server", lambda *a, **k: fake)
    for threads, expected in ((3, 3), (None, 3), (1, 1)):
        server_mod.serve(ServeOptions(threads=threads))
        assert seen["n"] == expected


def test_cost_budget_is_a_clear_422(decider):
    limits = ServerLimits(max_prompt_chars=2_000, max_sampled_tokens=1_000)
    app = create_app(decider, ServeOptions(mode="direct"), limits=limits)
    with TestClient(app) as c:
        qs = {f"q{i}": {"type": "noul"} for i in range(4)}
        reason = {"mode": "reason", "m": 16, "max_new_tokens": 32}  # 16 x 32 x 4 = 2048
        resp = c.post("/v1/systemone", json=body(questions=qs, rlcd=reason))
        assert_error(resp, 422, ["body", "rlcd"], "budget_exceeded")
        assert "16 x 32 x 4 = 2048" in resp.json()["detail"][0]["msg"]
        reason["m"] = 7  # 7 x 32 x 4 = 896
        assert c.post("/v1/systemone", json=body(questions=qs, rlcd=reason)).status_code == 200
        resp = c.post("/v1/systemone", json=body(state="1+1=2?" + " " * 600, questions=qs))
        assert_error(resp, 422, ["body"], "budget_exceeded")  # 4 x 606 + 4 x 16 > 2000
        one = {"q": {"type": "score", "criteria": ["only"]}}  # no model: no cost
        assert c.post("/v1/systemone", json=body(questions=one, rlcd=reason)).status_code == 200
        assert app.state.batcher.jobs == 1


def test_a_request_cut_by_shutdown_gets_a_503_not_a_500(decider, caplog):
    """SIGTERM (``should_exit``) while a request runs past the graceful shutdown: the client
    used to get uvicorn's 500 and the log a traceback; now a 503 with Retry-After."""
    release = threading.Event()

    def stuck(real, requests, cancelled):
        release.wait(30)
        return real(requests, cancelled)

    caplog.set_level(logging.INFO)
    app = create_app(stub(decider, stuck), ServeOptions(mode="direct"))
    port = free_port()
    server = build_server(app, port=port, log_level="info", timeout_graceful_shutdown=0.5)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        with ThreadPoolExecutor(1) as pool:
            url = f"http://127.0.0.1:{port}/v1/systemone"
            pending = pool.submit(httpx.post, url, json=body(), timeout=30)
            while app.state.capacity.active < 1:
                time.sleep(0.01)
            server.should_exit = True  # what SIGTERM does
            resp = pending.result()
        thread.join(10)
        assert not thread.is_alive()
    finally:
        release.set()
    assert_error(resp, 503, [], "shutting_down")
    assert resp.headers["retry-after"] == "1" and resp.headers[REQUEST_ID_HEADER]
    assert not [r for r in caplog.records if r.exc_info], "no traceback"
    assert not any("Exception in ASGI application" in r.getMessage() for r in caplog.records)


def test_a_port_in_use_is_one_line_and_status_2(monkeypatch, capsys):
    import rlcd_lab.server.serving as server_mod
    from rlcd_lab.cli import main

    monkeypatch.setattr(server_mod, "_configure_logging", lambda level: None)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(SystemExit) as err:
            main(["serve", "--port", str(port)])
    assert err.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    # checked before the checkpoint loads (tests/test_hardening.py): names host, port, --port
    assert len(lines) == 1 and lines[0].startswith("rlcd-lab: error: port"), lines
    assert f"port {port} on 127.0.0.1 is already in use" in lines[0] and "--port" in lines[0]


def test_a_port_out_of_range_is_one_line_naming_it(monkeypatch, capsys):
    """``serve --port -1`` used to say "unknown host" (the address lookup failed on it)."""
    import rlcd_lab.server.serving as server_mod
    from rlcd_lab.cli import main

    monkeypatch.setattr(server_mod, "serve", lambda *a, **k: pytest.fail("must not serve"))
    for port in ("-1", "65536"):
        with pytest.raises(SystemExit) as err:
            main(["serve", "--port", port])
        assert err.value.code == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(lines) == 1 and "--port" in lines[0] and f"got {port}" in lines[0], lines
        assert "0..65535" in lines[0] and "unknown host" not in lines[0]


def test_serve_logs_its_url_models_and_whether_a_key_is_required(monkeypatch, caplog):
    """Once bound, ``serve`` logs one line: the URL with the port it bound (also for port
    0), the model's name and aliases, the checkpoint and whether a key is required."""
    import rlcd_lab.server.serving as server_mod

    bound = []

    def build_not_run(*args, **kwargs):
        server = build_server(*args, **kwargs)
        bound.append(server.sock.getsockname()[1])
        server.run = server.sock.close  # bound, never listening
        return server

    monkeypatch.setattr(server_mod, "build_server", build_not_run)
    monkeypatch.setattr(server_mod, "_configure_logging", lambda level: None)
    caplog.set_level(logging.INFO, logger="rlcd_lab.server")
    for key, says in ((None, "no API key is required"), ("s3cret", "an API key is required")):
        monkeypatch.delenv("RLCD_API_KEY", raising=False)
        caplog.clear()
        server_mod.serve(ServeOptions(port=0, api_key=key))
        lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("serving")]
        assert len(lines) == 1 and bound[-1] != 0
        line = lines[0]
        assert f"http://127.0.0.1:{bound[-1]}/v1/systemone" in line
        assert "'rlcd-verify-reinforce'" in line and "jev-latest" in line
        assert str(default_checkpoint()) in line and says in line and "s3cret" not in line


def test_a_huge_request_head_is_431(app):
    headers = [("Authorization", f"Bearer {KEY}")]
    with running(app) as (url, _):
        for chunks in (1, 50):  # all at once, and in pieces
            conn = Raw(url)
            head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 100_000
            step = len(head) // chunks + 1
            with contextlib.suppress(ConnectionError):  # it may answer before the end
                for i in range(0, len(head), step):
                    conn.send(head[i : i + step])
                    time.sleep(0.002 * (chunks > 1))
                    if select.select([conn.sock], [], [], 0)[0]:
                        break  # answered already: stop sending
                else:
                    conn.send(b"\r\n\r\n")
            conn.sock.settimeout(5)
            data = b""
            with contextlib.suppress(ConnectionError, TimeoutError):
                while chunk := conn.sock.recv(65536):
                    data += chunk
            conn.close()
            assert data.startswith(b"HTTP/1.1 431 "), data[:200]
            assert REQUEST_ID_HEADER.encode() in data and b"header_too_large" in data
        conn = Raw(url)  # a large but reasonable head still passes
        status, _, _ = conn.request("GET", "/v1/models", headers=[*headers, ("X-Ok", "b" * 8000)])
        assert status == 200
        conn.close()


def test_the_command_line_defaults_are_the_servers():
    from rlcd_lab.server import connections
    from rlcd_lab.server.options import DEFAULT_DEADLINE_S

    cfg = ServeOptions()
    assert cfg.deadline == DEFAULT_DEADLINE_S
    assert cfg.max_connections == connections.MAX_CONNECTIONS
    assert cfg.max_client_connections == connections.MAX_CLIENT_CONNECTIONS


def test_a_stuck_request_does_not_block_shutdown(decider):
    release = threading.Event()

    def stuck(real, requests, cancelled):
        release.wait(30)
        return real(requests, cancelled)

    app = create_app(stub(decider, stuck), ServeOptions(mode="direct"))
    port = free_port()
    server = build_server(app, port=port, log_level="critical", timeout_graceful_shutdown=0.5)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(
            httpx.post, f"http://127.0.0.1:{port}/v1/systemone", json=body(), timeout=30
        )
        time.sleep(0.3)
        t0 = time.perf_counter()
        server.should_exit = True  # what SIGTERM does
        thread.join(10)
        assert not thread.is_alive() and time.perf_counter() - t0 < 5
        release.set()
        with pytest.raises(httpx.HTTPError):
            pending.result().raise_for_status()


def test_the_documented_curl_example_follows_the_schema_and_the_label_rule():
    """docs/server.md's raw request validates with the request schema, and its captured
    response reads the labels by meaning: ``yes`` and level 1 (``right``) are the ``Y``
    option, whose probability is the noul's p(yes); ``no`` and level 0 (``wrong``) are
    ``N``; the choice is the argmax, the score the expected level."""
    from pathlib import Path

    from rlcd_lab.decide.jev import SystemOneRequest

    text = (Path(__file__).parents[1] / "docs" / "server.md").read_text(encoding="utf-8")

    def block(marker: str) -> dict:
        return json.loads(text.split(marker, 1)[1].split("```json", 1)[1].split("```", 1)[0])

    request, response = block("<!-- curl-request -->"), block("<!-- curl-response -->")
    typed = SystemOneRequest.model_validate(request).typed_questions()
    assert set(typed) == set(response["answers"]) and request["model"] == "jev-latest"
    a = response["answers"]
    p_yes, verdict, level = a["right"]["noul"], a["verdict"], a["level"]
    assert verdict["probabilities"]["yes"] == level["probabilities"]["1"] == p_yes
    assert verdict["probabilities"]["no"] == level["probabilities"]["0"]
    assert verdict["probabilities"]["no"] + p_yes == pytest.approx(1.0, abs=1e-12)
    assert verdict["choice"] == ("yes" if p_yes > 0.5 else "no")
    assert level["score"] == pytest.approx(p_yes, abs=1e-12)
    assert level["legend"] == {"0": "wrong", "1": "right"}
    assert "curl -s http://127.0.0.1:" in text and "Content-Type: application/json" in text
