"""Loopback load test of the decision server: throughput and latency, batched vs not.

    .venv/bin/python benchmarks/serve.py [--checkpoint DIR] [--clients 16]
        [--direct-requests 192] [--reason-requests 48] [--m 4] [--max-wait-ms 5]
    .venv/bin/python benchmarks/serve.py --under-load [--threads 1 2]

For each mode (``direct``: one forward pass; ``reason``: M sampled rationales per question,
mixture readout) the server runs twice, with dynamic batching and without (every request
answered alone), each time in a fresh child process (uvicorn on a free 127.0.0.1 port),
so that the clients in this process do not share its interpreter lock.
``--clients`` concurrent clients (at most 64) send the requests, each one after the
other; every request asks three questions (noul, choice, score) about one ``verify``
test item. A first pair of runs (mode ``none``) answers without the model: the ceiling
of the HTTP layer (parsing, validation, JSON) on this machine. Prints throughput
(requests/s), p50 and p99 latency (ms) and the mean batch size (from ``/health``), then
the batched/unbatched ratios side by side.

``--under-load``: reason mode with batching only, quiet and then with one busy process
per core (a Python loop each, started before the clients and stopped after them), for
each ``--threads`` setting of the server (``rlcd-lab serve --threads``; 0: torch's
default); prints both throughputs and the quiet/loaded ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import socket
import time
from pathlib import Path

import httpx
import numpy as np
import torch
import uvicorn

from rlcd_lab.decide import DecisionModel
from rlcd_lab.decide.answering import Decision
from rlcd_lab.decide.jev import question_from_wire
from rlcd_lab.server.app import create_app, default_checkpoint
from rlcd_lab.server.options import ServeOptions
from rlcd_lab.tasks import load_task_items

QUESTIONS = {
    "right": {"type": "noul", "instructions": "Is the proposed sum right?"},
    "verdict": {"type": "choice", "criteria": {"Y": "right", "N": "wrong"}},
    "level": {"type": "score", "criteria": ["right", "wrong"]},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(url: str, proc, timeout: float = 120.0) -> None:
    """Poll ``url``/health until the server in child process ``proc`` answers 200;
    ``RuntimeError`` when ``proc`` died or ``timeout`` seconds passed."""
    deadline = time.time() + timeout
    while True:
        try:
            httpx.get(f"{url}/health").raise_for_status()
            return
        except httpx.TransportError:
            if time.time() > deadline or not proc.is_alive():
                raise RuntimeError("the server did not start") from None
            time.sleep(0.1)


async def load(url: str, states: list[str], clients: int) -> tuple[float, list[float]]:
    """Send one request per state from ``clients`` concurrent clients; (wall s, latencies)."""
    todo = list(states)
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as http:

        async def client() -> None:
            while todo:
                body = {"model": "jev-latest", "state": todo.pop(), "questions": QUESTIONS}
                t0 = time.perf_counter()
                r = await http.post("/v1/systemone", json=body)
                latencies.append(time.perf_counter() - t0)
                r.raise_for_status()

        for _ in range(2):  # warm-up
            r = await http.post(
                "/v1/systemone",
                json={"model": "jev-latest", "state": states[0], "questions": QUESTIONS},
            )
            r.raise_for_status()
        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        return time.perf_counter() - t0, latencies


def stub_answers(requests: list, cancelled=None) -> list[Decision]:
    """Fixed answers without touching the model: the HTTP layer's own ceiling."""
    out = []
    for _, questions, _ in requests:
        answers = {n: question_from_wire(q).answer([0.5, 0.5]) for n, q in questions.items()}
        out.append(Decision(answers, {"input_tokens": 0, "output_tokens": 0}))
    return out


def busy() -> None:
    """Keep one core busy until terminated."""
    n = 0
    while True:
        n = (n * 7 + 1) % 1_000_003


