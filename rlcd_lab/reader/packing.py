"""Packed scoring rows: the prompts' common head once, each prompt once, its rationales
after it (:func:`pack_rows`, the layout of :class:`Packed`). Pure layout (token ids,
positions, masks, gather indices): no model here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlcd_lab.reader.sampling import common_prefix_len


@dataclass(frozen=True)
class Packed:
    """``head (1, H)``: the prompts' common head (``H`` may be 0); ``ids``, ``positions``,
    ``segments`` ``(B, L)``: one row per question, segment 0 the rest of its prompt,
    ``1..m`` its continuations, -1 the pads at the right; ``keep``: for each of the
    caller's masks of wanted columns, the flat indices into ``(B L)`` of the logits it
    marks, in its ``nonzero()`` order."""

    head: Tensor
    ids: Tensor
    positions: Tensor
    segments: Tensor
    keep: tuple[Tensor, ...]

    def attention(self, dtype: torch.dtype | None = None) -> Tensor:
        """The ``(B, 1, L, H + L)`` mask over the head's and the row's own keys: every token
        sees the head; a token of a segment sees the tokens of that segment up to itself
        and, in a continuation, the rest of its prompt (segment 0); pads see the head only.
        Boolean (True: attend; ``dtype`` None, for SDPA) or additive in ``dtype`` (0 or its
        lowest value, for eager attention)."""
        s = self.segments
        cols = torch.arange(s.shape[1], device=s.device)
        causal = cols[None, None, :] <= cols[None, :, None]
        seen = (s[:, None, :] == s[:, :, None]) | (s[:, None, :] == 0)
        own = causal & seen & (s[:, :, None] >= 0) & (s[:, None, :] >= 0)
        head = own.new_ones((*own.shape[:2], self.head.shape[1]))
        allowed = torch.cat([head, own], 2)[:, None]
        if dtype is None:
            return allowed
        low = torch.full(allowed.shape, torch.finfo(dtype).min, dtype=dtype, device=s.device)
        return low.masked_fill(allowed, 0.0)


def pack_rows(
    ids: Tensor, attention_mask: Tensor, prompt_len: Tensor, m: int, wanted: tuple[Tensor, ...]
) -> Packed:
    """The packed layout of left-padded rows ``ids, attention_mask (N, T)`` whose first
    ``prompt_len (N,)`` real tokens are their prompt, rows ``b m .. b m + m - 1`` sharing
    prompt ``b``. Each mask of ``wanted`` (``(N, T)`` bool) marks columns of the batch
    whose logits are wanted; ``keep[j]`` gives them row by row, column by column. A wanted
    column inside the head is not supported (the head's logits are not computed).

    The scoring pass (``reading.score_rationales``) needs, for ``N = B m`` left-padded rows
    ``prompt_b + continuation_i``, the logits predicting each sampled token and those at each
    row's end. Encoded as they stand, each prompt is read ``m`` times and the head every
    prompt starts with (system text, worked examples) ``N`` times. Packed, the head is one
    row encoded once (its keys and values then shared by every question), and question ``b``
    is one row laid out as a tree:

        head (once):    [common head of the B prompts]
        row b:          [rest of prompt b] [continuation b.1] ... [continuation b.m] [pads]

    with an attention mask that lets a token see the head, its own segment up to itself and,
    from a continuation, the rest of its prompt; position ids count only those (as in the
    left-padded row it stands for). A causal LM then computes at every token what it computes
    at that token of the left-padded row, the same sums up to float rounding
    (``tests/test_reader.py``), with no token read twice. Pure layout (token ids, positions,
    masks, gather indices): no model here.
    """
    n, width = ids.shape
    real = attention_mask.sum(1).tolist()
    rows = [ids[i, width - real[i] :].tolist() for i in range(n)]
    plen = prompt_len.tolist()
    prompts = [rows[b][: plen[b]] for b in range(0, n, m)]
    h = common_prefix_len(prompts) if len(prompts) > 1 else 0
    tokens, positions, segments, where = [], [], [], []
    for b, prompt in enumerate(prompts):
        tok, pos, seg = prompt[h:], list(range(h, len(prompt))), [0] * (len(prompt) - h)
        for k in range(m):
            i = b * m + k
            start, cont = len(tok) - len(prompt), rows[i][len(prompt) :]
            tok, seg = tok + cont, seg + [k + 1] * len(cont)
            pos += range(len(prompt), real[i])
            # real column c of row i -> its column in row b (the head's columns: < 0)
            where.append([c - h if c < len(prompt) else start + c for c in range(real[i])])
        tokens.append(tok)
        positions.append(pos)
        segments.append(seg)
    length = max(len(t) for t in tokens)
    keep: list[list[int]] = [[] for _ in wanted]
    for i in range(n):
        pad = width - real[i]  # real column c of row i is column pad + c of the batch
        for kept, w in zip(keep, wanted, strict=True):
            for col in w[i].nonzero()[:, 0].tolist():
                c = where[i][col - pad]
                if c < 0:
                    raise ValueError(f"row {i}: a wanted column {col} lies in the shared head")
                kept.append((i // m) * length + c)

    def tensor(x: list[list[int]], fill: int) -> Tensor:
        out = torch.full((len(x), length), fill, dtype=torch.long)
        for r, row in enumerate(x):
            out[r, : len(row)] = torch.tensor(row, dtype=torch.long)
        return out.to(ids.device)

    return Packed(
        torch.tensor([prompts[0][:h]], dtype=torch.long, device=ids.device),
        tensor(tokens, 0),
        tensor(positions, 0),
        tensor(segments, -1),
        tuple(torch.tensor(k, dtype=torch.long, device=ids.device) for k in keep),
    )
