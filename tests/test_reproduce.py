"""rlcd-lab reproduce: the plan of runs, reuse/resume, and the report's numbers."""

from __future__ import annotations

import json
import lzma
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rlcd_lab import metrics
from rlcd_lab.files.io import atomic_write_jsonl, read_jsonl
from rlcd_lab.math import stats
from rlcd_lab.reports.report import write_report
from rlcd_lab.reports.results import FORKS, rounded, summarize_runs
from rlcd_lab.reproduce import SCALES, ReproduceConfig, plan, run_job, timed_job


def by_name(wave):
    return {(j.name, j.seed): j for j in wave}


def test_plan_verify_has_table1_then_forks_from_stage1(tmp_path):
    first, second = plan(ReproduceConfig(seeds=(3, 4), out=tmp_path, steps=7))
    a, b = by_name(first), by_name(second)
    baselines = {"sft", "rft", "rft-kl", "grpo", "drgrpo", "rlcr"}
    matched = {f"{n}-matched" for n in baselines}
    sweep = {"endtoend-c0.1": 0.1, "endtoend-c0.3": 0.3, "endtoend-c1": 1.0}  # Table 4
    nokl = {"endtoend-nokl"}  # Figure 1: weight 1 without the KL anchor
    assert {n for n, _ in a} == {"base", "calibrate"} | baselines | matched | set(sweep) | nokl
    # ACE only with --ace; grpo-calibrate after GRPO
    assert {n for n, _ in b} == set(FORKS) - {"reinforce-ace"} | {"grpo-calibrate"}
    for seed in (3, 4):
        stage1 = tmp_path / "verify" / f"seed-{seed}" / "calibrate" / "final"
        assert all(b[(f, seed)].train.init == stage1 for f in FORKS if f != "reinforce-ace")
        assert a[("calibrate", seed)].train.sf_weight == 0.0
        assert a[("rft", seed)].train.beta == 0.0 and a[("rft-kl", seed)].train.beta == 0.04
        for name, c in sweep.items():
            e2e = a[(name, seed)].train
            assert (e2e.method, e2e.sf_weight, e2e.beta, e2e.init) == (
                "endtoend",
                c,
                0.04,
                a[("calibrate", seed)].train.init,
            )
        collapse, anchored = a[("endtoend-nokl", seed)].train, a[("endtoend-c1", seed)].train
        assert replace(collapse, beta=0.04, out=anchored.out) == anchored
        rl, anchor = b[("reinforce", seed)].train, b[("anchor-only", seed)].train
        # anchor-only: RLCD-RL with the outcome reward removed (nothing else)
        assert (rl.sf_weight, rl.beta, rl.outcome_reward) == (0.3, 0.04, True)
        assert replace(anchor, outcome_reward=True, out=rl.out) == rl
        assert b[("readout-only", seed)].train.method == "calibrate"
        assert b[("grpo-cont", seed)].train.method == "grpo"
        # every run sees the same stream; budget: 7 steps per stage; the matched baselines
        # get two-stage RLCD's 14 and differ from their 7-step twins in nothing else
        for job in [*first, *second]:
            if job.seed == seed and job.train is not None:
                steps = 14 if job.name in matched else 7
                assert (job.train.seed, job.train.steps, job.train.task) == (seed, steps, "verify")
                assert job.train.out == job.out
        for n in baselines:
            twin = a[(n, seed)].train
            assert replace(a[(f"{n}-matched", seed)].train, steps=7, out=twin.out) == twin


def test_lr_overrides_the_scales_for_every_run(tmp_path):
    first, second = plan(ReproduceConfig(seeds=(3,), out=tmp_path, steps=2, lr=5e-5))
    trained = [j.train for j in [*first, *second] if j.train is not None]
    assert trained and all(t.lr == 5e-5 for t in trained)
    default = plan(ReproduceConfig(seeds=(3,), out=tmp_path, steps=2))[0]
    assert {j.train.lr for j in default if j.train is not None} == {SCALES["tiny"]["lr"]}


def test_plan_with_ace_adds_a_stage2_fork_that_differs_only_in_ace(tmp_path):
    first, second = plan(ReproduceConfig(seeds=(3,), out=tmp_path, steps=7, ace=0.5))
    b = by_name(second)
    rl, ace = b[("reinforce", 3)].train, b[("reinforce-ace", 3)].train
    assert ace.ace == 0.5 and replace(ace, ace=0.0, out=rl.out) == rl
    assert {n for n, _ in b} == set(FORKS) | {"grpo-calibrate"}


def test_plan_aleatoric_is_table3_and_paper_scale_needs_a_model(tmp_path):
    first, second = plan(ReproduceConfig(task="aleatoric", seeds=(1,), out=tmp_path))
    names = sorted(j.name for j in first + second)
    table3 = ["base", "sft", "calibrate", "endtoend", "mixture", "reinforce"]
    ingredients = ["grpo", "drgrpo", "grpo-calibrate"]  # on every task
    matched = ["sft-matched", "endtoend-matched", "mixture-matched", "grpo-matched",
               "drgrpo-matched"]  # fmt: skip
    assert names == sorted(table3 + ingredients + matched)
    e2e = by_name(first)[("endtoend", 1)].train
    assert (e2e.sf_weight, e2e.beta) == (1.0, 0.04)
    assert by_name(first)[("mixture", 1)].train.lam == 1.0
    with pytest.raises(ValueError, match="--init"):
        plan(ReproduceConfig(scale="paper", out=tmp_path))
    first, second = plan(ReproduceConfig(scale="paper", init=tmp_path, out=tmp_path, seeds=(1,)))
    trained = [j for j in first + second if j.train is not None]
    for j in trained:
        steps = 800 if j.name.endswith("-matched") else 400
        assert (j.train.lr, j.train.steps, j.train.bf16, j.train.device) == (
            2e-6,
            steps,
            True,
            "auto",
        )


