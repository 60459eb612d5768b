"""Typed decisions (rlcd_lab.decide): answers derived by hand from independent readouts.

The reference numbers come from ``rlcd_lab.reader.readout`` / ``rlcd_lab.reader`` called
directly on the same tiny models (shipped checkpoints and an in-process chat model),
with the fitted temperature applied by hand: ``p = softmax(z / T)``.
"""

from __future__ import annotations

import string
import time

import numpy as np
import pytest
import torch

from rlcd_lab.decide import DecisionModel
from rlcd_lab.decide.answering import DecideOptions
from rlcd_lab.decide.jev import (
    DecisionError,
    decision_confidence,
    expected_level,
    question_from_wire,
)
from rlcd_lab.files.assets import shipped_checkpoints
from rlcd_lab.lm.checkpoint import read_meta
from rlcd_lab.lm.model import char_tokenizer, tiny_model
from rlcd_lab.math.routing import chance_corrected_confidence, score_confidence
from rlcd_lab.reader import temperature_fitted
from rlcd_lab.reader.prompts import build_prompt, left_pad
from rlcd_lab.reader.rationales import sample_rationales
from rlcd_lab.reader.reading import direct_readout, shared_prefix_readout
from rlcd_lab.reader.readout import option_token_ids, readout

CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
STATES = ["33+60+20=113?", "47+38+16=91?", "12+34+56=102?", "90+90+90=260?"]


@pytest.fixture(scope="module")
def verify():
    """The shipped two-stage RLCD verify checkpoint (options Y/N, fitted T in rlcd.json)."""
    path = shipped_checkpoints()["results/verify/seed-17/reinforce/final"]
    return DecisionModel.from_checkpoint(path)


@pytest.fixture(scope="module")
def facts():
    """The shipped base facts checkpoint (10 options A..J, T = 1)."""
    return DecisionModel.from_checkpoint(shipped_checkpoints()["checkpoints/base-facts"])


@pytest.fixture(scope="module")
def chat():
    """A tiny random model whose tokenizer has a chat template (the chat prompt format)."""
    tok = char_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    return DecisionModel(tiny_model(tok, seed=0, hidden_size=32, layers=2), tok, {"T": 1.3})


def close(a, b, tol: float = 1e-5) -> bool:
    """Nested answers equal: same keys and strings, numbers within ``tol``."""
    if isinstance(a, dict):
        return (
            isinstance(b, dict) and a.keys() == b.keys() and all(close(a[k], b[k], tol) for k in a)
        )
    if isinstance(a, float | int) and not isinstance(a, bool):
        return abs(a - b) <= tol
    return a == b


def reference(dm: DecisionModel, text: str, labels, direct: bool = True) -> np.ndarray:
    """``softmax(z / T)`` over ``labels`` read after ``build_prompt(text)``, by hand."""
    opts = option_token_ids(dm.tokenizer, labels)
    prompt = build_prompt(dm.tokenizer, text, direct=direct)
    _, z = direct_readout(dm.model, dm.tokenizer, [prompt], opts.ids, opts.bridge)
    return (z[0].double() / dm.T).softmax(-1).detach().numpy()


# --------------------------------------------------------------------------- pure parts
def test_confidences_by_hand():
    # choice: (K max p - 1) / (K - 1)
    assert chance_corrected_confidence([0.5, 0.3, 0.2]) == pytest.approx((3 * 0.5 - 1) / 2)
    assert chance_corrected_confidence([0.25] * 4) == pytest.approx(0.0)
    assert chance_corrected_confidence([0.0, 1.0]) == pytest.approx(1.0)
    # score: mu = 0*0.1 + 1*0.2 + 2*0.7 = 1.6;
    # Var = 0.1*1.6^2 + 0.2*0.6^2 + 0.7*0.4^2 = 0.256 + 0.072 + 0.112 = 0.44; Var_max = 1
    assert expected_level([0.1, 0.2, 0.7]) == pytest.approx(1.6)
    assert score_confidence([0.1, 0.2, 0.7]) == pytest.approx(1 - 0.44)
    assert score_confidence([0, 0, 1, 0, 0]) == pytest.approx(1.0)
    assert score_confidence([0.5, 0, 0, 0, 0.5]) == pytest.approx(0.0)  # the widest split
    # uniform over L levels: Var = (L^2 - 1)/12, so 1 - (L + 1)/(3 (L - 1)) = 1/2 at L = 5
    assert score_confidence([0.2] * 5) == pytest.approx(0.5)
    # neighbouring levels cost less than distant ones
    assert score_confidence([0.5, 0.5, 0, 0]) > score_confidence([0.5, 0, 0, 0.5])
    # noul routing confidence = |2 p_yes - 1|
    assert decision_confidence("noul", [0.9, 0.1]) == pytest.approx(0.8)


