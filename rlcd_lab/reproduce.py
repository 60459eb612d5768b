"""``rlcd-lab reproduce``: every method and seed of the paper's comparison, then its report.

For each seed, from the same base model and the same question/outcome stream, the runs of
the paper's Tables 1-4 (which ones: :func:`plan`), each an ordinary run directory under
``OUT/<task>/seed-<s>/<name>/``: a finished run with the same config is reused, a partial
one resumed, so an interrupted reproduction continues where it stopped. Start at
:func:`run_all` (the command's entry; :func:`progress` for ``--status``); the settings are
:class:`ReproduceConfig` and :data:`SCALES`, the report is
:func:`rlcd_lab.reports.report.write_report`."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from rlcd_lab.files import rundir
from rlcd_lab.files.assets import ASSETS
from rlcd_lab.files.io import (
    atomic_dir,
    atomic_write_jsonl,
    atomic_write_text,
    jsonl_path,
    pack,
    read_jsonl,
)
from rlcd_lab.methods import MATCHED, Reproduction, reproduction_runs

if TYPE_CHECKING:
    from rlcd_lab.methods.configs import TrainConfig

MIXTURE_M = 16
"""Rationales of the mixture readout in Table 3 (the paper's 16)."""

SCALES: dict[str, dict] = {
    "tiny": dict(
        steps=200, lr=1e-4, max_new_tokens=48, eval_items=200, test_items=400, device="cpu"
    ),
    "small": dict(
        steps=12,
        lr=3e-4,
        max_new_tokens=40,
        eval_items=50,
        test_items=150,
        device="cpu",
        lora_r=8,
        batch_size=2,
        m=4,
        eval_every=0,
    ),
    "rung": dict(
        steps=100,
        lr=3e-5,
        max_new_tokens=40,
        eval_items=105,
        test_items=209,
        device="cpu",
        lora_r=8,
        batch_size=8,
        m=4,
        eval_every=25,
        save_every=10,
    ),
    "paper": dict(
        steps=400, lr=2e-6, max_new_tokens=256, test_items=1000, device="auto", bf16=True
    ),
}
"""Settings shared by every run at each scale (the paper: 400 steps per stage, AdamW
2e-6 for Qwen3-1.7B, 8 questions x 4 rationales, bf16; the rationale budget is ours).
``small``: the real rung's first comparison, the 12-step rung (SmolLM2-135M-Instruct
taught basic-skills-arithmetic-verify, ``assets/checkpoints/smollm2-arith-verify``) on a
2-core CPU: its LoRA r = 8 adapter trained on, 2 questions x 4 rationales of at most 40
tokens per step, T fitted on 50 dev items and 150 test items, no dev evals during
training (its wall time: docs/performance.md; too small to test the paper:
docs/results.md, "Before the fair test"). ``rung``: the same
model at a budget that can speak, the rung's fair test (shipped in
``assets/results/basic-skills-arithmetic-verify-pairs``): 100 steps of 8 questions x 4
rationales per stage (the paper's batch, a quarter of its steps), every dev item (105)
for T and a dev curve every 25 steps, the whole test split (209), checkpoints every 10
steps (a run stopped midway resumes there); its learning rates are chosen on dev per
method (``ReproduceConfig.lr_grid``, :data:`RUNG_GRID`)."""

RUNG_GRID = (1e-5, 3e-5, 1e-4)
"""The learning rates the rung chooses from, per method (LoRA r = 8: the paper's 2e-6 is
for full fine-tuning; 3e-4, the ``small`` scale's, drifts from the anchor)."""

RUN_GIB: dict[str, dict[str, float]] = {"rung": {"rlcr": 14.0, "rft-kl": 9.5, "": 7.5}}
"""Memory a run takes at a scale where two at a time can exceed a machine's (GiB, keyed by
run name without ``-matched``; ``""``: any other run): the largest resident size read
with ``ps`` over the rung's tuning and fair test on the 2-core AMD EPYC, rounded up
(the measured sizes: docs/results.md; RLCR's reinforcement steps keep two forward passes
for the backward one). The pool starts a run only where it fits beside the runs
already training (:func:`_next_fitting`): on that machine's 23.5 GiB two RLCR runs, or
RLCR and RFT+KL, never train side by side. Scales not listed take what they need."""


@dataclass(frozen=True)
class ReproduceConfig:
    """Run (or reuse) every method and seed of the paper's comparison and write the report."""

    task: str = "verify"
    """verify, verify-mixed, verify-check, facts, aleatoric, or a task-item JSONL file (with
    .train/.dev/.test siblings)."""
    scale: Literal["tiny", "small", "rung", "paper"] = "tiny"
    """The settings every run shares (``reproduce.SCALES``): ``tiny``, the tiny world on a CPU;
    ``small``, the real rung in 12 steps per stage (the first, too small); ``rung``, the real
    rung at 100 steps of 8 x 4 (the fair test; most of a day on 2 cores); ``paper``, the
    paper's recipe, for a GPU."""
    seeds: tuple[int, ...] = (17, 23, 29)
    """One run of each method per seed; the report gives each metric's mean and sd over them."""
    out: Path = Path("runs/reproduce")
    """Where the runs go: ``OUT/<task>/seed-<seed>/<run>``, then the report in ``OUT/<task>``."""
    init: Path | None = None
    """Base model; default at tiny scale: assets/checkpoints/base-<task>; required at paper
    scale (a local HF model directory)."""
    steps: int | None = None
    """Steps per stage (default: the scale's)."""
    test_items: int | None = None
    """Test items per eval dump (default: the scale's)."""
    lr: float | None = None
    """AdamW learning rate of every run (default: the scale's)."""
    jobs: int = 2
    """Runs at a time (separate processes; one thread each on CPU)."""
    ace: float = 0.0
    """> 0: also run RLCD stage 2 with the ACE reward of this weight (``reinforce-ace``, a
    Table 2 fork from the same stage-1 checkpoint; ``estimators.ace_advantages``)."""
    lr_grid: tuple[float, ...] = ()
    """Choose each run's learning rate on dev from these (reproduce.tune): every run of the
    first seed once per value at ``tune_steps`` steps per stage, the value with the lowest
    dev Brier after temperature scaling kept (two-stage RLCD: one value for both stages,
    chosen by the two-stage run); empty: ``lr`` for every run."""
    tune_steps: int = 25
    """Steps per stage of each tuning run (matched baselines: twice this, as always)."""
    runs: tuple[str, ...] = ()
    """Only these runs (names as in the report: base, sft, rft, rft-kl, grpo, drgrpo, rlcr,
    calibrate, reinforce, readout-only, anchor-only, grpo-cont, grpo-calibrate, endtoend,
    mixture, and ``<name>-matched``; a run that starts from another's checkpoint needs that
    one too: reinforce and the forks calibrate, grpo-calibrate grpo); empty: all."""
    status: bool = False
    """Print where the reproduction in --out stands (each run's steps done, seconds per
    step, the training time left at that pace; reproduce.progress) and exit; runs nothing."""
    save_to: Path | None = None
    """Save every run of --out that has ended to this folder, without step checkpoints or
    weights but those that ship (reproduce.save_ended), and exit; runs nothing. On another
    machine, copy it back (cp -rn DIR/. OUT/TASK/) and the same command goes on from there."""
    memory_gib: float | None = None
    """Memory the runs training at a time may take together (GiB; each run's need at the
    scale: ``reproduce.RUN_GIB``); default: this machine's physical memory less 1 GiB."""


@dataclass(frozen=True)
class Job:
    """One run: a training config, or ``None`` for the base-model eval."""

    name: str
    seed: int
    out: Path
    train: TrainConfig | None
    settings: dict


def aleatoric(task: str) -> bool:
    """Whether ``task``'s items carry an outcome distribution ``q`` (Table 3)."""
    from rlcd_lab.tasks import load_task_items

    return load_task_items(task, "dev")[0].q is not None


def plan(cfg: ReproduceConfig, lrs: dict[str, float] | None = None) -> tuple[list[Job], list[Job]]:
    """The runs of the reproduction in two waves: from the base model, then from stage 1;
    each row of the method registry gives its runs (``methods.reproduction_runs``);
    ``lrs``: a learning rate per run name (:func:`tune`), others at ``cfg``'s.

    * Table 1 (OpenJev-RLCD sec. 5.1): the base model, SFT, RFT/STaR with and without the
      KL anchor, GRPO, RLCD stage 1 (``calibrate``) and two-stage RLCD (``reinforce`` from
      the stage-1 checkpoint); every one evaluated as single-query readouts after
      temperature scaling fitted on dev. Two-stage RLCD trains twice ``steps``; every
      baseline runs at ``steps`` and again at that matched budget (``<name>-matched``).
      ``drgrpo`` (Dr. GRPO: GRPO without the division by the group's reward s.d.) and
      ``grpo-calibrate`` (RLCD's stage 1 continued from GRPO's final checkpoint) separate
      the paper's ingredients. RLCR (tasks without ``q``) gives two rows per run: its
      readout (``rlcr``) and the confidence it states (``rlcr-stated``, :func:`stated_view`).
    * Table 2 (sec. 5.2): four continuations forked from the same stage-1 checkpoint with
      the same budget: ``reinforce``, ``readout-only`` (stage 1 continued), ``anchor-only``
      (the outcome reward removed: the score-function term gets the KL reward only) and
      ``grpo-cont`` (GRPO's correctness reward).
    * Table 4 (tasks without ``q``): the end-to-end objective with the KL anchor at
      score-function weights ``methods.SWEEP`` (``endtoend-c<weight>``) beside stage 1
      (weight 0); Figure 1 sets weight 1 without the anchor (``endtoend-nokl``: System-One
      collapse) beside weight 1 with it.
    * Table 3 (sec. 5.3, tasks whose items carry ``q``): SFT on direct answers, the
      per-rationale objective (``endtoend`` with KL), the mixture objective (``mixture``,
      lam = 1) and two-stage RLCD, with JSD to ``q`` of the single-query readout and of
      the mixture of :data:`MIXTURE_M` rationales.
    """
    from rlcd_lab.methods import GRPO_STAGE1

    init = cfg.init
    if init is None:
        if cfg.scale != "tiny":
            raise ValueError(f"--scale {cfg.scale} needs --init: a local HF model directory")
        init = ASSETS / "checkpoints" / f"base-{cfg.task}"
    base = dict(SCALES[cfg.scale])
    if cfg.steps is not None:
        base["steps"] = cfg.steps
    if cfg.test_items is not None:
        base["test_items"] = cfg.test_items
    if cfg.lr is not None:
        base["lr"] = cfg.lr
    table3 = aleatoric(cfg.task)
    first, second = [], []
    for seed in cfg.seeds:
        root = rundir.seed_dir(cfg.out / Path(cfg.task).stem, seed)
        stage1 = rundir.final_dir(root / "calibrate")
        kw = dict(base, task=cfg.task, seed=seed, init=Path(init))
        here = Reproduction(kw, stage1, table3, cfg.scale, cfg.ace, root)
        runs = reproduction_runs(here, steps=2 * base["steps"])
        for name, lr in (lrs or {}).items():
            if name in runs:
                runs[name] = replace(runs[name], lr=lr)
        if GRPO_STAGE1 in runs:  # stage 1 after outcome RL, at stage 1's learning rate
            runs[GRPO_STAGE1] = replace(runs[GRPO_STAGE1], lr=runs["calibrate"].lr)
        first.append(Job("base", seed, root / "base", None, kw))
        unknown = sorted(set(cfg.runs) - set(runs) - {"base"})
        if unknown:
            raise ValueError(f"unknown runs {unknown}; choose from {['base', *runs]}")
        finals = {rundir.final_dir(root / name) for name in runs}
        for name, tc in runs.items():
            job = Job(name, seed, root / name, replace(tc, out=root / name), kw)
            (second if tc.init in finals else first).append(job)
    if cfg.runs:
        first, second = ([j for j in w if j.name in cfg.runs] for w in (first, second))
        orphans = sorted({(j.train.init.parent.name, j.name) for j in second
                          if j.train.init.parent.name not in cfg.runs})  # fmt: skip
        if orphans:
            starts = "; ".join(f"{run} starts from {src}" for src, run in orphans)
            raise ValueError(f"--runs: {starts}; add {sorted({s for s, _ in orphans})}")
    return first, second


def other_config(job: Job) -> list[str]:
    """The settings in which the run already in ``job``'s folder differs from ``job``
    (``rundir.config_diff`` against the folder as it is now, steps included; the base
    model's ``done.json`` against its settings); empty when the folder holds no run yet."""
    if job.train is None:
        done = rundir.done_file(job.out)
        if not done.exists():
            return []
        old, new = json.loads(done.read_text()), json.loads(json.dumps(job.settings, default=str))
        return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if not rundir.config_file(job.out).exists():
        return []
    old = json.loads(rundir.config_file(job.out).read_text())
    return rundir.config_diff(old, job.train, run=job.out)


def _finished(job: Job) -> bool:
    """Whether ``job`` already ran to the end with the same config (raises if it ran with
    another one: that directory belongs to a different experiment)."""
    if not _ended(job):
        return False
    if diff := other_config(job):
        raise ValueError(f"{job.out} holds a finished run with another config (differs in {diff})")
    return True


def clash(job: Job) -> list[str]:
    """The settings that keep the run in ``job``'s folder from being ``job``'s: those of
    :func:`other_config`, but a run not yet ended may differ in ``steps`` (it trains on);
    empty when the folder is free or holds this job's run."""
    diff = other_config(job)
    return diff if _ended(job) else [k for k in diff if k != "steps"]


def check_folders(jobs: list[Job]) -> None:
    """Refuse (``ValueError``, one line naming every such folder and the settings that
    differ, :func:`clash`) when a folder of ``jobs`` holds a run with another config,
    finished or not, before anything is trained: such a run would stop the reproduction
    when its turn comes."""
    clashes = []
    for job in jobs:
        if diff := clash(job):
            what = "a finished" if _ended(job) else "a partial"
            clashes.append(f"{job.out} ({what} run, differs in {', '.join(diff)})")
    if clashes:
        raise ValueError(
            f"{len(clashes)} run folder(s) of this reproduction hold a run with another "
            f"config: {'; '.join(clashes)}; move them aside or choose another --out; nothing "
            "was trained"
        )


def check_reproduce_config(cfg: ReproduceConfig) -> None:
    """Reject settings the reproduction cannot use (``ValueError``, one line naming the
    option and the value), before any folder is read or written: ``--steps``,
    ``--tune-steps`` and ``--jobs`` >= 1, ``--test-items`` >= 0, at least one seed and
    no seed twice, ``--lr``, ``--memory-gib`` and each ``--lr-grid`` value finite and > 0,
    ``--ace`` finite and >= 0."""
    import math

    for name, low in (("steps", 1), ("tune_steps", 1), ("jobs", 1), ("test_items", 0)):
        value = getattr(cfg, name)
        if value is not None and value < low:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {low}, got {value}")
    if not cfg.seeds:
        raise ValueError("--seeds is empty: give at least one seed")
    if len(set(cfg.seeds)) != len(cfg.seeds):
        raise ValueError(f"--seeds names a seed twice: {' '.join(map(str, cfg.seeds))}")
    if any(seed < 0 for seed in cfg.seeds):
        raise ValueError(f"--seeds must be >= 0, got {' '.join(map(str, cfg.seeds))}")
    for name, values in (
        ("lr", [cfg.lr]),
        ("memory_gib", [cfg.memory_gib]),
        ("lr_grid", cfg.lr_grid),
    ):
        for value in values:
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"--{name.replace('_', '-')} must be finite and > 0, got {value}")
    if not (math.isfinite(cfg.ace) and cfg.ace >= 0):
        raise ValueError(f"--ace must be finite and >= 0, got {cfg.ace}")


