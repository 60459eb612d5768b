"""The packed scoring pass's tree-mask attention against dense baselines, forward and
backward, at the rung's shapes.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/tree_attention.py [--reps 20]

One SmolLM2-135M attention call (9 query heads on 3 key/value heads of 64 dimensions) as
the packed pass (``reader.packing``) makes it for the rung's batch: 8 rows (questions), each
the rest of its prompt (37 tokens) and 4 continuations of 30 tokens (L = 157 queries), over
the prompts' common head (81 keys, cached) and the row's own L keys. Variants of
``F.scaled_dot_product_attention`` with gradient, the same shapes:

* ``tree``: the packed pass's boolean mask (``PackedRows.attention()``: the head, the
  row's prompt, its own continuation causally; not the other continuations);
* ``tree additive``: the same mask as float (0 or the dtype's minimum), what a model not on
  SDPA gets;
* ``dense causal mask``: a plain causal boolean mask over head + row (one sequence, no
  tree): the dense baseline of the same work;
* ``no mask``: every query sees every key: SDPA's unmasked kernel, the floor.

Every repetition runs each variant once, order rotated; process CPU seconds (one thread),
medians. Outputs of ``tree`` equal a per-continuation dense reference (each continuation
with its prompt and the head, causal) to 1e-5, checked once.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlcd_lab.bench.common import machine  # noqa: E402

HEAD, PROMPT, CONT, M, ROWS, HQ, HKV, D = 81, 37, 30, 4, 8, 9, 3, 64


def tree_mask() -> torch.Tensor:
    """``(L, HEAD + L)`` bool: the head, the row's prompt causally, each continuation on
    the prompt and causally on itself."""
    seg = torch.tensor([-1] * PROMPT + [j for j in range(M) for _ in range(CONT)])
    n = len(seg)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    same = (seg[:, None] == seg[None]) | (seg[None] == -1)
    return torch.cat([torch.ones(n, HEAD, dtype=torch.bool), causal & same], 1)


def dense_check(q, k, v, mask) -> float:
    """Largest difference of the tree-masked output from each continuation read alone."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    worst = 0.0
    for j in range(M):
        cols = list(range(HEAD + PROMPT)) + [HEAD + PROMPT + j * CONT + i for i in range(CONT)]
        rows = list(range(PROMPT)) + [PROMPT + j * CONT + i for i in range(CONT)]
        sub = torch.ones(len(rows), len(cols), dtype=torch.bool).tril(HEAD)
        ref = F.scaled_dot_product_attention(
            q[:, :, rows], k[:, :, cols], v[:, :, cols], attn_mask=sub, enable_gqa=True
        )
        worst = max(worst, float((ref - out[:, :, rows]).abs().max()))
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    n = PROMPT + M * CONT
    q = torch.randn(ROWS, HQ, n, D, generator=g)
    k = torch.randn(ROWS, HKV, HEAD + n, D, generator=g)
    v = torch.randn(ROWS, HKV, HEAD + n, D, generator=g)
    tree = tree_mask()
    additive = torch.zeros(tree.shape).masked_fill(~tree, torch.finfo(torch.float32).min)
    causal = torch.ones(n, HEAD + n, dtype=torch.bool).tril(HEAD)
    variants = {
        "tree": tree,
        "tree additive": additive,
        "dense causal mask": causal,
        "no mask": None,
    }
    print(f"tree mask vs per-continuation dense: max diff {dense_check(q, k, v, tree):.1e}")
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for rep in range(args.reps + 1):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            qq, kk, vv = (x.clone().requires_grad_() for x in (q, k, v))
            t0 = time.process_time()
            out = F.scaled_dot_product_attention(
                qq, kk, vv, attn_mask=variants[name], enable_gqa=True
            )
            out.sum().backward()
            if rep:
                times[name].append(time.process_time() - t0)
    print(f"CPU: {machine()}; one torch thread; forward + backward, {args.reps} reps")
    print("| attention | CPU ms (median) | / no mask |")
    print("|---|---|---|")
    floor = statistics.median(times["no mask"])
    for name in names:
        med = statistics.median(times[name])
        print(f"| {name} | {1e3 * med:.1f} | {med / floor:.2f}x |")


if __name__ == "__main__":
    main()
