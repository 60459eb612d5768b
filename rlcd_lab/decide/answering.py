"""Answering planned requests through a checkpoint's Reader, in shared passes.

:class:`rlcd_lab.decide.DecisionModel` plans the requests
(:func:`rlcd_lab.decide.questions.plan_questions`) and hands them here as :class:`Job`
objects; start at :func:`answer_jobs`. Every readout is calibrated with
``Reader.calibrate``: ``p = softmax(z / T)``. :class:`DecideOptions` says how a request is
answered and :class:`Decision` holds its answers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from rlcd_lab.decide.deadlines import PassCosts, pass_costs, read_tokens, score_tokens
from rlcd_lab.decide.jev import DecisionError, decision_confidence
from rlcd_lab.decide.questions import PlannedQuestion
from rlcd_lab.math.routing import DEFAULT_CHANCE_CORRECTED_THRESHOLD, Aggregate, DecisionRule
from rlcd_lab.reader import Reader
from rlcd_lab.reader.rationales import Rationales
from rlcd_lab.reader.sampling import SamplingStopped, common_prefix_len

__all__ = [
    "DecideOptions",
    "Decision",
    "Item",
    "Job",
    "Mode",
    "answer_jobs",
    "with_options",
]

Mode = Literal["direct", "reason", "auto"]

clock: Callable[[], float] = time.monotonic
"""The clock deadlines are instants of (``DecideOptions.deadline``, the server's arrival
times) and the readout costs are measured on; a test may replace it with a fake one."""


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
    sampling_temperature: float = 1.0
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
                "sampling_temperature",
                math.isfinite(self.sampling_temperature)
                and 0.05 <= self.sampling_temperature <= 10,
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
        """The decision rule these options apply (:class:`rlcd_lab.math.routing.DecisionRule`):
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


# --------------------------------------------------------------------------- a request
@dataclass
class Item:
    """One planned question of one request (:class:`rlcd_lab.decide.questions.PlannedQuestion`)
    and its answer so far: ``p``, ``detail`` (:attr:`Decision.details`)."""

    plan: PlannedQuestion
    p: np.ndarray | None = None
    detail: dict = field(default_factory=dict)
    reasoned: bool = False  # its rationales were read (not cut by the deadline)


@dataclass
class Job:
    """One request being answered: its items, options, rationale length and usage;
    ``gone`` says its caller stopped waiting."""

    items: list[Item]
    options: DecideOptions
    max_new_tokens: int
    usage: dict[str, int] = field(default_factory=lambda: {"input_tokens": 0, "output_tokens": 0})
    gone: Callable[[], bool] = lambda: False  # its caller stopped waiting: skip what is left

    def expired(self) -> bool:
        """Whether the request's deadline has passed (no more sampling for it)."""
        deadline = self.options.deadline
        return deadline is not None and clock() >= deadline

    def route(self) -> None:
        """Each item's mode (``detail["mode"]``): the request's, or in ``auto`` mode (the
        cascade) ``reason`` exactly when the rule does not automate its direct readout."""
        for it in self.items:
            if self.options.mode == "auto":
                rule = self.options.rule
                conf = rule.confidence(it.p, it.plan.question.kind)
                it.detail.update(direct_confidence=conf, escalated=not rule.automates(conf))
                it.detail["mode"] = "reason" if it.detail["escalated"] else "direct"
            else:
                it.detail["mode"] = self.options.mode

    def result(self) -> Decision | DecisionError:
        """The request's answers (a :class:`DecisionError` when its caller went away)."""
        if self.gone():
            return DecisionError("cancelled: the caller went away")
        answers, details = {}, {}
        for it in self.items:
            q = it.plan.question
            answers[it.plan.name] = q.answer(it.p)
            it.detail.update(
                confidence=decision_confidence(q.kind, it.p), tokens=list(it.plan.opts.labels)
            )
            details[it.plan.name] = it.detail
        return Decision(answers, dict(self.usage), details)


# --------------------------------------------------------------------------- pass costs
@contextmanager
def _timed(costs: PassCosts, kind: str, tokens: int) -> Iterator[None]:
    """Measure the pass run inside (on :data:`clock`) as one of ``kind`` over ``tokens``."""
    t0 = clock()
    yield
    costs.add(kind, tokens, clock() - t0)


def _fallback_tokens(job: Job) -> int:
    """Tokens of the direct readouts the job's reasoning questions would need if the
    deadline cut them (0 when they have theirs already: ``auto`` mode)."""
    rows = {tuple(it.plan.direct_ids) for it in job.items if it.p is None}
    return read_tokens(sorted(rows)) if rows else 0


