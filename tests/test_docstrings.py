"""The package's docstrings say what the code does now: no claim that a module re-exports
names, no history, no benchmark figures, and short module docstrings (what the module is
for and where to start; the detail sits with the functions and lines it explains)."""

from __future__ import annotations

import ast
import re
import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "rlcd_lab"

MAX_MODULE_LINES = 12
"""The longest a module docstring may be, in lines (its text stripped)."""

REEXPORT = re.compile(r"re-?export", re.IGNORECASE)
"""A claim that a module hands on names it imports (names come from the module that
defines them)."""

HISTORY = re.compile(
    r"\b(?:lived in|used to (?:be|live|sit|hold)|previously|formerly|"
    r"(?:was|were|been) (?:moved|renamed|split off|merged)|moved (?:here|from)|"
    r"earlier versions?|in the (?:old|first|previous) version|"
    r"as (?:a|the)\s[\w\s]+ was before)\b",
    re.IGNORECASE,
)
"""Where code was, what it used to do, or how it changed."""

FIGURE = re.compile(
    r"(?<![\w.])\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?"
    r"(?:\s?(?:ms|µs|us|seconds?)\b|\s(?:s|min)\b|x\b|%\s(?:of\s)?(?:the\s)?throughput)"
)
"""A measured figure: a duration (``0.3 s``, ``44-48 ms``), a ratio (``7x``) or a share of
throughput. Shapes (``(N, K)``), sizes (``1400 x 1000``) and HTTP codes (``503s``) do not
match."""


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        yield rel, ast.parse(path.read_text(encoding="utf-8"))


def _docstrings(tree: ast.Module) -> Iterator[tuple[str, str]]:
    """``(where, docstring)`` of the module, its classes and functions, and the string
    literals that document an assignment (a string statement right after it)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield getattr(node, "name", "module"), doc
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for before, stmt in zip(body, body[1:], strict=False):
                if (
                    isinstance(before, (ast.Assign, ast.AnnAssign))
                    and isinstance(stmt, ast.Expr)
                    and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str)
                ):
                    yield f"line {stmt.lineno}", stmt.value.value


def _problems(pattern: re.Pattern[str]) -> list[str]:
    return [
        f"rlcd_lab/{rel} ({where}): {match.group(0)!r}"
        for rel, tree in _modules()
        for where, doc in _docstrings(tree)
        for match in pattern.finditer(doc)
    ]


def _module_lines() -> dict[str, int]:
    return {
        rel: len((ast.get_docstring(tree, clean=False) or "").strip().splitlines())
        for rel, tree in _modules()
    }


def test_no_docstring_says_a_module_re_exports_names():
    """Names come from the module that defines them; a docstring that says a module hands
    on another's names is stale (none does: ``tests/test_layering.py``)."""
    assert _problems(REEXPORT) == []


def test_no_docstring_tells_history():
    """A docstring says what the code does, not where it was or what it did before."""
    assert _problems(HISTORY) == []


def test_no_docstring_holds_benchmark_figures():
    """Measured timings and ratios belong in benchmarks/RESULTS.md and docs/performance.md,
    with the command and the machine; a docstring holding one goes stale silently."""
    assert _problems(FIGURE) == []


def test_every_module_has_a_short_docstring():
    """Each module says what it is for and where to start, in at most
    :data:`MAX_MODULE_LINES` lines."""
    lines = _module_lines()
    assert [rel for rel, n in lines.items() if n == 0] == []
    assert {rel: n for rel, n in lines.items() if n > MAX_MODULE_LINES} == {}


@pytest.mark.parametrize(
    "text, pattern",
    [
        ("it lived in ``train.common``, which re-exports it", REEXPORT),
        ("it lived in ``train.common``", HISTORY),
        ("a ``RuntimeError`` as a failed download was before", HISTORY),
        ("took 7x as long (10.4 s quiet)", FIGURE),
        ("median 44-48 ms per request", FIGURE),
        ("lost 15-20% of the throughput", FIGURE),
    ],
)
def test_the_patterns_catch_what_they_name(text: str, pattern: re.Pattern[str]):
    """Each pattern matches a sentence of the kind it forbids."""
    assert pattern.search(text)


@pytest.mark.parametrize(
    "text",
    [
        "logits ``(N, K)`` and ``u (N, R, K)``",
        "a 1400 x 1000 window",
        "the batcher's refusals are 503s",
        "``2 x hidden_size x intermediate_size``",
        "the keys and values are computed once and reused",
        "Used to log gradient dilution",
    ],
)
def test_the_patterns_leave_shapes_and_plain_words_alone(text: str):
    """Shapes, sizes, status codes and ordinary uses of the words pass."""
    assert not any(p.search(text) for p in (REEXPORT, HISTORY, FIGURE))


if __name__ == "__main__":  # the median module docstring, in lines
    print(statistics.median(_module_lines().values()))
