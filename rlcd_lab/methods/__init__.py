"""The method registry: every training method, fork and post-hoc calibrator as one row of
:data:`METHOD_TABLE`, which the command line, the reproduction, the reports, the
training checks and the dashboard iterate. A new method is its config (``configs.py``),
its loop (a module with ``train(cfg)``) and one row here.

Importing this package loads no torch: a loop module is imported when its method runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from importlib import import_module
from pathlib import Path
from typing import Any, Literal

from rlcd_lab.files import rundir
from rlcd_lab.methods.configs import (
    DESCRIPTIONS,
    METHODS,
    GRPOConfig,
    RFTConfig,
    RLCDConfig,
    RLCRConfig,
    SFTConfig,
    TeachConfig,
    TrainConfig,
    field_names,
)

MATCHED = "-matched"
"""Suffix of a run's budget-matched twin in a reproduction (two stages' steps)."""
SWEEP = (0.1, 0.3, 1.0)
"""Table 4: score-function weights of the end-to-end runs (weight 0 is RLCD stage 1)."""
SWEEP_PREFIX = "endtoend-c"
"""Prefix of Table 4's runs: the end-to-end objective at score-function weight W."""
NO_KL = "endtoend-nokl"
"""Figure 1's System-One collapse: the end-to-end objective at weight 1 without a KL
anchor (beside ``endtoend-c1``, the same with it)."""
GRPO_STAGE1 = "grpo-calibrate"
"""Outcome RL, then RLCD's stage 1: ``calibrate`` continued from GRPO's final checkpoint,
so that its two stages take two-stage RLCD's budget; beside ``reinforce`` it asks whether
stage 2's proper-score reward matters or any readout calibration after RL does the same."""
FORMAT_STEPS = {"tiny": 20, "small": 6, "rung": 20, "paper": 20}
"""RLCR's first steps in a reproduction, by scale, spent teaching the confidence format
(``RLCRConfig.format_steps``): a tenth of 200 steps (the ``tiny`` runs' steps per stage,
the ``rung``'s matched budget); a quarter of ``small``'s matched 24, so that SmolLM2
writes a digit after the cue before the reward takes over."""

Role = Literal["method", "baseline", "fork", "post-hoc", "setup"]


@dataclass(frozen=True)
class Reproduction:
    """What a reproduction gives each row to build its runs (one seed): the ``settings``
    every run shares (scale, task, seed, base model), the ``stage1`` checkpoint the forks
    start from, whether the task's items carry ``q`` (``aleatoric``: Table 3), the
    ``scale``, the ACE weight ``ace`` (0: no ACE fork) and the seed's folder ``root``."""

    settings: dict
    stage1: Path
    aleatoric: bool
    scale: str = "tiny"
    ace: float = 0.0
    root: Path = Path()
    """The seed's folder (``OUT/<task>/seed-<s>``): where a run finds another's checkpoint."""


def configured(config: TrainConfig, settings: dict, **overrides: Any) -> TrainConfig:
    """``config`` with the ``settings`` it has (a setting a method does not read is left
    out) and then ``overrides`` applied."""
    names = field_names(config)
    shared = {k: v for k, v in settings.items() if k in names and k not in overrides}
    return replace(config, **shared, **overrides)


def one_rationale(cfg: TrainConfig) -> tuple[int, str]:
    """The fewest rationales per question of a method that reads each on its own."""
    return 1, "every question needs a rationale"


def _leave_one_out(cfg: RLCDConfig) -> tuple[int, str]:
    if cfg.lam > 0:
        return 3, "the mixture estimate (--lam > 0) needs three rationales per question"
    return 2, "its leave-one-out baseline needs two rationales per question"


def _group(cfg: TrainConfig) -> tuple[int, str]:
    return 2, "its group-normalized reward needs two rationales per question"


def _trajectories(cfg: TrainConfig) -> tuple[int, str]:
    return 2, "its leave-one-out baseline needs two trajectories per question"


