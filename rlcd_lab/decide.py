"""Typed decisions: Jev questions about a state -> prompts with options -> readout -> answers.

A request names a *state* (text, a JSON object or an array) and typed questions about it
(the Jev wire form; see docs/server.md). Each question becomes a prompt
that ends in the marker and a set of K option tokens; the answer is read, not sampled,
through the checkpoint's :class:`rlcd_lab.reader.Reader` (prompt format, context budget,
sampler), with its fitted temperature ``T`` applied to the option logits ``z``
(``Reader.calibrate``):

    p = softmax(z / T)  in Delta_K.

The wire contract (the schema, its one validation, :class:`Question` and the typed answers
built from ``p``: a noul's ``p_yes``, a choice's argmax and chance-corrected confidence, a
score's expected level and ordinal confidence) is :mod:`rlcd_lab.jev`'s; its names are
re-exported here. This module maps questions to prompts and option tokens and computes ``p``.

For routing (``auto`` mode) a question's confidence is its answer's (a noul's is the
chance-corrected value with K = 2, ``|2 p_yes - 1|``). The confidences, the mixture and the
escalation rule are :mod:`rlcd_lab.routing`'s (``DecideOptions.rule``, a
:class:`rlcd_lab.routing.DecisionRule` on the chance-corrected confidence; default threshold
:data:`rlcd_lab.routing.DEFAULT_CHANCE_CORRECTED_THRESHOLD` = 0.8, i.e. max p 0.9 for a
noul), the same rule the dashboard applies when asked for the chance-corrected confidence.

Modes (``DecideOptions.mode``):

* ``direct``: the prompt ends with a bare ``Answer:``; one forward pass per batch. All
  questions about one state share the state's token prefix: its keys and values are
  computed once and reused for every question (``Reader.direct``,
  ``reader.shared_prefix_readout``).
* ``reason``: M rationales are sampled per prompt (``Reader.sample``'s call to
  ``reader.sample_rationales`` with the Reader's marker and sampler), each ends in the
  marker and is read out with the scoring pass (``Reader.score``,
  ``reader.score_rationales``, as training and evaluation read); the answer uses the mixture
  ``p = (1/M) sum_i u_i`` (``aggregate="mixture"``) or the first rationale's readout
  (``aggregate="single"``, the paper's single query).
* ``auto`` (an AutoThink-style cascade): ``direct`` first; a question is answered again in
  ``reason`` mode exactly when its direct confidence is below ``threshold``. The cascade
  only makes sense where the confidence is calibrated: :func:`temperature_fitted` says
  whether a checkpoint's T was fitted (the decision server answers directly by default
  where it was not).

Stopping early. ``decide_batch(..., cancelled)`` drops a request whose caller went away:
before planning, between phases and, through ``Reader.sample(should_stop=...)``,
before every decoding step of its rationales (``reader.SamplingStopped``), so abandoned
work ends within one step. ``DecideOptions.deadline`` (a ``time.monotonic()`` instant)
bounds a request the same way and returns the best answer so far: a question whose
reasoning is cut by the deadline is answered by its direct readout (details
``deadline_passed``).

How questions map to prompts depends on the checkpoint (``DecisionModel.prompt_format``,
the Reader's):

* ``chat`` / ``plain`` (real BPE models; ``chat`` when the tokenizer has a chat template):
  the prompt is the rendered state, then the question's instructions and one line per
  option ``"<code>) <label>: <description>"``, passed through ``reader.build_prompt``.
  Option codes are single tokens after ``"Answer: "``: a noul reads ``yes``/``no`` (else
  ``Y``/``N``), a choice reads letters ``A, B, ...`` (then ``a..z``, ``0..9``; more than 62
  options read the labels themselves, which must then be single tokens), a score reads the
  digits ``0..L-1``.
* ``task`` (the tiny character-level checkpoints, whose vocabulary only knows their task
  format, e.g. ``"33+60+20=113?"``): the state *is* the prompt, instructions and criteria
  descriptions are not shown to the model, and the answer tokens are the checkpoint's own
  options (``rlcd.json`` ``"options"``). A noul needs a yes-like and a no-like option
  (verify: yes -> ``Y``, no -> ``N``); a choice or score maps its labels by name when they
  are all options of the checkpoint, else by position (label k -> option k), so it can have
  at most as many labels as the checkpoint has options. All questions about a state then
  share one prompt: one readout row (direct) or one set of rationales (reason) serves them.

A question that cannot be represented raises :class:`DecisionError` naming it (too many
options, a label that is not a single token, characters the tokenizer maps to its unknown
token, a prompt longer than the model's context: ``Reader.check_fits``, the rule the
Ask tab applies too). The state is only ever rendered into the
prompt: its content never selects which questions, options or fields are read.
"""

