"""The tutorial notebooks (``notebooks/*.py``, jupytext percent format) run top to bottom,
stay small, and neither they nor their student copies give an exercise's answer away.

The tutorials hold no solution: their solution cells are in ``instructors/solutions/``
(``exercises.with_solutions`` appends them). Each notebook is executed once, in a real
Jupyter kernel (nbclient) at ``RLCD_SCALE=ci``, in a temporary working directory with
``TMPDIR`` pointing there, so their training runs never land in the repository: first
its student copy (``make student``), then its solution cells in the same kernel, which
makes the full notebook. A cell that raises
fails the test; the notebooks assert their own key numbers (Proposition 1 residuals, the
cascade's accuracy identity, the shipped metrics). The executed notebook is under 1 MB
(figures as plotly JSON, plotly.js from JupyterLab's extension) and shows no progress bar.

No leak: every number a student can read in the student copy (its cells' text and
code, and its outputs: printed text, tables, figure legends and titles, not the figures'
data) and in the classroom's documentation (``docs/notebooks.md``,
``docs/instructors.md``) is tried
as each answer of each exercise in turn, the other answers kept right, by the exercise's
own check, in the kernel that holds the notebook's runs. A number leaks an answer when it
is that answer rounded to the digits it is written with and the check accepts it. Numbers
with fewer than three significant digits (grids, settings, and among the hundreds of
numbers a notebook prints, chance matches: "0.95") the obvious guesses and spreads after
``±`` are not counted. The right answers are those the solution cells gave the checks
(recorded as they ran), so nothing here repeats them.
"""

from __future__ import annotations

import ast
import inspect
import json
import math
import re
from pathlib import Path

import jupytext
import nbformat
import pytest

from rlcd_lab.classroom import exercises, student

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = REPO / "notebooks"
SOLUTIONS = REPO / exercises.SOLUTIONS_DIR
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.py"))
EXPECTED = [
    "01_proper_scores_and_proposition1",
    "02_system_one_collapse",
    "03_gradient_dilution",
    "04_calibrate_then_reinforce",
    "05_when_rl_cannot_help",
    "06_routing",
]


def test_all_six_notebooks_are_there():
    assert [p.stem for p in NOTEBOOKS] == EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_structure(path):
    """Cheap checks: a Python kernel, a SCALE switch read from the environment, a
    "where the numbers come from" statement, exercises, hidden solution cells kept apart
    (none in the tutorial a student opens), and imports from rlcd_lab only (no library
    logic defined in the notebook's imports)."""
    nb = jupytext.read(path)
    assert not any(exercises.is_solution(c) for c in nb.cells)
    nb = exercises.with_solutions(path, SOLUTIONS)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "SCALE = tutorial.get_scale()" in code
    assert "Where the numbers come from" in text
    assert "## Exercises" in text
    solutions = [c for c in nb.cells if "solution" in c.metadata.get("tags", [])]
    assert solutions and all(c.metadata["jupyter"]["source_hidden"] for c in solutions)
    local = [
        line
        for line in code.splitlines()
        if line.startswith(("import ", "from ")) and "rlcd_lab" not in line
    ]
    allowed = ("os", "warnings", "tempfile", "time", "numpy", "pandas", "plotly", "torch")
    allowed += ("IPython", "collections", "dataclasses", "pathlib")
    for line in local:
        assert line.split()[1].split(".")[0] in allowed, line


MAX_BYTES = 1_000_000
"""An executed notebook (outputs in, as nbformat writes it) stays under this: a class's
submissions are a hundred of them (plotly.js alone is 4.9 MB)."""
TRIVIAL = (0, 1, 0.5, -1, 2, 100)
"""Answers no output can leak: the obvious guesses of ``tests/test_classroom.py`` (the
checks ask for at least one other number besides them, which that test enforces)."""
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(%?)")
PLOTLY = "application/vnd.plotly.v1+json"


def numbers(text: str, where: str) -> dict[tuple[float, int], str]:
    """Every number written in ``text`` with its count of decimals (a percentage also as
    its fraction, two decimals more), to where it is written: ``where`` and its context."""
    found = {}
    for m in NUMBER.finditer(text):
        written = m.group(0).rstrip("%")
        value = float(written)
        if not math.isfinite(value) or "e" in written.lower():
            continue
        if text[: m.start()].rstrip().endswith("±"):
            continue  # a spread (standard error), not a value
        decimals = len(written.split(".")[1]) if "." in written else 0
        context = f"{where}: {text[max(0, m.start() - 40) : m.end() + 20]!r}"
        pairs = [(value, decimals)] + ([(value / 100, decimals + 2)] if m.group(1) else [])
        for x, digits in pairs:
            if x in TRIVIAL or len(f"{x:g}".lstrip("-0.").replace(".", "").rstrip("0")) < 3:
                continue  # a guess ("p=1.00"), or too few digits to tell from chance ("0.95")
            found.setdefault((x, digits), context)
    return found


