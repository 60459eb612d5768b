"""nbgrader and otter-grader assignments from the tutorials (``make student`` with
``--format nbgrader`` or ``--format otter``).

:func:`parse_exercises` reads a tutorial's exercises, answers and solutions; from them
:func:`nbgrader_notebook` builds the *source* notebook of an nbgrader assignment and
:func:`otter_notebook` an otter-grader *master* notebook. The graded test cells call the
same checks as the tutorial (:func:`rlcd_lab.classroom.exercises.assert_correct`), so
nothing about the solutions is written twice.
"""

from __future__ import annotations

import ast
import copy
import inspect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcd_lab.classroom import exercises

FORMATS = ("nbgrader", "otter")
"""The grader formats :func:`write_assignments` writes."""
NBGRADER_SCHEMA = 3
"""The ``schema_version`` of nbgrader's cell metadata (nbgrader 0.9)."""
NBGRADER_ALSO = ", delete the `raise NotImplementedError()` line"
"""What an nbgrader prompt adds: ``generate_assignment`` puts that stub where the solution
was (nbgrader's default ``ClearSolutions.code_stub``)."""


@dataclass(frozen=True)
class Exercise:
    """One exercise of a tutorial's answer cell.

    ``number``: 1, 2, ... in the answer cell's order; ``check``: the check's name in
    :mod:`rlcd_lab.classroom.student`; ``call``: the answer cell's call of it (source text);
    ``answers``: the answer cell's ``name = None`` lines this call reads (comments kept);
    ``solution``: code that sets each of those names to its solution; ``feedback``: the
    answer cell's statement that prints the check's feedback.
    """

    number: int
    check: str
    call: str
    answers: tuple[str, ...]
    solution: str
    feedback: str


@dataclass(frozen=True)
class Exercises:
    """A tutorial's exercises: ``index`` of the answer cell among the notebook's cells;
    ``setup``: the answer cell's other lines (``from rlcd_lab.classroom import exercises``);
    ``worked``: the code of the solution cells, in order; ``items``: the exercises."""

    index: int
    setup: str
    worked: str
    items: tuple[Exercise, ...]


