"""The shipped base models still load and still behave as assets/README.md says.

Looser than the measured numbers (100 dev items instead of 400 test items), so it guards
against a broken artefact or a code change that breaks it, not against sampling noise.
"""

import re
from pathlib import Path

import pytest

from rlcd_lab.evaluate import run_eval
from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.summary import summarize
from rlcd_lab.tasks.synthetic import get_task

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "checkpoints"


@pytest.mark.parametrize("task", ["verify", "facts", "aleatoric"])
def test_shipped_base_model(task):
    model, tok, meta = load_checkpoint(ASSETS / f"base-{task}")
    assert meta["task"] == task and meta["method"] == "pretrain"
    items = get_task(task).split("dev")[:100]
    direct = summarize(run_eval(model, tok, items, mode="direct"))
    reason_rows = run_eval(model, tok, items, mode="reason")
    reason = summarize(reason_rows, dev_rows=reason_rows)
    assert reason["forced_rate"] < 0.05  # it writes a rationale and stops at the marker
    assert reason["mean_length"] > 5
    if task == "verify":  # reasoning is computation: far better than answering directly,
        assert reason["accuracy"] - direct["accuracy"] >= 0.10
        assert reason["T"] >= 2 or reason["ece"] >= 0.05  # and overconfident


def test_difficulty_map_bases_are_ordered_by_the_teachers_slip():
    """The difficulty map's bases (assets/README.md): a teacher that drops more carries
    gives a base that reasons to a wrong answer more often (dev: 0.92, 0.81, 0.62)."""
    items = get_task("verify").split("dev")[:100]
    accuracy = {}
    for name, slip in [
        ("base-verify-slip0.05", 0.05),
        ("base-verify", None),
        ("base-verify-slip0.6", 0.6),
    ]:
        model, tok, meta = load_checkpoint(ASSETS / name)
        assert meta["config"].get("slip") == slip
        rows = run_eval(model, tok, items, mode="reason")
        accuracy[name] = summarize(rows, dev_rows=rows)["accuracy"]
    easy, mid, hard = accuracy.values()
    assert easy > mid + 0.03 and mid > hard + 0.08, accuracy


@pytest.mark.smollm2
def test_the_real_rungs_base_writes_its_worked_rationales(smollm2_dir):
    """assets/checkpoints/smollm2-arith-verify (SmolLM2-135M-Instruct taught
    basic-skills-arithmetic-verify by ``rlcd-lab train teach``): it writes the worked format
    and the marker itself, where the untaught model almost never does (benchmarks/RESULTS.md)."""
    from rlcd_lab.reader.reading import read

    model, tok, meta = load_checkpoint(ASSETS / "smollm2-arith-verify")
    assert meta["method"] == "teach" and meta["task"].endswith(
        "basic-skills-arithmetic-verify.jsonl"
    )
    questions = [
        f"Question: {a} + {b} =\nProposed answer: {a + b + d}\nIs the proposed answer correct? "
        "(yes or no)"
        for a, b, d in [(6, 7, 0), (12, 9, 1), (8, 5, 0), (30, 14, -10), (7, 7, 0), (9, 3, 2)]
    ]
    readings = read(model, tok, questions, [("yes", "no")] * 6, max_new_tokens=40, seed=0)
    written = [not r.forced[0] for r in readings]
    worked = [" vs " in r.texts[0] for r in readings]
    assert sum(written) >= 5 and sum(worked) >= 5, [r.texts[0] for r in readings]


# ------------------------------------------------------------- shipped results, lean
RESULTS = ASSETS.parent / "results"
BUDGET_MB = 68
"""Everything under assets/ (sum of file sizes, MB of 10^6 bytes), issue 31's budget (60 MB)
plus the pre-registered verify-check world, verify-mixed's seven more seeds and the
ingredient baselines (Dr.GRPO, GRPO then stage 1) on three worlds:
dumps and logs ship packed (``python -m rlcd_lab.files.io pack``, xz), the reports share one
plotly.js, the SmolLM2 adapter reads its base's tokenizer; assets/README.md says what
takes the room."""


def test_shipped_results_hold_no_plain_jsonl():
    """Eval dumps and logs under assets/results ship packed (``X.jsonl.xz``)."""
    assert sorted(RESULTS.rglob("*.jsonl")) == []
    assert len(list(RESULTS.rglob("*.jsonl.xz"))) > 500


def test_the_packed_dumps_are_what_assets_readme_says():
    """The count and sizes that assets/README.md quotes for the packed dumps ("N files, X MB
    as text, Y MB packed") are those of the shipped ``*.jsonl.xz`` files, unpacked here."""
    import lzma

    text = (ASSETS.parent / "README.md").read_text()
    quoted = re.search(r"([\d,]+) files, ([\d.]+) MB as text, ([\d.]+) MB\s+packed", text)
    assert quoted, "assets/README.md no longer quotes the packed dumps' sizes"
    files = sorted(RESULTS.rglob("*.jsonl.xz"))
    plain = sum(len(lzma.decompress(f.read_bytes())) for f in files)
    packed = sum(f.stat().st_size for f in files)
    assert int(quoted[1].replace(",", "")) == len(files)
    assert (float(quoted[2]), float(quoted[3])) == (round(plain / 1e6, 1), round(packed / 1e6, 1))


