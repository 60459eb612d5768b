"""The tiny world's tasks: fixed disjoint splits, valid items, teachers that behave as stated."""

import re

import numpy as np
import pytest

from rlcd_lab.tasks.synthetic import SPLIT_SIZES, Aleatoric, Facts, Verify, VerifyMixed, get_task


@pytest.mark.parametrize("name", ["verify", "verify-mixed", "facts", "aleatoric"])
def test_splits_are_seeded_and_sized(name):
    a, b = get_task(name), get_task(name)
    assert a.split("test") == b.split("test")  # same world seed -> same items
    assert get_task(name, seed=1).split("test") != a.split("test")
    uids = [i.uid for s in ("train", "dev", "test") for i in a.split(s)]
    assert len(set(uids)) == len(uids)
    if name != "aleatoric":  # aleatoric urns repeat by design (small prompt space)
        prompts = {s: {i.prompt for i in a.split(s)} for s in ("train", "dev", "test")}
        assert not prompts["train"] & prompts["test"] and not prompts["dev"] & prompts["test"]
    if name != "facts":
        assert {s: len(a.split(s)) for s in SPLIT_SIZES} == SPLIT_SIZES
    with pytest.raises(ValueError, match="unknown split"):
        a.split("val")


def test_unknown_task():
    with pytest.raises(ValueError, match="unknown task 'gsm'"):
        get_task("gsm")


def test_verify_items_and_teacher():
    task = Verify()
    items = task.split("test")
    for it in items:
        a, b, c, p = map(int, re.match(r"(\d+)\+(\d+)\+(\d+)=(\d+)\?", it.prompt).groups())
        assert it.label == (0 if a + b + c == p else 1)
        if it.label == 1:  # near misses keep the units digit
            assert (a + b + c - p) in (-20, -10, 10, 20)
    assert 0.4 < np.mean([it.label for it in items]) < 0.6
    rng = np.random.default_rng(0)
    slips = wrong = n = 0
    for it in items:
        ex = task.teach(it, rng, direct=False)
        a, b, c, p = map(int, re.match(r"(\d+)\+(\d+)\+(\d+)=(\d+)\?", it.prompt).groups())
        s1, s2 = map(int, re.match(rf"{a}\+{b}=(\d+);\d+\+{c}=(\d+);", ex.rationale).groups())
        assert s1 in (a + b, a + b - 10) and s2 in (s1 + c, s1 + c - 10)
        assert ex.rationale.endswith(f"{s2} vs {p}:" + ("same" if s2 == p else "diff"))
        assert ex.label == ("Y" if s2 == p else "N")  # the label follows its own rationale
        slipped = s2 != a + b + c
        slips += slipped
        wrong += ex.label != it.options[it.label]
        n += 1
        if not ((a % 10 + b % 10) >= 10 or ((a + b) % 10 + c % 10) >= 10):
            assert not slipped  # slips happen only at visible carries
    assert 0.05 < slips / n < 0.4 and 0 < wrong <= slips
    direct = task.teach(items[0], rng, direct=True)
    assert direct.rationale == "" and direct.label == items[0].options[items[0].label]


@pytest.mark.parametrize("slip", [0.0, 0.05, 0.6, 1.0])
def test_verify_slip_is_the_teachers_carry_drop_rate(slip):
    """Items do not depend on the teacher; each carry the teacher meets is dropped with
    probability ``slip`` (binomial: within 4.5 standard deviations), no other step ever."""
    task = get_task("verify", slip=slip)
    assert task.split("test") == Verify().split("test")
    rng = np.random.default_rng(1)
    carries = drops = 0
    for it in task.split("train"):
        a, b, c, _ = map(int, re.match(r"(\d+)\+(\d+)\+(\d+)=(\d+)\?", it.prompt).groups())
        rationale = task.teach(it, rng, direct=False).rationale
        s1, s2 = map(int, re.match(rf"{a}\+{b}=(\d+);\d+\+{c}=(\d+);", rationale).groups())
        for x, y, got in ((a, b, s1), (s1, c, s2)):
            has_carry = (x % 10 + y % 10) >= 10
            assert got in ((x + y, x + y - 10) if has_carry else (x + y,))
            carries += has_carry
            drops += got == x + y - 10 and has_carry
    sd = (carries * slip * (1 - slip)) ** 0.5
    assert abs(drops - slip * carries) <= 4.5 * sd + 1e-9