def test_question_from_wire_validates():
    q = question_from_wire({"type": "score", "criteria": ["low", {"x": 1}, "high"]})
    assert q.labels == ("0", "1", "2") and q.descriptions[1] == {"x": 1}
    q = question_from_wire({"type": "noul", "criteria": {"true": "spam"}})
    assert q.labels == ("yes", "no") and q.descriptions == ("spam", None)
    bad = [
        ({"type": "choice", "criteria": {"a": None}}, "2 to 255"),
        ({"type": "choice", "criteria": {str(i): None for i in range(256)}}, "got 256"),
        ({"type": "choice", "criteria": {"a": None, " ": None}}, "non-empty"),
        ({"type": "choice", "criteria": {"a": None, "b\nc": None}}, "control"),
        ({"type": "score", "criteria": ["x"] * 11}, "2 to 10"),
        ({"type": "score", "criteria": ["x", None]}, "no null"),
        ({"type": "noul", "criteria": {"maybe": "x"}}, "only have"),
        ({"type": "box"}, "unknown question type"),
    ]
    for raw, msg in bad:
        with pytest.raises(DecisionError, match=msg):
            question_from_wire(raw)


# --------------------------------------------------------------------------- task format
def test_direct_answers_equal_the_temperature_scaled_readout(verify):
    path = shipped_checkpoints()["results/verify/seed-17/reinforce/final"]
    assert verify.prompt_format == "task"
    assert verify.T == pytest.approx(read_meta(path)["T"], 1e-12)
    state = STATES[0]
    qs = {
        "right": {"type": "noul", "instructions": "Is the sum right?"},
        "pick": {"type": "choice", "criteria": {"N": "wrong", "Y": "right"}},  # by name
        "lvl": {"type": "score", "criteria": ["right", "WRONG"]},  # by meaning: Y, then N
    }
    d = verify.decide(state, qs, mode="direct")
    p = reference(verify, state, ["Y", "N"])  # (p_Y, p_N) at T
    assert d.answers["right"] == {"type": "noul", "noul": pytest.approx(p[0], abs=1e-6)}
    pick = d.answers["pick"]
    assert pick["probabilities"] == {
        "N": pytest.approx(p[1], abs=1e-6),
        "Y": pytest.approx(p[0], abs=1e-6),
    }
    assert pick["choice"] == ("Y" if p[0] > p[1] else "N")
    assert pick["confidence"] == pytest.approx(2 * p.max() - 1, abs=1e-6)  # K = 2
    lvl = d.answers["lvl"]  # level 0 -> Y, level 1 -> N: score = 0 p_Y + 1 p_N
    assert lvl["score"] == pytest.approx(p[1], abs=1e-6)
    var = p[0] * p[1] ** 2 + p[1] * (1 - p[1]) ** 2  # Var_max = 1/4 for L = 2
    assert lvl["confidence"] == pytest.approx(1 - 4 * var, abs=1e-6)
    assert lvl["legend"] == {"0": "right", "1": "WRONG"}
    assert set(lvl["probabilities"]) == {"0", "1"}
    # all three questions share one prompt: one row, its tokens counted once
    n_prompt = len(
        verify.tokenizer(build_prompt(verify.tokenizer, state, direct=True))["input_ids"]
    )
    assert d.usage == {"input_tokens": n_prompt + 1, "output_tokens": 0}  # + the " " bridge
    assert d.details["pick"]["tokens"] == ["N", "Y"] and d.details["lvl"]["tokens"] == ["Y", "N"]


