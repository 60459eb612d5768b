"""The tiny world's tasks: fixed disjoint splits, valid items, teachers that behave as stated."""

import re

import numpy as np
import pytest

from rlcd_lab.tasks.synthetic import SPLIT_SIZES, Aleatoric, Facts, Verify, VerifyMixed, get_task


@pytest.mark.parametrize("name", ["verify", "verify-mixed", "verify-check", "facts", "aleatoric"])
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


_MIXED = re.compile(r"^(\d+(?:\+\d+)+)=(\d+)\?$")
_MIXED_RATIONALE = re.compile(r"^((?:\d+\+\d+=\d+;)+)(\d+) vs (\d+):(same|diff)$")


def _teacher_odds(terms, p, slip):
    """Exact chances that the verify-mixed teacher's sum of ``terms`` is off, and that its
    verdict on ``p`` is right: its running total's distribution, step by step (a carry
    dropped with probability ``slip``)."""
    dist = {terms[0]: 1.0}
    for t in terms[1:]:
        nxt = {}
        for total, w in dist.items():
            carry = (total % 10 + t % 10) >= 10
            for got, v in ((total + t, 1 - slip if carry else 1.0), (total + t - 10, slip)):
                if v and (got == total + t or carry):
                    nxt[got] = nxt.get(got, 0.0) + w * v
        dist = nxt
    s = sum(terms)
    off = 1 - dist.get(s, 0.0)
    right = dist.get(s, 0.0) if p == s else 1 - dist.get(p, 0.0)
    return off, right


def test_verify_mixed_items_and_teacher_format():
    """Items: 2 or 3 two-digit terms (both counts common), half proposing the sum, half a
    tens-digit near miss. The teacher adds term by term, restates its sum beside the
    proposal and states the verdict that follows from its own rationale; rationale plus
    the marker fit the 48 new tokens. Without slips it is always right; dropping every
    carry, ``47+38+16`` goes 47+38=75, 75+16=81."""
    task = get_task("verify-mixed")
    assert task.slip == 0.2 and task.split("test") == VerifyMixed(slip=0.9).split("test")
    items = task.split("test")
    counts = np.bincount([len(i.prompt.split("+")) for i in items], minlength=4)
    assert counts[:2].sum() == 0 and counts[2] + counts[3] == len(items)
    assert min(counts[2], counts[3]) > 0.4 * len(items)
    assert 0.4 < np.mean([it.label for it in items]) < 0.6
    for item in items:
        head, p = _MIXED.match(item.prompt).groups()
        terms = [int(t) for t in head.split("+")]
        assert all(10 <= t <= 99 for t in terms)
        assert (int(p) == sum(terms)) == (item.label == 0)
        assert item.label == 0 or (int(p) - sum(terms)) in (-20, -10, 10, 20)
    rng = np.random.default_rng(0)
    exact = VerifyMixed(slip=0.0)
    for item in items:
        ex = exact.teach(item, rng, direct=False)
        steps, total, p, verdict = _MIXED_RATIONALE.match(ex.rationale).groups()
        assert int(total) == sum(map(int, item.prompt.split("=")[0].split("+")))
        sums = re.findall(r"(\d+)\+(\d+)=(\d+)", steps)
        assert all(int(a) + int(b) == int(c) for a, b, c in sums)
        assert ex.label == task.options[item.label]
        assert verdict == ("same" if ex.label == "Y" else "diff")
    longest = VerifyMixed(slip=0.0).teach(TaskItemLike("99+99+99=317?"), rng, direct=False)
    assert longest.rationale == "99+99=198;198+99=297;297 vs 317:diff"
    assert len(longest.rationale + " Answer:") <= 48  # the longest rationale there is
    hand = VerifyMixed(slip=1.0).teach(TaskItemLike("47+38+16=81?"), rng, direct=False)
    assert hand.rationale == "47+38=75;75+16=81;81 vs 81:same" and hand.label == "Y"
    direct = task.teach(items[0], rng, direct=True)
    assert direct.rationale == "" and direct.label == items[0].options[items[0].label]


