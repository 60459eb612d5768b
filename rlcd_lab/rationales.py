"""Batched on-policy rationales: sample, stop at the marker, score in one forward pass.

``sample_rationales`` draws ``m`` rationales per prompt with the model's KV-cached
``generate`` and stops each sequence when its text ends with the marker; a sequence that
reaches ``max_new_tokens`` (or emits EOS) first gets the marker appended and is flagged
``forced``. The result is laid out, left-padded, as ``prompt + rationale (+ forced marker)
+ bridge`` so that one forward pass of ``score_rationales`` yields both the readout ``u``
at the last position and ``log pi(r | x)``, the sum of the sampled tokens' log-probs,
with gradients (OpenJev-RLCD Algorithm 1: sample without gradient, score with it).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase, StoppingCriteria
from transformers.generation.stopping_criteria import StopStringCriteria

from .readout import MARKER, option_logits, position_ids, readout


@dataclass(frozen=True)
class Rationales:
    """``N = len(prompts) * m`` sampled rationales; row ``i`` belongs to prompt ``i // m``.

    * ``input_ids``, ``attention_mask`` ``(N, T)``: left-padded
      ``prompt + rationale (+ marker if forced) + bridge``; the readout is at column -1;
    * ``rationale_mask`` ``(N, T)`` bool: the sampled tokens (a sampled marker included;
      a forced marker, the bridge and a sampled EOS excluded);
    * ``texts``: each rationale's text without its final marker;
    * ``forced`` ``(N,)`` bool, ``lengths`` ``(N,)`` number of sampled tokens;
    * ``logp_r`` ``(N,)`` float32: ``sum log pi_theta(token)`` over the sampled tokens
      under the model at temperature 1 (no gradient; ``score_rationales`` recomputes it
      with gradient).
    """

    input_ids: Tensor
    attention_mask: Tensor
    rationale_mask: Tensor
    texts: list[str]
    forced: Tensor
    lengths: Tensor
    logp_r: Tensor
    m: int

    @property
    def prompt_index(self) -> Tensor:
        """``(N,)`` index of the prompt of each row."""
        return torch.arange(len(self.texts), device=self.input_ids.device) // self.m


@lru_cache(maxsize=16)
def _stop_string(tokenizer: PreTrainedTokenizerBase, marker: str) -> StopStringCriteria:
    """transformers' stop-string matcher, built once per (tokenizer, marker): building it
    scans the whole vocabulary (about 0.2-0.7 s for a 49k-token vocabulary); it keeps no
    state between calls."""
    return StopStringCriteria(tokenizer, [marker])


class _MarkerStop(StoppingCriteria):
    """Stops a row once its text ends with the marker (or it emitted EOS); records where."""

    def __init__(self, tokenizer, marker: str, prompt_len: int, n: int, eos: Sequence[int]):
        self.stop = _stop_string(tokenizer, marker)
        self.prompt_len = prompt_len
        self.eos = torch.tensor(list(eos), dtype=torch.long)
        self.end = torch.full((n,), -1, dtype=torch.long)  # generated tokens at the stop
        self.hit_marker = torch.zeros(n, dtype=torch.bool)

    def __call__(self, input_ids: Tensor, scores, **kwargs) -> Tensor:
        marker = self.stop(input_ids, scores).cpu()
        eos = torch.isin(input_ids[:, -1].cpu(), self.eos)
        done = marker | eos
        new = done & (self.end < 0)
        self.end[new] = input_ids.shape[1] - self.prompt_len
        self.hit_marker |= new & marker
        return done.to(input_ids.device)


def left_pad(rows: list[list[int]], pad_id: int, device) -> tuple[Tensor, Tensor]:
    """Left-pad token-id lists into ``(ids, attention_mask)`` ``(N, T)`` on ``device``."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r) :] = torch.tensor(r)
            mask[i, width - len(r) :] = 1
    return ids.to(device), mask.to(device)


def encode_prompts(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], bridge: Sequence[int] = ()
) -> list[list[int]]:
    """Token ids of each text (no special tokens added: texts are complete prompts,
    e.g. from ``build_prompt``), followed by the ``bridge`` tokens."""
    if not texts:
        raise ValueError("no prompts given")
    return [
        list(ids) + list(bridge)
        for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    ]


