"""Reading: the per-rationale readout and ``log pi(r | x)``, direct readouts, and
:func:`read`, the whole path from questions to :class:`Reading` (OpenJev-RLCD sec. 2).

The readout of a row is taken at its last column, over the question's own ``K`` options:

    u = softmax(z),    z = logits[:, -1][options]    (readout.readout)

Start at :func:`read` (questions with their option lists, one :class:`Reading` each);
:func:`score_rationales` is the differentiable scoring pass, :func:`direct_readout` and
:func:`direct_logits` read texts that already end with the marker. Above
:mod:`.prompts` and :mod:`.rationales`; the :class:`~rlcd_lab.reader.Reader` reads through
it. (Not :mod:`rlcd_lab.scoring`, the proper scoring rules.)"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from rlcd_lab import metrics
from rlcd_lab.lm.checkpoint import MARKER, SEP
from rlcd_lab.reader.decoding import kv_sampler, shared_prompt_pass
from rlcd_lab.reader.packing import pack_rows
from rlcd_lab.reader.prompts import (
    Mode,
    direct_prompts,
    encode_prompts,
    left_pad,
    padded_option_ids,
)
from rlcd_lab.reader.rationales import Rationales, default_sampler, mix_seed, sample_questions
from rlcd_lab.reader.readout import OptionTokens, keep_last, option_logits, position_ids
from rlcd_lab.reader.readout import readout as readout_at_end
from rlcd_lab.reader.sampling import (
    SHARE_MIN_PROMPT,
    PromptCache,
    Sampler,
    base_model,
    common_prefix_len,
    forward_args,
    pad_id,
)


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
    prompt has at least :data:`SHARE_MIN_PROMPT` tokens) the packed pass
    (:mod:`rlcd_lab.reader.packing`): the prompts' common head once, then one row per question
    holding the rest of its prompt and its ``m`` continuations (rationale, marker, bridge)
    under a tree-shaped attention mask, logits only where a token is scored or the readout
    read. The two give the same values up to float rounding (``tests/test_reader.py``:
    outputs and gradients). Not packed under gradient checkpointing with gradients on
    (transformers drops the head's cache there), for a model whose forward takes no cache,
    or for an attention that takes no custom mask.
    """
    option_ids = torch.as_tensor(option_ids, dtype=torch.long, device=rats.input_ids.device)
    if option_ids.dim() == 2:
        option_ids = option_ids[rats.prompt_index]
    mask = rats.logp_mask
    targets = rats.input_ids[:, 1:].clone()  # token t + 1 is predicted at column t
    eos_rows = (rats.eos_col >= 0).nonzero()[:, 0]
    targets[eos_rows, rats.eos_col[eos_rows]] = rats.eos_id
    if _share(model, rats, share_prompts):
        last, predicting = _packed_pass(model, rats, mask)
    else:
        logits_all = model(
            input_ids=rats.input_ids,
            attention_mask=rats.attention_mask,
            position_ids=position_ids(rats.attention_mask),
        ).logits
        last, predicting = logits_all[:, -1], logits_all[:, :-1][mask]
    logits = option_logits(last, option_ids)
    wide = torch.promote_types(predicting.dtype, torch.float32)  # bf16 up, float64 kept
    token_lp = TokenLogProbs.apply(predicting.to(wide), targets[mask])
    if per_token:
        out = torch.zeros(mask.shape, device=token_lp.device, dtype=token_lp.dtype)
        return logits.softmax(-1), logits, out.masked_scatter(mask, token_lp)
    rows = mask.nonzero()[:, 0]
    logp_r = token_lp.new_zeros(len(rats.texts)).index_add(0, rows, token_lp)
    return logits.softmax(-1), logits, logp_r


class TokenLogProbs(torch.autograd.Function):
    """``TokenLogProbs.apply(logits, targets)``: ``log_softmax(logits)[s, targets[s]]`` for
    each row ``s`` of ``logits (S, V)``, ``-F.cross_entropy(reduction="none")``'s values bit
    for bit; its gradient ``g (onehot(targets) - softmax(logits))`` is one ``(S, V)`` block
    (autograd's cross-entropy allocates and fills two; each costs as much as its pass)."""

    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor) -> Tensor:
        logp = logits.log_softmax(-1)
        ctx.save_for_backward(logp, targets)
        return logp.gather(-1, targets[:, None])[:, 0]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g: Tensor) -> tuple[Tensor, None]:
        logp, targets = ctx.saved_tensors
        grad = logp.exp().mul_(-g[:, None])
        return grad.scatter_add_(1, targets[:, None], g[:, None]), None


