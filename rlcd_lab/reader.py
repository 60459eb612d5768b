"""The reader: prompt -> rationales -> per-rationale readout, in one place.

Every face of rlcd_lab (training loops, evaluation, the dashboard, the decision server)
reads a model through this module (OpenJev-RLCD sec. 2 and Algorithm 1):

1. :func:`build_prompt` turns a question into the text the model continues: a rationale
   (reason mode) or, in direct mode, straight the answer after the marker;
2. :func:`sample_rationales` draws ``m`` rationales per prompt through a sampler (default
   ``decoding.kv_sampler``, a compact KV-cached loop giving the tokens of
   :func:`hf_sampler`, the model's ``generate``; each row with its own seeded noise) and
   stops each row once its *decoded text* contains the marker, so a
   tokenizer that merges the marker with what follows (``"Answer:**"`` as one token) is
   handled: the rationale is cut before the merged token and the rest of the marker is
   appended. A row that reaches ``max_new_tokens`` or emits EOS first gets the marker
   appended and is flagged ``forced``; an EOS it sampled still counts in ``log pi(r)``
   (the probability of the rationale includes that of stopping there);
3. :func:`score_rationales` runs one forward pass over ``prompt + rationale (+ marker) +
   bridge`` (left-padded; for prompts of :data:`SHARE_MIN_PROMPT` tokens or more, each
   prompt once and its rationales on its cached keys and values) and returns the readout
   ``u = softmax(logits[options])`` at the last column and ``log pi(r | x)`` with
   gradients (sample without gradient, score with it);
4. :func:`direct_readout` reads texts that already end with the marker (direct mode;
   :func:`direct_logits` gives the whole vocabulary's logits there, for SFT, and
   :func:`shared_prefix_readout` reads many prompts about one state on one shared prefix);
5. :func:`read` does all of it for a list of questions with per-question option lists
   (2..K options each) and returns one :class:`Reading` per question;
6. :func:`generate_text` samples free text (no marker) with the same samplers.

:class:`Reader` is the faces' entry (the decision engine, the dashboard tabs, the GSM8K
proposer): one checkpoint with its prompt format, context rule (:func:`reading_length`),
fitted temperature ``T`` and sampler, over the functions above, which the training loops
call directly. Samplers follow :class:`Sampler` (``rlcd_lab.sampling``, the floor below
this module and ``rlcd_lab.decoding``; its names are re-exported here).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import (
    DynamicCache,
    LogitsProcessorList,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    StoppingCriteria,
)

from .decoding import kv_sampler
from .metrics import apply_temperature
from .models import (
    DEFAULT_META,
    META_FILE,
    calibration_T,
    context_length,
    load_checkpoint,
    upgrade_meta,
)
from .readout import MARKER, SEP, OptionTokens, option_logits, option_token_ids, position_ids
from .readout import readout as readout_at_end
from .sampling import (  # re-exported: the names every sampler shares
    Generated,
    GumbelSampler,
    Sampler,
    SamplingStopped,
    base_model,
    forward_args,
    pad_id,
)

Mode = Literal["direct", "reason"]


# ------------------------------------------------------------------------------ prompts
FEW_SHOT = (
    (
        "Which animal can fly?\nA) dog\nB) eagle\nC) fish",
        ("A", "B", "C"),
        "Dogs and fish cannot fly; eagles can.",
        "B",
    ),
)
"""Worked examples shown to chat models before the question (question, options, rationale,
answer): with one, SmolLM2-135M-Instruct writes the marker itself in most rationales
(without, in almost none); each costs prompt tokens in every forward pass."""


def build_prompt(
    tokenizer: PreTrainedTokenizerBase,
    question: str,
    *,
    direct: bool = False,
    marker: str = MARKER,
    chat: bool | None = None,
    instruction: str | None = None,
    options: Sequence[str] | None = None,
) -> str:
    """The text the model continues: a rationale (``direct=False``) or straight the answer.

    Plain models (the tiny world): ``question + "\n"``, plus the marker when ``direct``.
    Chat models (``chat=None`` means: the tokenizer has a chat template) get, through the
    chat template with thinking disabled (Qwen3 ``enable_thinking=False``): a system turn
    (``instruction``; default: reason in a sentence or two, then a last line
    ``"<marker> X"``), the :data:`FEW_SHOT` example as earlier turns, then the question
    followed by ``Options: ...`` (when ``options`` are given). In direct mode the examples
    answer at once and the assistant turn starts with the marker.
    """
    if not question.strip():
        raise ValueError("the question (prompt) is empty")
    if chat is None:
        chat = getattr(tokenizer, "chat_template", None) is not None
    if not chat:
        return question + "\n" + (marker if direct else "")
    if instruction is None:
        instruction = (
            f"Reply with '{marker} X', X one of the options."
            if direct
            else f"Reason in a sentence or two, then end with '{marker} X', X one of the options."
        )

    def user(q: str, opts: Sequence[str] | None) -> dict:
        listed = f"\nOptions: {', '.join(opts)}" if opts else ""
        return {"role": "user", "content": q + listed}

    messages = [{"role": "system", "content": instruction}]
    for q, opts, rationale, answer in FEW_SHOT:
        reply = f"{marker} {answer}" if direct else f"{rationale}\n{marker} {answer}"
        messages += [user(q, opts), {"role": "assistant", "content": reply}]
    messages.append(user(question, options))
    return chat_text(tokenizer, messages, enable_thinking=False) + (marker if direct else "")


def chat_text(tokenizer: PreTrainedTokenizerBase, messages: Sequence[Mapping], **kwargs) -> str:
    """``messages`` (``{"role", "content"}`` dicts) rendered by the tokenizer's chat template,
    ending with the generation prompt (the assistant turn begins); ``kwargs`` go to the
    template (``enable_thinking=False``: Qwen3's non-thinking mode). The one place a chat
    prompt is rendered (:func:`build_prompt`, the GSM8K proposer's prompt)."""
    return tokenizer.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=True, **kwargs
    )


def direct_prompts(
    tokenizer: PreTrainedTokenizerBase,
    questions: Sequence[str],
    option_lists: Sequence[Sequence[str]],
    marker: str = MARKER,
    sep: str = SEP,
    chat: bool | None = None,
) -> tuple[list[str], list[OptionTokens]]:
    """Direct-mode prompts (ending with the marker, :func:`build_prompt`) of questions with
    their own option labels, and each question's option tokens (:func:`item_options`)."""
    opts = item_options(tokenizer, option_lists, marker, sep)
    texts = [
        build_prompt(tokenizer, q, direct=True, marker=marker, chat=chat, options=o.labels)
        for q, o in zip(questions, opts, strict=True)
    ]
    return texts, opts


def item_options(
    tokenizer: PreTrainedTokenizerBase,
    option_lists: Sequence[Sequence[str]],
    marker: str = MARKER,
    sep: str = SEP,
) -> list[OptionTokens]:
    """Option tokens of each question's own labels (``readout.option_token_ids``, computed
    once per distinct label tuple). Raises ``ValueError`` naming bad labels."""
    cache: dict[tuple[str, ...], OptionTokens] = {}
    out = []
    for labels in option_lists:
        key = tuple(labels)
        if key not in cache:
            cache[key] = option_token_ids(tokenizer, key, marker, sep)
        out.append(cache[key])
    return out


def padded_option_ids(options: Sequence[OptionTokens]) -> Tensor:
    """``(B, K_max)`` option ids, -1 where a question has fewer options (``-inf`` logit)."""
    k = max(len(o) for o in options)
    return torch.tensor([list(o.ids) + [-1] * (k - len(o)) for o in options])


# ----------------------------------------------------------------------------- sampling
@dataclass(frozen=True)
class Rationales:
    """``N = len(prompts) * m`` sampled rationales; row ``i`` belongs to prompt ``i // m``.

    * ``input_ids``, ``attention_mask`` ``(N, T)``: left-padded
      ``prompt + rationale (+ marker completion) + bridge``; the readout is at column -1;
    * ``rationale_mask`` ``(N, T)`` bool: the sampled tokens kept in the sequence (a
      sampled marker included; an appended marker, the bridge and a sampled EOS excluded);
    * ``eos_col`` ``(N,)`` long: for a row that sampled EOS, the column whose next-token
      distribution produced it (the last rationale token), else -1; the EOS log-prob is
      part of ``log pi(r)`` (see :attr:`logp_mask`);
    * ``texts``: each rationale's text without the marker;
    * ``forced`` ``(N,)`` bool (the model did not write the marker), ``lengths`` ``(N,)``
      sampled tokens in the sequence (EOS not counted);
    * ``logp_r`` ``(N,)`` float32: ``sum log pi_theta(token)`` over the sampled tokens (EOS
      included) under the model at temperature 1, no gradient (``score_rationales``
      recomputes it with gradient);
    * ``prompt_len`` ``(N,)`` long: the tokens of each row's prompt (rows ``i m .. i m +
      m - 1`` repeat prompt ``i``), which ``score_rationales`` may encode once.
    """

    input_ids: Tensor
    attention_mask: Tensor
    rationale_mask: Tensor
    eos_col: Tensor
    eos_id: int
    texts: list[str]
    forced: Tensor
    lengths: Tensor
    logp_r: Tensor
    m: int
    prompt_len: Tensor

    @property
    def prompt_index(self) -> Tensor:
        """``(N,)`` index of the prompt of each row."""
        return torch.arange(len(self.texts), device=self.input_ids.device) // self.m

    @property
    def logp_mask(self) -> Tensor:
        """``(N, T - 1)`` bool: column ``t`` predicts a token of ``log pi(r)`` (token
        ``t + 1`` of the sequence, or the sampled EOS at ``eos_col``)."""
        mask = self.rationale_mask[:, 1:].clone()
        rows = (self.eos_col >= 0).nonzero()[:, 0]
        mask[rows, self.eos_col[rows]] = True
        return mask


class _MarkerStop(StoppingCriteria):
    """Stops a row once the decoded text of its newest tokens contains the marker, or it
    emitted EOS; records the number of generated tokens at the stop and why. When
    ``should_stop()`` turns true, every row stops at once and ``stopped`` is set."""

    def __init__(
        self,
        tokenizer,
        marker: str | None,
        prompt_len: int,
        n: int,
        eos: Sequence[int],
        should_stop: Callable[[], bool] | None = None,
    ):
        self.tokenizer, self.marker, self.prompt_len = tokenizer, marker, prompt_len
        self.window = 1 if marker is None else len(marker) + 1  # a token decodes to >= 1 char
        self.eos = torch.tensor(list(eos), dtype=torch.long)
        self.end = torch.full((n,), -1, dtype=torch.long)
        self.hit_marker = torch.zeros(n, dtype=torch.bool)
        self.should_stop, self.stopped = should_stop, False

    def __call__(self, input_ids: Tensor, scores, **kwargs) -> Tensor:
        if self.should_stop is not None and self.should_stop():
            self.stopped = True
            return torch.ones(len(input_ids), dtype=torch.bool, device=input_ids.device)
        gen = input_ids[:, self.prompt_len :].cpu()
        live = (self.end < 0).nonzero()[:, 0]
        marker = torch.zeros(len(gen), dtype=torch.bool)
        if self.marker is not None:  # None: free text, only EOS stops a row
            texts = self.tokenizer.batch_decode(gen[live, -self.window :])
            marker[live] = torch.tensor([self.marker in t for t in texts], dtype=torch.bool)
        new = (marker | torch.isin(gen[:, -1], self.eos)) & (self.end < 0)
        self.end[new] = gen.shape[1]
        self.hit_marker |= new & marker
        return (self.end >= 0).to(input_ids.device)


def cut_at_marker(
    tokenizer: PreTrainedTokenizerBase, sampled: Sequence[int], marker: str = MARKER
) -> tuple[int, list[int], str] | None:
    """Where a sampled rationale ends, matched on decoded text.

    ``sampled``: generated token ids whose decoded text contains ``marker`` for the first
    time in its last token. Returns ``(n, tail, text)``: keep the first ``n`` sampled
    tokens, append ``tail`` (the rest of the marker when the last token carries text past
    it, e.g. ``":**"``; else nothing), and ``text`` is the rationale before the marker
    (stripped). Returns None when the text has no marker or the tokenizer's decoding is
    not prefix-consistent there (the caller then appends the whole marker).
    """
    text = tokenizer.decode(list(sampled))
    pos = text.find(marker)
    if pos < 0:
        return None
    end = pos + len(marker)
    if end == len(text):
        return len(sampled), [], text[:pos].strip()
    head = tokenizer.decode(list(sampled[:-1]))
    if not text.startswith(head) or len(head) > end:
        return None
    tail = list(tokenizer(text[len(head) : end], add_special_tokens=False)["input_ids"])
    return len(sampled) - 1, tail, text[:pos].strip()


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
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    bridge: Sequence[int] | Sequence[Sequence[int]] = (),
) -> list[list[int]]:
    """Token ids of each text (no special tokens added: texts are complete prompts,
    e.g. from ``build_prompt``), followed by the ``bridge`` tokens (one shared, or one
    per text)."""
    if not texts:
        raise ValueError("no prompts given")
    bridges = _per_prompt(bridge, len(texts))
    return [
        list(ids) + list(b)
        for ids, b in zip(
            tokenizer(list(texts), add_special_tokens=False)["input_ids"], bridges, strict=True
        )
    ]


