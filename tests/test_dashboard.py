"""The dashboard: pure callbacks against hand-derived numbers and rlcd_lab.metrics, clear
errors for bad input, and the launched app driven through gradio_client."""

from __future__ import annotations

import inspect
import json
import math
import socket
from functools import partial

import gradio as gr
import numpy as np
import pytest

from rlcd_lab import metrics
from rlcd_lab.dashboard import (
    ask_tab,
    batch_tab,
    compare_tab,
    controls,
    mcp_tools,
    routing_tab,
    routing_words,
    ui,
)
from rlcd_lab.dashboard.ask_checkpoint import (
    GENERIC_EXAMPLES,
    checkpoint_info,
    example_fields,
    model_card,
    temperature_status,
)
from rlcd_lab.dashboard.ask_tab import (
    MAX_OPTIONS_CHARS,
    MAX_QUESTION_CHARS,
    ask,
    ask_model,
    decision,
    parse_options,
    positions_needed,
    reroute,
)
from rlcd_lab.dashboard.batch_tab import batch_answers, parse_question_file
from rlcd_lab.dashboard.common import (
    CHECKPOINT_ENV,
    default_runs,
    local_checkpoints,
    local_run_choices,
    local_runs,
    trained_checkpoints,
)
from rlcd_lab.dashboard.compare_tab import compare_checkpoints
from rlcd_lab.dashboard.help_tab import help_markdown
from rlcd_lab.dashboard.playground import (
    playground_visibility,
    proposition1_sliders,
    proposition1_table,
    simplex,
)
from rlcd_lab.dashboard.routing_tab import (
    bayes_threshold,
    cost_curve,
    load_run,
    route,
    routing_figures,
    routing_update,
)
from rlcd_lab.dashboard.runs_tab import compare_runs, run_curves
from rlcd_lab.dashboard.ui import build_demo, offline_theme
from rlcd_lab.files.assets import default_checkpoint, shipped_checkpoints, shipped_runs
from rlcd_lab.lm.checkpoint import read_meta, save_checkpoint
from rlcd_lab.lm.model import char_tokenizer, context_length
from rlcd_lab.math.routing import realized_costs
from rlcd_lab.reader import Reader
from rlcd_lab.tasks import load_task_items

# ---------------------------------------------------------------------------------------
# A fabricated run: 6 test items, K = 2, p0 = P(option 0)
# ---------------------------------------------------------------------------------------
# confidence max(p0, 1 - p0) and correctness (prediction = argmax):
#   0.95 right, 0.90 wrong, 0.80 right, 0.70 right, 0.60 wrong, 0.55 right
TEST = [(0.95, 0), (0.10, 0), (0.80, 0), (0.30, 1), (0.60, 1), (0.45, 1)]
DEV = [(0.95, 0), (0.9, 1), (0.85, 0), (0.2, 1), (0.75, 0), (0.3, 0)]


def _rows(items, split):
    rows = []
    for i, (p0, y) in enumerate(items):
        probs = [p0, 1.0 - p0]
        rows.append(
            {
                "uid": f"{split}-{i}",
                "label": y,
                "q": None,
                "options": ["Y", "N"],
                "rationales": ["r"],
                "forced": [False],
                "lengths": [3],
                "readouts": [probs],
                "mixture": probs,
                "probs": probs,
                "logits": [math.log(p0), math.log(1.0 - p0)],
            }
        )
    return rows


def _arrays(items):
    logits = np.array([[math.log(p), math.log(1 - p)] for p, _ in items])
    return logits, np.array([y for _, y in items])


@pytest.fixture()
def fake_run(tmp_path):
    run = tmp_path / "fake-s0" / "reinforce"
    (run / "eval").mkdir(parents=True)
    for split, items in (("test", TEST), ("dev", DEV)):
        text = "".join(json.dumps(r) + "\n" for r in _rows(items, split))
        (run / "eval" / f"{split}.jsonl").write_text(text)
    (run / "log.jsonl").write_text(
        "".join(
            json.dumps({"step": s, "rationale_length": 40 - s, "grad_pathwise": 1.0})
            + "\n"
            + json.dumps({"step": s, "grad_score_function": 3.0, "dev_ece": 0.1})
            + "\n"
            for s in range(3)
        )
    )
    return run


def test_routing_numbers_by_hand_raw(fake_run):
    # raw confidences, t = 0.75: decided {0.95 right, 0.90 wrong, 0.80 right} -> coverage
    # 3/6, error 1/3, 3 escalated; cost (10 * 1 wrong + 1 * 3 escalated) / 6 = 13/6
    _, route_table, metric_table, fig, out = routing_update(
        [str(fake_run)], 0.75, 0.05, 10.0, 1.0, calibrated=False
    )
    r = out["runs"][str(fake_run)]
    assert r["coverage"] == 0.5 and r["decided"] == 3 and r["errors"] == 1
    assert r["risk"] == pytest.approx(1 / 3)
    assert r["escalated"] == 3 and r["cost"] == pytest.approx(13 / 6)
    assert r["T"] == 1.0 and r["n"] == 6
    # the same cost from rlcd_lab.math.routing: escalate (action 2) below t, else answer argmax
    logits, y = _arrays(TEST)
    conf, _ = metrics.confidence_and_correct(metrics.softmax(logits), y)
    actions = np.where(conf >= 0.75, logits.argmax(1), 2)
    cost = np.array([[0, 10], [10, 0], [1, 1]])
    assert r["cost"] == pytest.approx(realized_costs(actions, y, cost).mean())
    # Cov@0.05: only the top item is right before the 0.90 error -> 1/6
    assert r["cov_at_eps"] == pytest.approx(1 / 6)
    assert route_table["data"][0][2] == "50.0% (3/6)"
    assert route_table["data"][0][3] == "33.3% (1 wrong)"
    assert metric_table["headers"][6] == "Cov@0.05"
    # the figure marks the operating point on the curve
    marks = [t for t in fig.to_dict()["data"] if t["name"].startswith("at t")]
    assert marks[0]["x"] == [0.5] and marks[0]["y"] == pytest.approx([1 / 3])


@pytest.mark.parametrize("threshold", [0.0, 0.6, 0.7, 0.77, 0.9, 1.0])
def test_routing_numbers_equal_metrics_after_temperature_scaling(fake_run, threshold):
    eps = 0.2
    *_, out = routing_update([str(fake_run)], threshold, eps, 4.0, 0.5, calibrated=True)
    r = out["runs"][str(fake_run)]
    logits, y = _arrays(TEST)
    dev_logits, dev_y = _arrays(DEV)
    T = metrics.fit_temperature(dev_logits, dev_y)
    conf, correct = metrics.confidence_and_correct(metrics.apply_temperature(logits, T), y)
    decided = conf >= threshold
    assert r["T"] == pytest.approx(T)
    assert r["decided"] == decided.sum() and r["errors"] == (decided & ~correct).sum()
    assert r["coverage"] == pytest.approx(decided.mean())
    if decided.any():
        assert r["risk"] == pytest.approx((~correct[decided]).mean())
    else:  # no error rate among no decisions
        assert r["risk"] is None
    assert r["cost"] == pytest.approx((4.0 * r["errors"] + 0.5 * (~decided).sum()) / 6)
    # the table's metrics are metrics.evaluate's temperature-scaled row
    row = metrics.evaluate(logits, y, dev=(dev_logits, dev_y), eps=eps, is_logits=True)
    for key in ("accuracy", "brier", "nll", "ece", "aurc"):
        assert r[key] == pytest.approx(row[f"ts_{key}"])
    assert r["cov_at_eps"] == pytest.approx(row["ts_cov_at_eps"])
    assert r["pred_cov_at_eps"] == pytest.approx(row["ts_pred_cov_at_eps"])


def test_dev_threshold_applied_to_test(fake_run):
    # raw dev confidences 0.95 right, 0.90 wrong, 0.85 right, 0.80 right, 0.75 right,
    # 0.70 wrong: top-k error rates 0, 1/2, 1/3, 1/4, 1/5, 2/6; the largest k with error
    # <= 0.25 is 5, so the dev threshold is 0.75. On test, 0.95, 0.90 (wrong) and 0.80
    # reach it: coverage 3/6, error 1/3.
    *_, out = routing_update([str(fake_run)], 0.5, 0.25, 1.0, 1.0, calibrated=False)
    r = out["runs"][str(fake_run)]
    assert r["dev_threshold"] == pytest.approx(0.75)
    assert r["test_coverage_at_dev_threshold"] == pytest.approx(3 / 6)
    assert r["test_risk_at_dev_threshold"] == pytest.approx(1 / 3)


def test_cost_curve_matches_route_at_every_threshold(fake_run):
    s = load_run(str(fake_run)).scores(False)
    t, cost = cost_curve(s, 10.0, 1.0)
    assert np.all(np.diff(t) > 0) and t[-1] == 1.0
    for j in range(len(t)):  # y[j] holds on (t[j-1], t[j]]: check at both ends
        lo = t[j - 1] + 1e-9 if j else 0.0
        for x in (lo, t[j]):
            assert route(s, x, 10.0, 1.0)["cost"] == pytest.approx(cost[j])
    assert cost[-1] == 1.0  # t = 1 escalates everything


def test_bayes_threshold():
    assert bayes_threshold(10.0, 1.0) == pytest.approx(0.9)
    assert bayes_threshold(1.0, 2.0) == 0.0 and bayes_threshold(0.0, 1.0) == 0.0
    with pytest.raises(gr.Error, match="non-negative"):
        bayes_threshold(-1.0, 1.0)