def test_choice_and_score_on_ten_options(facts):
    state = "fact kov?"
    d = facts.decide(
        state,
        {
            "three": {"type": "choice", "criteria": {"x": "a", "y": "B", "c": None}},
            "named": {"type": "choice", "criteria": {"C": None, "A": None}},
            "five": {"type": "score", "criteria": ["a", "b", "c", "d", "e"]},
        },
    )
    p3 = reference(facts, state, ["A", "B", "C"])  # x, y, c -> A, B, C by description/name
    three = d.answers["three"]
    assert list(three["probabilities"].values()) == pytest.approx(p3, abs=1e-6)
    assert three["confidence"] == pytest.approx((3 * p3.max() - 1) / 2, abs=1e-6)
    assert three["choice"] == "xyc"[int(np.argmax(p3))]
    p2 = reference(facts, state, ["C", "A"])  # labels that are options map by name
    assert list(d.answers["named"]["probabilities"].values()) == pytest.approx(p2, abs=1e-6)
    p5 = reference(facts, state, list("ABCDE"))
    assert d.answers["five"]["score"] == pytest.approx(float(np.arange(5) @ p5), abs=1e-6)


def test_swapping_label_order_never_swaps_the_answer(verify):
    """A task checkpoint reads labels by meaning (name, description, level text; any case;
    the yes/no and right/wrong families), so the same label gets the same probability in
    either order: p(label) = p_Y of the raw readout for every yes-like label."""
    pairs = [
        ({"yes": "right", "no": "wrong"}, {"no": "wrong", "yes": "right"}),
        ({"Correct": None, "INCORRECT": None}, {"INCORRECT": None, "Correct": None}),
        ({"a": "Right", "b": " wrong "}, {"b": " wrong ", "a": "Right"}),
    ]
    yes_label = {"yes", "Correct", "a"}
    for state in STATES:
        p = reference(verify, state, ["Y", "N"])
        for one, two in pairs:
            qs = {
                "c1": {"type": "choice", "criteria": one},
                "c2": {"type": "choice", "criteria": two},
            }
            d = verify.decide(state, qs, mode="direct")
            first, second = d.answers["c1"], d.answers["c2"]
            assert first["choice"] == second["choice"]
            for label, prob in first["probabilities"].items():
                expected = p[0] if label in yes_label else p[1]
                assert prob == pytest.approx(expected, abs=1e-6)
                assert second["probabilities"][label] == pytest.approx(expected, abs=1e-6)
        levels = {
            "rw": {"type": "score", "criteria": ["right", "wrong"]},
            "wr": {"type": "score", "criteria": ["wrong", "right"]},
        }
        d = verify.decide(state, levels, mode="direct")
        assert d.answers["rw"]["score"] == pytest.approx(p[1], abs=1e-6)  # level 1 = wrong = N
        assert d.answers["wr"]["score"] == pytest.approx(p[0], abs=1e-6)  # level 1 = right = Y


def test_ambiguous_labels_are_refused_naming_them(verify, facts):
    """A label that means no option, more than one, or the same option as another label is
    refused (never mapped by position), naming the labels."""
    cases = [
        (verify, {"type": "choice", "criteria": {"Y": "wrong", "N": "right"}}, ["'Y'", "'N'"]),
        (verify, {"type": "choice", "criteria": {"yes": None, "correct": None}}, ["'yes' and"]),
        (verify, {"type": "choice", "criteria": {"maybe": None, "no": None}}, ["'maybe' match"]),
        (verify, {"type": "score", "criteria": ["first", "second"]}, ["level 0 'first'"]),
        (facts, {"type": "choice", "criteria": {"x": None, "B": None}}, ["'x' match no"]),
    ]
    for dm, q, names in cases:
        state = "fact kov?" if dm is facts else STATES[0]
        with pytest.raises(DecisionError, match="cannot be matched") as err:
            dm.decide(state, {"c": q}, mode="direct")
        assert err.value.loc == ("questions", "c", "criteria")
        assert all(n in err.value.msg for n in names), err.value.msg