def _per_prompt(bridge, n: int) -> list[tuple[int, ...]]:
    """``bridge`` as one tuple per prompt (a flat sequence of ints is shared by all)."""
    bridge = list(bridge)
    if bridge and not isinstance(bridge[0], int):
        if len(bridge) != n:
            raise ValueError(f"{len(bridge)} bridges for {n} prompts")
        return [tuple(b) for b in bridge]
    return [tuple(bridge)] * n


def direct_readout(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    option_ids: Tensor | Sequence[int],
    bridge: Sequence[int] | Sequence[Sequence[int]] = (),
) -> tuple[Tensor, Tensor]:
    """Readout ``(u, logits)`` ``(B, K)`` for texts that end with the marker (a direct
    prompt, or a prompt plus a written rationale); ``bridge`` is ``OptionTokens.bridge``
    (shared, or one per text). See ``readout.readout`` for ``option_ids``."""
    ids, mask = left_pad(encode_prompts(tokenizer, texts, bridge), pad_id(tokenizer), model.device)
    return readout_at_end(model, ids, mask, option_ids)


def direct_logits(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    questions: Sequence[str],
    option_lists: Sequence[Sequence[str]],
    *,
    marker: str = MARKER,
    sep: str = SEP,
    chat: bool | None = None,
    device: torch.device | str | None = None,
) -> tuple[Tensor, list[OptionTokens]]:
    """The direct reading's next-token logits over the whole vocabulary, ``(B, V)``, and
    each question's option tokens: the questions' direct prompts (:func:`direct_prompts`)
    plus their bridge, one forward pass over the left-padded rows (``model`` may be
    wrapped: DDP, PEFT), the logits at the last column, where the readout is taken
    (``readout.option_logits`` of them is its ``z``). With gradient when called with it:
    the SFT loss is the cross-entropy of these logits against the label's option token.
    ``device``: where the rows go (None: the model's)."""
    texts, opts = direct_prompts(tokenizer, questions, option_lists, marker, sep, chat)
    rows = encode_prompts(tokenizer, texts, [o.bridge for o in opts])
    device = base_model(model).device if device is None else device
    ids, mask = left_pad(rows, pad_id(tokenizer), device)
    out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask))
    return out.logits[:, -1], opts


