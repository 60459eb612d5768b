"""Speed summaries (``rlcd_lab.bench.speed``): the benchmarks' figures merged per CPU kind,
and the targets tables the README and docs/performance.md show, computed from them."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from rlcd_lab.bench import speed
from rlcd_lab.bench.common import machine

ROOT = Path(__file__).resolve().parents[1]
AVX2 = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "OPENBLAS_CORETYPE": "Haswell",
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL",
}  # what tests/emulate_cpu.py avx2 sets on an AVX-512 machine
NO_BF16 = "no native bfloat16 products on this CPU"


def sampler_row(equal: float, gains: tuple[float, float, float, float]) -> dict:
    same, share, drop, packed = gains
    return dict(
        setting="smollm2",
        rows=8,
        equal_work=dict(rows=8, prompt=103, tokens=64, ratio=equal),
        gains=dict(same_work=same, share_prompts=share, drop_rows=drop, packed=packed),
        hf_over_kv=same * share * drop,
        hf_over_fast=same * share * drop * packed,
        fast="copy",
    )


def summary() -> dict:
    """A CPU with native bfloat16 (every row measured)."""
    floor = [
        dict(model="smollm2", dtype="float32", kernel="blas", rows=64, step=0.3, floor=0.2,
             sampler=0.5, read=0.02, peak=100.0),
        dict(model="smollm2", dtype="bfloat16", kernel="onednn", rows=64, step=0.14, floor=0.1,
             sampler=0.25, read=0.01, peak=200.0),
    ]  # fmt: skip
    # 1.25 x 1.2 x 1.1 = 1.65 (kv), x 2 = 3.3 (fast)
    sampler = [sampler_row(1.6, (1.25, 1.2, 1.1, 2.0))]
    step = [  # wall "step", process CPU "cpu": the table divides CPU times
        dict(setting="smollm2", loop="trl", step=12.0, cpu=10.0, target=0.4),
        dict(setting="smollm2", loop="reinforce", step=4.0, cpu=4.5, target=0.4),
        dict(setting="smollm2", loop="reinforce-fast", step=3.0, cpu=3.5, target=0.4),
    ]
    return dict(bench="speed", cpu="Test CPU", floor=floor, sampler=sampler, step=step)


def avx2_summary() -> dict:
    """The same CPU limited to AVX2: bfloat16 rows skipped, no training step measured."""
    floor = [
        dict(model="smollm2", dtype="float32", kernel="onednn", rows=64, step=0.36, floor=0.2,
             sampler=0.6, read=0.02, peak=60.0),
        dict(model="smollm2", dtype="bfloat16", kernel="onednn", rows=64, skipped=NO_BF16),
        dict(model="smollm2", dtype="bfloat16", kernel="onednn", rows=8, skipped=NO_BF16),
    ]  # fmt: skip
    # 1.2 x 1.1 x 1.0 = 1.32 (kv), x 1.25 = 1.65 (fast)
    sampler = [sampler_row(1.5, (1.2, 1.1, 1.0, 1.25))]
    return dict(bench="speed", cpu="Test CPU; limited to AVX2 (...)", floor=floor, sampler=sampler)


def test_the_targets_table_is_computed_from_the_figures():
    md = speed.speed_markdown(summary())
    assert md.startswith("Measured on: Test CPU")
    row = "| {} | SmolLM2-135M | {} | {} | {} |".format
    eq = speed.SHORT[0]
    assert row(eq, "1.60x", "-", "-") in md
    assert row("the real call, step 1 of 4: our loop doing generate's work (every prompt "
               "encoded, every row kept)", "1.25x", "-", "-") in md  # fmt: skip
    assert row("the real call, step 2 of 4: each prompt encoded once", "1.20x", "-", "-") in md
    assert row("the real call, step 3 of 4: finished rows dropped", "1.10x", "-", "-") in md
    assert row("the real call, step 4 of 4: packed kernels (`--sampler fast`)", "2.00x", "-",
               "-") in md  # fmt: skip
    assert row("sampler vs plain `generate`, `kv_sampler` (generate's tokens), normal stopping",
               "1.65x", ">= 2x", "not met") in md  # fmt: skip
    assert row("sampler vs plain `generate`, `--sampler fast`, normal stopping", "3.30x",
               ">= 2x", "holds") in md  # fmt: skip
    # 0.3 / 0.2 = 1.5: at the target holds; 0.14 / 0.1 = 1.4; 0.25 / 0.1 = 2.5
    assert row("decoding step / its floor, float32 (default kernels), 64 rows", "1.50x",
               "<= 1.5x", "holds") in md  # fmt: skip
    assert row("decoding step / its floor, bfloat16 packed (`fast`), 64 rows", "1.40x",
               "<= 1.5x", "holds") in md  # fmt: skip
    assert row("whole sampler per step / floor, `fast`'s copy, 64 rows", "2.50x (bfloat16)",
               "-", "-") in md  # fmt: skip
    assert row("decoding step / its floor, float32 packed, 8 rows", "-", "<= 1.5x",
               "not measured") in md  # fmt: skip
    assert row("`reinforce` step / TRL's GRPO step", "0.45x", "<= 0.4x", "not met") in md
    assert row("`reinforce-fast` step / TRL's GRPO step", "0.35x", "<= 0.4x", "holds") in md
    short = speed.speed_markdown(summary(), short=True)
    assert short.count("\n| ") == 1 + len(speed.SHORT)  # the header row and the four
    assert "3.30x" in short and "0.35x" in short and "1.60x" in short and "1.65x" not in short


def test_a_skipped_row_says_why():
    md = speed.speed_markdown(avx2_summary())
    for figure in ("decoding step / its floor", "whole sampler per step / floor"):
        for n in (8, 64):
            assert (f"| {figure}, bfloat16 packed (`fast`), {n} rows | SmolLM2-135M | - | - "
                    f"| skipped: {NO_BF16} |") in md  # fmt: skip
    # fast's copy is float32 here: 0.6 / 0.2 = 3.0; 0.36 / 0.2 = 1.8
    assert "| whole sampler per step / floor, `fast`'s copy, 64 rows | SmolLM2-135M | " \
        "3.00x (float32) |" in md  # fmt: skip
    assert "| decoding step / its floor, float32 packed, 64 rows | SmolLM2-135M | 1.80x |" in md


def test_one_row_per_cpu_kind():
    index = {"bench": "speed", "kinds": {"epyc": summary(), "epyc-limited-to-avx2": avx2_summary()}}
    short = speed.speed_markdown(index, short=True)  # what readme_block calls
    assert short.count("\n| `") == 2  # one row per kind, in the index's order
    assert "| `epyc` | 1.60x | 3.30x (holds) | 2.50x (bfloat16) | 0.35x (holds) |" in short
    assert "| `epyc-limited-to-avx2` | 1.50x | 1.65x (not met) | 3.00x (float32) | - |" in short
    assert "* `epyc-limited-to-avx2`: Test CPU; limited to AVX2 (...)" in short
    assert "float32 packed, 64 rows" not in short  # the full table only without short
    full = speed.speed_markdown(index)
    assert "| figure | model | target | `epyc` | `epyc-limited-to-avx2` |" in full
    assert ("| decoding step / its floor, bfloat16 packed (`fast`), 64 rows | SmolLM2-135M "
            f"| <= 1.5x | 1.40x (holds) | skipped: {NO_BF16} |") in full  # fmt: skip
    assert ("| `reinforce-fast` step / TRL's GRPO step | SmolLM2-135M | <= 0.4x "
            "| 0.35x (holds) | - |") in full  # fmt: skip


def test_the_sampler_benchmark_multiplies_its_steps_to_the_total():
    spec = importlib.util.spec_from_file_location("bench_sampler", ROOT / "benchmarks/sampler.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclasses look their module up
    try:
        spec.loader.exec_module(bench)
    finally:
        del sys.modules[spec.name]
    cpu = {"generate=": 0.8, "kv=": 0.5, "generate": 3.0, "kv keep+enc": 2.4,
           "kv keep": 2.0, "kv": 1.6, "fast": 0.8}  # fmt: skip
    times = {k: {"cpu": [v, v, 9.0 * v], "wall": [v]} for k, v in cpu.items()}  # median v
    r = dict(times=times, rows=8, steps=64, tokens=40.0, equal={"rows": 8}, load=[1.0, 1.0],
             fast_kind="copy", fast_same=4)  # fmt: skip
    row = bench.summary("smollm2", r)
    assert row["equal_work"]["ratio"] == pytest.approx(0.8 / 0.5)
    assert row["gains"] == pytest.approx(
        dict(same_work=3.0 / 2.4, share_prompts=2.4 / 2.0, drop_rows=2.0 / 1.6, packed=1.6 / 0.8)
    )
    assert row["hf_over_kv"] == pytest.approx(3.0 / 1.6)
    assert row["hf_over_fast"] == pytest.approx(3.0 / 0.8)
    g = row["gains"]
    prod = g["same_work"] * g["share_prompts"] * g["drop_rows"] * g["packed"]
    assert prod == pytest.approx(row["hf_over_fast"])


def test_an_emulated_cpu_is_its_own_kind(monkeypatch):
    monkeypatch.setattr(speed, "machine", lambda: "AMD EPYC, 2 cores, flags: avx2 avx512f "
                        "avx512_bf16 avx512_vnni")  # fmt: skip
    assert speed.machine_line({}) == machine()
    assert speed.cpu_kind(speed.machine_line({})) == "amd-epyc-avx512bf16"
    line = speed.machine_line(AVX2)
    assert line.startswith(machine() + "; limited to AVX2 (ATEN_CPU_CAPABILITY=avx2, ")
    assert "OPENBLAS_CORETYPE=Haswell" in line
    assert speed.cpu_kind(line) == "amd-epyc-avx512bf16-limited-to-avx2"
    line = speed.machine_line({"OPENBLAS_CORETYPE": "Haswell"})  # a limit, no ISA named
    assert line.endswith("; limited (OPENBLAS_CORETYPE=Haswell)")
    assert speed.cpu_kind(line) == "amd-epyc-avx512bf16-limited"
    line = "Intel(R) Xeon(R) Platinum 8480+, 2 cores, flags: avx2 avx512f amx_bf16 amx_tile"
    assert speed.cpu_kind(line) == "intel-xeon-amx"


def test_a_summary_holds_one_cpu(tmp_path):
    path = tmp_path / "speed.json"
    speed.record_speed(path, "sampler", [{"setting": "tiny"}])
    speed.record_speed(path, "floor", [{"model": "tiny"}])
    data = json.loads(path.read_text())
    assert data["cpu"] == speed.machine_line() and set(data) == {"bench", "cpu", "sampler", "floor"}
    path.write_text(json.dumps({**data, "cpu": "Another CPU"}))
    with pytest.raises(ValueError, match="Another CPU"):
        speed.record_speed(path, "step", [])


def test_a_kind_folder_updates_the_index(tmp_path):
    other = tmp_path / "other-kind" / "speed.json"
    other.parent.mkdir()
    other.write_text(json.dumps({"bench": "speed", "cpu": "Another CPU"}))
    speed.record_speed(speed.default_path(tmp_path), "sampler", [{"setting": "tiny"}])
    index = json.loads((tmp_path / "speed.json").read_text())
    assert list(index["kinds"]) == sorted([speed.cpu_kind(), "other-kind"])
    assert index["kinds"][speed.cpu_kind()]["sampler"] == [{"setting": "tiny"}]
    assert machine() in index["kinds"][speed.cpu_kind()]["cpu"]


def test_the_shipped_index_is_its_kinds():
    results = ROOT / "benchmarks" / "results"
    index = json.loads((results / "speed.json").read_text())
    assert index == speed.speed_index(results)
    for kind, s in index["kinds"].items():
        assert speed.cpu_kind(s["cpu"]) == kind  # a folder named after its machine line


def test_the_benchmarks_scratch_folders_are_made_by_mkdtemp():
    """No benchmark script, nor the Makefile, writes into a fixed folder under /tmp (two runs
    or two users would share it): their scratch folders come from mktemp / tempfile."""
    import re

    scripts = [*sorted((ROOT / "benchmarks").glob("*.py")), *(ROOT / "benchmarks").glob("*.sh")]
    fixed = [
        f"{path.name}: {m.group(0)}"
        for path in [*scripts, ROOT / "Makefile"]
        for m in re.finditer(r"""["'(/ ]/tmp(/[\w.{}-]*|["')])""", path.read_text(encoding="utf-8"))
    ]
    assert not fixed, fixed
