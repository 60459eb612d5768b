"""nbgrader and otter-grader assignments from the tutorials (rlcd_lab.classroom.assignments,
``make student`` with ``--format nbgrader|otter``): every tutorial's exercises parse into
answers, solutions taken from its solution cells and graded test cells that call the
classroom checks; then the real tools grade a filled, a partly filled and an unfilled
copy of notebook 1's exercises and give the points the checks say.

The grading tests run the tools as an instructor does (``nbgrader generate_assignment``
and ``nbgrader autograde`` on a temporary course directory; ``otter assign`` and ``otter
run``, which grades locally without Docker) in the Python named by
``RLCD_LAB_GRADERS_PYTHON`` (else this one), and skip when the tool is not installed
there (``make test`` names ``.venv-graders``'s, where both are). To
stay near a minute on one core they grade notebook 1's setup cell and its exercises (the
answer and solution cells, which need only that setup) rather than the whole tutorial.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO

import jupytext
import nbformat
import pytest

from rlcd_lab.classroom import assignments, exercises, student
from rlcd_lab.classroom.exercises import Feedback

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
SOLUTIONS = REPO / exercises.SOLUTIONS_DIR
NAME = "01_proper_scores_and_proposition1"  # the quickest tutorial (about 20 s at ci scale)
EXERCISES = ("exercise_1", "exercise_2", "exercise_3")

# The right answers to notebook 1's exercises, derived by hand:
# 1. E[2 u_Y] = 2 (0.7 p + 0.3 (1 - p)) grows with p: best report p = 1, where it is 1.4,
#    against 2 (0.7^2 + 0.3^2) = 1.16 at the truthful p = 0.7: a gain of 0.24;
# 3. the optimum 1/2 + (2 q_1 - 1) / (2 lambda) leaves p_1 = 1 for lambda > 2 q_1 - 1 = 0.4,
#    so 1.0 is a wrong answer.
RIGHT_1 = "best_p = 1.0\noverconfidence_gain = 0.24\n"
WRONG_3 = "lambda_threshold = 1.0\n"


# ---------------------------------------------------------------------------- helpers
TOOLS_PYTHON = os.environ.get("RLCD_LAB_GRADERS_PYTHON") or sys.executable
"""The Python the graders run in: ``make test`` installs both into ``.venv-graders``, not
``.venv`` (whose JupyterLab students use), and names it here."""


def grader(module: str, minversion: str) -> None:
    """Skip unless the grader ``module`` at ``minversion`` or later is installed in
    :data:`TOOLS_PYTHON` (with ``RLCD_LAB_REQUIRE_GRADERS=1``, as ``make test`` sets, a
    missing one fails instead)."""
    check = (
        f"import sys, {module}; from packaging.version import Version as V; "
        f"sys.exit(V({module}.__version__) < V({minversion!r}))"
    )
    found = subprocess.run([TOOLS_PYTHON, "-c", check], capture_output=True, text=True)
    if found.returncode == 0:
        return
    why = f"{module} >= {minversion} is not installed in {TOOLS_PYTHON}: {found.stderr[-300:]}"
    if os.environ.get("RLCD_LAB_REQUIRE_GRADERS") == "1":
        pytest.fail(why)
    pytest.skip(why)


def graded_ids(nb: nbformat.NotebookNode) -> dict[str, nbformat.NotebookNode]:
    return {
        c.metadata["nbgrader"]["grade_id"]: c
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade_id")
    }


def error_message(cell: nbformat.NotebookNode) -> str:
    """The ``AssertionError`` text of an executed test cell ('' when it passed)."""
    errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
    return errors[0].evalue if errors else ""


def tool_env(tmp_path: Path) -> dict[str, str]:
    """The graders' environment: their venv's scripts first on PATH (nbgrader runs
    ``alembic`` from there), ci scale, one thread, and no user Jupyter config."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(TOOLS_PYTHON).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(
        RLCD_SCALE="ci",
        OMP_NUM_THREADS="1",
        TQDM_DISABLE="1",
        JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter-config"),
    )
    return env


