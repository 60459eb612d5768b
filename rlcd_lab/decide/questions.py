"""Typed questions as prompts and option codes: how the decision engine asks a checkpoint.

Start at :func:`plan_questions` (how each prompt format asks); :func:`match_labels` matches
a task checkpoint's options to a question's labels by meaning, :func:`option_candidates`
picks the option codes.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from transformers import PreTrainedTokenizerBase

from rlcd_lab.decide.jev import DecisionError, Question, question_from_wire, render, state_text
from rlcd_lab.reader import ContextTooLong, Reader
from rlcd_lab.reader.readout import OptionTokens

__all__ = [
    "CODES",
    "DEFAULT_INSTRUCTIONS",
    "NO_LIKE",
    "YES_LIKE",
    "OptionCache",
    "PlannedQuestion",
    "first_valid",
    "match_labels",
    "option_candidates",
    "option_words",
    "plan_questions",
    "unknown_chars",
    "user_text",
]

CODES = string.ascii_uppercase + string.ascii_lowercase + string.digits
"""Option codes of a choice in a chat/plain prompt, in order (62 single characters)."""
YES_LIKE = ("y", "yes", "true", "t", "1", "right", "correct")
"""Words (compared case-folded) that mean a task checkpoint's yes option."""
NO_LIKE = ("n", "no", "false", "f", "0", "wrong", "incorrect")
"""Words (compared case-folded) that mean a task checkpoint's no option."""
DEFAULT_INSTRUCTIONS = {
    "noul": "Is this true?",
    "choice": "Which option applies?",
    "score": "Which level applies?",
}
OPTION_CACHE_SIZE = 1024
"""Label tuples whose option tokens :class:`OptionCache` keeps (labels come from requests)."""


# --------------------------------------------------------------------------- option codes
def option_candidates(
    q: Question,
    prompt_format: str,
    task_options: Sequence[str] = (),
    task: Any = None,
) -> list[tuple[str, ...]]:
    """The label tuples tried, in order, as ``q``'s option tokens (one label per answer, see
    :func:`plan_questions`); the first the tokenizer reads as single tokens is used
    (:func:`first_valid`). ``task_options`` are a ``task``-format checkpoint's own options
    (``task`` its name, for the message). Raises :class:`DecisionError` when a ``task``
    checkpoint cannot represent ``q`` (no yes/no pair for a noul, too many labels)."""
    k = len(q.labels)
    if prompt_format == "task":
        own = tuple(task_options)
        if q.kind == "noul":
            yes = [o for o in own if o.lower() in YES_LIKE]
            no = [o for o in own if o.lower() in NO_LIKE]
            if not (yes and no):
                raise DecisionError(
                    f"this checkpoint answers with {list(own)}, which has no yes/no pair; "
                    "a noul question cannot be represented"
                )
            return [(yes[0], no[0])]
        if k > len(own):
            raise DecisionError(
                f"{k} options, but this checkpoint (task {task!r}) "
                f"only answers with {len(own)} option tokens {list(own)}",
                ("criteria",),
            )
        return [match_labels(q, own)]
    if q.kind == "noul":
        return [("yes", "no"), ("Y", "N"), ("A", "B")]
    if q.kind == "choice" and k <= len(CODES):
        return [tuple(CODES[:k]), q.labels]
    return [q.labels]


def option_words(own: Sequence[str]) -> dict[str, set[str]]:
    """Per option of a ``task``-format checkpoint the words that mean it (case-folded): its
    own name and, when ``own`` holds a yes-like and a no-like option (the first of each,
    as a noul reads them), the :data:`YES_LIKE` or :data:`NO_LIKE` family."""
    words = {o: {o.strip().casefold()} for o in own}
    yes = [o for o in own if o.strip().casefold() in YES_LIKE]
    no = [o for o in own if o.strip().casefold() in NO_LIKE]
    if yes and no:
        words[yes[0]] |= set(YES_LIKE)
        words[no[0]] |= set(NO_LIKE)
    return words


def match_labels(q: Question, own: Sequence[str]) -> tuple[str, ...]:
    """The option of ``own`` (a ``task``-format checkpoint's options) each of ``q``'s
    labels means, in label order: a choice label by its name or its description, a score
    level by its text, each compared case-folded and stripped with :func:`option_words`.

    Raises :class:`DecisionError` (``loc ("criteria",)``) naming the labels that mean no
    option, more than one (a name and a description that disagree), or an option another
    label means too: a label is never mapped by its position."""
    words = option_words(own)
    meant: list[str] = []
    unmatched, several, by_option = [], [], {}
    for label, desc in zip(q.labels, q.descriptions, strict=True):
        shown = f"level {label} {render(desc)[:40]!r}" if q.kind == "score" else repr(label)
        terms = [desc] if q.kind == "score" else [label, desc]
        said = {t.strip().casefold() for t in terms if isinstance(t, str)}
        found = [o for o in own if said & words[o]]
        if len(found) == 1:
            by_option.setdefault(found[0], []).append(shown)
            meant.append(found[0])
        else:
            (several if found else unmatched).append(shown + (f" (means {found})" * bool(found)))
    problems = [
        f"{', '.join(unmatched)} match no option" if unmatched else "",
        f"{', '.join(several)} match more than one" if several else "",
        *(
            f"{' and '.join(ls)} match the same option {o!r}"
            for o, ls in by_option.items()
            if len(ls) > 1
        ),
    ]
    problems = [p for p in problems if p]
    if problems:
        synonyms = "".join(
            f"; {o!r} also reads {sorted(w - {o.casefold()})}"
            for o, w in words.items()
            if len(w) > 1
        )
        raise DecisionError(
            f"the labels cannot be matched to this checkpoint's options {list(own)}: "
            f"{'; '.join(problems)}. Name or describe each label as one option, in any "
            f"case{synonyms}",
            ("criteria",),
        )
    return tuple(meant)