def eos_ids(model: torch.nn.Module) -> list[int]:
    """The token ids that end a sample: the model's ``generation_config.eos_token_id`` as a
    list (empty when it sets none)."""
    eos = base_model(model).generation_config.eos_token_id
    return [] if eos is None else [eos] if isinstance(eos, int) else list(eos)


def mix_seed(seed: int, index: int) -> int:
    """A 63-bit seed for item ``index`` of a stream seeded by ``seed`` (independent
    streams for different ``(seed, index)``)."""
    return int(np.random.default_rng([seed, index]).integers(2**63 - 1))


@torch.no_grad()
def hf_sampler(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    ids: Tensor,
    mask: Tensor,
    *,
    row_seeds: Sequence[int],
    max_new_tokens: int,
    marker: str | None,
    eos: Sequence[int],
    temperature: float = 1.0,
    top_p: float = 1.0,
    should_stop: Callable[[], bool] | None = None,
) -> Generated:
    """The reference sampler: the model's own KV-cached ``generate`` on left-padded rows
    ``ids, mask (N, T)``, one seeded noise generator per row (``GumbelSampler``), each row
    stopped once its decoded text contains ``marker`` or it emitted a token of ``eos``.

    ``should_stop``: called after every generated token (``generate``'s stopping
    criteria); once it returns True, generation ends and :class:`SamplingStopped` is
    raised, so abandoned work stops within one decoding step.

    ``marker=None`` samples free text (only EOS stops a row; :func:`generate_text`).

    Any :class:`Sampler` (a callable with this signature) can replace it
    (``sample_rationales(sampler=...)``, ``--sampler`` in training): a faster decoding
    loop (``decoding.kv_sampler``, the default), or an inference engine (which need only
    accept ``should_stop`` to be cancellable)."""
    stop = _MarkerStop(tokenizer, marker, ids.shape[1], len(ids), eos, should_stop)
    noise = GumbelSampler(row_seeds, temperature, top_p, ids.device)
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        num_beams=1,
        temperature=1.0,
        top_p=1.0,
        top_k=None,
        max_new_tokens=max_new_tokens,
        logits_processor=LogitsProcessorList([noise]),
        stopping_criteria=[stop],
        pad_token_id=pad_id(tokenizer),
        output_logits=True,
        return_dict_in_generate=True,
    )
    if stop.stopped:
        raise SamplingStopped("should_stop() asked the sampler to stop")
    gen = out.sequences[:, ids.shape[1] :].cpu()
    step_lp = torch.stack(out.logits, 1).float().log_softmax(-1).cpu()  # (N, steps, V)
    token_lp = step_lp.gather(-1, gen[:, : step_lp.shape[1], None]).squeeze(-1)
    return Generated(gen, stop.end.clone(), stop.hit_marker.clone(), token_lp)


def written_sampler(rows: Sequence[Sequence[int]]) -> Sampler:
    """A :class:`Sampler` that writes given token ids instead of sampling (teacher forcing):
    row ``i`` of the batch gets ``rows[i]`` (which must end with the marker) and stops
    there as if it had sampled the marker. ``sample_rationales`` then builds the rows
    exactly as for the model's own text, so a worked rationale is read and scored as any
    sampled one (``rlcd-lab train teach``). Its ``token_lp`` is 0: ``score_rationales``
    computes the log-probabilities."""

    def write(model, tokenizer, ids: Tensor, mask: Tensor, **_) -> Generated:
        if len(rows) != ids.shape[0]:
            raise ValueError(f"{len(rows)} written rows for {ids.shape[0]} prompts")
        width = max(len(r) for r in rows)
        tokens = torch.full((len(rows), width), pad_id(tokenizer), dtype=torch.long)
        for i, r in enumerate(rows):
            tokens[i, : len(r)] = torch.tensor(list(r), dtype=torch.long)
        end = torch.tensor([len(r) for r in rows])
        hit = torch.ones(len(rows), dtype=torch.bool)
        return Generated(tokens, end, hit, torch.zeros(tokens.shape))

    return write


def default_sampler(model: PreTrainedModel) -> Sampler:
    """The sampler used when none is given: ``decoding.kv_sampler`` (``hf_sampler``'s
    tokens from a faster decoding loop) for a transformers model, PEFT-wrapped or not;
    :func:`hf_sampler` for any other object offering ``generate``."""
    return kv_sampler if isinstance(base_model(model), PreTrainedModel) else hf_sampler


