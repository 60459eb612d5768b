"""The tiny world: three seeded synthetic tasks mirroring the paper's three regimes
(``verify``, ``facts``, ``aleatoric``), each with the teacher its base model is pretrained
to imitate. Start at :func:`get_task`.

Splits are fixed by the world seed: ``test``, ``dev`` and ``train`` prompts are disjoint,
and pretraining never sees a dev or test prompt.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from rlcd_lab.tasks.items import TaskItem

WORLD_SEED = 20261202
SPLIT_SIZES = {"train": 2000, "dev": 200, "test": 400}
_SPLIT_IDS = {"test": 0, "dev": 1, "train": 2, "pretrain": 3}


@dataclass(frozen=True)
class Example:
    """One teacher demonstration: the prompt, then a rationale (empty in direct mode)
    and the stated label."""

    prompt: str
    rationale: str
    label: str
    direct: bool


class SyntheticTask:
    """Base class: seeded item generator, fixed splits and the teacher's behaviour."""

    name: str = ""
    options: tuple[str, ...] = ()

    def __init__(self, seed: int = WORLD_SEED):
        self.seed = seed

    def rng(self, split: str) -> np.random.Generator:
        """The generator of one split (independent streams per task, split and seed)."""
        return np.random.default_rng([self.seed, _SPLIT_IDS[split], sum(map(ord, self.name))])

    def draw(self, rng: np.random.Generator, uid: str) -> TaskItem:
        """One random item (subclasses)."""
        raise NotImplementedError

    def teach(self, item: TaskItem, rng: np.random.Generator, direct: bool) -> Example:
        """The teacher's demonstration for one item (subclasses)."""
        raise NotImplementedError

    @cached_property
    def splits(self) -> dict[str, list[TaskItem]]:
        """``{"test", "dev", "train"}`` item lists with disjoint prompts (sizes in SPLIT_SIZES)."""
        seen: set[str] = set()
        out = {}
        for split in ("test", "dev", "train"):
            rng, items = self.rng(split), []
            while len(items) < SPLIT_SIZES[split]:
                item = self.draw(rng, f"{self.name}-{split}-{len(items)}")
                if item.prompt not in seen:
                    seen.add(item.prompt)
                    items.append(item)
            out[split] = items
        return out

    def split(self, name: str) -> list[TaskItem]:
        """Items of the ``train``, ``dev`` or ``test`` split."""
        if name not in SPLIT_SIZES:
            raise ValueError(f"unknown split {name!r}; choose one of {list(SPLIT_SIZES)}")
        return self.splits[name]

    @cached_property
    def held_out_prompts(self) -> frozenset[str]:
        return frozenset(i.prompt for s in ("dev", "test") for i in self.splits[s])

    def pretraining_examples(self, rng: np.random.Generator, n: int, p_direct: float = 0.5):
        """``n`` fresh teacher demonstrations on prompts outside dev and test."""
        out = []
        while len(out) < n:
            item = self.draw(rng, f"{self.name}-pretrain")
            if item.prompt in self.held_out_prompts or not self.in_pretraining(item):
                continue
            out.append(self.teach(item, rng, direct=bool(rng.random() < p_direct)))
        return out

    def in_pretraining(self, item: TaskItem) -> bool:
        """Whether the base model's pretraining corpus may mention this item."""
        return True


# --------------------------------------------------------------------------- verify
_VERIFY = re.compile(r"^(\d+)\+(\d+)\+(\d+)=(\d+)\?$")


class Verify(SyntheticTask):
    """``a+b+c=p?`` with two-digit operands; the teacher adds step by step and drops a
    carry with probability ``slip`` at each step that has one."""

    name = "verify"
    options = ("Y", "N")

    def __init__(self, seed: int = WORLD_SEED, slip: float = 0.25):
        super().__init__(seed)
        self.slip = slip

    def draw(self, rng, uid):
        a, b, c = (int(v) for v in rng.integers(10, 100, size=3))
        s = a + b + c
        if rng.random() < 0.5:
            p, label = s, 0
        else:
            # tens-digit misses keep the units digit right, so a glance does not tell;
            # s - 10 is also what a dropped carry gives, the teacher's typical slip
            p, label = int(rng.choice([s - 20, s - 10, s - 10, s + 10, s + 20])), 1
        return TaskItem(uid, f"{a}+{b}+{c}={p}?", self.options, label)

    def _add(self, x: int, y: int, rng) -> int:
        carry = (x % 10 + y % 10) >= 10
        return x + y - (10 if carry and rng.random() < self.slip else 0)

    def teach(self, item, rng, direct):
        a, b, c, p = (int(v) for v in _VERIFY.match(item.prompt).groups())
        s1 = self._add(a, b, rng)
        s2 = self._add(s1, c, rng)
        same = s2 == p
        label = "Y" if same else "N"
        if direct:
            truth = self.options[item.label]
            return Example(item.prompt, "", truth, True)
        rationale = f"{a}+{b}={s1};{s1}+{c}={s2};{s2} vs {p}:{'same' if same else 'diff'}"
        return Example(item.prompt, rationale, label, False)