def run_job(job: Job) -> str:
    """Run one job in this process (reusing or resuming it); returns its directory."""

    from rlcd_lab.evaluate import run_eval
    from rlcd_lab.lm.loading import load_checkpoint
    from rlcd_lab.methods.configs import TrainConfig
    from rlcd_lab.tasks import load_task_items
    from rlcd_lab.train import train
    from rlcd_lab.train.common import pick_device

    if _finished(job):
        if job.train is None and not rundir.has_eval(job.out, rundir.DIRECT):
            _direct_dump(job)  # a base run from before the dump existed: only it is added
        stated_view(job)
        return str(job.out)
    if job.train is not None:
        resume = rundir.config_file(job.out).exists()
        train(replace(job.train, resume=resume))
        model_dir = rundir.final_dir(job.out)
    else:
        model_dir = Path(job.settings["init"])
    task, seed = job.settings["task"], job.seed
    model, tok, meta = load_checkpoint(model_dir, pick_device(job.settings["device"]))
    kw = dict(
        max_new_tokens=job.settings["max_new_tokens"],
        seed=seed,
        marker=meta["marker"],
        sep=meta["sep"],
    )
    direct = job.train is not None and job.train.method == "sft"  # SFT answers directly
    if direct:
        kw["mode"] = "direct"
    test = load_task_items(task, "test")[: job.settings["test_items"]]
    evals = {}
    if job.train is None:
        n_dev = job.settings.get("eval_items", TrainConfig.eval_items)  # as a trained run's
        evals["dev"] = load_task_items(task, "dev")[:n_dev]
        evals["test"] = test
        evals[rundir.DIRECT] = test  # answered directly: what reasoning adds
    if test[0].q is not None and not direct:
        evals[rundir.mixture_name(MIXTURE_M)] = test
    for name, items in evals.items():
        m = MIXTURE_M if name.startswith(rundir.MIXTURE_PREFIX) else 1
        mode = {"mode": "direct"} if name == rundir.DIRECT else {}
        rows = run_eval(model, tok, items, m=m, **(kw | mode))
        atomic_write_jsonl(rundir.eval_file(job.out, name), rows)
    if job.train is None:
        settings = json.dumps(job.settings, default=str, indent=2)
        atomic_write_text(rundir.done_file(job.out), settings)
    stated_view(job)
    return str(job.out)


