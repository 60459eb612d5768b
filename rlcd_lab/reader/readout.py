"""The readout: option tokens and ``u = softmax(logits[options])`` at the end of a text.

A reasoning model writes a rationale that ends in a marker (``"Answer:"``). Instead of
sampling the answer we *read* the next-token distribution restricted to the K option
tokens (OpenJev-RLCD sec. 2):

    u_theta(x, r) = softmax(logits_theta(x, r)[option tokens])  in Delta_K.

Start at :func:`option_token_ids` (:class:`OptionTokens`) and :func:`readout`. Prompts,
sampling and the whole prompt -> rationales -> readout pipeline live in
:mod:`rlcd_lab.reader`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlcd_lab.lm.checkpoint import MARKER, SEP


@dataclass(frozen=True)
class OptionTokens:
    """Token ids of K option labels as they follow ``marker + sep``.

    ``ids[k]`` is the single token of ``labels[k]``; ``bridge`` the tokens (possibly none)
    between the marker and the label, identical for every label, appended after the
    marker before the readout is taken. Labels follow the marker after a separator
    (``" "``): depending on the tokenizer it merges into the label token (BPE: ``" yes"``
    is one token, no bridge) or stays a token of its own (the tiny world's character
    tokenizer: the bridge is that token).
    """

    labels: tuple[str, ...]
    ids: tuple[int, ...]
    bridge: tuple[int, ...]
    marker: str = MARKER
    sep: str = SEP

    def __len__(self) -> int:
        return len(self.labels)


def _encode(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def option_token_ids(
    tokenizer: PreTrainedTokenizerBase,
    labels: Sequence[str],
    marker: str = MARKER,
    sep: str = SEP,
) -> OptionTokens:
    """Find the token of each label as it follows ``marker + sep``.

    Tokenizes ``marker + sep + label`` as one string (so context-dependent tokenizers are
    handled) and requires it to be the marker's tokens, a bridge shared by all labels,
    then exactly one label token. Raises ``ValueError`` naming the offending labels when a
    label is empty or repeated, is not a single token after the marker, maps to the
    unknown token, or when two labels share a token.
    """
    labels = tuple(labels)
    if len(labels) < 2:
        raise ValueError(f"need at least 2 option labels, got {list(labels)}")
    if any(not label or label != label.strip() for label in labels):
        bad = [label for label in labels if not label or label != label.strip()]
        raise ValueError(f"option labels must be non-empty without outer spaces: {bad}")
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ValueError(f"duplicate option labels: {repeated}")
    ctx = _encode(tokenizer, marker)
    sep_bridge = _encode(tokenizer, marker + sep)[len(ctx) :]
    ids, bridges, not_single = [], set(), []
    for label in labels:
        full = _encode(tokenizer, marker + sep + label)
        rest = full[len(ctx) :]
        if full[: len(ctx)] == ctx and len(rest) == 1:
            bridges.add(())
            ids.append(rest[0])
        elif (
            full[: len(ctx)] == ctx and rest[:-1] == sep_bridge and len(rest) == 1 + len(sep_bridge)
        ):
            bridges.add(tuple(sep_bridge))
            ids.append(rest[-1])
        else:
            not_single.append(label)
            ids.append(-1)
    if not_single:
        raise ValueError(
            f"option labels {not_single} are not a single token after {marker + sep!r} "
            "for this tokenizer; use shorter labels (e.g. letters A, B, C)"
        )
    if len(bridges) != 1:
        raise ValueError(f"labels {list(labels)} tokenize differently after {marker!r}")
    unknown = [la for la, i in zip(labels, ids, strict=True) if i == tokenizer.unk_token_id]
    if unknown:
        raise ValueError(f"option labels {unknown} map to the tokenizer's unknown token")
    clashes = sorted({la for la, i in zip(labels, ids, strict=True) if ids.count(i) > 1})
    if clashes:
        raise ValueError(f"option labels {clashes} share a token after {marker!r}")
    return OptionTokens(labels, tuple(ids), bridges.pop(), marker, sep)


def position_ids(attention_mask: Tensor) -> Tensor:
    """Positions that skip padding: ``cumsum(mask) - 1`` (0 on pads), as HF ``generate``."""
    return (attention_mask.long().cumsum(-1) - 1).clamp_min(0)


def option_logits(logits: Tensor, option_ids: Tensor) -> Tensor:
    """Logits of the options, ``(B, V), (K,) or (B, K) -> (B, K)`` in float32 (float64
    logits stay float64).

    Entries of ``option_ids`` equal to -1 mark absent options (mixed K in one batch):
    their logit is ``-inf`` so ``softmax`` gives them probability 0.
    """
    option_ids = option_ids.to(logits.device).expand(logits.shape[0], -1)
    out = logits.to(torch.promote_types(logits.dtype, torch.float32))
    out = out.gather(-1, option_ids.clamp_min(0))
    return out.masked_fill(option_ids < 0, float("-inf"))


def keep_last(device: torch.device | str) -> dict[str, Tensor]:
    """The forward argument that keeps the logits of each row's last column only:
    ``logits_to_keep`` as positions (``[-1]``), so transformers gathers the rows' last
    hidden states into one contiguous ``(B, 1, d)`` block before the output layer.
    ``logits_to_keep=1`` hands it a strided slice instead, which the CPU multiplies as
    ``B`` matrix-vector products, each reading the whole output matrix (SmolLM2's 49152 x
    576: several times slower at 16 rows, ``benchmarks/RESULTS.md``). The same logits up to
    float rounding."""
    return {"logits_to_keep": torch.tensor([-1], device=device)}


def readout(
    model: PreTrainedModel,
    input_ids: Tensor,
    attention_mask: Tensor,
    option_ids: Tensor | Sequence[int],
) -> tuple[Tensor, Tensor]:
    """``u = softmax(logits[last real position, options])`` for a padded batch.

    Shapes: ``input_ids, attention_mask (B, T)`` with left or right padding;
    ``option_ids (K,)`` or ``(B, K)`` (-1 = absent option). Returns ``(u, logits)``, both
    ``(B, K)`` float32 whatever the model's dtype; rows of ``u`` sum to 1 over the present
    options. The sequences must already end with the marker (and the bridge). Gradients
    flow when called outside ``no_grad``.
    """
    option_ids = torch.as_tensor(option_ids, dtype=torch.long)
    attention_mask = attention_mask.to(input_ids.device)
    if bool(attention_mask[:, -1].all()):  # left padding: the last column is real
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids(attention_mask),
            **keep_last(input_ids.device),
        )
        last = out.logits[:, -1]
    else:
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids(attention_mask),
        )
        steps = torch.arange(1, attention_mask.shape[1] + 1, device=attention_mask.device)
        idx = (attention_mask.long() * steps).argmax(-1)  # last real token of each row
        last = out.logits[torch.arange(len(idx), device=idx.device), idx]
    logits = option_logits(last, option_ids)
    return logits.softmax(-1), logits
