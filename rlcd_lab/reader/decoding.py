"""A compact KV-cached decoding loop, :func:`kv_sampler`: ``reader.hf_sampler``'s tokens
under the same seeds, with less work around the model (the steps of plain Llama models in
:mod:`rlcd_lab.reader.llama`); :func:`fast_sampler` and :class:`CopySampler` decode a
reduced-precision copy of the model.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from rlcd_lab.lm.loading import merge_adapter, merged_lora_copy
from rlcd_lab.reader.llama import LlamaSteps, PackedLinears, bound_packing
from rlcd_lab.reader.prompts import left_pad
from rlcd_lab.reader.readout import keep_last, position_ids
from rlcd_lab.reader.sampling import (
    SHARE_MIN_PROMPT,
    Generated,
    GumbelSampler,
    PromptCache,
    Sampler,
    SamplingStopped,
    base_model,
    common_prefix_len,
    forward_args,
    pad_id,
)


def prompt_groups(ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``(first, group)``: ``first (N,)`` bool marks each row that differs from the row
    before it (a new prompt); ``group (N,)`` long is the index, among those rows, of the
    prompt of each row. Rows repeating the same prompt consecutively share a group."""
    first = torch.ones(len(ids), dtype=torch.bool, device=ids.device)
    if len(ids) > 1:
        first[1:] = (ids[1:] != ids[:-1]).any(1) | (mask[1:] != mask[:-1]).any(1)
    return first, first.long().cumsum(0) - 1


def shared_prompt_pass(
    model: torch.nn.Module, seqs: Sequence[Sequence[int]], lcp: int, cache: DynamicCache
) -> tuple[Tensor, Tensor]:
    """Encode ``G`` prompts (token lists) that share their first ``lcp`` tokens into
    ``cache``: the prefix once (one row), its keys and values copied to the ``G`` rows, then
    each prompt's rest left-padded on top. Returns the logits after each prompt ``(G, V)``
    and the mask of the cached columns ``(G, lcp + R)`` (``R`` the longest rest): the pads
    inside a row are masked and its positions count only its own tokens, so this equals
    one pass over the left-padded prompts up to float rounding (and keeps the gradient:
    the rests reach the prefix through the copied keys and values). ``lcp`` must leave
    every prompt a token (``sampling.common_prefix_len``)."""
    device = next(model.parameters()).device
    cache_arg, keep = forward_args(model)
    one = keep_last(device) if keep else {}
    prefix = torch.tensor([list(seqs[0][:lcp])], device=device)
    model(input_ids=prefix, use_cache=True, **{cache_arg: cache}, **one)
    cache.reorder_cache(torch.zeros(len(seqs), dtype=torch.long, device=device))
    rest, rest_mask = left_pad([s[lcp:] for s in seqs], 0, device)  # pads masked
    mask = torch.cat([rest_mask.new_ones((len(seqs), lcp)), rest_mask], 1)
    out = model(
        input_ids=rest,
        attention_mask=mask,
        position_ids=position_ids(mask)[:, lcp:],
        use_cache=True,
        **{cache_arg: cache},
        **one,
    )
    return out.logits[:, -1], mask