def _direct_dump(job: Job) -> None:
    """The direct dump (``rundir.DIRECT``, the base model's test items answered without a
    rationale, as ``run_job`` writes it) of a finished base run that lacks it."""
    from rlcd_lab.evaluate import run_eval
    from rlcd_lab.lm.loading import load_checkpoint
    from rlcd_lab.tasks import load_task_items
    from rlcd_lab.train.common import pick_device

    s = job.settings
    model, tok, meta = load_checkpoint(Path(s["init"]), pick_device(s["device"]))
    test = load_task_items(s["task"], "test")[: s["test_items"]]
    kw = dict(seed=job.seed, marker=meta["marker"], sep=meta["sep"], mode="direct")
    rows = run_eval(model, tok, test, m=1, max_new_tokens=s["max_new_tokens"], **kw)
    atomic_write_jsonl(rundir.eval_file(job.out, rundir.DIRECT), rows)


STATED = "-stated"
"""An RLCR run's stated-confidence view is ``rlcr-stated`` (``rlcr-stated-matched``)."""


def stated_view(job: Job) -> Path | None:
    """For an RLCR run ``<root>/rlcr[-matched]``, write ``<root>/rlcr-stated[-matched]``
    (:func:`write_stated_view`). Returns the view's directory (None for other runs)."""
    if job.train is None or job.train.method != "rlcr":
        return None
    matched = job.name.endswith(MATCHED)
    out = job.out.with_name(job.name.removesuffix(MATCHED) + STATED + (MATCHED if matched else ""))
    return write_stated_view(job.out, out)


