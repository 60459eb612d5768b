"""Packed JSON lines (rlcd_lab.files.io): ``X.jsonl.xz`` reads as ``X.jsonl`` did, and packing
is lossless and reproducible."""

import json
import lzma

import pytest

from rlcd_lab.files.io import jsonl_files, jsonl_path, main, pack, pack_jsonl, read_jsonl

ROWS = [{"uid": "a", "probs": [0.25, 0.75], "text": "é ✓"}, {"uid": "b", "probs": [1.0, 0.0]}]


def write(path, rows=ROWS):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n", encoding="utf-8")
    return path


def test_a_packed_file_reads_as_the_plain_one(tmp_path):
    plain = write(tmp_path / "test.jsonl")
    text = plain.read_bytes()
    assert read_jsonl(plain) == ROWS  # the trailing blank line is skipped
    packed = pack_jsonl(plain)
    assert packed == tmp_path / "test.jsonl.xz" and not plain.exists()
    assert lzma.decompress(packed.read_bytes()) == text  # lossless, byte for byte
    assert read_jsonl(packed) == read_jsonl(plain) == ROWS  # by suffix, or the plain name
    assert jsonl_path(plain) == packed and jsonl_path(packed) == packed
    write(plain, ROWS[:1])  # both there: the plain file wins
    assert jsonl_path(plain) == plain and read_jsonl(plain) == ROWS[:1]


def test_missing_and_truncated_files_fail_as_readers_expect(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.jsonl"):
        read_jsonl(tmp_path / "nothing.jsonl")
    assert jsonl_path(tmp_path / "nothing.jsonl") == tmp_path / "nothing.jsonl"
    assert jsonl_path(tmp_path / "config.json") == tmp_path / "config.json"  # not JSONL
    packed = pack_jsonl(write(tmp_path / "cut.jsonl"))
    packed.write_bytes(packed.read_bytes()[:-12])  # the stream ends early
    with pytest.raises(ValueError, match="cut.jsonl.xz"):
        read_jsonl(tmp_path / "cut.jsonl")


def test_packing_is_deterministic(tmp_path):
    a, b = write(tmp_path / "a" / "log.jsonl"), write(tmp_path / "b" / "log.jsonl")
    (tmp_path / "b" / "log.jsonl").touch()  # another mtime: the same bytes
    assert pack_jsonl(a).read_bytes() == pack_jsonl(b).read_bytes()
    write(a)
    assert pack_jsonl(a).read_bytes() == (tmp_path / "b" / "log.jsonl.xz").read_bytes()


def test_pack_a_folder_and_find_its_dumps_in_either_form(tmp_path):
    run = tmp_path / "seed-1" / "reinforce"
    for name in ("log.jsonl", "eval/test.jsonl", "eval/dev.jsonl", "eval/test-m16.jsonl"):
        write(run / name, [{"name": name}])
    (run / "config.json").write_text("{}")
    ev = run / "eval"
    plain = jsonl_files(ev)
    assert [p.name for p in plain] == ["dev.jsonl", "test-m16.jsonl", "test.jsonl"]
    main(["pack", str(tmp_path)])  # python -m rlcd_lab.files.io pack DIR
    assert sorted(p.name for p in run.rglob("*")) == [
        "config.json", "dev.jsonl.xz", "eval", "log.jsonl.xz", "test-m16.jsonl.xz",
        "test.jsonl.xz",
    ]  # fmt: skip
    assert jsonl_files(ev) == plain  # by their plain names
    assert jsonl_files(ev, "test-m*.jsonl") == [ev / "test-m16.jsonl"]
    assert jsonl_files(tmp_path, "**/eval/test.jsonl") == [ev / "test.jsonl"]
    assert [read_jsonl(p) for p in plain] == [[{"name": f"eval/{p.name}"}] for p in plain]
    assert pack(tmp_path) == []  # nothing left to pack
    with pytest.raises(SystemExit, match="not a folder"):
        main(["pack", str(tmp_path / "nowhere")])
