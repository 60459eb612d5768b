"""Speed summaries (``rlcd_lab.bench.speed``): the benchmarks' figures merged per CPU, and
the targets table the README and docs/performance.md show, computed from them."""

from __future__ import annotations

import json

import pytest

from rlcd_lab.bench import speed
from rlcd_lab.bench.common import machine


def summary() -> dict:
    floor = [
        dict(model="smollm2", dtype="float32", kernel="blas", rows=64, step=0.3, floor=0.2,
             sampler=0.5, read=0.02, peak=100.0),
        dict(model="smollm2", dtype="bfloat16", kernel="onednn", rows=64, step=0.14, floor=0.1,
             sampler=0.25, read=0.01, peak=200.0),
    ]  # fmt: skip
    sampler = [dict(setting="smollm2", rows=8, hf_over_kv=1.25, hf_over_fast=2.5, fast="copy")]
    step = [
        dict(setting="smollm2", loop="trl", step=10.0, target=0.4),
        dict(setting="smollm2", loop="reinforce", step=4.5, target=0.4),
        dict(setting="smollm2", loop="reinforce-fast", step=3.5, target=0.4),
    ]
    return dict(bench="speed", cpu="Test CPU", floor=floor, sampler=sampler, step=step)


def test_the_targets_table_is_computed_from_the_figures():
    md = speed.speed_markdown(summary())
    assert md.startswith("Measured on: Test CPU")
    row = "| {} | SmolLM2-135M | {} | {} | {} |".format
    assert row("sampler vs `generate`, `kv_sampler` (generate's tokens)", "1.25x", ">= 2x",
               "not met") in md  # fmt: skip
    assert row("sampler vs `generate`, `--sampler fast`", "2.50x", ">= 2x", "holds") in md
    # 0.3 / 0.2 = 1.5: at the target holds; 0.14 / 0.1 = 1.4
    assert row("decoding step / its floor, float32 (default kernels), 64 rows", "1.50x",
               "<= 1.5x", "holds") in md  # fmt: skip
    assert row("decoding step / its floor, bfloat16 packed (`fast`), 64 rows", "1.40x",
               "<= 1.5x", "holds") in md  # fmt: skip
    assert row("decoding step / its floor, float32 packed, 8 rows", "-", "<= 1.5x",
               "not measured") in md  # fmt: skip
    assert row("`reinforce` step / TRL's GRPO step", "0.45x", "<= 0.4x", "not met") in md
    assert row("`reinforce-fast` step / TRL's GRPO step", "0.35x", "<= 0.4x", "holds") in md
    short = speed.speed_markdown(summary(), short=True)
    assert short.count("\n| ") == 1 + len(speed.SHORT)  # the header row and the three
    assert "2.50x" in short and "0.35x" in short and "2.50x" in short and "1.25x" not in short


def test_a_summary_holds_one_cpu(tmp_path):
    path = tmp_path / "speed.json"
    speed.record_speed(path, "sampler", [{"setting": "tiny"}])
    speed.record_speed(path, "floor", [{"model": "tiny"}])
    data = json.loads(path.read_text())
    assert data["cpu"] == machine() and set(data) == {"bench", "cpu", "sampler", "floor"}
    path.write_text(json.dumps({**data, "cpu": "Another CPU"}))
    with pytest.raises(ValueError, match="Another CPU"):
        speed.record_speed(path, "step", [])
