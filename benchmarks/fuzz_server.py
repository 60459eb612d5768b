"""Long fuzz of the decision server: seeded hostile and valid bodies, counted by status.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/fuzz_server.py [--requests 10000]
        [--clients 8] [--seed 0] [--checkpoint DIR]

The server runs in a child process as ``rlcd-lab serve`` runs it (``build_server``: read
timeouts, capacity limit, request ids; direct mode, default limits) on a free 127.0.0.1
port. ``--clients`` keep-alive connections send ``--requests`` bodies drawn from a seeded
generator (``random.Random(seed)``): valid Jev requests, the same with one part replaced
by random JSON (wrong types, extra fields, one-option questions, ``rlcd`` extensions),
random JSON documents, then byte mutations (numbers that overflow or have thousands of
digits, NaN, deep nesting, duplicate keys, lone surrogates, truncation, bad UTF-8, UTF-16,
a BOM) and headers (content types; identity, gzip, zstd, truncated or unknown encodings).
Prints one row: requests, the count per status, 5xx answers, transport errors (a dropped
connection, a timeout), answers without a request id, and seconds; then checks that the
server still answers a valid request. ``tests/test_server_fuzz.py`` is the short,
hypothesis-driven version run by ``make test``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gzip
import json
import multiprocessing as mp
import random
import string
import time
from pathlib import Path

import httpx
from serve import free_port, wait_up  # benchmarks/serve.py, beside this script

from rlcd_lab.decide import DecisionModel
from rlcd_lab.server.app import create_app, default_checkpoint
from rlcd_lab.server.connections import build_server
from rlcd_lab.server.hardening import REQUEST_ID_HEADER
from rlcd_lab.server.options import ServeOptions

try:
    from compression import zstd  # Python >= 3.14
except ImportError:
    from backports import zstd

VALID = {
    "model": "jev-latest",
    "state": "33+60+20=113?",
    "questions": {
        "right": {"type": "noul", "instructions": "Is the proposed sum right?"},
        "verdict": {"type": "choice", "criteria": {"Y": "right", "N": "wrong"}},
        "level": {"type": "score", "criteria": ["right", "wrong"]},
    },
}
HOSTILE_TOKENS = [
    b"1e999",
    b"-1E+400",
    b"NaN",
    b"Infinity",
    b"7" * 5000,
    b"-" + b"9" * 4301,
    b"1" * 101,
    b"0.5e-99999",
    b'"\\ud800"',
    b'"\\udfff\\ud800"',
    b"[" * 200 + b"]" * 200,
    b"[" * 33 + b"]" * 33,
    b"{" * 50,
    b'{"a": 1, "a": 2}',
    b"true",
    b"null",
    b'""',
    b'"' + b"x" * 40_000 + b'"',
]
TEXTS = ["33+60+20=113?", "47+38+16=91?", "", "  ", "Y", "N", "\u202e", "\x00", "🙂", "é" * 9]
LABELS = ["Y", "N", "A", "B", "yes", "no", " Y", "Y\n", "", "é", "x" * 300]


class Gen:
    """Seeded request bodies, mutations and headers."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)

    def text(self) -> str:
        r = self.r
        if r.random() < 0.5:
            return r.choice(TEXTS)
        alphabet = string.printable + "éü🙂\u202e\u0000\u2028"
        return "".join(r.choice(alphabet) for _ in range(r.randint(0, 20)))

    def scalar(self):
        r = self.r
        return r.choice(
            [
                None,
                r.random() < 0.5,
                r.randint(-(10**30), 10**30),
                r.uniform(-1e300, 1e300),
                r.random(),
                self.text(),
            ]
        )

    def value(self, depth: int = 0):
        r = self.r
        if depth > 3 or r.random() < 0.5:
            return self.scalar()
        if r.random() < 0.5:
            return [self.value(depth + 1) for _ in range(r.randint(0, 4))]
        return {self.text(): self.value(depth + 1) for _ in range(r.randint(0, 4))}

    def question(self):
        r = self.r
        kind = r.choice(["noul", "choice", "score", "other"])
        q: dict = {"type": kind}
        if kind == "noul" and r.random() < 0.5:
            q["criteria"] = {r.choice(["true", "false", "maybe"]): self.value()}
        elif kind == "choice":
            q["criteria"] = {r.choice(LABELS): r.choice([None, self.text()]) for _ in range(4)}
        elif kind == "score":
            q["criteria"] = [self.value() for _ in range(r.randint(0, 12))]
        elif kind == "other":
            return self.value()
        if r.random() < 0.3:
            q["instructions"] = self.value()
        if r.random() < 0.1:
            q[self.text()] = self.value()
        return q

    def rlcd(self):
        r = self.r
        options = {
            "mode": r.choice(["direct", "reason", "auto", "slow"]),
            "m": r.randint(-1, 20),
            "threshold": r.choice([r.uniform(-1, 2), True]),
            "max_new_tokens": r.randint(0, 2000),
            "seed": r.randint(-1, 2**32),
            "rationales": r.random() < 0.5,
            "aggregate": r.choice(["mixture", "single", 3]),
        }
        return {k: v for k, v in options.items() if r.random() < 0.3}

    def body(self):
        r = self.r
        roll = r.random()
        if roll < 0.25:
            return VALID
        if roll < 0.7:  # the valid request with one part replaced
            part = r.choice(["state", "questions", "rlcd", "model", "assets", "extra"])
            new = {
                "state": lambda: r.choice([self.text(), self.value()]),
                "questions": lambda: {self.text(): self.question() for _ in range(r.randint(1, 3))},
                "rlcd": self.rlcd,
            }.get(part, self.scalar)()
            return {**VALID, part: new}
        return {
            "model": r.choice(["jev-latest", "other", "", None, 3]),
            "state": self.value(),
            "questions": r.choice([self.value(), {self.text(): self.question()}]),
        }

    def mutate(self, raw: bytes) -> bytes:
        r = self.r
        kind = r.choices(
            ["none", "value", "truncate", "bad utf-8", "bom", "utf-16", "wrap"],
            weights=[10, 4, 1, 1, 1, 1, 1],
        )[0]
        if kind == "value":
            spots = [i + 1 for i, c in enumerate(raw) if c in b":["] or [len(raw)]
            at = r.choice(spots)
            end = at
            while end < len(raw) and raw[end] not in b",}]":
                end += 1
            return raw[:at] + b" " + r.choice(HOSTILE_TOKENS) + raw[end:]
        at = r.randint(0, len(raw))
        return {
            "none": raw,
            "truncate": raw[:at],
            "bad utf-8": raw[:at] + b"\xff\xfe" + raw[at:],
            "bom": b"\xef\xbb\xbf" + raw,
            "utf-16": raw.decode("utf-8", "surrogatepass").encode("utf-16", "surrogatepass"),
            "wrap": b"[" * (at % 64) + raw + b"]" * (at % 64),
        }[kind]

    def request(self) -> tuple[bytes, dict[str, str]]:
        r = self.r
        text = json.dumps(self.body(), ensure_ascii=r.random() < 0.5)
        raw = text.encode("utf-8", "surrogatepass")
        raw = self.mutate(raw)
        headers: dict[str, str] = {}
        ctype = r.choices(
            ["application/json", "application/json; charset=utf-8", None, "text/plain",
             "multipart/form-data; boundary=x"],
            weights=[14, 2, 1, 1, 1],
        )[0]  # fmt: skip
        if ctype is not None:
            headers["content-type"] = ctype
        encoding = r.choices(
            [None, "identity", "gzip", "zstd", "gzip-truncated", "br", "zstd, gzip"],
            weights=[10, 1, 3, 3, 1, 1, 1],
        )[0]
        if encoding == "gzip":
            raw = gzip.compress(raw)
        elif encoding == "zstd":
            raw = zstd.compress(raw)
        elif encoding == "gzip-truncated":
            raw, encoding = gzip.compress(raw)[:-3], "gzip"
        if encoding is not None:
            headers["content-encoding"] = encoding
        return raw, headers