from __future__ import annotations

import math
import string
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .jev import (
    MAX_CHOICE_OPTIONS,
    MAX_LABEL_CHARS,
    MAX_SCORE_LEVELS,
    MIN_OPTIONS,
    DecisionError,
    Kind,
    Question,
    choice_answer,
    decision_confidence,
    expected_level,
    noul_answer,
    question_from_wire,
    render,
    score_answer,
    state_text,
)
from .models import load_checkpoint
from .reader import (  # re-exported: the Reader's names decide used to define
    DEFAULT_NEW_TOKENS,
    PRETRAINED_METHODS,
    ContextTooLong,
    PromptFormat,
    Reader,
    SamplingStopped,
    common_prefix_len,
    raw_meta,
    sample_rationales,
    shared_prefix_readout,
    temperature_fitted,
)
from .readout import OptionTokens
from .routing import (
    DEFAULT_CHANCE_CORRECTED_THRESHOLD,
    Aggregate,
    DecisionRule,
    chance_corrected_confidence,
    score_confidence,
)

__all__ = [  # the wire contract and the typed answers live in jev.py; re-exported here
    "CODES",
    "DEFAULT_INSTRUCTIONS",
    "DEFAULT_NEW_TOKENS",
    "MAX_CHOICE_OPTIONS",
    "MAX_LABEL_CHARS",
    "MAX_SCORE_LEVELS",
    "MIN_OPTIONS",
    "NO_LIKE",
    "PRETRAINED_METHODS",
    "YES_LIKE",
    "DecideOptions",
    "Decision",
    "DecisionError",
    "DecisionModel",
    "Kind",
    "Mode",
    "PromptFormat",
    "Question",
    "chance_corrected_confidence",
    "choice_answer",
    "decision_confidence",
    "expected_level",
    "noul_answer",
    "question_from_wire",
    "render",
    "score_answer",
    "score_confidence",
    "shared_prefix_readout",
    "temperature_fitted",
    "with_options",
]

Mode = Literal["direct", "reason", "auto"]
CODES = string.ascii_uppercase + string.ascii_lowercase + string.digits
YES_LIKE = ("y", "yes", "true", "t", "1")
NO_LIKE = ("n", "no", "false", "f", "0")
DEFAULT_INSTRUCTIONS = {
    "noul": "Is this true?",
    "choice": "Which option applies?",
    "score": "Which level applies?",
}
_OLD_KEYWORDS = {"temperature": "T", "temperature_fitted": "T_fitted"}
"""``DecisionModel`` keywords renamed (still accepted, with a ``DeprecationWarning``)."""


