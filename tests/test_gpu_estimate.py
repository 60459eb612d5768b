"""benchmarks/gpu_estimate.py's arithmetic on a shape small enough to count by hand."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_estimate.py"
spec = importlib.util.spec_from_file_location("gpu_estimate", PATH)
est = importlib.util.module_from_spec(spec)
sys.modules["gpu_estimate"] = est
spec.loader.exec_module(est)

TOY = est.Shape(layers=1, hidden=2, intermediate=3, heads=1, kv_heads=1, head_dim=2, vocab=5)


def test_parameters_and_flops_by_hand():
    # q, o: 2 x 2 each; k, v: 2 x 2 each; MLP 3 x 2 x 3; the tied embedding 5 x 2
    assert TOY.layer_params() == 8 + 8 + 18
    assert TOY.params() == 34 + 10
    # 2 per weight of the layer and the output layer, 4 H hd per context token
    assert TOY.token_flops(10) == 2 * (34 + 10) + 4 * 2 * 10
    assert TOY.kv_bytes(10, rows=3) == 2 * 2 * 10 * 3 * 2  # keys + values, bf16


def test_decoding_takes_the_slower_of_products_and_bytes_plus_the_overhead():
    gpu = (100.0, 1000.0)  # FLOP/s, bytes/s
    # step 1 (context 1): 2 rows x 96 FLOPs = 1.92 s vs (44 x 4 + 16) bytes = 0.192 s
    # step 2 (context 2): 2 x 104 = 2.08 s vs (176 + 32) bytes = 0.208 s
    got = est.decode_seconds(TOY, 2, 1, 2, gpu, 1.0, weight_bytes=4, overhead=0.5)
    assert got == pytest.approx(1.92 + 0.5 + 2.08 + 0.5)
    slow_memory = (1e9, 1.0)  # then the bytes decide
    assert est.decode_seconds(TOY, 2, 1, 1, slow_memory, 1.0) == pytest.approx(192.0, rel=1e-6)


def test_the_training_passes_are_four_forwards_of_the_packed_batch():
    r = est.Recipe(questions=1, m=2, prompt=2, rationale=2, overhead=0.0)
    parts = est.step_seconds(TOY, r, (100.0, 1e12), 1.0)
    tokens = 1 * 2 + 2 * 2  # each prompt once, then its rationales
    assert parts["passes"] == pytest.approx(4 * tokens * TOY.token_flops(2 + 1) / 100.0)
    assert parts["optimizer"] == pytest.approx(32 * 44 / 1e12)


def test_the_performance_page_quotes_the_estimators_output_for_the_rung(capsys):
    """docs/performance.md's GPU estimate of the rung is the script's output for the
    command it shows, and its reading is that output's arithmetic: a step's sampling time,
    the share of it that is the assumed launches (one per decoding step), and ten seeds of
    the base evaluation, two-stage RLCD and GRPO on the H100."""
    import re

    text = (PATH.parents[1] / "docs" / "performance.md").read_text(encoding="utf-8")
    shown = re.search(r"```bash\n(python benchmarks/gpu_estimate\.py .*?)\n```\n\n```\n(.*?)```",
                      text, re.S)  # fmt: skip
    assert shown, "docs/performance.md shows no gpu_estimate.py command and output"
    argv = shown.group(1).replace("\\\n", " ").split()[2:]
    est.main(argv)
    assert capsys.readouterr().out == shown.group(2)
    opts = dict(zip(argv[::2], argv[1::2], strict=True))
    r = est.Recipe(
        steps=int(opts["--steps"]), prompt=int(opts["--prompt"]),
        rationale=int(opts["--rationale"]), dev_items=int(opts["--dev-items"]),
        test_items=int(opts["--test-items"]),
    )  # fmt: skip
    shape = est.Shape.from_config(est.MODELS[opts["--model"]])
    h100 = est.estimate(shape, r, est.GPUS["H100 SXM 80GB"], 0.35)
    ten = 10 * sum(h100[k] for k in ("base", "calibrate", "reinforce", "grpo")) / 60
    reading = " ".join(text.split())
    assert (
        f"Of a step's {h100['step sample'] + h100['step passes'] + h100['step optimizer']:.2f} s "
        f"on the H100, {r.rationale * r.overhead:.2f} s is the {r.rationale} decoding steps' "
        "assumed launches"
    ) in reading
    assert f"take about {ten:.0f} min on one H100" in reading
