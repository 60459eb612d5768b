"""Batch tab: answer a file of questions, download the answers as CSV.

The file is JSONL (one object per line) or CSV (a header row), with a ``question`` (or
``prompt``) and an ``options`` column; optionally a ``label`` (or ``answer``): the true
option, by name or, in JSONL, by index. Options are a JSON list, or a text such as
``"Y, N"`` or ``"A B C"`` (as the Ask tab's options box; ``|`` separates too). The file
is checked whole before anything is read by the model (:func:`parse_question_file`,
``ValueError`` naming the line or row and the problem); then every question is read as
in the Ask tab (:func:`rlcd_lab.dashboard.ask_tab.ask_model`) and decided by the same
:class:`rlcd_lab.routing.DecisionRule`. A question the model cannot represent (labels
that are not single tokens, too long for its context) gets its error in its row; the
others are answered.
"""

from __future__ import annotations

import csv
import io
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from ..assets import ASSETS
from ..routing import DEFAULT_THRESHOLD, DecisionRule, decided_risk
from . import ask_tab

MAX_BATCH_ROWS = 100
"""Questions per uploaded file (the app reads one model request at a time)."""
MAX_FILE_BYTES = 1_000_000
"""Largest uploaded file."""
SUFFIXES = (".jsonl", ".csv")
QUESTION_KEYS = ("question", "prompt")
LABEL_KEYS = ("label", "answer")
RESULT_COLUMNS = [
    "row",
    "question",
    "options",
    "answer",
    "confidence",
    "decision",
    "probabilities",
    "label",
    "correct",
    "error",
]
COLUMN_WIDTHS = [
    "48px",
    "220px",
    "90px",
    "80px",
    "100px",
    "90px",
    "180px",
    "70px",
    "80px",
    "180px",
]
"""Widths of the results table's columns: each header fits on one line, and all together
(:data:`TABLE_WIDTH_PX`) fit the page's width at a desktop's 1440 px (it scrolls
sideways on a phone)."""
TABLE_WIDTH_PX = 1150
"""The most the table's columns may take together: gradio's page is about 1215 px wide
in a 1440 px window, less the table's borders and padding."""


@dataclass(frozen=True)
class BatchQuestion:
    """One question of an uploaded file: ``row`` (its line or data row, from 1),
    ``question``, ``options`` and the true ``label`` (an option, or None)."""

    row: int
    question: str
    options: tuple[str, ...]
    label: str | None = None


def split_options(value: Any) -> list[str]:
    """Option labels from a JSON list or a text (``"Y, N"``, ``"A | B"``, ``"A B C"``)."""
    if isinstance(value, list):
        return [str(v).strip() for v in value]
    text = str(value or "").strip()
    for sep in (",", "|"):
        if sep in text:
            return [s.strip() for s in text.split(sep)]
    return text.split()


def _pick(record: dict, keys: Sequence[str]) -> Any:
    for key in keys:
        if key in record:
            return record[key]
    return None


def _question(row: int, record: dict, where: str) -> BatchQuestion:
    question = _pick(record, QUESTION_KEYS)
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"{where} {row}: no question (a non-empty 'question' or 'prompt')")
    if len(question) > ask_tab.MAX_QUESTION_CHARS:
        raise ValueError(
            f"{where} {row}: the question is {len(question):,} characters long; "
            f"at most {ask_tab.MAX_QUESTION_CHARS:,}"
        )
    raw = _pick(record, ("options",))
    if raw is None:
        raise ValueError(f"{where} {row}: no 'options'")
    options = split_options(raw)
    if len(options) < 2 or any(not o for o in options):
        raise ValueError(f"{where} {row}: need at least 2 non-empty options, got {options!r}")
    if len(set(options)) != len(options):
        raise ValueError(f"{where} {row}: duplicate options {options!r}")
    label = _pick(record, LABEL_KEYS)
    if label is not None and label != "":
        if isinstance(label, int) and not isinstance(label, bool):
            if not 0 <= label < len(options):
                raise ValueError(f"{where} {row}: label index {label} is not an option index")
            label = options[label]
        label = str(label).strip()
        if label not in options:
            raise ValueError(
                f"{where} {row}: label {label!r} is not one of the options {', '.join(options)}"
            )
    else:
        label = None
    return BatchQuestion(row, question.strip(), tuple(options), label)


def _read_text(path: Path) -> str:
    if path.suffix.lower() not in SUFFIXES:
        raise ValueError(f"upload a .jsonl or .csv file; {path.name!r} is neither")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ValueError(f"the file is {size:,} bytes; at most {MAX_FILE_BYTES:,}")
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError(f"{path.name!r} is not UTF-8 text") from None