def write_stated_view(run: Path, out: Path) -> Path:
    """The stated-confidence view of the RLCR run ``run`` in ``out``: its ``config.json``
    (the training budget) and its eval dumps with each row's stated distribution
    (:func:`rlcd_lab.reader.verbal.stated_logits` and :func:`~.stated_probs` of
    ``stated_answer`` and ``stated_confidence``) as ``logits`` and ``probs``, so the
    report scores the stated confidence as it scores every readout (same metrics, T
    fitted on dev). The
    confidence is read at float32 resolution: a digit's bin centre was stored as float32
    by the model's path and as float64 by the fallback (0.6499999761581421 vs 0.65), and
    the same statement must tie with itself. Returns ``out``."""
    import shutil

    import numpy as np
    import torch

    from rlcd_lab.reader.verbal import stated_logits, stated_probs

    for split in ("dev", "test"):
        if not rundir.has_eval(run, split):
            continue
        rows = []
        for r in read_jsonl(rundir.eval_file(run, split)):
            c = float(np.float32(r["stated_confidence"]))
            k = len(r["stated_logits"])
            z = stated_logits(torch.tensor([r["stated_answer"]]), torch.tensor([c]), k)[0]
            p = stated_probs(torch.tensor([r["stated_answer"]]), torch.tensor([c]), k)[0]
            rows.append(
                r
                | {
                    "logits": z.tolist(),
                    "probs": p.tolist(),
                    "readouts": [p.tolist()],
                    "mixture": p.tolist(),
                }
            )
        atomic_write_jsonl(rundir.eval_file(out, split), rows)
    shutil.copy2(rundir.config_file(run), rundir.config_file(out))
    return out


def timed_job(job: Job) -> dict:
    """``run_job`` and its cost: wall seconds, and from ``log.jsonl`` the seconds spent in
    training steps and, within them, in sampling rationales (the rest of the wall time is
    loading, dev evals every ``eval_every`` steps, the final eval dumps and checkpoints)."""
    reused = _finished(job)
    t0 = time.perf_counter()
    run_job(job)
    row = {"run": job.name, "seed": job.seed, "reused": reused, "wall_s": time.perf_counter() - t0}
    if job.train is not None and not reused:
        log = rundir.read_log(job.out)
        row["train_s"] = sum(r["time_step"] for r in log)
        row["sample_s"] = sum(r.get("time_sample") or 0.0 for r in log)
    return row


def _worker_start(one_thread: bool) -> None:
    """Each pool process's start: one torch thread where the scale runs on the CPU (the
    same numbers on any core count), and a watchdog that ends the process once the
    reproduction that started it is gone (killed, its terminal closed). Left alone, a
    worker would train its run to the end, holding the run's lock, with nobody to read
    the result; ended, the run goes on from its last checkpoint next time."""
    import threading

    if one_thread:
        import torch

        torch.set_num_threads(1)
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="reproduce-watchdog", daemon=True).start()