def start_tool(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[subprocess.Popen, IO]:
    """``python -m ARGS`` started in ``cwd``, its output (stdout, then stderr) to a file."""
    log = tempfile.TemporaryFile("w+")
    cmd = [TOOLS_PYTHON, "-m", *args]
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT), log


def finish_tools(started: list[tuple[subprocess.Popen, IO]]) -> list[str]:
    """Wait for every tool started by :func:`start_tool`; each must exit 0. Their outputs."""
    outputs = []
    for proc, log in started:
        proc.wait()
        log.seek(0)
        outputs.append(log.read())
        log.close()
    for (proc, _), output in zip(started, outputs, strict=True):
        assert proc.returncode == 0, output[-6000:]
    return outputs


def run_tool(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    (output,) = finish_tools([start_tool(args, cwd, env)])
    return output


def run_tool_code(code: str, cwd: Path, env: dict[str, str]) -> str:
    """What ``code`` prints, run by :data:`TOOLS_PYTHON` in ``cwd`` (it must exit 0)."""
    cmd = [TOOLS_PYTHON, "-c", code]
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-6000:]
    return done.stdout


@pytest.fixture(scope="module")
def exercises_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Notebook 1 reduced to its setup cell (imports, scale) and everything from its
    '## Exercises' cell on (exercises, answer cell), under its own name in ``notebooks/``,
    its solution cells in ``solutions/`` beside it."""
    nb = jupytext.read(NOTEBOOKS / f"{NAME}.py")
    setup = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    start = next(i for i, c in enumerate(nb.cells) if "## Exercises" in c.source)
    nb.cells = nb.cells[: setup + 1] + nb.cells[start:]
    root = tmp_path_factory.mktemp("src")
    (root / "notebooks").mkdir()
    (root / "solutions").mkdir()
    jupytext.write(nb, root / "notebooks" / f"{NAME}.py", fmt="py:percent")
    shutil.copy(SOLUTIONS / f"{NAME}.py", root / "solutions")
    return root / "notebooks"


# ------------------------------------------------------------------ assert_correct
def test_assert_correct_passes_only_a_right_answer():
    assert exercises.assert_correct(exercises.check_certainty_threshold(0.4)) is None
    for feedback, prefix in (
        (exercises.check_certainty_threshold(1.0), "not yet: "),
        (exercises.check_certainty_threshold(None), "not answered yet"),
        (exercises.check_fair_budget(None, None, 8), "nothing to check"),
    ):
        with pytest.raises(AssertionError) as err:
            exercises.assert_correct(feedback)
        assert str(err.value) == str(feedback) and str(err.value).startswith(prefix)
    with pytest.raises(TypeError):
        exercises.assert_correct(True)  # type: ignore[arg-type]
    assert exercises.assert_correct(Feedback(True, "correct: x")) is None


# ------------------------------------------------------- every tutorial, no grader
@pytest.mark.parametrize("name", sorted(exercises.CHECKS))
def test_every_tutorial_parses_into_graded_exercises(name):
    nb = exercises.with_solutions(NOTEBOOKS / f"{name}.py", SOLUTIONS)
    ex = assignments.parse_exercises(nb)
    assert tuple(e.check for e in ex.items) == exercises.CHECKS[name]
    assert ex.setup == "from rlcd_lab.classroom import exercises"
    answer_cell = nb.cells[ex.index].source
    unanswered = re.findall(r"^(\w+) = None", answer_cell, re.M)
    answered = [line.split(" = ")[0] for e in ex.items for line in e.answers]
    assert answered == unanswered  # each None once, in the answer cell's order
    for e in ex.items:
        assert f"exercises.{e.check}(" in e.call and e.feedback in answer_cell
        tree = ast.parse(e.solution)
        solved = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets}
        assert solved == {line.split(" = ")[0] for line in e.answers}

    graded = graded_ids(assignments.nbgrader_notebook(nb, points=2))
    assert list(graded) == [f"{k}_{i}" for i in (1, 2, 3) for k in ("answer", "exercise")]
    for i, e in enumerate(ex.items, start=1):
        answer, test = graded[f"answer_{i}"], graded[f"exercise_{i}"]
        assert answer.metadata["nbgrader"]["solution"] and not answer.metadata["nbgrader"]["grade"]
        lines = answer.source.splitlines()
        begin, end = lines.index("### BEGIN SOLUTION"), lines.index("### END SOLUTION")
        assert lines[:begin] == list(e.answers) and lines[end + 1 :] == e.feedback.splitlines()
        assert test.metadata["nbgrader"] | {"grade_id": None} == {
            "grade": True,
            "grade_id": None,
            "locked": True,
            "points": 2,
            "schema_version": 3,
            "solution": False,
            "task": False,
        }
        assert test.source.endswith(f"exercises.assert_correct({e.call})")
    assert ex.worked in graded["answer_1"].source  # the solution cells run in exercise 1

    otter = assignments.otter_notebook(nb, name)
    raw = [c.source.splitlines()[0] for c in otter.cells if c.cell_type == "raw"]
    assert raw[0] == "# ASSIGNMENT CONFIG"
    per_question = ["# BEGIN QUESTION", "# BEGIN SOLUTION", "# END SOLUTION", "# BEGIN TESTS"]
    assert raw[1:] == 3 * [*per_question, "# END TESTS", "# END QUESTION"]
    assert not any(exercises.is_solution(c) for c in otter.cells)
    # the graders' own markers appear nowhere else, so the cells the assignments keep as
    # they are (here not run through the tools, unlike notebook 1's exercises) pass
    # through nbgrader and otter assign unchanged
    markers = re.compile(
        r"BEGIN (SOLUTION|HIDDEN TESTS|QUESTION|TESTS|PROMPT)|# (IGNORE|SEED)$|```otter", re.M
    )
    assert not [c.source for c in nb.cells if markers.search(c.source)]


def notebook(answer: str, solution: str) -> nbformat.NotebookNode:
    cells = [nbformat.v4.new_markdown_cell("## Exercises"), nbformat.v4.new_code_cell(answer)]
    cells.append(nbformat.v4.new_code_cell(solution, metadata={"tags": ["solution"]}))
    return nbformat.v4.new_notebook(cells=cells)


def test_solutions_come_from_the_solution_cells_under_their_conditions():
    answer = (
        "from rlcd_lab.classroom import exercises\n\n"
        "lam = None  # 1: a comment\n"
        "band = None\n"
        'print("1:", exercises.check_certainty_threshold(lam, q1=0.7))\n'
        'print("2:", exercises.check_escalation_band(band, c_fa=5))\n'
    )
    solution = (
        "x = 0.4\n"
        "if SCALE == 'ci':\n"
        "    pass\n"
        "else:\n"
        "    if ready:\n"
        "        f = exercises.check_certainty_threshold(q1=0.7, lam=x)\n"
        "f = exercises.check_escalation_band((0.5, 0.9), 5)\n"
    )
    ex = assignments.parse_exercises(notebook(answer, solution))
    assert (
        ex.index == 1
        and ex.setup == "from rlcd_lab.classroom import exercises"
        and ex.worked == solution
    )
    one, two = ex.items
    assert one.answers == ("lam = None  # 1: a comment",) and two.answers == ("band = None",)
    assert one.call == "exercises.check_certainty_threshold(lam, q1=0.7)"
    assert one.solution == "if (not (SCALE == 'ci')) and (ready):\n    lam = x"
    assert two.solution == "band = (0.5, 0.9)"  # positional in one call, keyword in the other
    with pytest.raises(ValueError, match="no solution cell calls check_escalation_band"):
        assignments.parse_exercises(notebook(answer, solution.rsplit("f = ", 1)[0]))
    with pytest.raises(ValueError, match="one answer cell"):
        assignments.parse_exercises(notebook("x = 1", solution))


def test_command_line_writes_grader_formats(tmp_path, capsys):
    for fmt, where in (
        ("nbgrader", f"source/{NAME}/{NAME}.ipynb"),
        ("otter", f"{NAME}/{NAME}.ipynb"),
    ):
        out = tmp_path / fmt
        argv = ["student", "--src", str(NOTEBOOKS), "--out", str(out), "--format", fmt]
        assert student.main([*argv, "--solutions", str(SOLUTIONS), "--points", "2"]) == 0
        listed = capsys.readouterr().out.split()
        assert len(listed) == len(exercises.CHECKS) and str(out / where) in listed
    with pytest.raises(ValueError, match="grader format"):
        assignments.write_assignments(NOTEBOOKS, tmp_path / "x", "gradescope")
    # --format ours (the default) still writes the plain student copies
    assert student.main(["student", "--src", str(NOTEBOOKS), "--out", str(tmp_path / "o")]) == 0
    assert len(list((tmp_path / "o").glob("*.ipynb"))) == len(exercises.CHECKS)


@pytest.mark.parametrize("fmt", assignments.FORMATS)
def test_command_line_default_points(tmp_path, capsys, fmt):
    """``make student STUDENT_FORMAT=nbgrader|otter`` passes no ``--points``: the default
    (1 point per exercise) is written as the integer 1, on every Python (``int`` has no
    ``is_integer`` before 3.12, and argparse does not convert a non-string default)."""
    out = tmp_path / fmt
    argv = ["student", "--src", str(NOTEBOOKS), "--out", str(out), "--format", fmt]
    argv += ["--solutions", str(SOLUTIONS)]
    assert student.main(argv) == 0
    listed = [Path(p) for p in capsys.readouterr().out.split()]
    assert len(listed) == len(exercises.CHECKS)
    nb = nbformat.read(next(p for p in listed if p.stem == NAME), as_version=4)
    if fmt == "nbgrader":
        points = [graded_ids(nb)[e].metadata["nbgrader"]["points"] for e in EXERCISES]
    else:
        heads = [c.source for c in nb.cells if c.source.startswith("# BEGIN QUESTION")]
        points = [yaml_points(h) for h in heads]
    assert points == [1, 1, 1] and all(type(p) is int for p in points), points
    # a fractional --points stays a float
    assert student.main([*argv, "--points", "0.5"]) == 0
    capsys.readouterr()
    nb = nbformat.read(next(p for p in listed if p.stem == NAME), as_version=4)
    text = json.dumps(nb)
    assert ('"points": 0.5' if fmt == "nbgrader" else "points: 0.5") in text


def yaml_points(question: str) -> int | float:
    """The ``points:`` of an otter ``# BEGIN QUESTION`` cell, as otter's YAML reads it."""
    (value,) = re.findall(r"^points: (\S+)$", question, re.M)
    return int(value) if re.fullmatch(r"-?\d+", value) else float(value)


