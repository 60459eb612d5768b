"""Task items: validation with clear errors, JSONL round trip, atomic writes."""

import json
import re

import pytest

import rlcd_lab.tasks.items as items_mod
from rlcd_lab.files.io import atomic_dir
from rlcd_lab.tasks.items import TaskItem, read_items, write_items


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


def test_load_task_items_reads_split_siblings_never_the_whole_file(tmp_path):
    from rlcd_lab.tasks import load_task_items

    def items(prefix: str, n: int) -> list[TaskItem]:
        return [TaskItem(f"{prefix}{i}", "p", ("A", "B"), i % 2) for i in range(n)]

    whole = write_items(tmp_path / "x.jsonl", items("w", 6))
    with pytest.raises(ValueError) as err:
        load_task_items(str(whole), "train")
    msg = str(err.value)
    assert "\n" not in msg  # one line
    assert f"{tmp_path / 'x.train.jsonl'} is missing" in msg
    assert f"`rlcd-lab data split {whole} --dev N --test N`" in msg
    for split, n in (("train", 4), ("dev", 2)):
        write_items(tmp_path / f"x.{split}.jsonl", items(split, n))
    assert [i.uid for i in load_task_items(str(whole), "train")] == [
        "train0",
        "train1",
        "train2",
        "train3",
    ]
    assert [i.uid for i in load_task_items(str(whole), "dev")] == ["dev0", "dev1"]
    with pytest.raises(ValueError, match=r"has no test split: .*x.test.jsonl is missing"):
        load_task_items(str(whole), "test")  # two splits there: still no fallback
    write_items(tmp_path / "x.test.jsonl", items("test", 1))
    # a split file given as the task stands for x.jsonl: its siblings serve the other splits
    assert [i.uid for i in load_task_items(str(tmp_path / "x.train.jsonl"), "test")] == ["test0"]
    whole.unlink()  # the split files alone are enough
    assert len(load_task_items(str(tmp_path / "x.jsonl"), "dev")) == 2
    with pytest.raises(ValueError, match="split must be one of"):
        load_task_items(str(tmp_path / "x.jsonl"), "val")
    with pytest.raises(ValueError, match="task must be one of"):
        load_task_items(str(tmp_path / "nothing.jsonl"), "train")


GOOD = {"uid": "a", "prompt": "p", "options": ["A", "B"], "label": 0, "q": None}


@pytest.mark.parametrize(
    ("line", "msg"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "not readable as JSON: nested too deeply"),
        (b'{"uid": "x\xff"}', r"not UTF-8 text \(byte 0xff at byte 11 of the line\)"),
        (json.dumps(GOOD | {"label": True}).encode(), "'a': label true is not an index"),
        (json.dumps(GOOD | {"label": False}).encode(), "'a': label false is not an index"),
        (b'["uid", "prompt", "options"]', "must be a JSON object with uid, .*, got an array"),
        (b'"hello"', "must be a JSON object with uid, prompt, options, label, q, got a string"),
        (b"3", "must be a JSON object .*, got a number"),
        (b"null", "must be a JSON object .*, got null"),
        (json.dumps(GOOD | {"options": "AB"}).encode(), "options must be an array of strings"),
        (json.dumps(GOOD | {"options": {"A": 1}}).encode(), "options must be an array .*object"),
        (json.dumps(GOOD | {"q": "0.5"}).encode(), "q must be an array of numbers or null"),
        (json.dumps(GOOD | {"q": ["0.5", "0.5"]}).encode(), "q must hold numbers only"),
        (json.dumps(GOOD | {"q": [True, False]}).encode(), "q must hold numbers only"),
        (json.dumps(GOOD | {"options": ["A", ["B"]]}).encode(), "options must be non-empty str"),
        (b'{"uid": "a", "prompt": "\\ud800", "options": ["A", "B"], "label": 0}', "surrogate"),
    ],
)
def test_every_bad_line_is_one_error_naming_file_and_line(tmp_path, line, msg):
    """A line nested 100,000 deep, bytes that are not UTF-8, a boolean label, a line that
    is an array, a string or a number, options given as a string: one ``ValueError``
    ``<file>:<line>: ...`` each (never a RecursionError, a UnicodeDecodeError without the
    file, or an item accepted and written back)."""
    path = tmp_path / "bad.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n\n" + line + b"\n")
    with pytest.raises(ValueError) as err:
        read_items(path)
    text = str(err.value)
    assert text.startswith(f"{path}:3: ") and "\n" not in text and len(text) < 300, text
    assert re.search(msg, text), text


def test_a_byte_order_mark_and_crlf_lines_are_fine(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD).encode() + b"\r\n")
    assert read_items(path) == [TaskItem("a", "p", ("A", "B"), 0)]


def test_items_built_in_code_are_checked_the_same(tmp_path):
    with pytest.raises(ValueError, match="'u': label true is not an index"):
        TaskItem("u", "p", ("A", "B"), True)
    with pytest.raises(ValueError, match="'u': options must be a list of strings, got 'AB'"):
        TaskItem("u", "p", "AB", 0)
    with pytest.raises(ValueError, match="'u': q must hold numbers only"):
        TaskItem("u", "p", ("A", "B"), None, (True, False))


# ------------------------------------------------------------------ bounded reading
def test_a_line_past_the_limit_stops_the_read_there(tmp_path):
    """A file of zero bytes and no newline (what ``/dev/zero`` gives) is refused at its
    first line once MAX_LINE_BYTES are read, not parsed whole."""
    path = tmp_path / "zeros.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n" + bytes(items_mod.MAX_LINE_BYTES + 1))
    with pytest.raises(ValueError, match=r"zeros.jsonl:2: line longer than 1,048,576 bytes"):
        read_items(path)
    path.write_bytes(b"x" * (items_mod.MAX_LINE_BYTES - 1) + b"\n")  # at the limit: read
    with pytest.raises(ValueError, match=r"zeros.jsonl:1: Expecting value"):
        read_items(path)


def test_more_items_or_bytes_than_the_limit_are_refused(tmp_path, monkeypatch):
    path = write_items(
        tmp_path / "x.jsonl", [TaskItem(f"u{i}", "p", ("A", "B"), 0) for i in range(4)]
    )
    monkeypatch.setattr(items_mod, "MAX_ITEMS", 4)
    assert len(read_items(path)) == 4  # exactly the limit
    monkeypatch.setattr(items_mod, "MAX_ITEMS", 3)
    with pytest.raises(ValueError, match=r"x.jsonl: more than 3 items, the limit .*\(line 4\)"):
        read_items(path)
    size = path.stat().st_size
    monkeypatch.setattr(items_mod, "MAX_ITEMS", 4)
    monkeypatch.setattr(items_mod, "MAX_FILE_BYTES", size - 1)
    with pytest.raises(ValueError, match=rf"x.jsonl: larger than {size - 1:,} bytes"):
        read_items(path)


def test_an_echoed_line_has_its_control_characters_escaped(tmp_path):
    """A line with an escape sequence that sets the terminal's title and a NUL: the error
    quotes it with both written as escapes, so nothing reaches the terminal raw."""
    path = tmp_path / "evil.jsonl"
    path.write_bytes(b'{"uid": "a\x1b]0;pwned\x07\x00", "prompt": "p"}\n')
    with pytest.raises(ValueError) as err:
        read_items(path)
    text = str(err.value)
    assert r"a\x1b]0;pwned\x07\x00" in text, text
    assert all(c.isprintable() for c in text), text
