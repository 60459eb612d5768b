"""Classroom mode for the tutorials: student copies, full notebooks, the JupyterLab setting.

``python -m rlcd_lab.classroom.student`` runs :func:`main`.

The tutorials (``notebooks/NN_*.py``) hold no solution: their solution cells are kept in
``instructors/solutions/NN_*.py`` (:data:`rlcd_lab.classroom.exercises.SOLUTIONS_DIR`).
:func:`write_student` (``make student``) writes the copies to hand out,
:func:`write_solutions` (``make solutions``) the full notebooks an instructor runs, and
:func:`set_default_viewer` and :func:`set_contents_manager` make JupyterLab open the
``.py`` tutorials as notebooks. The answer checks are :mod:`rlcd_lab.classroom.exercises`'s,
the graded assignments :mod:`rlcd_lab.classroom.assignments`'s.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlcd_lab.classroom.exercises import (
    NOTEBOOK_GLOB,
    SOLUTIONS_DIR,
    is_solution,
    with_solutions,
)
from rlcd_lab.files.io import printable

JUPYTEXT_VIEWER = "Jupytext Notebook"
"""JupyterLab's name for jupytext's notebook view of a text file (jupytext >= 1.16)."""


# ------------------------------------------------------------------------ student copies
def student_notebook(path: str | Path) -> Any:
    """The notebook at ``path`` (any format jupytext reads) without its solution cells,
    outputs and jupytext pairing metadata (a student copy is not paired with anything)."""
    import jupytext

    nb = jupytext.read(Path(path))
    nb.cells = [c for c in nb.cells if not is_solution(c)]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata.pop("jupytext", None)
    return nb


def write_student(
    src_dir: str | Path = "notebooks",
    out_dir: str | Path = "student",
    formats: Sequence[str] = ("ipynb",),
) -> list[Path]:
    """Write a student copy of every tutorial in ``src_dir`` (``NN_*.py``) into ``out_dir``.

    Each copy is :func:`student_notebook`: the same cells minus every ``solution``-tagged
    one (the tutorials of ``notebooks/`` have none; the full notebooks of
    :func:`write_solutions` do). ``formats`` are jupytext formats: ``ipynb`` (default)
    and/or ``py:percent`` (written as ``.py``). Returns the written paths, sorted. Raises
    ``FileNotFoundError`` when ``src_dir`` holds no tutorial, and ``ValueError`` when
    ``out_dir`` is ``src_dir`` (the copies would overwrite the sources) or a format is
    neither.
    """
    return _write(
        [(p, student_notebook(p)) for p in _tutorials(src_dir, out_dir)], out_dir, formats
    )


def write_solutions(
    src_dir: str | Path = "notebooks",
    out_dir: str | Path = "solutions",
    solutions_dir: str | Path = SOLUTIONS_DIR,
) -> list[Path]:
    """Write every tutorial in ``src_dir`` with its solution cells from ``solutions_dir``
    appended (:func:`rlcd_lab.classroom.exercises.with_solutions`) into ``out_dir``, as
    ``.py`` with the tutorial's header (JupyterLab opens it as a notebook). Returns the
    written paths, sorted. Raises as :func:`write_student`, and ``FileNotFoundError`` for a
    tutorial without solutions.
    """
    nbs = [(p, with_solutions(p, solutions_dir)) for p in _tutorials(src_dir, out_dir)]
    return _write(nbs, out_dir, ("py:percent",))


def _tutorials(src_dir: str | Path, out_dir: str | Path) -> list[Path]:
    """The tutorials in ``src_dir``, sorted; raises as :func:`write_student`."""
    src, out = Path(src_dir), Path(out_dir)
    sources = sorted(src.glob(NOTEBOOK_GLOB))
    if not sources:
        raise FileNotFoundError(f"no tutorial notebooks ({NOTEBOOK_GLOB}) in {src}")
    if out.resolve() == src.resolve():
        raise ValueError(f"the copies would overwrite the notebooks in {src}")
    return sources


def _write(
    nbs: Sequence[tuple[Path, Any]], out_dir: str | Path, formats: Sequence[str]
) -> list[Path]:
    """Write each ``(source path, notebook)`` as ``out_dir/<stem>.<ext>`` per format."""
    import jupytext

    exts = ["." + fmt.split(":")[0] for fmt in formats]
    if bad := [f for f, e in zip(formats, exts, strict=True) if e not in (".ipynb", ".py")]:
        raise ValueError(f"unsupported format {bad[0]!r}: use ipynb or py:percent")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path, nb in nbs:
        for fmt, ext in zip(formats, exts, strict=True):
            jupytext.write(nb, out / (path.stem + ext), fmt=fmt)
            written.append(out / (path.stem + ext))
    return sorted(written)


# ------------------------------------------------------------ JupyterLab
def set_default_viewer(
    config_dir: str | Path | None = None, doctypes: Sequence[str] = ("python",)
) -> Path:
    """Make JupyterLab open files of ``doctypes`` with jupytext's notebook view on a
    double click, by adding them to ``<config_dir>/labconfig/default_setting_overrides.json``
    (other settings in that file are kept; a doctype that already has a viewer keeps it).

    ``config_dir`` defaults to ``<sys.prefix>/etc/jupyter``, the environment-wide Jupyter
    configuration directory that ``.venv/bin/jupyter lab`` reads: the setting stays
    inside the virtual environment and does not touch ``~/.jupyter``. It applies to every
    ``.py`` file that Lab opens (library modules too: *Open With > Editor* shows the
    text). Equivalent to ``jupytext-config set-default-viewer python`` with
    ``--settings-file`` there. Returns the settings file.
    """
    base = Path(sys.prefix) / "etc" / "jupyter" if config_dir is None else Path(config_dir)
    path = base / "labconfig" / "default_setting_overrides.json"
    settings = json.loads(path.read_text()) if path.exists() else {}
    plugin = settings.setdefault("@jupyterlab/docmanager-extension:plugin", {})
    viewers = plugin.setdefault("defaultViewers", {})
    for doctype in doctypes:
        viewers.setdefault(doctype, JUPYTEXT_VIEWER)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2) + "\n")
    return path


def set_contents_manager(config_dir: str | Path | None = None) -> Path:
    """Make JupyterLab's server use :class:`rlcd_lab.classroom.jupyterlab.TutorialContentsManager`
    (jupytext's contents manager, whose tutorials open unmodified), by setting
    ``ServerApp.contents_manager_class`` in ``<config_dir>/jupyter_server_config.json``
    (other settings in that file are kept); ``config_dir`` defaults to
    ``<sys.prefix>/etc/jupyter``, as for :func:`set_default_viewer`. jupytext's server
    extension keeps a contents manager that already is jupytext's. Returns the file."""
    base = Path(sys.prefix) / "etc" / "jupyter" if config_dir is None else Path(config_dir)
    path = base / "jupyter_server_config.json"
    config = json.loads(path.read_text()) if path.exists() else {}
    manager = "rlcd_lab.classroom.jupyterlab.TutorialContentsManager"
    config.setdefault("ServerApp", {})["contents_manager_class"] = manager
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


# ---------------------------------------------------------------------- command line
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rlcd_lab.classroom.student student|solutions|notebooks``: the Makefile's
    ``make student``, ``make solutions`` and ``make notebooks``. ``student --format
    nbgrader|otter`` writes grader assignments
    (:func:`rlcd_lab.classroom.assignments.write_assignments`) instead of student copies.
    Writes the paths it wrote, one per line, to stdout; a missing or wrong directory is
    one line on stderr (exit status 2)."""
    parser = argparse.ArgumentParser(
        prog="python -m rlcd_lab.classroom.student", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    student = sub.add_parser("student", help="write student copies without solution cells")
    student.add_argument("--src", default="notebooks", help="the tutorials' directory")
    student.add_argument("--out", default="student", help="where to write the copies")
    student.add_argument(
        "--formats",
        default="ipynb",
        help="comma-separated jupytext formats: ipynb, py:percent (--format ours only)",
    )
    student.add_argument(
        "--format",
        default="ours",
        choices=("ours", "nbgrader", "otter"),
        help="ours: student copies; nbgrader: source/<name>/<name>.ipynb for nbgrader; "
        "otter: <name>/<name>.ipynb master notebooks for otter assign",
    )
    student.add_argument(
        "--points", type=float, default=1.0, help="points per exercise (nbgrader, otter)"
    )
    full = sub.add_parser("solutions", help="write the tutorials with their solution cells")
    full.add_argument("--src", default="notebooks", help="the tutorials' directory")
    full.add_argument("--out", default="solutions", help="where to write the full notebooks")
    for command in (student, full):
        command.add_argument(
            "--solutions",
            default=SOLUTIONS_DIR,
            help="the solution cells' directory (solutions; student --format nbgrader|otter)",
        )
    lab = sub.add_parser("notebooks", help="make this venv's JupyterLab open .py as notebooks")
    lab.add_argument(
        "--config-dir", default=None, help="Jupyter config dir (default: <sys.prefix>/etc/jupyter)"
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "student" and args.format != "ours":
            from rlcd_lab.classroom.assignments import write_assignments

            if not (math.isfinite(args.points) and args.points > 0):  # NaN: invalid JSON
                parser.error(f"--points must be a finite number > 0, got {args.points}")
            points = float(args.points)  # int.is_integer is Python >= 3.12 only
            points = int(points) if points.is_integer() else points
            paths = write_assignments(args.src, args.out, args.format, points, args.solutions)
        elif args.command == "student":
            paths = write_student(args.src, args.out, tuple(args.formats.split(",")))
        elif args.command == "solutions":
            paths = write_solutions(args.src, args.out, args.solutions)
        else:
            paths = [set_default_viewer(args.config_dir), set_contents_manager(args.config_dir)]
    except (FileNotFoundError, ValueError) as err:
        parser.error(printable(err))
    sys.stdout.write("".join(f"{p}\n" for p in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