def _renamed_keywords(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the old keyword names of :data:`_OLD_KEYWORDS` under their new ones
    (a ``DeprecationWarning`` each; ``TypeError`` when both names are given)."""
    out = dict(kwargs)
    for old, new in _OLD_KEYWORDS.items():
        if old in out:
            if new in out:
                raise TypeError(f"DecisionModel got both {old}= and {new}= (use {new}=)")
            warnings.warn(
                f"DecisionModel({old}=) is deprecated: use {new}= (the fitted calibration "
                "temperature, not the sampling temperature)",
                DeprecationWarning,
                stacklevel=3,
            )
            out[new] = out.pop(old)
    return out


# --------------------------------------------------------------------------- options
@dataclass(frozen=True)
class DecideOptions:
    """How to answer: ``mode`` (direct | reason | auto), ``m`` rationales per prompt,
    ``aggregate`` (mixture | single), the ``auto`` escalation ``threshold`` on the direct
    confidence, ``max_new_tokens`` per rationale (None: the checkpoint's default), the
    rationale sampling temperature and seed, ``details`` (per-rationale texts and
    readouts in ``Decision.details``) and ``deadline``: a ``time.monotonic()`` instant
    after which no more rationales are drawn for the request (None: none); a question
    still reasoning then is answered by its direct readout (the best answer so far)."""

    mode: Mode = "direct"
    m: int = 4
    aggregate: Aggregate = "mixture"
    threshold: float = DEFAULT_CHANCE_CORRECTED_THRESHOLD
    max_new_tokens: int | None = None
    sample_temperature: float = 1.0
    seed: int = 0
    details: bool = False
    deadline: float | None = None

    def validate(self) -> None:
        """Raise :class:`DecisionError` (``loc`` = the field) for out-of-range options."""
        checks = [
            ("mode", self.mode in ("direct", "reason", "auto"), "direct, reason or auto"),
            ("m", isinstance(self.m, int) and 1 <= self.m <= 64, "an integer in 1..64"),
            ("aggregate", self.aggregate in ("mixture", "single"), "mixture or single"),
            ("threshold", 0.0 <= self.threshold <= 1.0, "in [0, 1]"),
            (
                "max_new_tokens",
                self.max_new_tokens is None or 1 <= self.max_new_tokens <= 4096,
                "in 1..4096",
            ),
            (
                "sample_temperature",
                math.isfinite(self.sample_temperature) and 0.05 <= self.sample_temperature <= 10,
                "in [0.05, 10]",
            ),
            (
                "deadline",
                self.deadline is None
                or (
                    isinstance(self.deadline, int | float)
                    and not isinstance(self.deadline, bool)
                    and math.isfinite(self.deadline)
                ),
                "None or a finite time.monotonic() instant",
            ),
        ]
        for name, ok, what in checks:
            if not ok:
                raise DecisionError(f"{name} must be {what}", (name,))

    @property
    def rule(self) -> DecisionRule:
        """The decision rule these options apply (:class:`rlcd_lab.routing.DecisionRule`):
        the chance-corrected confidence (ordinal for scores) of ``aggregate`` at
        ``threshold``. ``auto`` escalates a question whose direct readout it does not
        automate; ``reason`` answers with ``rule.probs`` of the M readouts."""
        return DecisionRule("chance_corrected", self.threshold, self.aggregate)


@dataclass
class Decision:
    """Answers to one request: ``answers`` (wire form, keyed by question name), ``usage``
    (``input_tokens``: distinct prompt tokens read, a shared prefix counted once;
    ``output_tokens``: sampled rationale tokens) and ``details`` per question: ``mode``
    (the mode that produced the answer), ``escalated`` (auto), ``direct_confidence``,
    ``confidence``, ``tokens`` (the option tokens read), ``deadline_passed`` (True when the
    deadline cut its reasoning: the answer is the direct readout) and, with
    ``DecideOptions.details`` in reason mode, ``rationales``, ``readouts`` (M x K) and
    ``forced``."""

    answers: dict[str, dict]
    usage: dict[str, int]
    details: dict[str, dict] = field(default_factory=dict)


@dataclass
class _Item:
    """One planned question of one request."""

    name: str
    question: Question
    opts: OptionTokens
    direct_ids: list[int]
    reason_prompt: str
    reason_len: int
    p: np.ndarray | None = None
    detail: dict = field(default_factory=dict)
    reasoned: bool = False  # its rationales were read (not cut by the deadline)


@dataclass
class _Job:
    items: list[_Item]
    options: DecideOptions
    max_new_tokens: int
    usage: dict[str, int] = field(default_factory=lambda: {"input_tokens": 0, "output_tokens": 0})
    gone: Callable[[], bool] = lambda: False  # its caller stopped waiting: skip what is left

    def expired(self) -> bool:
        """Whether the request's deadline has passed (no more sampling for it)."""
        deadline = self.options.deadline
        return deadline is not None and time.monotonic() >= deadline


# --------------------------------------------------------------------------- the engine
def _union(rows: Sequence[Sequence[int]]) -> tuple[list[list[int]], Tensor]:
    """Per row the union of its option ids (first-seen order), padded with -1 ``(R, K)``."""
    unions = [list(dict.fromkeys(ids)) for ids in rows]
    k = max(len(u) for u in unions)
    return unions, torch.tensor([u + [-1] * (k - len(u)) for u in unions], dtype=torch.long)


class DecisionModel:
    """A checkpoint answering typed questions (see the module docstring), read through its
    :class:`rlcd_lab.reader.Reader` (``self.reader``).

    ``prompt_format``: ``auto`` picks ``chat`` when the tokenizer has a chat template,
    ``task`` when ``meta`` lists the checkpoint's ``options``, else ``plain``
    (``reader.detect_prompt_format``).
    ``T`` overrides the fitted calibration temperature of ``meta`` (``rlcd.json`` ``"T"``).
    ``max_state_tokens``
    bounds the rendered state; ``batch_rows`` the rows of one forward pass (a rationale
    counts once per sample); ``prefix_cache=False`` runs every prompt in full instead of
    reusing the state's prefix (same answers, for models whose cache cannot be reordered).
    ``T_fitted``: whether T is a fitted calibration temperature (None: an explicit ``T``
    counts as fitted, else :func:`temperature_fitted` of ``meta``; :meth:`from_checkpoint`
    reads the checkpoint's own ``rlcd.json``). The old keywords ``temperature`` and
    ``temperature_fitted`` still work, with a ``DeprecationWarning``.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        meta: Mapping[str, Any] | None = None,
        *,
        prompt_format: PromptFormat = "auto",
        T: float | None = None,
        max_state_tokens: int = 4096,
        batch_rows: int = 64,
        prefix_cache: bool = True,
        T_fitted: bool | None = None,
        **old: Any,
    ):
        unknown = set(old) - set(_OLD_KEYWORDS)
        if unknown:
            raise TypeError(f"DecisionModel got unexpected keyword(s) {sorted(unknown)}")
        given = {k: v for k, v in (("T", T), ("T_fitted", T_fitted)) if v is not None}
        kw = _renamed_keywords({**given, **old})
        T, T_fitted = kw.get("T"), kw.get("T_fitted")
        self.reader = Reader(
            model.eval(), tokenizer, meta, prompt_format=prompt_format, T=T, T_fitted=T_fitted
        )
        r = self.reader  # what the engine reads with, decided once (see Reader)
        self.model, self.tokenizer, self.meta = r.model, r.tokenizer, r.meta
        self.marker, self.sep, self.task_options = r.marker, r.sep, r.task_options
        self.T, self.T_fitted = r.T, r.T_fitted
        self.prompt_format, self.n_ctx = r.prompt_format, r.n_ctx
        self.default_new_tokens, self.pad_id = r.default_new_tokens, r.pad_id
        self.max_state_tokens, self.batch_rows = max_state_tokens, batch_rows
        self.prefix_cache = prefix_cache
        self._option_cache: dict[tuple[str, ...], OptionTokens | str] = {}
        self._encoded: dict[str, list[int]] = {}

    @classmethod
    def from_checkpoint(
        cls,
        path: str | Path,
        device: str | torch.device = "cpu",
        verify: bool = True,
        **kwargs: Any,
    ) -> DecisionModel:
        """Load a checkpoint directory (``models.load_checkpoint``; ``verify=False`` skips
        its checksums) as a decision model; whether its T was fitted comes from its own
        ``rlcd.json`` (none: not fitted)."""
        model, tokenizer, meta = load_checkpoint(path, device=device, verify=verify)
        kwargs = _renamed_keywords(kwargs)
        if "T_fitted" not in kwargs and kwargs.get("T") is None:
            kwargs["T_fitted"] = temperature_fitted(raw_meta(path))[0]
        return cls(model, tokenizer, meta, **kwargs)

    @property
    def temperature(self) -> float:
        """Deprecated name of :attr:`T` (the fitted calibration temperature)."""
        warnings.warn("DecisionModel.temperature is deprecated: use .T", DeprecationWarning, 2)
        return self.T

    @property
    def temperature_fitted(self) -> bool:
        """Deprecated name of :attr:`T_fitted`."""
        warnings.warn(
            "DecisionModel.temperature_fitted is deprecated: use .T_fitted", DeprecationWarning, 2
        )
        return self.T_fitted

    # ------------------------------------------------------------------ option tokens
    def _options(self, labels: tuple[str, ...]) -> OptionTokens | str:
        """Option tokens for ``labels`` or the error message (cached per label tuple)."""
        if labels not in self._option_cache:
            if len(self._option_cache) >= 1024:  # labels come from requests: stay bounded
                self._option_cache.clear()
            try:
                found: OptionTokens | str = self.reader.options(labels)
            except ValueError as err:
                found = str(err)
            self._option_cache[labels] = found
        return self._option_cache[labels]

    def _first_valid(self, candidates: Sequence[tuple[str, ...]]) -> OptionTokens:
        errors = []
        for labels in candidates:
            found = self._options(labels)
            if isinstance(found, OptionTokens):
                return found
            errors.append(found)
        raise DecisionError("cannot represent the options: " + "; ".join(errors))

    def option_tokens(self, q: Question) -> OptionTokens:
        """The option tokens read for ``q``, one per label in order (see the module
        docstring for the mapping). Raises :class:`DecisionError` when ``q`` cannot be
        represented with this checkpoint's tokens."""
        k = len(q.labels)
        if self.prompt_format == "task":
            own = self.task_options
            if q.kind == "noul":
                yes = [o for o in own if o.lower() in YES_LIKE]
                no = [o for o in own if o.lower() in NO_LIKE]
                if not (yes and no):
                    raise DecisionError(
                        f"this checkpoint answers with {list(own)}, which has no yes/no pair; "
                        "a noul question cannot be represented"
                    )
                return self._first_valid([(yes[0], no[0])])
            if k > len(own):
                raise DecisionError(
                    f"{k} options, but this checkpoint (task {self.meta.get('task')!r}) "
                    f"only answers with {len(own)} option tokens {list(own)}",
                    ("criteria",),
                )
            by_name = set(q.labels) <= set(own)
            return self._first_valid([q.labels if by_name else own[:k]])
        if q.kind == "noul":
            return self._first_valid([("yes", "no"), ("Y", "N"), ("A", "B")])
        if q.kind == "score":
            return self._first_valid([q.labels])
        if k <= len(CODES):
            return self._first_valid([tuple(CODES[:k]), q.labels])
        return self._first_valid([q.labels])

    # ------------------------------------------------------------------ prompts
    def question_text(self, state_text: str, q: Question, codes: Sequence[str]) -> str:
        """The user text of a chat/plain prompt: the state first (so every question about
        it shares the prefix), then the instructions and one line per option."""
        instructions = DEFAULT_INSTRUCTIONS[q.kind] if q.instructions is None else q.instructions
        lines = [state_text, f"Question: {render(instructions)}", "Options:"]
        for code, label, desc in zip(codes, q.labels, q.descriptions, strict=True):
            if q.kind == "score":
                lines.append(f"{code}) {render(desc)}")
                continue
            head = code if code == label else f"{code}) {label}"
            lines.append(head if desc is None else f"{head}: {render(desc)}")
        if self.prompt_format == "plain":  # build_prompt adds no instruction without a template
            lines.append("Reply with the code of one option.")
        return "\n".join(lines)

    def _encode(self, text: str) -> list[int]:
        if text not in self._encoded:  # the prompts of one request repeat (task format)
            self._encoded[text] = self.reader.encode(text)
        return list(self._encoded[text])

    def _unknown_chars(self, text: str) -> list[str]:
        """The pieces of ``text`` the tokenizer maps to its unknown token (none: ``[]``)."""
        unk = self.tokenizer.unk_token_id
        if unk is None:
            return []
        try:
            enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        except NotImplementedError:  # slow tokenizers: no offsets
            ids = self._encode(text)
            return [ch for ch in dict.fromkeys(text) if unk in self._encode(ch)] * (unk in ids)
        spans = zip(enc["input_ids"], enc["offset_mapping"], strict=True)
        return list(dict.fromkeys(text[a:b] for i, (a, b) in spans if i == unk))

    def _plan(self, state: Any, questions: Mapping[str, Any], options: DecideOptions) -> _Job:
        options.validate()
        self._encoded.clear()  # memo of this request's encodings only
        if not isinstance(questions, Mapping) or not questions:
            raise DecisionError("at least one question is required", ("questions",))
        state_str = state_text(state)
        state_ids = self._encode(state_str)
        if len(state_ids) > self.max_state_tokens:
            raise DecisionError(
                f"the state has {len(state_ids)} tokens; at most {self.max_state_tokens}",
                ("state",),
            )
        bad = self._unknown_chars(state_str)
        if bad:
            raise DecisionError(
                f"the state contains characters this model cannot read: {bad[:10]}", ("state",)
            )
        new_tokens = options.max_new_tokens or self.default_new_tokens
        items = []
        for name, raw in questions.items():
            loc = ("questions", name)
            try:
                q = raw if isinstance(raw, Question) else question_from_wire(raw)
                opts = self.option_tokens(q)
            except DecisionError as err:
                raise DecisionError(f"question {name!r}: {err.msg}", loc + err.loc) from None
            if self.prompt_format == "task":
                text = state_str
            else:
                try:
                    text = self.question_text(state_str, q, opts.labels)
                except (TypeError, ValueError, RecursionError):
                    raise DecisionError(f"question {name!r} cannot be rendered", loc) from None
                bad = self._unknown_chars(text[len(state_str) :])
                if bad:
                    raise DecisionError(
                        f"question {name!r} contains characters this model cannot read: {bad[:10]}",
                        loc,
                    )
            # the question text lists the options already (chat, plain)
            direct = self.reader.prompt(text, direct=True)
            reason = self.reader.prompt(text)
            direct_ids = self._encode(direct) + list(opts.bridge)
            reason_len = len(self._encode(reason))
            direct_mode = options.mode == "direct"
            try:  # the Reader's context rule (the Ask tab's too)
                self.reader.check_fits(
                    len(direct_ids) - len(opts.bridge) if direct_mode else reason_len,
                    len(opts.bridge),
                    mode="direct" if direct_mode else "reason",
                    max_new_tokens=new_tokens,
                )
            except ContextTooLong as err:
                raise DecisionError(
                    f"question {name!r} needs {err.needed} positions (prompt"
                    + ("" if options.mode == "direct" else f" + {new_tokens} rationale tokens")
                    + f"), but the model reads at most {err.n_ctx}; shorten the state",
                    ("state",),
                ) from None
            items.append(_Item(name, q, opts, direct_ids, reason, reason_len))
        return _Job(items, options, new_tokens)

    # ------------------------------------------------------------------ answering
    def decide(self, state: Any, questions: Mapping[str, Any], **options: Any) -> Decision:
        """Answer ``questions`` (name -> wire question or :class:`Question`) about ``state``;
        ``options`` are :class:`DecideOptions` fields. Raises :class:`DecisionError`."""
        out = self.decide_batch([(state, questions, DecideOptions(**options))])[0]
        if isinstance(out, DecisionError):
            raise out
        return out

    @torch.no_grad()
    def decide_batch(
        self,
        requests: Sequence[tuple[Any, Mapping[str, Any], DecideOptions]],
        cancelled: Callable[[int], bool] | None = None,
    ) -> list[Decision | DecisionError]:
        """Answer several requests ``(state, questions, options)`` in shared forward passes.

        A request that cannot be answered yields its :class:`DecisionError` in place; the
        others are unaffected. All direct readouts (direct and auto questions) of the batch
        share forward passes; all rationales with the same sampling settings share one
        ``sample_rationales`` call (seeded with the requests' seed). Direct answers do not
        depend on the batch; sampled ones do (the draw depends on the batch composition).
        ``cancelled(i)`` (checked before planning, before the reason phase, before each
        rationale chunk and before every decoding step of a chunk) says that request ``i``
        is no longer wanted: what is left of its work is skipped (a chunk stops once every
        request in it is cancelled or past its deadline) and it yields a
        :class:`DecisionError`. A request past its ``DecideOptions.deadline`` gets no more
        rationales: a question whose reasoning was cut is answered by its direct readout.
        """
        gone = cancelled or (lambda i: False)
        jobs: list[_Job | DecisionError] = []
        for i, (state, questions, options) in enumerate(requests):
            try:
                if gone(i):
                    raise DecisionError("cancelled: the caller went away")
                jobs.append(self._plan(state, questions, options))
                jobs[-1].gone = lambda i=i: gone(i)
            except DecisionError as err:
                jobs.append(err)
        live = [j for j in jobs if isinstance(j, _Job)]
        self._direct_phase([j for j in live if j.options.mode != "reason"])
        live = [j for j in live if not j.gone()]
        for job in live:
            for it in job.items:
                if job.options.mode == "direct":
                    it.detail["mode"] = "direct"
                elif job.options.mode == "auto":
                    rule = job.options.rule
                    conf = rule.confidence(it.p, it.question.kind)
                    it.detail.update(direct_confidence=conf, escalated=not rule.automates(conf))
                    it.detail["mode"] = "reason" if it.detail["escalated"] else "direct"
                else:
                    it.detail["mode"] = "reason"
        self._reason_phase(live)
        self._cut_by_deadline([j for j in live if not j.gone()])
        out: list[Decision | DecisionError] = []
        for job in jobs:
            if isinstance(job, DecisionError):
                out.append(job)
                continue
            if job.gone():
                out.append(DecisionError("cancelled: the caller went away"))
                continue
            answers, details = {}, {}
            for it in job.items:
                answers[it.name] = it.question.answer(it.p)
                it.detail.update(
                    confidence=decision_confidence(it.question.kind, it.p),
                    tokens=list(it.opts.labels),
                )
                details[it.name] = it.detail
            out.append(Decision(answers, dict(job.usage), details))
        return out

    def _calibrated(self, logits: Tensor) -> np.ndarray:
        """``softmax(z / T)`` in float64 (``Reader.calibrate``)."""
        return self.reader.calibrate(logits)

    def _direct_phase(self, jobs: Sequence[_Job]) -> None:
        """Direct readouts of every item of ``jobs``, one group of rows per request."""
        groups: list[tuple[list[list[int]], list[list[int]], list[list[_Item]]]] = []
        for job in jobs:
            rows: dict[tuple[int, ...], list[_Item]] = {}
            for it in job.items:  # identical prompts (task format) share one row
                rows.setdefault(tuple(it.direct_ids), []).append(it)
            seqs = [list(s) for s in rows]
            lcp = common_prefix_len(seqs)
            job.usage["input_tokens"] += lcp + sum(len(s) - lcp for s in seqs)
            ids = [[i for it in its for i in it.opts.ids] for its in rows.values()]
            groups.append((seqs, ids, list(rows.values())))
        chunk: list = []
        for group in groups:
            chunk.append(group)
            if sum(len(g[0]) for g in chunk) >= self.batch_rows:
                self._direct_chunk(chunk)
                chunk = []
        if chunk:
            self._direct_chunk(chunk)

    def _direct_chunk(self, chunk: Sequence[tuple]) -> None:
        unions, option_ids = _union([ids for _, rows, _ in chunk for ids in rows])
        # the state's prefix once per request; one prompt per state (task format): one pass
        _, logits = self.reader.direct(
            [seqs for seqs, _, _ in chunk], option_ids, share_prefix=self.prefix_cache
        )
        row_items = [its for _, _, items in chunk for its in items]
        for r, (union, its) in enumerate(zip(unions, row_items, strict=True)):
            for it in its:
                cols = [union.index(i) for i in it.opts.ids]
                it.p = self._calibrated(logits[r, cols][None])[0]

    def _reason_phase(self, jobs: Sequence[_Job]) -> None:
        """Rationales for every item whose mode is ``reason``, batched by sampling settings;
        one set of M rationales per distinct prompt of a request."""
        batches: dict[tuple, list[tuple[_Job, str, list[_Item]]]] = {}
        for job in jobs:
            prompts: dict[tuple[str, tuple[int, ...]], list[_Item]] = {}
            for it in job.items:
                if it.detail["mode"] == "reason":
                    prompts.setdefault((it.reason_prompt, it.opts.bridge), []).append(it)
            o = job.options
            for (prompt, bridge), its in prompts.items():
                key = (o.m, job.max_new_tokens, o.sample_temperature, o.seed, bridge)
                batches.setdefault(key, []).append((job, prompt, its))
        for (m, new_tokens, temp, seed, bridge), entries in batches.items():
            per_call = max(1, self.batch_rows // m)
            for start in range(0, len(entries), per_call):
                part = entries[start : start + per_call]
                part = [e for e in part if not (e[0].gone() or e[0].expired())]
                if not part:
                    continue
                unwanted = partial(_unwanted, [e[0] for e in part])
                try:  # Reader.sample's call, spelled out: decide.sample_rationales is a hook
                    rats = sample_rationales(
                        self.model,
                        self.tokenizer,
                        [prompt for _, prompt, _ in part],
                        m,
                        new_tokens,
                        bridge=bridge,
                        marker=self.reader.marker,
                        sampling_temperature=temp,
                        seed=seed + start,
                        sampler=self.reader.sampler,
                        should_stop=unwanted,
                    )
                except SamplingStopped:  # every request of the chunk is gone or out of time
                    continue
                unions, option_ids = _union(
                    [[i for it in its for i in it.opts.ids] for _, _, its in part]
                )
                _, logits, _ = self.reader.score(rats, option_ids)
                lengths = rats.lengths.cpu().tolist()
                forced = rats.forced.cpu().tolist()
                for j, ((job, _, its), union) in enumerate(zip(part, unions, strict=True)):
                    rows = slice(j * m, (j + 1) * m)
                    job.usage["input_tokens"] += its[0].reason_len
                    job.usage["output_tokens"] += int(sum(lengths[rows]))
                    for it in its:
                        cols = [union.index(i) for i in it.opts.ids]
                        u = self._calibrated(logits[rows][:, cols])
                        it.p = job.options.rule.probs(u)
                        it.reasoned = True
                        if job.options.details:
                            it.detail.update(
                                rationales=rats.texts[rows],
                                readouts=u.tolist(),
                                forced=forced[rows],
                                lengths=lengths[rows],
                            )

    def _cut_by_deadline(self, jobs: Sequence[_Job]) -> None:
        """Questions that were to reason but got no rationales (their request's deadline
        passed): answered by their direct readout, run now where ``auto`` has not already
        read it; details ``mode: direct`` and ``deadline_passed: True``."""
        todo = []
        for job in jobs:
            cut = [it for it in job.items if it.detail["mode"] == "reason" and not it.reasoned]
            for it in cut:
                it.detail.update(mode="direct", deadline_passed=True)
            missing = [it for it in cut if it.p is None]
            if missing:  # reason mode: no direct readout yet (the usage is the request's)
                todo.append(_Job(missing, job.options, job.max_new_tokens, usage=job.usage))
        if todo:
            self._direct_phase(todo)


def _unwanted(jobs: Sequence[_Job]) -> bool:
    """Whether every one of ``jobs`` is cancelled or past its deadline (stop sampling)."""
    return all(job.gone() or job.expired() for job in jobs)


def with_options(options: DecideOptions, overrides: Mapping[str, Any]) -> DecideOptions:
    """``options`` with the non-None ``overrides`` applied (request-level settings)."""
    return replace(options, **{k: v for k, v in overrides.items() if v is not None})