def test_unrepresentable_questions_name_the_culprit(verify, facts):
    ok = {"q": {"type": "noul", "instructions": "?"}}
    cases = [
        (verify, STATES[0], {"c": {"type": "choice", "criteria": dict.fromkeys("abc")}}),
        (facts, "fact kov?", {"n": {"type": "noul", "instructions": "x"}}),
        (verify, "33+60+20=113? é", ok),
        (verify, "1+1=2?" * 200, ok),
        (verify, "   ", ok),
        (facts, "fact kov?", {"s": {"type": "score", "criteria": list("x" * 11)}}),
    ]
    locs = [
        ("questions", "c", "criteria"),
        ("questions", "n"),
        ("state",),
        ("state",),
        ("state",),
        ("questions", "s", "criteria"),
    ]
    msgs = ["only answers with 2 option tokens", "no yes/no pair", "'é'", "at most 512", "empty"]
    for (dm, state, qs), loc, msg in zip(cases, locs, [*msgs, "2 to 10"], strict=True):
        with pytest.raises(DecisionError, match=msg) as err:
            dm.decide(state, qs)
        assert err.value.loc == loc
    with pytest.raises(DecisionError, match="threshold") as err:
        verify.decide(STATES[0], ok, threshold=1.5)
    assert err.value.loc == ("threshold",)


def test_reason_mode_mixture_and_single(verify):
    qs = {"right": {"type": "noul"}}
    d = verify.decide(STATES[1], qs, mode="reason", m=3, seed=7, details=True)
    det = d.details["right"]
    u = np.array(det["readouts"])
    assert u.shape == (3, 2) and u.sum(1) == pytest.approx(1.0)
    assert d.answers["right"]["noul"] == pytest.approx(u[:, 0].mean(), abs=1e-12)
    assert d.usage["output_tokens"] == sum(det["lengths"]) and len(det["rationales"]) == 3
    single = verify.decide(STATES[1], qs, mode="reason", m=3, seed=7, aggregate="single")
    assert single.answers["right"]["noul"] == pytest.approx(u[0, 0], abs=1e-12)
    # the same draw by hand: sample_rationales, then readout, then softmax(z / T)
    opts = option_token_ids(verify.tokenizer, ["Y", "N"])
    prompt = build_prompt(verify.tokenizer, STATES[1])
    rats = sample_rationales(
        verify.model, verify.tokenizer, [prompt], 3, 48, bridge=opts.bridge, seed=7
    )
    with torch.no_grad():
        _, z = readout(verify.model, rats.input_ids, rats.attention_mask, opts.ids)
    assert u == pytest.approx((z.double() / verify.T).softmax(-1).numpy(), abs=1e-6)
    assert det["rationales"] == rats.texts


def test_auto_escalates_exactly_below_the_threshold(facts):
    states = ["fact kov?", "fact abc?", "fact zzz?", "fact qrs?", "fact mno?", "fact hij?"]
    qs = {"v": {"type": "choice", "criteria": dict.fromkeys("ABCDEFGHIJ")}}
    direct = [facts.decide(s, qs).answers["v"] for s in states]
    conf = np.array([a["confidence"] for a in direct])
    threshold = float(np.median(conf))
    opts = DecideOptions(mode="auto", threshold=threshold, m=2, max_new_tokens=24)
    out = facts.decide_batch([(s, qs, opts) for s in states])
    for a, c, d in zip(direct, conf, out, strict=True):
        det = d.details["v"]
        assert det["escalated"] == bool(c < threshold)
        assert det["direct_confidence"] == pytest.approx(c, abs=1e-6)
        assert det["mode"] == ("reason" if c < threshold else "direct")
        if not det["escalated"]:
            assert close(d.answers["v"], a, 1e-6)
            assert d.usage["output_tokens"] == 0
        else:
            assert d.usage["output_tokens"] > 0
    assert 0 < sum(d.details["v"]["escalated"] for d in out) < len(states)