def serve_child(
    checkpoint: str, mode: str, m: int, batching: bool, wait: float, port: int, threads: int
):
    """The server process: load the checkpoint, serve until terminated (mode ``none``:
    answer without the model)."""
    if threads:
        torch.set_num_threads(threads)
    decider = DecisionModel.from_checkpoint(checkpoint)
    if mode == "none":
        decider.decide_batch = stub_answers
    app = create_app(
        decider,
        ServeOptions(
            mode="direct" if mode == "none" else mode, m=m, batching=batching, max_wait_ms=wait
        ),
        max_batch=64,
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error")


def run(
    checkpoint: str,
    mode: str,
    batching: bool,
    states: list[str],
    args,
    threads: int = 0,
    loaded: bool = False,
) -> dict[str, float]:
    port = free_port()
    proc = mp.get_context("fork").Process(
        target=serve_child,
        args=(checkpoint, mode, args.m, batching, args.max_wait_ms, port, threads),
        daemon=True,
    )
    hogs = [
        mp.get_context("fork").Process(target=busy, daemon=True)
        for _ in range(os.cpu_count() if loaded else 0)
    ]
    proc.start()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                health = httpx.get(f"{url}/health").json()
                break
            except httpx.TransportError:
                if time.time() > deadline or not proc.is_alive():
                    raise RuntimeError("the server did not start") from None
                time.sleep(0.1)
        for hog in hogs:
            hog.start()
        wall, lat = asyncio.run(load(url, states, args.clients))
        after = httpx.get(f"{url}/health").json()
    finally:
        for p in [proc, *hogs]:
            if p.pid is not None:
                p.terminate()
                p.join(30)
    lat_ms = np.array(lat) * 1000
    batches = after["batches"] - health["batches"] - 2  # without the warm-up requests
    return {
        "rps": len(states) / wall,
        "p50": float(np.percentile(lat_ms, 50)),
        "p99": float(np.percentile(lat_ms, 99)),
        "batch": len(states) / max(batches, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, default=None)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--direct-requests", type=int, default=192)
    ap.add_argument("--reason-requests", type=int, default=48)
    ap.add_argument("--m", type=int, default=4)
    ap.add_argument("--max-wait-ms", type=float, default=5.0)
    ap.add_argument("--under-load", action="store_true")
    ap.add_argument("--threads", type=int, nargs="+", default=[0, 1])
    args = ap.parse_args()
    if not 1 <= args.clients <= 64:
        ap.error("--clients must be in 1..64")
    checkpoint = str(args.checkpoint or default_checkpoint())
    items = [it.prompt for it in load_task_items("verify", "test")]
    print(
        f"checkpoint {checkpoint}, {args.clients} clients, "
        f"3 questions per request, m = {args.m} in reason mode"
    )
    if args.under_load:
        return under_load(
            checkpoint, [items[i % len(items)] for i in range(args.reason_requests)], args
        )
    print(f"{'mode':<7} {'batching':<9} {'req/s':>8} {'p50 ms':>9} {'p99 ms':>9} {'batch':>6}")
    rows = {}
    runs = [("none", args.direct_requests), ("direct", args.direct_requests)]
    for mode, n in [*runs, ("reason", args.reason_requests)]:
        states = [items[i % len(items)] for i in range(n)]
        for batching in (True, False):
            r = rows[mode, batching] = run(checkpoint, mode, batching, states, args)
            print(
                f"{mode:<7} {'on' if batching else 'off':<9} {r['rps']:>8.1f} {r['p50']:>9.1f} "
                f"{r['p99']:>9.1f} {r['batch']:>6.1f}"
            )
    print("\nbatched / unbatched: throughput x, p50 latency x, p99 latency x")
    for mode in ("none", "direct", "reason"):
        on, off = rows[mode, True], rows[mode, False]
        print(
            f"{mode:<7} {on['rps'] / off['rps']:>6.2f}x {on['p50'] / off['p50']:>9.2f}x "
            f"{on['p99'] / off['p99']:>9.2f}x"
        )


def under_load(checkpoint: str, states: list[str], args) -> None:
    print(f"reason mode, batching on, {len(states)} requests; busy: one spinning process per core")
    head = ("threads", "quiet req/s", "busy req/s", "quiet/busy", "busy p99 ms")
    print("{:<9} {:>12} {:>11} {:>11} {:>12}".format(*head))
    for threads in args.threads:
        quiet = run(checkpoint, "reason", True, states, args, threads=threads)
        loaded = run(checkpoint, "reason", True, states, args, threads=threads, loaded=True)
        name = str(threads) if threads else f"default ({torch.get_num_threads()})"
        print(
            f"{name:<9} {quiet['rps']:>12.1f} {loaded['rps']:>11.1f} "
            f"{quiet['rps'] / loaded['rps']:>10.2f}x {loaded['p99']:>12.0f}"
        )


if __name__ == "__main__":
    main()