def readout_texts(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    option_ids: Tensor | Sequence[int],
    bridge: Sequence[int] = (),
) -> tuple[Tensor, Tensor]:
    """Readout ``(u, logits)`` ``(B, K)`` for texts that end with the marker (a direct
    prompt, or a prompt plus a written rationale); ``bridge`` is ``OptionTokens.bridge``.
    See ``readout.readout`` for ``option_ids``."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids, mask = left_pad(encode_prompts(tokenizer, texts, bridge), pad, model.device)
    return readout(model, ids, mask, option_ids)


@torch.no_grad()
def sample_rationales(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    m: int,
    max_new_tokens: int,
    *,
    bridge: Sequence[int] = (),
    marker: str = MARKER,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int | None = None,
) -> Rationales:
    """Sample ``m`` rationales for each prompt, batched and KV-cached, stopping at the marker.

    ``prompts`` are complete texts (``build_prompt``); ``bridge`` is ``OptionTokens.bridge``
    (appended after the marker so the readout sits at the last column). ``temperature``
    and ``top_p`` shape the sampling only; ``logp_r`` is always the model's own
    log-probability at temperature 1. With ``seed`` the draw is reproducible and the
    global RNG is left untouched.
    """
    if m < 1 or max_new_tokens < 1:
        raise ValueError(f"need m >= 1 and max_new_tokens >= 1, got {m}, {max_new_tokens}")
    device = model.device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    prompt_rows = encode_prompts(tokenizer, prompts)
    ids, mask = left_pad(prompt_rows, pad, device)
    eos = model.generation_config.eos_token_id
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    stop = _MarkerStop(tokenizer, marker, ids.shape[1], len(prompts) * m, eos)
    rng = (
        torch.random.fork_rng(devices=[device] if device.type == "cuda" else [])
        if seed is not None
        else nullcontext()
    )
    with rng:
        if seed is not None:
            torch.manual_seed(seed)
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=True,
            temperature=temperature,
            top_p=top_p,
            top_k=None,
            max_new_tokens=max_new_tokens,
            num_return_sequences=m,
            stopping_criteria=[stop],
            pad_token_id=pad,
            output_logits=True,
            return_dict_in_generate=True,
        )
    gen = out.sequences[:, ids.shape[1] :].cpu()
    step_lp = torch.stack(out.logits, 1).float().log_softmax(-1).cpu()  # (N, steps, V)
    token_lp = step_lp.gather(-1, gen[:, : step_lp.shape[1], None]).squeeze(-1)
    marker_ids = list(tokenizer(marker, add_special_tokens=False)["input_ids"])
    rows, spans, texts, forced, lengths, logps = [], [], [], [], [], []
    for i in range(gen.shape[0]):
        end = int(stop.end[i])
        n = end if stop.hit_marker[i] else (end - 1 if end > 0 else gen.shape[1])  # drop EOS
        n = min(n, gen.shape[1])
        sampled = gen[i, :n].tolist()
        tail = [] if stop.hit_marker[i] else marker_ids
        prompt = prompt_rows[i // m]
        rows.append(prompt + sampled + tail + list(bridge))
        spans.append((len(prompt), len(prompt) + n))
        text = tokenizer.decode(sampled)
        texts.append(text[: text.rfind(marker)].rstrip() if stop.hit_marker[i] else text.rstrip())
        forced.append(not bool(stop.hit_marker[i]))
        lengths.append(n)
        logps.append(token_lp[i, :n].sum())
    input_ids, attention_mask = left_pad(rows, pad, device)
    width = input_ids.shape[1]
    rationale_mask = torch.zeros_like(input_ids, dtype=torch.bool)
    for i, (a, b) in enumerate(spans):
        shift = width - len(rows[i])
        rationale_mask[i, shift + a : shift + b] = True
    return Rationales(
        input_ids=input_ids,
        attention_mask=attention_mask,
        rationale_mask=rationale_mask,
        texts=texts,
        forced=torch.tensor(forced, device=device),
        lengths=torch.tensor(lengths, device=device),
        logp_r=torch.stack(logps).to(device),
        m=m,
    )


def score_rationales(
    model: PreTrainedModel,
    rats: Rationales,
    option_ids: Tensor | Sequence[int],
    per_token: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """One forward pass over sampled rationales: ``(u, logits, logp_r)``.

    ``option_ids``: ``(K,)`` shared, or ``(B, K)`` per prompt (-1 = absent option).
    Returns ``u, logits (N, K)`` float32 at the last column and ``logp_r (N,)`` float32,
    the sum of the sampled tokens' log-probs, all differentiable w.r.t. the model. With
    ``per_token`` the third value is instead ``(N, T - 1)``: the log-prob of token
    ``t + 1`` at column ``t`` where ``rationale_mask[:, 1:]`` is set, 0 elsewhere.
    """
    option_ids = torch.as_tensor(option_ids, dtype=torch.long, device=rats.input_ids.device)
    if option_ids.dim() == 2:
        option_ids = option_ids[rats.prompt_index]
    logits_all = model(
        input_ids=rats.input_ids,
        attention_mask=rats.attention_mask,
        position_ids=position_ids(rats.attention_mask),
    ).logits
    logits = option_logits(logits_all[:, -1], option_ids)
    target_mask = rats.rationale_mask[:, 1:]  # token t is predicted at position t - 1
    token_lp = -F.cross_entropy(
        logits_all[:, :-1][target_mask].float(),
        rats.input_ids[:, 1:][target_mask],
        reduction="none",
    )
    if per_token:
        out = torch.zeros(target_mask.shape, device=token_lp.device, dtype=token_lp.dtype)
        return logits.softmax(-1), logits, out.masked_scatter(target_mask, token_lp)
    rows = target_mask.nonzero()[:, 0]
    logp_r = torch.zeros(len(rats.texts), device=token_lp.device).index_add(0, rows, token_lp)
    return logits.softmax(-1), logits, logp_r
