"""Evaluation: run a checkpoint on task items and score its readouts.

Start at :func:`run_eval`: one eval-dump row per item (the format shared by training,
reproduce and the dashboard; its fields: :func:`_dump_row`), after :func:`check_items` has
refused items the model cannot read. :func:`rlcd_lab.summary.summarize` turns the rows into
the paper's Table 1 row; :func:`eval_warnings` says when they look degenerate
(``rlcd-lab eval`` prints both)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from tqdm import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlcd_lab.lm.checkpoint import MARKER, SEP
from rlcd_lab.lm.model import context_length
from rlcd_lab.metrics import T_MAX, T_MIN
from rlcd_lab.reader import reading_length
from rlcd_lab.reader.decoding import pack_frozen, plain_copy, questions_per_call
from rlcd_lab.reader.prompts import Mode, build_prompt, encode_prompts, item_options
from rlcd_lab.reader.reading import Reading, read
from rlcd_lab.reader.readout import OptionTokens
from rlcd_lab.reader.verbal import CUE, read_stated
from rlcd_lab.tasks.items import TaskItem

MAX_RATIONALES = 256
"""Most rationales per question (``--m``) that ``rlcd-lab eval`` and training accept: the
rows of one question are sampled in one batch, so memory grows with ``m``, while a
mixture's Monte Carlo error (about ``1/sqrt(m)``) is below 0.07 at this many."""
FORCED_WARN = 0.2
"""Share of rationales ended by a forced marker above which eval warns (:func:`eval_warnings`)."""
CHANCE_Z = 1.96
"""Two-sided 95% normal quantile of the binomial margin around chance accuracy."""


def eval_warnings(
    rows: Sequence[dict],
    T: float | None = None,
    forced_max: float = FORCED_WARN,
    z: float = CHANCE_Z,
) -> list[str]:
    """Warnings that an evaluation looks degenerate (pure: eval-dump ``rows``, fields:
    :func:`_dump_row`; empty when none applies), each one sentence:

    * forced markers: the share of all rationales that did not end with the marker by
      themselves (``forced``) exceeds ``forced_max``: the readouts are taken after a
      marker the model never wrote (it has not learned the format, or --max-new-tokens
      is too small);
    * temperature at a bound: the checkpoint's fitted calibration temperature ``T`` is
      at :data:`rlcd_lab.metrics.T_MIN` or :data:`~rlcd_lab.metrics.T_MAX` (relative
      tolerance 1e-6), where :func:`rlcd_lab.metrics.fit_temperature` stops: the fit
      did not converge (readouts that carry no signal, or a constant answer);
    * accuracy at chance: over the labelled rows, the accuracy of the single-query
      readout (``argmax probs == label``) is at most chance ``c = mean_i 1/K_i`` plus
      the binomial margin ``z * sqrt(sum_i p_i (1 - p_i)) / n`` with ``p_i = 1/K_i``
      (for one K: ``z * sqrt(c (1 - c) / n)``), i.e. not distinguishable from guessing
      at the two-sided 95% level.
    """
    out = []
    forced = [bool(f) for r in rows for f in r.get("forced") or ()]
    if forced and sum(forced) / len(forced) > forced_max:
        share = sum(forced) / len(forced)
        out.append(
            f"forced markers on {share:.0%} of rationales ({sum(forced)} of {len(forced)}; "
            f"warned above {forced_max:.0%}): the model rarely ends its rationale with the "
            "marker itself, so most readouts follow a marker it did not write (it has not "
            "learned the format, or --max-new-tokens is too small)"
        )
    if T is not None and any(math.isclose(T, b, rel_tol=1e-6) for b in (T_MIN, T_MAX)):
        out.append(
            f"the checkpoint's fitted temperature T = {T:g} is at the bound of the fit "
            f"[{T_MIN:g}, {T_MAX:g}]: the fit did not converge (readouts that carry no "
            "signal, or one answer every time); its calibrated probabilities mean little"
        )
    labelled = [r for r in rows if r.get("label") is not None]
    if labelled:
        n = len(labelled)
        p = [1 / len(r["probs"]) for r in labelled]
        correct = sum(max(range(len(r["probs"])), key=r["probs"].__getitem__) == r["label"]
                      for r in labelled)  # fmt: skip
        acc, chance = correct / n, sum(p) / n
        margin = z * math.sqrt(sum(x * (1 - x) for x in p)) / n
        if acc <= chance + margin:
            out.append(
                f"accuracy {acc:.3f} is within the binomial margin of chance: {chance:.3f} "
                f"+ {margin:.3f} (n = {n}, 95%); the model answers no better than guessing "
                "(an untrained or collapsed model, or the wrong task for it)"
            )
    return out


