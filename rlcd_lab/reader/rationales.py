"""Rationales: ``m`` per prompt drawn through a :class:`Sampler`, cut at the marker
(OpenJev-RLCD sec. 2 and Algorithm 1: sample without gradient, score with it).

Start at :func:`sample_rationales` (its :class:`Rationales` are what
``reading.score_rationales`` scores with gradient); :func:`sample_questions` does it for
questions with their own option lists, :func:`generate_text` samples free text (no
marker), :func:`written_sampler` writes given rationales instead (teacher forcing). Above
:mod:`rlcd_lab.reader.prompts`, :mod:`rlcd_lab.reader.sampling` and
:mod:`rlcd_lab.reader.decoding`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor
from transformers import (
    LogitsProcessorList,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    StoppingCriteria,
)

from rlcd_lab.lm.checkpoint import MARKER, SEP
from rlcd_lab.reader.decoding import kv_sampler
from rlcd_lab.reader.prompts import (
    _per_prompt,
    build_prompt,
    encode_prompts,
    item_options,
    left_pad,
    padded_option_ids,
)
from rlcd_lab.reader.sampling import (
    Generated,
    GumbelSampler,
    PromptCache,
    Sampler,
    SamplingStopped,
    base_model,
    pad_id,
)


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
      m - 1`` repeat prompt ``i``), which ``score_rationales`` may encode once;
    * ``prompt_cache``: the sampler's keys and values after each row's prompt and the
      rationale tokens it fed the model, kept on request
      (``sample_rationales(keep_prompt=True)``) for ``reading.readout_after``.
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
    prompt_cache: PromptCache | None = None

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
    sampling_temperature: float = 1.0,
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
    noise = GumbelSampler(row_seeds, sampling_temperature, top_p, ids.device)
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
    keep_prompt: bool = False,
) -> Rationales:
    """Sample ``m`` rationales for each prompt, batched and KV-cached, stopping at the marker.

    ``prompts`` are complete texts (``build_prompt``); ``bridge`` is ``OptionTokens.bridge``
    (one shared, or one per prompt; appended after the marker so the readout sits at the
    last column). ``sampling_temperature`` and ``top_p`` shape the sampling only; ``logp_r``
    is always the model's own log-probability at temperature 1. How the marker is matched
    and how EOS counts: below. ``sampler`` draws the tokens (None: :func:`default_sampler`);
    everything after it is shared.

    ``seed``: one per prompt, or an int (prompt ``i`` then gets ``mix_seed(seed, i)``), or
    None (drawn from torch's global generator). Rationale ``j`` of a prompt with seed ``s``
    is drawn with seed ``mix_seed(s, j)`` (``GumbelSampler``): the same rationale whatever
    else is in the batch. The global RNG is left untouched when a seed is given.

    ``should_stop``: passed to the sampler (only when given), which raises
    :class:`SamplingStopped` before a decoding step once it returns True. ``keep_prompt``:
    ask the sampler (only when set; only :func:`~rlcd_lab.reader.decoding.kv_sampler` can)
    to keep each row's keys and values after its prompt and rationale (``prompt_cache``).

    Each row stops once its *decoded text* contains the marker, so a tokenizer that merges
    the marker with what follows (``"Answer:**"`` as one token) is handled: the rationale is
    cut before the merged token and the rest of the marker appended (:func:`cut_at_marker`).
    A row that reaches ``max_new_tokens`` or emits EOS first gets the marker appended and is
    flagged ``forced``; a sampled EOS still counts in ``log pi(r)`` (the rationale's
    probability includes that of stopping there). The :class:`Rationales` rows are
    ``prompt + rationale (+ marker) + bridge``, ``(N, T)`` left-padded, ``N = B m``.
    """
    if m < 1 or max_new_tokens < 1:
        raise ValueError(f"need m >= 1 and max_new_tokens >= 1, got {m}, {max_new_tokens}")
    pad = pad_id(tokenizer)
    sampler = default_sampler(model) if sampler is None else sampler
    prompt_rows = encode_prompts(tokenizer, prompts)
    bridges = _per_prompt(bridge, len(prompts))
    if seed is None:
        seed = int(torch.randint(2**62, ()))
    seeds = prompt_seeds(seed, len(prompts))
    # 1. draw: each prompt repeated m times, row j of a prompt seeded mix_seed(s, j)
    ids, mask = left_pad(prompt_rows, pad, model.device)
    eos = eos_ids(model)
    cancel = {} if should_stop is None else {"should_stop": should_stop}
    cancel |= {"keep_prompt": True} if keep_prompt else {}
    out = sampler(
        model, tokenizer, ids.repeat_interleave(m, 0), mask.repeat_interleave(m, 0),
        row_seeds=[mix_seed(s, j) for s in seeds for j in range(m)],
        max_new_tokens=max_new_tokens, marker=marker, eos=eos,
        sampling_temperature=sampling_temperature, top_p=top_p, **cancel,
    )  # fmt: skip
    # 2. cut: where each row's rationale ends, and what completes the marker
    marker_ids = list(tokenizer(marker, add_special_tokens=False)["input_ids"])
    cuts = [_cut(tokenizer, out, i, marker, marker_ids) for i in range(len(out.tokens))]
    # 3. assemble: prompt + rationale (+ marker completion) + bridge, left-padded
    rats = _assemble(
        cuts, [prompt_rows[i // m] for i in range(len(cuts))],
        [bridges[i // m] for i in range(len(cuts))], m, pad, eos, model.device,
    )  # fmt: skip
    return replace(rats, prompt_cache=out.prompt_cache) if keep_prompt else rats


def prompt_seeds(seed: int | Sequence[int], n: int) -> list[int]:
    """One seed per prompt: ``seed`` itself when a sequence (of ``n``), else prompt ``i``
    gets ``mix_seed(seed, i)``. Raises ``ValueError`` when the counts differ."""
    seeds = [mix_seed(seed, i) for i in range(n)] if isinstance(seed, int) else list(seed)
    if len(seeds) != n:
        raise ValueError(f"{len(seeds)} seeds for {n} prompts")
    return seeds


@dataclass(frozen=True)
class _Cut:
    """Where one sampled row ends: ``kept`` sampled tokens stay in the sequence, then
    ``tail`` (the rest of a merged marker, or the whole marker when ``forced``); ``text``
    is the rationale without the marker; ``logp`` sums the sampled tokens' log-probs (a
    sampled EOS included); ``eos``: the row was forced at a sampled EOS, which is dropped
    from the sequence (its column is ``eos_col``)."""

    kept: list[int]
    tail: list[int]
    text: str
    logp: Tensor
    forced: bool
    eos: bool


def _cut(
    tokenizer: PreTrainedTokenizerBase, out: Generated, i: int, marker: str, marker_ids: list[int]
) -> _Cut:
    """Row ``i`` of a sampler's output as a rationale (see :func:`sample_rationales`): cut at the
    marker it wrote (:func:`cut_at_marker`), else forced, the marker appended after its
    tokens (after dropping a sampled EOS)."""
    gen, token_lp = out.tokens[i], out.token_lp[i]
    end = int(out.end[i]) if out.end[i] >= 0 else len(gen)
    cut = cut_at_marker(tokenizer, gen[:end].tolist(), marker) if out.hit_marker[i] else None
    if cut is not None:
        n, tail, text = cut
        return _Cut(gen[:n].tolist(), tail, text, token_lp[:n].sum(), forced=False, eos=False)
    ended_eos = bool(out.end[i] >= 0 and not out.hit_marker[i])
    n = end - 1 if ended_eos else end
    text = tokenizer.decode(gen[:n].tolist()).strip()
    # the sampled EOS is part of the rationale's log-prob
    return _Cut(gen[:n].tolist(), marker_ids, text, token_lp[:end].sum(), True, ended_eos)


def _assemble(
    cuts: Sequence[_Cut],
    prompts: Sequence[list[int]],
    bridges: Sequence[Sequence[int]],
    m: int,
    pad: int,
    eos: Sequence[int],
    device: torch.device,
) -> Rationales:
    """:class:`Rationales` of the rows ``prompts[i] + cuts[i] + bridges[i]`` (one prompt
    and bridge per row), left-padded, with the rationale mask and EOS columns."""
    rows = [p + c.kept + c.tail + list(b) for p, c, b in zip(prompts, cuts, bridges, strict=True)]
    input_ids, attention_mask = left_pad(rows, pad, device)
    width = input_ids.shape[1]
    rationale_mask = torch.zeros_like(input_ids, dtype=torch.bool)
    eos_col = torch.full((len(rows),), -1, dtype=torch.long)
    for i, c in enumerate(cuts):
        start = width - len(rows[i]) + len(prompts[i])
        rationale_mask[i, start : start + len(c.kept)] = True
        if c.eos:
            eos_col[i] = start + len(c.kept) - 1
    return Rationales(
        input_ids=input_ids,
        attention_mask=attention_mask,
        rationale_mask=rationale_mask,
        eos_col=eos_col.to(device),
        eos_id=eos[0] if eos else -1,
        texts=[c.text for c in cuts],
        forced=torch.tensor([c.forced for c in cuts], device=device),
        lengths=torch.tensor([len(c.kept) for c in cuts], device=device),
        logp_r=torch.stack([c.logp for c in cuts]).to(device),
        m=m,
        prompt_len=torch.tensor([len(p) for p in prompts], device=device),
    )


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
    keep_prompt: bool = False,
) -> tuple[Rationales, Tensor]:
    """Rationales for questions with their own option lists: ``(rationales, option_ids
    (B, K_max))`` (-1 pads), ready for :func:`score_rationales`. The prompt names each
    question's options (chat models). ``seed`` and ``sampler``: see
    :func:`sample_rationales` (as ``keep_prompt``); ``chat``: see :func:`build_prompt`."""
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
        keep_prompt=keep_prompt,
    )
    return rats, padded_option_ids(opts).to(model.device)


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
    seeds = prompt_seeds(seed, len(prompts))
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
        sampling_temperature=sampling_temperature,
        top_p=top_p,
    )
    width = out.tokens.shape[1]
    ends = [int(e) if e >= 0 else width for e in out.end.tolist()]
    return [
        tokenizer.decode(out.tokens[i, :end].tolist(), skip_special_tokens=True)
        for i, end in enumerate(ends)
    ]
