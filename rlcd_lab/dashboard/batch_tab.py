"""Batch tab: answer a file of questions, download the answers as CSV.

:func:`read_question_file` reads and checks the file (JSONL or CSV: what it may hold);
:func:`batch_answers` answers each valid row as the Ask tab does, :func:`write_csv` and
:func:`batch_summary` report them.
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

from rlcd_lab.dashboard import ask_tab
from rlcd_lab.files.assets import ASSETS
from rlcd_lab.math.routing import DEFAULT_THRESHOLD, DecisionRule, decided_risk

MAX_BATCH_ROWS = 100
"""Rows (questions, malformed ones included; blank lines not) per uploaded file (the app
reads one model request at a time)."""
MAX_SHOWN_CHARS = 200
"""Characters of a malformed row's question shown in the results (the rest cut, "…")."""
MAX_LISTED_PROBLEMS = 5
"""Problems quoted, at most, when no row of a file is valid."""
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


@dataclass(frozen=True)
class BadRow:
    """A malformed row of an uploaded file: ``row`` (its line or data row, from 1),
    ``problem`` (naming the row and what is wrong, e.g. ``"line 2: not valid JSON
    (...)"``) and what could be read of it (``question``, ``options``, as text; else
    ``""``), shown in its results row."""

    row: int
    problem: str
    question: str = ""
    options: str = ""


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


def _shown(value: Any) -> str:
    """What of a malformed row's field is shown: a text, cut to :data:`MAX_SHOWN_CHARS`."""
    if isinstance(value, list):
        value = ", ".join(map(str, value))
    if not isinstance(value, str):
        return ""
    value = value.strip()
    return value if len(value) <= MAX_SHOWN_CHARS else value[: MAX_SHOWN_CHARS - 1] + "…"


def _row(n: int, record: dict, where: str) -> BatchQuestion | BadRow:
    """One record as a question, or as a :class:`BadRow` saying what is wrong with it."""
    try:
        return _question(n, record, where)
    except ValueError as err:
        options = _pick(record, ("options",))
        return BadRow(n, str(err), _shown(_pick(record, QUESTION_KEYS)), _shown(options))


def read_question_file(path: str | Path) -> tuple[list[BatchQuestion], list[BadRow]]:
    """The valid questions and the malformed rows of an uploaded JSONL or CSV file (see
    below), each in file order. A malformed row (invalid JSON or JSON
    nested too deeply for Python's parser, not an object, a missing, empty or over-long
    question, missing options, fewer than 2 or duplicate options, a label that is not an
    option) is a :class:`BadRow` naming its line (JSONL) or data row (CSV) and the problem.
    Raises ``ValueError`` for what refuses the whole file: another suffix, an oversized
    or non-UTF-8 file, a CSV without question and options columns or unreadable as CSV,
    no rows, more than :data:`MAX_BATCH_ROWS` rows, or no valid row (quoting the first
    problems).

    The file is JSONL (one object per line) or CSV (a header row), with a ``question`` (or
    ``prompt``) and an ``options`` column; optionally a ``label`` (or ``answer``): the true
    option, by name or, in JSONL, by index. Options are a JSON list, or a text such as
    ``"Y, N"`` or ``"A B C"`` (as the Ask tab's options box; ``|`` separates too). The
    file is checked before anything is read by the model; every valid row is answered.
    """
    path = Path(path)
    text = _read_text(path)
    out: list[BatchQuestion | BadRow] = []
    if path.suffix.lower() == ".jsonl":
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as err:
                out.append(BadRow(n, f"line {n}: not valid JSON ({err})"))
            except RecursionError:
                out.append(BadRow(n, f"line {n}: JSON nested too deeply to read"))
            else:
                if isinstance(record, dict):
                    out.append(_row(n, record, "line"))
                else:
                    problem = f"line {n}: expected a JSON object with question and options"
                    out.append(BadRow(n, problem))
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
                out.append(_row(n, record, "row"))
                if len(out) > MAX_BATCH_ROWS:
                    break
        except csv.Error as err:
            raise ValueError(f"not a readable CSV file ({err})") from None
    if not out:
        raise ValueError("the file holds no questions")
    if len(out) > MAX_BATCH_ROWS:
        raise ValueError(f"the file holds more than {MAX_BATCH_ROWS} questions; split it")
    questions = [q for q in out if isinstance(q, BatchQuestion)]
    bad = [q for q in out if isinstance(q, BadRow)]
    if not questions:
        listed = "; ".join(b.problem for b in bad[:MAX_LISTED_PROBLEMS])
        more = len(bad) - MAX_LISTED_PROBLEMS
        raise ValueError(
            f"no valid question in the file: {listed}" + (f"; and {more} more" if more > 0 else "")
        )
    return questions, bad


