"""Load test of the decision server as ``rlcd-lab serve`` runs it: errors, latency, 503s,
deadlines.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/load_server.py [--concurrency 16 600]
        [--requests 1200] [--limit-concurrency 256] [--checkpoint DIR] [--sdk]
        [--mode direct|auto|reason|default] [--deadline 8] [--margin 0.5]

The server runs in a child process (``build_server``: read timeouts, the capacity limit
``--limit-concurrency``, request ids, the deadline ``--deadline`` and its admission;
``--mode`` answers, ``default`` the server's own default: ``auto`` for a checkpoint whose
T was fitted, else ``direct``; three questions per request about one ``verify`` test item)
on a free 127.0.0.1 port. For each ``--concurrency`` C, C clients (each its own
connection: an ``httpx`` client, or with ``--sdk`` the official ``AsyncTypeSafeClient``
with its default 10 s timeout) share ``--requests`` requests; a client answered 503 waits
the ``Retry-After`` it was given (1 s when absent) and sends the same request again, as
the official client does. Prints per C: requests answered, 503s (with and without
``Retry-After``; ``late 503``: refused because the queue could not meet the deadline),
errors (transport errors, timeouts and any other status), p50 and p99 latency of the
answered attempts (ms), the fraction of attempts answered (or timed out) past
``--deadline`` plus ``--margin`` seconds (the server's promise: 0), p99 from first attempt
to answer (retries included), the wall time, requests answered per second (the
capacity), and the CPU seconds the load client itself used (user + system of this
process: on a small machine the client competes with the server for the cores, so a
client near one core's worth of CPU per wall second bounds what can be measured).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import multiprocessing as mp
import os
import time
from pathlib import Path

import httpx
import numpy as np
from serve import QUESTIONS, free_port, wait_up  # benchmarks/serve.py, beside this script

from rlcd_lab.decide import DecisionModel
from rlcd_lab.server.app import create_app, default_checkpoint
from rlcd_lab.server.connections import build_server
from rlcd_lab.server.options import ServeOptions
from rlcd_lab.tasks import load_task_items


def serve_child(checkpoint: str, port: int, limit: int, mode: str, deadline: float) -> None:
    decider = DecisionModel.from_checkpoint(checkpoint)
    modes = {} if mode == "default" else {"mode": mode}
    app = create_app(decider, ServeOptions(**modes, limit_concurrency=limit, deadline=deadline))
    # every client here comes from 127.0.0.1: no per-address cap (the total cap stays)
    build_server(app, port=port, log_level="critical", max_client_connections=None).run()


def sdk_questions() -> dict:
    """:data:`QUESTIONS` as the official client's question objects."""
    from typesafe_sdk import Choice, Noul, Score

    kinds = {"noul": Noul, "choice": Choice, "score": Score}
    return {
        n: kinds[q["type"]](**{k: v for k, v in q.items() if k != "type"})
        for n, q in QUESTIONS.items()
    }


