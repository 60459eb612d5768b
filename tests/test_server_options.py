"""The decision server's options are one dataclass from the command line to the app: every
field of :class:`ServeOptions` is a flag of ``rlcd-lab serve`` and is read by ``serve`` or
``create_app`` (read from their source), so a new option is one field and one reading."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from rlcd_lab.cli import COMMANDS, main
from rlcd_lab.server.options import ServeOptions

SERVER = Path(__file__).resolve().parent.parent / "rlcd_lab" / "server"
FIELDS = [f.name for f in dataclasses.fields(ServeOptions)]


def options_read(path: Path, function: str, param: str = "opts") -> set[str]:
    """The attributes ``function`` in ``path`` reads off its parameter ``param``."""
    tree = ast.parse(path.read_text())
    (fn,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function]
    return {
        n.attr
        for n in ast.walk(fn)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == param
    }


def test_the_serve_command_parses_the_servers_options():
    _, load = COMMANDS["serve"]
    assert load() is ServeOptions
    assert dataclasses.is_dataclass(ServeOptions) and ServeOptions.__dataclass_params__.frozen


def test_serve_help_lists_every_option(capsys):
    with pytest.raises(SystemExit) as done:
        main(["serve", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    missing = [f for f in FIELDS if f"--{f.replace('_', '-')}" not in out]
    assert missing == []


def test_every_option_reaches_the_app():
    """Each field is read by ``serve`` (binding, transport, threads, key, hosts) or by
    ``create_app`` (names, answers, batching, deadline, device, checksums)."""
    read = options_read(SERVER / "serving.py", "serve") | options_read(
        SERVER / "app.py", "create_app"
    )
    assert sorted(set(FIELDS) - read) == []
    assert read <= set(FIELDS)  # and nothing it reads is missing from the dataclass


def test_the_options_check_can_fail(tmp_path):
    (tmp_path / "m.py").write_text("def serve(opts, other):\n    return opts.port, other.host\n")
    assert options_read(tmp_path / "m.py", "serve") == {"port"}
