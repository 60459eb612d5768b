"""Speed summaries: the figures of ``benchmarks/floor.py``, ``sampler.py`` and
``train_step.py`` for one CPU, and the table the README and docs/performance.md show.

A summary (``benchmarks/results/<cpu>/speed.json``) holds one machine's figures, merged in
by each benchmark's ``--json`` (:func:`record_speed`): ``floor`` (a decoding step against
the time to read the weights once and the matrix-product peak, per model, dtype, kernel
and rows), ``sampler`` (CPU seconds per call of ``generate``, ``kv_sampler`` and the
``--sampler fast`` draw, and their ratios) and ``step`` (a training step against TRL's
``GRPOTrainer``). :func:`speed_markdown` renders the speed targets from it, each figure
beside the CPU it was measured on.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..io import atomic_write_text
from .common import machine

TARGETS = {
    "sampler": 2.0,  # sampler / generate, at least
    "floor": 1.5,  # SmolLM2 decoding step / its floor, at most
}


def record_speed(path: str | os.PathLike, key: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """Merge one benchmark's rows into the summary at ``path`` under ``key`` (``floor``,
    ``sampler``, ``step``), with this machine's :func:`~rlcd_lab.bench.common.machine`
    line; the file is rewritten atomically. A summary holds one CPU: rows from another
    are refused (``ValueError``), so a table never mixes machines."""
    path = Path(path)
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    cpu = machine()
    if data.get("cpu", cpu) != cpu:
        raise ValueError(f"{path} holds figures of {data['cpu']!r}, not of {cpu!r}")
    data.update(bench="speed", cpu=cpu, **{key: list(rows)})
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


SHORT = (
    "sampler vs `generate`, `--sampler fast`",
    "whole sampler per step / floor, bfloat16 packed (`fast`), 64 rows",
    "`reinforce-fast` step / TRL's GRPO step",
)
"""The rows of the short table (the README's): what the fast path gives on SmolLM2."""


def speed_markdown(summary: Mapping[str, Any], short: bool = False) -> str:
    """The speed targets on one CPU (Markdown): the sampler against ``generate``, the
    SmolLM2 decoding step and the whole sampler against the machine's floor, the
    reinforce step against TRL's, each with its target and whether it holds. ``short``:
    only the SmolLM2 rows of :data:`SHORT`."""
    floor = {(r["model"], r["dtype"], r["kernel"], r["rows"]): r for r in summary.get("floor", [])}
    sampler = {r["setting"]: r for r in summary.get("sampler", [])}
    step = {(r["setting"], r["loop"]): r for r in summary.get("step", [])}

    def holds(v: float | None, target: float, above: bool) -> str:
        if v is None:
            return "not measured"
        return "holds" if (v >= target if above else v <= target) else "not met"

    rows = []
    for name, label in (("tiny", "tiny (381k)"), ("smollm2", "SmolLM2-135M")):
        s = sampler.get(name)
        for key, what in (("hf_over_kv", "`kv_sampler` (generate's tokens)"),
                          ("hf_over_fast", "`--sampler fast`")):  # fmt: skip
            v = None if s is None else s[key]
            rows.append((f"sampler vs `generate`, {what}", label, _x(v), ">= 2x",
                         holds(v, TARGETS["sampler"], True)))  # fmt: skip
    for dtype, kernel, what in (("float32", "blas", "float32 (default kernels)"),
                                ("float32", "onednn", "float32 packed"),
                                ("bfloat16", "onednn", "bfloat16 packed (`fast`)")):  # fmt: skip
        for n in (8, 64):
            r = floor.get(("smollm2", dtype, kernel, n))
            v = None if r is None else r["step"] / r["floor"]
            rows.append((f"decoding step / its floor, {what}, {n} rows", "SmolLM2-135M",
                         _x(v), "<= 1.5x", holds(v, TARGETS["floor"], False)))  # fmt: skip
            if r is not None:
                rows.append((f"whole sampler per step / floor, {what}, {n} rows",
                             "SmolLM2-135M", _x(r["sampler"] / r["floor"]), "-", "-"))  # fmt: skip
    for name, label in (("tiny", "tiny (381k)"), ("smollm2", "SmolLM2-135M")):
        for loop in ("reinforce", "reinforce-fast"):
            r, t = step.get((name, loop)), step.get((name, "trl"))
            v = None if r is None or t is None else r["step"] / t["step"]
            target = None if r is None else r["target"]
            rows.append((f"`{loop}` step / TRL's GRPO step", label, _x(v),
                         "-" if target is None else f"<= {target}x",
                         "-" if target is None else holds(v, target, False)))  # fmt: skip
    if short:
        rows = [r for r in rows if r[0] in SHORT and r[1] == "SmolLM2-135M"]
    lines = [
        f"Measured on: {summary['cpu']} (one torch thread).",
        "",
        "| figure | model | measured | target | |",
        "|---|---|---|---|---|",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]
    return "\n".join(lines) + "\n"