@torch.no_grad()
def kv_sampler(
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
    packed: PackedLinears | None = None,
    keep_prompt: bool = False,
) -> Generated:
    """``reader.hf_sampler``'s tokens from a compact decoding loop: left-padded rows
    ``ids, mask (N, T)``, one seeded noise generator per row, each row stopped once its
    decoded text contains ``marker`` (None: free text, no marker) or it emitted a token of
    ``eos``. Returns a ``sampling.Generated`` (CPU tensors): ``tokens`` and ``token_lp``
    ``(N, S)``, ``S`` the steps taken (the longest row's), pad ids after a row's stop;
    ``token_lp`` is the log-softmax of the temperature-1 logits at the sampled token.

    ``should_stop``: asked before every forward pass; once it returns True,
    ``sampling.SamplingStopped`` is raised (nothing is returned). ``packed``: the model's
    matrices packed for oneDNN (:class:`PackedLinears`; None: those bound to it, if any): the
    decoding steps multiply with them (faster, other rounding: not ``generate``'s bits).
    ``keep_prompt``: also return each row's keys and values after its prompt and the
    tokens it fed the model, all it drew but the last (``Generated.prompt_cache``,
    :class:`~rlcd_lab.reader.sampling.PromptCache`), copied as the row leaves the batch.
    The tokens of ``reader.hf_sampler`` under the same seeds (what differs: :class:`_Steps`)."""
    n, width = ids.shape
    if len(row_seeds) != n:
        raise ValueError(f"{len(row_seeds)} row seeds for {n} rows")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    noise = GumbelSampler(row_seeds, sampling_temperature, top_p, ids.device)
    stop = _StopCheck(tokenizer, marker, eos)

    def check() -> None:
        if should_stop is not None and should_stop():
            raise SamplingStopped("should_stop() asked the sampler to stop")

    check()
    steps = _Steps(model, ids, mask, width + max_new_tokens, packed)
    logits = steps.prefill()
    kept = _KeptRows(steps.full_mask[:, :width].clone()) if keep_prompt else None
    live = list(range(n))  # the original index of each row still in the batch
    seqs: list[list[int]] = [[] for _ in range(n)]
    lps: list[tuple[Tensor, Tensor]] = []  # (rows, log-probs) of each step
    end = torch.full((n,), -1, dtype=torch.long)
    hit_marker = torch.zeros(n, dtype=torch.bool)
    rows = torch.arange(n, device=ids.device)
    for t in range(1, max_new_tokens + 1):
        nxt = noise.perturb(logits, [noise.gens[i] for i in live]).argmax(-1)
        lps.append((rows, logits.log_softmax(-1).gather(-1, nxt[:, None])[:, 0]))
        for i, token in zip(live, nxt.tolist(), strict=True):
            seqs[i].append(token)
        keep = []
        for j, (i, found) in enumerate(zip(live, stop.check([seqs[i] for i in live]), strict=True)):
            if found is None:
                keep.append(j)
            else:
                end[i], hit_marker[i] = t, found
        if len(keep) < len(live):
            if kept is not None:  # the leaving rows' keys and values, before they go
                kept.take(live, set(range(len(live))) - set(keep), steps)
            if not keep:
                break
            live = [live[j] for j in keep]
            sel = torch.tensor(keep, device=ids.device)
            rows, nxt = rows[sel], nxt[sel]
            steps.select(sel)
        if t == max_new_tokens:
            break
        check()
        logits = steps(nxt)
    tokens, token_lp = _padded(seqs, lps, t, pad_id(tokenizer))
    cache = None if kept is None else kept.cache(live, steps, model.config)
    return Generated(tokens, end, hit_marker, token_lp, cache)