def parse_question_file(path: str | Path) -> list[BatchQuestion]:
    """The questions of an uploaded JSONL or CSV file (see the module docstring), checked
    whole. Raises ``ValueError`` naming the line (JSONL) or data row (CSV) and what is
    wrong: another suffix, an oversized or non-UTF-8 file, invalid JSON, a missing or empty
    question, missing options, fewer than 2 or duplicate options, a label that is not an
    option, no questions, or more than :data:`MAX_BATCH_ROWS`."""
    path = Path(path)
    text = _read_text(path)
    out: list[BatchQuestion] = []
    if path.suffix.lower() == ".jsonl":
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as err:
                raise ValueError(f"line {n}: not valid JSON ({err})") from None
            if not isinstance(record, dict):
                raise ValueError(f"line {n}: expected a JSON object with question and options")
            out.append(_question(n, record, "line"))
            if len(out) > MAX_BATCH_ROWS:
                break
    else:
        reader = csv.DictReader(io.StringIO(text))
        columns = [(c or "").strip().lower() for c in reader.fieldnames or []]
        if not set(columns) & set(QUESTION_KEYS) or "options" not in columns:
            found = ", ".join(c for c in columns if c) or "none"
            raise ValueError(
                f"the CSV needs a header with 'question' and 'options' columns; found: {found}"
            )
        try:
            for n, raw in enumerate(reader, 1):
                record = {
                    (k or "").strip().lower(): (v.strip() if isinstance(v, str) else v)
                    for k, v in raw.items()
                }
                if not any(record.values()):
                    continue
                out.append(_question(n, record, "row"))
                if len(out) > MAX_BATCH_ROWS:
                    break
        except csv.Error as err:
            raise ValueError(f"not a readable CSV file ({err})") from None
    if not out:
        raise ValueError("the file holds no questions")
    if len(out) > MAX_BATCH_ROWS:
        raise ValueError(f"the file holds more than {MAX_BATCH_ROWS} questions; split it")
    return out


def _file_path(file: Any) -> Path:
    """The path of an upload (gradio gives a path string; older clients an object)."""
    if file is None:
        raise gr.Error("upload a .jsonl or .csv file with question and options columns")
    return Path(getattr(file, "name", None) or getattr(file, "path", None) or file)


def write_csv(rows: Sequence[dict], directory: str | Path | None = None) -> Path:
    """``rows`` (dicts keyed by :data:`RESULT_COLUMNS`) as ``answers.csv`` in a new
    temporary directory (or ``directory``); returns its path."""
    folder = Path(directory or tempfile.mkdtemp(prefix="rlcd-batch-"))
    path = folder / "answers.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=RESULT_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return path


def batch_answers(
    checkpoint: str,
    file: Any,
    m: float = 4,
    sampling_temperature: float = 1.0,
    max_new_tokens: float = 64,
    seed: float | None = 0,
    threshold: float = DEFAULT_THRESHOLD,
    measure: str = "max_p",
    aggregate: str = "single",
    root: str | Path = ASSETS,
) -> tuple[str, dict, str]:
    """The Batch tab's callback: ``(summary markdown, results table, CSV path)``.

    Every question of the file (:func:`parse_question_file`; its ``ValueError`` comes back
    as ``gr.Error``) is read by ``checkpoint`` with the given sampling settings (seed
    ``seed + row``) and decided by ``DecisionRule(measure, threshold, aggregate)``. The
    table and the CSV hold per question: the answer the rule decided on, its confidence,
    ``automate`` or ``escalate``, the probabilities, the true label and ``correct`` when
    the file gives one, or the error that kept it from being answered."""
    try:
        questions = parse_question_file(_file_path(file))
    except (OSError, ValueError) as err:
        raise gr.Error(f"cannot use this file: {err}") from None
    rule = ask_tab.make_rule(threshold, measure, aggregate)
    ask_tab.check_sampling(m, sampling_temperature)
    model, tokenizer, meta = ask_tab.load_model(checkpoint, root)
    rows = []
    for q in questions:
        row = dict.fromkeys(RESULT_COLUMNS, "")
        row.update(row=q.row, question=q.question, options=", ".join(q.options))
        row["label"] = q.label or ""
        try:
            result = ask_tab.ask_model(
                model, tokenizer, meta, q.question, q.options, m, sampling_temperature,
                max_new_tokens,
                None if seed is None else int(seed) + q.row,
            )  # fmt: skip
        except ValueError as err:
            row["error"] = str(err)
            rows.append(row)
            continue
        routed = ask_tab.route_result(result, rule)
        row.update(
            answer=routed["answer"],
            confidence=round(routed["confidence"], 4),
            decision=routed["decision"],
            probabilities=json.dumps(
                {o: round(v, 4) for o, v in zip(q.options, routed["probs"], strict=True)}
            ),
        )
        if q.label is not None:
            row["correct"] = routed["answer"] == q.label
        rows.append(row)
    table = {"headers": RESULT_COLUMNS, "data": [[r[c] for c in RESULT_COLUMNS] for r in rows]}
    summary = batch_summary(rows, rule, Path(_file_path(file)).name)
    return summary, table, str(write_csv(rows))


def batch_summary(rows: Sequence[dict], rule: DecisionRule, name: str) -> str:
    """The Batch tab's summary of its result ``rows`` (file ``name``): how many questions
    were decided automatically, escalated or could not be read, the rule, and on the
    labelled ones the accuracy and the error among those decided automatically."""
    done = [r for r in rows if not r["error"]]
    auto = [r for r in done if r["decision"] == "automate"]
    lines = [
        f"**{len(rows)} questions** from `{name}`: "
        f"{len(auto)} decided automatically, {len(done) - len(auto)} escalated"
        + (
            f", {len(rows) - len(done)} could not be read (see `error`)"
            if len(done) < len(rows)
            else ""
        )
        + ".",
        f"**Rule:** {rule.describe()}.",
    ]
    labelled = [r for r in done if r["label"]]
    if labelled:
        correct = [bool(r["correct"]) for r in labelled]
        acc = 1.0 - decided_risk(correct, [True] * len(correct))["risk"]
        auto_l = decided_risk(correct, [r["decision"] == "automate" for r in labelled])
        line = f"Accuracy on the {len(labelled)} labelled questions: {acc:.1%}"
        if auto_l["decided"]:
            err, n_auto = auto_l["risk"], int(auto_l["decided"])
            line += f"; error among those decided automatically: {err:.1%} ({n_auto})"
        lines.append(line + ".")
    return "\n\n".join(lines)