class _Budget:
    """When one chunk's reasoning must stop so that its requests' deadlines hold: the
    scoring pass over the rationales so far (``m`` rows per prompt, the tokens sampled so
    far and a few more after the prompt; they can only grow) and each request's
    fallback direct readouts (``fallback``) must still fit, as :class:`PassCosts`
    estimates. :meth:`should_stop` is the sampler's check before every forward pass; it
    also measures the prompt pass and the decoding steps. Scoring is checked once more
    when sampling is over, with the rationales' real width (:func:`_in_time`)."""

    EXTRA = 8  # tokens after a rationale: the marker's completion and the bridge

    def __init__(self, costs: PassCosts, part: Sequence[tuple], m: int) -> None:
        self.costs = costs
        self.prompts, self.m = len(part), m
        self.width = max(its[0].plan.reason_len for _, _, its in part)
        self.fallback = {
            id(job): costs.estimate("direct", _fallback_tokens(job)) for job, _, _ in part
        }
        self.steps = 0  # forward passes of the sampler measured so far
        self.step: float | None = None  # the last one's seconds
        self._last: float | None = None

    def late(self, job: Job, now: float, ahead: float) -> bool:
        """Whether ``job``'s deadline leaves no time for ``ahead`` seconds of sampling,
        the scoring pass (rationales of ``steps + 1`` tokens) and its fallback readouts."""
        deadline = job.options.deadline
        if deadline is None:
            return False
        rest = self.steps + 1 + self.EXTRA
        tokens = score_tokens(self.prompts, self.m, self.width, rest)
        score = self.costs.estimate("score", tokens)
        return now + ahead + score + self.fallback.get(id(job), 0.0) >= deadline

    def startable(self, job: Job) -> bool:
        """Whether the chunk may start for ``job``: time for its prompt pass and more."""
        ahead = self.costs.estimate("prompt", self.prompts * self.width)
        return not (job.gone() or self.late(job, clock(), ahead))

    def should_stop(self, jobs: Sequence[Job]) -> bool:
        """Stop sampling: every one of ``jobs`` is gone or out of time for one more step."""
        now = clock()
        if self._last is not None:
            if self.step is None:  # the interval holding the prompt pass
                self.costs.add("prompt", self.prompts * self.width, now - self._last)
            self.step, self.steps = now - self._last, self.steps + 1
        self._last = now
        ahead = (
            self.costs.estimate("prompt", self.prompts * self.width)
            if self.step is None
            else self.step
        )
        return all(job.gone() or self.late(job, now, ahead) for job in jobs)


# --------------------------------------------------------------------------- the phases
@torch.no_grad()
def answer_jobs(
    reader: Reader, jobs: Sequence[Job], *, batch_rows: int = 64, share_prefix: bool = True
) -> None:
    """Answer ``jobs`` in place (each item's ``p`` and ``detail``, each job's ``usage``): the
    direct readouts of every direct and ``auto`` request, the cascade (:meth:`Job.route`),
    the rationales of every question that reasons, then the direct readout of each one
    the deadline cut (details ``mode: direct``, ``deadline_passed: True``). A job whose
    ``gone()`` turns True is skipped from then on. ``batch_rows`` bounds the rows of one
    pass (a rationale counts once per sample); ``share_prefix=False`` reads every prompt
    in full (same answers).

    :func:`answer_jobs` reads every direct and ``auto`` question of a batch in shared
    forward passes (``Reader.direct``, a state's prefix once per request), applies the ``auto``
    cascade (:meth:`Job.route`: reason exactly when ``DecideOptions.rule`` does not automate
    the direct readout), samples and scores the rationales of the questions that reason
    (``Reader.sample``, ``Reader.score``; one call per sampling setting and chunk of
    ``batch_rows`` rows), and answers a question whose reasoning a deadline cut with its
    direct readout. A deadline covers the readouts too: sampling stops, and a chunk is
    neither started nor scored, unless its scoring pass and the direct readouts of the
    questions that would fall back still fit before the deadline, as budgeted from the
    measured cost of the reader's passes (:class:`PassCosts`).
    """
    _direct_phase(reader, [j for j in jobs if j.options.mode != "reason"], batch_rows, share_prefix)
    live = [j for j in jobs if not j.gone()]
    for job in live:
        job.route()
    _reason_phase(reader, live, batch_rows)
    cut = _cut_by_deadline([j for j in live if not j.gone()])
    if cut:
        _direct_phase(reader, cut, batch_rows, share_prefix)