_SUM = re.compile(r"^(\d+(?:\+\d+)+)=(\d+)\?$")


class VerifyMixed(Verify):
    """``verify`` at mixed length: sums of 2 or 3 two-digit terms (``a+b=p?`` or
    ``a+b+c=p?``, each half the time; proposals as in ``verify``: half right, half a
    tens-digit near miss). The teacher adds term by term, dropping a carry with
    probability ``slip`` (0.2) at each step that has one, then restates its sum beside
    the proposal and compares (``47+38=85;85+16=101;101 vs 91:diff``): at most 37
    characters, so rationale and marker fit the 48 new tokens of ``PretrainConfig``.

    A three-term sum has two additions, so more carries and more slips: by exact
    enumeration of every operand tuple (and the near-miss mix), the teacher's sum is off
    on 9.0% of two-term items and 17.5% of three-term ones, and its verdict is right on
    93.7% of two-term items, 87.8% of three-term ones, 90.7% overall (the ceiling of a
    base that imitates it and samples at temperature 1). Which risk an item carries is
    visible to the readout, in the prompt (the term count) and in the rationale (which
    steps carried): the world where the paper's ranking step can hold (a readout that
    hedges where its rationale is likely wrong), which ``verify``'s single length does
    not offer. The restatement matters: without it (verdict alone, the first design) a
    4000-step base added correctly but compared its sum with the proposal at chance
    (dev accuracy 0.505 direct, 0.535 after reasoning). With it, the shipped settings
    (``SHIPPED["verify-mixed"]``: 4000 steps of 32, the default 96-wide 4-layer model, 11
    wall minutes on 2 busy CPU cores) give dev accuracy 0.53 direct and 0.87 after one
    sampled rationale (its ``rlcd.json``; on test, 0.8675: 0.94 on two terms, 0.81 on
    three). Below the teacher on three terms: some of its own additions are neither exact
    nor a dropped carry, often bent towards the proposal (``41+39=81;81+83=163``)."""

    name = "verify-mixed"
    terms = (2, 3)
    """The term counts, drawn uniformly."""

    def __init__(self, seed: int = WORLD_SEED, slip: float = 0.2):
        super().__init__(seed, slip)

    def draw(self, rng, uid):
        k = int(rng.integers(self.terms[0], self.terms[-1] + 1))
        terms = [int(v) for v in rng.integers(10, 100, size=k)]
        s = sum(terms)
        if rng.random() < 0.5:
            p, label = s, 0
        else:  # near misses as in verify: the units digit right, the tens off
            p, label = int(rng.choice([s - 20, s - 10, s - 10, s + 10, s + 20])), 1
        return TaskItem(uid, "+".join(map(str, terms)) + f"={p}?", self.options, label)

    def teach(self, item, rng, direct):
        head, p = _SUM.match(item.prompt).groups()
        terms, p = [int(t) for t in head.split("+")], int(p)
        if direct:
            return Example(item.prompt, "", self.options[item.label], True)
        total, steps = terms[0], []
        for t in terms[1:]:
            step = self._add(total, t, rng)
            steps.append(f"{total}+{t}={step}")
            total = step
        same = total == p
        rationale = ";".join(steps) + f";{total} vs {p}:{'same' if same else 'diff'}"
        return Example(item.prompt, rationale, "Y" if same else "N", False)


