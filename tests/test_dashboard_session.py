"""The dashboard as a visitor and an agent meet it: lists that follow runs written while the
app runs, a first Routing view that says what it shows, errors in the result pane, the
server's input policy in the Ask tab, the Runs tab's smoothing and empty panels, bounded
uploads, and the decision functions as MCP tools (a launched app, the ``mcp`` client)."""

from __future__ import annotations

import asyncio
import json
import math
import socket

import gradio as gr
import numpy as np
import pytest

from rlcd_lab import metrics
from rlcd_lab.dashboard import (
    ask_checkpoint,
    ask_tab,
    batch_tab,
    controls,
    mcp_tools,
    routing_guide,
    routing_tab,
    routing_words,
    runs_tab,
    ui,
    uploads,
)
from rlcd_lab.dashboard.common import default_runs
from rlcd_lab.decide import DecisionModel
from rlcd_lab.decide.jev import DecisionError
from rlcd_lab.files.assets import ASSETS, shipped_runs
from rlcd_lab.lm.checkpoint import save_checkpoint

VERIFY_CK = "results/verify/seed-17/reinforce/final"
"""A shipped tiny verify checkpoint: a character vocabulary, options Y and N."""


def _dump(path, items):
    """An eval dump of ``(p0, label)`` items (K = 2)."""
    rows = [
        {"uid": f"i{i}", "label": y, "q": None, "options": ["Y", "N"], "probs": [p, 1 - p],
         "logits": [math.log(p), math.log(1 - p)], "readouts": [[p, 1 - p]],
         "rationales": ["r"], "forced": [False], "lengths": [3], "mixture": [p, 1 - p]}
        for i, (p, y) in enumerate(items)
    ]  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _write_run(run, marker_lm, tokenizer, steps=6, eval_every=50):
    """A finished run as `rlcd-lab train` leaves it: config, log, final/ and eval dumps."""
    run.mkdir(parents=True)
    cfg = {"method": "reinforce", "init": "base", "out": str(run), "steps": steps,
           "eval_every": eval_every}  # fmt: skip
    (run / "config.json").write_text(json.dumps(cfg))
    log = [{"step": s, "rationale_length": 10.0 - s, "loss": 1.0} for s in range(steps)]
    (run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    save_checkpoint(run / "final", marker_lm, tokenizer, {"T": 1.0, "options": ["Y", "N"]})
    items = [(0.9, 0), (0.2, 1), (0.7, 1), (0.6, 0)]
    _dump(run / "eval" / "test.jsonl", items)
    _dump(run / "eval" / "dev.jsonl", items)


def _handler(demo, api_name):
    (fn,) = [f for f in demo.fns.values() if f.api_name == api_name]
    return fn


def _choices(update):
    return [c[1] if isinstance(c, (tuple, list)) else c for c in update["choices"]]


# ------------------------------------------------------------------ lists follow runs/
def test_a_run_written_after_the_app_is_built_is_listed_on_page_load(
    tmp_path, marker_lm, tokenizer
):
    runs = tmp_path / "runs"
    demo = ui.build_demo(runs_root=runs)
    (refresh,) = [b for b in demo.blocks.values() if getattr(b, "value", None) == ui.REFRESH_LABEL]
    run = runs / "late-s0" / "reinforce"
    name = f"{runs}/late-s0/reinforce"
    listed = {
        "ask_checkpoints": lambda out: f"{name}/final" in _choices(out),
        "batch_checkpoints": lambda out: f"{name}/final" in _choices(out),
        "compare_checkpoints": lambda out: all(f"{name}/final" in _choices(u) for u in out),
        "routing_runs": lambda out: name in _choices(out),
        "runs_lists": lambda out: name in _choices(out[0]) and name in _choices(out[1]),
    }
    for api_name, has in listed.items():
        fn = _handler(demo, api_name)
        # on every page load and on a click of the header's refresh button
        assert {(demo._id, "load"), (refresh._id, "click")} <= set(fn.targets), api_name
        assert not has(fn.fn()), api_name  # not there yet
    _write_run(run, marker_lm, tokenizer)  # trained while the app runs
    for api_name, has in listed.items():
        assert has(_handler(demo, api_name).fn()), api_name


# ------------------------------------------------------------------ the first Routing view
def test_routing_opens_on_the_headline_task_and_says_where_rlcd_loses():
    demo = ui.build_demo()
    (runs,) = [
        b for b in demo.blocks.values() if (getattr(b, "label", None) or "").startswith("Runs (")
    ]
    assert runs.value and all(v.startswith(routing_guide.FIRST_VIEW + "/") for v in runs.value)
    assert runs.value[0].endswith("/reinforce")
    note = routing_guide.first_view_note()
    shipped = shipped_runs()

    def aurc(folder, kind):  # from the dump, scaled with T fitted on dev
        d = routing_tab.load_run(f"{folder}/{kind}")
        p = metrics.apply_temperature(d.result.logits, d.T)
        conf, correct = metrics.confidence_and_correct(p, d.result.labels)
        return metrics.aurc(conf, correct)

    assert f"{routing_guide.FIRST_VIEW}/grpo" in shipped
    for folder, word in ((routing_guide.FIRST_VIEW, "wins"), (routing_guide.CONTRAST, "loses")):
        r, g = aurc(folder, "reinforce"), aurc(folder, "grpo")
        assert (r < g) == (word == "wins")  # the shipped dumps: RLCD wins on one, loses on one
        assert f"**{r:.4f}** against GRPO's **{g:.4f}**" in note and f"RLCD {word}" in note
    # the cheap alternative is said beside the win, as the three-seed summary holds it:
    # RLCD minus GRPO recalibrated by the best dev-fitted calibrator is not significant
    assert "GRPO recalibrated on dev by a calibrator that sees the sum's length" in note
    summary = json.loads((ASSETS / "results" / "verify-mixed" / "summary.json").read_text())
    best = summary["posthoc"]["best"]
    closed = summary["paired"][f"reinforce - grpo-matched+{best}"]["aurc"]
    assert closed["ci_low"] < 0 < closed["ci_high"]
    markdowns = [b.value for b in demo.blocks.values() if isinstance(b, gr.Markdown)]
    assert note in markdowns


def test_every_column_has_a_plain_name_and_a_line_saying_what_it_means():
    for help_ in (routing_words.ROUTING_HELP, routing_words.METRIC_HELP):
        for name, what in help_.items():
            assert "@ dev" not in name and "pred." not in name and what and "\n" not in what
    assert routing_words.ROUTING_COLUMNS == list(routing_words.ROUTING_HELP)
    demo = ui.build_demo()
    markdowns = [b.value for b in demo.blocks.values() if isinstance(b, gr.Markdown)]
    for help_ in (routing_words.ROUTING_HELP, routing_words.METRIC_HELP):
        assert routing_words.columns_help(help_) in markdowns


def test_predicted_coverage_is_zero_below_one_minus_eps():
    # the label-free Cov@eps needs a prefix whose mean (1 - max p) is <= eps: with every
    # confidence below 1 - eps no prefix qualifies, whatever the labels (the column's help)
    rng = np.random.default_rng(0)
    conf = rng.uniform(0.5, 0.949, 300)
    assert metrics.predicted_coverage_at_risk(conf, 0.05) == 0.0
    # one item at 0.99 and one at 0.92: the top-1 prefix's predicted error is 0.01 <= 0.05,
    # the top-2 prefix's (0.01 + 0.08) / 2 = 0.045 <= 0.05, the top-3 prefix's more
    c = np.array([0.99, 0.92, 0.5, 0.5])
    assert metrics.predicted_coverage_at_risk(c, 0.05) == pytest.approx(2 / 4)


def test_predicted_coverage_of_the_shipped_baselines_is_zero_as_documented():
    # docs/dashboard.md: at eps = 0.05 every baseline of the default comparison on the
    # shipped verify and verify-mixed runs has its highest calibrated confidence under
    # 0.95, hence predicted Cov@0.05 = 0 (the column's 0.000 in every baseline row)
    names = list(shipped_runs())
    for task in ("verify", "verify-mixed"):
        for seed in (17, 23, 29):
            runs = default_runs([n for n in names if n.startswith(f"results/{task}/seed-{seed}/")])
            assert runs[0].endswith("/reinforce")
            for name in runs[1:]:
                d = routing_tab.load_run(name)
                assert d.scaled.confidence.max() < 0.95, name
                *_, out = routing_tab.routing_update([name], 0.5, 0.05, 10, 1, True)
                assert out["runs"][name]["pred_cov_at_eps"] == 0.0, name


def test_a_run_at_chance_is_left_out_of_the_figures_and_said_why(tmp_path):
    good = tmp_path / "t" / "reinforce"
    flat = tmp_path / "t" / "sft"
    _dump(good / "eval" / "test.jsonl", [(0.9, 0), (0.2, 1), (0.7, 1), (0.8, 0)])
    _dump(flat / "eval" / "test.jsonl", [(0.51, 0), (0.5, 1), (0.49, 0), (0.52, 1)])
    names = [str(good), str(flat)]
    summary, table, _, fig, out = routing_tab.routing_update(names, 0.5, 0.05, 10, 1, False)
    traces = {t.name for t in fig.data}
    assert any("t/reinforce" in n for n in traces) and not any("t/sft" in n for n in traces)
    assert len(table["data"]) == 2  # its row stays
    # highest confidence 0.52 <= 1/2 + CHANCE_MARGIN
    assert "Left out of the figures" in summary and "highest 0.520" in summary
    reliability, costs = routing_tab.routing_figures(names, 10, 1, False)
    for figure in (reliability, costs):
        assert not any("t/sft" in (t.name or "") for t in figure.data)


# ------------------------------------------------------------------ errors in the pane
def test_errors_stay_in_the_result_pane_as_one_line(tmp_path):
    demo = ui.build_demo(allowed_dirs=[tmp_path])
    ask = _handler(demo, "ask").fn
    rule = (0.5, "max_p", "single")
    verdict, texts, bars, result = ask(VERIFY_CK, "1+1=2?", "yes, no", 1, 1.0, 8, 0, *rule)
    assert verdict.startswith(controls.ERROR_PREFIX) and "\n" not in verdict
    assert (texts, bars, result) == ("", None, None)  # the previous answer is gone too
    # the hint names the options this model reads, not letters its vocabulary lacks
    assert "Y, N" in verdict and "A, B, C" not in verdict
    # Batch: a deeply nested JSON line
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"question": ' + "[" * 100_000 + "]" * 100_000 + ', "options": "Y, N"}\n')
    summary, table, csv = _handler(demo, "batch").fn(VERIFY_CK, str(deep), 1, 1.0, 8, 0, *rule)
    assert summary.startswith(controls.ERROR_PREFIX) and "\n" not in summary
    assert "nested too deeply" in summary and csv is None and table["data"] == []
    # Runs: a corrupt config.json: one line in the summary, the curves still drawn
    run = tmp_path / "corrupt"
    run.mkdir()
    (run / "log.jsonl").write_text('{"step": 0, "rationale_length": 3.0}\n')
    (run / "config.json").write_text('{"method": "reinf\x1b[2J')
    fig, summary = _handler(demo, "run_curves").fn(str(run), ["rationale length"], 0.0)
    first = summary.split("\n\n")[0]
    assert first.startswith("config.json cannot be read (") and "\x1b" not in summary
    assert len(fig.data) == 1


