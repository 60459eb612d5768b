"""How long the paper's own setup (examples/paper_gpu.sh) would take on one H100 or H200:
an estimate from the model's shape and the recipe, not a measurement (no GPU was used).

    python benchmarks/gpu_estimate.py [--model qwen3-1.7b|smollm2-135m] [--mfu 0.35] ...
    python benchmarks/gpu_estimate.py --model smollm2-135m --steps 100 --prompt 120 \
        --rationale 40 --dev-items 105 --test-items 209     # the rung (--scale rung)

The work, per training step of 8 questions x 4 rationales (prompt ``P`` tokens, rationale
``R`` tokens on average): sampling (the 8 prompts' prefill, compute-bound; then ``R``
decoding steps of 32 rows, each the slower of its products and of reading the weights and
the KV cache); the scoring pass with its backward (3 forward's worth) and the frozen
anchor's forward on the ``8 P + 32 R`` tokens of the packed batch (each prompt once),
compute-bound at ``--mfu`` of the bf16 peak; AdamW reading and writing its float32 state.
Evaluation: dev (100 items, for T) and test items, one rationale each, decoded in calls of
64 questions. SFT steps are one forward and backward over the prompts. Default model:
Qwen3-1.7B's published shape; ``smollm2-135m`` the rung's model (SmolLM2-135M-Instruct's
published shape).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

GPUS = {  # dense bf16 peak (FLOP/s), HBM bandwidth (bytes/s)
    "H100 SXM 80GB": (989e12, 3.35e12),
    "H200 141GB": (989e12, 4.8e12),
}
QWEN3_1_7B = dict(
    num_hidden_layers=28, hidden_size=2048, intermediate_size=6144, num_attention_heads=16,
    num_key_value_heads=8, head_dim=128, vocab_size=151936,
)  # fmt: skip
SMOLLM2_135M = dict(
    num_hidden_layers=30, hidden_size=576, intermediate_size=1536, num_attention_heads=9,
    num_key_value_heads=3, head_dim=64, vocab_size=49152,
)  # fmt: skip
MODELS = {"qwen3-1.7b": QWEN3_1_7B, "smollm2-135m": SMOLLM2_135M}


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def from_config(cls, cfg: dict) -> Shape:
        return cls(
            cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"],
            cfg["num_attention_heads"], cfg["num_key_value_heads"],
            cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"],
            cfg["vocab_size"],
        )  # fmt: skip

    def layer_params(self) -> int:
        """Weights of one decoder layer: q and o ``d x H hd``, k and v ``d x Hkv hd``, the
        SwiGLU MLP ``3 d I`` (norms left out)."""
        d, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return 2 * d * q + 2 * d * kv + 3 * d * self.intermediate

    def params(self) -> int:
        """All weights, the output layer tied to the embedding."""
        return self.layers * self.layer_params() + self.vocab * self.hidden

    def token_flops(self, context: float) -> float:
        """Forward FLOPs of one token attending to ``context`` tokens: ``2`` per weight of
        the layers and the output layer, plus ``4 H hd`` per layer and context token."""
        dense = 2 * (self.layers * self.layer_params() + self.vocab * self.hidden)
        return dense + 4 * self.layers * self.heads * self.head_dim * context

    def kv_bytes(self, context: float, rows: int, width: int = 2) -> float:
        """The KV cache read by one decoding step of ``rows`` rows (bf16: ``width`` 2)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * context * rows * width


@dataclass(frozen=True)
class Recipe:
    steps: int = 400
    questions: int = 8
    m: int = 4
    prompt: int = 150
    rationale: int = 200
    dev_items: int = 100
    test_items: int = 1000
    eval_batch: int = 64
    seeds: int = 3
    weight_bytes: int = 4  # --bf16 keeps float32 weights and computes in bf16 (autocast)
    overhead: float = 0.025
    """Seconds of launch and Python work per decoding step (a transformers forward of 28
    layers runs hundreds of small kernels one after another; an assumption, not measured)."""


def decode_seconds(
    shape: Shape,
    rows: int,
    prompt: float,
    new: int,
    gpu,
    eff: float,
    weight_bytes: int = 4,
    overhead: float = 0.0,
) -> float:
    """``new`` decoding steps of ``rows`` rows after ``prompt`` tokens: each the slower of
    its products (at ``eff`` of the peak) and its bytes (weights + KV cache, ``eff`` of
    the bandwidth), plus ``overhead`` seconds."""
    peak, bandwidth = gpu
    total = 0.0
    for t in range(new):
        ctx = prompt + t
        flops = rows * shape.token_flops(ctx)
        read = shape.params() * weight_bytes + shape.kv_bytes(ctx, rows)
        total += max(flops / (peak * eff), read / (bandwidth * eff)) + overhead
    return total