@torch.no_grad()
def sample_rationales(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    m: int,
    max_new_tokens: int,
    *,
    bridge: Sequence[int] | Sequence[Sequence[int]] = (),
    marker: str = MARKER,
    sampling_temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int | Sequence[int] | None = None,
    sampler: Sampler | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> Rationales:
    """Sample ``m`` rationales for each prompt, batched and KV-cached, stopping at the marker.

    ``prompts`` are complete texts (``build_prompt``); ``bridge`` is ``OptionTokens.bridge``
    (one shared, or one per prompt; appended after the marker so the readout sits at the
    last column). ``sampling_temperature`` and ``top_p`` shape the sampling only; ``logp_r`` is
    always the model's own log-probability at temperature 1. See the module docstring for
    how the marker is matched and how EOS counts. ``sampler`` draws the tokens (None:
    :func:`default_sampler`); everything after it is shared.

    ``seed``: one per prompt, or an int (prompt ``i`` then gets ``mix_seed(seed, i)``), or
    None (drawn from torch's global generator). Rationale ``j`` of a prompt with seed ``s``
    is drawn with seed ``mix_seed(s, j)`` (``GumbelSampler``): the same rationale whatever
    else is in the batch. The global RNG is left untouched when a seed is given.

    ``should_stop``: passed to the sampler (only when given, so a sampler without the
    argument still works), which checks it before every decoding step and raises
    :class:`SamplingStopped` once it returns True (the work is no longer wanted).
    """
    if m < 1 or max_new_tokens < 1:
        raise ValueError(f"need m >= 1 and max_new_tokens >= 1, got {m}, {max_new_tokens}")
    device = model.device
    pad = pad_id(tokenizer)
    sampler = default_sampler(model) if sampler is None else sampler
    prompt_rows = encode_prompts(tokenizer, prompts)
    bridges = _per_prompt(bridge, len(prompts))
    if seed is None:
        seed = int(torch.randint(2**62, ()))
    seeds = (
        [mix_seed(seed, i) for i in range(len(prompts))] if isinstance(seed, int) else list(seed)
    )
    if len(seeds) != len(prompts):
        raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
    ids, mask = left_pad(prompt_rows, pad, device)
    eos = eos_ids(model)
    cancel = {} if should_stop is None else {"should_stop": should_stop}
    out = sampler(
        model,
        tokenizer,
        ids.repeat_interleave(m, 0),
        mask.repeat_interleave(m, 0),
        row_seeds=[mix_seed(s, j) for s in seeds for j in range(m)],
        max_new_tokens=max_new_tokens,
        marker=marker,
        eos=eos,
        temperature=sampling_temperature,
        top_p=top_p,
        **cancel,
    )
    gen, token_lp = out.tokens, out.token_lp
    marker_ids = list(tokenizer(marker, add_special_tokens=False)["input_ids"])
    rows, spans, texts, forced, lengths, logps, eos_at = [], [], [], [], [], [], []
    for i in range(gen.shape[0]):
        end = int(out.end[i]) if out.end[i] >= 0 else gen.shape[1]
        cut = cut_at_marker(tokenizer, gen[i, :end].tolist(), marker) if out.hit_marker[i] else None
        ended_eos = bool(out.end[i] >= 0 and not out.hit_marker[i])
        if cut is not None:
            n, tail, text = cut
            lp = token_lp[i, :n].sum()
        else:  # forced: the marker is appended (after dropping a sampled EOS)
            n = end - 1 if ended_eos else end
            tail, text = marker_ids, tokenizer.decode(gen[i, :n].tolist()).strip()
            lp = token_lp[i, :end].sum()  # the sampled EOS is part of the rationale's log-prob
        prompt = prompt_rows[i // m]
        rows.append(prompt + gen[i, :n].tolist() + tail + list(bridges[i // m]))
        spans.append((len(prompt), len(prompt) + n))
        eos_at.append(len(prompt) + n - 1 if (ended_eos and cut is None) else -1)
        texts.append(text)
        forced.append(cut is None)
        lengths.append(n)
        logps.append(lp)
    input_ids, attention_mask = left_pad(rows, pad, device)
    width = input_ids.shape[1]
    rationale_mask = torch.zeros_like(input_ids, dtype=torch.bool)
    eos_col = torch.full((len(rows),), -1, dtype=torch.long)
    for i, (a, b) in enumerate(spans):
        shift = width - len(rows[i])
        rationale_mask[i, shift + a : shift + b] = True
        if eos_at[i] >= 0:
            eos_col[i] = shift + eos_at[i]
    return Rationales(
        input_ids=input_ids,
        attention_mask=attention_mask,
        rationale_mask=rationale_mask,
        eos_col=eos_col.to(device),
        eos_id=eos[0] if eos else -1,
        texts=texts,
        forced=torch.tensor(forced, device=device),
        lengths=torch.tensor(lengths, device=device),
        logp_r=torch.stack(logps).to(device),
        m=m,
        prompt_len=torch.tensor([len(p) for p in prompt_rows], device=device).repeat_interleave(m),
    )


@torch.no_grad()
def generate_text(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    max_new_tokens: int,
    *,
    sampling_temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int | Sequence[int] = 0,
    sampler: Sampler | None = None,
) -> list[str]:
    """Free text: one sample per prompt, drawn by the same :class:`Sampler` as rationales
    (None: :func:`default_sampler`) but with no marker: a row stops at EOS
    (``generation_config.eos_token_id``) or after ``max_new_tokens``. Returns the new
    tokens of each row decoded without special tokens (an EOS dropped).

    ``prompts`` are complete texts (e.g. :func:`chat_text` of a user message); ``seed``:
    one per prompt, or an int (prompt ``i`` then gets ``mix_seed(seed, i)``); a prompt with
    seed ``s`` is drawn with row seed ``mix_seed(s, 0)`` (``GumbelSampler``), so a text
    depends on its prompt and seed only, not on what else is in the batch."""
    if max_new_tokens < 1:
        raise ValueError(f"need max_new_tokens >= 1, got {max_new_tokens}")
    if not prompts:
        return []
    seeds = (
        [mix_seed(seed, i) for i in range(len(prompts))] if isinstance(seed, int) else list(seed)
    )
    if len(seeds) != len(prompts):
        raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
    sampler = default_sampler(model) if sampler is None else sampler
    ids, mask = left_pad(encode_prompts(tokenizer, prompts), pad_id(tokenizer), model.device)
    out = sampler(
        model,
        tokenizer,
        ids,
        mask,
        row_seeds=[mix_seed(s, 0) for s in seeds],
        max_new_tokens=max_new_tokens,
        marker=None,
        eos=eos_ids(model),
        temperature=sampling_temperature,
        top_p=top_p,
    )
    width = out.tokens.shape[1]
    ends = [int(e) if e >= 0 else width for e in out.end.tolist()]
    return [
        tokenizer.decode(out.tokens[i, :end].tolist(), skip_special_tokens=True)
        for i, end in enumerate(ends)
    ]


SHARE_MIN_PROMPT = 32
"""``score_rationales`` encodes each prompt once (when it has ``m >= 2`` rationales) if the
longest prompt of the batch has at least this many tokens. The rule looks at the prompts
only, so what a model writes never switches the pass (the two passes agree up to float
rounding; a rerun takes the same one). Measured by ``benchmarks/scoring.py`` on one CPU
thread: SmolLM2-135M, 2 prompts of 103 tokens x 4 rationales: 2.30x faster with gradient
(LoRA), 2.34x without; the tiny verify model, 8 prompts of 14 tokens x 4 rationales of
~45: 0.99-1.15x (the second forward call costs about what the shorter one saves)."""


def score_rationales(
    model: PreTrainedModel,
    rats: Rationales,
    option_ids: Tensor | Sequence[int],
    per_token: bool = False,
    share_prompts: bool | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """The scoring pass over sampled rationales: ``(u, logits, logp_r)``.

    ``option_ids``: ``(K,)`` shared, or ``(B, K)`` per prompt (-1 = absent option).
    Returns ``u, logits (N, K)`` at the last column and ``logp_r (N,)`` (float32, or
    float64 for a float64 model), the sum of the sampled tokens' log-probs (a sampled EOS
    included), all differentiable w.r.t. the model. With ``per_token`` the third value is
    instead ``(N, T - 1)``: at column ``t`` the log-prob of what was sampled after
    position ``t`` where ``rats.logp_mask`` is set, 0 elsewhere.

    One forward pass over the left-padded rows, or (``share_prompts``; None: when a
    prompt has at least :data:`SHARE_MIN_PROMPT` tokens) two: the ``B`` prompts once,
    keeping their keys and values, then the ``N = B m`` continuations (rationale, marker,
    bridge) attending to their prompt's cached keys and values. The two give the same
    values up to float rounding (``tests/test_reader.py``: outputs and gradients), the
    gradient reaching the prompt pass through the cached keys and values. Not shared under
    gradient checkpointing with gradients on (transformers drops the cache there) or for
    a model whose forward takes no cache.
    """
    option_ids = torch.as_tensor(option_ids, dtype=torch.long, device=rats.input_ids.device)
    if option_ids.dim() == 2:
        option_ids = option_ids[rats.prompt_index]
    mask = rats.logp_mask
    targets = rats.input_ids[:, 1:].clone()  # token t + 1 is predicted at column t
    eos_rows = (rats.eos_col >= 0).nonzero()[:, 0]
    targets[eos_rows, rats.eos_col[eos_rows]] = rats.eos_id
    if _share(model, rats, share_prompts):
        last, predicting = _shared_pass(model, rats, mask)
    else:
        logits_all = model(
            input_ids=rats.input_ids,
            attention_mask=rats.attention_mask,
            position_ids=position_ids(rats.attention_mask),
        ).logits
        last, predicting = logits_all[:, -1], logits_all[:, :-1][mask]
    logits = option_logits(last, option_ids)
    wide = torch.promote_types(predicting.dtype, torch.float32)  # bf16 up, float64 kept
    token_lp = -F.cross_entropy(predicting.to(wide), targets[mask], reduction="none")
    if per_token:
        out = torch.zeros(mask.shape, device=token_lp.device, dtype=token_lp.dtype)
        return logits.softmax(-1), logits, out.masked_scatter(mask, token_lp)
    rows = mask.nonzero()[:, 0]
    logp_r = token_lp.new_zeros(len(rats.texts)).index_add(0, rows, token_lp)
    return logits.softmax(-1), logits, logp_r


def _share(model: torch.nn.Module, rats: Rationales, share: bool | None) -> bool:
    """Whether ``score_rationales`` encodes each prompt once (see its docstring)."""
    if share is False or rats.m < 2 or forward_args(model)[0] is None:
        return False
    if torch.is_grad_enabled() and model.training:
        if any(getattr(mod, "gradient_checkpointing", False) for mod in model.modules()):
            return False
    return share or int(rats.prompt_len.max()) >= SHARE_MIN_PROMPT


def prefix_then_suffix(
    model: torch.nn.Module,
    prefix_ids: Tensor,
    prefix_mask: Tensor,
    rows: Tensor,
    suffix_ids: Tensor,
    suffix_mask: Tensor,
    last_only: bool = False,
) -> tuple[Tensor, Tensor]:
    """What one forward pass over ``cat(prefix[rows], suffix)`` computes, in two calls:
    the ``P`` left-padded prefixes ``(P, Tp)`` once, their keys and values copied to the
    ``R`` rows (``rows (R,)``: the prefix of each row), then the left-padded suffixes ``(R,
    Ts)`` on top (the suffix pads inside the sequence are masked; positions skip them).

    Returns the logits after each prefix ``(P, V)`` (they predict each suffix's first
    token) and the suffix logits ``(R, Ts, V)``, ``(R, 1, V)`` with ``last_only``. Equal to
    the one pass up to float rounding; differentiable (the gradient reaches the prefix
    pass through the copied keys and values)."""
    cache_arg, keep = forward_args(model)
    cache = DynamicCache(config=base_model(model).config)
    out = model(
        input_ids=prefix_ids,
        attention_mask=prefix_mask,
        position_ids=position_ids(prefix_mask),
        use_cache=True,
        **{cache_arg: cache},
        **({"logits_to_keep": 1} if keep else {}),
    )
    after_prefix = out.logits[:, -1]
    cache.reorder_cache(rows)  # one copy of its prefix's keys and values per row
    mask = torch.cat([prefix_mask[rows], suffix_mask], dim=1)
    out = model(
        input_ids=suffix_ids,
        attention_mask=mask,
        position_ids=position_ids(mask)[:, prefix_ids.shape[1] :],
        use_cache=False,
        **{cache_arg: cache},
        **({"logits_to_keep": 1} if keep and last_only else {}),
    )
    return after_prefix, out.logits[:, -1:] if last_only else out.logits


def _shared_pass(model: torch.nn.Module, rats: Rationales, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``score_rationales``'s two-call pass: ``(last (N, V), predicting (S, V))``, the
    logits at each row's last column and, in ``mask``'s row-major order, those predicting
    each of the ``S`` tokens ``mask (N, T - 1)`` marks (as ``logits[:, :-1][mask]`` of
    the plain pass)."""
    ids, m = rats.input_ids, rats.m
    n, width = ids.shape
    device = ids.device
    cont = width - rats.attention_mask.sum(1) + rats.prompt_len  # first column after the prompt
    c = width - int(cont.min())  # columns of the longest continuation
    # the prompts (the first row of each group), left-padded to the longest; each row's
    # continuation is its last c columns, the prompt's columns among them masked
    heads = torch.arange(0, n, m, device=device)
    p = int(rats.prompt_len.max())
    cols = torch.arange(p, device=device)
    prompt_mask = (cols >= p - rats.prompt_len[heads, None]).long()
    prompt_ids = ids[heads].gather(1, (cont[heads, None] - p + cols).clamp_min(0))
    cont_mask = (torch.arange(width - c, width, device=device) >= cont[:, None]).long()
    after_prompt, logits = prefix_then_suffix(
        model, prompt_ids, prompt_mask, rats.prompt_index, ids[:, width - c :], cont_mask
    )
    # continuation column k predicts column k + 1; the prompt's last column predicts the
    # first; mask's column width - c - 1 + k predicts continuation column k
    rows, k = mask[:, width - c - 1 :].nonzero(as_tuple=True)
    first = k == cont[rows] - (width - c)
    predicting = torch.where(
        first[:, None], after_prompt[rows // m], logits[rows, (k - 1).clamp_min(0)]
    )
    return logits[:, -1], predicting


# --------------------------------------------------------------------- the whole reading
@dataclass(frozen=True)
class Reading:
    """One question read by a model: ``M`` rationales (one empty in direct mode) and each
    one's readout over the question's own ``K`` options.

    ``u``, ``logits``: ``(M, K)`` float32 tensors (CPU); ``logp (M,)``: ``log pi(r | x)``
    (0 in direct mode); ``texts``, ``forced``, ``lengths``: per rationale.
    """

    options: tuple[str, ...]
    texts: list[str]
    forced: list[bool]
    lengths: list[int]
    logp: Tensor
    u: Tensor
    logits: Tensor

    @property
    def mixture(self) -> Tensor:
        """``p = (1/M) sum_i u_i`` ``(K,)``: the mixture over rationales."""
        return self.u.mean(0)


def sample_questions(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    questions: Sequence[str],
    option_lists: Sequence[Sequence[str]],
    m: int,
    max_new_tokens: int,
    *,
    marker: str = MARKER,
    sep: str = SEP,
    sampling_temperature: float = 1.0,
    seed: int | Sequence[int] | None = None,
    sampler: Sampler | None = None,
    chat: bool | None = None,
) -> tuple[Rationales, Tensor]:
    """Rationales for questions with their own option lists: ``(rationales, option_ids
    (B, K_max))`` (-1 pads), ready for :func:`score_rationales`. The prompt names each
    question's options (chat models). ``seed`` and ``sampler``: see
    :func:`sample_rationales`; ``chat``: see :func:`build_prompt`."""
    opts = item_options(tokenizer, option_lists, marker, sep)
    prompts = [
        build_prompt(tokenizer, q, marker=marker, chat=chat, options=o.labels)
        for q, o in zip(questions, opts, strict=True)
    ]
    rats = sample_rationales(
        model,
        tokenizer,
        prompts,
        m,
        max_new_tokens,
        bridge=[o.bridge for o in opts],
        marker=marker,
        sampling_temperature=sampling_temperature,
        seed=seed,
        sampler=sampler,
    )
    return rats, padded_option_ids(opts).to(model.device)


@torch.no_grad()
def read(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    questions: Sequence[str],
    option_lists: Sequence[Sequence[str]],
    *,
    mode: Mode = "reason",
    m: int = 1,
    max_new_tokens: int = 64,
    sampling_temperature: float = 1.0,
    seed: int | None = 0,
    marker: str = MARKER,
    sep: str = SEP,
    batch_size: int = 64,
    on_batch: Callable[[int], object] | None = None,
    chat: bool | None = None,
    sampler: Sampler | None = None,
) -> list[Reading]:
    """Read ``questions`` (each with its own option labels) in batches of ``batch_size``.

    ``reason``: ``m`` rationales per question, question ``i`` sampled with seed
    ``mix_seed(seed, i)`` (``None``: unseeded), so the readings do not depend on
    ``batch_size``; ``direct``: one empty
    rationale (the prompt ends with the marker). ``on_batch(n)`` is called after each
    batch with its number of questions (a progress bar's ``update``). ``chat``: the prompt
    format (:func:`build_prompt`; None: the tokenizer's chat template decides); ``sampler``:
    see :func:`sample_rationales`.
    Returns one :class:`Reading` per question, in order.
    """
    if mode not in ("direct", "reason"):
        raise ValueError(f"mode must be 'direct' or 'reason', got {mode!r}")
    if len(questions) != len(option_lists):
        raise ValueError(f"{len(questions)} questions but {len(option_lists)} option lists")
    out: list[Reading] = []
    for start in range(0, len(questions), batch_size):
        qs = questions[start : start + batch_size]
        labels = option_lists[start : start + batch_size]
        if mode == "direct":
            texts, opts = direct_prompts(tokenizer, qs, labels, marker, sep, chat)
            ids = padded_option_ids(opts)
            u, logits = direct_readout(model, tokenizer, texts, ids, [o.bridge for o in opts])
            u, logits, mm = u[:, None], logits[:, None], 1
            rat_texts = [[""] for _ in qs]
            forced, lengths = [[False]] * len(qs), [[0]] * len(qs)
            logp = torch.zeros(len(qs), 1)
        else:
            rats, ids = sample_questions(
                model, tokenizer, qs, labels, m, max_new_tokens,
                marker=marker, sep=sep, sampling_temperature=sampling_temperature,
                seed=None if seed is None else [mix_seed(seed, start + i) for i in range(len(qs))],
                sampler=sampler, chat=chat,
            )  # fmt: skip
            u, logits, lp = score_rationales(model, rats, ids)
            mm = m
            u, logits = u.view(len(qs), m, -1), logits.view(len(qs), m, -1)
            rat_texts = [rats.texts[i * m : (i + 1) * m] for i in range(len(qs))]
            forced = rats.forced.view(len(qs), m).tolist()
            lengths = rats.lengths.view(len(qs), m).tolist()
            logp = lp.view(len(qs), m)
        u, logits, logp = u.float().cpu(), logits.float().cpu(), logp.float().cpu()
        for i in range(len(qs)):
            k = len(labels[i])
            out.append(
                Reading(
                    tuple(labels[i]),
                    rat_texts[i],
                    forced[i],
                    lengths[i],
                    logp[i, :mm],
                    u[i, :, :k],
                    logits[i, :, :k],
                )  # fmt: skip
            )
        if on_batch is not None:
            on_batch(len(qs))
    return out


# ------------------------------------------------------------------- shared-prefix readout
@torch.no_grad()
def shared_prefix_readout(
    model: PreTrainedModel,
    groups: Sequence[Sequence[Sequence[int]]],
    option_ids: Tensor | Sequence[Sequence[int]],
    pad_id: int = 0,
) -> tuple[Tensor, Tensor]:
    """Readout of many prompts that share a prefix within each group, in two passes.

    ``groups[g]`` holds the token ids of the prompts about one state (each ending with the
    marker and the bridge); their longest common token prefix (at most all but one token of
    the shortest prompt) is run once, its key/value cache is copied to the group's rows,
    and the remaining suffixes run on top of it. Equals ``readout.readout`` on the full
    prompts up to float rounding. ``option_ids`` is ``(R, K)`` for the ``R`` prompts in
    order (-1 = absent option). Returns ``(u, logits)``, both ``(R, K)`` float32.
    """
    prefixes, suffixes, owner = [], [], []
    for seqs in groups:
        if min(len(s) for s in seqs) < 2:
            raise ValueError("each prompt needs at least 2 tokens")
        lcp = common_prefix_len(seqs)
        # a group without a common prefix: each prompt is its own group
        for part in [seqs] if lcp else [[s] for s in seqs]:
            cut = lcp if lcp else len(part[0]) - 1
            prefixes.append(list(part[0][:cut]))
            suffixes.extend(list(s[cut:]) for s in part)
            owner.extend([len(prefixes) - 1] * len(part))
    device = model.device
    p_ids, p_mask = left_pad(prefixes, pad_id, device)
    s_ids, s_mask = left_pad(suffixes, pad_id, device)
    rows = torch.tensor(owner, device=device)
    _, last = prefix_then_suffix(model, p_ids, p_mask, rows, s_ids, s_mask, last_only=True)
    logits = option_logits(last[:, -1], torch.as_tensor(option_ids, dtype=torch.long))
    return logits.softmax(-1), logits


def common_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix, at most all but the last token of the shortest
    sequence (the token count ``shared_prefix_readout`` computes once)."""
    n = min(len(s) for s in seqs) - 1
    k = 0
    while k < n and all(s[k] == seqs[0][k] for s in seqs):
        k += 1
    return k


# ----------------------------------------------------------------------------- the Reader
PromptFormat = Literal["auto", "task", "chat", "plain"]
DEFAULT_NEW_TOKENS = 64
"""Rationale tokens when the checkpoint records none (a converted pretrained model such as
SmolLM2): the Ask tab's and ``reader.read``'s default; a request's ``max_new_tokens``
overrides it."""
PRETRAINED_METHODS = ("pretrain", "pretrained")
"""``rlcd.json`` methods of checkpoints whose calibration T was never fitted: a base model
from ``rlcd-lab pretrain``, a converted pretrained model (``rlcd-lab gguf smollm2``)."""


def temperature_fitted(raw_meta: Mapping[str, Any] | None) -> tuple[bool, str]:
    """``(fitted, note)``: whether a checkpoint's calibration temperature T was fitted,
    from its own ``rlcd.json`` as written (``raw_meta``; None: there is none), not merged
    over the defaults. Fitted means the file records T (``"T"``, or the old key
    ``"temperature"``: :func:`rlcd_lab.models.calibration_T`) and the method is
    not a pretraining one (:data:`PRETRAINED_METHODS`: a base checkpoint's T = 1 is a
    default, not a fit). ``note`` says why not (else ``""``)."""
    raw = raw_meta if isinstance(raw_meta, Mapping) else {}
    method = raw.get("method")
    if method in PRETRAINED_METHODS:
        return False, f"method {method}: a base model, never calibrated"
    if calibration_T(raw) is None:
        return False, "no T in rlcd.json"
    return True, ""


def raw_meta(path: str | Path) -> dict | None:
    """A checkpoint's ``rlcd.json`` as written (not merged over the defaults); None when it
    has none or it cannot be read."""
    try:
        raw = json.loads((Path(path) / META_FILE).read_text())
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) else None


def detect_prompt_format(chat_template: bool, meta: Mapping[str, Any]) -> str:
    """How a checkpoint is prompted: ``chat`` when its tokenizer has a chat template,
    ``task`` when its ``rlcd.json`` lists its own ``options`` (a character-level model that
    only knows its task's format), else ``plain``. The one rule (:class:`Reader`, the Ask
    tab's model card, which reads the template from the files without loading the model)."""
    if chat_template:
        return "chat"
    return "task" if len(meta.get("options") or ()) >= 2 else "plain"


def reading_length(
    prompt_tokens: int,
    bridge_tokens: int,
    marker_tokens: int,
    *,
    mode: str = "reason",
    max_new_tokens: int = DEFAULT_NEW_TOKENS,
) -> int:
    """Positions a reading uses at most (the context rule). ``direct``: the prompt, which
    ends with the marker, and the bridge to the answer token; otherwise (``reason``,
    ``auto``): the prompt, ``max_new_tokens`` rationale tokens, the marker and the bridge
    (a rationale that writes the marker itself stops sooner). The answer token is read at
    the last position, so it takes none."""
    if mode == "direct":
        return prompt_tokens + bridge_tokens
    return prompt_tokens + int(max_new_tokens) + marker_tokens + bridge_tokens


class ContextTooLong(ValueError):
    """A reading needs more positions than the model reads (:meth:`Reader.check_fits`):
    ``prompt_tokens``, ``needed`` (:func:`reading_length`), ``n_ctx`` (the model's limit,
    ``models.context_length``), ``mode`` and ``max_new_tokens``. Each face words it."""

    def __init__(self, prompt_tokens: int, needed: int, n_ctx: int, mode: str, max_new: int):
        self.prompt_tokens, self.needed, self.n_ctx = prompt_tokens, needed, n_ctx
        self.mode, self.max_new_tokens = mode, max_new
        super().__init__(
            f"a reading needs {needed:,} positions (prompt {prompt_tokens:,} tokens"
            + ("" if mode == "direct" else f", {max_new} rationale tokens")
            + f"), but the model reads at most {n_ctx:,}"
        )


class Reader:
    """A checkpoint's calibrated readouts, the one entry the faces read through (the
    decision engine, the dashboard's Ask, Compare and Batch tabs, the GSM8K proposer).

    It owns, decided once from the checkpoint:

    * the prompt format ``prompt_format`` (``auto``: :func:`detect_prompt_format`;
      ``chat`` renders through the chat template, :func:`build_prompt`) and
      :meth:`prompt`;
    * the context budget: ``n_ctx`` (``models.context_length``) and :meth:`check_fits`,
      the rule (:func:`reading_length`) every face checks a question with;
    * the fitted calibration temperature ``T`` (``rlcd.json`` ``"T"``, 1 when
      none is recorded; ``T`` overrides it) and ``T_fitted`` (:func:`temperature_fitted`;
      a base model's recorded T = 1 is not a fit): :meth:`calibrate` is ``softmax(z / T)``;
      :meth:`read` returns raw readings (``u = softmax(z)``), :meth:`calibrated` their
      calibrated readouts;
    * the shared-prefix direct readout :meth:`direct`;
    * sampling through a :class:`Sampler` (``sampler``; None: :func:`default_sampler`):
      :meth:`sample` (rationales), :meth:`generate_text` (free text), and scoring
      :meth:`score` (:func:`score_rationales`).

    The module-level functions are the implementation (training calls them directly).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        meta: Mapping[str, Any] | None = None,
        *,
        prompt_format: PromptFormat = "auto",
        T: float | None = None,
        T_fitted: bool | None = None,
        sampler: Sampler | None = None,
    ):
        self.model, self.tokenizer, self.sampler = model, tokenizer, sampler
        self.meta = {**DEFAULT_META, **upgrade_meta(meta)}
        self.marker, self.sep = self.meta["marker"], self.meta["sep"]
        if T_fitted is None:
            T_fitted = T is not None or temperature_fitted(meta)[0]
        self.T_fitted = bool(T_fitted)
        recorded = self.meta.get("T")
        self.T = float((1.0 if recorded is None else recorded) if T is None else T)
        if not (math.isfinite(self.T) and self.T > 0):
            raise ValueError(f"T must be positive and finite, got {self.T}")
        self.task_options = tuple(self.meta.get("options") or ())
        if prompt_format == "auto":
            chat = getattr(tokenizer, "chat_template", None) is not None
            prompt_format = detect_prompt_format(chat, self.meta)  # type: ignore[assignment]
        if prompt_format == "task" and len(self.task_options) < 2:
            raise ValueError("prompt_format 'task' needs the checkpoint's options in rlcd.json")
        if prompt_format not in ("task", "chat", "plain"):
            raise ValueError(f"unknown prompt_format {prompt_format!r}")
        self.prompt_format: str = prompt_format
        self.chat = prompt_format == "chat"
        self.n_ctx = context_length(model, tokenizer)
        cfg = self.meta.get("config") if isinstance(self.meta.get("config"), dict) else {}
        self.default_new_tokens = int(
            self.meta.get("max_new_tokens") or cfg.get("max_new_tokens") or DEFAULT_NEW_TOKENS
        )
        self.pad_id = pad_id(tokenizer)
        self.marker_len = len(tokenizer(self.marker, add_special_tokens=False)["input_ids"])

    @classmethod
    def load(
        cls,
        path: str | Path,
        device: str | torch.device = "cpu",
        verify: bool = True,
        **kwargs: Any,
    ) -> Reader:
        """A checkpoint directory (``models.load_checkpoint``; ``verify=False`` skips its
        checksums) as a reader; ``T_fitted`` from its own ``rlcd.json`` (none: not fitted)
        unless given (or ``T`` is)."""
        model, tokenizer, meta = load_checkpoint(path, device=device, verify=verify)
        if "T_fitted" not in kwargs and kwargs.get("T") is None:
            kwargs["T_fitted"] = temperature_fitted(raw_meta(path))[0]
        return cls(model, tokenizer, meta, **kwargs)

    # ------------------------------------------------------------------ prompts
    def prompt(
        self, question: str, *, direct: bool = False, options: Sequence[str] | None = None
    ) -> str:
        """:func:`build_prompt` in this checkpoint's format, with its marker."""
        return build_prompt(
            self.tokenizer, question, direct=direct, marker=self.marker, chat=self.chat,
            options=options,
        )  # fmt: skip

    def encode(self, text: str) -> list[int]:
        """The token ids of a complete prompt (no special tokens added)."""
        return encode_prompts(self.tokenizer, [text])[0]

    def options(self, labels: Sequence[str]) -> OptionTokens:
        """The option tokens of ``labels`` after this checkpoint's marker and separator
        (``readout.option_token_ids``; ``ValueError`` naming bad labels)."""
        return option_token_ids(self.tokenizer, tuple(labels), self.marker, self.sep)

    # ------------------------------------------------------------------ context budget
    def check_fits(
        self,
        prompt_tokens: int,
        bridge_tokens: int,
        *,
        mode: str = "reason",
        max_new_tokens: int | None = None,
    ) -> int:
        """The positions a reading needs (:func:`reading_length` with this checkpoint's
        marker; ``max_new_tokens`` None: ``default_new_tokens``); raises
        :class:`ContextTooLong` when that is more than ``n_ctx`` (a model stating no limit
        is not checked). The one context rule of every face."""
        new = self.default_new_tokens if max_new_tokens is None else int(max_new_tokens)
        needed = reading_length(
            prompt_tokens, bridge_tokens, self.marker_len, mode=mode, max_new_tokens=new
        )
        if self.n_ctx is not None and needed > self.n_ctx:
            raise ContextTooLong(prompt_tokens, needed, self.n_ctx, mode, new)
        return needed

    def _sizes(self, question: str, labels: Sequence[str], mode: str) -> tuple[int, int]:
        """``(prompt tokens, bridge tokens)`` of the prompt :meth:`read` builds for
        ``question`` (chat template and worked example included)."""
        opts = self.options(labels)
        prompt = self.prompt(question, direct=mode == "direct", options=opts.labels)
        return len(self.encode(prompt)), len(opts.bridge)

    def question_positions(
        self,
        question: str,
        labels: Sequence[str],
        *,
        mode: str = "reason",
        max_new_tokens: int | None = None,
    ) -> tuple[int, int]:
        """``(prompt tokens, positions)`` a reading of ``question`` uses at most: the prompt
        :meth:`read` builds for it, then (not ``direct``) ``max_new_tokens`` rationale
        tokens and the marker, then the bridge. Raises ``ValueError`` for bad labels or an
        empty question; not the context check (:meth:`check_question`)."""
        n_prompt, n_bridge = self._sizes(question, labels, mode)
        new = self.default_new_tokens if max_new_tokens is None else int(max_new_tokens)
        return n_prompt, reading_length(
            n_prompt, n_bridge, self.marker_len, mode=mode, max_new_tokens=new
        )

    def check_question(
        self,
        question: str,
        labels: Sequence[str],
        *,
        mode: str = "reason",
        max_new_tokens: int | None = None,
    ) -> tuple[int, int]:
        """:meth:`question_positions`, refused past the context (:meth:`check_fits`:
        :class:`ContextTooLong`)."""
        n_prompt, n_bridge = self._sizes(question, labels, mode)
        return n_prompt, self.check_fits(
            n_prompt, n_bridge, mode=mode, max_new_tokens=max_new_tokens
        )

    # ------------------------------------------------------------------ readouts
    def calibrate(self, logits: Tensor | np.ndarray | Sequence) -> np.ndarray:
        """Calibrated readouts ``softmax(z / T)`` ``(..., K)`` in float64
        (``metrics.apply_temperature``) of option logits ``z``."""
        if isinstance(logits, Tensor):
            logits = logits.detach().double().cpu().numpy()
        return apply_temperature(np.asarray(logits, dtype=np.float64), self.T)

    def calibrated(self, reading: Reading) -> np.ndarray:
        """A reading's calibrated readouts ``(M, K)``: ``softmax(logits / T)`` per rationale
        (its ``u`` is the raw ``softmax(logits)``)."""
        return self.calibrate(reading.logits)

    def read(
        self,
        questions: Sequence[str],
        option_lists: Sequence[Sequence[str]],
        *,
        mode: Mode = "reason",
        m: int = 1,
        max_new_tokens: int | None = None,
        sampling_temperature: float = 1.0,
        seed: int | None = 0,
        batch_size: int = 64,
        on_batch: Callable[[int], object] | None = None,
    ) -> list[Reading]:
        """Raw readings (:func:`read`) in this checkpoint's prompt format, marker and
        sampler; ``max_new_tokens`` None: ``default_new_tokens``. Calibrate them with
        :meth:`calibrated`."""
        return read(
            self.model, self.tokenizer, questions, option_lists, mode=mode, m=m,
            max_new_tokens=self.default_new_tokens if max_new_tokens is None else max_new_tokens,
            sampling_temperature=sampling_temperature, seed=seed, marker=self.marker, sep=self.sep,
            batch_size=batch_size, on_batch=on_batch, chat=self.chat, sampler=self.sampler,
        )  # fmt: skip

    @torch.no_grad()
    def direct(
        self,
        groups: Sequence[Sequence[Sequence[int]]],
        option_ids: Tensor | Sequence[Sequence[int]],
        *,
        share_prefix: bool = True,
    ) -> tuple[Tensor, Tensor]:
        """Raw direct readouts ``(u, logits)`` ``(R, K)`` of token-id prompts that end with
        the marker and bridge, grouped by what they share (the questions about one state):
        :func:`shared_prefix_readout` when ``share_prefix`` and a group holds more than one
        prompt, else one plain pass (``readout.readout``). ``option_ids`` ``(R, K)`` for the
        ``R`` prompts in order (-1 = absent option)."""
        if share_prefix and any(len(g) > 1 for g in groups):
            return shared_prefix_readout(self.model, groups, option_ids, self.pad_id)
        flat = [list(s) for g in groups for s in g]
        ids, mask = left_pad(flat, self.pad_id, self.model.device)
        return readout_at_end(self.model, ids, mask, option_ids)

    # ------------------------------------------------------------------ sampling
    def sample(
        self,
        prompts: Sequence[str],
        m: int,
        max_new_tokens: int | None = None,
        *,
        bridge: Sequence[int] | Sequence[Sequence[int]] = (),
        sampling_temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | Sequence[int] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> Rationales:
        """``m`` rationales per prompt (:func:`sample_rationales`) with this checkpoint's
        marker and sampler; ``max_new_tokens`` None: ``default_new_tokens``."""
        return sample_rationales(
            self.model, self.tokenizer, prompts, m,
            self.default_new_tokens if max_new_tokens is None else max_new_tokens,
            bridge=bridge, marker=self.marker, sampling_temperature=sampling_temperature,
            top_p=top_p,
            seed=seed, sampler=self.sampler, should_stop=should_stop,
        )  # fmt: skip

    def score(
        self, rats: Rationales, option_ids: Tensor | Sequence[int]
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Raw ``(u, logits, logp_r)`` of sampled rationales (:func:`score_rationales`);
        ``option_ids`` ``(K,)`` shared or ``(B, K)`` per prompt."""
        return score_rationales(self.model, rats, option_ids)

    def generate_text(
        self,
        prompts: Sequence[str],
        max_new_tokens: int,
        *,
        sampling_temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | Sequence[int] = 0,
    ) -> list[str]:
        """Free text, one sample per prompt (:func:`generate_text`) with this sampler."""
        return generate_text(
            self.model, self.tokenizer, prompts, max_new_tokens,
            sampling_temperature=sampling_temperature,
            top_p=top_p, seed=seed, sampler=self.sampler,
        )  # fmt: skip
