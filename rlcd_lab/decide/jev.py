"""The Jev wire contract in one place: one schema, validated once, and the typed answers.

A request (``POST /v1/systemone``, docs/server.md) is ``{"model", "state", "questions",
"rlcd"?}``. :class:`SystemOneRequest` is its schema (pydantic, every object closed and
strict: a field outside the schema is an error, never passed on); the server validates a
body with it once and hands the engine typed :class:`Question` objects
(:meth:`SystemOneRequest.typed_questions`) and the rendered state (:func:`state_text`).
:func:`question_from_wire` validates one in-process question the same way. The answers
are built from probabilities ``p`` over a question's labels (:func:`noul_answer`,
:func:`choice_answer`, :func:`score_answer`); the opt-in ``rlcd`` extension is
:class:`RlcdOptions`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from rlcd_lab.math.routing import Kind, chance_corrected_confidence, confidence, score_confidence

MIN_OPTIONS = 2
"""Options the model needs to answer a choice or score (the wire allows one: no model)."""
MAX_CHOICE_OPTIONS = 255
MAX_SCORE_LEVELS = 10
MAX_LABEL_CHARS = 256


class DecisionError(ValueError):
    """A request that cannot be answered; ``loc`` locates the culprit in the request body,
    e.g. ``("questions", "tone", "criteria")`` or ``("state",)``."""

    def __init__(self, msg: str, loc: Sequence[str | int] = ()):
        super().__init__(msg)
        self.msg = msg
        self.loc = tuple(loc)


# --------------------------------------------------------------------------- the state
def render(value: Any) -> str:
    """Text of a state, instruction or description: a string as it is, anything else as
    JSON (key order kept, non-ASCII kept)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def state_text(state: Any) -> str:
    """The state as prompt text; :class:`DecisionError` (``loc ("state",)``) when it cannot
    be rendered or is empty (blank text, ``{}`` or ``[]``)."""
    try:
        text = render(state)
    except (TypeError, ValueError, RecursionError):
        raise DecisionError("the state cannot be rendered as text", ("state",)) from None
    if not text.strip() or state in ({}, []):
        raise DecisionError("the state is empty", ("state",))
    return text


# --------------------------------------------------------------------------- typed answers
def expected_level(p: Sequence[float] | np.ndarray) -> float:
    """The expected score ``sum_i i p_i`` of a ``(L,)`` distribution over levels 0..L-1."""
    p = np.asarray(p, dtype=np.float64)
    return float(np.arange(p.shape[-1]) @ p)


def decision_confidence(kind: Kind, p: Sequence[float] | np.ndarray) -> float:
    """The confidence used for routing (:func:`rlcd_lab.math.routing.confidence`, measure
    ``chance_corrected``): chance-corrected max for noul (``|2 p_yes - 1|``) and choice,
    ``score_confidence`` for score."""
    return confidence(p, "chance_corrected", kind)


def noul_answer(p: Sequence[float] | np.ndarray) -> dict:
    """``{"type": "noul", "noul": p_yes}`` from ``p = (p_yes, p_no)``."""
    return {"type": "noul", "noul": float(p[0])}


def choice_answer(labels: Sequence[str], p: Sequence[float] | np.ndarray) -> dict:
    """``{"type": "choice", "choice", "confidence", "probabilities"}``; ``choice`` is the
    first label with the largest probability, ``confidence`` chance-corrected:
    ``c = (K max_k p_k - 1) / (K - 1)`` (0 for the uniform p, 1 for a one-hot p)."""
    p = np.asarray(p, dtype=np.float64)
    return {
        "type": "choice",
        "choice": labels[int(np.argmax(p))],
        "confidence": chance_corrected_confidence(p),
        "probabilities": {label: float(v) for label, v in zip(labels, p, strict=True)},
    }