def seconds_left(jobs: list[Job]) -> dict[Path, float]:
    """Each job's training time left (keyed by its ``out``), read from the folders: its
    steps not yet logged, each at the median ``time_step`` logged by every job of the same
    run name in ``jobs`` (of every logged step where its name has none; one second where
    nothing is logged, so that the order is by steps); 0 once it has finished, and for the base
    model. Evaluations and loading are not counted."""
    import numpy as np

    jobs = list({job.out: job for job in jobs}.values())  # each run once
    logged = {job.out: rundir.read_log(job.out) if rundir.log_path(job.out).exists() else []
              for job in jobs}  # fmt: skip
    times: dict[str, list[float]] = {}
    for job in jobs:
        times.setdefault(job.name, []).extend(r["time_step"] for r in logged[job.out]
                                              if "time_step" in r)  # fmt: skip
    every = [t for ts in times.values() for t in ts]
    left = {}
    for job in jobs:
        pace = float(np.median(times[job.name] or every)) if every else 1.0
        todo = 0 if job.train is None or _ended(job) else job.train.steps - len(logged[job.out])
        left[job.out] = max(0, todo) * pace
    return left


def _ended(job: Job) -> bool:
    """Whether ``job``'s folder holds its end: the base model's ``done.json``, a training
    run's final checkpoint."""
    return rundir.done_file(job.out).exists() if job.train is None else rundir.has_final(job.out)


def _order(ready: list[Job], left: dict[Path, float]) -> list[Job]:
    """The pool's queue: stage 1 (``calibrate``, which the second wave waits for) first,
    then the longest time left first (:func:`seconds_left`); ties keep their order."""
    return sorted(ready, key=lambda job: (job.name != "calibrate", -left[job.out]))


def memory_needs(jobs: list[Job], scale: str) -> dict[Path, float]:
    """Each job's memory need in GiB (keyed by its ``out``) at ``scale``: :data:`RUN_GIB`
    by its run name without ``-matched``, else the scale's ``""`` entry; 0 at a scale not
    listed there."""
    table = RUN_GIB.get(scale, {})
    return {job.out: table.get(job.name.removesuffix("-matched"), table.get("", 0.0))
            for job in jobs}  # fmt: skip


def memory_budget(cfg: ReproduceConfig) -> float:
    """GiB the runs training at a time may take together: ``cfg.memory_gib``, else this
    machine's physical memory less 1 GiB (for the system and the reproduction's own
    process)."""
    if cfg.memory_gib is not None:
        return cfg.memory_gib
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30 - 1.0


def _next_fitting(
    ready: list[Job], running: list[Job], need: dict[Path, float], budget: float
) -> int | None:
    """Index in ``ready`` (the pool's queue) of the first job whose memory need fits
    ``budget`` beside the ``running`` jobs' (``need``: :func:`memory_needs`; a job not in it
    needs 0), None where none fits. With nothing running the first job starts whatever it
    needs: a run larger than the budget trains alone."""
    room = budget - sum(need.get(job.out, 0.0) for job in running)
    fits = (i for i, job in enumerate(ready) if not running or need.get(job.out, 0.0) <= room)
    return next(fits, None)


def _unlocked(job: Job, second: list[Job]) -> list[Job]:
    """The second-wave jobs that start from ``job``'s final checkpoint (plan() puts each
    seed's stage 1 in the first wave: what starts from it can run once it is done)."""
    return [j for j in second if j.train.init == rundir.final_dir(job.out)]


def _run_pool(
    pool: ProcessPoolExecutor,
    slots: int,
    first: list[Job],
    second: list[Job],
    left: dict[Path, float],
    need: dict[Path, float] | None = None,
    budget: float = float("inf"),
):
    """Yield ``timed_job`` rows as jobs finish, ``slots`` at a time. The pool is never idle
    while a job can run and fits in memory (``need``, ``budget``: :func:`_next_fitting`),
    and takes the longest first (:func:`_order`, timed from what the folders have logged,
    so that a resumed or tuned reproduction does not end with one long run alone); a
    seed's second-wave jobs join the queue as soon as its stage 1 is done; ``left``: each
    job's time left (:func:`seconds_left`). A job's results do not depend on the order."""
    ready, running, need = _order(first, left), {}, need or {}
    try:
        while ready or running:
            while len(running) < max(1, slots):
                i = _next_fitting(ready, list(running.values()), need, budget)
                if i is None:
                    break
                job = ready.pop(i)
                running[pool.submit(timed_job, job)] = job
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                job = running.pop(future)
                yield future.result()
                ready = _order(ready + _unlocked(job, second), left)
    finally:  # a failed job stops the reproduction: what has not started never does
        for future in running:
            future.cancel()


def makespan(
    first: list[Job],
    second: list[Job],
    slots: int,
    left: dict[Path, float],
    need: dict[Path, float] | None = None,
    budget: float = float("inf"),
) -> float:
    """Seconds until the last job ends when :func:`_run_pool` runs ``first`` and ``second``
    on ``slots`` processes within ``budget`` GiB (``need``: :func:`memory_needs`), each job
    taking ``left[job.out]`` seconds: the pool's order played out, so that a slot left idle
    at the end (one long run alone, or a run that does not fit beside the one training)
    and a stage 2 waiting for its stage 1 are counted."""
    import heapq
    from itertools import count

    ready, running, now, started = _order(first, left), [], 0.0, count()
    while ready or running:
        while len(running) < max(1, slots):
            i = _next_fitting(ready, [job for *_, job in running], need or {}, budget)
            if i is None:
                break
            job = ready.pop(i)
            heapq.heappush(running, (now + left[job.out], next(started), job))
        now, _, job = heapq.heappop(running)
        ready = _order(ready + _unlocked(job, second), left)
    return now


