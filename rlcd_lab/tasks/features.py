"""Features of a question, computed from its text alone: what a post-hoc calibrator may
use besides the model's readout (:mod:`rlcd_lab.reports.posthoc`).

:data:`QUESTION_FEATURES` is the one list: each :class:`QuestionFeature` names its task,
its name and a function of the prompt text returning a number. Add an entry to give a
task (or a new one) another feature; every calibrator of every report picks it up. A
feature must not read the answer: on the verify worlds the features are the sum's terms
(how many, how many carries adding them left to right), never the proposed result, whose
distance to the true sum is the label itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_SUM = re.compile(r"^(\d+(?:\+\d+)+)=\d+\?$")


@dataclass(frozen=True)
class QuestionFeature:
    """``fn(prompt) -> float`` is feature ``name`` of task ``task``'s questions."""

    task: str
    name: str
    fn: Callable[[str], float]


def sum_terms(prompt: str) -> list[int]:
    """The terms of a verify question ``a+b(+c...)=p?`` (ValueError for another form)."""
    m = _SUM.match(prompt)
    if m is None:
        raise ValueError(f"not a verify question: {prompt!r}")
    return [int(t) for t in m.group(1).split("+")]


def term_count(prompt: str) -> float:
    """How many terms the sum has."""
    return float(len(sum_terms(prompt)))


def carries(prompt: str) -> float:
    """Additions with a units carry when the terms are added left to right (what the
    teacher can slip on): ``47+38+16`` -> 2 (7+8, then 85+16: 5+6)."""
    terms, count = sum_terms(prompt), 0
    total = terms[0]
    for t in terms[1:]:
        count += (total % 10 + t % 10) >= 10
        total += t
    return float(count)


QUESTION_FEATURES: list[QuestionFeature] = [
    QuestionFeature("verify", "carries", carries),
    QuestionFeature("verify-mixed", "terms", term_count),
    QuestionFeature("verify-mixed", "carries", carries),
]
"""Every question feature, by task (a task without an entry has none)."""


def features_of(task: str) -> list[QuestionFeature]:
    """The features :data:`QUESTION_FEATURES` declares for ``task``, in list order."""
    return [f for f in QUESTION_FEATURES if f.task == task]


def feature_matrix(task: str, prompts: Sequence[str]) -> tuple[list[str], list[list[float]]]:
    """``(names, rows)``: each prompt's value of every feature of ``task``."""
    feats = features_of(task)
    return [f.name for f in feats], [[f.fn(p) for f in feats] for p in prompts]