def test_error_line_escapes_control_characters_and_markdown():
    line = controls.error_line("bad 'a\x1b]0;x\x07b'\nnext *bold*")
    assert "\x1b" not in line and "\x07" not in line and "\n" not in line
    assert "\\x1b" in line and r"\*bold\*" in line


# ------------------------------------------------------------------ the Ask tab
def test_the_example_dropdown_shows_the_filled_example_and_picking_one_clears_the_answer():
    info, dropdown, question, options = ask_checkpoint.checkpoint_info(VERIFY_CK, "", "")
    first = dropdown.choices[0][1]
    assert dropdown.value == first  # the question filled is the first example: shown
    *_, typed, _ = ask_checkpoint.checkpoint_info(VERIFY_CK, "1+1=2?", "Y, N")
    assert typed == "1+1=2?"
    _, dropdown, _, _ = ask_checkpoint.checkpoint_info(VERIFY_CK, "1+1=2?", "Y, N")
    assert dropdown.value is None  # a typed question is no example
    second = dropdown.choices[1][1]
    q, o, verdict, texts, bars, result = ask_checkpoint.example_answer(VERIFY_CK, second)
    assert (q, o) == ask_checkpoint.example_fields(VERIFY_CK, second)
    assert (verdict, texts, bars, result) == ("", "", None, None)