def figure_text(fig: dict) -> str:
    """The text a reader sees on a plotly figure (JSON): every string in it (trace names,
    legend, titles, annotations, hover templates), not its data (numbers, or per-point
    text such as hover labels, one string per point)."""
    if isinstance(fig, dict):
        return " ".join(figure_text(v) for v in fig.values())
    if isinstance(fig, list):  # a list of strings is per-point text: data, not a label
        return " ".join(figure_text(v) for v in fig if not isinstance(v, str))
    return fig if isinstance(fig, str) else ""


def shown_numbers(cells: list) -> dict[tuple[float, int], str]:
    """The numbers a reader sees in the outputs of ``cells`` (:func:`numbers`): streams,
    text, HTML and Markdown (tables), errors and the text of plotly figures (not their
    data, nor the ``text/plain`` repr a figure's output carries beside it)."""
    found = {}
    for i, cell in enumerate(cells):
        parts = []
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.append(" ".join(out.get("traceback", [])))
            bundle = out.get("data", {})
            if PLOTLY in bundle:  # JupyterLab draws the figure, not its text/plain repr
                bundle = {PLOTLY: figure_text(bundle[PLOTLY])}
            parts.extend(str(data) for data in bundle.values())
        for key, where in numbers("\n".join(parts), f"output of cell {i}").items():
            found.setdefault(key, where)
    return found


def answer_parameters(cell_source: str) -> dict[str, list[str]]:
    """Per check called in an answer cell, the names of its parameters that the cell fills
    with the student's answers (the variables it assigns ``None``)."""
    tree = ast.parse(cell_source)
    stubs = {
        t.id
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        if node.value.value is None
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    found = {}
    for node in ast.walk(tree):
        func = getattr(node, "func", None)
        if not (isinstance(func, ast.Attribute) and func.attr.startswith("check_")):
            continue
        params = list(inspect.signature(getattr(exercises, func.attr)).parameters)
        names = [params[i] for i, a in enumerate(node.args) if getattr(a, "id", "") in stubs]
        names += [k.arg for k in node.keywords if getattr(k.value, "id", "") in stubs]
        found[func.attr] = names
    return found


RECORD = """\
from rlcd_lab.classroom import exercises as _ex
_RECORDS = []
def _recorded(name, check):
    def call(*args, **kwargs):
        feedback = check(*args, **kwargs)
        _RECORDS.append((name, check, args, kwargs, feedback.ok))
        return feedback
    return call
for _name in [n for n in dir(_ex) if n.startswith("check_")]:
    setattr(_ex, _name, _recorded(_name, getattr(_ex, _name)))
"""


def leak_probe(records, answers, shown, trivial):
    """Run in the kernel after the solution cells: for each check call the solutions made
    that passed, each numeric answer (or number inside a list, tuple or dict answer) that is
    not ``trivial``, and each number of ``shown`` (``[[number, decimals], where]`` pairs)
    that is that answer rounded to as many decimals: the check called again with that
    number in its place. Returns the calls that still pass (the answer is shown, to a
    precision the check accepts): ``[check, parameter, part, number, where]``."""
    import inspect
    import numbers as nums

    leaks = []
    for name, check, args, kwargs, ok in records:
        if ok is not True:
            continue
        bound = inspect.signature(check).bind(*args, **kwargs)
        for param in answers.get(name, []):
            value = bound.arguments[param]
            parts = (
                value.items()
                if isinstance(value, dict)
                else (enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)])
            )
            for key, leaf in list(parts):
                if isinstance(leaf, bool) or not isinstance(leaf, nums.Real):
                    continue
                if any(float(leaf) == t for t in trivial):
                    continue
                for (x, decimals), where in shown:
                    if abs(round(float(leaf), decimals) - x) > 1e-12 * (1 + abs(x)):
                        continue
                    if key is None:
                        new = x
                    elif isinstance(value, dict):
                        new = {**value, key: x}
                    else:
                        new = type(value)(x if i == key else v for i, v in enumerate(value))
                    trial = dict(bound.arguments, **{param: new})
                    if check(**trial).ok is True:
                        leaks.append([name, param, str(key), x, where])
    return leaks


def source_numbers(cells: list) -> dict[tuple[float, int], str]:
    """The numbers written in the text and code of ``cells`` (:func:`numbers`): what a
    student reads in the tutorial's file before running anything."""
    found = {}
    for i, cell in enumerate(cells):
        for key, where in numbers(cell.source, f"source of cell {i}").items():
            found.setdefault(key, where)
    return found


