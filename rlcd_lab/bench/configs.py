"""Configs of ``rlcd-lab bench typed`` and ``rlcd-lab bench attack`` (frozen dataclasses
parsed by tyro). Torch-free and numpy-free: the command line imports this module for
``--help``; the benches themselves live in :mod:`rlcd_lab.bench.typed` and
:mod:`rlcd_lab.bench.attack`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import tyro


@dataclass(frozen=True)
class BenchTarget:
    """What is benchmarked, on which items, answered how (shared by both benches)."""

    checkpoint: tyro.conf.Positional[Path | None] = None
    """Checkpoint directory answered in-process; leave out with --url."""
    url: str | None = None
    """Base URL of a running `rlcd-lab serve` (POST /v1/systemone) instead of a checkpoint."""
    api_key: str | None = None
    """Bearer key for --url; default: $RLCD_API_KEY (unset: no key)."""
    timeout_s: float = 60.0
    """Seconds to wait for each answer from --url (then a clear error naming the request)."""
    model: str | None = None
    """Model name sent over the wire; default: the first name GET /v1/models lists."""
    task: str | None = None
    """A synthetic task (verify, verify-mixed, verify-check, facts, aleatoric) or a task-item
    JSONL file; default: the checkpoint's rlcd.json task (required with --url)."""
    split: Literal["train", "dev", "test"] = "test"
    """Which split of the task the items come from."""
    n_items: int = 200
    """Items of the split (the first N)."""
    mode: Literal["direct", "reason", "auto"] = "reason"
    """How decisions are computed (rlcd_lab.decide); reason samples M rationales."""
    m: int = 4
    """Rationales per question (reason, auto)."""
    seed: int = 0
    """Seed of the clean decisions (re-runs and variants use seed+1, seed+2, ...)."""
    out: Path | None = None
    """Folder for summary.json, report.md and report.html; default runs/bench/<name>/<bench>."""
    device: str = "cpu"
    """Where the model runs (cpu, cuda, cuda:1, ...)."""
    threads: int | None = 1
    """torch CPU threads (None: torch's default)."""
    verify: bool = True
    """Check the checkpoint's checksums (--no-verify skips)."""

    def validate(self) -> None:
        """``ValueError`` (one line naming the flag and its value) for a setting out of
        range, before anything is loaded or sent."""
        if self.url is not None:
            check_url(self.url)
        positive("--timeout-s", self.timeout_s)
        for flag, value in (("--m", self.m), ("--n-items", self.n_items)):
            at_least_one(flag, value)


@dataclass(frozen=True)
class TypedBenchConfig(BenchTarget):
    """TypedBench-style report card: accuracy over paraphrases and option orders, ECE vs its
    noise floor, AURC/Cov@eps, RPS (ordinal), realised cost, latency and tokens."""

    n_bins: int = 15
    """ECE bins."""
    n_sim: int = 2000
    """Simulations of the calibrated predictor's ECE (the noise floor)."""
    eps: float = 0.05
    """Error budget of Cov@eps."""
    cost_ratio: float = 5.0
    """The costly error of the asymmetric cost matrices costs this many times a plain one."""
    ordinal: bool = False
    """Ask score questions (the options as ordered levels) and report the RPS; only for a
    task whose options are ordered."""
    options_grid: tuple[int, ...] = (2, 3, 4, 6, 8)
    """Options per question in the latency grid."""
    questions_grid: tuple[int, ...] = (1, 2, 4, 8)
    """Questions per request in the latency grid."""
    latency_states: int = 8
    """States (requests) timed per grid cell."""
    n_boot: int = 2000
    """Bootstrap replicates of the cost differences."""

    def validate(self) -> None:
        """:meth:`BenchTarget.validate`, then this bench's own settings."""
        super().validate()
        if not (math.isfinite(self.eps) and 0 < self.eps < 1):
            raise ValueError(f"--eps must be an error budget in (0, 1), got {self.eps}")
        positive("--cost-ratio", self.cost_ratio)
        for flag, value in (
            ("--n-bins", self.n_bins),
            ("--n-sim", self.n_sim),
            ("--n-boot", self.n_boot),
            ("--latency-states", self.latency_states),
        ):
            at_least_one(flag, value)


@dataclass(frozen=True)
class AttackBenchConfig(BenchTarget):
    """JevAdvBench-style robustness: single-edit attacks on each request vs the model's own
    clean decision, relative to the flip rate of identical re-runs."""

    n_items: int = 100
    reruns: int = 2
    """Identical re-runs (other seeds) whose flip rate is the noise floor."""
    threshold: float | None = None
    """Routing threshold on the chance-corrected confidence; default
    rlcd_lab.math.routing.DEFAULT_CHANCE_CORRECTED_THRESHOLD (0.8)."""
    n_boot: int = 2000
    """Bootstrap replicates of the excess flip rates."""

    def validate(self) -> None:
        """:meth:`BenchTarget.validate`, then this bench's own settings."""
        super().validate()
        at_least_one("--reruns", self.reruns)
        at_least_one("--n-boot", self.n_boot)
        if self.threshold is not None and not 0 <= self.threshold <= 1:
            raise ValueError(f"--threshold must be in [0, 1], got {self.threshold}")


def positive(flag: str, value: float) -> None:
    """``ValueError`` unless ``value`` is a finite number > 0."""
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{flag} must be a finite number > 0, got {value}")


def at_least_one(flag: str, value: int) -> None:
    """``ValueError`` unless ``value`` is an integer >= 1."""
    if value < 1:
        raise ValueError(f"{flag} must be >= 1, got {value}")


def check_url(url: str) -> None:
    """``ValueError`` unless ``url`` is an http(s) URL with a host (and a valid port)."""
    why = ""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a port that is not a number in range)
    except ValueError as err:
        why = str(err)
    else:
        if parts.scheme not in ("http", "https") or not parts.hostname:
            why = "it needs http:// or https:// and a host"
    if why:
        raise ValueError(
            f"--url must be a server's base URL such as http://127.0.0.1:8000, got {url!r} ({why})"
        )
