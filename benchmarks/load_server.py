"""Load test of the decision server as ``rlcd-lab serve`` runs it: errors, latency, 503s.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/load_server.py [--concurrency 16 600]
        [--requests 1200] [--limit-concurrency 256] [--checkpoint DIR]

The server runs in a child process (``build_server``: read timeouts, the capacity limit
``--limit-concurrency``, request ids; direct mode, three questions per request about one
``verify`` test item) on a free 127.0.0.1 port. For each ``--concurrency`` C, C clients
(each its own connection) share ``--requests`` requests; a client answered 503 waits the
``Retry-After`` it was given (1 s when absent) and sends the same request again, as the
official client does. Prints per C: requests answered, 503s (with and without
``Retry-After``), errors (transport errors and any other status), p50 and p99 latency of
the answered attempts (ms), p99 from first attempt to answer (retries included), the
wall time, requests answered per second, and the CPU seconds the load client itself
used (user + system of this process: on a small machine the client competes with the
server for the cores, so a client near one core's worth of CPU per wall second bounds
what can be measured).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import multiprocessing as mp
import os
import time
from pathlib import Path

import httpx
import numpy as np
from serve import QUESTIONS, free_port, wait_up  # benchmarks/serve.py, beside this script

from rlcd_lab.decide import DecisionModel
from rlcd_lab.decide.answering import DecideOptions
from rlcd_lab.server.app import create_app, default_checkpoint
from rlcd_lab.server.connections import build_server
from rlcd_lab.tasks import load_task_items


def serve_child(checkpoint: str, port: int, limit: int) -> None:
    decider = DecisionModel.from_checkpoint(checkpoint)
    app = create_app(decider, options=DecideOptions(mode="direct"), limit_concurrency=limit)
    # every client here comes from 127.0.0.1: no per-address cap (the total cap stays)
    build_server(app, port=port, log_level="critical", max_client_connections=None).run()


async def load(url: str, states: list[str], clients: int) -> dict:
    todo = list(reversed(states))
    attempt_ms: list[float] = []
    total_ms: list[float] = []
    counts: collections.Counter = collections.Counter()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:

        async def client() -> None:
            while todo:
                body = {"model": "jev-latest", "state": todo.pop(), "questions": QUESTIONS}
                first = time.perf_counter()
                while True:
                    t0 = time.perf_counter()
                    try:
                        r = await http.post("/v1/systemone", json=body)
                    except httpx.TransportError as err:
                        counts[f"transport {type(err).__name__}"] += 1
                        break
                    if r.status_code == 503:
                        wait = r.headers.get("retry-after")
                        counts["503 with Retry-After" if wait else "503 without"] += 1
                        await asyncio.sleep(float(wait or 1))
                        continue
                    if r.status_code != 200:
                        counts[f"status {r.status_code}"] += 1
                        break
                    now = time.perf_counter()
                    attempt_ms.append((now - t0) * 1000)
                    total_ms.append((now - first) * 1000)
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
    args = ap.parse_args()
    if args.requests < 1 or any(not 1 <= c <= 5000 for c in args.concurrency):
        ap.error("--requests must be >= 1 and each --concurrency in 1..5000")
    checkpoint = str(args.checkpoint or default_checkpoint())
    items = [it.prompt for it in load_task_items("verify", "test")]
    states = [items[i % len(items)] for i in range(args.requests)]
    port = free_port()
    proc = mp.get_context("spawn").Process(
        target=serve_child, args=(checkpoint, port, args.limit_concurrency)
    )
    proc.start()
    url = f"http://127.0.0.1:{port}"
    rows = []
    try:
        wait_up(url, proc)
        for c in args.concurrency:
            rows.append((c, asyncio.run(load(url, states, c))))
        alive = httpx.get(f"{url}/health").status_code == 200
    finally:
        proc.terminate()
        proc.join(30)
    print(
        f"checkpoint {checkpoint}, direct mode, 3 questions per request, "
        f"{args.requests} requests per run, --limit-concurrency {args.limit_concurrency}"
    )
    head = ["clients", "answered", "503+RA", "503 no RA", "errors", "p50 ms", "p99 ms"]
    head += ["p99 e2e ms", "wall s", "req/s", "client cpu"]
    print(" ".join(f"{h:>10}" for h in head))
    for c, out in rows:
        k = out["counts"]
        errors = sum(v for key, v in k.items() if key.startswith(("transport", "status")))
        a, t = np.array(out["attempt"] or [np.nan]), np.array(out["total"] or [np.nan])
        row = [c, k["answered"], k["503 with Retry-After"], k["503 without"], errors]
        row += [f"{np.percentile(a, 50):.0f}", f"{np.percentile(a, 99):.0f}"]
        row += [f"{np.percentile(t, 99):.0f}", f"{out['wall']:.1f}"]
        row += [f"{k['answered'] / out['wall']:.0f}", f"{out['cpu']:.1f}s"]
        print(" ".join(f"{v:>10}" for v in row))
        other = {key: v for key, v in k.items() if key.startswith(("transport", "status"))}
        if other:
            print(f"{'':>10} errors: {other}")
    print(f"server alive afterwards: {'yes' if alive else 'NO'}")
    print("client cpu: CPU seconds (user + system) of the load client during the run")


if __name__ == "__main__":
    main()