def score_answer(levels: Sequence[Any], p: Sequence[float] | np.ndarray) -> dict:
    """``{"type": "score", "score": sum_i i p_i, "confidence", "legend", "probabilities"}``
    with ``legend`` and ``probabilities`` keyed ``"0", "1", ...``, and the confidence
    ``c = 1 - Var(p) / Var_max`` with ``Var(p) = sum_i p_i (i - score)^2`` and
    ``Var_max = (L - 1)^2 / 4`` (half the mass on each end level): 1 for a point mass, 0
    for the most spread p; mass on neighbouring levels costs less than mass on distant
    ones, as an ordinal score should."""
    p = np.asarray(p, dtype=np.float64)
    return {
        "type": "score",
        "score": expected_level(p),
        "confidence": score_confidence(p),
        "legend": {str(i): level for i, level in enumerate(levels)},
        "probabilities": {str(i): float(v) for i, v in enumerate(p)},
    }


@dataclass(frozen=True)
class Question:
    """A typed question. ``labels`` are the answer keys in order: ``("yes", "no")`` for a
    noul, the criteria keys for a choice, ``("0", ..., "L-1")`` for a score;
    ``descriptions`` the matching criteria values (``None``: undescribed).

    On the wire a question is one of
    ``{"type": "noul", "instructions"?, "criteria"?: {"true"?, "false"?}}``,
    ``{"type": "choice", "instructions"?, "criteria": {label: description | null}}`` or
    ``{"type": "score", "instructions"?, "criteria": [level0, level1, ...]}``; the wire
    allows a choice with one label and a score with one level (the official client does),
    which need no model (:attr:`single_option`), so the engine itself asks for at least
    :data:`MIN_OPTIONS`."""

    kind: Kind
    labels: tuple[str, ...]
    descriptions: tuple[Any, ...]
    instructions: Any = None

    @property
    def single_option(self) -> bool:
        """A one-label choice or one-level score: its answer is certain (probability 1,
        confidence 1) and needs no model."""
        return len(self.labels) == 1

    def answer(self, p: Sequence[float] | np.ndarray) -> dict:
        """The wire answer for probabilities ``p`` over ``labels``."""
        if self.kind == "noul":
            return noul_answer(p)
        if self.kind == "choice":
            return choice_answer(self.labels, p)
        return score_answer(self.descriptions, p)


# --------------------------------------------------------------------------- the schema
Content = str | dict[str, Any] | list[Any]


def _clean_label(label: str) -> str:
    if label != label.strip():
        raise ValueError("labels must not start or end with whitespace")
    if not label.isprintable():
        raise ValueError("labels must not contain control characters")
    return label


Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_LABEL_CHARS)]
Label = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_LABEL_CHARS), AfterValidator(_clean_label)
]


class _Closed(BaseModel):
    """Every object of the wire form is closed: unknown fields are an error."""

    model_config = ConfigDict(extra="forbid", strict=True)


class NoulCriteria(_Closed):
    true: Content | None = None
    false: Content | None = None


class NoulQuestion(_Closed):
    type: Literal["noul"]
    instructions: Content | None = None
    criteria: NoulCriteria | None = None

    def question(self) -> Question:
        c = self.criteria or NoulCriteria()
        return Question("noul", ("yes", "no"), (c.true, c.false), self.instructions)


class ChoiceQuestion(_Closed):
    type: Literal["choice"]
    instructions: Content | None = None
    criteria: dict[Label, Content | None] = Field(min_length=1, max_length=MAX_CHOICE_OPTIONS)

    def question(self) -> Question:
        c = self.criteria
        return Question("choice", tuple(c), tuple(c.values()), self.instructions)


class ScoreQuestion(_Closed):
    type: Literal["score"]
    instructions: Content | None = None
    criteria: list[Content] = Field(min_length=1, max_length=MAX_SCORE_LEVELS)

    def question(self) -> Question:
        levels = tuple(str(i) for i in range(len(self.criteria)))
        return Question("score", levels, tuple(self.criteria), self.instructions)


WireQuestion = Annotated[NoulQuestion | ChoiceQuestion | ScoreQuestion, Field(discriminator="type")]