def test_verify_mixed_slips_more_on_longer_sums():
    """On 6000 fresh items of each length the teacher (slip 0.2) writes well-formed
    additions only (each step exact, or short by 10 where it carries), states the verdict
    of its own rationale, and is off / wrong as often as the exact per-item chances
    (``_teacher_odds``) add up to: within 4.5 standard deviations of their sum (variance
    sum p(1-p)). Those chances match the docstring's enumeration (sum off on 9.0% of
    two-term and 17.5% of three-term items; verdict right on 93.7% and 87.8%), and the
    three-term teacher is wrong measurably more often."""
    task = get_task("verify-mixed")
    rng = np.random.default_rng(1)
    n = 6000
    seen = {}
    for k in (2, 3):
        off = right = 0
        p_off, p_right = [], []
        for _ in range(n):
            terms = [int(v) for v in rng.integers(10, 100, size=k)]
            s = sum(terms)
            p = s if rng.random() < 0.5 else s + int(rng.choice([-20, -10, -10, 10, 20]))
            item = TaskItemLike("+".join(map(str, terms)) + f"={p}?")
            ex = task.teach(item, rng, direct=False)
            steps, total, shown, verdict = _MIXED_RATIONALE.match(ex.rationale).groups()
            found = [tuple(map(int, m)) for m in re.findall(r"(\d+)\+(\d+)=(\d+)", steps)]
            assert [b for _, b, _ in found] == terms[1:] and found[0][0] == terms[0]
            nexts = [f[0] for f in found[1:]] + [int(total)]  # each sum carried on
            for (x, y, got), nxt in zip(found, nexts, strict=True):
                carry = (x % 10 + y % 10) >= 10
                assert got in ((x + y, x + y - 10) if carry else (x + y,)) and nxt == got
            assert int(shown) == p and (verdict == "same") == (int(total) == p)
            assert ex.label == ("Y" if verdict == "same" else "N")
            off += int(total) != s
            right += ex.label == ("Y" if p == s else "N")
            o, r = _teacher_odds(terms, p, task.slip)
            p_off.append(o)
            p_right.append(r)
        for got, chances in ((off, np.array(p_off)), (right, np.array(p_right))):
            sd = float(np.sqrt((chances * (1 - chances)).sum()))
            assert abs(got - chances.sum()) <= 4.5 * sd, (k, got, chances.sum(), sd)
        seen[k] = (np.mean(p_off), np.mean(p_right), right / n)
    assert abs(seen[2][0] - 0.090) < 0.01 and abs(seen[3][0] - 0.175) < 0.012
    assert abs(seen[2][1] - 0.937) < 0.01 and abs(seen[3][1] - 0.878) < 0.012
    gap_sd = np.sqrt(sum(r * (1 - r) for _, r, _ in seen.values()) / n)
    assert seen[2][2] - seen[3][2] > 4.5 * gap_sd, seen


def TaskItemLike(prompt):  # noqa: N802  an item with only a prompt (the teacher reads that)
    from rlcd_lab.tasks.items import TaskItem

    return TaskItem("hand", prompt, ("Y", "N"), 0)


class _Slips:
    """A stand-in for the teacher's generator: ``random()`` returns 0.0 (slip) or 0.99
    (no slip) in the order given, so every slip pattern can be enumerated."""

    def __init__(self, *slips: bool):
        self.left = [0.0 if s else 0.99 for s in slips]

    def random(self):
        return self.left.pop(0)


_CHECK_RATIONALE = re.compile(r"^(\d+)\+(\d+)=(\d+);(\d+)\+(\d+)=(\d+);(\d+) vs (\d+):(same|diff)$")


def test_verify_check_one_difficulty_and_a_visible_slip():
    """Every verify-check item is one addition of two two-digit terms that carries into the
    tens. The teacher writes both passes (``a+b``, then ``b+a``), each exact or short by
    10, states the first pass's verdict, and stays within 35 characters. By exact
    enumeration over the proposal mix (half right; near misses -20, -10, -10, +10, +20) and
    the four slip patterns (slip 0.25 per pass), the passes disagree exactly when one pass
    slipped, and the verdict is then right with probability 0.5 * 1 + 0.5 * 0.3 = 0.65
    (first pass slipped: right only for -20, +10, +20), as the docstring says."""
    from fractions import Fraction as F

    task = get_task("verify-check")
    assert task.slip == 0.25
    for item in task.split("test") + task.split("dev"):
        a, b, p = map(int, re.match(r"^(\d+)\+(\d+)=(\d+)\?$", item.prompt).groups())
        assert 10 <= a < 100 and 10 <= b < 100 and a % 10 + b % 10 >= 10
        assert item.label == (0 if p == a + b else 1)
        assert (p - (a + b)) in (0, -20, -10, 10, 20)
        assert len(task.teach(item, _Slips(False, False), direct=False).rationale) <= 35
    mix = {0: F(1, 2), -20: F(1, 10), -10: F(2, 10), 10: F(1, 10), 20: F(1, 10)}
    slip = F(1, 4)
    right_disagree = disagree = F(0)
    a, b = 47, 38
    for offset, w_p in mix.items():
        p = a + b + offset
        for first_slips in (False, True):
            for check_slips in (False, True):
                w = w_p * (slip if first_slips else 1 - slip) * (slip if check_slips else 1 - slip)
                item = TaskItemLike(f"{a}+{b}={p}?")
                ex = task.teach(item, _Slips(first_slips, check_slips), direct=False)
                assert len(ex.rationale) <= 35
                x1, y1, s1, x2, y2, s2, shown, q, verdict = _CHECK_RATIONALE.match(
                    ex.rationale
                ).groups()
                assert (int(x1), int(y1), int(x2), int(y2)) == (a, b, b, a)
                assert int(s1) == a + b - 10 * first_slips and int(s2) == a + b - 10 * check_slips
                assert int(shown) == int(s1) and int(q) == p
                assert ex.label == ("Y" if int(s1) == p else "N")
                if s1 != s2:
                    assert first_slips != check_slips
                    disagree += w
                    right_disagree += w * (ex.label == ("Y" if offset == 0 else "N"))
                else:
                    assert first_slips == check_slips
    assert disagree == 2 * slip * (1 - slip)
    assert right_disagree / disagree == F(65, 100)
    assert task.teach(TaskItemLike("47+38=85?"), _Slips(), direct=True).rationale == ""


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
