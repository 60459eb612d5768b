"""What every sampler shares: the :class:`Sampler` protocol, its output :class:`Generated`,
the seeded Gumbel noise that makes a row's draw depend on its seed alone, and the few
model helpers the decoding loops need (:func:`pad_id`, :func:`base_model`,
:func:`forward_args`).

The lowest floor of the sampling path: :mod:`rlcd_lab.reader.decoding` (the compact KV-cached
loop, ``kv_sampler``) and the reader's modules (:mod:`rlcd_lab.reader.rationales`: ``hf_sampler``,
the rationale pipeline; :mod:`rlcd_lab.reader.reading`; the :class:`~rlcd_lab.reader.Reader`)
import it, so decoding imports none of them."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor
from transformers import LogitsProcessor, PreTrainedModel, PreTrainedTokenizerBase, TopPLogitsWarper

__all__ = [
    "Generated",
    "GumbelSampler",
    "Sampler",
    "SamplingStopped",
    "base_model",
    "forward_args",
    "pad_id",
]


SHARE_MIN_PROMPT = 32
"""Prompts whose common part has at least this many tokens are read once: by
``reading.score_rationales`` (with gradient: packed, ``rlcd_lab.reader.packing``, the prompts'
common head once and each prompt once before its ``m`` rationales), by
``reading.readout_after`` (every row's shared prefix when only the readout is wanted) and
by ``decoding.kv_sampler``'s prefill (the system text and worked examples every prompt of
a call starts with). The rule looks at the prompts only, so what a model writes never
switches the pass (the passes agree up to float rounding; a rerun takes the same one).
Below it (the tiny models' prompts of ~14 tokens) one plain pass costs about what the
sharing would save (``benchmarks/scoring.py``)."""


def common_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix, at most all but the last token of the shortest
    sequence (so every sequence keeps a token after it)."""
    n = min(len(s) for s in seqs) - 1
    k = 0
    while k < n and all(s[k] == seqs[0][k] for s in seqs):
        k += 1
    return k


class SamplingStopped(Exception):
    """A sampler gave up before its rows were done because its ``should_stop`` callable
    said so (checked before every decoding step): the caller no longer wants the
    rationales (a client that went away, a deadline that passed). Nothing is returned."""


def pad_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The id that pads batches: the pad token, else EOS, else 0 (padded positions are
    masked, so the choice never changes a result)."""
    if tokenizer.pad_token_id is not None:
        return tokenizer.pad_token_id
    return tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0


class GumbelSampler(LogitsProcessor):
    """Sampling as greedy decoding of ``logits / sampling_temperature + G``, ``G`` i.i.d.
    Gumbel(0, 1) noise drawn from one generator per row (the Gumbel-max trick: ``argmax``
    is then an exact draw from ``softmax(logits / sampling_temperature)``, restricted to
    the nucleus when ``top_p < 1``). Row ``i`` draws its noise from ``torch.Generator`` seeded by
    ``row_seeds[i]``, so what a row samples depends on its seed and its logits only, never
    on the batch it shares (batch size, padding, other rows, sharding across processes)."""

    def __init__(self, row_seeds: Sequence[int], sampling_temperature: float, top_p: float, device):
        self.gens = [torch.Generator(device=device).manual_seed(s) for s in row_seeds]
        self.sampling_temperature = sampling_temperature
        self.top_p = TopPLogitsWarper(top_p) if top_p < 1.0 else None

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        return self.perturb(scores, self.gens)

    def perturb(self, scores: Tensor, gens: Sequence[torch.Generator]) -> Tensor:
        """``scores / sampling_temperature`` (top-p filtered) plus Gumbel noise, row ``i`` of
        ``scores`` drawing one ``torch.rand(V)`` from ``gens[i]`` (a subset of ``self.gens``
        when a decoding loop drops finished rows: ``decoding.kv_sampler``)."""
        scores = scores.float() / self.sampling_temperature
        if self.top_p is not None:
            scores = self.top_p(None, scores)
        u = torch.stack(
            [torch.rand(scores.shape[-1], generator=g, device=scores.device) for g in gens]
        )
        return scores - torch.log(-torch.log(u))


@dataclass(frozen=True)
class Generated:
    """What a sampler returns for ``N`` rows (CPU tensors): ``tokens (N, S)`` the generated
    ids (anything after a row's stop is ignored), ``end (N,)`` tokens up to and including
    the one that stopped the row (-1: it ran to ``max_new_tokens``), ``hit_marker (N,)``
    whether that stop was the marker (else EOS), and ``token_lp (N, S)`` the sampler's
    log-probability of each token at temperature 1. ``token_lp`` only fills
    ``Rationales.logp_r``, for display and evaluation's dumps (``reading.read``): training
    recomputes log-probs with the model (``score_rationales``), so a sampler's numerics
    never reach a gradient. ``prompt_cache``: see :class:`PromptCache` (None unless asked
    for)."""

    tokens: Tensor
    end: Tensor
    hit_marker: Tensor
    token_lp: Tensor
    prompt_cache: PromptCache | None = None


@dataclass(frozen=True)
class PromptCache:
    """The keys and values a sampler held for each row (``decoding.kv_sampler`` with
    ``keep_prompt=True``): ``cache`` (a transformers cache of ``N`` rows) and ``mask (N,
    W)``, the attention mask of its ``W`` columns: the prompts' columns (a shared prefix's
    layout may put pads inside a row), then the ``generated (N,)`` tokens each row fed the
    model (all it drew but the last; None: the prompt alone), masked past a row's own.
    ``reading.readout_after`` reads what follows on top of it, so evaluation encodes each
    prompt and each rationale token once for sampling and readout together. Single use: the
    readout appends to it."""

    cache: object
    mask: Tensor
    generated: Tensor | None = None


class Sampler(Protocol):
    """What draws rationale tokens: ``reader.hf_sampler`` (the model's ``generate``),
    ``decoding.kv_sampler`` (the default), ``decoding.CopySampler``, ``train.vllm.VLLMSampler``,
    ``reader.written_sampler``, ``integrations.trl.replay_sampler``.

    Called with the model, its tokenizer and left-padded rows ``ids, mask (N, T)``: draw
    up to ``max_new_tokens`` tokens per row, row ``i`` with noise seeded by
    ``row_seeds[i]`` at the sampling temperature ``sampling_temperature`` (nucleus ``top_p``; the
    protocol's keyword, which every sampler takes, is what callers pass as
    ``sampling_temperature``), stopping a row once its
    decoded text contains ``marker`` (None: no marker, free text) or it emitted a token of
    ``eos``. ``should_stop`` (only passed when the caller has one): asked during the
    draw; once it returns True the sampler raises :class:`SamplingStopped`. Returns a
    :class:`Generated` (CPU tensors)."""

    def __call__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        ids: Tensor,
        mask: Tensor,
        *,
        row_seeds: Sequence[int],
        max_new_tokens: int,
        marker: str | None,
        eos: Sequence[int],
        sampling_temperature: float = 1.0,
        top_p: float = 1.0,
        should_stop: Callable[[], bool] | None = None,
    ) -> Generated: ...


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model inside ``model`` (unwrapping DDP, then PEFT)."""
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        model = model.module
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def forward_args(model: torch.nn.Module) -> tuple[str | None, bool]:
    """``(cache, keep)`` for a transformers causal LM (wrapped or not, :func:`base_model`):
    the name of its forward's KV-cache argument (``cache`` from transformers 5.24, before
    it ``past_key_values``; None if it has neither) and whether it takes
    ``logits_to_keep``."""
    params = inspect.signature(base_model(model).forward).parameters
    cache = next((k for k in ("cache", "past_key_values") if k in params), None)
    return cache, "logits_to_keep" in params