# ------------------------------------------------------------------- nbgrader 0.9
@pytest.mark.slow
def test_nbgrader_autograde_scores_filled_partial_and_unfilled(tmp_path, exercises_src):
    """generate_assignment, then autograde three submissions in one run: the source
    notebook (solutions in: 3 of 3), the released student copy as handed out (0 of 3:
    every check says 'not answered yet') and that copy with exercise 1 right and exercise
    3 wrong (1 of 3; exercise 3 fails with the check's hint)."""
    grader("nbgrader", "0.9")
    course, env = tmp_path / "course", tool_env(tmp_path)
    solutions = exercises_src.parent / "solutions"
    (source,) = assignments.write_assignments(exercises_src, course, "nbgrader", 1, solutions)
    assert source == course / "source" / NAME / f"{NAME}.ipynb"
    run_tool(["nbgrader", "generate_assignment", NAME, "--CourseDirectory.root=."], course, env)
    release = nbformat.read(course / "release" / NAME / f"{NAME}.ipynb", as_version=4)
    released = graded_ids(release)
    assert "raise NotImplementedError()" in released["answer_1"].source
    assert "best_report" not in released["answer_1"].source  # the solution is gone

    partial = nbformat.from_dict(json.loads(json.dumps(release)))
    answers = graded_ids(partial)
    for grade_id, answer in (("answer_1", RIGHT_1), ("answer_3", WRONG_3)):
        cell = answers[grade_id]
        cell.source = cell.source.replace("# YOUR CODE HERE\nraise NotImplementedError()\n", answer)
    copies = {
        "filled": nbformat.read(source, as_version=4),
        "unfilled": release,
        "partial": partial,
    }
    for name_, nb in copies.items():
        path = course / "submitted" / name_ / NAME / f"{NAME}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
    run_tool(["nbgrader", "autograde", NAME, "--CourseDirectory.root=."], course, env)

    read = f"""
import json
from nbgrader.api import Gradebook
with Gradebook("sqlite:///gradebook.db") as gb:
    print(json.dumps({{
        "max": gb.find_submission({NAME!r}, "filled").max_score,
        "scores": {{
            s: {{g.name: g.score for nb in gb.find_submission({NAME!r}, s).notebooks
                for g in nb.grades}}
            for s in {list(copies)!r}
        }},
    }}))
"""  # the gradebook read by nbgrader's own API, in the graders' Python
    book = json.loads(run_tool_code(read, course, env))
    scores = book["scores"]
    assert book["max"] == 3
    assert scores["filled"] == dict.fromkeys(EXERCISES, 1.0)
    assert scores["unfilled"] == dict.fromkeys(EXERCISES, 0.0)
    assert scores["partial"] == {"exercise_1": 1.0, "exercise_2": 0.0, "exercise_3": 0.0}

    graded = {
        student: graded_ids(
            nbformat.read(course / "autograded" / student / NAME / f"{NAME}.ipynb", as_version=4)
        )
        for student in copies
    }
    for e in EXERCISES:
        assert error_message(graded["filled"][e]) == ""
        assert error_message(graded["unfilled"][e]).startswith("not answered yet")
    assert error_message(graded["partial"]["exercise_2"]).startswith("not answered yet")
    hint = error_message(graded["partial"]["exercise_3"])
    assert hint.startswith("not yet: lambda = 1 is not where the optimum leaves p_1 = 1"), hint