# --------------------------------------------------------------------------- chat format
def test_chat_prompts_share_the_state_prefix(chat):
    assert chat.prompt_format == "chat"
    state = {"message": "Buy now!!", "subject": "deal"}
    qs = {
        "spam": {"type": "noul", "instructions": "Is it spam?", "criteria": {"true": "ads"}},
        "tone": {"type": "choice", "criteria": {"calm": "polite", "angry": None, "glad": None}},
        "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "high"]},
    }
    d = chat.decide(state, qs)
    # codes: the char tokenizer has no single-token "yes", so a noul reads Y/N
    tokens = {n: d.details[n]["tokens"] for n in qs}
    assert tokens == {"spam": ["Y", "N"], "tone": ["A", "B", "C"], "urgency": ["0", "1"]}
    full_lengths = 0
    for name, raw in qs.items():
        q = question_from_wire(raw)
        text = chat.question_text('{"message": "Buy now!!", "subject": "deal"}', q, tokens[name])
        assert text.startswith('{"message"') and "Options:" in text
        prompt = build_prompt(chat.tokenizer, text, direct=True, chat=True)
        full_lengths += len(chat.tokenizer(prompt)["input_ids"]) + 1
        opts = option_token_ids(chat.tokenizer, tokens[name])
        _, z = direct_readout(chat.model, chat.tokenizer, [prompt], opts.ids, opts.bridge)
        p = (z[0].detach().double() / 1.3).softmax(-1).numpy()
        got = d.answers[name]
        probs = [got["noul"], 1 - got["noul"]] if name == "spam" else got["probabilities"].values()
        assert list(probs) == pytest.approx(p, abs=1e-5)
    assert d.usage["input_tokens"] < full_lengths  # the shared prefix is read once
    plain = DecisionModel(chat.model, chat.tokenizer, chat.meta, prefix_cache=False)
    assert close(plain.decide(state, qs).answers, d.answers)


def test_shared_prefix_readout_equals_full_readout(chat):
    g = torch.Generator().manual_seed(0)
    rand = lambda n: torch.randint(4, 90, (n,), generator=g).tolist()  # noqa: E731
    head = rand(20)
    groups = [
        [head + rand(5), head + rand(9), head + rand(1)],  # a shared 20-token prefix
        [rand(7), rand(12)],  # no common prefix: each prompt on its own
        [head[:3] + rand(4)],  # a single prompt
    ]
    flat = [s for grp in groups for s in grp]
    option_ids = torch.tensor([[10, 11, 12]] * len(flat))
    option_ids[1, 2] = -1  # an absent option
    u, z = shared_prefix_readout(chat.model, groups, option_ids)
    ids, mask = left_pad(flat, 0, "cpu")
    with torch.no_grad():
        u_ref, z_ref = readout(chat.model, ids, mask, option_ids)
    assert torch.allclose(u, u_ref, atol=1e-5) and u[1, 2] == 0
    assert torch.allclose(z[torch.isfinite(z)], z_ref[torch.isfinite(z_ref)], atol=1e-4)


def test_batched_requests_equal_single_ones(chat, verify):
    qs = {
        "a": {"type": "choice", "instructions": "Which?", "criteria": dict.fromkeys("xyz")},
        "b": {"type": "score", "criteria": ["no", "some", "much"]},
    }
    states = ["short", {"k": [1, 2, 3], "text": "a longer state than the first"}, "mid state"]
    batch = chat.decide_batch([(s, qs, DecideOptions()) for s in states])
    for s, d in zip(states, batch, strict=True):
        single = chat.decide(s, qs)
        assert close(d.answers, single.answers)
        assert d.usage == single.usage
    # a request that cannot be answered does not spoil the batch
    bad = {"c": {"type": "choice", "criteria": dict.fromkeys("abc")}}
    good = {"n": {"type": "noul"}}
    out = verify.decide_batch(
        [(STATES[0], bad, DecideOptions()), (STATES[0], good, DecideOptions())]
    )
    assert isinstance(out[0], DecisionError)
    assert close(out[1].answers, verify.decide(STATES[0], good).answers, 1e-6)