def _share(model: torch.nn.Module, rats: Rationales, share: bool | None) -> bool:
    """Whether ``score_rationales`` packs the prompts with their rationales (see its
    docstring): for a model that takes a KV cache and an attention that takes a custom
    mask (SDPA, eager) whose window, if any, covers every row; not under gradient
    checkpointing with gradients on (transformers drops the head's cache there)."""
    config = base_model(model).config
    if share is False or rats.m < 2 or forward_args(model)[0] is None:
        return False
    if config._attn_implementation not in ("sdpa", "eager"):
        return False
    window = getattr(config, "sliding_window", None)
    if window is not None and int(rats.attention_mask.sum(1).max()) > window:
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
    When the prefixes themselves share :data:`SHARE_MIN_PROMPT` tokens or more (the system
    text and worked examples every prompt starts with), that part is encoded once too
    (``decoding.shared_prompt_pass``).

    Returns the logits after each prefix ``(P, V)`` (they predict each suffix's first
    token) and the suffix logits ``(R, Ts, V)``, ``(R, 1, V)`` with ``last_only``. Equal to
    the one pass up to float rounding; differentiable (the gradient reaches the prefix
    pass through the copied keys and values)."""
    cache_arg, keep = forward_args(model)
    cache = DynamicCache(config=base_model(model).config)
    seqs = [row[m.bool()].tolist() for row, m in zip(prefix_ids, prefix_mask, strict=True)]
    lcp = common_prefix_len(seqs) if len(seqs) > 1 else 0
    if lcp >= SHARE_MIN_PROMPT:  # the prefixes' own common part (system text) once
        after_prefix, prefix_mask = shared_prompt_pass(model, seqs, lcp, cache)
    else:
        after_prefix = model(
            input_ids=prefix_ids,
            attention_mask=prefix_mask,
            position_ids=position_ids(prefix_mask),
            use_cache=True,
            **{cache_arg: cache},
            **(keep_last(prefix_ids.device) if keep else {}),
        ).logits[:, -1]
    cache.reorder_cache(rows)  # one copy of its prefix's keys and values per row
    mask = torch.cat([prefix_mask[rows], suffix_mask], dim=1)
    out = model(
        input_ids=suffix_ids,
        attention_mask=mask,
        position_ids=position_ids(mask)[:, prefix_mask.shape[1] :],
        use_cache=False,
        **{cache_arg: cache},
        **(keep_last(suffix_ids.device) if keep and last_only else {}),
    )
    return after_prefix, out.logits[:, -1:] if last_only else out.logits


def _packed_pass(model: torch.nn.Module, rats: Rationales, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``score_rationales``'s packed pass (:mod:`rlcd_lab.reader.packing`): ``(last (N, V),
    predicting (S, V))``, the logits at each row's last column and, in ``mask``'s
    row-major order, those predicting each of the ``S`` tokens ``mask (N, T - 1)`` marks
    (as ``logits[:, :-1][mask]`` of the plain pass). The prompts' common head is encoded
    once (one row, its keys and values copied to the ``B`` questions), then one row per
    question: its prompt's rest and its ``m`` continuations."""
    predicts = F.pad(mask, (0, 1))  # batch column t predicts token t + 1
    last = torch.zeros_like(predicts)
    last[:, -1] = True
    p = pack_rows(rats.input_ids, rats.attention_mask, rats.prompt_len, rats.m, (predicts, last))
    config = base_model(model).config
    additive = None if config._attn_implementation == "sdpa" else base_model(model).dtype
    cache_arg, keep = forward_args(model)
    cached = {}
    if p.head.shape[1]:  # its logits are not used: the last column's only, the fewest
        cache = DynamicCache(config=config)
        last_only = keep_last(p.head.device) if keep else {}
        model(input_ids=p.head, use_cache=True, **{cache_arg: cache}, **last_only)
        cache.reorder_cache(torch.zeros(len(p.ids), dtype=torch.long, device=p.ids.device))
        cached = {cache_arg: cache}
    keep = torch.cat([p.keep[1], p.keep[0]])
    # logits only at the kept columns: the output layer gets just their hidden states
    head = base_model(model).get_output_embeddings()
    gather = head.register_forward_pre_hook(lambda _, args: (args[0].flatten(0, 1)[keep],))
    try:
        logits = model(
            input_ids=p.ids,
            attention_mask=p.attention(additive),
            position_ids=p.positions,
            use_cache=False,
            **cached,
        ).logits
    finally:
        gather.remove()
    return logits.split([len(p.keep[1]), len(p.keep[0])])  # backward: one block, not two


