"""The official SDK's ordinary request against the shipped rung adapter, 20 times.

    .venv/bin/python benchmarks/sdk_timeout.py

Starts ``rlcd-lab serve --checkpoint assets/checkpoints/smollm2-arith-verify`` on port 8123,
sends the SDK's request (four typed questions about a review, its default 10 s timeout, no
retries) 20 times and prints how many answered within 10 s, the median and the maximum.
Run it on a quiet machine: that is what the 10 s claim is about.
"""

from __future__ import annotations

import statistics
import subprocess
import time

import httpx
from typesafe_sdk import Choice, Noul, RetryPolicy, Score, TypeSafeClient

PORT = 8123
CHECKPOINT = "assets/checkpoints/smollm2-arith-verify"
QUESTIONS = {
    "positive": Noul(instructions="Is the review positive?"),
    "topic": Choice(criteria={"food": "about the food", "service": None, "price": None}),
    "stars": Score(criteria=["bad", "fine", "great"]),
    "recommend": Noul(instructions="Would the writer come back?"),
}
STATE = "The soup was cold and the waiter ignored us, but the bread was lovely."


def wait_until_serving(url: str, seconds: float = 240.0) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(1)
    raise SystemExit(f"the server at {url} did not start within {seconds:.0f} s")


def main() -> None:
    cmd = [".venv/bin/rlcd-lab", "serve", "--checkpoint", CHECKPOINT, "--port", str(PORT)]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{PORT}"
    try:
        wait_until_serving(url)
        times, failures = [], 0
        retry = RetryPolicy(max_retries=0)
        with TypeSafeClient(base_url=url, api_key="x", retry=retry) as client:
            for _ in range(20):
                t0 = time.perf_counter()
                try:
                    client.system_one(state=STATE, questions=QUESTIONS)
                except Exception as err:  # the SDK's timeout or any error: a failed call
                    failures += 1
                    print("failed:", type(err).__name__, err)
                times.append(time.perf_counter() - t0)
        within = sum(t < 10 for t in times)
        print(
            f"20 calls: {within} within 10 s, {failures} failed, "
            f"median {statistics.median(times):.2f} s, max {max(times):.2f} s"
        )
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