@dataclass(frozen=True)
class Method:
    """One row of :data:`METHOD_TABLE`: everything the lab needs to know of a method. The
    command line (``rlcd-lab train <name>``, its ``--help``), the reproduction
    (``reproduce.plan``), the reports' rows and mechanism table, the training checks
    (``min_rationales``) and the dashboard's default comparison read it, so a new method
    is its config, its loop and one row."""

    config: TrainConfig | None
    """Its default settings (``rlcd-lab train <name>`` starts from them); None: nothing is
    trained (a post-hoc calibrator)."""
    loop: str
    """The module whose ``train(cfg)`` runs it (imported when it runs); a post-hoc
    calibrator's: the module that fits it."""
    label: str
    """Its name in tables and figures (``+TS``: read after temperature scaling)."""
    role: Role
    """``method``: the paper's two stages; ``baseline``: compared with them; ``fork``: a
    continuation of stage 1 (Table 2); ``post-hoc``: a calibrator fitted on a run's dev
    items; ``setup``: prepares a base model."""
    description: str = ""
    """One line for ``--help``."""
    command: bool = True
    """Offered as ``rlcd-lab train <name>``."""
    compare: int | None = None
    """Its place in the dashboard's default comparison (None: not in it)."""
    report: int | None = None
    """Its place in the reports' tables (None: not a row of its own)."""
    rows: tuple[tuple[str, str], ...] = ()
    """Further report rows it gives, right after its own: ``(run name, label)``."""
    min_rationales: Callable[[Any], tuple[int, str]] = one_rationale
    """``cfg -> (fewest rationales per question, why)``: what its loop can train with."""
    runs: Callable[[Reproduction], dict[str, TrainConfig]] | None = None
    """Its runs in a reproduction, by run name (None: none)."""
    matched: bool = False
    """Its run of its own name gets a budget-matched twin (``<name>-matched``)."""
    mechanism: tuple[str, ...] = ()
    """Its runs whose mechanism a summary measures (``reports.mechanism``)."""

    def run(self, cfg: TrainConfig) -> Path:
        """Run ``<loop>.train(cfg)`` (imported now); returns the run directory."""
        return import_module(self.loop).train(cfg)


def _train(name: str) -> str:
    return f"rlcd_lab.train.{name}"


def _always(name: str, config: TrainConfig, **overrides: Any):
    """A row's runs: one run ``name`` from the base model, on every task."""
    return lambda r: {name: configured(config, r.settings, **overrides)}


def _table1(name: str, config: TrainConfig, **overrides: Any):
    """A row's runs: one run ``name`` from the base model, on tasks without ``q``."""
    return lambda r: {} if r.aleatoric else {name: configured(config, r.settings, **overrides)}


def _table3(name: str, config: TrainConfig):
    """A row's runs: one run ``name`` from the base model, on tasks with ``q``."""
    return lambda r: {name: configured(config, r.settings)} if r.aleatoric else {}


def _fork(name: str, config: TrainConfig, **overrides: Any):
    """A row's runs: one continuation ``name`` of stage 1, on tasks without ``q``."""
    return lambda r: (
        {} if r.aleatoric else {name: configured(config, r.settings, init=r.stage1, **overrides)}
    )


def _endtoend(r: Reproduction) -> dict[str, TrainConfig]:
    """Table 3's per-rationale run (KL-anchored) on tasks with ``q``; elsewhere Table 4's
    sweep over score-function weights and Figure 1's run without the anchor."""
    e2e = METHODS["endtoend"]
    if r.aleatoric:
        return {"endtoend": configured(e2e, r.settings, beta=0.04)}
    runs = {
        f"{SWEEP_PREFIX}{c:g}": configured(e2e, r.settings, sf_weight=c, beta=0.04) for c in SWEEP
    }
    return runs | {NO_KL: configured(e2e, r.settings, sf_weight=1.0, beta=0.0)}


def _rlcr(r: Reproduction) -> dict[str, TrainConfig]:
    return {} if r.aleatoric else {
        "rlcr": configured(RLCRConfig(), r.settings, format_steps=FORMAT_STEPS[r.scale])
    }  # fmt: skip