@pytest.mark.parametrize("state", ["33+60+20=113é?", "33+60+20=113?\x1b", "naïve 1+1=2?"])
def test_the_ask_tab_refuses_what_the_server_refuses(state):
    reader = ask_tab.load_reader(VERIFY_CK)
    with pytest.raises(DecisionError, match="cannot read"):
        DecisionModel.from_reader(reader).decide(state, {"q": {"type": "noul"}})
    with pytest.raises(gr.Error, match="cannot read"):
        ask_tab.ask(VERIFY_CK, state, "Y, N", 1, 1.0, 8, 0)


def test_the_ask_tab_takes_what_the_server_takes():
    reader = ask_tab.load_reader(VERIFY_CK)
    state = "33+60+20=113?"
    DecisionModel.from_reader(reader).decide(state, {"q": {"type": "noul"}})
    *_, result = ask_tab.ask(VERIFY_CK, state, "Y, N", 1, 1.0, 8, 0)
    assert result["answer"] in ("Y", "N")


def test_option_hint_fits_the_model():
    assert ask_tab.option_hint({"options": ["Y", "N"]}) == "Y, N"
    assert ask_tab.option_hint({}) == ask_tab.GENERIC_HINT


# ------------------------------------------------------------------ the Runs tab
def test_a_short_run_says_why_its_dev_panels_are_empty(tmp_path, marker_lm, tokenizer):
    run = tmp_path / "short"
    _write_run(run, marker_lm, tokenizer, steps=6, eval_every=50)
    _, summary = runs_tab.run_curves(str(run), ["rationale length", "dev accuracy"])
    assert "**dev accuracy**: empty" in summary and "every 50 steps" in summary
    assert "6 steps" in summary
    assert "rationale length**: empty" not in summary