class VerifyCheck(Verify):
    """``a+b=p?`` where both two-digit terms carry into the tens (``a % 10 + b % 10 >= 10``),
    so every item has one difficulty: one addition, one carry. Proposals as in ``verify``
    (half right, half a tens-digit near miss). The teacher adds twice, ``a+b`` then, as a
    written check, ``b+a``, dropping the carry with probability ``slip`` (0.25) in each pass
    independently, then compares the *first* sum with the proposal and states that verdict
    whatever the check says (``47+38=85;38+47=75;85 vs 91:diff``, at most 35 characters).

    A slip is visible within one difficulty level: the two passes disagree exactly when
    one of them slipped (both slip the same way with probability ``slip**2``), and nothing
    in the question tells which items slip. The pre-registered world of docs/results.md:
    a readout that learns which rationales to trust hedges where the passes disagree (by
    exact enumeration, the verdict is right on 65% of such rationales: when the first pass
    slipped, only a proposal 20 below, 10 or 20 above the true sum still gets the right
    verdict), while question features alone cannot rank the items."""

    name = "verify-check"

    def draw(self, rng, uid):
        while True:
            a, b = (int(v) for v in rng.integers(10, 100, size=2))
            if a % 10 + b % 10 >= 10:
                break
        s = a + b
        if rng.random() < 0.5:
            p, label = s, 0
        else:  # near misses as in verify: the units digit right, the tens off
            p, label = int(rng.choice([s - 20, s - 10, s - 10, s + 10, s + 20])), 1
        return TaskItem(uid, f"{a}+{b}={p}?", self.options, label)

    def teach(self, item, rng, direct):
        head, p = _SUM.match(item.prompt).groups()
        a, b = (int(t) for t in head.split("+"))
        p = int(p)
        if direct:
            return Example(item.prompt, "", self.options[item.label], True)
        first, check = self._add(a, b, rng), self._add(b, a, rng)
        same = first == p
        rationale = f"{a}+{b}={first};{b}+{a}={check};{first} vs {p}:{'same' if same else 'diff'}"
        return Example(item.prompt, rationale, "Y" if same else "N", False)


# ---------------------------------------------------------------------------- facts
class Facts(SyntheticTask):
    """``fact xyz?`` with 10 options. A fixed table maps 600 entities to a value; the base
    model's corpus covers ``known`` of them, each mention right with prob ``reliable``."""

    name = "facts"
    options = tuple(string.ascii_uppercase[:10])

    def __init__(
        self,
        seed: int = WORLD_SEED,
        n_entities: int = 1200,
        known: float = 0.6,
        reliable: float = 0.8,
    ):
        super().__init__(seed)
        self.known, self.reliable = known, reliable
        rng = np.random.default_rng([seed, 99])
        names: set[str] = set()
        while len(names) < n_entities:
            names.add("".join(rng.choice(list(string.ascii_lowercase), size=3)))
        self.entities = sorted(names)
        self.value = {
            e: int(v) for e, v in zip(self.entities, rng.integers(0, 10, n_entities), strict=True)
        }
        self.is_known = {
            e: bool(k) for e, k in zip(self.entities, rng.random(n_entities) < known, strict=True)
        }

    def draw(self, rng, uid):
        e = str(rng.choice(self.entities))
        return TaskItem(uid, f"fact {e}?", self.options, self.value[e])

    def in_pretraining(self, item):
        return self.is_known[item.prompt[5:-1]]

    def teach(self, item, rng, direct):
        v = (
            item.label
            if rng.random() < self.reliable
            else int(rng.choice([k for k in range(10) if k != item.label]))
        )
        e = item.prompt[5:-1]
        return Example(
            item.prompt, "" if direct else f"recall {e}={self.options[v]}", self.options[v], direct
        )

    @cached_property
    def splits(self):
        # one question per entity: split the entities, not random draws
        rng = self.rng("test")
        order = [self.entities[i] for i in rng.permutation(len(self.entities))]
        sizes = {"test": 400, "dev": 200, "train": 600}
        out, start = {}, 0
        for split in ("test", "dev", "train"):
            ents = order[start : start + sizes[split]]
            start += sizes[split]
            out[split] = [
                TaskItem(f"facts-{split}-{i}", f"fact {e}?", self.options, self.value[e])
                for i, e in enumerate(ents)
            ]
        return out

    def pretraining_examples(self, rng, n, p_direct=0.5):
        known = [e for e in self.entities if self.is_known[e]]
        out = []
        for e in rng.choice(known, size=n):
            item = TaskItem("facts-pretrain", f"fact {e}?", self.options, self.value[str(e)])
            out.append(self.teach(item, rng, direct=bool(rng.random() < p_direct)))
        return out