# ---------------------------------------------------------------------------- parsing
def _check_name(node: ast.AST) -> str | None:
    """The check a call calls (``exercises.check_x(...)`` or ``check_x(...)``), else None."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id == "exercises"
    ):
        name = func.attr
    elif isinstance(func, ast.Name):
        name = func.id
    else:
        return None
    return name if name.startswith("check_") and callable(getattr(exercises, name, None)) else None


def _calls_with_guards(tree: ast.AST) -> list[tuple[ast.Call, tuple[str, ...]]]:
    """Every check call in ``tree``, in source order, with the ``if`` conditions it runs
    under (``not (...)`` in an ``else`` branch)."""
    found: list[tuple[ast.Call, tuple[str, ...]]] = []

    def visit(node: ast.AST, guards: tuple[str, ...]) -> None:
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            visit(node.test, guards)
            for child in node.body:
                visit(child, (*guards, test))
            for child in node.orelse:
                visit(child, (*guards, f"not ({test})"))
            return
        if isinstance(node, ast.Call) and _check_name(node) is not None:
            found.append((node, guards))
        for child in ast.iter_child_nodes(node):
            visit(child, guards)

    visit(tree, ())
    return found


def _parse(source: str) -> ast.Module:
    """``source`` parsed, or an empty module when it is not Python (e.g. a cell magic)."""
    try:
        return ast.parse(source)
    except SyntaxError:
        return ast.Module(body=[], type_ignores=[])


def _checked(call: ast.Call) -> str:
    """The name of the check that a check call (one :func:`_calls_with_guards` found) calls."""
    name = _check_name(call)
    if name is None:
        raise ValueError(f"not a check call: {ast.unparse(call)}")
    return name


def _bind(call: ast.Call) -> dict[str, ast.expr]:
    """The call's argument expressions by the check's parameter names."""
    name = _checked(call)
    keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
    try:
        bound = inspect.signature(getattr(exercises, name)).bind_partial(*call.args, **keywords)
    except TypeError as err:
        raise ValueError(f"{ast.unparse(call)}: {err}") from err
    return dict(bound.arguments)


def _lines(source: str, node: ast.stmt) -> list[str]:
    """The source lines of a statement (its trailing comment included)."""
    return source.splitlines()[node.lineno - 1 : node.end_lineno]


def _solution_code(assignments: list[tuple[str, str, tuple[str, ...]]]) -> str:
    """``name = expression`` lines, those with conditions under an ``if``."""
    lines: list[str] = []
    for guards, group in itertools.groupby(assignments, key=lambda a: a[2]):
        body = [f"{name} = {expr}" for name, expr, _ in group]
        if guards:
            test = guards[0] if len(guards) == 1 else " and ".join(f"({g})" for g in guards)
            lines += [f"if {test}:", *(f"    {line}" for line in body)]
        else:
            lines += body
    return "\n".join(lines)


def _answer_cell(nb: Any) -> int:
    """The index of the notebook's answer cell: the one code cell, not tagged
    ``solution``, that calls a classroom check; ``ValueError`` naming the candidates when
    there is none or more than one (the exercises would be ambiguous)."""
    answer_cells = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        and not exercises.is_solution(cell)
        and _calls_with_guards(_parse(cell.source))
    ]
    if len(answer_cells) != 1:
        raise ValueError(f"expected one answer cell calling classroom checks, found {answer_cells}")
    return answer_cells[0]


def _unanswered_name(stmt: ast.stmt) -> str | None:
    """The name of an answer line ``name = None`` (where the student puts a value), or
    None when ``stmt`` is anything else."""
    if (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and isinstance(stmt.value, ast.Constant)
        and stmt.value.value is None
    ):
        return stmt.targets[0].id
    return None


def _answer_statements(
    tree: ast.Module, source: str
) -> tuple[dict[str, ast.stmt], list[tuple[ast.stmt, ast.Call]], list[str]]:
    """Sort the answer cell's top-level statements (``tree`` parsed from ``source``):
    ``(unanswered, calls, setup)``, the ``name = None`` lines by name in order, each
    statement calling a check with that call (in order: exercise 1, 2, ...) and the source
    lines of everything else. ``ValueError`` for a statement calling two checks."""
    unanswered: dict[str, ast.stmt] = {}
    calls: list[tuple[ast.stmt, ast.Call]] = []
    setup: list[str] = []
    for stmt in tree.body:
        found = [c for c, _ in _calls_with_guards(stmt)]
        if len(found) > 1:
            raise ValueError(f"one check per statement: {ast.unparse(stmt)}")
        if found:
            calls.append((stmt, found[0]))
        elif (name := _unanswered_name(stmt)) is not None:
            unanswered[name] = stmt
        else:
            setup += _lines(source, stmt)
    return unanswered, calls, setup


def _solution_assignments(
    number: int,
    check: str,
    call: ast.Call,
    names: list[str],
    solved: dict[str, tuple[dict[str, ast.expr], tuple[str, ...]]],
) -> list[tuple[str, str, tuple[str, ...]]]:
    """``(name, solution expression, guards)`` for each answer ``name`` of exercise
    ``number``: the expression the solution cells' (last) call of ``check`` passes to the
    parameter that the answer cell's ``call`` passes ``name`` to, under that call's ``if``
    guards (``solved``: check -> (bound arguments, guards)). ``ValueError`` when no
    solution cell gives a value for an answer."""
    args = _bind(call)
    sol_args, guards = solved.get(check, ({}, ()))
    assignments = []
    for name in names:
        params = [p for p, a in args.items() if isinstance(a, ast.Name) and a.id == name]
        given = [sol_args[p] for p in params if p in sol_args]
        if not given:
            raise ValueError(
                f"exercise {number}: no solution cell calls {check} with a value for {name}"
            )
        assignments.append((name, ast.unparse(given[0]), guards))
    return assignments


def parse_exercises(nb: Any) -> Exercises:
    """The exercises of a tutorial notebook (an ``nbformat`` notebook, e.g. from
    ``jupytext.read``).

    The answer cell is the one code cell without the ``solution`` tag that calls checks
    of :mod:`rlcd_lab.classroom.exercises` (as ``exercises.check_...``); each of its
    top-level statements calls at most one.
    Raises ``ValueError`` when there is no such cell or more than one, when a statement
    calls two checks, or when an answer has no solution (no solution cell passes a value
    to that parameter of that check).

    Every tutorial ends with an *answer cell* (``name = None`` lines and one
    ``print("k:", exercises.check_...(...))`` line per exercise), and its ``solution``-tagged
    cells (kept apart, appended by :func:`rlcd_lab.classroom.exercises.with_solutions`) work
    the exercises out and end by calling the same checks on the solutions.
    :func:`parse_exercises` reads that structure with :mod:`ast`: exercise ``k`` is the
    ``k``-th check call of the answer cell, its answers are the ``None`` names that call
    uses, and the solution of each answer is the expression the solution cells pass to the
    same parameter of the same check (under the same ``if`` conditions). Nothing about the
    solutions is written twice: the graded test cells call the checks through
    :func:`rlcd_lab.classroom.exercises.assert_correct`, and the solutions come from the notebook.
    """
    index = _answer_cell(nb)
    source = nb.cells[index].source
    tree = ast.parse(source)
    worked = "\n\n".join(
        c.source for c in nb.cells if c.cell_type == "code" and exercises.is_solution(c)
    )
    solved: dict[str, tuple[dict[str, ast.expr], tuple[str, ...]]] = {}
    for call, guards in _calls_with_guards(ast.parse(worked)):  # the last call of each check
        solved[_checked(call)] = (_bind(call), guards)
    unanswered, calls, setup = _answer_statements(tree, source)

    items, taken = [], set()
    for number, (stmt, call) in enumerate(calls, start=1):
        check = _checked(call)
        names = [
            n
            for n in unanswered
            if n not in taken and any(isinstance(a, ast.Name) and a.id == n for a in ast.walk(call))
        ]
        taken.update(names)
        assignments = _solution_assignments(number, check, call, names, solved)
        items.append(
            Exercise(
                number=number,
                check=check,
                call=ast.get_source_segment(source, call) or ast.unparse(call),
                answers=tuple(line for n in names for line in _lines(source, unanswered[n])),
                solution=_solution_code(assignments),
                feedback="\n".join(_lines(source, stmt)),
            )
        )
    setup += [line for n, s in unanswered.items() if n not in taken for line in _lines(source, s)]
    return Exercises(index, "\n".join(setup), worked, tuple(items))


# --------------------------------------------------------------------------- builders
def _graded_call(exercise: Exercise) -> str:
    """The test cell: imports ``exercises`` itself, so it passes or fails on the answers
    alone, whatever the student did to the other cells."""
    return f"from rlcd_lab.classroom import exercises\n\nexercises.assert_correct({exercise.call})"


def _prompt(exercise: Exercise, also: str = "") -> str:
    return (
        f"**Exercise {exercise.number}** (checked by `exercises.{exercise.check}`): replace "
        f"each `None` in the next cell with your answer{also} and run it."
    )


def _answer_source(exercise: Exercise, worked: str, begin: str, end: str, first: bool) -> str:
    hidden = [begin]
    if first and worked:
        hidden += ["# the tutorial's solution cells (the later solutions read their variables)"]
        hidden += [worked, "# the answers"]
    hidden += [exercise.solution, end]
    return "\n".join([*exercise.answers, *hidden, exercise.feedback])


def _kept_cells(cells: Sequence[Any]) -> list[Any]:
    """Copies of ``cells`` without solution cells, outputs and execution counts."""
    kept = []
    for cell in cells:
        if exercises.is_solution(cell):
            continue
        cell = copy.deepcopy(cell)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        kept.append(cell)
    return kept


def _new_notebook(nb: Any, cells: list[Any]) -> Any:
    import nbformat

    out = nbformat.v4.new_notebook(cells=cells, metadata=copy.deepcopy(dict(nb.metadata)))
    out.metadata.pop("jupytext", None)
    return out


def nbgrader_notebook(nb: Any, points: float = 1) -> Any:
    """The nbgrader source notebook of a tutorial (its exercises as
    :func:`parse_exercises` reads them).

    Per exercise: a markdown prompt; an autograded-answer cell (``solution: true``,
    ``grade_id`` ``answer_k``) holding the answer lines, the solution between
    ``### BEGIN SOLUTION`` and ``### END SOLUTION`` (``nbgrader generate_assignment``
    replaces it with its code stub) and the feedback line; and a locked autograder test
    cell (``grade: true``, ``grade_id`` ``exercise_k``, ``points``) that runs
    ``exercises.assert_correct(check(...))``. Cells before the answer cell are kept without
    nbgrader metadata; solution cells are dropped (their code is in exercise 1's solution).

    The first exercise's hidden solution also runs the tutorial's solution cells (the
    solutions of the later exercises read the variables they compute), so a filled copy is
    graded on exactly what the tutorial's own solution cells assert. The cells before the
    answer cell are kept as they are (outputs dropped), without grader metadata.
    """
    import nbformat

    ex = parse_exercises(nb)

    def graded(cell: Any, grade_id: str, **meta: Any) -> Any:
        cell.metadata["nbgrader"] = {
            "grade": False,
            "grade_id": grade_id,
            "locked": False,
            "schema_version": NBGRADER_SCHEMA,
            "solution": False,
            "task": False,
            **meta,
        }
        return cell

    cells = _kept_cells(nb.cells[: ex.index])
    if ex.setup:
        cells.append(nbformat.v4.new_code_cell(ex.setup))
    for i, e in enumerate(ex.items):
        source = _answer_source(e, ex.worked, "### BEGIN SOLUTION", "### END SOLUTION", i == 0)
        cells += [
            nbformat.v4.new_markdown_cell(_prompt(e, NBGRADER_ALSO)),
            graded(nbformat.v4.new_code_cell(source), f"answer_{e.number}", solution=True),
            graded(
                nbformat.v4.new_code_cell(_graded_call(e)),
                f"exercise_{e.number}",
                grade=True,
                locked=True,
                points=points,
            ),
        ]
    cells += _kept_cells(nb.cells[ex.index + 1 :])
    return _new_notebook(nb, cells)


def otter_notebook(nb: Any, name: str, points: float = 1) -> Any:
    """The otter-grader master notebook of a tutorial (its exercises as
    :func:`parse_exercises` reads them).

    A ``# ASSIGNMENT CONFIG`` raw cell first (assignment ``name``, no PDF export cell;
    otter's other defaults, so ``otter assign`` tests the solutions, executing the notebook,
    unless called with ``--no-run-tests``), then the cells before the answer cell, the
    answer cell's setup, and per exercise a question ``exercise_k`` worth ``points``: a
    prompt, a ``# BEGIN SOLUTION`` block with the answer cell (its solution between
    ``# BEGIN SOLUTION NO PROMPT`` and ``# END SOLUTION`` comments, which ``otter assign``
    strips from the student notebook) and a ``# BEGIN TESTS`` block with the test cell
    ``exercises.assert_correct(...)``.
    """
    import nbformat

    ex = parse_exercises(nb)
    raw = nbformat.v4.new_raw_cell
    config = [
        "# ASSIGNMENT CONFIG",
        f"name: {name}",
        "export_cell: false",
    ]
    cells = [raw("\n".join(config)), *_kept_cells(nb.cells[: ex.index])]
    if ex.setup:
        cells.append(nbformat.v4.new_code_cell(ex.setup))
    for i, e in enumerate(ex.items):
        source = _answer_source(
            e, ex.worked, "# BEGIN SOLUTION NO PROMPT", "# END SOLUTION", i == 0
        )
        cells += [
            raw(f"# BEGIN QUESTION\nname: exercise_{e.number}\npoints: {points}"),
            nbformat.v4.new_markdown_cell(_prompt(e)),
            raw("# BEGIN SOLUTION"),
            nbformat.v4.new_code_cell(source),
            raw("# END SOLUTION"),
            raw("# BEGIN TESTS"),
            nbformat.v4.new_code_cell(_graded_call(e)),
            raw("# END TESTS"),
            raw("# END QUESTION"),
        ]
    cells += _kept_cells(nb.cells[ex.index + 1 :])
    return _new_notebook(nb, cells)


def write_assignments(
    src_dir: str | Path = "notebooks",
    out_dir: str | Path = "student",
    fmt: str = "nbgrader",
    points: float = 1,
    solutions_dir: str | Path = exercises.SOLUTIONS_DIR,
) -> list[Path]:
    """Write an assignment in grader format ``fmt`` for every tutorial in ``src_dir``, with
    its solution cells from ``solutions_dir`` (:func:`rlcd_lab.classroom.exercises.with_solutions`).

    ``nbgrader``: ``<out_dir>/source/<name>/<name>.ipynb`` (:func:`nbgrader_notebook`), so
    ``out_dir`` can be the course directory (or its ``source/`` folders copied into one);
    ``otter``: ``<out_dir>/<name>/<name>.ipynb`` (:func:`otter_notebook`), the master
    notebook for ``otter assign``. ``<name>`` is the tutorial's stem, e.g.
    ``01_proper_scores_and_proposition1``, and is also the assignment's name. Returns the
    written paths, sorted. Raises ``ValueError`` for another ``fmt``, ``points`` that are not
    a finite number > 0 (NaN would be written as invalid JSON), or a tutorial whose
    exercises :func:`parse_exercises` cannot read, and ``FileNotFoundError`` when
    ``src_dir`` holds no tutorial or a tutorial has no solutions file.
    """
    import nbformat

    if fmt not in FORMATS:
        raise ValueError(f"unknown grader format {fmt!r}: use one of {FORMATS}")
    if not (math.isfinite(points) and points > 0):  # NaN or inf would write invalid JSON
        raise ValueError(f"points must be a finite number > 0, got {points}")
    sources = sorted(Path(src_dir).glob(exercises.NOTEBOOK_GLOB))
    if not sources:
        raise FileNotFoundError(f"no tutorial notebooks ({exercises.NOTEBOOK_GLOB}) in {src_dir}")
    written = []
    for path in sources:
        nb, name = exercises.with_solutions(path, solutions_dir), path.stem
        if fmt == "nbgrader":
            out, target = nbgrader_notebook(nb, points), Path(out_dir, "source", name)
        else:
            out, target = otter_notebook(nb, name, points), Path(out_dir, name)
        target.mkdir(parents=True, exist_ok=True)
        nbformat.write(out, target / f"{name}.ipynb")
        written.append(target / f"{name}.ipynb")
    return sorted(written)