@pytest.mark.parametrize("task", ["verify", "aleatoric"])
def test_plan_separates_the_ingredients_at_matched_budgets(tmp_path, task):
    """Dr. GRPO is GRPO with the group-mean advantage and nothing else changed, at 7 steps
    and RLCD's 14; grpo-calibrate is RLCD's stage 1, changed only in starting from GRPO's
    final checkpoint, after it (second wave): GRPO's 7 steps then its own 7 are two-stage
    RLCD's calibrate 7 then reinforce 7."""
    first, second = plan(ReproduceConfig(task=task, seeds=(3,), out=tmp_path, steps=7))
    a, b = by_name(first), by_name(second)
    root = tmp_path / task / "seed-3"
    for name in ("", "-matched"):
        grpo, dr = a[(f"grpo{name}", 3)].train, a[(f"drgrpo{name}", 3)].train
        assert (grpo.advantage, dr.advantage, dr.steps) == (
            "group-std",
            "group-mean",
            len(name) and 14 or 7,
        )
        assert replace(dr, advantage="group-std", out=grpo.out) == grpo
    cal, after = a[("calibrate", 3)].train, b[("grpo-calibrate", 3)].train
    assert after.init == root / "grpo" / "final" and ("grpo-calibrate", 3) not in a
    assert replace(after, init=cal.init, out=cal.out) == cal
    two_stage = cal.steps + b[("reinforce", 3)].train.steps
    assert a[("grpo", 3)].train.steps + after.steps == two_stage == 14
    # --runs: grpo-calibrate needs grpo, as reinforce needs calibrate
    with pytest.raises(
        ValueError, match=r"^--runs: grpo-calibrate starts from grpo; add \['grpo'\]$"
    ):
        plan(
            ReproduceConfig(
                task=task, seeds=(3,), out=tmp_path, runs=("drgrpo-matched", "grpo-calibrate")
            )
        )
    runs = ("grpo", "drgrpo-matched", "grpo-calibrate")
    first, second = plan(ReproduceConfig(task=task, seeds=(3,), out=tmp_path, runs=runs))
    assert [j.name for j in first] == ["grpo", "drgrpo-matched"]
    assert [j.name for j in second] == ["grpo-calibrate"]


def test_ingredient_runs_train_end_to_end_through_the_reproduction(tmp_path, tiny_base):
    """Two steps each: Dr. GRPO at the matched budget, GRPO, then stage 1 from GRPO's final
    checkpoint, which continues GRPO's question stream (steps 2 and 3)."""
    cfg = ReproduceConfig(seeds=(2,), out=tmp_path, init=tiny_base, steps=1, test_items=3,
                          runs=("grpo", "drgrpo-matched", "grpo-calibrate"))  # fmt: skip
    first, second = plan(cfg)
    small = dict(eval_items=4, batch_size=2, m=3, max_new_tokens=5, eval_every=0)
    jobs = by_name([replace(j, train=replace(j.train, **small)) for j in first + second])
    for name in ("grpo", "drgrpo-matched", "grpo-calibrate"):
        run_job(jobs[(name, 2)])
    for name, method, steps in (("drgrpo-matched", "grpo", 2), ("grpo-calibrate", "calibrate", 1)):
        out = jobs[(name, 2)].out
        assert [r["step"] for r in read_jsonl(out / "log.jsonl")] == list(range(steps))
        meta = json.loads((out / "final" / "rlcd.json").read_text())
        assert meta["method"] == method and len(read_jsonl(out / "eval" / "test.jsonl")) == 3
    meta = json.loads((jobs[("grpo-calibrate", 2)].out / "final" / "rlcd.json").read_text())
    assert (meta["stream_start"], meta["stream_end"]) == (1, 2)


