"""What a client that hangs up costs the next one: the next request's wait after a drop.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/drop_server.py [--smollm2 | --checkpoint DIR]
        [--clients N] [--m 16] [--max-new-tokens 256] [--drop-after 0.3] [--repeats 3]

The server runs in a child process as ``rlcd-lab serve`` runs it (``build_server``, one
torch thread, direct mode by default, no deadline, so that only the cancellation of the
dropped work can make room). Default: the shipped ``verify`` checkpoint, 4 clients each
asking one question at ``m`` = 16 and 256 tokens about a long state (the tiny model writes
no marker there, so every row runs to the token limit: 64 rows x 256 steps between them).
``--smollm2``: the converted SmolLM2-135M-Instruct (``rlcd-lab gguf smollm2``), 1 client, the
issue's case (one question at m = 16 and 256 tokens).

Per repeat: the idle answer time (one direct request, nothing else running), then the
clients send their reason-mode requests and hang up after ``--drop-after`` seconds (their
work has reached the model), and the same direct request is sent at once and timed.
Prints a table with the CPU model: the median idle answer time, the median and worst wait
after a drop, the extra wait, and whether it is within 1 s of the idle answer time; with
``--full``, also how long the dropped work takes when nobody hangs up (what the next
request waited before cancellation reached the decoding steps).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import threading
import time
from pathlib import Path

import httpx
from serve import free_port, wait_up  # benchmarks/serve.py, beside this script

from rlcd_lab.bench.common import machine

LONG_STATE = "1" * 200 + "?"
"""A state the tiny verify model cannot parse: it writes no marker, every row runs on."""
SMOLLM2_STATE = "The soup was cold and the waiter ignored us, but the bread was lovely."
QUESTION = {"q": {"type": "noul", "instructions": "Is the statement right?"}}


def serve_child(checkpoint: str, port: int) -> None:
    import torch

    from rlcd_lab.decide import DecisionModel
    from rlcd_lab.server.app import create_app
    from rlcd_lab.server.connections import build_server
    from rlcd_lab.server.options import ServeOptions

    torch.set_num_threads(1)
    decider = DecisionModel.from_checkpoint(checkpoint)
    app = create_app(decider, ServeOptions(mode="direct", deadline=None))
    build_server(app, port=port, log_level="critical").run()


def request(url: str, state: str, timeout: float, rlcd: dict | None = None) -> float:
    """Seconds until the answer (raises on a timeout or an error status)."""
    body = {"model": "jev-latest", "state": state, "questions": QUESTION}
    if rlcd is not None:
        body["rlcd"] = rlcd
    t0 = time.perf_counter()
    httpx.post(f"{url}/v1/systemone", json=body, timeout=timeout).raise_for_status()
    return time.perf_counter() - t0


def drop(url: str, state: str, heavy: dict, after: float | None) -> None:
    """Send a heavy request and hang up after ``after`` seconds (None: wait for it)."""
    if after is None:
        request(url, state, 3600, heavy)
        return
    try:
        request(url, state, after, heavy)
    except httpx.TimeoutException:
        return
    raise RuntimeError(f"the heavy request finished within {after} s: make it heavier")


def heavy_clients(url: str, state: str, heavy: dict, clients: int, after: float | None) -> float:
    """``clients`` heavy requests at once, each about its own state (one prompt each), each
    hanging up after ``after`` seconds (None: waiting for its answer); the wall seconds."""
    threads = [
        threading.Thread(target=drop, args=(url, f"{state}{'?' * i}", heavy, after))
        for i in range(clients)
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--checkpoint", type=Path, default=None)
    which.add_argument("--smollm2", action="store_true", help="the converted SmolLM2 checkpoint")
    ap.add_argument("--clients", type=int, default=None, help="default: 4 (tiny), 1 (SmolLM2)")
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--drop-after", type=float, default=0.3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--full", action="store_true", help="also time the heavy work undropped")
    args = ap.parse_args()
    if args.smollm2:
        from rlcd_lab.lm.pretrained import SMOLLM2_DEFAULT_DIR

        checkpoint, state = Path(SMOLLM2_DEFAULT_DIR).expanduser(), SMOLLM2_STATE
        clients = args.clients or 1
    else:
        from rlcd_lab.server.app import default_checkpoint

        checkpoint, state = args.checkpoint or default_checkpoint(), LONG_STATE
        clients = args.clients or 4
    heavy = {"mode": "reason", "m": args.m, "max_new_tokens": args.max_new_tokens}
    port = free_port()
    proc = mp.get_context("spawn").Process(target=serve_child, args=(str(checkpoint), port))
    proc.start()
    url = f"http://127.0.0.1:{port}"
    idle, waits, full = [], [], None
    try:
        wait_up(url, proc, timeout=300)
        request(url, state, 120)  # warm up
        for _ in range(args.repeats):
            idle.append(request(url, state, 120))
            heavy_clients(url, state, heavy, clients, args.drop_after)
            waits.append(request(url, state, 600))
            time.sleep(0.5)
        if args.full:
            full = heavy_clients(url, state, heavy, clients, None)
    finally:
        proc.terminate()
        proc.join(30)
    idle_s, wait_s = statistics.median(idle), statistics.median(waits)
    print(f"CPU: {machine()}; server: 1 torch thread; checkpoint {checkpoint}")
    print(
        f"dropped: {clients} client(s) x 1 question, m = {args.m}, {args.max_new_tokens} "
        f"tokens, gone at {args.drop_after} s; {args.repeats} repeats"
    )
    head = ["idle answer s", "next after drop s", "worst s", "extra s", "within 1 s"]
    print(" | ".join(f"{h:>17}" for h in head))
    row = [f"{idle_s:.3f}", f"{wait_s:.3f}", f"{max(waits):.3f}", f"{wait_s - idle_s:+.3f}"]
    row.append("yes" if max(waits) <= idle_s + 1.0 else "NO")
    print(" | ".join(f"{v:>17}" for v in row))
    if full is not None:
        print(f"the same heavy requests when nobody hangs up: answered after {full:.2f} s")


if __name__ == "__main__":
    main()
