"""Where a decoding step's time goes: matrix products against everything else.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/profile_step.py [--settings tiny smollm2]
        [--rows 32] [--steps 20]

The profile kept for the speed target the tiny model misses (``kv_sampler`` >= 2x
``generate``; ``benchmarks/sampler.py``): one ``torch.profiler`` run over ``steps``
decoding steps of the sampler's own loop (``decoding._Steps``, the compact Llama path) at
``rows`` rows, after a 96-token prompt, for the default float32 kernels and for the packed
copy ``--sampler fast`` would use. Per step it prints the operations torch ran, the time
in matrix products (``aten::mm``/``addmm``/``bmm``/``linear`` and oneDNN's packed product)
and in everything else, and the mean time of one of the other operations. A step bound by
its products (SmolLM2) gains from faster products (packing, bfloat16); a step bound by the
count of its small operations (the 381k-parameter tiny model: hundreds of operations of a
few microseconds each around products that take a fraction of the step) gains from
neither, and ``generate`` pays the same per-operation cost plus its module machinery, so
the ratio between the two stays near the share of that machinery.

The CPU (model name and the flags that decide the kernels) is printed first.
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from rlcd_lab.bench.common import machine
from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.lm.pretrained import SMOLLM2_DEFAULT_DIR
from rlcd_lab.reader.decoding import _Steps, fast_dtype, plain_copy
from rlcd_lab.reader.llama import PackedLinears

PROMPT = 96
SETTINGS = {
    "tiny": Path("assets/checkpoints/base-verify"),
    "smollm2": SMOLLM2_DEFAULT_DIR.expanduser(),
}
PRODUCTS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "mkldnn::_linear_pointwise")
"""Operations counted as matrix products (self time)."""


def profile_steps(model, rows: int, steps: int, packed: PackedLinears | None) -> dict:
    """Operations, product and other milliseconds per step over ``steps`` profiled steps."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, model.config.vocab_size, (rows, PROMPT), generator=g)
    tokens = torch.randint(10, model.config.vocab_size, (rows,), generator=g)
    st = _Steps(model, ids, torch.ones_like(ids), PROMPT + steps + 4, packed)
    with torch.inference_mode():
        st.prefill()
        st(tokens)  # the first step picks the compact path
        st(tokens)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                st(tokens)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events) / 1e3 / steps
    products = sum(e.self_cpu_time_total for e in events if e.key in PRODUCTS) / 1e3 / steps
    # top-level operations only: those the step itself called (their children nest)
    calls = sum(1 for e in prof.events() if e.cpu_parent is None) / steps
    return {
        "compact": st.fast is not None,
        "ops": calls,
        "total": total,
        "products": products,
        "other": total - products,
        "per_op_us": 1e3 * (total - products) / max(calls, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    print(f"CPU: {machine()}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load "
          f"{os.getloadavg()[0]:.2f}; {args.rows} rows, {args.steps} profiled steps")  # fmt: skip
    print()
    print("| model | kernels | top-level ops / step | step ms | products ms | other ms "
          "| other share | us per other op |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for name in args.settings:
        path = SETTINGS[name]
        if not (path / "config.json").is_file():
            print(f"| {name} | skipped: no checkpoint at {path} |")
            continue
        model = load_checkpoint(path, "cpu")[0]
        dtype = fast_dtype("cpu")
        copy = plain_copy(model, dtype)
        variants = {"float32 (default)": (model, None)}
        if PackedLinears.available(copy):
            label = f"{str(dtype).removeprefix('torch.')} packed (a fast copy)"
            variants[label] = (copy, PackedLinears(copy))
        for label, (m, packed) in variants.items():
            r = profile_steps(m, args.rows, args.steps, packed)
            print(
                f"| {name} | {label}{'' if r['compact'] else ' (model forward)'} "
                f"| {r['ops']:.0f} | {r['total']:.2f} | {r['products']:.2f} | {r['other']:.2f} "
                f"| {r['other'] / r['total']:.0%} | {r['per_op_us']:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