def reading_positions(
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    options: Sequence[OptionTokens],
    *,
    mode: Mode = "reason",
    max_new_tokens: int = 64,
    marker: str = MARKER,
) -> list[tuple[int, int]]:
    """``(prompt tokens, positions)`` that reading each prompt uses at most, for prompts
    built as :func:`rlcd_lab.reader.read` builds them (``build_prompt``, chat template and
    worked example included, naming the options). ``reason``: the prompt, then
    ``max_new_tokens`` rationale tokens, the marker and the bridge to the answer token (a
    rationale that writes the marker itself stops sooner); ``direct``: the prompt, which
    ends with the marker, and the bridge. The answer token is read at the last position,
    so it takes none (``reader.reading_length``, the context rule the Reader applies in the
    decision server and the Ask tab). ``options``: each prompt's ``OptionTokens``
    (``reader.item_options``)."""
    direct = mode == "direct"
    texts = [
        build_prompt(tokenizer, q, direct=direct, marker=marker, options=o.labels)
        for q, o in zip(prompts, options, strict=True)
    ]
    if not texts:
        return []
    ids = encode_prompts(tokenizer, texts)
    n_marker = len(tokenizer(marker, add_special_tokens=False)["input_ids"])
    return [
        (
            len(i),
            reading_length(
                len(i), len(o.bridge), n_marker, mode=mode, max_new_tokens=max_new_tokens
            ),
        )
        for i, o in zip(ids, options, strict=True)
    ]


def check_items(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    items: Sequence[TaskItem],
    *,
    mode: Mode = "reason",
    max_new_tokens: int = 64,
    marker: str = MARKER,
    sep: str = SEP,
    where: str = "",
) -> None:
    """Refuse items the model cannot read, before any model work; ``ValueError`` naming
    the (first) item, with ``where`` (e.g. ``"verify train split"``) in front.

    Each item's option labels must be single tokens after the marker
    (``readout.option_token_ids``), and its reading must fit the model's context:
    :func:`reading_positions` <= :func:`rlcd_lab.lm.model.context_length` (a model that
    states no limit is not checked). The message gives the prompt's tokens, the rationale
    budget, the marker and bridge tokens, the positions needed and the model's limit, and
    how many items are too long: one line instead of minutes of work on positions the
    model was never trained on. Training checks its train, dev and test items here too."""
    where = f"{where}: " if where else ""
    seen: dict[tuple[str, ...], OptionTokens] = {}
    options = []
    for it in items:
        if it.options not in seen:
            try:
                seen[it.options] = item_options(tokenizer, [it.options], marker, sep)[0]
            except ValueError as err:
                raise ValueError(f"{where}item {it.uid!r}: {err}") from None
        options.append(seen[it.options])
    n_ctx = context_length(model, tokenizer)
    if n_ctx is None or not items:
        return
    sizes = reading_positions(
        tokenizer,
        [it.prompt for it in items],
        options,
        mode=mode,
        max_new_tokens=max_new_tokens,
        marker=marker,
    )
    long = [i for i, (_, needed) in enumerate(sizes) if needed > n_ctx]
    if not long:
        return
    i = long[0]
    n_prompt, needed = sizes[i]
    bridge = len(options[i].bridge)
    if mode == "direct":
        parts = f"its prompt (with the marker) is {n_prompt:,} tokens, and with {bridge} "
        parts += f"bridge token(s) to the answer a direct reading needs {needed:,} positions"
        fix = "shorten the prompt"
    else:
        n_marker = needed - n_prompt - int(max_new_tokens) - bridge
        parts = (
            f"its prompt is {n_prompt:,} tokens, and with {int(max_new_tokens)} rationale "
            f"tokens (--max-new-tokens), {n_marker} marker and {bridge} bridge token(s) a "
            f"reading needs {needed:,} positions"
        )
        fix = "shorten the prompt or lower --max-new-tokens"
    more = f" ({len(long)} of {len(items)} items are too long)" if len(long) > 1 else ""
    raise ValueError(
        f"{where}item {items[i].uid!r} is too long for this model: {parts}, but the model "
        f"reads at most {n_ctx:,}{more}; {fix}"
    )


def _dump_row(item: TaskItem, r: Reading) -> dict:
    """One eval-dump row from an item and its reading: ``uid``, ``label``, ``q``,
    ``options``, ``rationales`` (M texts), ``forced`` and ``lengths`` (per rationale),
    ``readouts`` (M x K), ``mixture`` (mean readout), ``probs`` and ``logits`` (the
    single-query readout: the first rationale's). With a reference model (the base a policy
    was trained from) also ``logp`` and ``logp_reference`` (per rationale: ``log pi(r | x)``
    at temperature 1 under the model and under the reference) and ``kl_reference``, their
    difference averaged over the item's rationales: a per-rationale estimate, in nats, of
    ``KL(pi || pi_ref)`` on the question (unbiased when the rationales are sampled at
    temperature 1). In ``direct`` mode there is one empty rationale (the prompt ends with
    the bare marker). :func:`run_eval` with ``stated=True`` adds ``stated_answer``,
    ``stated_confidence``, ``stated_valid``, ``confidence_probs`` and ``stated_logits`` (K:
    ``log p`` of the distribution the statement implies, scored like ``logits``)."""
    row = {
        "uid": item.uid,
        "label": item.label,
        "q": None if item.q is None else list(item.q),
        "options": list(item.options),
        "rationales": r.texts,
        "forced": r.forced,
        "lengths": r.lengths,
        "readouts": r.u.tolist(),
        "mixture": r.mixture.tolist(),
        "probs": r.u[0].tolist(),
        "logits": r.logits[0].tolist(),
    }
    if r.logp_reference is not None:
        row["logp"] = r.logp.tolist()
        row["logp_reference"] = r.logp_reference.tolist()
        row["kl_reference"] = float((r.logp.double() - r.logp_reference.double()).mean())
    return row


