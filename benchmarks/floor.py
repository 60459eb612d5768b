"""The decoding step against the machine's own floor: SmolLM2 and the tiny model.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/floor.py [--settings tiny smollm2]
        [--rows 8 64] [--dtypes float32 bfloat16] [--kernels blas onednn] [--reps 20]
        [--json benchmarks/results/CPU/speed.json]

For each model, weight dtype, kernel and number of rows per step, measured in one run and
interleaved (every repetition times each measurement once, so a drift in the machine's
load hits all alike), in process CPU time (``time.process_time``; run it on one thread):

* ``step``: one KV-cached decoding step of ``rows`` rows after a ``PROMPT``-token prompt,
  the sampler's own step (``decoding._Steps``: ``_LlamaSteps`` where it applies), logits
  of the whole vocabulary included; median seconds. Kernel ``blas``: the model's own
  products (``F.linear``, generate's bits); ``onednn``: the matrices packed for oneDNN
  (``decoding.PackedLinears``, what ``--sampler fast``/``bf16`` decode with);
* ``read``: reading every weight once (``sum`` over each parameter tensor: memory-bound,
  the bytes a step must read at least once); median seconds;
* ``peak``: the matrix-product peak of this dtype on this machine (``torch.mm`` of two
  ``1024 x 1024`` matrices, best of the repetitions), GFLOP/s;
* ``floor = max(read, flops / peak)``, ``flops = 2 x rows x`` (parameters of the matrix
  products, the output matrix included): no step can read its weights faster than
  ``read`` or multiply faster than the peak; ``step / floor`` is how far the step is from
  it (1: at the floor);
* ``sampler``: one ``decoding.kv_sampler`` call drawing ``rows`` rationales of
  ``NEW`` tokens (``rows / 4`` prompts x 4, every row forced to the full length: an
  unreachable marker, no EOS), its seconds per generated step against the floor: the
  prompt's encoding and the Python loop around the steps are in it; ``rows/s``: rows
  advanced one token per second (``rows / sampler``), what a wider batch buys.

CPU features: the ``bfloat16`` rows need native bfloat16 products, the test
``decoding.fast_dtype`` decides ``--sampler fast``'s dtype with (oneDNN's
``torch.ops.mkldnn._is_mkldnn_bf16_supported()``: ``avx512_bf16`` or AMX, and not limited
below them by ``ONEDNN_MAX_CPU_ISA``); elsewhere bfloat16 is emulated and its step
against the floor means nothing (a step / floor of 0.11, below the floor, was printed
under ``tests/emulate_cpu.py avx2``), so those rows are skipped with that reason, in the
table and in the summary (``skipped``). The ``onednn`` rows need oneDNN's packed products
(``decoding.PackedLinears.available``), else they are skipped the same way.

``--json``: the rows are also merged into that speed summary (``bench.speed.record_speed``,
key ``floor``; without a path, this CPU kind's ``benchmarks/results/<kind>/speed.json``),
from which ``python -m rlcd_lab.reports.report --readme`` writes the speed tables of the README
and docs/performance.md. The CPU (model name, the flags that decide the kernels and any
limit put on them) is printed first: a figure means something only beside the machine it
was measured on. The ratios are the numbers to compare across machines.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from pathlib import Path

import torch

from rlcd_lab.bench.speed import add_json_argument, machine_line, record_speed
from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.lm.pretrained import SMOLLM2_DEFAULT_DIR
from rlcd_lab.reader.decoding import _Steps, fast_dtype, kv_sampler
from rlcd_lab.reader.llama import PackedLinears

PROMPT = 96
"""Prompt tokens before the timed steps (the rung's prompts are about 120)."""
NEW = 32
"""Tokens per rationale in the ``sampler`` measurement."""
SETTINGS = {
    "tiny": Path("assets/checkpoints/base-verify"),
    "smollm2": SMOLLM2_DEFAULT_DIR.expanduser(),
}


def matmul_params(model: torch.nn.Module) -> int:
    """Parameters that a decoding step multiplies with (every 2-D weight but the input
    embedding, which is indexed; a tied output matrix counts once, as the product it is)."""
    emb = model.get_input_embeddings().weight
    tied = model.get_output_embeddings().weight is emb
    n = sum(p.numel() for name, p in model.named_parameters() if p.dim() == 2 and p is not emb)
    return n + (emb.numel() if tied else 0)


NO_BF16 = (
    "no native bfloat16 products on this CPU (oneDNN's _is_mkldnn_bf16_supported() is "
    "False: bfloat16 would be emulated)"
)
"""Why the bfloat16 rows are skipped where :func:`decoding.fast_dtype` picks float32."""


def skip_reason(dtype_name: str) -> str | None:
    """Why rows of ``dtype_name`` cannot run on this CPU (None: they can)."""
    if dtype_name == "bfloat16" and fast_dtype("cpu") != torch.bfloat16:
        return NO_BF16
    return None


def timer(fn) -> float:
    """Process CPU seconds of ``fn()`` (one thread: its compute; other processes on a
    shared machine disturb it less than wall time)."""
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def measure(model, tok, rows: int, reps: int, dtype: torch.dtype, packed) -> dict:
    """Median step and read seconds, peak GFLOP/s and the sampler's seconds per step
    (``packed``: a ``PackedLinears`` of ``model`` or None)."""
    g = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    ids = torch.randint(10, vocab, (rows, PROMPT), generator=g)
    mask = torch.ones_like(ids)
    steps = _Steps(model, ids, mask, PROMPT + reps + 2, packed)
    steps.prefill()
    tokens = torch.randint(10, vocab, (rows,), generator=g)
    steps(tokens)  # first step: picks the fast path
    params = [p for p in model.parameters()]
    a = torch.randn(1024, 1024, generator=g).to(dtype)
    b = torch.randn(1024, 1024, generator=g).to(dtype)
    sampler_ids = torch.randint(10, vocab, (max(1, rows // 4), PROMPT), generator=g)
    sampler_ids = sampler_ids.repeat_interleave(rows // max(1, rows // 4), 0)
    kw = dict(
        row_seeds=list(range(len(sampler_ids))),
        max_new_tokens=NEW,
        marker="\x00@@",
        eos=[],
        packed=packed,
    )
    step_s, read_s, mm_s, samp_s = [], [], [], []
    with torch.inference_mode():
        for _ in range(reps):
            step_s.append(timer(lambda: steps(tokens)))
            read_s.append(timer(lambda: [p.sum() for p in params]))
            mm_s.append(timer(lambda: torch.mm(a, b)))
        for _ in range(max(1, reps // 10)):
            samp_s.append(
                timer(
                    lambda: kv_sampler(model, tok, sampler_ids, torch.ones_like(sampler_ids), **kw)
                )
                / NEW
            )
    peak = 2 * 1024**3 / min(mm_s) / 1e9
    flops = 2 * rows * matmul_params(model)
    step, read = statistics.median(step_s), statistics.median(read_s)
    floor = max(read, flops / (peak * 1e9))
    sampler = statistics.median(samp_s)
    return dict(step=step, read=read, peak=peak, floor=floor, sampler=sampler)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    ap.add_argument("--rows", nargs="+", type=int, default=[8, 64])
    ap.add_argument(
        "--dtypes", nargs="+", choices=["float32", "bfloat16"], default=["float32", "bfloat16"]
    )
    ap.add_argument("--kernels", nargs="+", choices=["blas", "onednn"], default=["blas", "onednn"])
    ap.add_argument("--reps", type=int, default=20)
    add_json_argument(ap)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    print(f"CPU: {machine_line()}")
    bf16 = skip_reason("bfloat16")
    print(f"CPU features: native bfloat16 products (oneDNN) {'no' if bf16 else 'yes'}")
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"load {os.getloadavg()[0]:.2f}"
    )
    print()
    print(
        "| model | dtype | kernel | rows | step ms | read ms | peak GFLOP/s | floor ms "
        "| step / floor | sampler ms/step | sampler / floor | sampler rows/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    table: list[dict] = []
    for name in args.settings:
        path = SETTINGS[name]
        if not (path / "config.json").is_file():
            print(f"| {name} | skipped: no checkpoint at {path} |")
            continue
        model32, tok, _ = load_checkpoint(path, "cpu")
        for dtype_name in args.dtypes:
            reason = skip_reason(dtype_name)
            if reason is not None:
                print(f"| {name} | {dtype_name} | all | {' '.join(map(str, args.rows))} "
                      f"| skipped: {reason} |")  # fmt: skip
                table += [
                    dict(model=name, dtype=dtype_name, kernel=k, rows=n, skipped=reason)
                    for k in args.kernels
                    for n in args.rows
                ]
                continue
            dtype = getattr(torch, dtype_name)
            model = (
                model32 if dtype == torch.float32 else load_checkpoint(path, "cpu", dtype=dtype)[0]
            )
            for kernel in args.kernels:
                if kernel == "onednn" and not PackedLinears.available(model):
                    why = "oneDNN's packed products are not available on this CPU"
                    print(f"| {name} | {dtype_name} | {kernel} | all | skipped: {why} |")
                    table += [
                        dict(model=name, dtype=dtype_name, kernel=kernel, rows=n, skipped=why)
                        for n in args.rows
                    ]
                    continue
                packed = PackedLinears(model) if kernel == "onednn" else None
                for rows in args.rows:
                    r = measure(model, tok, rows, args.reps, dtype, packed)
                    table.append(dict(model=name, dtype=dtype_name, kernel=kernel, rows=rows, **r))
                    print(
                        f"| {name} | {dtype_name} | {kernel} | {rows} | {1e3 * r['step']:.2f} "
                        f"| {1e3 * r['read']:.2f} | {r['peak']:.0f} | {1e3 * r['floor']:.2f} "
                        f"| {r['step'] / r['floor']:.2f} | {1e3 * r['sampler']:.2f} "
                        f"| {r['sampler'] / r['floor']:.2f} | {rows / r['sampler']:.0f} |",
                        flush=True,
                    )
    print(f"\nload at the end {os.getloadavg()[0]:.2f}")
    if args.json is not None:
        record_speed(args.json, "floor", table)


if __name__ == "__main__":
    main()