def tune_plan(cfg: ReproduceConfig) -> tuple[list[Job], list[Job]]:
    """The tuning runs of :func:`tune` in two waves: every run of ``cfg`` but the base (and
    ``grpo-calibrate``, which takes stage 1's learning rate) on the first seed, once per
    value of ``cfg.lr_grid``, at ``cfg.tune_steps`` steps per stage, without dev curves or
    test evaluation."""
    from rlcd_lab.methods import GRPO_STAGE1

    root = cfg.out / Path(cfg.task).stem / rundir.TUNE
    waves: tuple[list[Job], list[Job]] = ([], [])
    for value in cfg.lr_grid:
        sub = replace(cfg, seeds=cfg.seeds[:1], steps=cfg.tune_steps, lr=value,
                      out=root / f"lr-{value:g}", lr_grid=())  # fmt: skip
        for wave, jobs in zip(waves, plan(sub), strict=True):
            wave += [replace(j, train=replace(j.train, eval_every=0, test_items=0))
                     for j in jobs if j.train is not None and j.name != GRPO_STAGE1]  # fmt: skip
    return waves


def tune(cfg: ReproduceConfig, run: Callable[[list[Job], list[Job]], list[dict]]) -> dict:
    """Each run's learning rate from ``cfg.lr_grid``, chosen on dev with an equal budget per
    run: for every value, every run of ``cfg`` (not the base model) on the first seed at
    ``cfg.tune_steps`` steps per stage (the matched baselines' budget twice that, as
    always; reinforce from stage 1 at the same value), no test eval; the value whose run has
    the lowest dev Brier after temperature scaling (fitted on those dev items) is kept, the
    smaller value on a tie. Two-stage RLCD takes one value for both stages (``calibrate``
    and ``reinforce``), chosen by the two-stage run. ``run`` runs two waves of jobs.
    Returns (and writes to ``OUT/<task>/tune/choice.json``) ``{"grid", "steps", "seed",
    "dev_ts_brier": {run: {value: score}}, "lr": {run: value}}``."""
    root = cfg.out / Path(cfg.task).stem / rundir.TUNE
    scores: dict[str, dict[str, float]] = {}
    waves = tune_plan(cfg)
    run(*waves)
    for job in waves[0] + waves[1]:
        meta = rundir.final_dir(job.out) / rundir.META_FILE
        dev = json.loads(meta.read_text())["metrics"]["dev"]
        scores.setdefault(job.name, {})[f"{job.train.lr:g}"] = dev["ts_brier"]
    from rlcd_lab.reports.results import choose_lr

    choice = {"grid": list(cfg.lr_grid), "steps": cfg.tune_steps, "seed": cfg.seeds[0],
              "dev_ts_brier": scores, "lr": choose_lr(scores)}  # fmt: skip
    atomic_write_text(root / "choice.json", json.dumps(choice, indent=2))
    return choice


def progress(cfg: ReproduceConfig) -> dict:
    """Where the reproduction of ``cfg`` stands, read from its folder (nothing is run):
    ``{"runs": [...], "train_hours", "steps_left", "hours_left"}``, one row per run of the
    plan, the tuning runs first when ``cfg.lr_grid`` is set: ``{"run", "seed", "tuning"
    (the grid value, else None), "steps" (planned; 0 for the base), "done" (steps in its
    log), "state" ("finished", "partial" or "waiting", each but the last followed by
    :data:`OTHER` for a run with another config), "s_per_step"
    (median over its logged steps, else None), "train_s" (their sum)}``; ``train_hours``
    sums every run's ``train_s`` (what the training steps took so far, each in its own
    process); ``steps_left``: :func:`_steps_left` summed. ``hours_left``: the pool's order
    played out on ``cfg.jobs`` processes (:func:`makespan`) with each run's steps left at
    the median of the logged steps of its run name (:func:`seconds_left`): training steps
    only, evaluations not counted; None (unknown) while no step's time is logged. The
    settings are checked first (:func:`check_reproduce_config`)."""
    import numpy as np

    check_reproduce_config(cfg)
    choice = cfg.out / Path(cfg.task).stem / rundir.TUNE / "choice.json"
    lrs = json.loads(choice.read_text())["lr"] if choice.exists() else None
    tuning = [*sum(tune_plan(cfg), [])] if cfg.lr_grid else []
    planned = plan(cfg, lrs)
    jobs, rows = tuning + [*sum(planned, [])], []
    for job in jobs:
        log = rundir.read_log(job.out) if rundir.log_path(job.out).exists() else []
        steps = [r["time_step"] for r in log if "time_step" in r]
        ended, other = _ended(job), bool(clash(job))
        state = ("finished" if ended else "partial" if log else "waiting") + other * OTHER

        rows.append({
            "run": job.name, "seed": job.seed,
            "tuning": job.train.lr if job in tuning else None,
            "steps": 0 if job.train is None else job.train.steps, "done": len(log),
            "state": state,
            "s_per_step": float(np.median(steps)) if steps else None, "train_s": sum(steps),
        })  # fmt: skip
    left, need, budget = seconds_left(jobs), memory_needs(jobs, cfg.scale), memory_budget(cfg)
    waves = [tune_plan(cfg), planned] if cfg.lr_grid else [planned]  # tuning runs first
    paced = any(r["s_per_step"] is not None for r in rows)
    hours = sum(makespan(*w, cfg.jobs, left, need, budget) for w in waves) / 3600
    return {
        "runs": rows,
        "train_hours": sum(r["train_s"] for r in rows) / 3600,
        "steps_left": sum(_steps_left(r) for r in rows),
        "hours_left": hours if paced else None,
    }


OTHER = " with another config"
""":func:`progress`'s state of a run folder whose run is not the plan's (:func:`clash`; the
reproduction refuses it, :func:`check_folders`) ends in this: "finished with another
config", "partial with another config"."""