def first_valid(
    candidates: Sequence[tuple[str, ...]],
    lookup: Callable[[tuple[str, ...]], OptionTokens | str],
) -> OptionTokens:
    """The option tokens of the first of ``candidates`` that ``lookup`` can represent
    (``lookup`` returns the tokens or the reason it cannot); :class:`DecisionError` with
    every reason when none can."""
    errors = []
    for labels in candidates:
        found = lookup(labels)
        if isinstance(found, OptionTokens):
            return found
        errors.append(found)
    raise DecisionError("cannot represent the options: " + "; ".join(errors))


class OptionCache:
    """A checkpoint's option tokens per question (:meth:`for_question`), through
    ``Reader.options``; per label tuple the tokens or the reason they cannot be read are
    kept (at most ``size`` tuples: labels come from requests)."""

    def __init__(self, reader: Reader, size: int = OPTION_CACHE_SIZE):
        self.reader, self.size = reader, size
        self._found: dict[tuple[str, ...], OptionTokens | str] = {}

    def __call__(self, labels: tuple[str, ...]) -> OptionTokens | str:
        """The option tokens of ``labels``, or the message saying why there are none."""
        if labels not in self._found:
            if len(self._found) >= self.size:
                self._found.clear()
            try:
                found: OptionTokens | str = self.reader.options(labels)
            except ValueError as err:
                found = str(err)
            self._found[labels] = found
        return self._found[labels]

    def for_question(self, q: Question) -> OptionTokens:
        """The option tokens read for ``q``, one per label in order; :class:`DecisionError`
        when ``q`` cannot be represented with this checkpoint's tokens."""
        r = self.reader
        candidates = option_candidates(q, r.prompt_format, r.task_options, r.meta.get("task"))
        return first_valid(candidates, self)


# --------------------------------------------------------------------------- prompts
def user_text(state: str, q: Question, codes: Sequence[str], prompt_format: str = "chat") -> str:
    """The user text of a chat/plain prompt: the rendered ``state`` first (so every question
    about it shares the prefix), then the instructions and one line per option ``codes``."""
    instructions = DEFAULT_INSTRUCTIONS[q.kind] if q.instructions is None else q.instructions
    lines = [state, f"Question: {render(instructions)}", "Options:"]
    for code, label, desc in zip(codes, q.labels, q.descriptions, strict=True):
        if q.kind == "score":
            lines.append(f"{code}) {render(desc)}")
            continue
        head = code if code == label else f"{code}) {label}"
        lines.append(head if desc is None else f"{head}: {render(desc)}")
    if prompt_format == "plain":  # build_prompt adds no instruction without a template
        lines.append("Reply with the code of one option.")
    return "\n".join(lines)


def unknown_chars(
    tokenizer: PreTrainedTokenizerBase, text: str, encode: Callable[[str], list[int]]
) -> list[str]:
    """The pieces of ``text`` the tokenizer maps to its unknown token (none: ``[]``);
    ``encode`` tokenises for a slow tokenizer, which has no offsets."""
    unk = tokenizer.unk_token_id
    if unk is None:
        return []
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    except NotImplementedError:  # slow tokenizers: no offsets
        ids = encode(text)
        return [ch for ch in dict.fromkeys(text) if unk in encode(ch)] * (unk in ids)
    spans = zip(enc["input_ids"], enc["offset_mapping"], strict=True)
    return list(dict.fromkeys(text[a:b] for i, (a, b) in spans if i == unk))


# --------------------------------------------------------------------------- a request's plan
@dataclass(frozen=True)
class PlannedQuestion:
    """One question of a request, ready to read: its option tokens ``opts``, the direct
    prompt's token ids (the bridge appended), the reason prompt and its length in tokens."""

    name: str
    question: Question
    opts: OptionTokens
    direct_ids: list[int]
    reason_prompt: str
    reason_len: int