def test_smoothing_by_hand():
    # s_i = w s_{i-1} + (1 - w) v_i from 0, shown as s_i / (1 - w^(i+1)); w = 1/2:
    # s = 1/2, 1/4, 1/8 -> 1/2 / (1/2) = 1, 1/4 / (3/4) = 1/3, 1/8 / (7/8) = 1/7
    assert runs_tab.smooth([1.0, 0.0, 0.0], 0.5) == pytest.approx([1.0, 1 / 3, 1 / 7])
    assert runs_tab.smooth([3.0, 1.0], 0.0) == [3.0, 1.0]
    rows = [{"step": 0, "a": 1.0}, {"step": 1}, {"step": 2, "a": 0.0, "b": 5.0}]
    out = runs_tab.smoothed_rows(rows, 0.5)
    assert [r["step"] for r in out] == [0, 1, 2] and out[1] == {"step": 1}
    assert out[2]["a"] == pytest.approx(1 / 3) and out[2]["b"] == 5.0
    with pytest.raises(gr.Error, match="smoothing"):
        runs_tab.smoothed_rows(rows, 1.0)


def test_the_runs_tab_draws_smoothed_curves(tmp_path, marker_lm, tokenizer):
    run = tmp_path / "r"
    _write_run(run, marker_lm, tokenizer, steps=4)
    fig, _ = runs_tab.run_curves(str(run), ["rationale length"], 0.5)
    (trace,) = fig.data
    expected = runs_tab.smooth([10.0, 9.0, 8.0, 7.0], 0.5)
    assert list(trace.y) == pytest.approx(expected)


# ------------------------------------------------------------------ uploads
def _asgi_call(guard, headers, host="1.2.3.4", path="/gradio_api/upload"):
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": headers,
             "client": (host, 1)}  # fmt: skip
    asyncio.run(guard(scope, receive, send))
    return sent[0]["status"] if sent else None


