"""Small helpers every training loop shares: the run directory, the question stream,
optimizer state on disk, and what to log about a batch of rationales.

Resume contract: a run killed at any moment (SIGKILL included) restarts from its latest
complete checkpoint and, on CPU with a fixed seed, ends bit-identical to an uninterrupted
run. That holds because (1) checkpoints are written atomically with the optimizer state,
(2) the batch of step ``s`` is a pure function of ``(seed, s)`` (``QuestionStream``), and
(3) every random draw inside a step is seeded by ``(seed, s)`` (``step_seed``).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..io import atomic_write_text
from ..models import save_checkpoint
from ..tasks import TaskItem, read_items
from ..tasks.synthetic import TASKS, get_task

OPTIMIZER_FILE = "optimizer.safetensors"
STATE_FILE = "trainer_state.json"


def config_dict(cfg) -> dict:
    """A frozen config dataclass as JSON-ready dict (paths as strings)."""
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=str))


def step_seed(seed: int, step: int, salt: int = 0) -> int:
    """A 31-bit seed for the random draws of one step (independent across steps)."""
    return int(np.random.default_rng([seed, step, salt]).integers(2**31 - 1))


def load_task_items(task: str, split: str) -> list[TaskItem]:
    """Items of a synthetic task's split, or of a task-item JSONL file (``task`` a path;
    ``split`` then picks ``<stem>.<split>.jsonl`` beside it if that exists)."""
    if task in TASKS:
        return get_task(task).split(split)
    path = Path(task)
    sibling = path.with_name(f"{path.stem}.{split}.jsonl")
    if sibling.is_file():
        return read_items(sibling)
    if path.is_file():
        return read_items(path)
    raise ValueError(f"task must be one of {sorted(TASKS)} or a task-item JSONL file, got {task!r}")


@dataclass(frozen=True)
class Batch:
    """Questions of one step and the outcome drawn for each visit."""

    items: list[TaskItem]
    y: torch.Tensor  # (B,) outcome index


class QuestionStream:
    """The question/outcome stream: the same for every method given ``seed``.

    Step ``s`` takes positions ``s*B .. s*B+B-1`` of an endless sequence of shuffled
    epochs over ``items``; an item with ``q`` gets a fresh outcome ``Y ~ q`` on every
    visit, an item without one its ``label``. Pure function of ``(seed, step)``.
    """

    def __init__(self, items: Sequence[TaskItem], batch_size: int, seed: int):
        if not items:
            raise ValueError("the training split is empty")
        self.items, self.batch_size, self.seed = list(items), batch_size, seed
        self._perms: dict[int, np.ndarray] = {}

    def _perm(self, epoch: int) -> np.ndarray:
        if epoch not in self._perms:
            self._perms[epoch] = np.random.default_rng([self.seed, epoch, 7]).permutation(
                len(self.items)
            )
        return self._perms[epoch]

    def batch(self, step: int) -> Batch:
        n, out, ys = len(self.items), [], []
        for j in range(self.batch_size):
            pos = step * self.batch_size + j
            item = self.items[int(self._perm(pos // n)[pos % n])]
            if item.q is not None:
                rng = np.random.default_rng([self.seed, step, j, 11])
                ys.append(int(rng.choice(len(item.q), p=np.asarray(item.q) / sum(item.q))))
            else:
                ys.append(int(item.label))
            out.append(item)
        return Batch(out, torch.tensor(ys))


def save_optimizer(path: Path, opt: torch.optim.Optimizer) -> None:
    """Optimizer state as safetensors (tensors) + JSON (everything else); no pickle."""
    state = opt.state_dict()
    tensors, scalars = {}, {}
    for pid, s in state["state"].items():
        for k, v in s.items():
            if torch.is_tensor(v):
                tensors[f"{pid}.{k}"] = v.detach().contiguous().cpu()
            else:
                scalars[f"{pid}.{k}"] = v
    save_file(tensors, str(path / OPTIMIZER_FILE))
    (path / "optimizer.json").write_text(
        json.dumps({"param_groups": state["param_groups"], "scalars": scalars})
    )


def load_optimizer(path: Path, opt: torch.optim.Optimizer) -> None:
    """Inverse of ``save_optimizer`` (tensors moved to each parameter's device)."""
    tensors = load_file(str(path / OPTIMIZER_FILE))
    meta = json.loads((path / "optimizer.json").read_text())
    state: dict[int, dict] = {}
    for key, v in list(tensors.items()) + list(meta["scalars"].items()):
        pid, name = key.split(".", 1)
        state.setdefault(int(pid), {})[name] = v
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


class RunDir:
    """``config.json``, ``log.jsonl``, ``checkpoints/step-N/`` and ``eval/`` of one run.

    Opening an existing run directory resumes it: the config must match (except
    ``steps``), the latest complete checkpoint gives ``start_step``, and log lines past it
    (written after that checkpoint by a run that was killed) are dropped.
    """

    def __init__(self, path: Path, cfg, resume: bool):
        self.path = Path(path)
        self.config = config_dict(cfg)
        cfg_file = self.path / "config.json"
        if cfg_file.exists():
            old = json.loads(cfg_file.read_text())
            if not resume:
                raise FileExistsError(
                    f"{self.path} already holds a run; pass --resume to continue it"
                )
            diff = sorted(
                k
                for k in set(old) | set(self.config)
                if k not in ("steps", "resume") and old.get(k) != self.config.get(k)
            )
            if diff:
                raise ValueError(f"cannot resume {self.path}: config differs in {diff}")
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(cfg_file, json.dumps(self.config, indent=2))
        self.latest = self._latest()
        self.start_step = (
            0 if self.latest is None else json.loads((self.latest / STATE_FILE).read_text())["step"]
        )
        self._truncate_log()

    def _latest(self) -> Path | None:
        steps = []
        for d in (self.path / "checkpoints").glob("step-*"):
            m = re.fullmatch(r"step-(\d+)", d.name)
            if m and (d / STATE_FILE).exists():
                steps.append((int(m.group(1)), d))
        return max(steps)[1] if steps else None

    def _truncate_log(self) -> None:
        log = self.path / "log.jsonl"
        if not log.exists():
            return
        keep = [
            line
            for line in log.read_text().splitlines()
            if line.strip() and json.loads(line)["step"] < self.start_step
        ]
        atomic_write_text(log, "".join(line + "\n" for line in keep))

    def log(self, row: dict) -> None:
        """Append one JSON line (``row`` must hold ``step``)."""
        with open(self.path / "log.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(row, default=float) + "\n")

    def save(
        self,
        step: int,
        model: PreTrainedModel,
        tok: PreTrainedTokenizerBase,
        opt,
        meta: dict,
        keep: int = 2,
    ) -> Path:
        """Atomic ``checkpoints/step-N`` (model, tokenizer, rlcd.json, optimizer, state);
        keeps the ``keep`` newest."""
        ckpt = self.path / "checkpoints" / f"step-{step}"
        save_checkpoint(ckpt, model, tok, {**meta, "step": step})
        save_optimizer(ckpt, opt)
        (ckpt / STATE_FILE).write_text(
            json.dumps({"step": step})
        )  # written last: marks it complete
        done = sorted(
            (int(d.name.split("-")[1]), d)
            for d in (self.path / "checkpoints").glob("step-*")
            if (d / STATE_FILE).exists()
        )
        for _, d in done[:-keep]:
            shutil.rmtree(d, ignore_errors=True)
        return ckpt

    def write_eval(self, name: str, rows: list[dict]) -> Path:
        """Eval dump ``eval/<name>.jsonl`` (one row per item), atomically."""
        return atomic_write_text(
            self.path / "eval" / f"{name}.jsonl", "".join(json.dumps(r) + "\n" for r in rows)
        )


def rationale_stats(
    u: torch.Tensor, lengths: torch.Tensor, forced: torch.Tensor
) -> dict[str, float]:
    """What to log about a batch of rationales: mean length (sampled tokens), forced-marker
    rate, and the variance of the readout across rationales of the same question,
    ``mean_x E_r ||u(x, r) - p(x)||^2`` (Proposition 1's diversity term; 0 when all
    rationales agree, e.g. after System-One collapse). ``u`` is ``(B, M, K)``."""
    diversity = ((u - u.mean(1, keepdim=True)) ** 2).sum(-1).mean()
    return {
        "rationale_length": float(lengths.float().mean()),
        "forced_rate": float(forced.float().mean()),
        "readout_variance": float(diversity),
    }


def pick_device(device: str) -> torch.device:
    """``"auto"`` -> CUDA if available, else CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)
