"""Dashboard latency: the Routing tab's threshold change and one Ask query, on the CPU.

    .venv/bin/python benchmarks/dashboard.py [--items 10000] [--repeats 30] [--asks 5]

* threshold change: a shipped run's test and dev dumps tiled to ``--items`` items each,
  written to a temporary run directory; ``routing_update`` is called once (it reads and
  caches the run), then timed over ``--repeats`` different thresholds (median). The
  "+ serialization" row adds what Gradio does with the outputs before sending them
  (``postprocess`` of the figure, the two tables and the JSON). The last rows do the same
  with the four default runs, each tiled to ``--items`` items.
* ask: M = 4 rationales from the shipped stage-2 RLCD checkpoint, after one warm-up
  query (which loads the model into the cache); median over ``--asks`` seeds.

Targets: <= 50 ms per threshold change with 10,000 cached items, <= 1 s per query.
Both wall-clock and CPU time (``time.process_time``, this process only) are reported:
on a shared, busy machine the wall clock includes waiting for a core, CPU time does not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import gradio as gr

from rlcd_lab.dashboard.ask_tab import ask
from rlcd_lab.dashboard.common import checkpoint_choices, default_runs, run_choices
from rlcd_lab.dashboard.routing_tab import routing_update
from rlcd_lab.files.assets import default_checkpoint
from rlcd_lab.files.io import read_jsonl


def tiled_run(src: Path, dst: Path, n: int) -> Path:
    """Write ``src``'s eval dumps repeated up to ``n`` rows each into run dir ``dst``."""
    (dst / "eval").mkdir(parents=True)
    for split in ("test", "dev"):
        rows = read_jsonl(src / "eval" / f"{split}.jsonl")
        tiled = [{**rows[i % len(rows)], "uid": f"{split}-{i}"} for i in range(n)]
        (dst / "eval" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in tiled))
    return dst


def _clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _ms(start: tuple[float, float], end: tuple[float, float]) -> tuple[float, float]:
    return 1000 * (end[0] - start[0]), 1000 * (end[1] - start[1])


def _median(samples: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def time_thresholds(runs: list[str], repeats: int) -> tuple[tuple[float, float], ...]:
    """Median (wall, CPU) ms of ``routing_update`` alone and with Gradio's postprocess of
    its outputs (what the server does before sending them)."""
    routing_update(runs, 0.9, 0.05, 10.0, 1.0, True)  # read and cache the runs
    plot, table, numbers = gr.Plot(), gr.Dataframe(), gr.JSON()
    bare, full = [], []
    for i in range(repeats):
        t = 0.5 + 0.5 * i / max(1, repeats - 1)
        start = _clocks()
        _, routing, metrics, fig, exact = routing_update(runs, t, 0.05, 10.0, 1.0, True)
        mid = _clocks()
        plot.postprocess(fig)
        table.postprocess(routing)
        table.postprocess(metrics)
        numbers.postprocess(exact)
        end = _clocks()
        bare.append(_ms(start, mid))
        full.append(_ms(start, end))
    return _median(bare), _median(full)


def time_ask(checkpoint: str, question: str, options: str, asks: int) -> tuple[float, float]:
    """Median (wall, CPU) ms of one M = 4 query, after a warm-up that loads the model."""
    ask(checkpoint, question, options, 4, 1.0, 64, 0, 0.9)
    times = []
    for seed in range(1, asks + 1):
        start = _clocks()
        ask(checkpoint, question, options, 4, 1.0, 64, seed, 0.9)
        times.append(_ms(start, _clocks()))
    return _median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--asks", type=int, default=5)
    args = parser.parse_args()

    from rlcd_lab.files.assets import ASSETS

    names = default_runs(run_choices())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = [str(tiled_run(ASSETS / n, Path(tmp) / n, args.items)) for n in names]
        bare, full = time_thresholds(paths[:1], args.repeats)
        rows.append((f"threshold change, 1 run ({names[0]})", args.items, bare, 50.0))
        rows.append(("  + serialization (Gradio postprocess)", args.items, full, 50.0))
        bare, full = time_thresholds(paths, args.repeats)
        rows.append((f"threshold change, {len(paths)} runs", len(paths) * args.items, bare, 50.0))
        rows.append(("  + serialization (Gradio postprocess)", len(paths) * args.items, full, 50.0))
    checkpoint = default_checkpoint(checkpoint_choices())
    ms = time_ask(checkpoint, "33+60+20=113?", "Y, N", args.asks)
    rows.append((f"ask, M = 4 ({checkpoint})", 1, ms, 1000.0))

    print(f"{'case':<50}{'items':>7}{'wall ms':>9}{'CPU ms':>8}{'target':>8}  ok (wall)")
    for case, n, (wall, cpu), target in rows:
        ok = "yes" if wall <= target else "NO"
        print(f"{case:<50}{n:>7}{wall:>9.1f}{cpu:>8.1f}{target:>8.0f}  {ok}")
    print(f"load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