def run_eval(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    items: Sequence[TaskItem],
    *,
    mode: Mode = "reason",
    m: int = 1,
    max_new_tokens: int = 64,
    batch_size: int | None = None,
    sampling_temperature: float = 1.0,
    seed: int = 0,
    marker: str = MARKER,
    sep: str = SEP,
    progress: bool = False,
    where: str = "",
    stated: bool = False,
    cue: str = CUE,
    reference: PreTrainedModel | None = None,
) -> list[dict]:
    """Eval-dump rows for ``items`` (fields: :func:`_dump_row`), read by
    :func:`rlcd_lab.reader.read` (batched, seeded); each item over its own options.

    ``batch_size``: questions per sampler call (None: ``decoding.questions_per_call``, 64
    for the tiny models, 64 rows' worth for larger ones); no row's seed depends on it.
    ``progress``: a tqdm bar on stderr over the items read, advancing one batch of
    ``batch_size`` at a time (``TQDM_DISABLE=1`` in the environment hides it). The rows do
    not depend on it. Items are checked first (:func:`check_items`: single-token option
    labels, readings that fit the model's context; ``ValueError`` naming the item, after
    ``where``, e.g. ``"task verify test split"``).
    A PEFT model (a LoRA adapter) is read through a copy with the adapter merged into its
    weights (:func:`rlcd_lab.reader.decoding.plain_copy`: one matrix per layer instead of three),
    on the CPU from :data:`~rlcd_lab.reader.decoding.FAST_MIN_PARAMS` parameters its matrices
    packed for oneDNN (:func:`~rlcd_lab.reader.decoding.pack_frozen`: prompts, decoding steps
    and readouts multiply through them): logits within float32 rounding of the adapter's
    (about 1e-7 relative merged, 1e-6 packed), so a rationale parts from the adapter's
    own draw only where that reverses a near tie of its noisy scores.
    ``stated`` (reason mode): add the stated-confidence fields, read after the confidence
    ``cue`` (:mod:`rlcd_lab.reader.verbal`) and the first rationale, sampled again with its seed
    (so the row's own; where a device does not reproduce the draw, the rationale read is
    recorded as ``stated_rationale``).
    ``reference``: a model on the same tokenizer (a LoRA adapter merged like ``model``)
    whose log-probabilities of the sampled rationales the rows record, with the estimate
    of the KL divergence to it (``kl_reference``).
    """
    check_items(
        model, tokenizer, items, mode=mode, max_new_tokens=max_new_tokens, marker=marker,
        sep=sep, where=where,
    )  # fmt: skip
    if batch_size is None:
        batch_size = questions_per_call(model, m if mode == "reason" else 1)
    if hasattr(model, "merge_and_unload"):  # a LoRA adapter: W + B A, read without it
        model = pack_frozen(plain_copy(model, next(model.parameters()).dtype))
    if hasattr(reference, "merge_and_unload"):
        reference = plain_copy(reference, next(reference.parameters()).dtype)
    bar = tqdm(total=len(items), desc=f"eval {mode}", unit="item") if progress else None
    try:
        readings = read(
            model, tokenizer, [it.prompt for it in items], [it.options for it in items],
            mode=mode, m=m, max_new_tokens=max_new_tokens,
            sampling_temperature=sampling_temperature, seed=seed,
            marker=marker, sep=sep, batch_size=batch_size,
            on_batch=None if bar is None else bar.update, reference=reference,
        )  # fmt: skip
    finally:
        if bar is not None:
            bar.close()
    rows = [_dump_row(it, r) for it, r in zip(items, readings, strict=True)]
    if stated and mode == "reason":
        said = read_stated(
            model, tokenizer, [it.prompt for it in items], [it.options for it in items],
            max_new_tokens=max_new_tokens, sampling_temperature=sampling_temperature, seed=seed,
            marker=marker,
            sep=sep, cue=cue, batch_size=batch_size,
        )  # fmt: skip
        for row, s in zip(rows, said, strict=True):
            text = s.pop("rationale")
            if text != row["rationales"][0]:  # a device whose sampling is not reproducible
                s["stated_rationale"] = text
            row |= s
    return rows