def _ace(r: Reproduction) -> dict[str, TrainConfig]:
    return _fork("reinforce-ace", METHODS["reinforce"], ace=r.ace)(r) if r.ace else {}


METHOD_TABLE: dict[str, Method] = {
    "calibrate": Method(
        METHODS["calibrate"], _train("rlcd"), "RLCD stage 1", "method", DESCRIPTIONS["calibrate"],
        report=10, min_rationales=_leave_one_out, runs=_always("calibrate", METHODS["calibrate"]),
        mechanism=("calibrate",),
    ),
    "reinforce": Method(
        METHODS["reinforce"], _train("rlcd"), "RLCD (two-stage)", "method",
        DESCRIPTIONS["reinforce"], compare=0, report=11, min_rationales=_leave_one_out,
        runs=lambda r: {"reinforce": configured(METHODS["reinforce"], r.settings, init=r.stage1)},
        mechanism=("reinforce",),
    ),
    "endtoend": Method(
        METHODS["endtoend"], _train("rlcd"), "per-rationale (end to end, KL)", "baseline",
        DESCRIPTIONS["endtoend"], report=8, min_rationales=_leave_one_out, runs=_endtoend,
        matched=True,
    ),
    "mixture": Method(
        METHODS["mixture"], _train("rlcd"), "mixture (lam = 1)", "baseline",
        DESCRIPTIONS["mixture"], report=9, min_rationales=_leave_one_out,
        runs=_table3("mixture", METHODS["mixture"]),
        matched=True,
    ),
    "sft": Method(
        SFTConfig(), _train("sft"), "SFT+TS", "baseline",
        "Baseline: direct answers, cross-entropy on the label token.", compare=3, report=1,
        runs=_always("sft", SFTConfig()), matched=True, mechanism=("sft", "sft" + MATCHED),
    ),
    "rft": Method(
        RFTConfig(), _train("rft"), "RFT+TS", "baseline",
        "Baseline: RFT/STaR, clone trajectories whose sampled answer is right.", compare=2,
        report=2, runs=_table1("rft", RFTConfig()), matched=True,
    ),
    "rft-kl": Method(
        RFTConfig(beta=0.04), _train("rft"), "RFT+KL+TS", "baseline",
        "Baseline: RFT/STaR anchored by KL to its start (beta 0.04).", command=False, report=3,
        runs=_table1("rft-kl", RFTConfig(beta=0.04)), matched=True,
        mechanism=("rft-kl", "rft-kl" + MATCHED),
    ),
    "rlcr": Method(
        RLCRConfig(), _train("rlcr"), "RLCR+TS (readout)", "baseline",
        "Baseline: RLCR, correctness + Brier of a stated confidence, KL anchor.", report=7,
        rows=(("rlcr-stated", "RLCR+TS (stated confidence)"),), min_rationales=_trajectories,
        runs=_rlcr, matched=True,
        mechanism=("rlcr" + MATCHED,),
    ),
    "teach": Method(
        TeachConfig(), _train("teach"), "teach", "setup",
        "Give a pretrained model its task's skill: SFT on worked rationales (by rule).",
    ),
    "grpo": Method(
        GRPOConfig(), _train("grpo"), "GRPO+TS", "baseline",
        "Baseline: GRPO, correctness reward of a sampled answer, KL anchor.", compare=1,
        report=4, min_rationales=_group, runs=_always("grpo", GRPOConfig()), matched=True,
        mechanism=("grpo", "grpo" + MATCHED),
    ),
    "drgrpo": Method(
        GRPOConfig(advantage="group-mean"), _train("grpo"), "Dr.GRPO+TS", "baseline",
        "Baseline: GRPO without the division by the group's reward s.d. (Dr. GRPO).",
        command=False, report=5, min_rationales=_group,
        runs=_always("drgrpo", GRPOConfig(advantage="group-mean")), matched=True,
    ),
    GRPO_STAGE1: Method(
        METHODS["calibrate"], _train("rlcd"), "GRPO then stage-1 calibration", "baseline",
        command=False, report=6, min_rationales=_leave_one_out,
        runs=lambda r: {GRPO_STAGE1: configured(
            METHODS["calibrate"], r.settings, init=rundir.final_dir(r.root / "grpo"))},
    ),
    "readout-only": Method(
        METHODS["calibrate"], _train("rlcd"), "fork: readout-only", "fork", command=False,
        report=12, min_rationales=_leave_one_out,
        runs=_fork("readout-only", METHODS["calibrate"]),
    ),
    "anchor-only": Method(
        METHODS["reinforce"], _train("rlcd"), "fork: anchor-only", "fork", command=False,
        report=13, min_rationales=_leave_one_out,
        runs=_fork("anchor-only", METHODS["reinforce"], outcome_reward=False),
    ),
    "grpo-cont": Method(
        GRPOConfig(), _train("grpo"), "fork: GRPO continuation", "fork", command=False,
        report=14, min_rationales=_group, runs=_fork("grpo-cont", GRPOConfig()),
    ),
    "reinforce-ace": Method(
        METHODS["reinforce"], _train("rlcd"), "fork: RLCD-RL with ACE", "fork", command=False,
        report=15, min_rationales=_leave_one_out, runs=_ace,
    ),
    "group-ts": Method(
        None, "rlcd_lab.reports.posthoc", "TS per question group", "post-hoc", command=False
    ),
    "logistic": Method(
        None, "rlcd_lab.reports.posthoc", "logistic calibrator", "post-hoc", command=False
    ),
    "isotonic": Method(
        None, "rlcd_lab.reports.posthoc", "isotonic regression", "post-hoc", command=False
    ),
}  # fmt: skip
"""Every method, fork and post-hoc calibrator by run name (the command line's order)."""