def test_verify_mixed_sums_two_to_four_terms_and_slips_more_on_longer_ones():
    """Items: 2 to 4 two-digit terms, half proposing the sum, half a tens-digit near miss.
    The teacher adds term by term: without slips every equation is true and it is always
    right; dropping every carry, ``47+38+16`` goes 47+38=75 (7+8 carries), 75+16=81 (5+6
    carries): what a hand calculation that drops both carries gives. At slip 0.2 the
    teacher is right less often on longer sums (more carries)."""
    task = get_task("verify-mixed")
    items = task.split("test")
    counts = {len(i.prompt.split("+")) for i in items}
    assert counts == {2, 3, 4}
    for item in items:
        head, p = item.prompt[:-1].split("=")
        total = sum(map(int, head.split("+")))
        assert (int(p) == total) == (item.label == 0)
        assert item.label == 0 or (int(p) - total) in (-20, -10, 10, 20)
    rng = np.random.default_rng(0)
    for item in items[:100]:
        ex = VerifyMixed(slip=0.0).teach(item, rng, direct=False)
        for a, b, c in re.findall(r"(\d+)\+(\d+)=(\d+)", ex.rationale):
            assert int(a) + int(b) == int(c)
        assert ex.label == task.options[item.label] and len(ex.rationale) <= 40
    hand = TaskItemLike("47+38+16=81?")
    ex = VerifyMixed(slip=1.0).teach(hand, rng, direct=False)
    assert ex.rationale == "47+38=75;75+16=81;same" and ex.label == "Y"
    right = {n: [] for n in (2, 3, 4)}
    for item in items:
        ex = task.teach(item, rng, direct=False)
        right[len(item.prompt.split("+"))].append(ex.label == task.options[item.label])
    acc = {n: float(np.mean(v)) for n, v in right.items()}
    assert acc[2] > acc[4] and 0.8 < float(np.mean(sum(right.values(), []))) < 0.95, acc


def TaskItemLike(prompt):  # noqa: N802  an item with only a prompt (the teacher reads that)
    from rlcd_lab.tasks.items import TaskItem

    return TaskItem("hand", prompt, ("Y", "N"), 0)


def test_facts_known_entities_and_noisy_teacher():
    task = Facts()
    assert {s: len(task.split(s)) for s in ("train", "dev", "test")} == {
        "train": 600,
        "dev": 200,
        "test": 400,
    }
    known = np.mean([task.is_known[e] for e in task.entities])
    assert abs(known - task.known) < 0.05
    rng = np.random.default_rng(0)
    exs = task.pretraining_examples(rng, 2000)
    assert all(task.is_known[ex.prompt[5:-1]] for ex in exs)  # never an unknown entity
    right = np.mean([ex.label == task.options[task.value[ex.prompt[5:-1]]] for ex in exs])
    assert abs(right - task.reliable) < 0.03
    assert all(ex.rationale == "" or ex.rationale.endswith("=" + ex.label) for ex in exs)


def test_aleatoric_q_and_overconfident_teacher():
    """Labels are draws from q; the teacher writes an imagined draw c ~ q^2 (normalised) and
    states it with probability ``commit``, else a fresh draw from q^2: the stated label's
    frequency over many demonstrations matches 0.8 q^2 + 0.2 q^2 = q^2 (within 4 s.d.)."""
    task = Aleatoric()
    rng = np.random.default_rng(0)
    for it in task.split("dev")[:50]:
        counts = np.array([int(v) for v in re.findall(r"\d", it.prompt)])
        np.testing.assert_allclose(it.q, counts / counts.sum())
        assert counts[it.label] > 0 and max(it.q) < 1.0  # a label drawn from q
        ex = task.teach(it, rng, direct=False)
        assert ex.rationale in {f"maybe {o.lower()}" for o in it.options}
        assert counts[it.options.index(ex.rationale[-1].upper())] > 0
    item = task.split("dev")[0]
    counts = np.array([int(v) for v in re.findall(r"\d", item.prompt)], dtype=float)
    sharp = counts**2 / (counts**2).sum()
    n = 4000
    stated = [item.options.index(task.teach(item, rng, direct=True).label) for _ in range(n)]
    freq = np.bincount(stated, minlength=3) / n
    assert (np.abs(freq - sharp) <= 4 * np.sqrt(sharp * (1 - sharp) / n) + 1e-12).all()
    labels = np.array([it.label for it in task.split("train")])
    majority = np.array([int(np.argmax(it.q)) for it in task.split("train")])
    expected = np.mean([max(it.q) for it in task.split("train")])
    assert abs(np.mean(labels == majority) - expected) < 0.04  # labels really are draws


def test_pretraining_never_sees_held_out_prompts():
    task = Verify()
    exs = task.pretraining_examples(np.random.default_rng(1), 3000)
    assert not {ex.prompt for ex in exs} & task.held_out_prompts
    assert 0.4 < np.mean([ex.direct for ex in exs]) < 0.6