def http_poster(url: str, clients: int) -> tuple[contextlib.AbstractAsyncContextManager, ...]:
    """``(context, post)``: ``post(state)`` sends one request with ``httpx`` and returns
    ``(status, headers, error type)``."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    http = httpx.AsyncClient(base_url=url, timeout=120, limits=limits)

    async def post(state: str) -> tuple[int, dict, str]:
        body = {"model": "jev-latest", "state": state, "questions": QUESTIONS}
        try:
            r = await http.post("/v1/systemone", json=body)
        except httpx.TransportError as err:
            return 0, {}, f"transport {type(err).__name__}"
        kind = r.json()["detail"][0]["type"] if r.status_code != 200 else ""
        return r.status_code, dict(r.headers), kind

    return http, post


def sdk_poster(url: str) -> tuple[contextlib.AbstractAsyncContextManager, ...]:
    """``(context, post)`` as :func:`http_poster`, through the official client (no retries
    of its own: each attempt is timed here; its default 10 s timeout)."""
    from typesafe_sdk import AsyncTypeSafeClient, RetryPolicy, TypeSafeAPIError, TypeSafeError

    client = AsyncTypeSafeClient(base_url=url, api_key="unused", retry=RetryPolicy(max_retries=0))
    questions = sdk_questions()

    async def post(state: str) -> tuple[int, dict, str]:
        try:
            await client.system_one(state=state, questions=questions)
        except TypeSafeAPIError as err:
            detail = err.body.get("detail") if isinstance(err.body, dict) else None
            kind = detail[0].get("type", "") if isinstance(detail, list) and detail else ""
            return err.status, dict(err.headers), kind
        except TypeSafeError as err:
            return 0, {}, f"transport {type(err).__name__}"
        return 200, {}, ""

    return client, post


async def load(url: str, states: list[str], clients: int, sdk: bool, late_s: float) -> dict:
    """``clients`` concurrent clients share ``states``; per attempt its latency, whether it
    was answered (or timed out) past ``late_s`` seconds, and the counts by outcome."""
    todo = list(reversed(states))
    attempt_ms: list[float] = []
    total_ms: list[float] = []
    counts: collections.Counter = collections.Counter()
    context, post = sdk_poster(url) if sdk else http_poster(url, clients)
    async with context:

        async def client() -> None:
            while todo:
                state = todo.pop()
                first = time.perf_counter()
                while True:
                    t0 = time.perf_counter()
                    status, headers, kind = await post(state)
                    took = time.perf_counter() - t0
                    counts["attempts"] += 1
                    counts["past deadline"] += took > late_s and status in (0, 200)
                    if status == 503:
                        wait = headers.get("retry-after")
                        counts["503 with Retry-After" if wait else "503 without"] += 1
                        counts["late 503"] += kind == "deadline_unmeetable"
                        await asyncio.sleep(float(wait or 1))
                        continue
                    if status != 200:
                        counts[kind if status == 0 else f"status {status}"] += 1
                        break
                    attempt_ms.append(took * 1000)
                    total_ms.append((time.perf_counter() - first) * 1000)
                    counts["answered"] += 1
                    break

        t0, cpu0 = time.perf_counter(), os.times()
        await asyncio.gather(*(client() for _ in range(clients)))
        wall, cpu1 = time.perf_counter() - t0, os.times()
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    out = {"counts": counts, "attempt": attempt_ms, "total": total_ms, "wall": wall}
    return out | {"cpu": cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 600])
    ap.add_argument("--requests", type=int, default=1200)
    ap.add_argument("--limit-concurrency", type=int, default=256)
    ap.add_argument("--checkpoint", type=Path, default=None)
    ap.add_argument("--sdk", action="store_true", help="clients: the official AsyncTypeSafeClient")
    ap.add_argument("--mode", choices=["direct", "auto", "reason", "default"], default="direct")
    ap.add_argument("--deadline", type=float, default=8.0, help="the server's deadline_s")
    ap.add_argument("--margin", type=float, default=0.5, help="seconds past the deadline allowed")
    args = ap.parse_args()
    if args.requests < 1 or any(not 1 <= c <= 5000 for c in args.concurrency):
        ap.error("--requests must be >= 1 and each --concurrency in 1..5000")
    if not (0 < args.deadline <= 3600 and 0 <= args.margin <= 60):
        ap.error("--deadline must be in (0, 3600] and --margin in [0, 60]")
    checkpoint = str(args.checkpoint or default_checkpoint())
    items = [it.prompt for it in load_task_items("verify", "test")]
    states = [items[i % len(items)] for i in range(args.requests)]
    port = free_port()
    proc = mp.get_context("spawn").Process(
        target=serve_child,
        args=(checkpoint, port, args.limit_concurrency, args.mode, args.deadline),
    )
    proc.start()
    url = f"http://127.0.0.1:{port}"
    rows = []
    try:
        wait_up(url, proc)
        for c in args.concurrency:
            late_s = args.deadline + args.margin
            rows.append((c, asyncio.run(load(url, states, c, args.sdk, late_s))))
        alive = httpx.get(f"{url}/health").status_code == 200
    finally:
        proc.terminate()
        proc.join(30)
    print(
        f"checkpoint {checkpoint}, mode {args.mode}, deadline {args.deadline:g} s "
        f"(past it: more than {args.deadline + args.margin:g} s), 3 questions per request, "
        f"{args.requests} requests per run, --limit-concurrency {args.limit_concurrency}, "
        f"clients {'typesafe-sdk' if args.sdk else 'httpx'}"
    )
    head = ["clients", "answered", "503+RA", "late 503", "503 no RA", "errors", "p50 ms"]
    head += ["p99 ms", "past dl", "p99 e2e ms", "wall s", "req/s", "client cpu"]
    print(" ".join(f"{h:>10}" for h in head))
    for c, out in rows:
        k = out["counts"]
        errors = sum(v for key, v in k.items() if key.startswith(("transport", "status")))
        a, t = np.array(out["attempt"] or [np.nan]), np.array(out["total"] or [np.nan])
        row = [c, k["answered"], k["503 with Retry-After"], k["late 503"], k["503 without"]]
        row += [errors, f"{np.percentile(a, 50):.0f}", f"{np.percentile(a, 99):.0f}"]
        row += [f"{k['past deadline']}/{k['attempts']}"]
        row += [f"{np.percentile(t, 99):.0f}", f"{out['wall']:.1f}"]
        row += [f"{k['answered'] / out['wall']:.0f}", f"{out['cpu']:.1f}s"]
        print(" ".join(f"{v:>10}" for v in row))
        other = {key: v for key, v in k.items() if key.startswith(("transport", "status"))}
        if other:
            print(f"{'':>10} errors: {other}")
    print(f"server alive afterwards: {'yes' if alive else 'NO'}")
    print("client cpu: CPU seconds (user + system) of the load client during the run")
    print("past dl: attempts answered or timed out after the deadline plus the margin / all")


if __name__ == "__main__":
    main()