def documentation_numbers() -> dict[tuple[float, int], str]:
    """Every number in what a student reads about the tutorials besides the notebooks: the
    classroom's docs (the README's and the other docs' tables of shipped results, thousands
    of three-digit numbers, are data like the notebooks' figures)."""
    found = {}
    for path in [REPO / "docs" / "notebooks.md", REPO / "docs" / "instructors.md"]:
        for key, where in numbers(path.read_text(), str(path.relative_to(REPO))).items():
            found.setdefault(key, where)
    return found


@pytest.fixture(
    scope="module",
    params=[pytest.param(p, marks=pytest.mark.xdist_group(p.stem)) for p in NOTEBOOKS],
    ids=lambda p: p.stem,
)
def executed(request, tmp_path_factory) -> tuple[nbformat.NotebookNode, list]:
    """One notebook executed once (its student copy, then its solutions, in one kernel):
    the full executed notebook and the leaks :func:`leak_probe` found. Under pytest-xdist
    the tests of one notebook share a group, so one worker executes it, once."""
    from nbclient import NotebookClient

    path, tmp_path = request.param, tmp_path_factory.mktemp(request.param.stem)
    monkeypatch = pytest.MonkeyPatch()
    request.addfinalizer(monkeypatch.undo)

    (copy,) = [
        p for p in student.write_student(NOTEBOOK_DIR, tmp_path / "student") if p.stem == path.stem
    ]
    nb = nbformat.read(copy, as_version=4)
    assert not any(exercises.is_solution(c) for c in nb.cells)
    solutions = jupytext.read(SOLUTIONS / path.name).cells
    (answer_cell,) = [c for c in nb.cells if "exercises.check_" in c.source]
    answers = answer_parameters(answer_cell.source)
    assert sorted(answers) == sorted(exercises.CHECKS[path.stem])
    assert all(answers.values()), answers
    monkeypatch.setenv("RLCD_SCALE", "ci")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # tempfile.mkdtemp() in the kernel
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):  # the student copy; raises on a failing cell
            client.execute_cell(cell, i)
        shown = {**documentation_numbers(), **source_numbers(nb.cells)}
        shown.update(shown_numbers(nb.cells))
        nb.cells.append(nbformat.v4.new_code_cell(RECORD))  # nbclient runs nb's cells only
        client.execute_cell(nb.cells[-1], len(nb.cells) - 1)
        for cell in solutions:  # the full notebook: its solutions, then back to the copy
            nb.cells.append(cell)
            client.execute_cell(cell, len(nb.cells) - 1)
        given = json.dumps([answers, sorted(shown.items()), TRIVIAL])
        probe = nbformat.v4.new_code_cell(
            inspect.getsource(leak_probe)
            + f"import json\nprint(json.dumps(leak_probe(_RECORDS, *json.loads({given!r}))))"
        )
        nb.cells.append(probe)
        client.execute_cell(probe, len(nb.cells) - 1)
    probe = nb.cells.pop()
    nb.metadata["rlcd_test_dir"] = str(tmp_path)
    leaks = json.loads("".join(o["text"] for o in probe.outputs if o.get("name") == "stdout"))
    nb.cells.remove(next(c for c in nb.cells if c.source == RECORD))
    return nb, leaks


@pytest.mark.slow
def test_notebook_executes_small_without_progress_bars(executed):
    nb, _ = executed
    outputs = [o for c in nb.cells for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    plotly = [o for o in outputs if PLOTLY in o.get("data", {})]
    assert plotly, "every notebook shows at least one plotly figure"
    for o in plotly:  # each figure serialises and has data; none carries plotly.js
        assert json.loads(json.dumps(o["data"][PLOTLY]))["data"]
        assert "text/html" not in o["data"], o["data"].keys()
    bars = [
        o
        for o in outputs
        if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
        or (o.get("name") == "stderr" and re.search(r"\d+%\|", o.get("text", "")))
    ]
    assert bars == [], bars[:3]
    written = Path(nb.metadata["rlcd_test_dir"]) / "executed.ipynb"
    nbformat.write(nb, written)
    assert written.stat().st_size < MAX_BYTES, written.stat().st_size


@pytest.mark.slow
def test_student_copy_runs_through_and_shows_no_answer(executed):
    """Run All on the student copy works (the fixture ran it) and its answer cell says
    each exercise is not answered yet (or has nothing to check at ci scale); no number the
    copy or the classroom docs show passes an exercise's check."""
    nb, leaks = executed
    cell = next(c for c in nb.cells if "exercises.check_" in c.source)  # before solutions
    text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    lines = text.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["1", "2", "3"], text
    for line in lines:
        assert "not answered yet" in line or "nothing to check" in line, line
    assert not leaks, "\n".join(map(str, leaks))