def _steps_left(row: dict) -> int:
    """A :func:`progress` row's training steps left: none once finished, all of them for a
    run with another config (it must be trained again), else those not logged."""
    if row["state"] == "finished":
        return 0
    return row["steps"] if row["state"].endswith(OTHER) else max(0, row["steps"] - row["done"])


def run_all(cfg: ReproduceConfig, progress: Callable[[str], None] | None = None) -> Path:
    """Run every job of ``plan(cfg)`` (``cfg.jobs`` processes at a time; with
    ``cfg.lr_grid``, after :func:`tune` chose each run's learning rate), then write the
    report; returns the report directory ``OUT/<task>``. The settings and every planned
    run's folder are checked before anything is trained (:func:`check_reproduce_config`,
    :func:`check_folders`: the tuning runs, and the runs of the comparison once their
    learning rates are known); the summary's ``warnings`` are those of the trained runs'
    final evaluations (:func:`run_warnings`). Runs are independent processes; on CPU each
    uses one thread, which also makes the numbers independent of the machine's core count.
    Besides the report (``summary.json``, ``report.md``, ``report.html`` with plotly.js
    beside ``OUT/<task>``, figure PNGs) it writes ``timing.json``: wall, training and
    sampling seconds per run."""
    check_reproduce_config(cfg)
    choice = cfg.out / Path(cfg.task).stem / rundir.TUNE / "choice.json"
    if not cfg.lr_grid or choice.exists():
        lrs = json.loads(choice.read_text())["lr"] if cfg.lr_grid else None
        check_folders([*sum(tune_plan(cfg), []), *sum(plan(cfg, lrs), [])])
    else:
        check_folders([*sum(tune_plan(cfg), [])])
    timing: list[dict] = []
    start = time.perf_counter()
    quiet = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}  # read at import
    saved = {k: os.environ.get(k) for k in quiet}
    os.environ.update(quiet)  # spawned workers inherit it: no interleaved progress bars
    try:
        tuned = [*sum(tune_plan(cfg), [])] if cfg.lr_grid else []
        one_thread = SCALES[cfg.scale]["device"] == "cpu"  # same numbers on any core count
        budget = memory_budget(cfg)
        with ProcessPoolExecutor(
            max(1, cfg.jobs),
            mp_context=get_context("spawn"),
            initializer=_worker_start,
            initargs=(one_thread,),
        ) as pool:

            def run(first: list[Job], second: list[Job]) -> list[dict]:
                rows = []  # each run's pace from every run logged so far, tuning runs too
                left = seconds_left(first + second + tuned)
                need = memory_needs(first + second, cfg.scale)
                for row in _run_pool(pool, cfg.jobs, first, second, left, need, budget):
                    rows.append(row)
                    if progress is not None:
                        progress(f"{row['run']} seed {row['seed']}: {row['wall_s']:.0f} s")
                return rows

            lrs = tune(cfg, run)["lr"] if cfg.lr_grid else None
            timing = run(*plan(cfg, lrs))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    out = cfg.out / Path(cfg.task).stem
    from rlcd_lab.math.paper import EPS, kind
    from rlcd_lab.reports.report import write_report
    from rlcd_lab.reports.results import summary_json

    # Cov@eps at the error budget the paper uses on this kind of task
    title = f"{cfg.task} ({cfg.scale})"
    summary = write_report(out, cfg.seeds, eps=EPS[kind(cfg.task)], title=title, task=cfg.task)
    summary["warnings"] = run_warnings(out)
    atomic_write_text(out / rundir.SUMMARY, summary_json(summary))
    total = {"wall_s": time.perf_counter() - start, "jobs": cfg.jobs, "runs": timing}
    atomic_write_text(out / "timing.json", json.dumps(total, indent=2))
    return out


def run_warnings(root: Path) -> list[str]:
    """The warnings of every trained run of the reproduction ``root`` (``OUT/<task>``,
    tuning runs too), each prefixed with the run's folder under ``root``
    (``seed-17/grpo: accuracy 0.500 is within ...``): those its final evaluation stored in
    ``final/rlcd.json`` (``metrics.warnings``, :func:`rlcd_lab.evaluate.eval_warnings`, as
    ``rlcd-lab train`` prints them)."""
    out = []
    for run in rundir.reproduction_folders(root):
        if rundir.has_final(run):
            meta = json.loads((rundir.final_dir(run) / rundir.META_FILE).read_text())
            for text in (meta.get("metrics") or {}).get("warnings") or ():
                out.append(f"{run.relative_to(root).as_posix()}: {text}")
    return out


SHIPPED_FILES = (
    "timing.json", rundir.SUMMARY, "report.md", "report.html", f"{rundir.TUNE}/choice.json"
)  # fmt: skip
"""A reproduction's own files that ``assets/results/<task>/`` ships. Not ``figures/``: its
PNGs are static copies of ``report.html``'s figures (``report.write_pngs``, rebuilt with
kaleido), left out to keep ``assets/`` lean."""


def _relocated(value: object, old: str, new: str) -> object:
    """``value`` (a parsed config) with every string path under ``old`` moved under ``new``."""
    if isinstance(value, dict):
        return {k: _relocated(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_relocated(v, old, new) for v in value]
    if isinstance(value, str) and (value == old or value.startswith(old + "/")):
        return new + value[len(old) :]
    return value


def _main_seed(run: Path, src: Path) -> bool:
    """Whether ``run`` is a run of the reproduction ``src``'s first seed (17), not a tuning run."""
    return run.parent.parent == src and run.parent.name == "seed-17"


def _copy_run(run: Path, to: Path, moved: tuple[str, str] | None = None) -> None:
    """Copy a run's ``config.json``, ``log.jsonl``, ``done.json`` and eval dumps (plain or
    packed) from ``run`` to ``to``; ``moved``: ``(old, new)``, the configs' paths under
    ``old`` rewritten under ``new`` (:func:`_relocated`)."""
    import shutil

    for name in (rundir.CONFIG, rundir.LOG, rundir.DONE):
        file = jsonl_path(run / name)
        if file.exists():
            to.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, to / file.name)
            if moved is not None and name != rundir.LOG:
                config = _relocated(json.loads(file.read_text()), *moved)
                atomic_write_text(to / file.name, json.dumps(config, indent=2))
    for dump in map(jsonl_path, rundir.eval_files(run)):
        rundir.eval_dir(to).mkdir(parents=True, exist_ok=True)
        shutil.copy2(dump, rundir.eval_dir(to) / dump.name)


