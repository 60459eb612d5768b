"""The package's structure, read from its source (no module is imported): the import graph
has no cycle and no import from a lower floor to a higher one; only the Reader's own
modules generate, render a chat template or take a softmax over a live model's option
logits; the decision path's files and functions stay small.

The floors (docs/layout.md): ``math`` (scores, estimators, metrics, statistics, the
cost model, file formats), ``lm`` (models, checkpoints, prompts, sampling, scoring
rationales, task items), ``reader`` (the Reader), ``lab`` (evaluation, results, training,
decisions, reports, tutorials) and ``faces`` (dashboard, server, command line).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "rlcd_lab"

FLOORS = {
    "math": (
        "scoring", "decomposition", "estimators", "metrics", "stats", "routing", "verdicts",
        "paper", "io", "rundir", "readout", "sampling", "packing", "pretrain_config",
    ),
    "lm": (
        "models", "decoding", "prompts", "rationales", "reading", "pretrained", "loading",
        "tasks", "tasks.items", "tasks.split", "tasks.synthetic", "tasks.worked",
    ),
    "reader": ("reader",),
    "lab": ("tasks.convert", "tasks.fetch"),
    "faces": ("dashboard", "server", "cli"),
}  # fmt: skip
"""Modules by floor (a name covers its submodules; the longest name that matches wins);
every other module is ``lab``."""
ORDER = ("math", "lm", "reader", "lab", "faces")

READER_OWN = {
    "reader", "prompts", "rationales", "reading", "readout", "decoding", "sampling", "packing",
}  # fmt: skip
"""The Reader's own modules: they build prompts, sample and read out."""
ALLOWED = {
    "generate": READER_OWN | {"train.vllm"},  # vLLM's engine is a Sampler
    "apply_chat_template": {"prompts"},
    # metrics: the softmax of stored logits (math); verbal: the stated-confidence digits,
    # not option tokens
    "softmax": READER_OWN | {"metrics", "verbal"},
    "log_softmax": READER_OWN | {"metrics", "verbal"},
}
SMALL_FILES = ("decide.py", "answering.py", "questions.py", "jev.py", "reader.py", "prompts.py",
               "rationales.py", "reading.py", "server/*.py", "dashboard/*_tab.py")  # fmt: skip
MAX_LINES, MAX_FUNCTION_LINES = 500, 80


def modules() -> dict[str, Path]:
    """``{dotted name below rlcd_lab: path}`` for every module of the package."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules ``name`` imports anywhere in its source (functions included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = [p for p in package.split(".") if p]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith("rlcd_lab."):
                target = node.module.removeprefix("rlcd_lab.")
            else:
                continue
            # a submodule named in the import, else the module imported from
            candidates = [
                f"{target}.{a.name}".strip(".")
                if f"{target}.{a.name}".strip(".") in known
                else target
                for a in node.names
            ]
        elif isinstance(node, ast.Import):
            candidates = [a.name.removeprefix("rlcd_lab.") for a in node.names]
        else:
            continue
        found |= {c for c in candidates if c in known and c != name}
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def floor(name: str) -> int:
    matches = [
        (len(p), level)
        for level, prefixes in FLOORS.items()
        for p in prefixes
        if name == p or name.startswith(p + ".")
    ]
    return ORDER.index(max(matches)[1] if matches else "lab")


def test_the_import_graph_has_no_cycle():
    g = graph()
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(g[node]):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt) :] + [nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(g):
        if node not in state:
            visit(node, [node])


def test_no_import_runs_up_a_floor():
    up = [
        f"{a} ({ORDER[floor(a)]}) imports {b} ({ORDER[floor(b)]})"
        for a, targets in graph().items()
        for b in targets
        if floor(b) > floor(a)
    ]
    assert not up, "\n".join(up)


def test_the_cycle_and_floor_checks_can_fail(tmp_path):
    """The checks above see a function-level import and a relative one."""
    (tmp_path / "a.py").write_text("def f():\n    from .b import x\n")
    (tmp_path / "b.py").write_text("from rlcd_lab.a import y\n")
    known = {"a", "b"}
    assert imports("a", tmp_path / "a.py", known) == {"b"}
    assert imports("b", tmp_path / "b.py", known) == {"a"}
    assert floor("models") < floor("reader") < floor("decide") < floor("server.app")
    assert floor("tasks.items") < floor("reader") < floor("tasks.convert")


def calls(path: Path) -> list[tuple[str, int]]:
    """``(called name, line)`` of every call whose function is a name or an attribute."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if name:
                out.append((name, node.lineno))
    return out


def test_only_the_reader_generates_renders_chats_and_reads_options():
    """No module but the Reader's own calls ``generate``, renders a chat template or
    takes a softmax (docstrings and comments do not count: calls are read from the
    syntax tree)."""
    bad = [
        f"rlcd_lab/{path.relative_to(PACKAGE)}:{line} calls {name}"
        for name_, path in modules().items()
        for name, line in calls(path)
        if name in ALLOWED and name_ not in ALLOWED[name]
    ]
    assert not bad, "\n".join(bad)


def test_the_decision_path_stays_small():
    files = sorted({p for pattern in SMALL_FILES for p in PACKAGE.glob(pattern)})
    assert len(files) >= 10
    bad = []
    for path in files:
        text = path.read_text()
        if len(text.splitlines()) > MAX_LINES:
            bad.append(f"{path.name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    bad.append(f"{path.name}:{node.lineno} {node.name}: {n} lines")
    assert not bad, "\n".join(bad)


def test_moved_names_import_from_their_old_places():
    """A restructuring moves code, not the names other code imports."""
    from rlcd_lab import (
        classroom,
        decide,
        exercises,
        loading,
        models,
        pages,
        reader,
        reading,
        report,
        verdicts,
    )

    # no module redirects moved names at run time (PEP 562): an import graph tools can see
    assert not hasattr(models, "__getattr__") and not hasattr(models, "load_checkpoint")
    assert loading.load_checkpoint.__module__ == "rlcd_lab.loading"
    assert reader.read is reading.read and reader.score_rationales is reading.score_rationales
    assert report.verdict is verdicts.verdict and report.html_page is pages.html_page
    assert classroom.assert_correct is exercises.assert_correct
    assert decide.DecideOptions.__module__ == "rlcd_lab.answering"
    with pytest.raises(AttributeError):
        models.not_a_name  # noqa: B018
