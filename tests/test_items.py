"""Task items: validation with clear errors, JSONL round trip, atomic writes."""

import json

import pytest

from rlcd_lab.io import atomic_dir
from rlcd_lab.tasks import TaskItem, read_items, write_items


def test_round_trip_and_target(tmp_path):
    items = [
        TaskItem("a", "Is 2+2=4?", ("yes", "no"), 0),
        TaskItem("b", "Which?", ["A", "B", "C"], None, [0.2, 0.5, 0.3]),
    ]
    path = write_items(tmp_path / "x.jsonl", items)
    assert read_items(path) == items
    assert items[0].target == (1.0, 0.0)
    assert items[1].target == (0.2, 0.5, 0.3)
    assert not list(tmp_path.glob(".*tmp"))  # no temp file left behind


@pytest.mark.parametrize(
    "kw,msg",
    [
        (dict(options=("A",)), "at least 2 options"),
        (dict(options=("A", "A")), "duplicate options"),
        (dict(options=("A", " ")), "non-empty strings"),
        (dict(label=2), "not an index"),
        (dict(label=None), "needs a label or"),
        (dict(prompt=" "), "prompt must be"),
        (dict(q=(0.5, 0.6)), "probability distribution"),
        (dict(q=(1.0,)), "1 entries for 2 options"),
    ],
)
def test_bad_items_name_the_problem(kw, msg):
    args = dict(uid="u1", prompt="p", options=("A", "B"), label=0, q=None) | kw
    with pytest.raises(ValueError, match=msg) as err:
        TaskItem(**args)
    assert "'u1'" in str(err.value)


def test_read_errors_name_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = {"uid": "a", "prompt": "p", "options": ["A", "B"], "label": 0, "q": None}
    path.write_text(json.dumps(good) + "\n" + json.dumps(good | {"extra": 1}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: unknown task-item fields \['extra'\]"):
        read_items(path)


def test_atomic_dir_replaces_whole_or_not_at_all(tmp_path):
    target = tmp_path / "ckpt"
    with atomic_dir(target) as tmp:
        (tmp / "a.txt").write_text("1")
    assert (target / "a.txt").read_text() == "1"
    with pytest.raises(RuntimeError), atomic_dir(target) as tmp:
        (tmp / "a.txt").write_text("2")
        raise RuntimeError("crash mid-write")
    assert (target / "a.txt").read_text() == "1"  # untouched
    with atomic_dir(target) as tmp:
        (tmp / "b.txt").write_text("3")
    assert sorted(p.name for p in target.iterdir()) == ["b.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_atomic_outputs_get_normal_permissions(tmp_path):
    import os

    umask = os.umask(0o022)
    try:
        path = write_items(tmp_path / "x.jsonl", [TaskItem("a", "p", ("A", "B"), 0)])
        with atomic_dir(tmp_path / "d") as tmp:
            (tmp / "f").write_text("1")
            os.chmod(tmp / "f", 0o600)
    finally:
        os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "d" / "f").stat().st_mode & 0o777 == 0o644