def plan_questions(
    reader: Reader,
    state: Any,
    questions: Mapping[str, Any],
    *,
    mode: str,
    new_tokens: int,
    max_state_tokens: int,
    option_tokens: Callable[[Question], OptionTokens],
    encode: Callable[[str], list[int]],
) -> list[PlannedQuestion]:
    """The prompts of one request: ``questions`` (name -> wire question or
    :class:`Question`) about ``state``, each checked against ``reader``'s context for
    ``mode`` with ``new_tokens`` rationale tokens (``Reader.check_fits``). ``option_tokens``
    maps a question to its tokens (:meth:`OptionCache.for_question`), ``encode`` a text to
    its ids. Raises :class:`DecisionError` locating the culprit in the request.

    A request's questions about one state (:class:`rlcd_lab.decide.jev.Question`) become
    prompts that end in the marker and a set of K option tokens, read through the
    checkpoint's :class:`rlcd_lab.reader.Reader`. How depends on the checkpoint's prompt
    format (``Reader.prompt_format``):

    * ``chat`` / ``plain`` (real BPE models; ``chat`` when the tokenizer has a chat template):
      the prompt is the rendered state, then the question's instructions and one line per
      option ``"<code>) <label>: <description>"`` (:func:`user_text`), passed through
      ``Reader.prompt``. Option codes are single tokens after ``"Answer: "``: a noul reads
      ``yes``/``no`` (else ``Y``/``N``), a choice reads letters ``A, B, ...`` (then ``a..z``,
      ``0..9``; more than 62 options read the labels themselves, which must then be single
      tokens), a score reads the digits ``0..L-1`` (:func:`option_candidates`).
    * ``task`` (the tiny character-level checkpoints, whose vocabulary only knows their task
      format, e.g. ``"33+60+20=113?"``): the state *is* the prompt, instructions and
      criteria descriptions are not shown to the model, and the answer tokens are the
      checkpoint's own options (``rlcd.json`` ``"options"``). A noul needs a yes-like and a
      no-like option (verify: yes -> ``Y``, no -> ``N``, and their families :data:`YES_LIKE`
      and :data:`NO_LIKE`). A choice's labels and a score's levels are matched to those
      options by meaning, never by position (:func:`match_labels`), so listing the labels in
      another order never changes an answer. All questions about a state then share one
      prompt: one readout row (direct) or one set of rationales (reason) serves them.

    A question that cannot be represented raises :class:`rlcd_lab.decide.jev.DecisionError`
    naming it (too many options, a label that is not a single token, characters the
    tokenizer maps to its unknown token, a prompt longer than the model's context:
    ``Reader.check_fits``, the rule the Ask tab applies too). The state is only ever
    rendered into the prompt: its content never selects which questions, options or fields
    are read.
    """
    if not isinstance(questions, Mapping) or not questions:
        raise DecisionError("at least one question is required", ("questions",))
    state_str = state_text(state)
    n = len(encode(state_str))
    if n > max_state_tokens:
        raise DecisionError(f"the state has {n} tokens; at most {max_state_tokens}", ("state",))
    bad = unknown_chars(reader.tokenizer, state_str, encode)
    if bad:
        raise DecisionError(
            f"the state contains characters this model cannot read: {bad[:10]}", ("state",)
        )
    planned = []
    for name, raw in questions.items():
        try:
            q = raw if isinstance(raw, Question) else question_from_wire(raw)
            opts = option_tokens(q)
        except DecisionError as err:
            raise DecisionError(
                f"question {name!r}: {err.msg}", ("questions", name, *err.loc)
            ) from None
        text = _question_prompt(reader, state_str, name, q, opts, encode)
        # the question text lists the options already (chat, plain)
        direct, reason = reader.prompt(text, direct=True), reader.prompt(text)
        direct_ids = encode(direct) + list(opts.bridge)
        reason_len = len(encode(reason))
        n_prompt = len(direct_ids) - len(opts.bridge) if mode == "direct" else reason_len
        _check_fits(reader, name, n_prompt, len(opts.bridge), mode, new_tokens)
        planned.append(PlannedQuestion(name, q, opts, direct_ids, reason, reason_len))
    return planned


def _question_prompt(
    reader: Reader,
    state_str: str,
    name: str,
    q: Question,
    opts: OptionTokens,
    encode: Callable[[str], list[int]],
) -> str:
    """The text a question's prompt is built from: the state itself (task format) or
    :func:`user_text`, whose added characters the tokenizer must know."""
    if reader.prompt_format == "task":
        return state_str
    try:
        text = user_text(state_str, q, opts.labels, reader.prompt_format)
    except (TypeError, ValueError, RecursionError):
        raise DecisionError(f"question {name!r} cannot be rendered", ("questions", name)) from None
    bad = unknown_chars(reader.tokenizer, text[len(state_str) :], encode)
    if bad:
        raise DecisionError(
            f"question {name!r} contains characters this model cannot read: {bad[:10]}",
            ("questions", name),
        )
    return text


def _check_fits(
    reader: Reader, name: str, n_prompt: int, n_bridge: int, mode: str, new_tokens: int
) -> None:
    """The Reader's context rule (the Ask tab's too), worded for the request."""
    direct = mode == "direct"
    try:
        reader.check_fits(
            n_prompt, n_bridge, mode="direct" if direct else "reason", max_new_tokens=new_tokens
        )
    except ContextTooLong as err:
        raise DecisionError(
            f"question {name!r} needs {err.needed} positions (prompt"
            + ("" if direct else f" + {new_tokens} rationale tokens")
            + f"), but the model reads at most {err.n_ctx}; shorten the state",
            ("state",),
        ) from None