def _copy_weights(run: Path, to: Path) -> None:
    """Copy ``run/final`` to ``to/final``: an adapter without its tokenizer files (its
    base's) and with its ``checksums.json`` rewritten over what is left."""
    import shutil

    from rlcd_lab.lm.checkpoint import TOKENIZER_FILES, write_checksums

    final = rundir.final_dir(to)
    shutil.copytree(rundir.final_dir(run), final)
    if (final / "adapter_config.json").exists():
        for name in TOKENIZER_FILES:
            (final / name).unlink(missing_ok=True)
        write_checksums(final)


def save_ended(src: Path, dst: Path, weights: tuple[str, ...] = ("reinforce",)) -> list[Path]:
    """Save what a reproduction needs to go on on another machine: every run in ``src``
    (``OUT/<task>``, tuning runs too) that has ended, copied to ``dst``, which it replaces
    whole. Per run ``config.json``, ``log.jsonl``, ``done.json``, the eval dumps and
    ``final/rlcd.json`` (what marks it ended, with its dev metrics); weights only where
    :func:`ship` ships them (the seed-17 runs named in ``weights``, without their tokenizer
    files); no step checkpoints; JSONL packed (the same bytes from save to save). Left out:
    a run still training (it resumes from its step checkpoints on the machine that ran it)
    and a stage 1 whose stage 2 has not ended (that stage 2 starts from its weights, which
    are not saved: elsewhere both run again), so that no weights enter the save folder that
    do not ship. Copied back into ``src`` (``cp -rn DST/. SRC/``) on a fresh machine, the
    same command reuses every saved run and trains the rest; ``tune/choice.json`` is saved
    too. Refuses (ValueError, ``dst`` untouched) when ``src`` is not a folder, or when
    ``dst`` holds a run that has not ended in ``src`` (say, saved from another machine and
    not yet copied back): a save never loses a run. Returns the saved runs, sorted."""
    import shutil

    src, dst = Path(src), Path(dst)
    if not src.is_dir():
        raise ValueError(f"{src}: no reproduction there (check --out and --task)")
    ended = [
        run
        for run in rundir.reproduction_folders(src)
        if rundir.has_final(run) or rundir.done_file(run).exists()
    ]
    lost = sorted(
        {r.relative_to(dst) for r in rundir.reproduction_folders(dst)}
        - {r.relative_to(src) for r in ended}
    )
    waited_on = {run for run in ended if run.name == "calibrate"
                 and not rundir.has_final(run.with_name("reinforce"))}  # fmt: skip
    if lost:
        names = ", ".join(map(str, lost[:3])) + (" ..." if len(lost) > 3 else "")
        raise ValueError(
            f"{dst} holds {len(lost)} runs that have not ended in {src} ({names}): "
            f"copy them back first (cp -rn {dst}/. {src}/); nothing saved"
        )
    saved = []
    with atomic_dir(dst) as tmp:
        for run in sorted(set(ended) - waited_on):
            to = tmp / run.relative_to(src)
            _copy_run(run, to)
            if _main_seed(run, src) and run.name in weights:
                _copy_weights(run, to)
            elif rundir.has_final(run):
                rundir.final_dir(to).mkdir(parents=True)
                shutil.copy2(rundir.final_dir(run) / rundir.META_FILE, rundir.final_dir(to))
            saved.append(run)
        choice = src / rundir.TUNE / "choice.json"
        if choice.exists():
            (tmp / rundir.TUNE).mkdir(exist_ok=True)
            shutil.copy2(choice, tmp / rundir.TUNE / "choice.json")
        pack(tmp)
    return saved


def ship(src: Path, dst: Path, weights: tuple[str, ...] = (), out: str | None = None) -> None:
    """Copy what ``assets/results`` ships of the reproduction in ``src`` (``OUT/<task>``)
    to ``dst``, replacing it: per run ``config.json``, ``log.jsonl``, ``done.json`` and the
    eval dumps ``eval/*.jsonl``; ``final/`` only for the seed-17 runs named in
    ``weights`` (an adapter without its tokenizer files, which are its base's, and with
    its ``checksums.json`` rewritten); the same of the tuning runs (``tune/``, no
    weights); then ``SHIPPED_FILES``. The JSONL files are shipped packed (``.jsonl.xz``,
    :func:`rlcd_lab.files.io.pack`); ``src``'s may be either. With ``out`` (the documented
    ``--out``, e.g. ``runs/rung``) the configs' paths under ``src``'s OUT folder name it
    instead, so that no directory of the machine that ran it is shipped."""
    import shutil

    src, dst = Path(src), Path(dst)
    shutil.rmtree(dst, ignore_errors=True)
    for run in rundir.reproduction_folders(src):
        to = dst / run.relative_to(src)
        _copy_run(run, to, None if out is None else (str(src.parent), out))
        if _main_seed(run, src) and run.name in weights:
            _copy_weights(run, to)
    for name in SHIPPED_FILES:
        if (src / name).exists():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / name, dst / name)
    pack(dst)