def commands() -> dict[str, Method]:
    """The rows offered as ``rlcd-lab train <name>``, in the table's order."""
    return {name: m for name, m in METHOD_TABLE.items() if m.command}


def method_of(cfg: TrainConfig) -> Method:
    """The command row that runs ``cfg`` (by ``cfg.method``); ``ValueError`` for another."""
    rows = commands()
    if cfg.method not in rows:
        raise ValueError(f"unknown method {cfg.method!r}; choose one of {sorted(rows)}")
    return rows[cfg.method]


def report_rows() -> dict[str, str]:
    """``{run name: label}`` of the rows the reports give methods, in table order."""
    placed = sorted((m.report, name) for name, m in METHOD_TABLE.items() if m.report is not None)
    out = {}
    for _, name in placed:
        out[name] = METHOD_TABLE[name].label
        out |= dict(METHOD_TABLE[name].rows)
    return out


def mechanism_runs() -> tuple[str, ...]:
    """The runs whose mechanism a summary measures (after the base model)."""
    return ("base", *(run for m in METHOD_TABLE.values() for run in m.mechanism))


def compared() -> tuple[str, ...]:
    """The dashboard's default comparison, in its order: two-stage RLCD and its baselines."""
    placed = [(m.compare, n) for n, m in METHOD_TABLE.items() if m.compare is not None]
    return tuple(name for _, name in sorted(placed))


def reproduction_runs(r: Reproduction, steps: int) -> dict[str, TrainConfig]:
    """Every row's runs in a reproduction (one seed), and for a row that asks for it a
    budget-matched twin of its run at ``steps`` (``<name>-matched``)."""
    runs: dict[str, TrainConfig] = {}
    for m in METHOD_TABLE.values():
        runs |= m.runs(r) if m.runs is not None else {}
    for name, m in METHOD_TABLE.items():
        if m.matched and name in runs:
            runs[name + MATCHED] = replace(runs[name], steps=steps)
    return runs


@contextmanager
def registered(name: str, method: Method) -> Iterator[dict[str, Method]]:
    """Within the block, :data:`METHOD_TABLE` also holds ``method`` as ``name`` (a method
    tried without editing the table); the table is restored after."""
    if name in METHOD_TABLE:
        raise ValueError(f"method {name!r} is already registered")
    METHOD_TABLE[name] = method
    try:
        yield METHOD_TABLE
    finally:
        del METHOD_TABLE[name]
