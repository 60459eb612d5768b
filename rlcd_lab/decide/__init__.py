"""Typed decisions: Jev questions about a state -> prompts with options -> readout -> answers.

Start at :class:`DecisionModel` (``from_checkpoint``, ``decide_batch``): each question about
a state (the Jev wire form, docs/server.md) becomes a prompt that ends in the marker and K
option tokens, read through the checkpoint's :class:`rlcd_lab.reader.Reader` and
calibrated, ``p = softmax(z / T)``. :mod:`.jev` holds the wire contract and the typed
answers built from ``p``, :mod:`.questions` the prompts and option tokens,
:mod:`.answering` the shared passes (with :class:`~.answering.DecideOptions` and
:class:`~.answering.Decision`), :mod:`.deadlines` the time a pass takes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlcd_lab.decide.answering import DecideOptions, Decision, Item, Job, answer_jobs
from rlcd_lab.decide.jev import DecisionError, Question
from rlcd_lab.decide.questions import OptionCache, plan_questions, user_text
from rlcd_lab.reader import Reader
from rlcd_lab.reader.prompts import PromptFormat
from rlcd_lab.reader.readout import OptionTokens

__all__ = [
    "DecisionModel",
]

_OLD_KEYWORDS = {"temperature": "T", "temperature_fitted": "T_fitted"}
"""``DecisionModel`` keywords renamed (still accepted, with a ``DeprecationWarning``)."""
_ENGINE_KEYWORDS = ("max_state_tokens", "batch_rows", "prefix_cache")
"""``DecisionModel`` keywords of the engine itself (the others are the Reader's)."""


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


# --------------------------------------------------------------------------- the engine
class DecisionModel:
    """A checkpoint answering typed questions, read through its
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
    reads the checkpoint's own ``rlcd.json``; :meth:`from_reader` answers through a Reader
    built elsewhere). The old keywords ``temperature`` and ``temperature_fitted`` still
    work, with a ``DeprecationWarning``.

    For routing (``auto`` mode) a question's confidence is its answer's (a noul's is the
    chance-corrected value with K = 2, ``|2 p_yes - 1|``). The confidences, the mixture and
    the escalation rule are :mod:`rlcd_lab.math.routing`'s (``DecideOptions.rule``, a
    :class:`rlcd_lab.math.routing.DecisionRule` on the chance-corrected confidence; default
    threshold :data:`rlcd_lab.math.routing.DEFAULT_CHANCE_CORRECTED_THRESHOLD` = 0.8, i.e.
    max p 0.9 for a noul), the same rule the dashboard applies when asked for the
    chance-corrected confidence.

    Modes (``DecideOptions.mode``):

    * ``direct``: the prompt ends with a bare ``Answer:``; one forward pass per batch. All
      questions about one state share the state's token prefix: its keys and values are
      computed once and reused for every question (``Reader.direct``,
      ``reader.shared_prefix_readout``).
    * ``reason``: M rationales are sampled per prompt (``Reader.sample``, with the Reader's
      marker and sampler), each ends in the marker and is read out with the scoring pass
      (``Reader.score``, as training and evaluation read); the answer uses the mixture
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

    How questions map to prompts and option codes depends on the checkpoint's prompt format
    (``chat``, ``plain`` or ``task``; ``DecisionModel.prompt_format``, the Reader's): that is
    :mod:`rlcd_lab.decide.questions`'s (a task checkpoint's labels are matched to its
    options by meaning, never by position). A question that cannot be represented
    raises :class:`DecisionError` naming it; the state is only ever rendered into the prompt.
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
        reader = Reader(model, tokenizer, meta, prompt_format=prompt_format, T=T, T_fitted=T_fitted)
        self._read_with(reader, max_state_tokens, batch_rows, prefix_cache)

    def _read_with(
        self, reader: Reader, max_state_tokens: int, batch_rows: int, prefix_cache: bool
    ) -> None:
        """Answer through ``reader`` (its model in eval mode); its settings are copied as
        attributes, decided once (see Reader)."""
        self.reader = r = reader
        r.model.eval()
        self.model, self.tokenizer, self.meta = r.model, r.tokenizer, r.meta
        self.marker, self.sep, self.task_options = r.marker, r.sep, r.task_options
        self.T, self.T_fitted = r.T, r.T_fitted
        self.prompt_format, self.n_ctx = r.prompt_format, r.n_ctx
        self.default_new_tokens, self.pad_id = r.default_new_tokens, r.pad_id
        self.max_state_tokens, self.batch_rows = max_state_tokens, batch_rows
        self.prefix_cache = prefix_cache
        self._options = OptionCache(r)  # option tokens per label tuple (bounded)
        self._encoded: dict[str, list[int]] = {}

    @classmethod
    def from_reader(
        cls,
        reader: Reader,
        *,
        max_state_tokens: int = 4096,
        batch_rows: int = 64,
        prefix_cache: bool = True,
    ) -> DecisionModel:
        """A decision model reading through ``reader`` as it is (its prompt format, fitted
        calibration temperature and sampler); the other arguments as for the class."""
        self = cls.__new__(cls)
        self._read_with(reader, max_state_tokens, batch_rows, prefix_cache)
        return self

    @classmethod
    def from_checkpoint(
        cls,
        path: str | Path,
        device: str | torch.device = "cpu",
        verify: bool = True,
        **kwargs: Any,
    ) -> DecisionModel:
        """Load a checkpoint directory as a decision model through ``Reader.load``
        (``verify=False`` skips its checksums; whether its T was fitted comes from its own
        ``rlcd.json``, none: not fitted). ``kwargs`` are the class's keywords (and the
        Reader's ``sampler``)."""
        kwargs = _renamed_keywords(kwargs)
        engine = {k: kwargs.pop(k) for k in _ENGINE_KEYWORDS if k in kwargs}
        return cls.from_reader(Reader.load(path, device, verify, **kwargs), **engine)

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

    # ------------------------------------------------------------------ questions
    def option_tokens(self, q: Question) -> OptionTokens:
        """The option tokens read for ``q``, one per label in order (the mapping of
        :mod:`rlcd_lab.decide.questions`). Raises :class:`DecisionError` when ``q`` cannot be
        represented with this checkpoint's tokens."""
        return self._options.for_question(q)

    def question_text(self, state_text: str, q: Question, codes: Sequence[str]) -> str:
        """The user text of a chat/plain prompt: the state first (so every question about
        it shares the prefix), then the instructions and one line per option
        (:func:`rlcd_lab.decide.questions.user_text`)."""
        return user_text(state_text, q, codes, self.prompt_format)

    def _encode(self, text: str) -> list[int]:
        if text not in self._encoded:  # the prompts of one request repeat (task format)
            self._encoded[text] = self.reader.encode(text)
        return list(self._encoded[text])

    def _plan(self, state: Any, questions: Mapping[str, Any], options: DecideOptions) -> Job:
        options.validate()
        self._encoded.clear()  # memo of this request's encodings only
        new_tokens = options.max_new_tokens or self.default_new_tokens
        planned = plan_questions(
            self.reader, state, questions, mode=options.mode, new_tokens=new_tokens,
            max_state_tokens=self.max_state_tokens, option_tokens=self.option_tokens,
            encode=self._encode,
        )  # fmt: skip
        return Job([Item(p) for p in planned], options, new_tokens)

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
        ``Reader.sample`` call (seeded with the requests' seed). Direct answers do not
        depend on the batch; sampled ones do (the draw depends on the batch composition).
        ``cancelled(i)`` (checked before planning, before the reason phase, before each
        rationale chunk and before every decoding step of a chunk) says that request ``i``
        is no longer wanted: what is left of its work is skipped (a chunk stops once every
        request in it is cancelled or past its deadline) and it yields a
        :class:`DecisionError`. A request past its ``DecideOptions.deadline`` gets no more
        rationales: a question whose reasoning was cut is answered by its direct readout.
        """
        gone = cancelled or (lambda i: False)
        jobs = [self._job(i, request, gone) for i, request in enumerate(requests)]
        live = [j for j in jobs if isinstance(j, Job)]
        answer_jobs(self.reader, live, batch_rows=self.batch_rows, share_prefix=self.prefix_cache)
        return [job if isinstance(job, DecisionError) else job.result() for job in jobs]

    def _job(
        self,
        i: int,
        request: tuple[Any, Mapping[str, Any], DecideOptions],
        gone: Callable[[int], bool],
    ) -> Job | DecisionError:
        """Request ``i`` planned, or why it cannot be answered (or its caller went away)."""
        state, questions, options = request
        try:
            if gone(i):
                raise DecisionError("cancelled: the caller went away")
            job = self._plan(state, questions, options)
        except DecisionError as err:
            return err
        job.gone = lambda: gone(i)
        return job