def _union(rows: Sequence[Sequence[int]]) -> tuple[list[list[int]], Tensor]:
    """Per row the union of its option ids (first-seen order), padded with -1 ``(R, K)``."""
    unions = [list(dict.fromkeys(ids)) for ids in rows]
    k = max(len(u) for u in unions)
    return unions, torch.tensor([u + [-1] * (k - len(u)) for u in unions], dtype=torch.long)


def _direct_phase(reader: Reader, jobs: Sequence[Job], batch_rows: int, share_prefix: bool) -> None:
    """Direct readouts of every item of ``jobs``, one group of rows per request."""
    groups: list[tuple[list[list[int]], list[list[int]], list[list[Item]]]] = []
    for job in jobs:
        rows: dict[tuple[int, ...], list[Item]] = {}
        for it in job.items:  # identical prompts (task format) share one row
            rows.setdefault(tuple(it.plan.direct_ids), []).append(it)
        seqs = [list(s) for s in rows]
        lcp = common_prefix_len(seqs)
        job.usage["input_tokens"] += lcp + sum(len(s) - lcp for s in seqs)
        ids = [[i for it in its for i in it.plan.opts.ids] for its in rows.values()]
        groups.append((seqs, ids, list(rows.values())))
    chunk: list = []
    for group in groups:
        chunk.append(group)
        if sum(len(g[0]) for g in chunk) >= batch_rows:
            _direct_chunk(reader, chunk, share_prefix)
            chunk = []
    if chunk:
        _direct_chunk(reader, chunk, share_prefix)


def _direct_chunk(reader: Reader, chunk: Sequence[tuple], share_prefix: bool) -> None:
    unions, option_ids = _union([ids for _, rows, _ in chunk for ids in rows])
    # the state's prefix once per request; one prompt per state (task format): one pass
    tokens = sum(read_tokens(seqs, share_prefix) for seqs, _, _ in chunk)
    with _timed(pass_costs(reader), "direct", tokens):
        _, logits = reader.direct(
            [seqs for seqs, _, _ in chunk], option_ids, share_prefix=share_prefix
        )
    row_items = [its for _, _, items in chunk for its in items]
    for r, (union, its) in enumerate(zip(unions, row_items, strict=True)):
        for it in its:
            cols = [union.index(i) for i in it.plan.opts.ids]
            it.p = reader.calibrate(logits[r, cols][None])[0]