# ------------------------------------------------------------------- otter-grader 7
@pytest.mark.slow
def test_otter_assign_and_run_score_filled_and_unfilled(tmp_path, exercises_src):
    """otter assign on the master notebook, then otter run (local, no Docker) on the
    autograder notebook (solutions in: 3 of 3) and on the student notebook as handed out
    (0 of 3)."""
    grader("otter", "7")
    env = tool_env(tmp_path)
    solutions = exercises_src.parent / "solutions"
    (master,) = assignments.write_assignments(
        exercises_src, tmp_path / "masters", "otter", 1, solutions
    )
    assert master == tmp_path / "masters" / NAME / f"{NAME}.ipynb"
    # --no-run-tests: assign would execute the notebook to test the solutions, as the
    # grading of the filled copy below does
    assign = ["otter", "assign", "--no-pdfs", "--no-run-tests"]
    run_tool([*assign, str(master), "dist"], tmp_path, env)
    (zip_path,) = (tmp_path / "dist" / "autograder").glob(f"{NAME}-autograder_*.zip")
    student = tmp_path / "dist" / "student" / f"{NAME}.ipynb"
    text = student.read_text()
    assert "best_p = None" in text and "best_report" not in text
    assert 'grader.check(\\"exercise_3\\")' in text

    scores = {}
    filled = tmp_path / "dist" / "autograder" / f"{NAME}.ipynb"
    copies = {"filled": filled, "unfilled": student}
    outs = {copy: tmp_path / f"results-{copy}" for copy in copies}
    running = []
    for copy, path in copies.items():  # independent gradings (each in its own temp folder)
        outs[copy].mkdir()
        args = ["otter", "run", "-a", str(zip_path), "-o", str(outs[copy]), str(path)]
        running.append(start_tool(args, tmp_path, env))
    finish_tools(running)
    for copy, out in outs.items():
        tests = json.loads((out / "results.json").read_text())["tests"]
        scores[copy] = {t["name"]: t["score"] for t in tests if t["name"] in EXERCISES}
        if copy == "unfilled":  # each exercise fails with its check's message
            report = "\n".join(t.get("output", "") for t in tests)
            for e in EXERCISES:
                block = report.split(f"{e} results:")[1].split(" results:")[0]
                assert "AssertionError: not answered yet" in block, report
    assert scores["filled"] == dict.fromkeys(EXERCISES, 1.0)
    assert scores["unfilled"] == dict.fromkeys(EXERCISES, 0.0)