def _padded(
    seqs: list[list[int]], lps: list[tuple[Tensor, Tensor]], steps: int, pad: int
) -> tuple[Tensor, Tensor]:
    """``(N, steps)`` token ids (``pad`` after a row's stop) and their log-probabilities
    (0 there) from each row's tokens and each step's ``(rows, log-probs)``."""
    tokens = torch.full((len(seqs), steps), pad, dtype=torch.long)
    for i, seq in enumerate(seqs):
        tokens[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
    token_lp = torch.zeros((len(seqs), steps))
    for s, (r, lp) in enumerate(lps):
        token_lp[r.cpu(), s] = lp.float().cpu()
    return tokens, token_lp


class _KeptRows:
    """Each row's keys and values after its prompt and the tokens it fed the model (all
    it drew but the last), copied as the row leaves the batch (``keep_prompt``)."""

    def __init__(self, prompt_mask: Tensor):
        self.prompt_mask = prompt_mask  # (N, W): the prompts' columns, a row's pads masked
        self.rows: dict[int, list[tuple[Tensor, Tensor]]] = {}

    def take(self, live: list[int], rows: set[int], steps: _Steps) -> None:
        """Keep the keys and values of ``rows`` (indices into ``live``, the original index
        of each live row) over the columns ``steps`` has filled."""
        idx = torch.tensor(sorted(rows), dtype=torch.long, device=steps.ids.device)
        if steps.fast is not None:
            t, pairs = steps.fast.t, zip(steps.fast.keys, steps.fast.values, strict=True)
            kv = [(k[idx, :, :t], v[idx, :, :t]) for k, v in pairs]
        else:
            kv = [(layer.keys[idx], layer.values[idx]) for layer in steps.cache.layers]
        for j, i in enumerate(idx.tolist()):
            self.rows[live[i]] = [(k[j], v[j]) for k, v in kv]

    def cache(self, live: list[int], steps: _Steps, config) -> PromptCache:
        """One cache of all rows (the live ones taken first), each row's fed tokens after
        the ``W`` prompt columns, masked columns up to the longest row's."""
        self.take(live, {j for j, i in enumerate(live) if i not in self.rows}, steps)
        n, width = self.prompt_mask.shape
        fed = torch.tensor([self.rows[i][0][0].shape[1] - width for i in range(n)])
        total = width + int(fed.max())
        cache = DynamicCache(config=config)
        for layer in range(len(self.rows[0])):
            k0 = self.rows[0][layer][0]
            keys = k0.new_zeros((n, k0.shape[0], total, k0.shape[-1]))
            values = keys.clone()
            for i in range(n):
                k, v = self.rows[i][layer]
                keys[i, :, : k.shape[1]], values[i, :, : v.shape[1]] = k, v
            cache.update(keys, values, layer)
        gen = (torch.arange(total - width) < fed[:, None]).to(self.prompt_mask)
        return PromptCache(cache, torch.cat([self.prompt_mask, gen], 1), fed)


class _StopCheck:
    """``reader._MarkerStop``'s rule on token lists: a row stops once the decoded text of
    its last ``len(marker) + 1`` tokens contains the marker (every token decodes to at
    least one character), or its last token is in ``eos``. Decoded windows are
    remembered, so a window that recurs (rows of one prompt often write the same text)
    is decoded once.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, marker: str | None, eos: Sequence[int]):
        self.tokenizer, self.marker = tokenizer, marker
        self.window = 1 if marker is None else len(marker) + 1
        self.eos = {int(e) for e in eos}
        self.seen: dict[tuple[int, ...], bool] = {}

    def check(self, seqs: list[list[int]]) -> list[bool | None]:
        """Per sequence: None (go on), True (it wrote the marker) or False (EOS). Without
        a marker (None: free text) only EOS stops a row."""
        if self.marker is None:
            return [False if s[-1] in self.eos else None for s in seqs]
        keys = [tuple(s[-self.window :]) for s in seqs]
        new = list({k for k in keys if k not in self.seen})
        if new:
            texts = self.tokenizer.batch_decode([list(k) for k in new])
            self.seen.update((k, self.marker in text) for k, text in zip(new, texts, strict=True))
        out: list[bool | None] = []
        for k in keys:
            found = self.seen[k]
            out.append(True if found else False if k[-1] in self.eos else None)
        return out


class _Steps:
    """Next-token logits of the live rows, one call per generated token: the model's
    forward pass on a ``DynamicCache`` (position ids from the attention mask, as
    ``generate``), or :class:`LlamaSteps` once its first step matched it bit for bit
    (with packed weights, :class:`PackedLinears`, given or bound: within their rounding).

    Beside ``generate`` (``reader.hf_sampler``), :func:`kv_sampler` draws the same tokens
    with less work around the model:

    * each distinct prompt is encoded once and its keys, values and next-token logits are
      copied to its rows (``ids`` repeats every prompt ``m`` times);
    * a row leaves the batch once it stops. ``generate`` keeps computing finished rows and
      its logits processor keeps drawing their noise, which is never used; here a finished
      row draws nothing more, and every live row's noise stream is unchanged;
    * a step is one forward pass, one noise draw per live row, an argmax and the stop check
      (decoded windows are remembered within a call); tokens are collected in Python lists;
    * for a plain ``LlamaForCausalLM`` (the tiny models, SmolLM2) with SDPA attention, the
      decoding steps after the first run :class:`LlamaSteps`: transformers' own operations in
      the same order on the model's weights, without the module machinery around them, keys
      and values in preallocated buffers. It is used only once its first step's logits equal
      the model's own forward pass bit for bit (else the model's forward runs every step).

    Identical tokens, not always identical bits: encoding a prompt once and dropping finished
    rows change the shapes of the matrix products, and a BLAS may then round the last bit of
    a logit differently (SmolLM2 on the CPU: log-probs within 2e-5 of ``hf_sampler``'s; the
    tiny models: equal bit for bit). ``generate`` itself can round a row's logits differently
    when the rest of its batch changes. A token changes only if such a difference reverses
    the order of the two best noisy scores, which ``tests/test_decoding.py`` and
    ``benchmarks/sampler.py`` never saw.

    Like ``hf_sampler`` (``generate`` with ``do_sample=False`` and one logits processor), no
    other logits processing applies: a generation config's repetition penalty,
    ``min_new_tokens`` or suppressed tokens would change ``generate``'s tokens and are not
    applied here (the checkpoints of this repository set none). ``generate`` also stops a row
    at the model's ``generation_config.eos_token_id``; here ``eos`` alone decides
    (``reader.sample_rationales`` passes the former as the latter).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        ids: Tensor,
        mask: Tensor,
        length: int,
        packed: PackedLinears | None = None,
    ):
        self.model, self.ids, self.mask = model, ids, mask
        self.cache_key, self.keep_one = forward_args(model)
        self.cache = DynamicCache(config=model.config)
        # generate passes no mask at all when nothing is padded; so do these steps
        self.padded = not bool(mask.all())
        self.full_mask = torch.ones((len(ids), length), dtype=mask.dtype, device=ids.device)
        self.full_mask[:, : ids.shape[1]] = mask
        self.pos = position_ids(mask)[:, -1:]
        self.width = ids.shape[1]  # keys and values held per row
        self.fast: LlamaSteps | None = None
        self.try_fast = LlamaSteps.supports(model)
        self.length, self.packed = length, packed if packed is not None else bound_packing(model)

    def prefill(self) -> Tensor:
        """Logits ``(N, V)`` float32 after each row's prompt; distinct prompts are encoded
        once and their keys and values copied to their rows. When the distinct prompts
        share a prefix of :data:`~rlcd_lab.reader.sampling.SHARE_MIN_PROMPT` tokens or more (a
        system text, worked examples), it is encoded once too (:meth:`_prefill_shared`)."""
        first, group = prompt_groups(self.ids, self.mask)
        ids, mask = self.ids[first], self.mask[first]
        seqs = [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]
        lcp = common_prefix_len(seqs) if len(seqs) > 1 else 0
        if lcp >= SHARE_MIN_PROMPT:
            logits = self._prefill_shared(seqs, lcp)
        else:
            out = self.model(
                input_ids=ids,
                attention_mask=mask if self.padded else None,
                position_ids=position_ids(mask),
                use_cache=True,
                **{self.cache_key: self.cache},
                **(keep_last(ids.device) if self.keep_one else {}),
            )
            logits = out.logits[:, -1].float()
        if len(logits) < len(self.ids):
            self.cache.batch_select_indices(group)
            logits = logits[group]
        return logits

    def _prefill_shared(self, seqs: list[list[int]], lcp: int) -> Tensor:
        """The ``G`` distinct prompts ``seqs`` sharing their first ``lcp`` tokens, through
        :func:`shared_prompt_pass`; the cache then holds, per row, the prefix and the padded
        rest (``width`` columns as before, the pads inside masked)."""
        logits, mask = shared_prompt_pass(self.model, seqs, lcp, self.cache)
        _, group = prompt_groups(self.ids, self.mask)
        self.full_mask[:, : mask.shape[1]] = mask[group]
        self.padded = not bool(mask.all())  # the rests are left-padded inside the rows
        return logits.float()

    def select(self, rows: Tensor) -> None:
        """Keep only ``rows`` (indices into the live rows)."""
        self.full_mask, self.pos = self.full_mask[rows], self.pos[rows]
        if self.fast is not None:
            self.fast.select(rows)
        else:
            self.cache.batch_select_indices(rows)

    def __call__(self, tokens: Tensor) -> Tensor:
        """Logits ``(live, V)`` float32 after appending ``tokens (live,)``."""
        self.pos = self.pos + 1
        self.width += 1
        mask = self.full_mask if self.padded else None
        if self.fast is not None:
            return self.fast(tokens[:, None], self.pos, mask).float()
        check = None
        if self.try_fast:  # the first step: run both, keep the fast one if it agrees
            self.try_fast = False
            fast = LlamaSteps(self.model, self.cache, self.length, self.packed)
            check = fast(tokens[:, None], self.pos, mask)
        out = self.model(
            input_ids=tokens[:, None],
            attention_mask=None if mask is None else mask[:, : self.width],
            position_ids=self.pos,
            use_cache=True,
            **{self.cache_key: self.cache},
        )
        logits = out.logits[:, -1]
        if check is not None and (
            torch.equal(check, logits) if self.packed is None else self.packed.agrees(check, logits)
        ):
            self.fast, self.cache = fast, None
        return logits.float()