def _reason_phase(reader: Reader, jobs: Sequence[Job], batch_rows: int) -> None:
    """Rationales for every item whose mode is ``reason``, batched by sampling settings
    (:func:`_reason_batches`), at most ``batch_rows`` rationales a call; a chunk starts
    only for the requests whose deadlines leave time for its prompt pass, a scoring pass
    and their fallback readouts (:class:`_Budget`)."""
    costs = pass_costs(reader)
    for (m, new_tokens, temp, seed, bridge), entries in _reason_batches(jobs).items():
        per_call = max(1, batch_rows // m)
        for start in range(0, len(entries), per_call):
            part = entries[start : start + per_call]
            part = [e for e in part if _Budget(costs, part, m).startable(e[0])]
            if part:
                budget = _Budget(costs, part, m)
                _reason_chunk(reader, part, m, new_tokens, temp, seed + start, bridge, budget)


def _reason_batches(jobs: Sequence[Job]) -> dict[tuple, list[tuple[Job, str, list[Item]]]]:
    """The items whose mode is ``reason``, one entry ``(job, prompt, items)`` per distinct
    prompt of a request, keyed by sampling settings ``(m, max_new_tokens, sampling
    temperature, seed, bridge)``."""
    batches: dict[tuple, list[tuple[Job, str, list[Item]]]] = {}
    for job in jobs:
        prompts: dict[tuple[str, tuple[int, ...]], list[Item]] = {}
        for it in job.items:
            if it.detail["mode"] == "reason":
                prompts.setdefault((it.plan.reason_prompt, it.plan.opts.bridge), []).append(it)
        o = job.options
        for (prompt, bridge), its in prompts.items():
            key = (o.m, job.max_new_tokens, o.sampling_temperature, o.seed, bridge)
            batches.setdefault(key, []).append((job, prompt, its))
    return batches


def _reason_chunk(
    reader: Reader,
    part: Sequence[tuple[Job, str, list[Item]]],
    m: int,
    new_tokens: int,
    temp: float,
    seed: int,
    bridge: tuple[int, ...],
    budget: _Budget,
) -> None:
    """``m`` rationales per prompt of ``part`` (``Reader.sample``, stopped once every
    request of it is gone or out of time, :meth:`_Budget.should_stop`), read out
    (``Reader.score``) for the requests whose deadlines leave time for it, and
    calibrated."""
    jobs = [e[0] for e in part]
    try:
        rats = reader.sample(
            [prompt for _, prompt, _ in part], m, new_tokens, bridge=bridge,
            sampling_temperature=temp, seed=seed,
            should_stop=lambda: budget.should_stop(jobs),
        )  # fmt: skip
    except SamplingStopped:  # every request of the chunk is gone or out of time
        return
    prompt_width = int(rats.prompt_len.max())
    rest = rats.input_ids.shape[1] - prompt_width
    keep = _in_time(budget, part, prompt_width, rest)
    if not keep:
        return
    if len(keep) < len(part):
        part, rats = [part[j] for j in keep], _rows_of(rats, keep)
    unions, option_ids = _union([[i for it in its for i in it.plan.opts.ids] for _, _, its in part])
    with _timed(budget.costs, "score", score_tokens(len(part), m, prompt_width, rest)):
        _, logits, _ = reader.score(rats, option_ids)
    lengths = rats.lengths.cpu().tolist()
    forced = rats.forced.cpu().tolist()
    for j, ((job, _, its), union) in enumerate(zip(part, unions, strict=True)):
        rows = slice(j * m, (j + 1) * m)
        job.usage["input_tokens"] += its[0].plan.reason_len
        job.usage["output_tokens"] += int(sum(lengths[rows]))
        for it in its:
            cols = [union.index(i) for i in it.plan.opts.ids]
            u = reader.calibrate(logits[rows][:, cols])
            it.p = job.options.rule.probs(u)
            it.reasoned = True
            if job.options.details:
                it.detail.update(
                    rationales=rats.texts[rows],
                    readouts=u.tolist(),
                    forced=forced[rows],
                    lengths=lengths[rows],
                )


def _cut_by_deadline(jobs: Sequence[Job]) -> list[Job]:
    """Mark the questions that were to reason but got no rationales (their request's
    deadline passed) as answered directly (``mode: direct``, ``deadline_passed: True``);
    the jobs of those still without a direct readout (reason mode; ``auto`` has read it
    already), sharing their request's usage."""
    todo = []
    for job in jobs:
        cut = [it for it in job.items if it.detail["mode"] == "reason" and not it.reasoned]
        for it in cut:
            it.detail.update(mode="direct", deadline_passed=True)
        missing = [it for it in cut if it.p is None]
        if missing:  # reason mode: no direct readout yet (the usage is the request's)
            todo.append(Job(missing, job.options, job.max_new_tokens, usage=job.usage))
    return todo


def _in_time(budget: _Budget, part: Sequence[tuple], prompt_width: int, rest: int) -> list[int]:
    """The entries of ``part`` to score: their requests are not gone and their deadlines
    leave time for the scoring pass over their rows (``prompt_width`` and ``rest`` tokens)
    and their fallback readouts; the others fall back to their direct readouts."""
    keep = [j for j, (job, _, _) in enumerate(part) if not job.gone()]
    while keep:
        tokens = score_tokens(len(keep), budget.m, prompt_width, rest)
        score = budget.costs.estimate("score", tokens)
        now = clock()
        late = [
            j
            for j in keep
            if part[j][0].options.deadline is not None
            and now + score + budget.fallback.get(id(part[j][0]), 0.0)
            >= part[j][0].options.deadline
        ]
        if not late:
            break
        keep = [j for j in keep if j not in late]
    return keep


def _rows_of(rats: Rationales, prompts: Sequence[int]) -> Rationales:
    """The rationales of ``prompts`` (indices of the sampled prompts) only."""
    rows = torch.tensor([j * rats.m + i for j in prompts for i in range(rats.m)])
    rows = rows.to(rats.input_ids.device)
    return replace(
        rats,
        input_ids=rats.input_ids[rows],
        attention_mask=rats.attention_mask[rows],
        rationale_mask=rats.rationale_mask[rows],
        eos_col=rats.eos_col[rows],
        texts=[rats.texts[i] for i in rows.tolist()],
        forced=rats.forced[rows],
        lengths=rats.lengths[rows],
        logp_r=rats.logp_r[rows],
        prompt_len=rats.prompt_len[rows],
        prompt_cache=None,
    )


def with_options(options: DecideOptions, overrides: Mapping[str, Any]) -> DecideOptions:
    """``options`` with the non-None ``overrides`` applied (request-level settings)."""
    return replace(options, **{k: v for k, v in overrides.items() if v is not None})
