"""The method registry (``rlcd_lab.methods``): one row per method that every consumer reads,
each method's config with only its own options, and old run records still compared."""

import dataclasses
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import get_type_hints

import pytest
import tyro

from rlcd_lab.cli import main, parse
from rlcd_lab.dashboard.common import default_runs
from rlcd_lab.files import rundir
from rlcd_lab.files.assets import ASSETS
from rlcd_lab.math.rule_names import Rule
from rlcd_lab.methods import (
    MATCHED,
    METHOD_TABLE,
    Method,
    commands,
    configured,
    mechanism_runs,
    registered,
)
from rlcd_lab.methods.configs import (
    RLCDConfig,
    SamplingConfig,
    SFTConfig,
    TrainConfig,
    field_names,
    preset,
)
from rlcd_lab.reports import report
from rlcd_lab.reproduce import ReproduceConfig, other_config, plan
from rlcd_lab.scoring import RULES
from rlcd_lab.train import train


# ------------------------------------------------------------- a toy method, three parts
@dataclass(frozen=True)
class ToyConfig(TrainConfig):
    """Settings of the toy method (its config)."""

    method: tyro.conf.Fixed[str] = "toy"
    out: Path = Path("runs/toy")
    tilt: float = 0.5
    """How far the toy leans."""


TOY_LOOP = "def train(cfg):\n    return cfg.out / 'trained-by-toy'\n"
"""Its loop: a module with ``train(cfg)``."""


def toy_row(loop: str) -> Method:
    """Its row: a baseline with a matched twin, a report row after the forks, last in the
    dashboard's comparison and in the mechanism table."""
    return Method(
        ToyConfig(), loop, "Toy+TS", "baseline", "Baseline: a toy that leans.",
        compare=len(METHOD_TABLE), report=len(METHOD_TABLE),
        runs=lambda r: {} if r.aleatoric else {"toy": configured(ToyConfig(), r.settings)},
        matched=True, mechanism=("toy",),
    )  # fmt: skip


def test_a_toy_method_is_seen_by_every_consumer(tmp_path, monkeypatch, capsys):
    """Registered with its config, its loop and its row only: the command line offers it
    (with its own option), runs its loop, the reproduction plans it with a matched twin,
    the reports label and order it, the mechanism table measures it and the dashboard
    puts it in its default comparison; outside the block, none of them knows it."""
    (tmp_path / "toy_loop.py").write_text(TOY_LOOP)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "toy_loop", raising=False)
    with registered("toy", toy_row("toy_loop")):
        # the command line: a subcommand with the toy's option, its loop run by train()
        cfg = parse(["train", "toy", "--tilt", "0.25", "--out", str(tmp_path / "t")])
        assert isinstance(cfg, ToyConfig) and cfg.tilt == 0.25
        assert train(cfg) == tmp_path / "t" / "trained-by-toy"
        with pytest.raises(SystemExit):
            main(["train", "--help"])
        assert "Baseline: a toy that leans." in capsys.readouterr().out
        # the reproduction: one run per seed from the base model, and its matched twin
        first, _ = plan(ReproduceConfig(seeds=(3,), out=tmp_path, steps=7))
        jobs = {j.name: j.train for j in first}
        assert isinstance(jobs["toy"], ToyConfig)
        assert (jobs["toy"].steps, jobs["toy"].seed, jobs["toy"].task) == (7, 3, "verify")
        twin = jobs["toy" + MATCHED]
        assert twin == dataclasses.replace(jobs["toy"], steps=14, out=twin.out)
        # the reports: its label, its matched twin's, its place after the forks
        assert report.label("toy") == "Toy+TS"
        assert report.label("toy" + MATCHED) == "Toy+TS (matched budget)"
        order = report._ordered({"toy": 1, "reinforce-ace": 1, "sft": 1, "endtoend-c1": 1})
        assert order == ["sft", "reinforce-ace", "toy", "endtoend-c1"]
        assert "toy" in mechanism_runs()
        # the dashboard: the default comparison holds it, last
        runs = ["v/grpo", "v/reinforce", "v/toy", "v/sft", "v/other"]
        assert default_runs(runs) == ["v/reinforce", "v/grpo", "v/sft", "v/toy"]
    assert "toy" not in METHOD_TABLE and "toy" not in mechanism_runs()
    assert report.label("toy") == "toy"
    assert default_runs(["v/reinforce", "v/toy"]) == ["v/reinforce"]
    with pytest.raises(SystemExit):
        parse(["train", "toy"])


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="'sft' is already registered"):
        with registered("sft", METHOD_TABLE["sft"]):
            pass
    assert METHOD_TABLE["sft"].config == SFTConfig()