def test_routing_bad_input(fake_run, tmp_path):
    msg, table, *_ = routing_update([], 0.5, 0.05, 1.0, 1.0)
    assert "Select" in msg and table["data"] == []
    with pytest.raises(gr.Error, match="no eval/test.jsonl"):
        routing_update([str(tmp_path / "nope")], 0.5, 0.05, 1.0, 1.0)
    with pytest.raises(gr.Error, match="non-negative"):
        routing_update([str(fake_run)], 0.5, 0.05, -1.0, 1.0)
    with pytest.raises(gr.Error, match="eps"):
        routing_update([str(fake_run)], 0.5, 0.0, 1.0, 1.0)
    broken = tmp_path / "broken"
    (broken / "eval").mkdir(parents=True)
    (broken / "eval" / "test.jsonl").write_text("{not json\n")
    with pytest.raises(gr.Error, match="could not read"):
        routing_update([str(broken)], 0.5, 0.05, 1.0, 1.0)


def test_a_run_without_dev_is_not_fitted(fake_run, tmp_path):
    # a base checkpoint's run: test dump only. Its "temperature-scaled" view is the raw
    # readout and T is reported as not fitted (not as a fitted T of 1)
    base = tmp_path / "fake-s0" / "base"
    (base / "eval").mkdir(parents=True)
    (base / "eval" / "test.jsonl").write_text((fake_run / "eval" / "test.jsonl").read_text())
    msg, route_table, metric_table, _, out = routing_update(
        [str(base), str(fake_run)], 0.75, 0.05, 10.0, 1.0, calibrated=True
    )
    r, fitted = out["runs"][str(base)], out["runs"][str(fake_run)]
    assert r["fitted"] is False and r["T"] is None
    assert fitted["fitted"] is True and fitted["T"] == pytest.approx(
        metrics.fit_temperature(*_arrays(DEV))
    )
    assert route_table["data"][0][1] == "not fitted" and metric_table["data"][0][8] == "not fitted"
    assert "not fitted" in msg and route_table["data"][1][1] != "not fitted"
    # no dev dump: no dev threshold; the metrics are those of the raw readout
    raw = routing_update([str(base)], 0.75, 0.05, 10.0, 1.0, calibrated=False)[-1]
    raw = raw["runs"][str(base)]
    assert r["dev_threshold"] is None and raw["T"] == 1.0
    for key in ("accuracy", "brier", "nll", "ece", "aurc", "coverage", "cost"):
        assert r[key] == pytest.approx(raw[key])
    logits, y = _arrays(TEST)
    assert r["brier"] == pytest.approx(metrics.brier(metrics.softmax(logits), y))
    assert load_run(str(base)).fitted is False


def test_routing_figures_and_shipped_runs():
    names = list(shipped_runs())
    chosen = default_runs(names)
    assert chosen and chosen[0].endswith("reinforce")
    reliability, costs = routing_figures(chosen, 10.0, 1.0, True)
    labels = [t["name"] for t in reliability.to_dict()["data"]]
    # the SFT run sits at chance: left out of the figures (routing_tab.degenerate_reason)
    drawn = [
        n for n in chosen if not routing_tab.degenerate_reason(load_run(n), load_run(n).scaled)
    ]
    assert [n.rsplit("/", 1)[1] for n in chosen if n not in drawn] == ["sft"]
    assert labels[0] == "perfect calibration" and len(labels) == 1 + 2 * len(drawn)
    lines = [t for t in costs.to_dict()["data"] if t["name"] == "1 − c_e/c_w"]
    assert lines[0]["x"] == [pytest.approx(0.9)] * 2
    # the shipped runs' table metrics are those stored at training time (final/rlcd.json)
    from rlcd_lab.lm.checkpoint import read_meta

    *_, out = routing_update(chosen[:1], 0.9, 0.05, 10.0, 1.0, True)
    stored = read_meta(shipped_runs()[chosen[0]] / "final")["metrics"]["test"]
    r = out["runs"][chosen[0]]
    assert r["T"] == pytest.approx(stored["T"], rel=1e-6)
    assert r["aurc"] == pytest.approx(stored["ts_aurc"], rel=1e-6)
    assert r["cov_at_eps"] == pytest.approx(stored["ts_cov_at_eps"])


def test_default_runs_and_checkpoint():
    names = [
        "results/verify-s1/grpo",
        "results/verify-s1/reinforce",
        "runs/verify-s0/calibrate",
        "runs/verify-s0/grpo",
        "runs/verify-s0/mixture",
        "runs/verify-s0/reinforce",
        "runs/verify-s0/rft",
        "runs/verify-s0/rft-kl",
        "runs/verify-s0/sft",
    ]
    assert default_runs(names) == ["results/verify-s1/reinforce", "results/verify-s1/grpo"]
    assert default_runs(names[2:]) == [
        "runs/verify-s0/reinforce",
        "runs/verify-s0/grpo",
        "runs/verify-s0/rft",
        "runs/verify-s0/rft-kl",
        "runs/verify-s0/sft",
    ]
    assert default_runs(["a/x", "a/y"]) == ["a/x", "a/y"]  # no RLCD run: the first ones
    # the tiny verify task's runs before the real rung's, which sorts first by name
    rung = "results/basic-skills-arithmetic-verify/seed-17"
    tiny = "results/verify/seed-17"
    both = [f"{rung}/reinforce", f"{rung}/grpo", f"{tiny}/grpo", f"{tiny}/reinforce"]
    assert default_runs(both) == [f"{tiny}/reinforce", f"{tiny}/grpo"]
    assert default_checkpoint(["checkpoints/base-verify", "r/reinforce/final"]).endswith("final")


# ---------------------------------------------------------------------------------------
# Ask
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory, marker_lm, tokenizer):
    """An assets root with one checkpoint: the conftest model that writes ``ab Answer:``,
    with a fitted temperature of 2 and the verify task."""
    root = tmp_path_factory.mktemp("assets")
    meta = {"T": 2.0, "task": "verify", "method": "calibrate", "options": ["Y", "N"]}
    save_checkpoint(root / "checkpoints" / "tiny", marker_lm, tokenizer, meta)
    (root / "checkpoints" / "broken").mkdir()
    (root / "checkpoints" / "broken" / "config.json").write_text("{}")
    (root / "checkpoints" / "bad-meta").mkdir()
    (root / "checkpoints" / "bad-meta" / "config.json").write_text("{}")
    (root / "checkpoints" / "bad-meta" / "rlcd.json").write_text("{oops")
    return root


def test_ask_model_applies_the_fitted_temperature(marker_lm, tokenizer):
    meta = {"T": 2.0}
    r = ask_model(Reader(marker_lm, tokenizer, meta), "Q: 1?", ["Y", "N"], m=3, max_new_tokens=16)
    assert [x["text"] for x in r["rationales"]] == ["ab"] * 3
    assert not any(x["forced"] for x in r["rationales"])
    for x in r["rationales"]:
        z = np.array(x["logits"])
        assert x["u"] == pytest.approx(metrics.softmax(z / 2.0).tolist())
        assert x["u_raw"] == pytest.approx(metrics.softmax(z).tolist(), abs=1e-6)
    u = np.array([x["u"] for x in r["rationales"]])
    assert r["mixture"] == pytest.approx(u.mean(0).tolist())
    assert r["probs"] == r["rationales"][0]["u"] and r["answer"] == "Y"
    assert r["confidence"] == pytest.approx(max(r["probs"]))
    # one sampled token cannot reach the marker: it is forced
    r = ask_model(Reader(marker_lm, tokenizer, meta), "Q: 1?", ["Y", "N"], m=2, max_new_tokens=1)
    assert all(x["forced"] and x["length"] == 1 for x in r["rationales"])


def test_the_ask_tab_takes_the_T_status_from_its_reader(monkeypatch):
    """The Ask tab opens a checkpoint as a Reader (``Reader.load``) and reports its T status
    from it, without reading ``rlcd.json`` again."""
    from rlcd_lab.dashboard import ask_checkpoint

    reader = ask_tab.load_reader("checkpoints/base-verify")
    assert isinstance(reader, Reader)
    assert (
        not reader.T_fitted and reader.T_note == "method pretrain: a base model, never calibrated"
    )
    monkeypatch.setattr(ask_checkpoint, "raw_meta", lambda path: pytest.fail("read again"))
    *_, r = ask("checkpoints/base-verify", "33+60+20=113?", "Y, N", 1, 1.0, 8, 0)
    assert (r["T_fitted"], r["T_note"], r["T"]) == (False, reader.T_note, reader.T)


def test_ask_callback_routes_and_flags(tiny_root):
    verdict, html, fig, r = ask(
        "checkpoints/tiny", "Q: 1?", "Y, N", 2, 1.0, 1, 0, 0.0, root=tiny_root
    )
    assert r["decision"] == "automate" and "decide automatically" in verdict
    assert "T = 2.000" in verdict and "Length limit" in verdict and "marker forced" in html
    assert [t["name"] for t in fig.to_dict()["data"]] == ["r1", "r2", "mixture"]
    # a threshold above the confidence escalates, without sampling again
    verdict, r2 = reroute(r, 1.0)
    assert r2["decision"] == "escalate" and "escalate" in verdict
    assert r2["rationales"] == r["rationales"]


def test_forced_rationales_say_why():
    from rlcd_lab.dashboard.ask_tab import rationales_html, verdict_markdown

    def rationale(length: int, forced: bool) -> dict:
        return {"text": "t", "forced": forced, "length": length, "u": [0.5, 0.5]}

    result = {
        "options": ["yes", "no"], "m": 3, "T": 1.0, "mixture": [0.5, 0.5], "diversity": 0.0,
        "answer": "yes", "confidence": 0.5, "max_new_tokens": 64, "marker": "Answer:",
        "rationales": [rationale(64, True), rationale(10, True), rationale(12, False)],
    }  # fmt: skip
    verdict, html = verdict_markdown(result, 0.9), rationales_html(result)
    assert "**Length limit:** 1 of 3" in verdict and "**No marker:** 1 of 3" in verdict
    assert html.count("length limit hit") == 1 and html.count("stopped without the marker") == 1


