"""``rlcd-lab reproduce``: every method and seed of the paper's comparison, then its report.

For each seed, from the same base model and the same question/outcome stream:

* Table 1 (OpenJev-RLCD sec. 5.1): the base model, SFT, RFT/STaR with and without the KL
  anchor, GRPO, RLCD stage 1 (``calibrate``) and two-stage RLCD (``reinforce`` from the
  stage-1 checkpoint); every one evaluated as single-query readouts after temperature
  scaling fitted on dev.
* Table 2 (sec. 5.2): four continuations forked from the same stage-1 checkpoint with the
  same budget: RLCD-RL (``reinforce``), ``readout-only`` (stage 1 continued),
  ``anchor-only`` (the score-function noise and KL anchor of RLCD-RL, no outcome reward)
  and ``grpo-cont`` (GRPO's correctness reward); changes relative to the checkpoint.
* Table 3 (sec. 5.3, tasks whose items carry ``q``): SFT (cross-entropy on direct
  answers), the per-rationale objective (``endtoend`` with KL), the mixture objective
  (``mixture``, lam = 1) and two-stage RLCD, with JSD to ``q`` of the single-query readout
  and of the mixture of ``MIXTURE_M`` rationales.

Runs go to ``OUT/<task>/seed-<s>/<name>/`` (ordinary run directories). A finished run
with the same config is reused, a partial one resumed, so an interrupted reproduction
continues where it stopped. Runs are independent processes (``jobs`` at a time); on CPU
each uses one thread, which also makes the numbers independent of the machine's core
count. ``write_report`` reads the eval dumps back and writes ``summary.json``,
``report.md`` and a self-contained ``report.html`` (plotly inlined, no CDN); ``run_all``
also writes ``timing.json``: where the time went (wall, training and sampling seconds per run).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Literal

import numpy as np

from . import metrics, plots, stats
from .assets import ASSETS
from .evaluate import run_eval, summarize
from .io import atomic_write_jsonl, atomic_write_text, read_jsonl
from .train.common import TrainConfig, config_diff

RLCD = "reinforce"
TABLE1 = ("base", "sft", "rft", "rft-kl", "grpo", "calibrate", "reinforce")
BASELINES = ("sft", "rft", "rft-kl", "grpo", "endtoend", "mixture")
MATCHED = "-matched"
"""Suffix of a baseline run at two-stage RLCD's budget (twice the steps per stage)."""
FORKS = ("reinforce", "readout-only", "anchor-only", "grpo-cont")
TABLE3 = ("base", "sft", "endtoend", "mixture", "calibrate", "reinforce")
MIXTURE_M = 4
EPS = {"facts": 0.2}  # error budget of Cov@eps: 5% unless listed (the paper: 20% on MMLU-Pro)

SCALES: dict[str, dict] = {
    "tiny": dict(steps=200, lr=1e-4, max_new_tokens=48, test_items=400, device="cpu"),
    "small": dict(
        steps=12,
        lr=2e-4,
        max_new_tokens=48,
        test_items=100,
        device="cpu",
        lora_r=4,
        batch_size=2,
        m=4,
        eval_every=0,
    ),
    "paper": dict(
        steps=400, lr=2e-6, max_new_tokens=256, test_items=1000, device="auto", bf16=True
    ),
}
"""Settings shared by every run at each scale (the paper: 400 steps per stage, AdamW
2e-6 for Qwen3-1.7B, 8 questions x 4 rationales, bf16; the rationale budget is ours).
``small``: a small real LM (SmolLM2-135M-Instruct) with LoRA r = 4 on a 2-core CPU, a
budget that fits one working session; no dev evals during training."""


@dataclass(frozen=True)
class ReproduceConfig:
    """Run (or reuse) every method and seed of the paper's comparison and write the report."""

    task: str = "verify"
    """verify, facts, aleatoric, or a task-item JSONL file (with .train/.dev/.test siblings)."""
    scale: Literal["tiny", "small", "paper"] = "tiny"
    seeds: tuple[int, ...] = (17, 23, 29)
    out: Path = Path("runs/reproduce")
    init: Path | None = None
    """Base model; default at tiny scale: assets/checkpoints/base-<task>; required at paper
    scale (a local HF model directory)."""
    steps: int | None = None
    """Steps per stage (default: the scale's)."""
    test_items: int | None = None
    """Test items per eval dump (default: the scale's)."""
    jobs: int = 2
    """Runs at a time (separate processes; one thread each on CPU)."""
    runs: tuple[str, ...] = ()
    """Only these runs (names as in the report: base, sft, rft, rft-kl, grpo, calibrate,
    reinforce, readout-only, anchor-only, grpo-cont, endtoend, mixture); empty: all."""


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
    from .tasks import load_task_items

    return load_task_items(task, "dev")[0].q is not None