def serve_child(checkpoint: str, port: int) -> None:
    decider = DecisionModel.from_checkpoint(checkpoint)
    app = create_app(decider, ServeOptions(mode="direct", max_wait_ms=1.0))
    build_server(app, port=port, log_level="critical").run()


async def fuzz(url: str, n: int, clients: int, seed: int) -> dict:
    gen = Gen(seed)
    todo = [gen.request() for _ in range(n)]
    todo.reverse()
    statuses: collections.Counter = collections.Counter()
    transport: collections.Counter = collections.Counter()
    no_id = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:

        async def client() -> None:
            nonlocal no_id
            while todo:
                raw, headers = todo.pop()
                try:
                    resp = await http.post("/v1/systemone", content=raw, headers=headers)
                except httpx.TransportError as err:
                    transport[type(err).__name__] += 1
                    continue
                statuses[resp.status_code] += 1
                no_id += REQUEST_ID_HEADER not in resp.headers

        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        seconds = time.perf_counter() - t0
    return {"statuses": statuses, "transport": transport, "no_id": no_id, "seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint", type=Path, default=None)
    args = ap.parse_args()
    if args.requests < 1 or not 1 <= args.clients <= 64:
        ap.error("--requests must be >= 1 and --clients in 1..64")
    checkpoint = str(args.checkpoint or default_checkpoint())
    port = free_port()
    proc = mp.get_context("spawn").Process(target=serve_child, args=(checkpoint, port))
    proc.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_up(url, proc)
        out = asyncio.run(fuzz(url, args.requests, args.clients, args.seed))
        alive = httpx.post(f"{url}/v1/systemone", json=VALID, timeout=30).status_code == 200
    finally:
        proc.terminate()
        proc.join(30)
    s, t = out["statuses"], out["transport"]
    fivexx = sum(v for k, v in s.items() if k >= 500)
    cols = sorted(s)
    print(f"checkpoint {checkpoint}, {args.clients} keep-alive clients, seed {args.seed}")
    head = ["requests", *map(str, cols), "5xx", "transport", "no id", "seconds"]
    row = [sum(s.values()) + sum(t.values()), *(s[c] for c in cols), fivexx, sum(t.values())]
    row += [out["no_id"], f"{out['seconds']:.1f}"]
    print(" ".join(f"{h:>9}" for h in head))
    print(" ".join(f"{v:>9}" for v in row))
    if t:
        print("transport errors:", dict(t))
    print(f"server answers a valid request afterwards: {'yes' if alive else 'NO'}")


if __name__ == "__main__":
    main()