@torch.no_grad()
def readout_after(
    model: PreTrainedModel, rats: Rationales, option_ids: Tensor | Sequence[int]
) -> tuple[Tensor, Tensor]:
    """The readout ``(u, logits)`` ``(N, K)`` at each row's last column, without
    ``log pi(r)`` (what evaluation keeps; the sampler's ``rats.logp_r`` stands for it),
    encoding as little as it can, logits at the last column only:

    * with the sampler's keys and values (``rats.prompt_cache``, kept by
      ``sample_rationales(keep_prompt=True)``: each row's prompt and the rationale tokens
      it fed the model), only what follows them runs (the rationale's last token, the
      marker's rest, the bridge), on top of them;
    * else the longest token prefix common to every row (the system text and worked
      examples every prompt starts with) is encoded once when it has
      :data:`SHARE_MIN_PROMPT` tokens or more, the rest of each row on its keys and values;
    * else one plain pass.

    Equals :func:`score_rationales`'s ``u, logits`` up to float rounding
    (``tests/test_reader.py``). ``option_ids``: ``(K,)`` shared, or ``(B, K)`` per prompt
    (-1 = absent option)."""
    option_ids = torch.as_tensor(option_ids, dtype=torch.long, device=rats.input_ids.device)
    if option_ids.dim() == 2:
        option_ids = option_ids[rats.prompt_index]
    ids, mask = rats.input_ids, rats.attention_mask
    width = ids.shape[1]
    cache_arg, _ = forward_args(model)
    kept = rats.prompt_cache
    if kept is not None and cache_arg is not None:
        # the last column is always run: its logits are the readout
        usable = torch.minimum(rats.lengths, mask.sum(1) - rats.prompt_len - 1)
        cached, cache_mask = _cached_tokens(kept, usable)
        # each row's first column not in the cache: after its prompt and cached tokens
        cont = width - mask.sum(1) + rats.prompt_len + cached
        c = width - int(cont.min())
        cont_mask = (torch.arange(width - c, width, device=ids.device) >= cont[:, None]).long()
        full = torch.cat([cache_mask.to(cont_mask), cont_mask], 1)
        out = model(
            input_ids=ids[:, width - c :],
            attention_mask=full,
            position_ids=position_ids(full)[:, -c:],
            use_cache=False,
            **keep_last(ids.device),
            **{cache_arg: kept.cache},
        )
        logits = option_logits(out.logits[:, -1], option_ids)
        return logits.softmax(-1), logits
    lengths = mask.sum(1).tolist()
    seqs = [ids[i, width - n :].tolist() for i, n in enumerate(lengths)]
    lcp = common_prefix_len(seqs)
    if lcp < SHARE_MIN_PROMPT or cache_arg is None:
        return readout_at_end(model, ids, mask, option_ids)
    suffix_ids, suffix_mask = left_pad([s[lcp:] for s in seqs], 0, ids.device)  # pads masked
    prefix = torch.tensor([seqs[0][:lcp]], device=ids.device)
    rows = torch.zeros(len(seqs), dtype=torch.long, device=ids.device)
    _, last = prefix_then_suffix(
        model, prefix, torch.ones_like(prefix), rows, suffix_ids, suffix_mask, last_only=True
    )
    logits = option_logits(last[:, -1], option_ids)
    return logits.softmax(-1), logits


def _cached_tokens(kept: PromptCache, usable: Tensor) -> tuple[Tensor, Tensor]:
    """``(cached (N,), mask (N, W))``: how many of each row's first ``usable`` rationale
    tokens the sampler's cache ``kept`` holds (those it fed, at most the usable ones: a
    rationale cut inside a merged marker token keeps fewer than it drew) and the cache's
    attention mask with any fed token past them masked."""
    if kept.generated is None:
        return torch.zeros_like(usable), kept.mask
    fed = kept.generated.to(usable.device)
    cached = torch.minimum(fed, usable)
    start = kept.mask.shape[1] - int(fed.max())  # the first column after the prompts
    cols = torch.arange(kept.mask.shape[1], device=kept.mask.device)
    keep = cols[None] < start + cached.to(cols.device)[:, None]
    return cached, kept.mask * keep.to(kept.mask)


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