# ------------------------------------------------------------------------ aleatoric
_URN = re.compile(r"^urn (\d)a(\d)b(\d)c\?$")


class Aleatoric(SyntheticTask):
    """``urn 3a1b2c?``: the colour of one ball drawn from the urn; ``q`` = counts / total.

    The teacher imagines one draw ``c`` from the urn, too confidently (``c ~ q^2``,
    normalised), writes ``maybe c`` and states ``c`` (with probability ``commit``; else a
    fresh draw from ``q^2``). So after a rationale the base model's readout is peaked on the
    imagined colour (rationales disagree: Proposition 1's diversity term), and directly or
    after the empty rationale (``PretrainConfig.p_empty``) it is ``q^2`` normalised:
    overconfident, with temperature 2 undoing it exactly, but never saturated, so the
    proper score keeps a gradient."""

    name = "aleatoric"
    options = ("A", "B", "C")
    commit = 0.8

    def draw(self, rng, uid):
        while True:
            counts = rng.integers(0, 5, size=3)
            if (counts > 0).sum() >= 2:
                break
        q = counts / counts.sum()
        prompt = "urn {}a{}b{}c?".format(*counts)
        label = int(rng.choice(3, p=q))  # one annotator's draw; q is the target
        return TaskItem(uid, prompt, self.options, label, tuple(q.tolist()))

    def teach(self, item, rng, direct):
        counts = np.array([int(v) for v in _URN.match(item.prompt).groups()], dtype=float)
        sharp = counts**2 / (counts**2).sum()
        imagined = int(rng.choice(3, p=sharp))
        stated = imagined if rng.random() < self.commit else int(rng.choice(3, p=sharp))
        rationale = "" if direct else f"maybe {self.options[imagined].lower()}"
        return Example(item.prompt, rationale, self.options[stated], direct)

    @cached_property
    def splits(self):
        # the prompt space is small (a few hundred urns): splits share urns but not uids
        out = {}
        for split in ("test", "dev", "train"):
            rng = self.rng(split)
            out[split] = [
                self.draw(rng, f"aleatoric-{split}-{i}") for i in range(SPLIT_SIZES[split])
            ]
        return out

    @cached_property
    def held_out_prompts(self):
        return frozenset()


TASKS: dict[str, type[SyntheticTask]] = {
    "verify": Verify, "verify-mixed": VerifyMixed, "verify-check": VerifyCheck,
    "facts": Facts, "aleatoric": Aleatoric,
}  # fmt: skip


def get_task(name: str, seed: int = WORLD_SEED, **teacher) -> SyntheticTask:
    """The synthetic task called ``name`` (a key of ``TASKS``); ``teacher``: settings of
    its teacher (the verify tasks: ``slip``).
    Items and splits depend on ``name`` and ``seed`` only.

    * ``verify`` (GSM8K-Verify analogue; reasoning is computation): ``"47+38+16=91?"`` - is
      the proposed sum right? Options ``Y``/``N``; half the proposals are right, the wrong
      ones are near misses (off by 10 or 20, with the right units digit, as a dropped carry
      gives), so answering without computing is hard.
    * ``facts`` (MMLU-Pro analogue; knowledge-heavy): ``"fact kov?"`` - which of 10 values
      (``A``..``J``) a synthetic entity has. The base model saw only some entities, through
      noisy sources; writing a rationale adds nothing it did not know.
    * ``aleatoric`` (ChaosNLI analogue): ``"urn 3a1b2c?"`` - the colour of a ball drawn from
      an urn. The outcome distribution ``q`` is the urn's composition: spread, and re-drawn
      on every training visit; an item's ``label`` is one draw from ``q`` (one annotator), so
      evaluation is against ``q`` (JSD) and against sampled labels.

    Each task also has a *teacher*: the behaviour the base model is pretrained to imitate
    (``rlcd_lab.train.pretrain``). It writes a rationale and then states a label with certainty;
    its rationales contain slips that depend on features visible in the rationale (a
    dropped carry in ``verify``, an unfamiliar or misremembered entity in ``facts``; in
    ``aleatoric`` an imagined draw from the urn), so the base model is overconfident and
    calibrating after reasoning is learnable.
    """
    try:
        cls = TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; choose one of {sorted(TASKS)}") from None
    return cls(seed, **teacher)
