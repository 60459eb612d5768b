"""Speed summaries: the figures of ``benchmarks/floor.py``, ``sampler.py`` and
``train_step.py`` per CPU kind, and the tables the README and docs/performance.md show.

Each benchmark's ``--json`` merges its figures into one CPU kind's summary
(:func:`record_speed`); :func:`write_index` indexes the kinds, :func:`speed_markdown` and
:func:`speed_by_cpu` render them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlcd_lab.bench.common import machine
from rlcd_lab.files.io import atomic_write_text

TARGETS = {
    "sampler": 2.0,  # sampler / generate, at least
    "floor": 1.5,  # SmolLM2 decoding step / its floor, at most
}

EMULATION_VARS = (
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "OPENBLAS_CORETYPE",
    "NPY_DISABLE_CPU_FEATURES",
    "MKL_ENABLE_INSTRUCTIONS",
)
"""The environment variables that limit the kernels torch, oneDNN, OpenBLAS, numpy and MKL
pick (``tests/emulate_cpu.py`` sets the first four to run as an older CPU would; torch's
float32 ``F.linear``/``mm`` on the CPU is MKL's, which only the last one limits)."""


def emulated_isa(env: Mapping[str, str] | None = None) -> str | None:
    """The instruction set the kernels are limited to by :data:`EMULATION_VARS`
    (``avx2`` under ``tests/emulate_cpu.py avx2``; ``ONEDNN_MAX_CPU_ISA``, else
    ``ATEN_CPU_CAPABILITY``, else ``MKL_ENABLE_INSTRUCTIONS``, lower case), or None when
    none is set."""
    env = os.environ if env is None else env
    isa = (
        env.get("ONEDNN_MAX_CPU_ISA")
        or env.get("ATEN_CPU_CAPABILITY")
        or env.get("MKL_ENABLE_INSTRUCTIONS")
    )
    return isa.lower() if isa else None


def machine_line(env: Mapping[str, str] | None = None) -> str:
    """:func:`~rlcd_lab.bench.common.machine`, plus the limits of :data:`EMULATION_VARS`
    when any is set: the CPU a figure was measured on *as the kernels saw it*, so that a
    run limited to AVX2 is never taken for a real AVX2 machine."""
    env = os.environ if env is None else env
    line = machine()
    limits = ", ".join(f"{k}={env[k]}" for k in EMULATION_VARS if env.get(k))
    if not limits:
        return line
    isa = emulated_isa(env)
    return f"{line}; limited " + (f"to {isa.upper()} " if isa else "") + f"({limits})"


def cpu_kind(line: str | None = None) -> str:
    """The folder name of a CPU's summary (``benchmarks/results/<kind>/speed.json``): the
    model name's first two words, the widest of its kernel-deciding flags (``amx``,
    ``avx512bf16``, ``avx512``, ``avx2``) and, for a run limited by
    :data:`EMULATION_VARS`, ``-limited-to-<isa>``: ``amd-epyc-avx512bf16`` and
    ``amd-epyc-avx512bf16-limited-to-avx2`` on this project's machine."""
    line = machine_line() if line is None else line
    name, _, rest = line.partition(",")
    words = re.sub(r"\(r\)|\(tm\)|processor", " ", name.lower()).split()
    slug = "-".join(re.sub(r"[^a-z0-9]+", "", w) for w in words[:2]) or "cpu"
    flags = rest.partition("flags:")[2].partition(";")[0].split()
    best = next(
        (short for flag, short in (("amx_bf16", "amx"), ("avx512_bf16", "avx512bf16"),
                                   ("avx512f", "avx512"), ("avx2", "avx2")) if flag in flags),
        "baseline",
    )  # fmt: skip
    limited = re.search(r"; limited (?:to (\S+) )?\(", line)
    if limited is None:
        return f"{slug}-{best}"
    isa = limited.group(1)
    return f"{slug}-{best}-limited" + (f"-to-{isa.lower()}" if isa else "")


def default_path(root: str | os.PathLike = "benchmarks/results") -> Path:
    """``<root>/<cpu_kind()>/speed.json``: where this machine's summary belongs."""
    return Path(root) / cpu_kind() / SUMMARY


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    """A benchmark's ``--json [PATH]``: merge its rows into a summary (without PATH: this
    CPU kind's, :func:`default_path`)."""
    parser.add_argument(
        "--json",
        type=Path,
        nargs="?",
        const=default_path(),
        default=None,
        help="merge the rows into this summary (default: this CPU kind's)",
    )


SUMMARY = "speed.json"
"""A CPU kind's summary, ``benchmarks/results/<kind>/speed.json``; the same name one level
up is the index of every kind (:func:`write_index`), which the generated tables read."""


def record_speed(path: str | os.PathLike, key: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """Merge one benchmark's rows into the summary at ``path`` under ``key`` (``floor``,
    ``sampler``, ``step``), with this machine's :func:`machine_line` (the CPU, limits
    included); the file is rewritten atomically. A summary holds one CPU: rows from another
    are refused (``ValueError``), so a table never mixes machines. When ``path`` sits in a
    folder named after this CPU's :func:`cpu_kind`, the index one level up is rewritten
    too (:func:`write_index`).

    A summary (``benchmarks/results/<kind>/speed.json``, :func:`cpu_kind`) holds one CPU's
    figures, merged in by each benchmark's ``--json`` (:func:`record_speed`), with the
    machine line of :func:`machine_line` (model name, cores, kernel-deciding flags, and the
    limits ``tests/emulate_cpu.py`` puts on the kernels, so an emulated AVX2 run is its own
    kind): ``floor`` (a decoding step against the time to read the weights once and the
    matrix-product peak, per model, dtype, kernel and rows; rows this CPU cannot run carry
    ``skipped``, the reason), ``sampler`` (CPU seconds per call of plain ``generate`` and our
    samplers: the equal-work ratio, each step's gain and the totals) and ``step`` (a training
    step against TRL's ``GRPOTrainer``). ``benchmarks/results/speed.json`` indexes every kind
    (:func:`write_index`); :func:`speed_markdown` renders one summary's targets, or the
    index's, one row per CPU kind (:func:`speed_by_cpu`), each figure beside its CPU.
    """
    path = Path(path)
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    cpu = machine_line()
    if data.get("cpu", cpu) != cpu:
        raise ValueError(f"{path} holds figures of {data['cpu']!r}, not of {cpu!r}")
    data.update(bench="speed", cpu=cpu, **{key: list(rows)})
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    if path.parent.name == cpu_kind(cpu):
        write_index(path.parent.parent)


def speed_index(root: str | os.PathLike) -> dict[str, Any]:
    """``{"bench": "speed", "kinds": {kind: summary}}`` of every ``<root>/<kind>/speed.json``,
    kinds sorted by name."""
    found = sorted(Path(root).glob(f"*/{SUMMARY}"))
    kinds = {p.parent.name: json.loads(p.read_text(encoding="utf-8")) for p in found}
    return {"bench": "speed", "kinds": kinds}


def write_index(root: str | os.PathLike) -> Path:
    """Write :func:`speed_index` of ``root`` to ``<root>/speed.json`` (the file the README's
    and docs/performance.md's speed blocks are generated from); returns its path."""
    path = Path(root) / SUMMARY
    atomic_write_text(path, json.dumps(speed_index(root), indent=1, sort_keys=True) + "\n")
    return path


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


Row = tuple[str, str, str, str, str]
"""A figure of the targets table: ``(figure, model, measured, target, verdict)``."""

MODELS = (("tiny", "tiny (381k)"), ("smollm2", "SmolLM2-135M"))
SAMPLER_ROWS = (
    ("equal", "sampler vs plain `generate`, equal work (8 distinct prompts, every row "
              "the full length, no stop)", None),
    ("same_work", "the real call, step 1 of 4: our loop doing generate's work (every "
                  "prompt encoded, every row kept)", None),
    ("share_prompts", "the real call, step 2 of 4: each prompt encoded once", None),
    ("drop_rows", "the real call, step 3 of 4: finished rows dropped", None),
    ("packed", "the real call, step 4 of 4: packed kernels (`--sampler fast`)", None),
    ("hf_over_kv", "sampler vs plain `generate`, `kv_sampler` (generate's tokens), "
                   "normal stopping", TARGETS["sampler"]),
    ("hf_over_fast", "sampler vs plain `generate`, `--sampler fast`, normal stopping",
     TARGETS["sampler"]),
)  # fmt: skip
"""The sampler's rows: the equal-work ratio, the four steps from ``generate``'s work to
``--sampler fast`` on the sampler's real call (their product is the last row, the first
three's the one before) and the totals; ``(key, figure, target or None)``."""
FLOOR_KINDS = (
    ("float32", "blas", "float32 (default kernels)"),
    ("float32", "onednn", "float32 packed"),
    ("bfloat16", "onednn", "bfloat16 packed (`fast`)"),
)
SHORT = (
    "sampler vs plain `generate`, equal work (8 distinct prompts, every row the full "
    "length, no stop)",
    "sampler vs plain `generate`, `--sampler fast`, normal stopping",
    "whole sampler per step / floor, `fast`'s copy, 64 rows",
    "`reinforce-fast` step / TRL's GRPO step",
)
"""The figures of the short table (the README's), on SmolLM2, one column each."""
SHORT_HEADS = (
    "`kv_sampler` vs plain `generate`, equal work",
    "`--sampler fast` vs plain `generate`, normal stopping (target >= 2x)",
    "whole sampler per step / floor, `fast`'s copy, 64 rows",
    "`reinforce-fast` step / TRL's (target <= 0.4x)",
)
"""The column heads of :data:`SHORT` in the table with one row per CPU kind."""


def _holds(v: float | None, target: float, above: bool) -> str:
    if v is None:
        return "not measured"
    return "holds" if (v >= target if above else v <= target) else "not met"


def _sampler_value(r: Mapping[str, Any] | None, key: str) -> float | None:
    if r is None:
        return None
    if key == "equal":
        return r.get("equal_work", {}).get("ratio")
    if key in ("hf_over_kv", "hf_over_fast"):
        return r.get(key)
    return r.get("gains", {}).get(key)


def fast_floor(summary: Mapping[str, Any], model: str, rows: int) -> Mapping[str, Any] | None:
    """The floor row of ``--sampler fast``'s copy on this CPU: bfloat16 packed where it was
    measured, else (skipped: no native bfloat16) float32 packed; None if neither ran."""
    floor = {(r["model"], r["dtype"], r["kernel"], r["rows"]): r for r in summary.get("floor", [])}
    for dtype in ("bfloat16", "float32"):
        r = floor.get((model, dtype, "onednn", rows))
        if r is not None and "skipped" not in r:
            return r
    return None


def _step_s(r: Mapping[str, Any]) -> float:
    """A training step's seconds: process CPU time where recorded, else wall."""
    return r.get("cpu", r["step"])


def speed_rows(summary: Mapping[str, Any]) -> list[Row]:
    """The figures of one CPU's summary, each with its target and whether it holds; a
    figure its benchmark skipped on this CPU reads ``skipped: <reason>``."""
    floor = {(r["model"], r["dtype"], r["kernel"], r["rows"]): r for r in summary.get("floor", [])}
    sampler = {r["setting"]: r for r in summary.get("sampler", [])}
    step = {(r["setting"], r["loop"]): r for r in summary.get("step", [])}
    rows: list[Row] = []
    for name, label in MODELS:
        for key, what, target in SAMPLER_ROWS:
            v = _sampler_value(sampler.get(name), key)
            rows.append((what, label, _x(v), "-" if target is None else f">= {target:g}x",
                         "-" if target is None else _holds(v, target, True)))  # fmt: skip
    for dtype, kernel, what in FLOOR_KINDS:
        for n in (8, 64):
            r = floor.get(("smollm2", dtype, kernel, n))
            figure = f"decoding step / its floor, {what}, {n} rows"
            whole = f"whole sampler per step / floor, {what}, {n} rows"
            if r is not None and "skipped" in r:
                for f in (figure, whole):
                    rows.append((f, "SmolLM2-135M", "-", "-", f"skipped: {r['skipped']}"))
                continue
            v = None if r is None else r["step"] / r["floor"]
            rows.append((figure, "SmolLM2-135M", _x(v), f"<= {TARGETS['floor']:g}x",
                         _holds(v, TARGETS["floor"], False)))  # fmt: skip
            if r is not None:
                rows.append((whole, "SmolLM2-135M", _x(r["sampler"] / r["floor"]), "-", "-"))
    r = fast_floor(summary, "smollm2", 64)
    if r is not None:
        rows.append(("whole sampler per step / floor, `fast`'s copy, 64 rows", "SmolLM2-135M",
                     f"{_x(r['sampler'] / r['floor'])} ({r['dtype']})", "-", "-"))  # fmt: skip
    for name, label in MODELS:
        for loop in ("reinforce", "reinforce-fast"):
            r, t = step.get((name, loop)), step.get((name, "trl"))
            v = None if r is None or t is None else _step_s(r) / _step_s(t)
            target = None if r is None else r["target"]
            rows.append((f"`{loop}` step / TRL's GRPO step", label, _x(v),
                         "-" if target is None else f"<= {target}x",
                         "-" if target is None else _holds(v, target, False)))  # fmt: skip
    return rows


def speed_markdown(summary: Mapping[str, Any], short: bool = False) -> str:
    """The speed targets (Markdown). For one CPU's summary: its figures (:func:`speed_rows`:
    the sampler against plain ``generate``, equal work and step by step, the SmolLM2
    decoding step and the whole sampler against the machine's floor, the reinforce step
    against TRL's, in CPU time), each with its target and whether it holds; ``short``: only the
    SmolLM2 figures of :data:`SHORT`. For the index of every CPU kind (:func:`speed_index`):
    :func:`speed_by_cpu`."""
    if "kinds" in summary:
        return speed_by_cpu(summary, short)
    rows = speed_rows(summary)
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


def _cell(row: Row) -> str:
    """One CPU's measurement with its verdict, for a table with a column per CPU."""
    if row[4].startswith("skipped"):
        return row[4]
    return row[2] if row[4] in ("-", "not measured") else f"{row[2]} ({row[4]})"


def speed_by_cpu(index: Mapping[str, Any], short: bool = False) -> str:
    """The speed figures of every CPU kind of ``index`` (:func:`speed_index`), Markdown:
    one row per CPU kind with the SmolLM2 figures of :data:`SHORT` (one column each, the
    verdict beside the number), then each kind's machine line; unless ``short``, then
    every figure with one column per kind."""
    kinds = index["kinds"]
    per = {k: {(r[0], r[1]): r for r in speed_rows(s)} for k, s in kinds.items()}
    lines = [
        "| CPU kind (SmolLM2-135M) | " + " | ".join(SHORT_HEADS) + " |",
        "|---|" + "---|" * len(SHORT),
    ]
    for kind, rows in per.items():
        cells = []
        for figure in SHORT:
            row = rows.get((figure, "SmolLM2-135M"))
            cells.append("-" if row is None else _cell(row))
        lines.append(f"| `{kind}` | " + " | ".join(cells) + " |")
    lines += ["", "Measured on (one torch thread):", ""]
    lines += [f"* `{kind}`: {s['cpu']}" for kind, s in kinds.items()]
    if not short:
        figures = list(dict.fromkeys(key for rows in per.values() for key in rows))
        lines += [
            "",
            "| figure | model | target | " + " | ".join(f"`{k}`" for k in per) + " |",
            "|---|---|---|" + "---|" * len(per),
        ]
        for key in figures:
            target = next(rows[key][3] for rows in per.values() if key in rows)
            cells = [_cell(rows[key]) if key in rows else "-" for rows in per.values()]
            lines.append(f"| {key[0]} | {key[1]} | {target} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
