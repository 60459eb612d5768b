"""Teaching a model its task first (``rlcd-lab train teach``): the worked-rationale rule
(hand-computed cases) and the loop's loss (recomputed by a plain forward pass)."""

from dataclasses import replace

import pytest
import torch

from rlcd_lab.files.rundir import read_log
from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.methods import METHOD_TABLE
from rlcd_lab.tasks import load_task_items
from rlcd_lab.tasks.items import TaskItem, write_items
from rlcd_lab.tasks.worked import arithmetic
from rlcd_lab.train import train
from rlcd_lab.train.common import QuestionStream

LETTERS = "ABCDEFGHIJ"


def mc(uid: str, question: str, values: list[str], gold: int) -> TaskItem:
    listed = "\n".join(f"{L}. {v}" for L, v in zip(LETTERS, values, strict=False))
    return TaskItem(uid, f"{question}\n\n{listed}", tuple(LETTERS[: len(values)]), gold)


@pytest.mark.parametrize(
    ("question", "values", "gold", "expected"),
    [
        ("4 * 8 =", ["40", "32", "36"], 1, "4 * 8 = 32. 32 is option B."),
        ("6 + 8 / 2 =", ["7", "10", "14"], 1, "8 / 2 = 4; 6 + 4 = 10. 10 is option B."),
        ("12 - 3 + 5 =", ["14", "4"], 0, "12 - 3 = 9; 9 + 5 = 14. 14 is option A."),
        ("sqrt(49) =", ["6", "7"], 1, "sqrt(49) = 7. 7 is option B."),
        ("2^5 =", ["32", "10", "25"], 0, "2 ^ 5 = 32. 32 is option A."),
        ("15 % 4 =", ["3", "1"], 0, "15 mod 4 = 3. 3 is option A."),
        ("17 mod 5 =", ["3", "2"], 1, "17 mod 5 = 2. 2 is option B."),
        ("(-35) % 6 =", ["-5", "1"], 1, "-35 mod 6 = 1. 1 is option B."),  # Python's sign
        ("40% of 200 =", ["8", "80"], 1, "40 / 100 = 0.4; 0.4 * 200 = 80. 80 is option B."),
        ("78 / 6 + 12 =", ["25", "13"], 0, "78 / 6 = 13; 13 + 12 = 25. 25 is option A."),
        ("4 * 8 =", ["40", "32"], 0, None),  # the gold option is not the result
        ("4 * 8 =", ["32", "32.0"], 0, None),  # two options hold it
        ("4 * 8 =", ["40", "36"], 0, None),  # none does
        ("Is 4 * 8 even?", ["yes", "no"], 0, None),  # not arithmetic
        ("import os =", ["1", "2"], 0, None),
        ("5 / 0 =", ["0", "5"], 0, None),
    ],
)
def test_arithmetic_worked_rationales(question, values, gold, expected):
    assert arithmetic(mc("x", question, values, gold)) == expected


def arithmetic_task(tmp_path) -> str:
    items = []
    for i in range(16):
        a, b = 2 + i % 7, 3 + i % 5
        values = [str(a + b + d) for d in (-2, 0, 1, 3)]
        items.append(mc(f"t{i}", f"{a} + {b} =", values, 1))
    for split, part in (("train", items[:12]), ("dev", items[12:14]), ("test", items[14:])):
        write_items(tmp_path / f"arith.{split}.jsonl", part)
    return str(write_items(tmp_path / "arith.jsonl", items))


TINY = dict(batch_size=2, max_new_tokens=30, eval_every=0, eval_items=2, test_items=2)


def test_teach_first_loss_is_the_worked_rationales_token_nll(tmp_path, tiny_base, tokenizer):
    """The first step's loss, recomputed: a plain forward over ``prompt + r* + "\\n" +
    "Answer:" + " "`` gives log pi(r*, marker | x) and the readout over the options."""
    task = arithmetic_task(tmp_path)
    cfg = replace(
        METHOD_TABLE["teach"].config, init=tiny_base, task=task, out=tmp_path / "t", steps=2
    )
    run = train(replace(cfg, **TINY, device="cpu"))
    batch = QuestionStream(load_task_items(task, "train"), 2, seed=0).batch(0)
    model, _, _ = load_checkpoint(tiny_base)
    total, tokens = 0.0, 0
    for item, y in zip(batch.items, batch.y, strict=True):
        prompt = tokenizer(item.prompt + "\n").input_ids  # a plain model's prompt
        written = tokenizer(arithmetic(item) + "\nAnswer:").input_ids
        ids = torch.tensor([prompt + written + tokenizer(" ").input_ids])  # bridge " "
        with torch.no_grad():
            logp = model(ids).logits[0].log_softmax(-1)
        for t in range(len(prompt), len(prompt) + len(written)):
            total += float(logp[t - 1, ids[0, t]])
        options = tokenizer.convert_tokens_to_ids(list(item.options))
        total += float(logp[-1, options].log_softmax(-1)[int(y)])
        tokens += len(written) + 1
    log = read_log(run)
    assert log[0]["loss"] == pytest.approx(-total / tokens, rel=1e-5)
    assert log[1]["loss"] < log[0]["loss"]  # it learns
    _, _, meta = load_checkpoint(run / "final")
    assert meta["method"] == "teach" and meta["metrics"]["test"]["n"] == 2


def test_teach_refuses_a_task_its_rule_cannot_solve(tmp_path, tiny_base):
    cfg = replace(METHOD_TABLE["teach"].config, init=tiny_base, out=tmp_path / "t", steps=1, **TINY)
    with pytest.raises(ValueError, match="writes no rationale for 2000 training items of verify"):
        train(replace(cfg, task="verify", device="cpu"))


@pytest.mark.parametrize(
    ("question", "proposed", "label", "expected"),
    [
        ("6 + 8 / 2 =", "10", 0, "8 / 2 = 4; 6 + 4 = 10. 10 vs 10: same."),
        ("6 + 8 / 2 =", "11", 1, "8 / 2 = 4; 6 + 4 = 10. 10 vs 11: different."),
        ("sqrt(49) =", "7", 0, "sqrt(49) = 7. 7 vs 7: same."),
        ("6 + 8 / 2 =", "11", 0, None),  # the gold label disagrees with the arithmetic
        ("6 + 8 / 2 =", "ten", 1, None),  # the proposal is not a number
    ],
)
def test_arithmetic_verify_worked_rationales(question, proposed, label, expected):
    from rlcd_lab.tasks.worked import arithmetic_verify

    prompt = f"Question: {question}\nProposed answer: {proposed}\nIs it correct? (yes or no)"
    assert arithmetic_verify(TaskItem("x", prompt, ("yes", "no"), label)) == expected