def parse_question_file(path: str | Path) -> list[BatchQuestion]:
    """The questions of an uploaded file, strictly: :func:`read_question_file`, raising
    its ``ValueError`` and, when any row is malformed, one naming the first such row
    (its line or data row and the problem)."""
    questions, bad = read_question_file(path)
    if bad:
        raise ValueError(bad[0].problem)
    return questions


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

    Every valid question of the file (:func:`read_question_file`; its ``ValueError``, for
    a file that cannot be used at all or holds no valid row, comes back as ``gr.Error``) is
    read by ``checkpoint`` with the given sampling settings (seed ``seed + row``) and
    decided by ``DecisionRule(measure, threshold, aggregate)``. The table and the CSV hold
    a row per row of the file, in its order: the answer the rule decided on, its
    confidence, ``automate`` or ``escalate``, the probabilities, the true label and
    ``correct`` when the file gives one; or, in ``error``, what kept it from being
    answered: the malformed row's problem (naming its line or row) or the model's.

    Each question is read as in the Ask tab (:func:`rlcd_lab.dashboard.ask_tab.ask_model`)
    and decided by the same :class:`rlcd_lab.math.routing.DecisionRule`. A question the model
    cannot represent (labels that are not single tokens, too long for its context) gets its
    error in its row too; the others are answered.
    """
    try:
        questions, bad = read_question_file(_file_path(file))
    except (OSError, ValueError) as err:
        raise gr.Error(f"cannot use this file: {err}") from None
    rule = ask_tab.make_rule(threshold, measure, aggregate)
    ask_tab.check_sampling(m, sampling_temperature)
    reader = ask_tab.load_reader(checkpoint, root)
    rows = []
    for b in bad:
        row = dict.fromkeys(RESULT_COLUMNS, "")
        row.update(row=b.row, question=b.question, options=b.options, error=b.problem)
        rows.append(row)
    for q in questions:
        row = dict.fromkeys(RESULT_COLUMNS, "")
        row.update(row=q.row, question=q.question, options=", ".join(q.options))
        row["label"] = q.label or ""
        try:
            result = ask_tab.ask_model(
                reader, q.question, q.options, m, sampling_temperature, max_new_tokens,
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
    rows.sort(key=lambda r: r["row"])
    table = {"headers": RESULT_COLUMNS, "data": [[r[c] for c in RESULT_COLUMNS] for r in rows]}
    summary = batch_summary(rows, rule, Path(_file_path(file)).name, malformed=len(bad))
    return summary, table, str(write_csv(rows))


def batch_summary(rows: Sequence[dict], rule: DecisionRule, name: str, malformed: int = 0) -> str:
    """The Batch tab's summary of its result ``rows`` (file ``name``; ``malformed`` of
    them are malformed rows of the file): how many questions were decided automatically,
    escalated, malformed or could not be read by the model, the rule, and on the
    labelled ones the accuracy and the error among those decided automatically."""
    done = [r for r in rows if not r["error"]]
    auto = [r for r in done if r["decision"] == "automate"]
    unread = len(rows) - len(done) - malformed
    problems = [f"{malformed} malformed"] if malformed else []
    problems += [f"{unread} could not be read by the model"] if unread else []
    lines = [
        f"**{len(rows)} questions** from `{name}`: "
        f"{len(auto)} decided automatically, {len(done) - len(auto)} escalated"
        + (f", {' and '.join(problems)} (see `error`)" if problems else "")
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