class RlcdOptions(_Closed):
    """Opt-in extensions; fields left out keep the server's defaults."""

    mode: Literal["direct", "reason", "auto"] | None = None
    m: int | None = Field(None, ge=1, le=16)
    threshold: float | None = Field(None, ge=0.0, le=1.0, allow_inf_nan=False)
    aggregate: Literal["mixture", "single"] | None = None
    max_new_tokens: int | None = Field(None, ge=1, le=1024)
    seed: int | None = Field(None, ge=0, le=2**31 - 1)
    deadline_s: float | None = Field(None, gt=0.0, le=3600.0, allow_inf_nan=False)
    rationales: bool = False

    def overrides(self) -> dict[str, Any]:
        """The ``DecideOptions`` fields this request sets (None: keep the default);
        ``rationales`` asks for the per-rationale ``details``."""
        return {**self.model_dump(exclude={"rationales", "deadline_s"}), "details": self.rationales}


class SystemOneRequest(_Closed):
    model: Name
    state: Content
    questions: dict[Name, WireQuestion] = Field(min_length=1)
    assets: dict[str, Any] | None = None
    rlcd: RlcdOptions | None = None

    @field_validator("assets")
    @classmethod
    def _no_assets(cls, value: dict[str, Any] | None) -> None:
        if value is not None:
            raise ValueError("image assets are not supported: this server runs a text model")

    def typed_questions(self) -> dict[str, Question]:
        """The questions as :class:`Question` objects, in request order."""
        return {name: q.question() for name, q in self.questions.items()}


# --------------------------------------------------------------------------- one question
_WIRE_QUESTION: TypeAdapter = TypeAdapter(WireQuestion)
_CRITERIA_SHAPE = {
    "noul": "noul criteria may only have 'true' and 'false'",
    "choice": "choice criteria must be an object of labels",
    "score": "score criteria must be a list of levels",
}


def _count_error(kind: str, n: int) -> DecisionError:
    most, what = (MAX_SCORE_LEVELS, "levels") if kind == "score" else (MAX_CHOICE_OPTIONS, "labels")
    return DecisionError(f"a {kind} needs {MIN_OPTIONS} to {most} {what}, got {n}", ("criteria",))


def _first_error(raw: Mapping[str, Any], err: ValidationError) -> DecisionError:
    """The schema's first complaint about one question, located relative to it (without
    pydantic's union tag and ``[key]`` marks) and worded for a caller in process."""
    e = err.errors(include_url=False)[0]
    kind, criteria = raw.get("type"), raw.get("criteria")
    loc = tuple(x for x in e["loc"][1:] if x != "[key]")
    if e["type"] in ("union_tag_invalid", "union_tag_not_found"):
        msg = f"unknown question type {kind!r}; use noul, choice or score"
        return DecisionError(msg, ("type",))
    if loc == ("criteria",) and e["type"] in ("too_short", "too_long"):
        return _count_error(kind, len(criteria))
    unknown_key = e["type"] == "extra_forbidden" and loc[:1] == ("criteria",)
    if loc == ("criteria",) or (kind == "noul" and unknown_key):
        return DecisionError(_CRITERIA_SHAPE[kind], ("criteria",))
    if kind == "score" and loc[:1] == ("criteria",) and criteria[loc[1]] is None:
        return DecisionError("score levels must be described (no null)", ("criteria",))
    if kind == "choice" and len(loc) == 2 and loc[0] == "criteria" and not str(loc[1]).strip():
        return DecisionError("labels must be non-empty", loc)
    return DecisionError(e["msg"].removeprefix("Value error, "), loc)


def question_from_wire(raw: Mapping[str, Any]) -> Question:
    """One question in the Jev wire form, validated by the request schema
    (:data:`WireQuestion`), as a :class:`Question` the model can answer.

    Raises :class:`DecisionError` (``loc`` relative to the question) for anything the
    schema refuses (an unknown type, more than 255 choice labels or 10 score levels, empty,
    over-long, padded or control-character labels, unknown noul criteria keys, null score
    levels, fields outside the schema) and for a choice or score with fewer than
    :data:`MIN_OPTIONS` options (the server answers those without the model).
    """
    if not isinstance(raw, Mapping):
        raise DecisionError("a question must be an object", ())
    try:
        q = _WIRE_QUESTION.validate_python(dict(raw)).question()
    except ValidationError as err:
        raise _first_error(raw, err) from None
    if len(q.labels) < MIN_OPTIONS:
        raise _count_error(q.kind, len(q.labels))
    return q