def step_seconds(shape: Shape, r: Recipe, gpu, mfu: float) -> dict[str, float]:
    """One RL step's parts (seconds): sampling, scoring + backward + anchor, optimizer."""
    peak, bandwidth = gpu
    prefill = r.questions * r.prompt * shape.token_flops(r.prompt / 2) / (peak * mfu)
    rows = r.questions * r.m
    sample = prefill + decode_seconds(
        shape, rows, r.prompt, r.rationale, gpu, mfu, r.weight_bytes, r.overhead
    )
    tokens = r.questions * r.prompt + rows * r.rationale
    # the scoring pass, its backward (2 forwards' worth) and the anchor's forward
    passes = 4 * tokens * shape.token_flops(r.prompt + r.rationale / 2) / (peak * mfu)
    adam = 32 * shape.params() / (bandwidth * mfu)  # fp32 weight, grad, 2 moments: r + w
    return {"sample": sample, "passes": passes, "optimizer": adam}


def eval_seconds(shape: Shape, r: Recipe, gpu, mfu: float, items: int) -> float:
    """``items`` questions, one rationale each, in calls of ``eval_batch``."""
    calls = -(-items // r.eval_batch)
    return calls * decode_seconds(
        shape, r.eval_batch, r.prompt, r.rationale, gpu, mfu, r.weight_bytes, r.overhead
    )


def estimate(shape: Shape, r: Recipe, gpu, mfu: float) -> dict[str, float]:
    """Seconds of one seed's runs and of the whole recipe (``r.seeds`` seeds)."""
    step = step_seconds(shape, r, gpu, mfu)
    rl_step = sum(step.values())
    sft_flops = 3 * r.questions * r.prompt * shape.token_flops(r.prompt / 2)  # fwd + bwd
    sft_step = sft_flops / (gpu[0] * mfu) + step["optimizer"]
    evals = eval_seconds(shape, r, gpu, mfu, r.dev_items + r.test_items)
    runs = {
        "base": evals + eval_seconds(shape, r, gpu, mfu, r.test_items),  # + direct answers
        "calibrate": r.steps * rl_step + evals,
        "reinforce": r.steps * rl_step + evals,
        **{k: 2 * r.steps * rl_step + evals for k in ("grpo", "rft-kl", "rlcr")},
        "sft": 2 * r.steps * sft_step + evals,
    }
    return {**{f"step {k}": v for k, v in step.items()}, **runs, "seed": sum(runs.values()),
            "total": r.seeds * sum(runs.values())}  # fmt: skip


def fmt_seconds(key: str, seconds: float) -> str:
    """A cell of the table: a step's parts in seconds, a run under an hour in minutes,
    else hours."""
    if key.startswith("step"):
        return f"{seconds:.2f} s"
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, help="a model's config.json (instead of --model)")
    ap.add_argument("--model", choices=sorted(MODELS), default="qwen3-1.7b")
    ap.add_argument("--mfu", type=float, default=0.35, help="share of the peak reached")
    ap.add_argument("--prompt", type=int, default=Recipe.prompt)
    ap.add_argument("--rationale", type=int, default=Recipe.rationale)
    ap.add_argument("--overhead-ms", type=float, default=1000 * Recipe.overhead)
    ap.add_argument("--steps", type=int, default=Recipe.steps, help="steps per stage")
    ap.add_argument("--dev-items", type=int, default=Recipe.dev_items)
    ap.add_argument("--test-items", type=int, default=Recipe.test_items)
    ap.add_argument("--seeds", type=int, default=Recipe.seeds)
    args = ap.parse_args(argv)
    cfg = json.loads(args.config.read_text()) if args.config else MODELS[args.model]
    shape = Shape.from_config(cfg)
    r = Recipe(
        steps=args.steps, prompt=args.prompt, rationale=args.rationale,
        dev_items=args.dev_items, test_items=args.test_items, seeds=args.seeds,
        overhead=args.overhead_ms / 1000,
    )  # fmt: skip
    n = shape.params()
    print(f"model: {n / 1e9:.2f} B parameters; recipe: {r.steps} steps per stage, "
          f"{r.questions} x {r.m}, prompt {r.prompt} + rationale {r.rationale} tokens, "
          f"{r.seeds} seeds; MFU {args.mfu}; {args.overhead_ms:g} ms per decoding step"
          )  # fmt: skip
    print(f"memory: weights + grads + AdamW (float32) {16 * n / 2**30:.0f} GiB, the anchor "
          f"{4 * n / 2**30:.0f} GiB, activations not counted")  # fmt: skip
    rows = {gpu: estimate(shape, r, spec, args.mfu) for gpu, spec in GPUS.items()}
    keys = list(next(iter(rows.values())))
    print("| " + " | ".join(["GPU", *keys]) + " |")
    print("|" + "---|" * (len(keys) + 1))
    for gpu, est in rows.items():
        cells = [fmt_seconds(k, v) for k, v in est.items()]
        print("| " + " | ".join([gpu, *cells]) + " |")
    print("An estimate from the model's shape (no GPU was measured).")


if __name__ == "__main__":
    main()