def plan(cfg: ReproduceConfig) -> tuple[list[Job], list[Job]]:
    """The runs of the reproduction in two waves: from the base model, then from stage 1."""
    from .train.grpo import GRPOConfig
    from .train.rft import RFTConfig
    from .train.rlcd import preset
    from .train.sft import SFTConfig

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
    table3 = aleatoric(cfg.task)
    first, second = [], []
    for seed in cfg.seeds:
        root = cfg.out / Path(cfg.task).stem / f"seed-{seed}"
        stage1 = root / "calibrate" / "final"
        kw = dict(base, task=cfg.task, seed=seed, init=Path(init))
        runs: dict[str, TrainConfig] = {
            "sft": SFTConfig(**kw),
            "calibrate": preset("calibrate", **kw),
            "reinforce": preset("reinforce", **dict(kw, init=stage1)),
        }
        if table3:
            runs["endtoend"] = preset("endtoend", **kw, beta=0.04)
            runs["mixture"] = preset("mixture", **kw)
        else:
            runs["rft"] = RFTConfig(**kw)
            runs["rft-kl"] = RFTConfig(**kw, beta=0.04)
            runs["grpo"] = GRPOConfig(**kw)
            runs["readout-only"] = preset("calibrate", **dict(kw, init=stage1))
            runs["anchor-only"] = preset("reinforce", **dict(kw, init=stage1), outcome_reward=False)
            runs["grpo-cont"] = GRPOConfig(**dict(kw, init=stage1))
        for name in [n for n in runs if n in BASELINES]:
            runs[name + MATCHED] = replace(runs[name], steps=2 * base["steps"])
        first.append(Job("base", seed, root / "base", None, kw))
        unknown = sorted(set(cfg.runs) - set(runs) - {"base"})
        if unknown:
            raise ValueError(f"unknown runs {unknown}; choose from {['base', *runs]}")
        for name, tc in runs.items():
            job = Job(name, seed, root / name, replace(tc, out=root / name), kw)
            (second if tc.init == stage1 else first).append(job)
    if cfg.runs:
        first, second = ([j for j in w if j.name in cfg.runs] for w in (first, second))
        if second and "calibrate" not in cfg.runs:
            raise ValueError(f"runs {sorted({j.name for j in second})} start from calibrate")
    return first, second


def _finished(job: Job) -> bool:
    """Whether ``job`` already ran to the end with the same config (raises if it ran with
    another one: that directory belongs to a different experiment)."""
    if job.train is None:
        done = job.out / "done.json"
        if not done.exists():
            return False
        old, new = json.loads(done.read_text()), json.loads(json.dumps(job.settings, default=str))
        diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    else:
        if not (job.out / "final" / "rlcd.json").exists():
            return False
        diff = config_diff(json.loads((job.out / "config.json").read_text()), job.train)
    if diff:
        raise ValueError(f"{job.out} holds a finished run with another config (differs in {diff})")
    return True


def run_job(job: Job) -> str:
    """Run one job in this process (reusing or resuming it); returns its directory."""

    from .models import load_checkpoint
    from .tasks import load_task_items
    from .train import train

    if _finished(job):
        return str(job.out)
    if job.train is not None:
        resume = (job.out / "config.json").exists()
        train(replace(job.train, resume=resume))
        model_dir = job.out / "final"
    else:
        model_dir = Path(job.settings["init"])
    task, seed = job.settings["task"], job.seed
    model, tok, meta = load_checkpoint(model_dir, job.settings["device"])
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
        evals["dev"] = load_task_items(task, "dev")
        evals["test"] = test
    if test[0].q is not None and not direct:
        evals[f"test-m{MIXTURE_M}"] = test
    for name, items in evals.items():
        m = MIXTURE_M if name.startswith("test-m") else 1
        rows = run_eval(model, tok, items, m=m, **kw)
        atomic_write_jsonl(job.out / "eval" / f"{name}.jsonl", rows)
    if job.train is None:
        atomic_write_text(job.out / "done.json", json.dumps(job.settings, default=str, indent=2))
    return str(job.out)