def test_assets_fit_the_size_budget():
    total = sum(p.stat().st_size for p in ASSETS.parent.rglob("*") if p.is_file())
    assert total <= BUDGET_MB * 10**6, f"assets/ holds {total / 1e6:.1f} MB"


def test_shipped_reports_load_one_shared_plotly_js():
    """Each report.html loads ../plotly.min.js (assets/results/plotly.min.js) instead of
    inlining its 4.8 MB."""
    reports = sorted(RESULTS.glob("*/report.html"))
    assert len(reports) == 4
    for report in reports:
        html = report.read_text(encoding="utf-8")
        assert html.count('<script charset="utf-8" src="../plotly.min.js"></script>') == 1
        assert "plotly.js v" not in html and report.stat().st_size < 10**6
    assert (RESULTS / "plotly.min.js").read_text(encoding="utf-8").startswith("/**\n* plotly.js v")


@pytest.mark.numerics
def test_a_shipped_summary_recomputes_byte_identically_from_packed_dumps(tmp_path, monkeypatch):
    """``write_report`` on a copy of a shipped reproduction (its packed dumps and logs)
    writes the shipped summary.json byte for byte."""
    import json
    import shutil

    from rlcd_lab.reports import report

    shipped = RESULTS / "rung-lr" / "lr-1e-4"
    copy = shutil.copytree(shipped, tmp_path / "results" / "lr-1e-4")
    old = json.loads((shipped / "summary.json").read_text())
    monkeypatch.setattr(report, "write_pngs", lambda figs, folder: [])  # no kaleido needed
    report.write_report(copy, old["seeds"], old["eps"], "copy", task=old["task"])
    assert (copy / "summary.json").read_bytes() == (shipped / "summary.json").read_bytes()
    assert (tmp_path / "results" / "plotly.min.js").is_file()  # where report.html looks


def test_shipped_runs_and_mixture_dumps_are_found_packed():
    from rlcd_lab.files.assets import shipped_runs
    from rlcd_lab.reports.results import load_run

    runs = shipped_runs()
    assert "results/verify/seed-17/reinforce" in runs and len(runs) > 100
    mixture = load_run(runs["results/aleatoric/seed-17/reinforce"])
    assert mixture.m_mixture == 16 and len(mixture.labels) == 400


def test_shipped_configs_name_no_directory_of_the_machine_that_made_them():
    """Every shipped config.json and summary names paths relative to the repository or
    under ~ (rundir.portable_path), never an absolute directory."""
    import json

    for f in [*RESULTS.rglob("config.json"), *RESULTS.rglob("summary.json")]:
        text = f.read_text(encoding="utf-8")
        absolute = re.findall(r'"(/[^"]*)"', text)
        assert not absolute, (f, absolute[:3])
        json.loads(text)


MACHINE_PATH = re.compile(
    r"^(?:/[^/\s]+/|[A-Za-z]:[\\/])"  # absolute: /x/..., C:\\... or C:/...
    r"|(?:^|[\s'\"(=:])/(?:root|home|tmp|Users|work|var|private|mnt)/"  # one inside text
)
"""A string that names a folder of the machine that wrote it."""


def _strings(value, where: str = ""):
    """``(where, text)`` for every key and string value in a parsed JSON value."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield f"{where}/{k} (key)", k
            yield from _strings(v, f"{where}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{where}/{i}")
    elif isinstance(value, str):
        yield where, value


def test_no_shipped_json_names_a_folder_of_the_machine_that_made_it():
    """Every JSON file under assets/ (configs, summaries, rlcd.json, adapter_config.json,
    done.json, tokenizers, ...) names paths relative to the repository or under ~, never an
    absolute folder (/root/.cache/..., /tmp/..., /work/...), in any key or value."""
    import json

    files = sorted(ASSETS.parent.rglob("*.json"))
    assert len(files) > 100  # every run's config and done.json, every checkpoint's files
    found = [
        (str(f.relative_to(ASSETS.parent)), where, text[:80])
        for f in files
        for where, text in _strings(json.loads(f.read_text(encoding="utf-8")))
        if MACHINE_PATH.search(text)
    ]
    assert not found, found[:5]
    for bad in ("/root/.cache/x", "/tmp/regen/assets", "C:\\Users\\me", "out in /work/x/y"):
        assert MACHINE_PATH.search(bad), bad
    for fine in ("assets/checkpoints/base-verify", "~/.cache/rlcd_lab/x.jsonl", "/", "a/b", "1/2"):
        assert not MACHINE_PATH.search(fine), fine


def test_portable_paths(monkeypatch, tmp_path):
    from pathlib import Path

    from rlcd_lab.files.rundir import portable_path

    monkeypatch.chdir(tmp_path)
    assert portable_path(str(tmp_path / "assets" / "x")) == "assets/x"
    assert portable_path(str(Path.home() / ".cache" / "d.jsonl")) == "~/.cache/d.jsonl"
    assert portable_path("/elsewhere/x") == "/elsewhere/x"  # neither: as it is
    assert portable_path("verify") == "verify" and portable_path(3) == 3