def plain_copy(model: torch.nn.Module, dtype: torch.dtype) -> PreTrainedModel:
    """A frozen, eval-mode copy of ``model``'s transformers model in ``dtype``, a PEFT
    adapter merged into its weights (``W + B A`` per adapted layer): a plain model, so the
    compact decoding steps (:class:`LlamaSteps`) apply to it. A LoRA model's copy shares
    its frozen weights in their own dtype (:func:`~rlcd_lab.lm.loading.merged_lora_copy`);
    other models are deep-copied. Unwraps DDP."""
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        model = model.module
    merged = merged_lora_copy(model) if hasattr(model, "merge_and_unload") else None
    if merged is None:
        merged = merge_adapter(copy.deepcopy(model))
    return merged.to(dtype).eval().requires_grad_(False)


FAST_MIN_PARAMS = 10_000_000
"""Below this many parameters a decoding step is bound by the overhead of its operations,
not by its products: on the tiny 381k-parameter models a bfloat16 or packed copy decodes
more slowly than the model itself (``benchmarks/floor.py``), so ``fast_sampler`` keeps
:func:`kv_sampler` there."""


WIDE_ROWS = 64
"""Rows per decoding step past which a model of at least :data:`FAST_MIN_PARAMS`
parameters advances no more rows per second, only holds more keys and values: SmolLM2 on
an AMD EPYC (avx512_bf16, one thread) advanced 75, 102, 122, 144 and 145 rows/s at 8, 16,
32, 64 and 128 rows in float32, 150, 206, 225, 260 and 251 in the packed bfloat16 copy
(``benchmarks/floor.py``, benchmarks/RESULTS.md)."""