def timed_job(job: Job) -> dict:
    """``run_job`` and its cost: wall seconds, and from ``log.jsonl`` the seconds spent in
    training steps and, within them, in sampling rationales (the rest of the wall time is
    loading, dev evals every ``eval_every`` steps, the final eval dumps and checkpoints)."""
    reused = _finished(job)
    t0 = time.perf_counter()
    run_job(job)
    row = {"run": job.name, "seed": job.seed, "reused": reused, "wall_s": time.perf_counter() - t0}
    if job.train is not None and not reused:
        log = read_jsonl(job.out / "log.jsonl")
        row["train_s"] = sum(r["time_step"] for r in log)
        row["sample_s"] = sum(r.get("time_sample") or 0.0 for r in log)
    return row


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def run_all(cfg: ReproduceConfig, progress: Callable[[str], None] | None = None) -> Path:
    """Run every job of ``plan(cfg)`` (``cfg.jobs`` processes at a time), then write the
    report; returns the report directory ``OUT/<task>``."""
    waves = plan(cfg)
    timing: list[dict] = []
    start = time.perf_counter()
    quiet = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}  # read at import
    saved = {k: os.environ.get(k) for k in quiet}
    os.environ.update(quiet)  # spawned workers inherit it: no interleaved progress bars
    try:
        one_thread = SCALES[cfg.scale]["device"] == "cpu"  # same numbers on any core count
        with ProcessPoolExecutor(
            max(1, cfg.jobs),
            mp_context=get_context("spawn"),
            initializer=_one_thread if one_thread else None,
        ) as pool:
            for wave in waves:
                for row in pool.map(timed_job, wave):
                    timing.append(row)
                    if progress is not None:
                        progress(f"{row['run']} seed {row['seed']}: {row['wall_s']:.0f} s")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    out = cfg.out / Path(cfg.task).stem
    write_report(out, cfg.seeds, eps=EPS.get(cfg.task, 0.05), title=f"{cfg.task} ({cfg.scale})")
    total = {"wall_s": time.perf_counter() - start, "jobs": cfg.jobs, "runs": timing}
    atomic_write_text(out / "timing.json", json.dumps(total, indent=2))
    return out


# ---------------------------------------------------------------------------------------
# The report: numbers from the eval dumps
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scored:
    """One run's test items after temperature scaling (T fitted on dev)."""

    row: dict  # evaluate.summarize(test, dev): the Table 1 row
    probs: np.ndarray  # (N, K) single-query probabilities after scaling
    labels: np.ndarray  # (N,)
    mixture_jsd: float | None  # JSD(q, mixture of MIXTURE_M rationales), Table 3

    @property
    def correct(self) -> np.ndarray:
        return (self.probs.argmax(1) == self.labels).astype(float)

    @property
    def confidence(self) -> np.ndarray:
        return self.probs.max(1)

    @property
    def brier(self) -> np.ndarray:
        """Per-item Brier loss ``||p - e_y||^2`` (lower is better)."""
        onehot = np.eye(self.probs.shape[1])[self.labels]
        return ((self.probs - onehot) ** 2).sum(1)


def score_run(run: Path, eps: float) -> Scored:
    """Score ``run/eval/test.jsonl`` with the temperature fitted on ``run/eval/dev.jsonl``."""
    test = read_jsonl(run / "eval" / "test.jsonl")
    dev = read_jsonl(run / "eval" / "dev.jsonl")
    row = summarize(test, dev_rows=dev, eps=eps)
    logits = metrics.pad_ragged([r["logits"] for r in test], -np.inf)  # per-item K
    probs = metrics.apply_temperature(logits, row["T"])
    mixture_jsd = None
    mix = run / "eval" / f"test-m{MIXTURE_M}.jsonl"
    if mix.exists():
        rows = read_jsonl(mix)
        mixture_jsd = metrics.mean_jsd(
            np.array([r["mixture"] for r in rows]), [r["q"] for r in rows]
        )
    return Scored(row, probs, np.array([r["label"] for r in test]), mixture_jsd)


def _mean_sd(values: Sequence[float]) -> dict:
    v = np.asarray(values, dtype=float)
    return {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if v.size > 1 else 0.0}