# ------------------------------------------------------------- each method's own options
SAMPLING = ("m", "max_new_tokens", "sampling_temperature", "sampler", "beta", "ref")
"""Settings of the methods that sample rationales while training (SFT samples none and
answers directly: its loop and its evaluation read none of them)."""


def help_flags(capsys, method: str) -> set[str]:
    with pytest.raises(SystemExit) as exit_:
        main(["train", method, "--help"])
    assert exit_.value.code == 0
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", capsys.readouterr().out))


def flags(cls: type) -> set[str]:
    return {"--" + f.replace("_", "-") for f in field_names(cls)}


@pytest.mark.parametrize("method", sorted(commands()))
def test_each_method_help_lists_its_config_options_only(capsys, method):
    config = type(commands()[method].config)
    shown = help_flags(capsys, method) - {"--help", "--num-rationales"}
    shown = {"--" + f[len("--no-") :] if f.startswith("--no-") else f for f in shown}
    assert shown == flags(config)


def test_sft_takes_no_sampling_option(capsys):
    shown = help_flags(capsys, "sft")
    assert not shown & {"--" + f.replace("_", "-") for f in SAMPLING}
    assert set(SAMPLING) <= field_names(SamplingConfig)


@pytest.mark.parametrize("flag", ["--beta", "--m", "--ref", "--sampler", "--max-new-tokens"])
def test_an_option_sft_does_not_have_is_one_line_naming_it(capsys, flag):
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["train", "sft", flag, "0.5"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"rlcd-lab: error: rlcd-lab train sft has no option {flag} "), err


def test_a_config_checks_its_own_options_on_construction():
    with pytest.raises(ValueError, match=r"^--lr must be finite and > 0, got -1$"):
        SFTConfig(lr=-1)
    with pytest.raises(ValueError, match=r"^--beta must be finite and >= 0, got -0.5$"):
        preset("reinforce", beta=-0.5)
    with pytest.raises(ValueError, match=r"^--format-steps must be >= 0, got -1$"):
        configured(METHOD_TABLE["rlcr"].config, {}, format_steps=-1)


# ------------------------------------------------------------- old records
def test_a_record_with_every_method_setting_compares_equal():
    """Records written when every method had every setting (an SFT record with ``beta``,
    ``m``, ``sampler``...) compare equal to the method's config: the settings it does not
    have are not read."""
    record = rundir.config_dict(SFTConfig()) | {
        "m": 4, "max_new_tokens": 48, "temperature": 1.0, "beta": 0.0, "ref": None,
        "sampler": "hf",
    }  # fmt: skip
    assert rundir.config_diff(record, SFTConfig()) == []
    assert rundir.config_diff(record, SFTConfig(lr=0.5)) == ["lr"]


@pytest.mark.parametrize("task", ["verify", "aleatoric"])
def test_shipped_runs_compare_equal_to_the_registry_plan(task):
    """Every shipped run trained from the base model (its ``config.json`` holds every
    setting of the one shared config it was written with) is the run the registry's plan
    asks for: the reproduction would reuse it, not retrain it."""
    cfg = ReproduceConfig(task=task, seeds=(17, 23, 29), out=ASSETS / "results")
    first, _ = plan(cfg)
    shipped = [j for j in first if j.train is not None and rundir.config_file(j.out).exists()]
    assert {"sft", "sft" + MATCHED} <= {j.name for j in shipped}
    assert len(shipped) >= 3 * 4
    assert {j.name: other_config(j) for j in shipped} == {j.name: [] for j in shipped}


# ------------------------------------------------------------- scoring rules
def test_every_setting_that_names_a_rule_takes_the_rules_of_one_list():
    assert tuple(RULES) == Rule.__args__
    assert get_type_hints(RLCDConfig)["rule"] == Rule
    trl = pytest.importorskip("rlcd_lab.integrations.trl")
    assert get_type_hints(trl.RLCDSettings)["rule"] == Rule


def test_the_mixture_with_another_rule_is_refused_before_the_run(capsys, tmp_path):
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["train", "mixture", "--rule", "log", "--out", str(tmp_path / "m")])
    err = capsys.readouterr().err
    assert err.startswith("rlcd-lab: error: --rule log: the mixture objective") and (
        err.count("\n") == 1
    ), err
    assert not (tmp_path / "m").exists()