def test_pool_runs_stage1_first_longest_next_and_forks_after_their_stage1(tmp_path, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from rlcd_lab import reproduce

    first, second = plan(ReproduceConfig(seeds=(3, 4), out=tmp_path, steps=7))
    ran = []
    monkeypatch.setattr(reproduce, "timed_job", lambda job: ran.append(job) or job.name)
    left = reproduce.seconds_left(first + second)  # nothing logged: 1 s a step
    assert left == {j.out: j.train.steps if j.train else 0 for j in first + second}
    with ThreadPoolExecutor(1) as pool:  # one worker: the order of the queue is the order run
        rows = list(reproduce._run_pool(pool, 1, first, second, left))
    assert sorted(map(id, ran)) == sorted(map(id, first + second)) and len(rows) == len(ran)
    assert [(j.name, j.seed) for j in ran[:2]] == [("calibrate", 3), ("calibrate", 4)]
    # then every other run, stage 2 and the forks included, longest first; the base last
    steps = [left[j.out] for j in ran[2:]]
    assert steps == sorted(steps, reverse=True) and steps[0] == 14 and ran[-1].name == "base"


_ORPHAN = """
import os, time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from rlcd_lab.reproduce import _worker_start
if __name__ == "__main__":
    pool = ProcessPoolExecutor(1, mp_context=get_context("spawn"), initializer=_worker_start,
                               initargs=(False,))
    print(pool.submit(os.getpid).result(), flush=True)
    pool.submit(time.sleep, 600)  # a run that would train for ten minutes
    time.sleep(600)
"""


def test_a_killed_reproduction_leaves_no_worker_training(tmp_path):
    """The reproduction's process killed (SIGKILL: nothing of it runs again), its pool
    worker, busy with a ten-minute job, ends within seconds instead of training on."""
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "orphan.py"
    script.write_text(_ORPHAN)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        worker = int(parent.stdout.readline())
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()

    def alive(pid: int) -> bool:  # a zombie left to a parent that does not reap is gone too
        try:
            return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
        except (FileNotFoundError, ProcessLookupError):
            return False

    deadline = time.monotonic() + 120  # the watchdog looks every second; slack for a busy CPU
    while alive(worker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(worker), f"worker {worker} still running after its reproduction was killed"


def test_the_pool_takes_the_slowest_run_first_and_its_time_is_played_out(tmp_path, monkeypatch):
    """With paces logged (GRPO 10 s a step, SFT 1 s), the queue orders by time left, not by
    steps, and ``makespan`` plays the pool out. By hand, 2 processes: stage 1 and the
    reinforce run have no steps logged and take the median of every logged step (5.5 s)
    x 4 = 22 s; GRPO 7 steps left x 10 = 70 s, SFT 7 x 1 = 7 s. Stage 1 and GRPO start at
    0; at 22 stage 2 (unlocked) runs to 44, then SFT to 51; GRPO ends last, at 70. Ordered
    by steps (SFT first, as the plan lists it) GRPO would start at 7 and end at 77."""
    from concurrent.futures import ThreadPoolExecutor

    from rlcd_lab import reproduce

    runs = ("calibrate", "reinforce", "sft-matched", "grpo-matched")
    first, second = plan(ReproduceConfig(seeds=(5,), out=tmp_path, steps=4, runs=runs))
    job = {j.name: j for j in first + second}
    atomic_write_jsonl(job["sft-matched"].out / "log.jsonl", [{"step": 0, "time_step": 1.0}])
    atomic_write_jsonl(job["grpo-matched"].out / "log.jsonl", [{"step": 0, "time_step": 10.0}])
    left = reproduce.seconds_left(first + second)
    assert {n: left[j.out] for n, j in job.items()} == {
        "calibrate": 22.0, "reinforce": 22.0, "sft-matched": 7.0, "grpo-matched": 70.0
    }  # fmt: skip
    assert reproduce.makespan(first, second, 2, left) == 70.0
    assert reproduce.makespan(first, second, 1, left) == 22 + 22 + 7 + 70  # one at a time
    ran = []
    monkeypatch.setattr(reproduce, "timed_job", lambda job: ran.append(job.name))
    with ThreadPoolExecutor(1) as pool:
        list(reproduce._run_pool(pool, 1, first, second, left))
    assert ran == ["calibrate", "grpo-matched", "reinforce", "sft-matched"]


RUNG_SECS = {"calibrate": 10, "reinforce": 10, "rlcr-matched": 40, "rft-kl-matched": 30,
             "grpo-matched": 20}  # fmt: skip
"""Made-up times left (s) of a rung plan's runs, for the memory tests."""


def _rung_jobs(tmp_path):
    """A one-seed rung plan of RUNG_SECS's runs: its waves, its jobs by name, their times."""
    cfg = ReproduceConfig(seeds=(5,), out=tmp_path, scale="rung", init=tmp_path / "b",
                          runs=tuple(RUNG_SECS))  # fmt: skip
    first, second = plan(cfg)
    job = {j.name: j for j in first + second}
    return first, second, job, {j.out: float(RUNG_SECS[n]) for n, j in job.items()}


def test_runs_that_do_not_fit_in_memory_side_by_side_take_turns(tmp_path):
    """The rung's memory needs (``RUN_GIB``: RLCR 14 GiB, RFT+KL 9.5, the others 7.5) on a
    23.5 GiB machine (budget 22.5): RLCR trains beside stage 1, GRPO or stage 2, never
    beside RFT+KL. By hand, 2 processes, calibrate 10 s, reinforce 10, RLCR 40, RFT+KL 30,
    GRPO 20: stage 1 and RLCR start at 0 (21.5 GiB); at 10 RFT+KL is next in the queue but
    does not fit beside RLCR (23.5), GRPO does (to 30); at 30 stage 2 (to 40); at 40 RLCR
    ends and RFT+KL runs to 70. Without the budget RFT+KL starts at 10 and the last run
    ends at 60; on too little memory for any two, one at a time: the times summed."""
    from rlcd_lab import reproduce

    first, second, job, left = _rung_jobs(tmp_path)
    need = reproduce.memory_needs(first + second, "rung")
    assert {n: need[j.out] for n, j in job.items()} == {
        "calibrate": 7.5, "reinforce": 7.5, "rlcr-matched": 14.0, "rft-kl-matched": 9.5,
        "grpo-matched": 7.5,
    }  # fmt: skip
    assert set(reproduce.memory_needs(first, "tiny").values()) == {0.0}  # no limit there
    assert reproduce.makespan(first, second, 2, left, need, 22.5) == 70.0
    assert reproduce.makespan(first, second, 2, left, need, 100.0) == 60.0
    assert reproduce.makespan(first, second, 2, left) == 60.0  # no needs given: no limit
    assert reproduce.makespan(first, second, 2, left, need, 5.0) == sum(RUNG_SECS.values())
    # the pool's rule: the first job in the queue that fits beside the running ones
    queue = [job["rft-kl-matched"], job["grpo-matched"]]
    assert reproduce._next_fitting(queue, [job["rlcr-matched"]], need, 22.5) == 1
    assert reproduce._next_fitting(queue, [job["calibrate"]], need, 22.5) == 0
    assert reproduce._next_fitting(queue[:1], [job["rlcr-matched"]], need, 22.5) is None
    assert reproduce._next_fitting(queue, [], need, 1.0) == 0  # alone, whatever it needs


def test_the_pool_never_trains_side_by_side_what_does_not_fit(tmp_path, monkeypatch):
    """_run_pool with 2 threads and the 22.5 GiB budget, each job sleeping a hundredth of
    its time of the test above: every job runs once, and no two jobs ever train at the
    same moment whose needs exceed the budget (without the rule RFT+KL would start beside
    RLCR when stage 1 ends)."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from rlcd_lab import reproduce

    first, second, job, left = _rung_jobs(tmp_path)
    need = reproduce.memory_needs(first + second, "rung")
    now, most, lock, ran = [], [], threading.Lock(), []

    def fake(j):
        with lock:
            now.append(j)
            most.append(sum(need[x.out] for x in now))
            ran.append(j.name)
        time.sleep(left[j.out] / 100)
        with lock:
            now.remove(j)

    monkeypatch.setattr(reproduce, "timed_job", fake)
    with ThreadPoolExecutor(2) as pool:
        list(reproduce._run_pool(pool, 2, first, second, left, need, 22.5))
    assert sorted(ran) == sorted(job) and max(most) <= 22.5


def test_tune_picks_each_runs_lr_on_dev_with_equal_budgets(tmp_path):
    """The tuning runs: every run of the first seed once per grid value, at tune_steps per
    stage (matched twice that), reinforce from stage 1 at the same value, no test eval; the
    value of the lowest dev Brier after TS is kept (the smaller on a tie), two-stage RLCD's
    for both stages; then the main plan trains each run at its value."""
    from rlcd_lab import reproduce
    from rlcd_lab.files import rundir

    cfg = ReproduceConfig(seeds=(5, 6), out=tmp_path, scale="rung", lr_grid=(1e-5, 3e-5, 1e-4),
                          tune_steps=3, runs=("calibrate", "reinforce", "grpo-matched"),
                          init=tmp_path / "base")  # fmt: skip
    # made-up dev scores: grpo best at 3e-5; calibrate alone best at 1e-4, but the two-stage
    # run best at 1e-5 and 3e-5 tied
    score = {"grpo-matched": {1e-5: 0.3, 3e-5: 0.2, 1e-4: 0.4},
             "calibrate": {1e-5: 0.3, 3e-5: 0.3, 1e-4: 0.1},
             "reinforce": {1e-5: 0.25, 3e-5: 0.25, 1e-4: 0.3}}  # fmt: skip
    seen = []

    def run(first, second):
        seen.extend(first + second)
        for job in first + second:
            meta = rundir.final_dir(job.out) / rundir.META_FILE
            meta.parent.mkdir(parents=True)
            dev = {"ts_brier": score[job.name][job.train.lr]}
            meta.write_text(json.dumps({"metrics": {"dev": dev}}))
        return []

    choice = reproduce.tune(cfg, run)
    assert len(seen) == 9 and {j.seed for j in seen} == {5}
    for job in seen:
        assert job.train.steps == (6 if job.name == "grpo-matched" else 3)
        assert (job.train.eval_every, job.train.test_items) == (0, 0)
        if job.name == "reinforce":
            tuned = tmp_path / cfg.task / "tune" / f"lr-{job.train.lr:g}"
            stage1 = tuned / cfg.task / "seed-5" / "calibrate"
            assert job.train.init == rundir.final_dir(stage1)
    assert choice["lr"] == {"grpo-matched": 3e-5, "reinforce": 1e-5, "calibrate": 1e-5}
    saved = json.loads((tmp_path / cfg.task / "tune" / "choice.json").read_text())
    assert saved == json.loads(json.dumps(choice))
    first, second = plan(cfg, choice["lr"])
    for job in first + second:
        if job.train is not None:
            assert job.train.lr == choice["lr"][job.name] and job.train.steps in (100, 200)


def test_jobs_reuse_finished_runs_resume_partial_ones_and_refuse_other_configs(tmp_path, tiny_base):
    cfg = ReproduceConfig(seeds=(2,), out=tmp_path, init=tiny_base, steps=2, test_items=6)
    first, _ = plan(cfg)
    jobs = by_name(first)
    base, cal = jobs[("base", 2)], jobs[("calibrate", 2)]
    run_job(base)
    assert len(read_jsonl(base.out / "eval" / "test.jsonl")) == 6
    assert len(read_jsonl(base.out / "eval" / "dev.jsonl")) == 200
    # the base also answers the test items directly: no rationale, the direct readout
    direct = read_jsonl(base.out / "eval" / "test-direct.jsonl")
    assert [r["uid"] for r in direct] == [
        r["uid"] for r in read_jsonl(base.out / "eval" / "test.jsonl")
    ]
    assert all(r["rationales"] == [""] for r in direct), direct[0]["rationales"]
    (base.out / "eval" / "test-direct.jsonl").unlink()  # a base run from before the dump
    run_job(base)  # finished: reused, only the direct dump added
    assert read_jsonl(base.out / "eval" / "test-direct.jsonl") == direct
    ran = timed_job(cal)
    assert not ran["reused"] and 0 < ran["sample_s"] < ran["train_s"] < ran["wall_s"]
    dump = (cal.out / "eval" / "test.jsonl").read_text()
    mtime = (cal.out / "final" / "rlcd.json").stat().st_mtime_ns
    assert timed_job(cal)["reused"]  # finished with the same config: reused, nothing rewritten
    assert (cal.out / "final" / "rlcd.json").stat().st_mtime_ns == mtime
    with pytest.raises(ValueError, match="another config"):
        run_job(replace(cal, train=replace(cal.train, lr=3e-4)))
    # interrupted after its last checkpoint: the rerun resumes and ends with the same dump
    shutil.rmtree(cal.out / "final")
    (cal.out / "eval" / "test.jsonl").unlink()
    run_job(cal)
    assert (cal.out / "eval" / "test.jsonl").read_text() == dump
    assert [r["step"] for r in read_jsonl(cal.out / "log.jsonl")] == [0, 1]


def fake_run(root: Path, seed: int, name: str, test_logits, dev_logits, labels, dev_labels):
    """A run dir holding only eval dumps (what the report reads)."""
    for split, logits, ys in (("test", test_logits, labels), ("dev", dev_logits, dev_labels)):
        rows = [
            {"label": int(y), "q": None, "logits": list(map(float, z)), "lengths": [5],
             "forced": [False], "mixture": None}
            for z, y in zip(logits, ys, strict=True)
        ]  # fmt: skip
        atomic_write_jsonl(root / f"seed-{seed}" / name / "eval" / f"{split}.jsonl", rows)


def test_summary_numbers_match_metrics_and_stats_on_fabricated_dumps(tmp_path):
    rng = np.random.default_rng(0)
    n, seeds = 40, (1, 2)
    labels, dev_labels = rng.integers(0, 2, n), rng.integers(0, 2, 30)
    logits = {}
    for seed in seeds:
        for name in ("calibrate", "reinforce", "grpo", "readout-only"):
            t, d = rng.normal(0, 3, (n, 2)), rng.normal(0, 3, (30, 2))
            logits[seed, name] = t, d
            fake_run(tmp_path, seed, name, t, d, labels, dev_labels)
    summary = write_report(tmp_path, seeds, eps=0.1, title="fake", task="verify")

    def ts_probs(seed, name):
        t, d = logits[seed, name]
        return metrics.apply_temperature(t, metrics.fit_temperature(d, dev_labels))

    for name in ("reinforce", "grpo"):
        briers = [metrics.brier(ts_probs(s, name), labels) for s in seeds]
        got = summary["runs"][name]["brier"]
        # the summary keeps 10 significant digits (results.SUMMARY_DIGITS)
        assert got["mean"] == pytest.approx(
            np.mean(briers), rel=1e-9
        )  # summaries keep 10 significant digits
        assert got["sd"] == pytest.approx(np.std(briers, ddof=1), rel=1e-9)
    # paired Brier: per-item values averaged over seeds, then the mean difference
    item = {
        name: np.mean([((ts_probs(s, name) - np.eye(2)[labels]) ** 2).sum(1) for s in seeds], 0)
        for name in ("reinforce", "grpo")
    }
    res = summary["paired"]["reinforce - grpo"]["brier"]
    assert res["diff"] == pytest.approx(float((item["reinforce"] - item["grpo"]).mean()))
    assert res["p"] == pytest.approx(
        stats.sign_flip_test(item["reinforce"], item["grpo"], n=res["n_boot"]), rel=1e-9
    )
    # AURC: per-seed AURC averaged over seeds, items resampled jointly across seeds
    conf = {
        name: np.array([ts_probs(s, name).max(1) for s in seeds]) for name in ("reinforce", "grpo")
    }
    ok = {
        name: np.array([ts_probs(s, name).argmax(1) == labels for s in seeds]).astype(float)
        for name in ("reinforce", "grpo")
    }
    aurc = summary["paired"]["reinforce - grpo"]["aurc"]
    ref = stats.paired_bootstrap_curve(
        conf["reinforce"], ok["reinforce"], conf["grpo"], ok["grpo"], n=aurc["n_boot"]
    )
    for key in ("diff", "ci_low", "ci_high"):
        assert aurc[key] == pytest.approx(ref[key], rel=1e-9)
    # Table 2: the change of each fork relative to the stage-1 run of the same seed
    delta = [
        metrics.aurc(*metrics.confidence_and_correct(ts_probs(s, "readout-only"), labels))
        - metrics.aurc(*metrics.confidence_and_correct(ts_probs(s, "calibrate"), labels))
        for s in seeds
    ]
    assert summary["forks"]["readout-only"]["aurc"]["diff"] == pytest.approx(np.mean(delta))
    # Figure 3: each other fork minus readout-only, per-item Brier averaged over seeds
    ro = np.mean(
        [((ts_probs(s, "readout-only") - np.eye(2)[labels]) ** 2).sum(1) for s in seeds], 0
    )
    fig3 = summary["vs_readout"]["reinforce"]["brier"]["diff"]
    assert fig3 == pytest.approx(float((item["reinforce"] - ro).mean()))
    assert set(summary["vs_readout"]) == {"reinforce"}
    assert json.loads((tmp_path / "summary.json").read_text())["eps"] == 0.1
    md = (tmp_path / "report.md").read_text()
    assert "Table 1" in md and "Table 2" in md and "| GRPO+TS |" in md
    html = (tmp_path / "report.html").read_text()
    assert "<table>" in html and "cdn.plot.ly" not in html  # offline: plotly.js beside it
    assert '<script charset="utf-8" src="../plotly.min.js">' in html
    assert (tmp_path.parent / "plotly.min.js").read_text().startswith("/**\n* plotly.js v")
    # risk-coverage (Figure 2), Brier and AURC of forks minus readout-only (Figure 3) and
    # of RLCD minus each run; no logs: no Figure 1
    assert html.count('class="plotly-graph-div"') == 5
    assert "Figure 3: stage-2 reward matters" in md


def test_summary_compares_runs_at_the_seeds_they_share(tmp_path):
    """RLCD at three seeds, SFT at two of them, GRPO at one: each run's row is its own
    seeds (listed where fewer than the reproduction's), and each paired test equals the
    test of a reproduction holding only the shared seeds."""
    rng = np.random.default_rng(5)
    n, labels, dev_labels = 30, rng.integers(0, 2, 30), rng.integers(0, 2, 12)
    have = {"reinforce": (1, 2, 3), "sft": (1, 3), "grpo": (2,)}
    dumps = {}
    for name, seeds in have.items():
        for seed in seeds:
            dumps[seed, name] = rng.normal(0, 2, (n, 2)), rng.normal(0, 2, (12, 2))
            fake_run(tmp_path / "all", seed, name, *dumps[seed, name], labels, dev_labels)
    summary, _ = summarize_runs(tmp_path / "all", (1, 2, 3), eps=0.05, n=200)
    assert "seeds" not in summary["runs"]["reinforce"]
    assert summary["runs"]["sft"]["seeds"] == [1, 3] and summary["runs"]["grpo"]["seeds"] == [2]
    for other in ("sft", "grpo"):
        for seed in have[other]:
            for name in ("reinforce", other):
                fake_run(tmp_path / other, seed, name, *dumps[seed, name], labels, dev_labels)
        alone, _ = summarize_runs(tmp_path / other, have[other], eps=0.05, n=200)
        key = f"reinforce - {other}"
        assert summary["paired"][key] == alone["paired"][key]
        assert len(summary["paired"][key]["aurc"]["seeds"]["diffs"]) == len(have[other])


def test_the_ingredient_runs_sit_beside_grpo_in_the_report_at_their_budgets(tmp_path):
    """grpo-calibrate's budget counts GRPO's steps before its own (two stages, as RLCD's);
    both ingredient runs get their labels, right after GRPO, in Table 1 and the paired
    table."""
    rng = np.random.default_rng(1)
    n, seeds = 30, (1, 2)
    labels, dev_labels = rng.integers(0, 2, n), rng.integers(0, 2, 20)
    steps = {"calibrate": 3, "reinforce": 3, "grpo": 3, "grpo-calibrate": 3, "drgrpo-matched": 6}
    for seed in seeds:
        for name, k in steps.items():
            fake_run(tmp_path, seed, name, rng.normal(0, 3, (n, 2)), rng.normal(0, 3, (20, 2)),
                     labels, dev_labels)  # fmt: skip
            (tmp_path / f"seed-{seed}" / name / "config.json").write_text(json.dumps({"steps": k}))
    summary = write_report(tmp_path, seeds, eps=0.1, title="fake", task="verify", n_claim=200)
    got = {name: summary["runs"][name]["steps"] for name in steps}
    assert got == {"calibrate": 3, "reinforce": 3 + 3, "grpo": 3, "grpo-calibrate": 3 + 3,
                   "drgrpo-matched": 6}  # fmt: skip
    md = (tmp_path / "report.md").read_text()
    table1 = re.findall(r"^\| (.+?) \| (\d+) \|", md.split("## Table 1")[1].split("##")[0], re.M)
    table1 = [row for row in table1 if " + " not in row[0]]  # GRPO's post-hoc calibrators
    assert table1[:3] == [("GRPO+TS", "3"), ("Dr.GRPO+TS (matched budget)", "6"),
                          ("GRPO then stage-1 calibration", "6")]  # fmt: skip
    for row in ("GRPO+TS", "Dr.GRPO+TS (matched budget)", "GRPO then stage-1 calibration"):
        assert f"\n| {row} | " in md.split("## Paired tests")[1]
    assert "reinforce - grpo-calibrate" in summary["paired"]


def test_ship_copies_what_assets_ships(tmp_path):
    from rlcd_lab.reproduce import ship

    src = tmp_path / "runs" / "verify"
    for seed in (17, 23):
        for run in ("base", "reinforce"):
            d = src / f"seed-{seed}" / run
            (d / "eval").mkdir(parents=True)
            (d / "final").mkdir()
            (d / "checkpoints" / "step-2").mkdir(parents=True)
            for name in ("config.json", "log.jsonl", "eval/test.jsonl", "final/model.safetensors"):
                (d / name).write_text(f"{seed} {run} {name}")
    (src / "summary.json").write_text("{}")
    (src / "figures").mkdir()
    (src / "figures" / "fig.png").write_text("png")
    dst = tmp_path / "assets" / "verify"
    (dst / "stale").mkdir(parents=True)
    ship(src, dst, weights=("reinforce",))
    got = sorted(str(p.relative_to(dst)) for p in dst.rglob("*") if p.is_file())
    runs = [f"seed-{s}/{r}/{n}" for s in (17, 23) for r in ("base", "reinforce")
            for n in ("config.json", "eval/test.jsonl.xz", "log.jsonl.xz")]  # fmt: skip
    assert got == sorted(
        [*runs, "seed-17/reinforce/final/model.safetensors", "summary.json"]
    )  # dumps and logs packed; no figures/ (report.html holds them)
    log = lzma.decompress((dst / "seed-23/base/log.jsonl.xz").read_bytes())
    assert log == b"23 base log.jsonl"
    again = tmp_path / "again"
    ship(dst, again)  # from a shipped copy (packed): the same files
    assert sorted(str(p.relative_to(again)) for p in again.rglob("*") if p.is_file()) == [
        g for g in got if "final" not in g
    ]


def test_dev_curves_and_the_tuning_grid_are_recomputed_from_logs_and_dumps(tmp_path):
    """Dev curves: the raw dev Brier each seed's log holds, averaged over seeds at the steps
    both logged (step = 0-based log step + 1, plus stage 1's steps for two-stage RLCD).
    Tuning: each tuning run's dev Brier after TS fitted on its own dev dump, the lowest
    value kept, two-stage RLCD's for its stage 1; report.md and the docs blocks show both,
    and ship() carries the tuning runs and choice.json."""
    from rlcd_lab.reports.report import dev_curve_table, update_readme
    from rlcd_lab.reproduce import ship

    rng = np.random.default_rng(3)
    labels, dev_labels = rng.integers(0, 2, 20), rng.integers(0, 2, 12)
    dev = {  # (run, seed): dev Brier logged at 0-based steps 1 and 3
        ("calibrate", 1): [0.4, 0.3], ("calibrate", 2): [0.2, 0.1],
        ("reinforce", 1): [0.5, 0.5], ("reinforce", 2): [0.3, 0.1],
    }  # fmt: skip
    for (name, seed), values in dev.items():
        z = rng.normal(0, 2, (20, 2))
        fake_run(tmp_path, seed, name, z, z[:12], labels, dev_labels)
        run = tmp_path / f"seed-{seed}" / name
        (run / "config.json").write_text(json.dumps({"method": name, "steps": 4}))
        log = [{"step": s, "loss": 0.0} for s in range(4)]
        log[1]["dev_brier"], log[3]["dev_brier"] = values
        if seed == 2:
            log[0]["dev_brier"] = 0.9  # seed 1 has no dev score at step 0: left out
        atomic_write_jsonl(run / "log.jsonl", log)
    scores = {}
    for lr in (1e-5, 1e-4):
        for name, steps in (("calibrate", 3), ("reinforce", 3), ("grpo-matched", 6), ("x", 6)):
            run = tmp_path / "tune" / f"lr-{lr:g}" / "verify" / "seed-1" / name
            d = rng.normal(0, 2, (12, 2))
            fake_run(run.parents[1], 1, name, d, d, dev_labels, dev_labels)
            (run / "config.json").write_text(json.dumps({"method": name, "steps": steps, "lr": lr}))
            if name != "x":  # x has no training log: another run's evaluation, left out
                atomic_write_jsonl(run / "log.jsonl", [{"step": 0, "loss": 0.0}])
                p = metrics.apply_temperature(d, metrics.fit_temperature(d, dev_labels))
                scores.setdefault(name, {})[lr] = metrics.brier(p, dev_labels)
    (tmp_path / "tune" / "choice.json").write_text("{}")
    summary = write_report(tmp_path, (1, 2), eps=0.1, title="fake", task="verify")

    assert summary["runs"]["calibrate"]["dev_curve"] == [
        {"step": 2, "brier": pytest.approx(0.3)}, {"step": 4, "brier": pytest.approx(0.2)}
    ]  # fmt: skip
    assert summary["runs"]["reinforce"]["dev_curve"] == [
        {"step": 6, "brier": pytest.approx(0.4)}, {"step": 8, "brier": pytest.approx(0.3)}
    ]  # fmt: skip
    table = dev_curve_table(summary).splitlines()
    assert table[0] == "| run | 2 | 4 | 6 | 8 |"
    assert table[2] == "| RLCD stage 1 | 0.300 | 0.200 |  |  |"
    assert table[3] == "| RLCD (two-stage) |  |  | 0.400 | 0.300 |"
    tune = summary["tuning"]
    assert tune["grid"] == [1e-5, 1e-4] and set(tune["dev_ts_brier"]) == set(scores)
    assert tune["steps"] == {"calibrate": 3, "reinforce": 6, "grpo-matched": 6}  # both stages
    for name, by_lr in scores.items():
        for lr, value in by_lr.items():
            assert tune["dev_ts_brier"][name][f"{lr:g}"] == pytest.approx(value, rel=1e-9)
    best = {name: min(by_lr, key=by_lr.get) for name, by_lr in scores.items()}
    assert tune["lr"] == {**best, "calibrate": best["reinforce"]}
    md = (tmp_path / "report.md").read_text()
    assert "## Dev curves" in md and "| RLCD (two-stage) |  |  | 0.400 | 0.300 |" in md
    grpo = min(scores["grpo-matched"].values())
    assert f"**{grpo:.3f}**" in md and "## Learning rates, chosen on dev" in md
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- dev-x:begin (generated from summary.json by hand) -->\nold\n<!-- dev-x:end -->\n"
        "<!-- tune-x:begin (generated from summary.json by hand) -->\n<!-- tune-x:end -->\n"
    )
    text = update_readme(page)
    assert "| RLCD stage 1 | 0.300 | 0.200 |  |  |" in text and "old" not in text
    kept = {1e-5: "1e-5", 1e-4: "1e-4"}[tune["lr"]["grpo-matched"]]
    assert f"| {kept} |" in text and "| lr 1e-5 | lr 1e-4 |" in text
    ship(tmp_path, tmp_path / "shipped")
    shipped = tmp_path / "shipped" / "tune"
    assert (shipped / "choice.json").read_text() == "{}"
    assert (shipped / "lr-1e-05/verify/seed-1/grpo-matched/eval/dev.jsonl.xz").exists()
    again = summarize_runs(tmp_path / "shipped", (1, 2), eps=0.1, n=10)[0]
    assert rounded(again["tuning"]) == summary["tuning"]  # the summary keeps 10 digits


def test_a_saved_reproduction_goes_on_from_its_ended_runs_on_another_machine(tmp_path, tiny_base):
    """``reproduce --save-to`` (save_ended): the runs that ended, tuning runs and
    choice.json too, JSONL packed, without step checkpoints, a run still training, or a
    stage 1 whose stage 2 has not ended; weights only where ship() ships them. Copied into
    an empty OUT (another machine), the same plan reuses every saved run, and what was not
    saved trains again to the same dumps as where nothing moved. A save that would lose a
    saved run is refused."""
    from rlcd_lab.files import rundir
    from rlcd_lab.reproduce import _finished, save_ended, tune, tune_plan

    def saved_files(folder):
        return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())

    def with_weights(folder):
        return {f.split("/final/")[0] for f in saved_files(folder) if f.endswith(".safetensors")}

    out, root, saved = tmp_path / "out", tmp_path / "out" / "verify", tmp_path / "saved"
    cfg = ReproduceConfig(seeds=(17,), out=out, init=tiny_base, steps=2, test_items=6,
                          runs=("base", "calibrate", "reinforce"), lr_grid=(1e-4,),
                          tune_steps=1)  # fmt: skip
    tune(cfg, lambda first, second: [run_job(j) for j in first + second])
    jobs = by_name(sum(plan(cfg), []))
    base, cal, rl = (jobs[(name, 17)] for name in ("base", "calibrate", "reinforce"))
    run_job(base)
    run_job(cal)
    (rl.out / "checkpoints").mkdir(parents=True)  # stage 2 still training
    tuned = root / "tune" / "lr-0.0001" / "verify" / "seed-17"
    # stage 1 is left out with its stage 2: that one starts from its weights
    assert save_ended(root, saved) == [root / "seed-17/base", tuned / "calibrate",
                                       tuned / "reinforce"]  # fmt: skip
    files = saved_files(saved)
    assert "tune/choice.json" in files and not any("checkpoints" in f for f in files)
    assert not [f for f in files if f.endswith(".jsonl")]  # packed
    assert with_weights(saved) == set()
    assert [p.name for p in rundir.final_dir(saved / tuned.relative_to(root) / "calibrate")
            .iterdir()] == [rundir.META_FILE]  # fmt: skip
    cal_dump = read_jsonl(cal.out / "eval" / "test.jsonl")
    shutil.rmtree(rl.out)
    run_job(rl)  # where nothing moved
    rl_dump = read_jsonl(rl.out / "eval" / "test.jsonl")
    got = save_ended(root, tmp_path / "later")
    assert got == sorted([root / "seed-17/base", cal.out, rl.out, tuned / "calibrate",
                          tuned / "reinforce"])  # fmt: skip
    assert with_weights(tmp_path / "later") == {"seed-17/reinforce"}  # ship()'s weights only

    (tmp_path / "fresh").mkdir()  # a new machine's OUT before the saved runs are copied back
    before = {f: (saved / f).read_bytes() for f in saved_files(saved)}
    with pytest.raises(ValueError, match="3 runs that have not ended"):
        save_ended(tmp_path / "fresh", saved)
    with pytest.raises(ValueError, match="no reproduction there"):
        save_ended(tmp_path / "nowhere", saved)
    assert {f: (saved / f).read_bytes() for f in saved_files(saved)} == before

    shutil.rmtree(out)
    shutil.copytree(saved, root)  # another machine: the first save in an empty OUT
    assert all(_finished(job) for job in [*sum(tune_plan(cfg), []), base])
    assert timed_job(base)["reused"] and not _finished(cal)
    run_job(cal)  # stage 1 again, then stage 2 from it: the same dumps
    run_job(rl)
    assert read_jsonl(cal.out / "eval" / "test.jsonl") == cal_dump
    assert read_jsonl(rl.out / "eval" / "test.jsonl") == rl_dump


def test_ship_names_the_documented_out_and_ships_an_adapter_without_its_tokenizer(tmp_path):
    """With ``out``, every path under the OUT folder that ran the reproduction (config and
    done.json, nested too) names the documented folder instead; other values are kept.
    A shipped adapter leaves out the tokenizer files (its base's) and its checksums cover
    what is left, so it still verifies."""
    from rlcd_lab.lm.checkpoint import verify_checksums, write_checksums
    from rlcd_lab.reproduce import ship

    src = tmp_path / "machine" / "out" / "rung"
    run = src / "seed-17" / "reinforce"
    stage1 = str(src / "seed-17" / "calibrate" / "final")
    config = {"init": stage1, "out": str(run), "task": "~/.cache/x.jsonl", "lr": 1e-4,
              "other": str(tmp_path / "machine" / "outside")}  # fmt: skip
    (run / "final").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(config))
    (run / "done.json").write_text(json.dumps({"settings": {"init": stage1, "steps": [1]}}))
    for name in ("adapter_config.json", "adapter_model.safetensors", "tokenizer.json",
                 "tokenizer_config.json", "chat_template.jinja", "rlcd.json"):  # fmt: skip
        (run / "final" / name).write_text(name)
    write_checksums(run / "final")
    tuned = src / "tune" / "lr-0.0001" / "rung" / "seed-17" / "reinforce"
    shutil.copytree(run, tuned)
    dst = tmp_path / "assets" / "rung"
    ship(src, dst, weights=("reinforce",), out="runs/x")
    assert (dst / tuned.relative_to(src) / "config.json").exists()
    assert not (dst / tuned.relative_to(src) / "final").exists()  # weights: main seeds only
    got = json.loads((dst / "seed-17/reinforce/config.json").read_text())
    assert got == {**config, "init": "runs/x/rung/seed-17/calibrate/final",
                   "out": "runs/x/rung/seed-17/reinforce"}  # fmt: skip
    done = json.loads((dst / "seed-17/reinforce/done.json").read_text())
    assert done == {"settings": {"init": "runs/x/rung/seed-17/calibrate/final", "steps": [1]}}
    final = dst / "seed-17/reinforce/final"
    assert sorted(p.name for p in final.iterdir()) == [
        "adapter_config.json", "adapter_model.safetensors", "checksums.json", "rlcd.json"
    ]  # fmt: skip
    assert verify_checksums(final)
    assert json.loads((run / "config.json").read_text()) == config  # the source untouched


def test_progress_reads_where_a_long_reproduction_stands(tmp_path):
    """``reproduce --status``: per run of the plan (tuning runs first) its steps logged,
    its state and its median seconds per step; the time left is each unfinished run's
    steps left at the median of its run name's logged steps (of every logged step where
    its name has none), over the jobs. Rows, states and hours checked by hand."""
    from rlcd_lab.cli import status_text
    from rlcd_lab.files import rundir
    from rlcd_lab.reproduce import progress

    cfg = ReproduceConfig(seeds=(5,), out=tmp_path, steps=4, jobs=2, lr_grid=(1e-5, 1e-4),
                          tune_steps=2, runs=("base", "calibrate", "reinforce"))  # fmt: skip
    root = tmp_path / "verify"

    def logged(run, times, finished=False):
        atomic_write_jsonl(run / "log.jsonl", [{"step": i, "time_step": t} for i, t in
                                               enumerate(times)])  # fmt: skip
        if finished:
            (rundir.final_dir(run)).mkdir(parents=True)
            (rundir.final_dir(run) / "rlcd.json").write_text("{}")

    for lr in ("1e-05", "0.0001"):  # the tuning: 2 steps each, all finished
        logged(root / "tune" / f"lr-{lr}" / "verify" / "seed-5" / "calibrate", [9, 11], True)
        logged(root / "tune" / f"lr-{lr}" / "verify" / "seed-5" / "reinforce", [30, 50], True)
    logged(root / "seed-5" / "calibrate", [10, 20, 30])  # 3 of 4 steps, stopped
    state = progress(cfg)
    got = [(r["run"], r["tuning"], r["steps"], r["done"], r["state"], r["s_per_step"])
           for r in state["runs"]]  # fmt: skip
    assert got == [
        ("calibrate", 1e-5, 2, 2, "finished", 10.0),
        ("calibrate", 1e-4, 2, 2, "finished", 10.0),
        ("reinforce", 1e-5, 2, 2, "finished", 40.0),
        ("reinforce", 1e-4, 2, 2, "finished", 40.0),
        ("base", None, 0, 0, "waiting", None),
        ("calibrate", None, 4, 3, "partial", 20.0),
        ("reinforce", None, 4, 0, "waiting", None),
    ]
    # left: calibrate 1 step at the median of its 7 logged steps (9, 11, 9, 11, 10, 20,
    # 30: 11 s), then reinforce, which starts from it, 4 at the median of its 4 (30, 50,
    # 30, 50: 40 s): a chain, so the second job does not shorten it
    assert state["train_hours"] == pytest.approx((2 * (9 + 11) + 2 * (30 + 50) + 60) / 3600)
    assert state["steps_left"] == 5
    assert state["hours_left"] == pytest.approx((1 * 11 + 4 * 40) / 3600)
    text = status_text(state, 2)
    assert "tuning: all 4 runs finished" in text and "tune lr" not in text and "3/4" in text
    state["runs"][0]["state"] = "partial"  # a tuning run not finished: every one listed
    assert "tune lr 1e-05: calibrate" in status_text(state, 2)
    assert text.endswith("about 0.0 h at 2 jobs (the queue played out, each step at the median "
                         "time of its run's logged steps; evaluations not counted)")  # fmt: skip
    assert " h at 1 job (the queue played out" in status_text(state, 1)


def test_a_run_with_another_config_is_found_before_anything_trains(tmp_path):
    """reproduce checks every planned run's folder first: a finished run with another
    config (here: 9 steps where the plan has 2) or a partial one (another lr) stops it
    before any run starts, naming the folders and the settings; ``--status`` says so and
    counts their planned steps as left; with no step's time logged the time left is
    unknown, not "about 0.0 h"."""
    from rlcd_lab.cli import status_text
    from rlcd_lab.files import rundir
    from rlcd_lab.reproduce import check_folders, progress, run_all

    cfg = ReproduceConfig(seeds=(5,), out=tmp_path, steps=2, runs=("base", "calibrate", "grpo"))
    first, second = plan(cfg)
    grpo, cal = by_name(first)[("grpo", 5)], by_name(first)[("calibrate", 5)]
    for job, change, logged in ((grpo, dict(steps=9), 9), (cal, dict(lr=0.5), 1)):
        job.out.mkdir(parents=True)
        config = rundir.config_dict(replace(job.train, **change))
        rundir.config_file(job.out).write_text(json.dumps(config))
        atomic_write_jsonl(rundir.log_file(job.out), [{"step": i} for i in range(logged)])
    rundir.final_dir(grpo.out).mkdir()
    (rundir.final_dir(grpo.out) / rundir.META_FILE).write_text("{}")
    state = progress(cfg)
    rows = {r["run"]: r["state"] for r in state["runs"]}
    assert rows == {"base": "waiting", "calibrate": "partial with another config",
                    "grpo": "finished with another config"}  # fmt: skip
    assert state["steps_left"] == 2 + 2  # calibrate's 2 and grpo's 2, both again
    assert state["hours_left"] is None
    text = status_text(state, 2)
    assert re.search(r"\ngrpo +5 +9/2 +finished with another config\n", text), text
    assert text.endswith("4 training steps left, time left unknown (no training step's time "
                         "is logged yet)")  # fmt: skip
    clash = (r"2 run folder\(s\) .* config: .*seed-5/calibrate \(a partial run, differs in "
             r"lr\); .*seed-5/grpo \(a finished run, differs in steps\); .* nothing was "
             r"trained")  # fmt: skip
    with pytest.raises(ValueError, match=clash):
        run_all(cfg)
    assert sorted(p.name for p in grpo.out.parent.iterdir()) == ["calibrate", "grpo"]
    check_folders([j for j in first + second if j not in (grpo, cal)])  # the others are free
    rundir.config_file(cal.out).write_text(
        json.dumps(rundir.config_dict(replace(cal.train, steps=7)))
    )
    check_folders([cal])  # a partial run may differ in its steps: it trains on


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (dict(steps=-3), r"^--steps must be >= 1, got -3$"),
        (dict(seeds=()), r"^--seeds is empty"),
        (dict(jobs=0), r"^--jobs must be >= 1, got 0$"),
        (dict(memory_gib=float("nan")), r"^--memory-gib must be finite and > 0, got nan$"),
        (dict(lr_grid=(1e-5, -1.0)), r"^--lr-grid must be finite and > 0, got -1.0$"),
        (dict(seeds=(3, 3)), r"^--seeds names a seed twice: 3 3$"),
    ],
)
def test_reproduce_and_its_status_refuse_bad_arguments(tmp_path, change, match):
    from rlcd_lab.reproduce import progress, run_all

    cfg = replace(ReproduceConfig(out=tmp_path), **change)
    for command in (progress, run_all):
        with pytest.raises(ValueError, match=match):
            command(cfg)
    assert list(tmp_path.iterdir()) == []


def test_run_warnings_are_each_trained_runs_stored_warnings(tmp_path):
    """The reproduction's warnings: each run's ``final/rlcd.json`` ``metrics.warnings``
    (what ``rlcd-lab train`` printed), prefixed with its folder; tuning runs too."""
    from rlcd_lab.files import rundir
    from rlcd_lab.reproduce import run_warnings

    stored = {
        "seed-17/grpo": ["accuracy 0.500 is within the binomial margin of chance"],
        "seed-17/calibrate": [],
        "tune/lr-1e-05/verify/seed-17/sft": ["forced markers on 90% of rationales", "T = 50"],
    }
    for run, warnings in stored.items():
        final = rundir.final_dir(tmp_path / run)
        final.mkdir(parents=True)
        (final / rundir.META_FILE).write_text(json.dumps({"metrics": {"warnings": warnings}}))
    (tmp_path / "seed-17" / "sft").mkdir()  # not ended: nothing to say yet
    assert run_warnings(tmp_path) == [
        f"{run}: {text}" for run in sorted(stored) for text in stored[run]
    ]