def paired(a: Sequence[Scored], b: Sequence[Scored]) -> dict:
    """Paired tests of A - B over test items (A and B: one ``Scored`` per seed, same
    items): accuracy and Brier with per-item values averaged over seeds (bootstrap 95% CI
    and sign-flip p), AURC on the seeds pooled (its own bootstrap and swap test)."""
    out = {}
    for key in ("correct", "brier"):
        x = np.mean([getattr(s, key) for s in a], 0)
        y = np.mean([getattr(s, key) for s in b], 0)
        out["accuracy" if key == "correct" else "brier"] = {
            **stats.paired_bootstrap(x, y),
            "p": stats.sign_flip_test(x, y),
        }
    conf = [np.concatenate([s.confidence for s in g]) for g in (a, b)]
    corr = [np.concatenate([s.correct for s in g]) for g in (a, b)]
    boot = stats.paired_bootstrap_aurc(conf[0], corr[0], conf[1], corr[1])
    out["aurc"] = {
        "mean_diff": boot["diff"],
        "ci_low": boot["ci_low"],
        "ci_high": boot["ci_high"],
        "p": stats.sign_flip_test_aurc(conf[0], corr[0], conf[1], corr[1]),
    }
    return out


METRICS = {  # summary key -> (column, key in evaluate.summarize's row)
    "accuracy": ("acc", "ts_accuracy"),
    "brier": ("Brier", "ts_brier"),
    "nll": ("NLL", "ts_nll"),
    "ece": ("ECE", "ts_ece"),
    "aurc": ("AURC", "ts_aurc"),
    "cov_at_eps": ("Cov@eps", "ts_cov_at_eps"),
    "T": ("T", "T"),
    "length": ("length", "mean_length"),
}


def summarize_runs(
    root: Path, seeds: Sequence[int], eps: float
) -> tuple[dict, dict[str, list[Scored]]]:
    """Every number of the report, from ``root/seed-<s>/<run>/eval``: per run mean and
    s.d. over seeds of each metric (after temperature scaling), the paired tests the paper
    makes, Table 2 deltas and Table 3 JSDs; and the scored runs. Runs missing for a seed
    are skipped."""
    names = sorted(
        {
            p.parent.parent.name
            for s in seeds
            for p in (root / f"seed-{s}").glob("*/eval/test.jsonl")
        }
    )
    scored: dict[str, list[Scored]] = {}
    for name in names:
        runs = [root / f"seed-{s}" / name for s in seeds]
        if all((r / "eval" / "test.jsonl").exists() for r in runs):
            scored[name] = [score_run(r, eps) for r in runs]
    summary: dict = {"seeds": list(seeds), "eps": eps, "runs": {}, "paired": {}, "forks": {}}
    for name, group in scored.items():
        entry = {k: _mean_sd([g.row[src] for g in group]) for k, (_, src) in METRICS.items()}
        entry["per_seed"] = [g.row for g in group]
        if "ts_jsd" in group[0].row:
            entry["jsd"] = _mean_sd([g.row["ts_jsd"] for g in group])
        if group[0].mixture_jsd is not None:
            entry["mixture_jsd"] = _mean_sd([g.mixture_jsd for g in group])
        summary["runs"][name] = entry
    if RLCD in scored:
        for other in dict.fromkeys((*TABLE1, *TABLE3, *FORKS)):
            if other != RLCD and other in scored:
                summary["paired"][f"{RLCD} - {other}"] = paired(scored[RLCD], scored[other])
    if "calibrate" in scored:
        for fork in FORKS:
            if fork in scored:
                summary["forks"][fork] = {
                    k: _mean_sd(
                        [
                            f.row[src] - c.row[src]
                            for f, c in zip(scored[fork], scored["calibrate"], strict=True)
                        ]
                    )
                    for k, (_, src) in METRICS.items()
                }
    return summary, scored


def _fmt(cell: Mapping, signed: bool = False) -> str:
    sign = "+" if signed else ""
    return f"{cell['mean']:{sign}.3f} ± {cell['sd']:.3f}"


def _p(p: float) -> str:
    return f"{p:.3g}" + ("**" if p < 0.01 else "*" if p < 0.05 else "")


