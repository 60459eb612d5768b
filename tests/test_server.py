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
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from fastapi.testclient import TestClient

from rlcd_lab.decide import DecideOptions, DecisionModel
from rlcd_lab.server import ServerLimits, build_server, create_app, default_checkpoint

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
        api_key=KEY,
        options=DecideOptions(mode="direct"),
        limits=ServerLimits(max_body_bytes=400_000, max_questions=8),
        max_wait_ms=50.0,
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
    rlcd = {"mode": "auto", "threshold": 0.5, "m": 2, "rationales": True, "seed": 3}
    ext = client.post("/v1/systemone", json=body(rlcd=rlcd)).json()
    assert ext["rlcd"]["options"]["mode"] == "auto" and ext["rlcd"]["temperature"] > 1
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
    solo = create_app(decider, options=DecideOptions(mode="direct"), batching=False)
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
    app = create_app(dm, options=DecideOptions(mode="direct"), max_wait_ms=100.0)

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