def test_upload_guard_bounds_size_and_count_per_address():
    passed = []

    async def app(scope, receive, send):
        passed.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})

    now = [0.0]
    guard = uploads.UploadGuard(
        app, max_bytes=100, max_uploads=3, window_s=60, clock=lambda: now[0]
    )
    ok = [(b"content-length", b"50")]
    assert _asgi_call(guard, [(b"content-length", b"101")]) == 413
    assert _asgi_call(guard, []) == 411
    assert [_asgi_call(guard, ok) for _ in range(4)] == [200, 200, 200, 429]
    assert _asgi_call(guard, ok, host="5.6.7.8") == 200  # another address has its own share
    now[0] = 60.0  # the window has passed: the first three no longer count
    assert _asgi_call(guard, ok) == 200
    assert _asgi_call(guard, [], path="/gradio_api/queue/join") == 200  # not an upload
    assert len(passed) == 6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ the launched app: MCP
def test_mcp_tools_and_upload_limits_of_the_launched_app(tmp_path):
    httpx = pytest.importorskip("httpx")
    mcp = pytest.importorskip("mcp")
    from mcp.client.streamable_http import streamablehttp_client

    demo = ui.build_demo()
    assert demo.delete_cache == uploads.DELETE_CACHE
    port = _free_port()
    demo.launch(prevent_thread_lock=True, server_port=port, quiet=True)
    url = f"http://127.0.0.1:{port}"
    try:
        assert demo.max_file_size == uploads.MAX_UPLOAD_FILE_BYTES
        # a file over the limit is refused by gradio, a request over the limit before it
        # is read: nothing is kept
        big = {"files": ("big.jsonl", b"x" * (uploads.MAX_UPLOAD_FILE_BYTES + 1))}
        assert httpx.post(f"{url}/gradio_api/upload", files=big).status_code == 413
        huge = {"files": ("huge.jsonl", b"x" * (uploads.MAX_UPLOAD_REQUEST_BYTES + 1))}
        response = httpx.post(f"{url}/gradio_api/upload", files=huge)
        assert response.status_code == 413 and "per request" in response.text

        async def session():
            async with streamablehttp_client(f"{url}/gradio_api/mcp/") as (read, write, _):
                async with mcp.ClientSession(read, write) as s:
                    await s.initialize()
                    tools = await s.list_tools()
                    state = "33+60+20=113?"
                    args = {"state": state, "question": '{"type": "noul"}',
                            "checkpoint": VERIFY_CK, "mode": "direct"}  # fmt: skip
                    decided = await s.call_tool("decide", args)
                    run = f"{routing_guide.FIRST_VIEW}/reinforce"
                    routed = await s.call_tool("route", {"run": run, "threshold": 0.9})
                    return tools, decided, routed

        tools, decided, routed = asyncio.run(session())
        assert sorted(t.name for t in tools.tools) == sorted(mcp_tools.TOOLS)
        assert not decided.isError and not routed.isError
        got = json.loads(decided.content[0].text)
        want = DecisionModel.from_reader(ask_tab.load_reader(VERIFY_CK)).decide(
            "33+60+20=113?", {"q": {"type": "noul"}}, mode="direct"
        )
        assert got["answer"]["noul"] == pytest.approx(want.answers["q"]["noul"])
        r = json.loads(routed.content[0].text)
        *_, out = routing_tab.routing_update([r["run"]], 0.9, 0.05, 10.0, 1.0, True)
        assert r["decided"] == out["runs"][r["run"]]["decided"]
        assert r["aurc"] == pytest.approx(out["runs"][r["run"]]["aurc"])
    finally:
        demo.close()


def test_tools_called_in_process():
    out = mcp_tools.ask_question("33+60+20=113?", "Y, N", VERIFY_CK, m=2, threshold=0.5)
    assert set(out["probabilities"]) == {"Y", "N"} and len(out["rationales"]) == 2
    assert out["decision"] == ("automate" if out["confidence"] >= 0.5 else "escalate")
    with pytest.raises(gr.Error, match="Jev wire question"):
        mcp_tools.decide("1+1=2?", "{not json", VERIFY_CK)
    with pytest.raises(gr.Error, match="mode must be"):
        mcp_tools.decide("1+1=2?", '{"type": "noul"}', VERIFY_CK, mode="fast")
    demo = ui.build_demo()
    documented = {f.api_name for f in demo.fns.values() if f.api_visibility == "public"}
    assert documented == set(mcp_tools.TOOLS)
    # the tabs' events stay callable by name
    assert _handler(demo, "routing").api_visibility == "undocumented"
    assert batch_tab.MAX_FILE_BYTES <= uploads.MAX_UPLOAD_FILE_BYTES
