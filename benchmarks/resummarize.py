"""Rewrite every shipped reproduction's summary.json, report.md and report.html (and the
difficulty map) from the eval dumps and logs shipped beside them, in place: what to run
after a change to how a summary is computed (a metric, the T fit, rounding). Seeds, eps,
task and title come from the files being replaced; figure PNGs are not shipped, so none
are written, nor a report.html where none was shipped.

    .venv/bin/python benchmarks/resummarize.py [assets/results]

First, a shipped base run without its direct dump (``eval/test-direct``: the base model's
test items answered without a rationale, ``rundir.DIRECT``) gets it, from the settings in
its ``done.json`` and the checkpoint of the same name in ``assets/checkpoints``; the rung's
needs its task fetched (``rlcd-lab data fetch basic-skills-arithmetic-verify-pairs``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rlcd_lab.drawing import pages
from rlcd_lab.files import rundir
from rlcd_lab.files.assets import ASSETS
from rlcd_lab.files.io import pack_jsonl
from rlcd_lab.reports import difficulty, report
from rlcd_lab.reproduce import Job, _direct_dump


def add_direct_dumps(results: Path) -> None:
    for done in sorted(results.rglob(f"base/{rundir.DONE}")):
        run = done.parent
        if rundir.has_eval(run, rundir.DIRECT):
            continue
        settings = json.loads(done.read_text(encoding="utf-8"))
        settings["init"] = ASSETS / "checkpoints" / Path(settings["init"]).name
        _direct_dump(Job("base", settings["seed"], run, None, settings))
        pack_jsonl(rundir.eval_file(run, rundir.DIRECT))
        print(f"added {rundir.eval_file(run, rundir.DIRECT)}")


def main(results: Path) -> None:
    add_direct_dumps(results)
    no_pngs = lambda figs, folder: []  # noqa: E731
    report.write_pngs = difficulty.write_pngs = pages.write_pngs = no_pngs
    for path in sorted(results.rglob("summary.json")):
        root = path.parent
        if "bench" in root.relative_to(results).parts:
            continue  # bench reports come from a model, not from dumps
        old = json.loads(path.read_text(encoding="utf-8"))
        first = (root / "report.md").read_text(encoding="utf-8").splitlines()[0]
        title = first.removeprefix("# rlcd_lab reproduction: ")
        shipped = {p for p in (root / "report.html", root.parent / "plotly.min.js") if p.exists()}
        report.write_report(root, old["seeds"], old["eps"], title, task=old.get("task"))
        for extra in {root / "report.html", root.parent / "plotly.min.js"} - shipped:
            extra.unlink()  # a page that was not shipped stays unshipped (assets stay lean)
        print(f"rewrote {path}")
    for path in sorted(results.rglob("map.json")):
        old = json.loads(path.read_text(encoding="utf-8"))
        levels = {float(s): Path(p) for s, p in old["sources"].items()}
        difficulty.write_difficulty_map(path.parent, levels)
        print(f"rewrote {path}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "assets/results"))