@dataclass(frozen=True)
class Reading:
    """One question read by a model: ``M`` rationales (one empty in direct mode) and each
    one's readout over the question's own ``K`` options.

    ``u``, ``logits``: ``(M, K)`` float32 tensors (CPU); ``logp (M,)``: ``log pi(r | x)``
    at temperature 1 (0 in direct mode); ``logp_reference (M,)``: the same rationales'
    ``log pi_ref(r | x)`` under a reference model (:func:`read`'s ``reference``; None
    without one); ``texts``, ``forced``, ``lengths``: per rationale.
    """

    options: tuple[str, ...]
    texts: list[str]
    forced: list[bool]
    lengths: list[int]
    logp: Tensor
    u: Tensor
    logits: Tensor
    logp_reference: Tensor | None = None

    @property
    def mixture(self) -> Tensor:
        """``p = (1/M) sum_i u_i`` ``(K,)``: the mixture over rationales."""
        return self.u.mean(0)

    def log_probs(self, aggregate: Literal["single", "mixture"] = "single") -> np.ndarray:
        """``(K,)`` float64 log-probabilities of the options: ``single``,
        ``log_softmax(logits[0])`` (the first rationale's readout, the single query);
        ``mixture``, ``log p`` with ``p = (1/M) sum_i softmax(logits_i)`` in float64
        (``-inf`` where ``p`` is 0)."""
        if aggregate == "single":
            return metrics.log_softmax(self.logits[0])
        if aggregate == "mixture":
            with np.errstate(divide="ignore"):
                return np.log(metrics.softmax(self.logits).mean(0))
        raise ValueError(f"aggregate must be 'single' or 'mixture', got {aggregate!r}")


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
    reference: PreTrainedModel | None = None,
) -> list[Reading]:
    """Read ``questions`` (each with its own option labels) in batches of ``batch_size``.

    ``reason``: ``m`` rationales per question, question ``i`` sampled with seed
    ``mix_seed(seed, i)`` (``None``: unseeded), so the readings do not depend on
    ``batch_size``; ``direct``: one empty
    rationale (the prompt ends with the marker). ``on_batch(n)`` is called after each
    batch with its number of questions (a progress bar's ``update``). ``chat``: the prompt
    format (:func:`build_prompt`; None: the tokenizer's chat template decides); ``sampler``:
    see :func:`sample_rationales`. ``reference``: a model on the same tokenizer and device
    (the base a policy was trained from) under which each sampled rationale is scored too
    (:func:`score_rationales`): ``Reading.logp_reference`` (0 in direct mode).
    Returns one :class:`Reading` per question, in order.
    """
    if mode not in ("direct", "reason"):
        raise ValueError(f"mode must be 'direct' or 'reason', got {mode!r}")
    if len(questions) != len(option_lists):
        raise ValueError(f"{len(questions)} questions but {len(option_lists)} option lists")
    out: list[Reading] = []
    # the readout reuses the prompts' keys and values when the sampler is the model's own
    keep_prompt = sampler is None and default_sampler(model) is kv_sampler
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
            lp_ref = None if reference is None else torch.zeros(len(qs), 1)
        else:
            rats, ids = sample_questions(
                model, tokenizer, qs, labels, m, max_new_tokens,
                marker=marker, sep=sep, sampling_temperature=sampling_temperature,
                seed=None if seed is None else [mix_seed(seed, start + i) for i in range(len(qs))],
                sampler=sampler, chat=chat, keep_prompt=keep_prompt,
            )  # fmt: skip
            u, logits = readout_after(model, rats, ids)  # log pi(r): the sampler's
            lp, mm = rats.logp_r, m
            u, logits = u.view(len(qs), m, -1), logits.view(len(qs), m, -1)
            rat_texts = [rats.texts[i * m : (i + 1) * m] for i in range(len(qs))]
            forced = rats.forced.view(len(qs), m).tolist()
            lengths = rats.lengths.view(len(qs), m).tolist()
            logp = lp.view(len(qs), m)
            lp_ref = None if reference is None else score_rationales(reference, rats, ids)[2]
        u, logits, logp = u.float().cpu(), logits.float().cpu(), logp.float().cpu()
        ref = None if lp_ref is None else lp_ref.float().cpu().view(len(qs), -1)
        for i in range(len(qs)):
            k = len(labels[i])
            out.append(Reading(
                tuple(labels[i]), rat_texts[i], forced[i], lengths[i], logp[i, :mm],
                u[i, :, :k], logits[i, :, :k], None if ref is None else ref[i, :mm],
            ))  # fmt: skip
        if on_batch is not None:
            on_batch(len(qs))
    return out