def test_many_options_use_the_labels_as_tokens(chat):
    many = string.ascii_letters + string.digits + "!#$%&*+-/<=>?@"  # 76 single characters
    d = chat.decide("x", {"c": {"type": "choice", "criteria": dict.fromkeys(many)}})
    assert d.details["c"]["tokens"] == list(many)
    assert sum(d.answers["c"]["probabilities"].values()) == pytest.approx(1.0)
    words = {f"w{i}": None for i in range(70)}  # > 62 labels that are not single tokens
    with pytest.raises(DecisionError, match="not a single token") as err:
        chat.decide("x", {"c": {"type": "choice", "criteria": words}})
    assert err.value.loc == ("questions", "c")


def test_the_decision_rule_is_routings():
    """decide.py applies rlcd_lab.math.routing's rule (no copy of it): the same confidence
    functions, and DecideOptions' rule is a routing.DecisionRule on the chance-corrected
    confidence; the server's default threshold is unchanged (0.8, i.e. max p 0.9 at K = 2)."""
    from rlcd_lab.math import routing

    opts = DecideOptions(threshold=0.3, aggregate="single")
    assert opts.rule == routing.DecisionRule("chance_corrected", 0.3, "single")
    assert DecideOptions().rule == routing.DecisionRule("chance_corrected", 0.8, "mixture")
    u = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])
    assert opts.rule.probs(u) == pytest.approx(u[0])
    assert DecideOptions().rule.probs(u) == pytest.approx([0.4, 0.25, 0.35])
    # the score measure: 1 - Var/Var_max on levels, through the rule as the server uses it
    assert opts.rule.confidence([0.1, 0.2, 0.7], "score") == pytest.approx(0.56)


# --------------------------------------------------------------------------- stopping early
def test_temperature_fitted_comes_from_the_checkpoints_own_file(verify, facts, chat):
    assert verify.T_fitted  # trained, T fitted on dev
    assert not facts.T_fitted  # a base checkpoint: rlcd.json says 1.0, a default
    assert chat.T_fitted  # its meta records a T, no pretraining method
    assert temperature_fitted(None) == (False, "no T in rlcd.json")
    assert temperature_fitted({"method": "pretrained", "T": 1.0})[0] is False
    assert temperature_fitted({"method": "calibrate", "temperature": 1.3}) == (True, "")
    explicit = DecisionModel(facts.model, facts.tokenizer, facts.meta, T=2.0)
    assert explicit.T_fitted  # an explicit T is the caller's calibration


def test_a_passed_deadline_answers_with_the_direct_readout(verify):
    past = time.monotonic() - 1.0
    direct = verify.decide(STATES[0], {"v": {"type": "noul"}}, mode="direct")
    for mode in ("reason", "auto"):
        out = verify.decide(
            STATES[0], {"v": {"type": "noul"}}, mode=mode, threshold=1.0, m=2, deadline=past
        )
        assert close(out.answers, direct.answers, 1e-9) and out.usage == direct.usage
        det = out.details["v"]
        assert det["mode"] == "direct" and det["deadline_passed"] is True
        assert det.get("escalated", True)  # auto: escalated, but out of time
    later = time.monotonic() + 600
    out = verify.decide(STATES[0], {"v": {"type": "noul"}}, mode="reason", m=2, deadline=later)
    assert "deadline_passed" not in out.details["v"] and out.usage["output_tokens"] > 0
    with pytest.raises(DecisionError, match="deadline"):
        DecideOptions(deadline=float("nan")).validate()


def test_a_cancelled_request_stops_within_one_decoding_step(verify):
    """``cancelled`` is asked before every decoding step: sampling that nobody waits for
    stops at once (it used to be checked only between phases and rationale chunks)."""
    forwards: list[int] = []
    handle = verify.model.register_forward_pre_hook(lambda *_: forwards.append(1))
    try:
        opts = DecideOptions(mode="reason", m=4, max_new_tokens=48)
        out = verify.decide_batch(
            [("1" * 200 + "?", {"v": {"type": "noul"}}, opts)], lambda i: len(forwards) >= 3
        )
    finally:
        handle.remove()
    assert isinstance(out[0], DecisionError) and "cancelled" in out[0].msg
    assert len(forwards) == 3  # the prompt and two steps of 48, then nothing more