def _diff(res: Mapping) -> str:
    return f"{res['mean_diff']:+.3f} [{res['ci_low']:+.3f}, {res['ci_high']:+.3f}] p={_p(res['p'])}"


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def report_markdown(summary: dict, title: str) -> str:
    """``report.md``: the tables of the paper for this reproduction."""
    runs, eps = summary["runs"], summary["eps"]
    order = [n for n in (*TABLE1, *TABLE3, *FORKS) if n in runs]
    order = list(dict.fromkeys(order + sorted(runs)))
    seeds = ", ".join(map(str, summary["seeds"]))
    md = [
        f"# rlcd_lab reproduction: {title}\n",
        f"Seeds {seeds}. Single-query readouts on test after temperature scaling fitted on "
        f"dev; mean ± s.d. over seeds. Cov@eps at eps = {eps}. `length`: mean sampled "
        "rationale tokens (0: direct answers).\n",
        "## Table 1: methods\n",
    ]
    cols = list(METRICS)
    table1 = [n for n in order if n in TABLE1 or n in ("endtoend", "mixture")]
    md.append(
        _md_table(
            ["run"] + [METRICS[c][0] for c in cols],
            [[n] + [_fmt(runs[n][c]) for c in cols] for n in table1],
        )
    )
    if summary["paired"]:
        md.append(
            "\n## Paired tests (RLCD two-stage minus each run)\n\nDifferences over test items: "
            "accuracy and Brier per item averaged over seeds (bootstrap 95% CI, sign-flip p), "
            "AURC with seeds pooled. Negative Brier/AURC differences favour RLCD. "
            "*: p < 0.05, **: p < 0.01.\n"
        )
        rows = []
        for pair, res in summary["paired"].items():
            rows.append([pair] + [_diff(res[k]) for k in ("accuracy", "brier", "aurc")])
        md.append(_md_table(["comparison", "Δ accuracy", "Δ Brier", "Δ AURC"], rows))
    if summary["forks"]:
        md.append(
            "\n## Table 2: stage-2 continuations from the same stage-1 checkpoint\n\nChange "
            "relative to the stage-1 checkpoint (same seed), mean ± s.d. over seeds.\n"
        )
        keys = ("accuracy", "brier", "aurc", "cov_at_eps", "T", "length")
        md.append(
            _md_table(
                ["fork"] + [f"Δ {METRICS[k][0]}" for k in keys],
                [
                    [f] + [_fmt(d[k], signed=True) for k in keys]
                    for f, d in summary["forks"].items()
                ],
            )
        )
    jsd_runs = [n for n in order if "jsd" in runs[n]]
    if jsd_runs:
        md.append(
            "\n## Table 3: aleatoric outcomes (JSD to q, lower is better)\n\nSingle query after "
            f"temperature scaling, and the mixture of {MIXTURE_M} rationales (no scaling).\n"
        )
        md.append(
            _md_table(
                ["run", "JSD single", f"JSD mixture M={MIXTURE_M}", "Brier", "length"],
                [
                    [
                        n,
                        _fmt(runs[n]["jsd"]),
                        _fmt(runs[n]["mixture_jsd"]) if "mixture_jsd" in runs[n] else "-",
                        _fmt(runs[n]["brier"]),
                        _fmt(runs[n]["length"]),
                    ]
                    for n in jsd_runs
                ],
            )
        )
    return "\n".join(md)


def report_figures(scored: Mapping[str, Sequence[Scored]], eps: float) -> list:
    """Risk-coverage curves (seeds pooled) and a reliability diagram per Table 1 run."""
    names = [n for n in TABLE1 if n in scored] or list(scored)
    pooled = {
        n: (
            np.concatenate([s.confidence for s in scored[n]]),
            np.concatenate([s.correct for s in scored[n]]),
        )
        for n in names
    }
    figs = [plots.risk_coverage_figure(pooled, eps=eps, title="Risk-coverage (seeds pooled)")]
    for n in names:
        probs = np.concatenate([s.probs for s in scored[n]])
        labels = np.concatenate([s.labels for s in scored[n]])
        figs.append(plots.reliability_diagram(probs, labels, title=f"Reliability: {n}"))
    return figs


def write_report(root: Path, seeds: Sequence[int], eps: float, title: str) -> dict:
    """``summary.json``, ``report.md`` and ``report.html`` in ``root``; returns the summary."""
    from markdown_it import MarkdownIt

    summary, scored = summarize_runs(root, seeds, eps)
    runs_cfg = {
        f"seed-{s}/{p.parent.name}": json.loads(p.read_text())
        for s in seeds
        for p in sorted((root / f"seed-{s}").glob("*/config.json"))
    }
    summary["configs"] = runs_cfg
    atomic_write_text(root / "summary.json", json.dumps(summary, indent=1, sort_keys=True))
    md = report_markdown(summary, title)
    atomic_write_text(root / "report.md", md)
    body = MarkdownIt("commonmark").enable("table").render(md)
    figs = report_figures(scored, eps)
    html_figs = [
        f.to_html(full_html=False, include_plotlyjs="inline" if i == 0 else False)
        for i, f in enumerate(figs)
    ]
    style = (
        "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;font-size:14px}td,th{border:1px solid #ccc;"
        "padding:3px 8px;text-align:right}td:first-child{text-align:left}"
    )
    html = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
        f"<style>{style}</style></head><body>{body}<h2>Figures</h2>{''.join(html_figs)}"
        "</body></html>"
    )
    atomic_write_text(root / "report.html", html)
    return summary