@pytest.mark.parametrize(
    ("checkpoint", "question", "options", "msg"),
    [
        ("checkpoints/tiny", "Q: 1?", "", "enter the answer options"),
        ("checkpoints/tiny", "Q: 1?", "Y, Y", "duplicate option labels"),
        ("checkpoints/tiny", "Q: 1?", "yes, no", r"\['yes', 'no'\] are not a single token"),
        ("checkpoints/tiny", "Q: 1?", "Y, , N", "non-empty"),
        ("checkpoints/tiny", "   ", "Y, N", "type a question"),
        ("checkpoints/nowhere", "Q: 1?", "Y, N", "checkpoint 'checkpoints/nowhere' not found"),
        ("checkpoints/broken", "Q: 1?", "Y, N", "could not load checkpoint"),
    ],
)
def test_ask_bad_input_is_a_readable_error(tiny_root, checkpoint, question, options, msg):
    with pytest.raises(gr.Error, match=msg):
        ask(checkpoint, question, options, 2, 1.0, 8, 0, 0.5, root=tiny_root)


def test_question_length_is_capped_before_anything_is_loaded(tiny_root, monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("the model was loaded for an oversized question")

    monkeypatch.setattr(ask_tab, "load_reader", no_loading)
    monkeypatch.setattr(ask_tab, "positions_needed", no_loading)  # nor tokenised
    n = MAX_QUESTION_CHARS + 1
    with pytest.raises(gr.Error, match=rf"question is {n:,} characters long.*at most "):
        ask("checkpoints/tiny", "x" * n, "Y, N", 2, 1.0, 8, 0, 0.5, root=tiny_root)
    with pytest.raises(gr.Error, match=f"at most {MAX_QUESTION_CHARS:,}"):
        ask("checkpoints/nowhere", "x" * 100_000, "Y, N", 2, 1.0, 8, 0, 0.5, root=tiny_root)
    n = MAX_OPTIONS_CHARS + 1
    with pytest.raises(gr.Error, match=rf"options text is {n:,} characters.*{MAX_OPTIONS_CHARS:,}"):
        ask("checkpoints/tiny", "Q: 1?", "Y" * n, 2, 1.0, 8, 0, 0.5, root=tiny_root)
    # at the cap the question passes this check and reaches the model (here: loading)
    with pytest.raises(AssertionError, match="was loaded"):
        ask("checkpoints/tiny", "x" * MAX_QUESTION_CHARS, "Y, N", 2, 1.0, 8, 0, 0.5, root=tiny_root)


def test_context_length_config_or_tokenizer(marker_lm, tokenizer):
    # marker_lm: max_position_embeddings 512; the char tokenizer does not know its limit
    # (transformers' sentinel 1e30), so the config decides
    assert tokenizer.model_max_length > 10**20 and context_length(marker_lm, tokenizer) == 512
    short = char_tokenizer()
    short.model_max_length = 100  # the smaller of the two applies
    assert context_length(marker_lm, short) == 100
    short.model_max_length = 4096
    assert context_length(marker_lm, short) == 512


def test_prompt_past_the_context_is_refused(marker_lm, tokenizer, tiny_root):
    # plain prompt: question + "\n" (one token a character); then max_new_tokens = 8,
    # "Answer:" (7) and the bridge " " (1): len(q) + 1 + 8 + 7 + 1 = len(q) + 17 positions,
    # so 495 characters fill the 512 positions exactly and 496 are one too many
    reader = Reader(marker_lm, tokenizer, {})
    assert positions_needed(reader, "1" * 495, ["Y", "N"], 8) == (496, 512)
    r = ask_model(reader, "1" * 495, ["Y", "N"], m=1, max_new_tokens=8)
    assert len(r["rationales"]) == 1
    msg = r"prompt is 497 tokens.*8 rationale tokens.*needs 513 positions.*at most 512"
    with pytest.raises(ValueError, match=msg):
        ask_model(reader, "1" * 496, ["Y", "N"], m=1, max_new_tokens=8)
    # the callback says it as a gr.Error; fewer rationale tokens make the same question fit
    with pytest.raises(gr.Error, match=msg):
        ask("checkpoints/tiny", "1" * 496, "Y, N", 1, 1.0, 8, 0, 0.5, root=tiny_root)
    *_, r = ask("checkpoints/tiny", "1" * 496, "Y, N", 1, 1.0, 7, 0, 0.5, root=tiny_root)
    assert r["max_new_tokens"] == 7


def test_queue_is_bounded_and_model_requests_share_one_slot(tiny_root):
    demo = build_demo(tiny_root)
    assert demo._queue.max_size == ui.QUEUE_MAX_SIZE > 0
    assert demo._queue.default_concurrency_limit == ui.DEFAULT_CONCURRENCY
    model_fns = (ask_tab.ask, compare_tab.compare_checkpoints, batch_tab.batch_answers)
    bound = {f: inspect.unwrap(f.fn) for f in demo.fns.values()}  # confined, errors in pane
    asks = [f for f, fn in bound.items() if isinstance(fn, partial) and fn.func in model_fns]
    # the Ask button (and Enter), the Ask after a page load, Compare and Batch
    assert sorted(bound[f].func.__name__ for f in asks) == [
        "ask",
        "ask",
        "batch_answers",
        "compare_checkpoints",
    ]
    # the MCP tools run models too: in the same slot
    tools = [f for f in demo.fns.values() if f.api_name in mcp_tools.TOOLS]
    assert sorted(f.api_name for f in tools) == sorted(mcp_tools.TOOLS)
    assert {(f.concurrency_limit, f.concurrency_id) for f in asks + tools} == {
        (controls.MODEL_CONCURRENCY, controls.MODEL_CONCURRENCY_ID)
    }
    assert controls.MODEL_CONCURRENCY == 1  # the reader seeds torch's global generator
    others = [f for f in demo.fns.values() if f not in asks + tools]
    assert others and all(f.concurrency_id != controls.MODEL_CONCURRENCY_ID for f in others)
    assert all(f.concurrency_limit == "default" for f in others)


def test_parse_options_and_checkpoint_info(tiny_root):
    assert parse_options(" A, B ,C ") == ["A", "B", "C"] and parse_options("A B") == ["A", "B"]
    info, examples, question, options = checkpoint_info("checkpoints/tiny", "x?", "A, B", tiny_root)
    assert "fitted T** 2.000" in info and "calibrate" in info
    choices = examples.choices
    assert len(choices) == 100 and choices[0][1] == "verify-test-0"
    assert question == "33+60+20=113?" and options == "Y, N"  # options did not fit: replaced
    _, _, question, _ = checkpoint_info("checkpoints/tiny", "mine?", "Y, N", tiny_root)
    assert question == "mine?"  # options fit the task: the user's question is kept
    info, *_ = checkpoint_info("checkpoints/nowhere", "q", "Y, N", tiny_root)
    assert "not found" in info
    info, *_ = checkpoint_info("checkpoints/bad-meta", "q", "Y, N", tiny_root)
    assert "could not read" in info and "rlcd.json" in info
    assert example_fields("checkpoints/tiny", "verify-test-1", tiny_root) == (
        "90+25+83=218?",
        "Y, N",
    )
    with pytest.raises(gr.Error, match="no example"):
        example_fields("checkpoints/tiny", "nope", tiny_root)


def test_generic_examples_only_for_a_chat_checkpoint_without_task(tiny_root, tmp_path):
    chat = tmp_path / "chat"  # what checkpoint_info reads: no model is loaded
    chat.mkdir()
    (chat / "config.json").write_text("{}")
    (chat / "rlcd.json").write_text(json.dumps({"task": None, "model": "Chatty"}))
    (chat / "chat_template.jinja").write_text("{{ messages }}")
    info, examples, question, options = checkpoint_info(str(chat), "", "", tiny_root)
    assert "Chatty" in info and "No task" in info and examples.label == "Example question"
    assert [uid for _, uid in examples.choices] == [it.uid for it in GENERIC_EXAMPLES]
    first = GENERIC_EXAMPLES[0]
    assert (question, options) == (first.prompt, ", ".join(first.options))
    assert checkpoint_info(str(chat), "mine?", "Y, N", tiny_root)[2:] == ("mine?", "Y, N")
    planets = next(it for it in GENERIC_EXAMPLES if len(it.options) == 10)
    assert "🌍" in planets.prompt
    assert example_fields(str(chat), planets.uid, tiny_root) == (
        planets.prompt,
        "A, B, C, D, E, F, G, H, I, J",
    )
    # the same files without a chat template (a character-level model): no examples
    (chat / "chat_template.jinja").unlink()
    _, examples, question, _ = checkpoint_info(str(chat), "", "", tiny_root)
    assert examples.choices == [] and question == ""


def test_checkpoint_from_env_and_local_smollm2(tiny_root, tmp_path, monkeypatch):
    monkeypatch.delenv(CHECKPOINT_ENV, raising=False)
    smollm2 = tmp_path / "smollm2"
    assert local_checkpoints(smollm2) == []  # not converted: not listed, nothing fetched
    assert not smollm2.exists()
    smollm2.mkdir()
    (smollm2 / "config.json").write_text("{}")
    (smollm2 / "rlcd.json").write_text("{}")
    assert local_checkpoints(smollm2) == [str(smollm2)]
    tiny = str(tiny_root / "checkpoints" / "tiny")
    monkeypatch.setenv(CHECKPOINT_ENV, tiny)
    assert local_checkpoints(smollm2) == [tiny, str(smollm2)]
    monkeypatch.setenv(CHECKPOINT_ENV, str(smollm2))  # listed once
    assert local_checkpoints(smollm2) == [str(smollm2)]
    monkeypatch.setenv(CHECKPOINT_ENV, tiny)
    demo = build_demo(tiny_root)  # app.py, rlcd-lab app and make app all build this
    dropdowns = [  # the Ask tab's and the Batch tab's
        b for b in demo.blocks.values() if isinstance(b, gr.Dropdown) and b.label == "Checkpoint"
    ]
    assert len(dropdowns) == 2
    for dropdown in dropdowns:
        assert dropdown.value == tiny and tiny in [value for _, value in dropdown.choices]


# ---------------------------------------------------------------------------------------
# Runs and Proposition 1
# ---------------------------------------------------------------------------------------


def test_run_curves_and_compare(fake_run):
    fig, summary = run_curves(
        str(fake_run), ["rationale length", "gradient norms", "dev Brier, ECE, AURC"]
    )
    d = fig.to_dict()
    assert [t["name"] for t in d["data"]] == [
        "rationale_length",
        "grad_pathwise",
        "grad_score_function",
        "dev_ece",
    ]
    assert d["data"][0]["y"] == [40.0, 39.0, 38.0]
    assert "RMS(score function) / RMS(pathwise) = **3.0×**" in summary
    fig = compare_runs([str(fake_run)], "rationale_length")
    assert fig.to_dict()["data"][0]["name"] == "fake-s0/reinforce"
    with pytest.raises(gr.Error, match="unknown panels"):
        run_curves(str(fake_run), ["nope"])


def test_runs_and_compare_show_the_warnings_training_stored(
    fake_run, tiny_root, marker_lm, tokenizer
):
    """``rlcd-lab train`` stores its final evaluation's warnings in ``final/rlcd.json``
    (``metrics.warnings``); the Runs tab's summary and the Compare tab's side show them
    beside the run."""
    warning = "forced markers on 90% of rationales (9 of 10; warned above 20%): ..."
    meta = {"method": "calibrate", "options": ["Y", "N"], "metrics": {"warnings": [warning]}}
    save_checkpoint(fake_run / "final", marker_lm, tokenizer, meta)
    _, summary = run_curves(str(fake_run), ["rationale length"])
    assert f"**Warnings** of its final evaluation:\n\n* {warning}" in summary
    _, md_a, _, md_b, _, _ = compare_checkpoints(
        "checkpoints/tiny", str(fake_run / "final"), "Q: 1?", "Y, N", 1, 1.0, 8, 0,
        root=tiny_root,
    )  # fmt: skip
    assert f"* {warning}" in md_b and "Warnings" not in md_a  # the tiny one stored none


def test_proposition1_table_hand_worked():
    # u rows (0.9,0.1), (0.2,0.8), (0.6,0.4) -> p = (17/30, 13/30); q = (0.7, 0.3)
    # J(p,q) = 2 p.q - ||p||^2 = 2 * 15.8/30 - 458/900 = 0.544444...
    # E_r J(u_r,q) = mean(2*0.66 - 0.82, 2*0.38 - 0.68, 2*0.54 - 0.52) = 0.38
    rows = proposition1_table("0.9,0.1\n0.2,0.8\n0.6,0.4", "0.7,0.3")
    values = [float(v) for _, v in rows]
    assert values[0] == pytest.approx(0.544444, abs=1e-6)
    assert values[1] == pytest.approx(0.38, abs=1e-6)
    assert values[0] == pytest.approx(values[1] + values[2], abs=2e-6)
    assert values[3] == pytest.approx(15.8 / 30, abs=1e-6)  # RLVR reward p.q


def test_proposition1_sliders_match_the_typed_version():
    check, table, fig = proposition1_sliders(2, 3, 0.9, 0, 0.2, 0, 0.6, 0, 0.1, 0, 0.7, 0)
    typed = proposition1_table("0.9,0.1\n0.2,0.8\n0.6,0.4", "0.7,0.3")
    assert table.values.tolist() == typed
    assert "0.5444" in check and "diversity bonus" in check
    names = [t["name"] for t in fig.to_dict()["data"]]
    assert names == ["r1", "r2", "r3", "mixture", "q (outcomes)"]
    # three options: C gets the rest; A + B > 1 is rescaled
    assert simplex(0.2, 0.5, 3) == pytest.approx([0.2, 0.5, 0.3])
    assert simplex(0.9, 0.3, 3) == pytest.approx([0.75, 0.25, 0.0])
    check, table, _ = proposition1_sliders(3, 1, 0.2, 0.5, 0, 0, 0, 0, 0, 0, 0.2, 0.5)
    assert "no diversity bonus" in check and float(table.values[2][1]) == 0.0
    shown = [u["visible"] for u in playground_visibility(3, 2)]
    assert shown == [True, True, False, False, True, True, False, False, True]


@pytest.mark.parametrize(
    ("readouts", "q", "msg"),
    [
        ("0.5,x", "0.5,0.5", "could not read"),
        ("0.5,0.5", "1,0,0", "same number"),
        ("-1,2", "1,0", "non-negative"),
        ("0,0", "1,0", "positive mass"),
    ],
)
def test_proposition1_table_errors(readouts, q, msg):
    with pytest.raises(gr.Error, match=msg):
        proposition1_table(readouts, q)


# ---------------------------------------------------------------------------------------
# The app
# ---------------------------------------------------------------------------------------


def test_offline_theme_loads_no_web_fonts():
    theme = offline_theme()
    css = theme._get_theme_css()
    assert "googleapis" not in css and "@font-face" not in css
    assert "system-ui" in css


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_app_end_to_end(fake_run):
    from gradio_client import Client

    demo = build_demo(allowed_dirs=[fake_run.parents[1]])  # the fabricated run's folder
    assert isinstance(demo, gr.Blocks)
    port = _free_port()
    demo.launch(prevent_thread_lock=True, server_port=port, quiet=True)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        # ask a question of a shipped checkpoint (the tabs' events are undocumented
        # endpoints: every input is passed, gradio_client has no defaults for them)
        ck, rule = "results/verify/seed-17/reinforce/final", ("max_p", "single")
        verdict, _, _, result = client.predict(
            ck, "33+60+20=113?", "Y, N", 2, 1.0, 64, 0, 0.5, *rule, api_name="/ask"
        )
        assert len(result["rationales"]) == 2 and result["item"]["label"] == "Y"
        u = np.array([r["u"] for r in result["rationales"]])
        assert result["mixture"] == pytest.approx(u.mean(0).tolist())
        assert result["decision"] == ("automate" if result["confidence"] >= 0.5 else "escalate")
        assert f"T = {result['T']:.3f}" in verdict
        # bad input comes back as one line in the answer's pane, naming labels this
        # model can use
        verdict, *_, result = client.predict(
            ck, "1+1+1=3?", "yes, no", 1, 1.0, 8, 0, 0.5, *rule, api_name="/ask"
        )
        assert verdict.startswith(controls.ERROR_PREFIX) and "\n" not in verdict
        assert "not a single token" in verdict and "Y, N" in verdict and result is None
        # an oversized question comes back as the message naming the limit, at once
        verdict, *_ = client.predict(
            ck, "1" * 20_000, "Y, N", 1, 1.0, 8, 0, 0.5, *rule, api_name="/ask"
        )
        assert f"at most {MAX_QUESTION_CHARS:,}" in verdict
        # a path outside the allowed folders: refused, whether or not it exists
        for name in ("/etc", "/no/such/folder"):
            summary, *_ = client.predict(
                [name], 0.5, 0.05, 10.0, 1.0, False, *rule, api_name="/routing"
            )
            assert summary.startswith(controls.ERROR_PREFIX) and "not available here" in summary
        # move the threshold on the fabricated run: numbers as metrics computes them
        logits, y = _arrays(TEST)
        conf, correct = metrics.confidence_and_correct(metrics.softmax(logits), y)
        for t in (0.75, 0.58, 0.97):
            *_, out = client.predict(
                [str(fake_run)], t, 0.05, 10.0, 1.0, False, *rule, api_name="/routing"
            )
            r = out["runs"][str(fake_run)]
            decided = conf >= t
            assert r["coverage"] == pytest.approx(decided.mean())
            assert r["errors"] == (decided & ~correct).sum()
            assert r["aurc"] == pytest.approx(metrics.aurc(conf, correct))
            assert r["cov_at_eps"] == pytest.approx(metrics.coverage_at_risk(conf, correct, 0.05))
    finally:
        demo.close()


# ---------------------------------------------------------------------------------------
# Figures added to rlcd_lab.drawing.plots for the dashboard
# ---------------------------------------------------------------------------------------


def test_risk_coverage_compact_options():
    from rlcd_lab.drawing import plots

    rng = np.random.default_rng(0)
    conf = rng.uniform(0.5, 1.0, 500)
    correct = rng.random(500) < conf
    models = {"a": (conf, correct), "b": (conf[::-1], correct)}
    fig = plots.risk_coverage_figure(
        models, eps=0.1, oracle="none", max_points=50, marks={"b": (0.4, 0.2)}, cov_style="markers"
    )
    d = fig.to_dict()["data"]
    assert [t["name"].split(" (")[0] for t in d] == ["a", "b", "Cov@0.1", "threshold", "risk = 0.1"]
    cov, risk = metrics.risk_coverage_curve(conf, correct)
    # thinned for display, first and last points kept, exact values on the full curve
    assert len(d[0]["x"]) == 50 and d[0]["x"][0] == cov[0] and d[0]["x"][-1] == 1.0
    assert set(d[0]["y"]) <= set(risk.tolist())
    assert d[0]["meta"]["aurc"] == metrics.aurc(conf, correct)
    assert d[2]["x"] == [metrics.coverage_at_risk(*m, 0.1) for m in models.values()]
    assert d[2]["y"] == [0.1, 0.1] and d[2]["meta"]["models"] == ["a", "b"]
    assert d[3]["x"] == [0.4] and d[3]["meta"] == {
        "models": ["b"],
        "coverage": [0.4],
        "risk": [0.2],
    }


def test_reliability_threshold_and_compare_curves():
    from rlcd_lab.drawing import plots

    rng = np.random.default_rng(1)
    p = metrics.softmax(rng.normal(size=(300, 3)) * 2)
    y = rng.integers(0, 3, 300)
    d = plots.reliability_curves({"m": (p, y)}, n_bins=10).to_dict()["data"]
    assert d[1]["meta"]["ece"] == metrics.ece(p, y, 10)
    assert sum(d[2]["y"]) == pytest.approx(1.0)  # fraction of items per bin
    d = plots.threshold_curves(
        {"m": ([0.5, 0.7, 0.9], [3.0, 1.0, 2.0])}, vlines={"t*": 0.8}
    ).to_dict()["data"]
    assert d[0]["meta"] == {"model": "m", "t_min": 0.7, "y_min": 1.0}
    assert d[0]["line"]["shape"] == "vh" and d[1]["x"] == [0.7] and d[2]["x"] == [0.8, 0.8]
    rows = [{"step": 0, "a": 1, "b": 2}, {"step": 1, "a": 3, "b": 4}]
    fig = plots.training_curves(rows, [("a", "b"), "a"], separate=True)
    d = fig.to_dict()
    assert [t.get("yaxis", "y") for t in d["data"]] == ["y", "y", "y2"]
    assert [a["text"] for a in d["layout"]["annotations"]] == ["a / b", "a"]
    d = plots.compare_curves({"r1": rows, "r2": rows[:1]}, "b").to_dict()["data"]
    assert [t["name"] for t in d] == ["r1", "r2"] and d[1]["y"] == [2.0]


# ---------------------------------------------------------------------------------------
# Model cards, local runs, the rule, Compare, Batch, Help, themes
# ---------------------------------------------------------------------------------------


def test_model_card_base_vs_trained(tiny_root, tmp_path):
    from rlcd_lab.tasks import load_task_items

    # a shipped base checkpoint: method pretrain, T never fitted although rlcd.json says 1.0
    base = model_card("checkpoints/base-verify")
    assert "**method** pretrain" in base and "**T** not fitted" in base
    assert "fitted T" not in base
    first_dev = load_task_items("verify", "dev")[0]  # the example: the task's first dev item
    assert f"`{first_dev.prompt}`" in base
    assert f"→ **{first_dev.options[first_dev.label]}**" in base
    assert "`task`" in base and "`Y`, `N`" in base
    assert "**T** not fitted" in checkpoint_info("checkpoints/base-verify", "", "")[0]
    # a trained checkpoint: its fitted T (2.0 in tiny_root's rlcd.json)
    trained = model_card("checkpoints/tiny", tiny_root)
    assert "**fitted T** 2.000" in trained and "not fitted" not in trained
    # what decides: the method, and whether rlcd.json records T at all (old key too)
    for meta, fitted in (
        ({"method": "pretrain", "T": 1.0}, False),
        ({"method": "pretrained", "temperature": 1.0}, False),  # the old key of T
        ({"method": "calibrate", "temperature": 1.3}, True),
        ({"method": "calibrate"}, False),
        ({"method": "calibrate", "T": 1.0}, True),
    ):
        (tmp_path / "rlcd.json").write_text(json.dumps(meta))
        assert temperature_status(tmp_path, meta)[0] is fitted
    # the Ask tab says so too, and reads a base checkpoint raw (T = 1)
    verdict, *_, r = ask("checkpoints/base-verify", "33+60+20=113?", "Y, N", 1, 1.0, 8, 0)
    assert r["T_fitted"] is False and r["T"] == 1.0 and "**not fitted**" in verdict
    with pytest.raises(gr.Error, match="not found"):
        model_card("checkpoints/nowhere", tiny_root)


@pytest.fixture()
def runs_dir(tmp_path, marker_lm, tokenizer):
    """A runs/ folder: a trained run (final/ checkpoint, eval dumps, log), a nested run
    with only a log, and a model directory that is not a run."""
    runs = tmp_path / "runs"
    run = runs / "verify-s0" / "reinforce"
    cfg = {"method": "reinforce", "init": "base", "out": str(run), "steps": 3}
    (run / "eval").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(cfg))
    meta = {"T": 1.5, "method": "reinforce", "task": "verify", "options": ["Y", "N"]}
    save_checkpoint(run / "final", marker_lm, tokenizer, meta)
    for split, items in (("test", TEST), ("dev", DEV)):
        text = "".join(json.dumps(r) + "\n" for r in _rows(items, split))
        (run / "eval" / f"{split}.jsonl").write_text(text)
    (run / "log.jsonl").write_text(json.dumps({"step": 0, "rationale_length": 4}) + "\n")
    nested = runs / "deep" / "seed-1" / "sft"
    nested.mkdir(parents=True)
    (nested / "config.json").write_text(json.dumps({**cfg, "method": "sft"}))
    (nested / "log.jsonl").write_text(json.dumps({"step": 0, "loss": 1.0}) + "\n")
    (runs / "notarun").mkdir()
    (runs / "notarun" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return runs


def test_runs_trained_under_runs_are_listed(runs_dir, tiny_root):
    from rlcd_lab.metrics import DEFAULT_EPS

    run, nested = f"{runs_dir}/verify-s0/reinforce", f"{runs_dir}/deep/seed-1/sft"
    assert [str(p) for p in local_runs(runs_dir)] == [nested, run]
    assert trained_checkpoints(runs_dir) == [f"{run}/final"]
    assert local_run_choices(runs_dir) == [run]  # the one with eval dumps
    assert local_run_choices(runs_dir, "log.jsonl") == [nested, run]
    assert local_runs(runs_dir / "missing") == []
    demo = build_demo(tiny_root, runs_root=runs_dir)
    dropdowns = {b.label: b for b in demo.blocks.values() if isinstance(b, gr.Dropdown)}
    listed = lambda label: [v for _, v in dropdowns[label].choices]  # noqa: E731
    assert f"{run}/final" in listed("Checkpoint") and "checkpoints/tiny" in listed("Checkpoint")
    assert run in listed("Runs (cached eval dumps)") and nested in listed("Run")
    (eps,) = [b for b in demo.blocks.values() if getattr(b, "label", "") == "error budget ε"]
    assert eps.value == DEFAULT_EPS
    # the trained checkpoint answers, with its fitted T; its run routes
    verdict, *_, r = ask(f"{run}/final", "Q: 1?", "Y, N", 1, 1.0, 8, 0, root=tiny_root)
    assert r["T"] == 1.5 and r["T_fitted"] is True and "T = 1.500" in verdict
    *_, out = routing_update([run], 0.75, 0.05, 10.0, 1.0, calibrated=False, root=tiny_root)
    assert out["runs"][run]["decided"] == 3  # the fabricated run: 3 of 6 at t = 0.75


def test_nothing_decided_is_explained(fake_run):
    logits, _ = _arrays(TEST)
    conf = metrics.softmax(logits).max(1)  # raw: 0.95 .. 0.55, all < 0.99
    # brute force: the largest candidate threshold that decides at least half of the items
    t_half = max(t for t in conf if np.mean(conf >= t) >= 0.5)
    msg, table, *_, out = routing_update([str(fake_run)], 0.99, 0.05, 10.0, 1.0, False)
    r = out["runs"][str(fake_run)]
    assert r["decided"] == 0 and table["data"][0][2] == "0.0% (0/6)"
    assert r["threshold_for_half"] == pytest.approx(t_half) and t_half == pytest.approx(0.8)
    assert r["max_confidence"] == pytest.approx(0.95)
    assert "Nothing decided for 1 of 1 runs" in msg
    assert f"highest confidence 0.950 < t = 0.990; t = {t_half:.3f} would decide 50.0% (3/6)" in msg
    # at t_half the tab decides what the note promised
    msg, table, *_ = routing_update([str(fake_run)], r["threshold_for_half"], 0.05, 10, 1, False)
    assert table["data"][0][2] == "50.0% (3/6)" and "Nothing decided" not in msg


def test_nothing_decided_has_no_error_rate(fake_run):
    # raw test confidences 0.95 .. 0.55: t = 0.99 decides none of the 6 items, so the
    # error when decided is undefined (0 errors / 0 decisions), not 0%
    head = routing_words.ROUTING_COLUMNS
    col = head.index("error when decided")
    _, table, _, fig, out = routing_update([str(fake_run)], 0.99, 0.05, 10.0, 1.0, False)
    r = out["runs"][str(fake_run)]
    assert r["decided"] == 0 and r["errors"] == 0 and r["risk"] is None
    assert table["data"][0][col] == "nothing decided"
    assert not [t for t in fig.to_dict()["data"] if t["name"].startswith("at t")]  # no point
    # a dev dump whose top item (0.99, right) is above every test confidence: with
    # eps = 0.05 the dev threshold is 0.99 (top-1 error 0, top-2 error 1/2), which decides
    # no test item, so "error on test at it" has no error rate either
    run = fake_run.parent.parent / "high-dev" / "reinforce"
    (run / "eval").mkdir(parents=True)
    (run / "eval" / "test.jsonl").write_bytes((fake_run / "eval" / "test.jsonl").read_bytes())
    dev = [(0.99, 0), (0.98, 1), (0.6, 0), (0.3, 1)]
    (run / "eval" / "dev.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in _rows(dev, "dev"))
    )
    _, table, *_, out = routing_update([str(run)], 0.5, 0.05, 10.0, 1.0, False)
    r = out["runs"][str(run)]
    assert r["dev_threshold"] == pytest.approx(0.99)
    assert r["test_coverage_at_dev_threshold"] == 0 and r["test_risk_at_dev_threshold"] is None
    assert table["data"][0][head.index("error on test at it")] == "nothing decided"
    # at t = 0.5 everything is decided: 2 of the 6 wrong (0.90 and 0.60)
    assert table["data"][0][col] == "33.3% (2 wrong)"


def test_routing_rule_switches_measure_and_mixture(fake_run, tmp_path):
    # chance-corrected with K = 2: 2 max p - 1, so t = 0.5 decides max p >= 0.75 (3 items)
    msg, table, *_, out = routing_update(
        [str(fake_run)], 0.5, 0.05, 10.0, 1.0, False, measure="chance_corrected"
    )
    assert out["runs"][str(fake_run)]["decided"] == 3 and "chance-corrected" in msg
    assert "max p ≥ 0.750" in msg  # the rule in words, with its max-p equivalent
    # a mixture dump of M = 3 readouts per item: the mixture view averages the readouts,
    # each temperature-scaled with the T fitted on dev
    rng = np.random.default_rng(0)
    z = rng.normal(size=(len(TEST), 3, 2)) * 2
    rows = _rows(TEST, "test")
    for row, zi in zip(rows, z, strict=True):
        row["readouts"] = metrics.softmax(zi).tolist()
    (fake_run / "eval" / "test-m3.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    T = metrics.fit_temperature(*_arrays(DEV))
    data = load_run(str(fake_run))
    assert data.mixture_m() == 3
    want = np.stack([metrics.softmax(zi / T).mean(0) for zi in z])
    assert data.probs(True, "mixture") == pytest.approx(want, abs=1e-9)
    *_, out = routing_update([str(fake_run)], 0.7, 0.05, 1.0, 1.0, True, "max_p", "mixture")
    r = out["runs"][str(fake_run)]
    assert r["m"] == 3 and r["decided"] == (want.max(1) >= 0.7).sum()
    assert r["accuracy"] == pytest.approx((want.argmax(1) == _arrays(TEST)[1]).mean())
    with pytest.raises(gr.Error, match="measure"):
        routing_update([str(fake_run)], 0.7, 0.05, 1.0, 1.0, True, "entropy")


def test_ask_rule_controls_and_reroute(tiny_root):
    *_, r = ask(
        "checkpoints/tiny", "Q: 1?", "Y, N", 3, 1.0, 8, 0, 0.2, "chance_corrected", "mixture",
        root=tiny_root,
    )  # fmt: skip
    mix = np.mean([x["u"] for x in r["rationales"]], axis=0)
    assert r["routing"]["confidence"] == pytest.approx(2 * mix.max() - 1)
    assert r["decision"] == ("automate" if 2 * mix.max() - 1 >= 0.2 else "escalate")
    verdict, r2 = reroute(r, 0.5, "max_p", "single")
    assert r2["routing"]["confidence"] == pytest.approx(max(r["rationales"][0]["u"]))
    assert "max p of the first rationale's readout is ≥ 0.500" in verdict
    assert decision(r2, 0.5) == r2["decision"]
    with pytest.raises(gr.Error, match="aggregate"):
        reroute(r, 0.5, "max_p", "vote")


def test_compare_returns_both(tiny_root, tmp_path, marker_lm, tokenizer):
    other = tmp_path / "base"  # the same weights, never calibrated: T = 1 instead of 2
    save_checkpoint(other, marker_lm, tokenizer, {"method": "pretrain", "options": ["Y", "N"]})
    summary, md_a, fig_a, md_b, fig_b, out = compare_checkpoints(
        "checkpoints/tiny", str(other), "Q: 1?", "Y, N", 2, 1.0, 8, 0, 0.0, root=tiny_root
    )
    a, b = out["a"], out["b"]
    assert a["T"] == 2.0 and b["T"] == 1.0 and b["T_fitted"] is False
    assert len(a["rationales"]) == len(b["rationales"]) == 2
    # same draw (same seed, same weights): b's logits are a's; a's readouts are softened
    za = np.array([x["logits"] for x in a["rationales"]])
    zb = np.array([x["logits"] for x in b["rationales"]])
    assert za == pytest.approx(zb)
    ua = np.array([x["u"] for x in a["rationales"]])
    assert ua == pytest.approx(metrics.softmax(za / 2))
    assert "**agree** on the answer" in summary
    assert "checkpoints/tiny" in md_a and str(other) in md_b
    assert [t["name"] for t in fig_b.to_dict()["data"]] == ["r1", "r2", "mixture"]
    # a side that cannot answer says why; the other is still shown
    summary, _, _, md_b, _, out = compare_checkpoints(
        "checkpoints/tiny", "checkpoints/broken", "Q: 1?", "Y, N", 1, 1.0, 8, 0, root=tiny_root
    )
    assert "Cannot answer" in md_b and "error" in out["b"] and "rationales" in out["a"]
    with pytest.raises(gr.Error, match="neither checkpoint"):
        compare_checkpoints(
            "checkpoints/nowhere", "checkpoints/broken", "Q: 1?", "Y, N", root=tiny_root
        )


def test_compare_says_undecided_instead_of_agree(tiny_root, tmp_path, marker_lm, tokenizer):
    # the same weights with T = 1e6: u = softmax(z / 1e6) is uniform to within |z| / 1e6,
    # so its "answer" is a tie-break; T = 2 (checkpoints/tiny) keeps the model's lean
    flat = tmp_path / "flat"
    meta = {"T": 1e6, "task": "verify", "method": "calibrate", "options": ["Y", "N"]}
    save_checkpoint(flat, marker_lm, tokenizer, meta)
    summary, *_, out = compare_checkpoints(
        "checkpoints/tiny", str(flat), "Q: 1?", "Y, N", 2, 1.0, 8, 0, 0.9, root=tiny_root
    )
    pa, pb = out["a"]["routing"]["probs"], out["b"]["routing"]["probs"]
    assert pb == pytest.approx([0.5, 0.5], abs=1e-3)  # B reads uniform
    assert "**agree**" not in summary and "**disagree**" not in summary
    assert "B is undecided: 0.50/0.50 (Y/N; confidence 0.500, escalate)" in summary
    ans = out["a"]["routing"]["answer"]
    assert f"A answers **{ans}**: {pa[0]:.2f}/{pa[1]:.2f} (Y/N" in summary
    assert 2 * max(pa) - 1 >= compare_tab.UNDECIDED_MARGIN  # A leans (chance-corrected)
    # swapped, A is the undecided side
    summary, *_ = compare_checkpoints(
        str(flat), "checkpoints/tiny", "Q: 1?", "Y, N", 2, 1.0, 8, 0, 0.9, root=tiny_root
    )
    assert "A is undecided: 0.50/0.50" in summary and "**agree**" not in summary


def _card(path, marker_lm, tokenizer, method, task, options=("Y", "N")):
    meta = {"method": method, "task": task, "options": list(options)}
    if method not in ("pretrain", "teach"):
        meta["T"] = 1.5
    save_checkpoint(path, marker_lm, tokenizer, meta)


def test_compare_default_pair_is_one_task(tmp_path, marker_lm, tokenizer):
    # a real rung's RLCD run sorts before the tiny verify task's by name and holds
    # "verify" in its folder, but its task (a data file) is not the tiny base's
    root = tmp_path / "assets"
    rung = "results/basic-skills-arithmetic-verify/seed-17/reinforce/final"
    tiny = "results/verify/seed-17/reinforce/final"
    _card(root / "checkpoints/base-facts", marker_lm, tokenizer, "pretrain", "facts", "ABCDEFGHIJ")
    _card(root / "checkpoints/base-verify", marker_lm, tokenizer, "pretrain", "verify")
    _card(root / "checkpoints/rung-taught", marker_lm, tokenizer, "teach", "/data/rung.jsonl")
    _card(root / rung, marker_lm, tokenizer, "reinforce", "/data/rung.jsonl")
    _card(
        root / "results/verify/seed-17/calibrate/final", marker_lm, tokenizer, "calibrate", "verify"
    )
    _card(root / tiny, marker_lm, tokenizer, "reinforce", "verify")
    names = list(shipped_checkpoints(root))
    first = load_task_items("verify", "test")[0]
    a, b, question, options = compare_tab.compare_defaults(names, root)
    assert (a, b) == ("checkpoints/base-verify", tiny)
    assert (question, options) == (first.prompt, ", ".join(first.options))
    # without the tiny task's runs: the rung's RLCD run against the base of its task
    rest = [n for n in names if "seed-17" not in n or n == rung]
    assert compare_tab.default_pair(rest, root) == ("checkpoints/rung-taught", rung)
    # an RLCD run without a base of its task: its stage-1 checkpoint (same task)
    no_base = [n for n in names if n != "checkpoints/base-verify" and n != rung]
    assert compare_tab.default_pair(no_base, root) == (
        "results/verify/seed-17/calibrate/final",
        tiny,
    )
    # no RLCD run: one checkpoint on both sides (one task); nothing: None
    only = ["checkpoints/base-facts", "checkpoints/base-verify"]
    assert compare_tab.default_pair(only, root) == ("checkpoints/base-verify",) * 2
    assert compare_tab.default_pair([], root) == (None, None)


def test_compare_tab_opens_on_one_task_pair():
    # the shipped checkpoints: the tiny verify base against its two-stage RLCD model,
    # asked a verify question (not the SmolLM2 rung's RLCD run)
    demo = build_demo()
    by_label = {getattr(b, "label", None): b for b in demo.blocks.values()}
    a, b = by_label["Checkpoint A"].value, by_label["Checkpoint B"].value
    assert (a, b) == ("checkpoints/base-verify", "results/verify/seed-17/reinforce/final")
    tasks = {read_meta(shipped_checkpoints()[n])["task"] for n in (a, b)}
    assert tasks == {"verify"}
    first = load_task_items("verify", "test")[0]
    questions = [
        blk.value
        for blk in demo.blocks.values()
        if getattr(blk, "label", None) == "Question" and blk.value == first.prompt
    ]
    assert questions  # the Compare tab's question is one of the pair's task


def test_batch_file_parsing(tmp_path):
    good = tmp_path / "q.jsonl"
    good.write_text(
        json.dumps({"question": "Q: 1?", "options": ["Y", "N"], "label": "Y"})
        + "\n"
        + json.dumps({"prompt": "Q: 22?", "options": "Y, N", "label": 1})
        + "\n\n"
        + json.dumps({"question": "x?", "options": "A | B | C"})
        + "\n"
    )
    qs = parse_question_file(good)
    assert [(q.row, q.question, q.options, q.label) for q in qs] == [
        (1, "Q: 1?", ("Y", "N"), "Y"),
        (2, "Q: 22?", ("Y", "N"), "N"),
        (4, "x?", ("A", "B", "C"), None),
    ]
    csv_file = tmp_path / "q.csv"
    csv_file.write_text('Question,Options,label\n"Q: 1?","Y, N",Y\nQ: 22?,Y N,\n')
    qs = parse_question_file(csv_file)
    assert [(q.question, q.options, q.label) for q in qs] == [
        ("Q: 1?", ("Y", "N"), "Y"),
        ("Q: 22?", ("Y", "N"), None),
    ]


@pytest.mark.parametrize(
    ("name", "content", "msg"),
    [
        ("q.txt", "question,options\n", "upload a .jsonl or .csv file"),
        ("q.jsonl", "{oops\n", "no valid question in the file: line 1: not valid JSON"),
        ("q.jsonl", '["a"]\n', "line 1: expected a JSON object"),
        ("q.jsonl", '{"question": "a"}\n', "line 1: no 'options'"),
        ("q.jsonl", '{"question": " ", "options": ["Y", "N"]}\n', "line 1: no question"),
        ("q.jsonl", '{"question": "a", "options": ["Y"]}\n', "line 1: need at least 2"),
        ("q.jsonl", '{"question": "a", "options": "Y, Y"}\n', "line 1: duplicate options"),
        ("q.jsonl", '{"question": "a", "options": "Y, N", "label": 5}\n', "label index 5"),
        ("q.csv", 'text,choices\na,"Y, N"\n', "'question' and 'options' columns; found: text"),
        ("q.csv", 'question,options,label\na,"Y, N",Z\n', "row 1: label 'Z' is not one of"),
        ("q.jsonl", "\n\n", "holds no questions"),
        ("q.jsonl", '{"question": "a", "options": "Y N"}\n' * 101, "more than 100 questions"),
        ("q.csv", b"question,options\n\xff\xfe,Y N\n", "not UTF-8"),
    ],
)
def test_batch_file_errors(tmp_path, tiny_root, name, content, msg):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ValueError, match=msg):
        parse_question_file(path)
    with pytest.raises(gr.Error, match="cannot use this file"):  # the callback says it too
        batch_answers("checkpoints/tiny", str(path), root=tiny_root)


def test_batch_answers_and_csv(tiny_root, tmp_path):
    import csv

    path = tmp_path / "questions.csv"
    path.write_text('question,options,label\nQ: 1?,"Y, N",Y\nQ: 22?,"Y, N",N\nQ: 1?,"yes, no",\n')
    summary, table, out = batch_answers(
        "checkpoints/tiny", str(path), 2, 1.0, 8, 0, 0.6, "max_p", "single", root=tiny_root
    )
    rows = [dict(zip(table["headers"], r, strict=True)) for r in table["data"]]
    assert [r["row"] for r in rows] == [1, 2, 3]
    assert "single token" in rows[2]["error"] and rows[2]["answer"] == ""
    for r in rows[:2]:
        probs = json.loads(r["probabilities"])
        assert r["confidence"] == pytest.approx(max(probs.values()), abs=1e-4)
        assert r["answer"] == max(probs, key=probs.get)
        assert r["decision"] == ("automate" if r["confidence"] >= 0.6 else "escalate")
        assert r["correct"] == (r["answer"] == r["label"])
    # each question is the Ask tab's reading (seed + row): the first rationale's readout
    *_, first = ask("checkpoints/tiny", "Q: 1?", "Y, N", 2, 1.0, 8, 1, 0.6, root=tiny_root)
    assert json.loads(rows[0]["probabilities"])["Y"] == pytest.approx(
        first["rationales"][0]["u"][0], abs=1e-4
    )
    with open(out, newline="") as f:
        written = list(csv.DictReader(f))
    assert [w["answer"] for w in written] == [r["answer"] for r in rows]
    assert [w["decision"] for w in written] == [r["decision"] for r in rows]
    assert "3 questions" in summary and "1 could not be read" in summary
    assert "max p of the first rationale's readout is ≥ 0.600" in summary


def test_batch_answers_valid_rows_and_reports_malformed_ones(tiny_root, tmp_path):
    import csv

    lines = [
        json.dumps({"question": "Q: 1?", "options": ["Y", "N"], "label": "Y"}),  # line 1: ok
        "{oops",  # line 2: not JSON
        "",  # line 3: blank, skipped
        json.dumps({"question": "Q: 22?", "options": "Y, N", "label": "Z"}),  # 4: bad label
        json.dumps(["a"]),  # line 5: not an object
        json.dumps({"question": "Q: 22?", "options": "Y, N", "label": 1}),  # line 6: ok
        json.dumps({"question": "Q: 1?", "options": "Y, Y"}),  # line 7: duplicate options
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    summary, table, out = batch_answers(
        "checkpoints/tiny", str(path), 2, 1.0, 8, 0, 0.6, "max_p", "single", root=tiny_root
    )
    rows = [dict(zip(table["headers"], r, strict=True)) for r in table["data"]]
    assert [r["row"] for r in rows] == [1, 2, 4, 5, 6, 7]  # file order, blank line skipped
    errors = {r["row"]: r["error"] for r in rows}
    assert errors[1] == errors[6] == ""
    assert errors[2].startswith("line 2: not valid JSON")
    assert errors[4] == "line 4: label 'Z' is not one of the options Y, N"
    assert errors[5] == "line 5: expected a JSON object with question and options"
    assert errors[7] == "line 7: duplicate options ['Y', 'Y']"
    by_row = {r["row"]: r for r in rows}
    assert by_row[4]["question"] == "Q: 22?" and by_row[4]["answer"] == ""
    assert by_row[7]["options"] == "Y, Y" and by_row[2]["question"] == ""
    # the valid rows are the same readings as a file holding only them (seed + row)
    good = tmp_path / "good.jsonl"
    good.write_text(lines[0] + "\n\n\n\n\n" + lines[5] + "\n")  # rows 1 and 6 again
    _, alone, _ = batch_answers(
        "checkpoints/tiny", str(good), 2, 1.0, 8, 0, 0.6, "max_p", "single", root=tiny_root
    )
    assert [[by_row[r[0]][c] for c in table["headers"]] for r in alone["data"]] == alone["data"]
    assert "6 questions" in summary and "4 malformed (see `error`)" in summary
    with open(out, newline="") as f:
        written = list(csv.DictReader(f))
    assert [w["error"] for w in written] == [r["error"] for r in rows]
    # CSV: data row 2 has one option; rows 1 and 3 are answered
    csv_path = tmp_path / "mixed.csv"
    csv_path.write_text('question,options\nQ: 1?,"Y, N"\nQ: 22?,Y\nQ: 22?,"Y, N"\n')
    _, table, _ = batch_answers("checkpoints/tiny", str(csv_path), 1, 1.0, 8, 0, root=tiny_root)
    rows = [dict(zip(table["headers"], r, strict=True)) for r in table["data"]]
    assert [(r["row"], bool(r["answer"])) for r in rows] == [(1, True), (2, False), (3, True)]
    assert rows[1]["error"] == "row 2: need at least 2 non-empty options, got ['Y']"
    # no valid row: the whole file is refused, naming each problem
    bad_only = tmp_path / "bad.jsonl"
    bad_only.write_text(lines[1] + "\n" + lines[4] + "\n")
    with pytest.raises(gr.Error, match="no valid question in the file: line 1: not valid JSON"):
        batch_answers("checkpoints/tiny", str(bad_only), root=tiny_root)
    with pytest.raises(ValueError, match="; line 2: expected a JSON object"):
        batch_tab.read_question_file(bad_only)
    questions, bad = batch_tab.read_question_file(path)
    assert [q.row for q in questions] == [1, 6] and [b.row for b in bad] == [2, 4, 5, 7]


def test_batch_table_fits_the_page_and_its_headers_one_line():
    px = [int(w.removesuffix("px")) for w in batch_tab.COLUMN_WIDTHS]
    assert len(px) == len(batch_tab.RESULT_COLUMNS)
    # no sideways scroll at 1440 px: the columns fit gradio's ~1215 px page
    assert sum(px) <= batch_tab.TABLE_WIDTH_PX < 1215
    # a header is 14 px bold monospace (0.6 em = 8.4 px a character) plus its cell's
    # padding (the 100 px column shows "confidence", 10 characters, on one line)
    for name, width in zip(batch_tab.RESULT_COLUMNS, px, strict=True):
        assert 8.4 * len(name) + 12 <= width, name


def test_batch_tab_layout_and_download_hidden_until_answered(tiny_root):
    demo = build_demo(tiny_root)
    (table,) = [b for b in demo.blocks.values() if getattr(b, "label", None) == "Answers"]
    assert table.column_widths == batch_tab.COLUMN_WIDTHS
    (download,) = [b for b in demo.blocks.values() if getattr(b, "label", None) == "answers.csv"]
    assert download.visible is False  # no empty drop area before there is a file
    (batch,) = [f for f in demo.fns.values() if f.api_name == "batch"]
    assert download in batch.outputs
    # after the batch, a second event shows the file when there is one (an error, shown
    # in the summary's pane, leaves none)
    (show,) = [f for f in demo.fns.values() if download in f.outputs and f is not batch]
    assert show.trigger_after == batch._id and show.inputs == [download]
    assert show.fn("answers.csv") == {"__type__": "update", "visible": True}
    assert show.fn(None) == {"__type__": "update", "visible": False}
    # the table spans the page: it is not inside the Row of the controls
    parent = table.parent
    while parent is not None and not isinstance(parent, gr.Row):
        parent = parent.parent
    assert parent is None or not any(
        getattr(b, "label", None) == "Checkpoint" for b in _descendants(parent)
    )


def _descendants(block):
    for child in getattr(block, "children", ()):
        yield child
        yield from _descendants(child)


def test_plot_mode_bar_shows_on_hover_only():
    # plotly shows its mode bar on hover only where the browser reports a pointer that
    # can hover (headless Chromium does not), and gradio passes no plotly config: CSS does
    css = " ".join(ui.CSS.split())
    assert ".js-plotly-plot .plotly .modebar { opacity: 0;" in css
    assert ".js-plotly-plot .plotly:hover .modebar," in css
    assert ".js-plotly-plot .plotly:focus-within .modebar { opacity: 1; }" in css


def test_help_lists_the_glossary_and_every_notebook():
    from pathlib import Path

    text = help_markdown()
    for term in ("AURC", "Cov@ε", "ECE", "T (temperature)", "chance-corrected confidence"):
        assert f"**{term}**" in text
    folder = Path(__file__).resolve().parent.parent / "notebooks"
    found = sorted(folder.glob("[0-9][0-9]_*.py"))
    assert found and all(f"`notebooks/{p.name}`" in text for p in found)
    assert "http" not in text  # no links out of the repository
    # JupyterLab opens the .py files themselves (make app's setting): no .ipynb to make
    assert "`make app`" in text and ".ipynb" not in text


def test_figures_follow_the_theme(fake_run, monkeypatch):
    from rlcd_lab.drawing import plots

    _, _, _, fig, _ = routing_update([str(fake_run)], 0.75, 0.05, 10.0, 1.0)
    layout = fig.to_dict()["layout"]
    assert layout["paper_bgcolor"] == layout["plot_bgcolor"] == plots.TRANSPARENT
    assert layout["xaxis"]["gridcolor"] == plots.NEUTRAL_GRID
    # black marks would vanish on a dark page: they take the theme's foreground
    bars = plots.rationale_bars([[0.9, 0.1]], ["Y", "N"], mixture=[0.9, 0.1])
    assert bars.data[-1].marker.color == "black"
    dark = plots.apply_theme(bars, "dark")
    assert dark.data[-1].marker.color == plots.FOREGROUND["dark"]
    assert dark.layout.template.layout.paper_bgcolor == "rgb(17,17,17)"  # plotly_dark
    assert dark.layout.paper_bgcolor == plots.TRANSPARENT
    with pytest.raises(ValueError, match="theme"):
        plots.apply_theme(bars, "sepia")
    # the app launches with the stylesheet that recolours figure text in dark mode
    seen = {}
    monkeypatch.setattr(gr.Blocks, "launch", lambda self, *a, **kw: seen.update(kw))
    ui.Dashboard().launch()
    assert seen["css"] == ui.CSS and ".dark .js-plotly-plot" in ui.CSS


# ---------------------------------------------------------------------------------------
# Hardening: confined paths, a fair queue
# ---------------------------------------------------------------------------------------


def _message(err: pytest.ExceptionInfo, *names: str) -> str:
    text = str(err.value)
    for name in names:
        text = text.replace(name, "NAME")
    return text


def test_the_dashboard_opens_only_allowed_folders(tiny_root, tmp_path, marker_lm, tokenizer):
    """A typed path outside the shipped assets, runs/ and the operator's folders is
    refused with one message, whether or not it exists (no file-system probe)."""
    meta = {"T": 2.0, "task": "verify", "method": "calibrate", "options": ["Y", "N"]}
    outside, allowed = tmp_path / "outside", tmp_path / "allowed"
    save_checkpoint(outside / "ck", marker_lm, tokenizer, meta)
    save_checkpoint(allowed / "ck", marker_lm, tokenizer, meta)
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "escape").symlink_to(outside / "ck")  # inside runs/, pointing outside
    demo = build_demo(tiny_root, runs_root=runs, allowed_dirs=[allowed])
    # the wired callbacks, their errors raised rather than shown in the pane (in_pane)
    panes = {f.api_name: f.fn for f in demo.fns.values() if f.api_name}
    fns = {name: getattr(fn, "raising", fn) for name, fn in panes.items()}
    args = ("Q: 1?", "Y, N", 1, 1.0, 8, 0, 0.5)
    verdict, *_ = panes["ask"]("/etc", *args)  # in the page: one line in the answer's pane
    assert verdict.startswith(controls.ERROR_PREFIX) and "not available here" in verdict
    refused = [
        str(outside / "ck"),  # a real checkpoint, outside
        str(tmp_path / "nothing-here"),  # no such path
        "/etc",
        "checkpoints/../../outside/ck",  # out of the assets root by ..
        str(runs / "escape"),  # a symbolic link out of runs/
    ]
    checkpoints, runs_ = set(), set()
    for name in refused:
        with pytest.raises(gr.Error) as err:
            fns["ask"](name, *args)
        checkpoints.add(_message(err, name[:120]))
        info, *_ = fns["checkpoint_info"](name, "q", "Y, N")
        assert "not available here" in info and "not found" not in info
        with pytest.raises(gr.Error) as err:  # runs: the Routing and Runs tabs
            fns["routing"]([name], 0.5, 0.05, 1.0, 1.0, False)
        runs_.add(_message(err, name[:120]))
        with pytest.raises(gr.Error) as err:
            fns["run_curves"](name, ["rationale length"])
        runs_.add(_message(err, name[:120]))
    assert len(checkpoints) == 1 and len(runs_) == 1  # the same words for every path
    assert all("not available here" in m for m in checkpoints | runs_)
    # the shipped checkpoints, the allowed folder and the runs under runs/ still open
    *_, r = fns["ask"]("checkpoints/tiny", *args)
    assert r["answer"] in ("Y", "N")
    *_, r = fns["ask"](str(allowed / "ck"), *args)
    assert r["answer"] in ("Y", "N")
    # called directly (a notebook, these tests), the callbacks are not confined
    *_, r = ask(str(outside / "ck"), *args, root=tiny_root)
    assert r["answer"] in ("Y", "N")


def test_the_app_command_passes_allowed_folders(monkeypatch, tmp_path):
    import rlcd_lab.dashboard.ui as dashboard
    from rlcd_lab.cli import main

    seen = {}

    class FakeDemo:
        def launch(self, **kwargs):
            seen["launch"] = kwargs

    def fake_build_demo(**kwargs):
        seen.update(kwargs)
        return FakeDemo()

    monkeypatch.setattr(dashboard, "build_demo", fake_build_demo)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()  # a missing folder is refused (tests/test_bounds.py)
    main(["app", "--allow-checkpoint-dir", str(a), str(b), "--port", "7999"])
    assert [str(p) for p in seen["allowed_dirs"]] == [str(a), str(b)]
    assert seen["launch"]["server_port"] == 7999


def test_one_users_burst_does_not_refuse_the_next_user(tiny_root):
    """The queue's slots are shared fairly: a burst of 100 events from one session (or
    from one address under many sessions) is refused beyond its share; others get in."""
    import asyncio

    from gradio.data_classes import PredictBodyInternal
    from starlette.requests import Request

    demo = build_demo(tiny_root)
    queue = demo._queue
    assert isinstance(queue, ui.FairQueue)
    fn_index = next(i for i, f in demo.fns.items() if f.api_name == "ask")

    def request(host: str) -> Request:
        scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}
        return Request({**scope, "client": (host, 5000)})

    async def push(session: str, host: str) -> bool:
        body = PredictBodyInternal(
            session_hash=session, fn_index=fn_index, data=[], request=request(host)
        )
        ok, *_ = await queue.push(body, request(host), None)
        return ok

    async def scenario() -> tuple:
        burst = [await push("alice", "10.0.0.1") for _ in range(100)]
        bob = await push("bob", "10.0.0.2")
        carol = await push("carol", "10.0.0.1")  # alice's address, her own session
        rotating = [await push(f"s{i}", "10.0.0.3") for i in range(100)]
        dave = await push("dave", "10.0.0.4")
        return burst, bob, carol, rotating, dave

    burst, bob, carol, rotating, dave = asyncio.run(scenario())
    assert sum(burst) == ui.MAX_SESSION_EVENTS and not any(burst[ui.MAX_SESSION_EVENTS :])
    assert bob and carol and dave
    assert sum(rotating) == ui.MAX_CLIENT_EVENTS  # a new session per event does not help
    assert len(queue) == ui.MAX_SESSION_EVENTS + 2 + ui.MAX_CLIENT_EVENTS + 1 <= ui.QUEUE_MAX_SIZE