def questions_per_call(model: torch.nn.Module, m: int, default: int = 64) -> int:
    """How many questions one sampler call takes, their ``m`` rows decoded together:
    ``default`` for a model under :data:`FAST_MIN_PARAMS` parameters (its steps are bound
    by per-operation overhead, which a wider batch only amortises: the tiny model's rows
    per second grow up to 256 rows), else :data:`WIDE_ROWS` ``// m``, at least 1."""
    if sum(p.numel() for p in model.parameters()) < FAST_MIN_PARAMS:
        return default
    return max(1, WIDE_ROWS // max(1, m))


def fast_dtype(device: torch.device | str = "cpu") -> torch.dtype:
    """The dtype a decoding copy is fastest in on ``device``: bfloat16 where its products
    are native (a CUDA device that supports them; a CPU with ``avx512_bf16`` or AMX, as
    oneDNN reports), else float32 (bfloat16 there is emulated and slower)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    if device.type == "cpu" and torch.backends.mkldnn.is_available():
        return torch.bfloat16 if torch.ops.mkldnn._is_mkldnn_bf16_supported() else torch.float32
    return torch.float32


def fast_sampler(model: torch.nn.Module) -> Sampler:
    """``--sampler fast``: the fastest draw this machine offers for ``model``. A
    :class:`CopySampler` in :func:`fast_dtype` of the model's device (packed on the CPU)
    for a model of at least :data:`FAST_MIN_PARAMS` parameters; :func:`kv_sampler`
    itself (``generate``'s tokens) for a smaller one."""
    if sum(p.numel() for p in model.parameters()) < FAST_MIN_PARAMS:
        return kv_sampler
    return CopySampler(fast_dtype(next(model.parameters()).device))


def merged_sampler(model: torch.nn.Module) -> CopySampler | None:
    """Training's draw from the policy itself (``--sampler hf``) for a PEFT-wrapped model: a
    float32 :class:`CopySampler`, the adapter merged into a plain copy (``W + B A`` per
    layer) made at the step's first draw, so the compact decoding steps
    (:class:`LlamaSteps`) run on one matrix per layer instead of the adapter's three; its
    matrices packed for oneDNN (:class:`PackedLinears`) for a model of at least
    :data:`FAST_MIN_PARAMS` parameters. The logits differ from the adapter's own by the
    order of a few float32 additions (the tests bound it), so the tokens are the same
    unless that reverses a near tie. None for any other model, and for one whose forward
    is set on the instance (``--bf16``'s autocast wrapper, which a copy would still call on
    the original): those draw from the model itself."""
    inner = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
    if not hasattr(inner, "merge_and_unload") or "forward" in vars(base_model(inner)):
        return None
    big = sum(p.numel() for p in inner.parameters()) >= FAST_MIN_PARAMS
    return CopySampler(torch.float32, pack=big)


def pack_frozen(model: PreTrainedModel) -> PreTrainedModel:
    """A frozen model read without gradient many times (training's KL anchor, evaluation's
    merged copy), its matrices packed for oneDNN (:meth:`PackedLinears.bind`, decoding steps
    too) for a CPU model of at least :data:`FAST_MIN_PARAMS` parameters where they apply:
    faster products, logits within their float32 rounding; any other model as it is."""
    big = sum(p.numel() for p in model.parameters()) >= FAST_MIN_PARAMS
    return PackedLinears(model).bind(model) if big and PackedLinears.available(model) else model


class CopySampler:
    """``sampling.Sampler`` drawing with :func:`kv_sampler` from :func:`plain_copy` of the
    trained model in ``dtype``, made at the first draw after each :meth:`sync` (the
    training session calls it after every optimizer step); on the CPU its matrices are
    packed for oneDNN (:class:`PackedLinears`) where that applies and ``pack`` is set.

    What it buys: bfloat16 matrix products where the machine has them (CPUs with
    ``avx512_bf16`` or AMX, GPUs), products on prepacked weights, and the compact decoding
    steps for a LoRA-wrapped model (merged, it is a plain model). What it costs: the
    rationales are drawn from the copy, whose next-token distribution differs from the
    trained model's by the copy's rounding (bfloat16 keeps 8 bits of mantissa; packed
    float32 products round differently from the default BLAS, about 1e-6 relative), so the
    draw is slightly off-policy; tokens differ from the float32 draw once rounding
    reverses the order of the two best noisy scores (measured in ``tests/test_bf16.py``).
    The estimator's exact parts stay exact: ``score_rationales`` recomputes ``log pi(r)``
    and the readout with the trained float32 model, and the optimizer's master weights are
    that model's."""

    def __init__(self, dtype: torch.dtype = torch.bfloat16, pack: bool = True):
        self.dtype, self.pack = dtype, pack
        self.copy: PreTrainedModel | None = None
        self.packed: PackedLinears | None = None

    def sync(self) -> None:
        """The trained weights changed: the next draw copies them first."""
        self.copy = self.packed = None

    def __call__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, ids: Tensor,
        mask: Tensor, **kwargs,
    ) -> Generated:  # fmt: skip
        """``kv_sampler(copy, tokenizer, ids, mask, **kwargs)``; ``token_lp`` is the copy's."""
        if self.copy is None:
            self.copy = plain_copy(model, self.dtype)
            if self.pack and PackedLinears.available(self.copy):
                self.packed = PackedLinears(self.copy)
        return kv_sampler(self.copy, tokenizer, ids, mask, packed=self.packed, **kwargs)
