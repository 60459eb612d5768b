"""Small helpers every training loop shares: the question stream, optimizer state and
step checkpoints on disk (``save_step``), data parallelism, and what to log about a batch
of rationales. The run directory itself (``RunDir``, ``read_log``, ``is_run_dir``,
``releases_run``, ``config_dict``, ``config_diff``) is :mod:`rlcd_lab.files.rundir`.

Start at :func:`setup`, which every loop calls: it opens (or resumes) the run and returns a
:class:`Session` (data parallelism on ``accelerate``); each step draws its questions from
:class:`QuestionStream` (:func:`sample_batch`) and is saved by :func:`save_step`."""

from __future__ import annotations

import importlib.util
import json
import os
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file, save_file
from tqdm import trange
from transformers import PreTrainedModel, PreTrainedTokenizerBase, get_scheduler

from rlcd_lab.evaluate import MAX_RATIONALES, check_items, eval_warnings, run_eval
from rlcd_lab.files.rundir import (
    OPTIMIZER_FILE,
    CheckpointError,
    RunDir,
    config_dict,
    final_dir,
)
from rlcd_lab.lm.checkpoint import save_checkpoint
from rlcd_lab.lm.loading import check_checkpoint, load_checkpoint
from rlcd_lab.methods import method_of
from rlcd_lab.methods.configs import SamplingConfig, TrainConfig
from rlcd_lab.reader.decoding import CopySampler, merged_sampler, pack_frozen
from rlcd_lab.reader.rationales import default_sampler, mix_seed, sample_questions
from rlcd_lab.reader.reading import score_rationales
from rlcd_lab.reader.sampling import Sampler
from rlcd_lab.summary import summarize
from rlcd_lab.tasks import load_task_items
from rlcd_lab.tasks.items import TaskItem


def step_seed(seed: int, step: int, salt: int = 0) -> int:
    """A 31-bit seed for the random draws of one step (independent across steps)."""
    return int(np.random.default_rng([seed, step, salt]).integers(2**31 - 1))


@dataclass(frozen=True)
class Batch:
    """Questions of one step (or this process's share of them) and the outcome drawn for
    each visit; ``index``: each question's position in the whole step, ``step``: the
    stream's step (together they seed the step's draws)."""

    items: list[TaskItem]
    y: torch.Tensor  # (B,) outcome index
    index: list[int]
    step: int


class QuestionStream:
    """The question/outcome stream: the same for every method given ``seed``.

    Step ``s`` takes positions ``s*B .. s*B+B-1`` of an endless sequence of shuffled
    epochs over ``items``; an item with ``q`` gets a fresh outcome ``Y ~ q`` on every
    visit, an item without one its ``label``. Pure function of ``(seed, start + step)``:
    a run with ``start`` (``TrainConfig.stream_start``) continues the stream there.
    """

    def __init__(self, items: Sequence[TaskItem], batch_size: int, seed: int, start: int = 0):
        if not items:
            raise ValueError("the training split is empty")
        self.items, self.batch_size, self.seed = list(items), batch_size, seed
        self.start = start
        self._perms: dict[int, np.ndarray] = {}

    def _perm(self, epoch: int) -> np.ndarray:
        if epoch not in self._perms:
            self._perms[epoch] = np.random.default_rng([self.seed, epoch, 7]).permutation(
                len(self.items)
            )
        return self._perms[epoch]

    def batch(self, step: int, positions: Sequence[int] | None = None) -> Batch:
        """The questions of the run's ``step`` at ``positions`` (default: all ``batch_size``)."""
        positions = range(self.batch_size) if positions is None else positions
        step += self.start
        n, out, ys = len(self.items), [], []
        for j in positions:
            pos = step * self.batch_size + j
            item = self.items[int(self._perm(pos // n)[pos % n])]
            if item.q is not None:
                rng = np.random.default_rng([self.seed, step, j, 11])
                ys.append(int(rng.choice(len(item.q), p=np.asarray(item.q) / sum(item.q))))
            else:
                ys.append(int(item.label))
            out.append(item)
        return Batch(out, torch.tensor(ys), list(positions), step)


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
    """Inverse of ``save_optimizer`` (tensors moved to each parameter's device); a missing,
    corrupt or mismatched optimizer state is a ``CheckpointError`` naming the file."""
    try:
        tensors = load_file(str(path / OPTIMIZER_FILE))
    except Exception as err:  # safetensors' error type has no stable import name
        raise CheckpointError(f"{path / OPTIMIZER_FILE}: cannot read it ({err})") from err
    try:
        meta = json.loads((path / "optimizer.json").read_text())
        state: dict[int, dict] = {}
        for key, v in list(tensors.items()) + list(meta["scalars"].items()):
            pid, name = key.split(".", 1)
            state.setdefault(int(pid), {})[name] = v
        opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CheckpointError(
            f"{path}/optimizer.json: not the optimizer state of this model ({err!r})"
        ) from err


def save_step(
    run: RunDir,
    step: int,
    model: PreTrainedModel,
    tok: PreTrainedTokenizerBase,
    opt,
    meta: dict,
    keep: int = 2,
) -> Path:
    """Atomic ``checkpoints/step-N`` of ``run`` (model, tokenizer, rlcd.json, optimizer,
    state, and the checksums of the model and optimizer weights); keeps the ``keep``
    newest (``RunDir.prune``)."""
    ckpt = run.checkpoint(step)

    def trainer_state(tmp: Path) -> None:
        save_optimizer(tmp, opt)
        RunDir.write_state(tmp, step)  # marks it complete

    meta = {**meta, "step": step, "stream_end": meta["stream_start"] + step}
    save_checkpoint(ckpt, model, tok, meta, extra=trainer_state)
    run.prune(keep)
    return ckpt


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


def _device_problem(device: str) -> str | None:
    if device == "auto":
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        return f"device must be auto, cpu, cuda, cuda:N or mps, got {device!r}"
    if dev.type == "cuda" and not torch.cuda.is_available():
        return f"device {device!r}: no CUDA device is available (use --device cpu or auto)"
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        return f"device {device!r}: there are {torch.cuda.device_count()} CUDA devices"
    if dev.type == "mps" and not torch.backends.mps.is_available():
        return f"device {device!r}: MPS is not available"
    return None


def check_vllm(cfg: TrainConfig) -> None:
    """``--sampler vllm`` needs a CUDA device and the ``vllm`` package (``ValueError``)."""
    if not torch.cuda.is_available() or cfg.device == "cpu":
        raise ValueError("--sampler vllm needs a CUDA device; use --sampler hf")
    if importlib.util.find_spec("vllm") is None:
        raise ValueError("--sampler vllm needs the vllm package: pip install 'rlcd_lab[vllm]'")


def pick_sampler(cfg: TrainConfig, model: PreTrainedModel) -> Sampler:
    """The sampler of ``cfg.sampler``: ``hf``, the policy's own tokens: for a LoRA model a
    float32 copy with the adapter merged, made once per step (``decoding.merged_sampler``),
    else the in-process model's default (``reader.default_sampler``:
    ``decoding.kv_sampler``, the tokens of ``reader.hf_sampler``, faster); ``fast``,
    ``decoding.fast_sampler`` (a packed copy of the weights in the machine's fastest
    dtype, for models where that pays); ``bf16``,
    ``decoding.CopySampler`` in bfloat16; ``vllm``, a vLLM engine."""
    if cfg.sampler == "hf":
        merged = merged_sampler(model)
        return default_sampler(model) if merged is None else merged
    if cfg.sampler == "fast":
        from rlcd_lab.reader.decoding import fast_sampler

        return fast_sampler(model)
    if cfg.sampler == "bf16":
        return CopySampler(torch.bfloat16)
    from rlcd_lab.train.vllm import VLLMSampler

    return VLLMSampler(cfg)


def check_train_config(cfg: TrainConfig) -> None:
    """Reject settings a run cannot use before anything is created or loaded.

    The config checked its own numbers when it was built (``__post_init__``); here what
    needs the method's row, the machine or the files: rationales per question in range
    (``check_rationales``, for a method that samples them), a usable ``device``, ``init``
    (and ``ref``) checkpoints that exist and look sound (``loading.check_checkpoint``, an
    adapter's base included; weights are checked at load), the task's train and dev splits
    (and test, when ``test_items``), ``out`` not a file, and for ``overwrite`` no
    checkpoint to load inside the run it would delete. Raises ``ValueError``
    (``CheckpointError`` for a checkpoint) or ``FileNotFoundError`` with one sentence naming
    the setting. What needs the tokenizer and the model (option labels, context length) is
    checked when they are loaded, before the first step (``_open``; a run that cannot start
    leaves nothing behind, ``RunDir.abandon``).
    """
    sampling = isinstance(cfg, SamplingConfig)
    if sampling:
        check_rationales(cfg)
    if (problem := _device_problem(cfg.device)) is not None:
        raise ValueError(problem)
    if sampling and cfg.sampler == "vllm":
        check_vllm(cfg)
    if cfg.tracker != "none" and importlib.util.find_spec(cfg.tracker) is None:
        raise ValueError(f"--tracker {cfg.tracker} needs the {cfg.tracker} package (pip install)")
    if cfg.resume and cfg.overwrite:
        raise ValueError("--resume and --overwrite exclude each other; pass one")
    if cfg.out.exists() and not cfg.out.is_dir():
        raise FileExistsError(f"--out {cfg.out} exists and is not a directory")
    for name, path in (("init", cfg.init), ("ref", cfg.ref if sampling else None)):
        if path is None:
            continue
        try:
            check_checkpoint(path)
        except (CheckpointError, FileNotFoundError) as err:
            raise type(err)(f"--{name}: {err}") from err
        if cfg.overwrite and cfg.out.exists():
            inside = Path(os.path.realpath(path)).is_relative_to(os.path.realpath(cfg.out))
            if inside:
                raise ValueError(
                    f"--overwrite would delete --{name} {path}: it lies inside --out {cfg.out}"
                )
    for split in ("train", "dev", "test") if cfg.test_items else ("train", "dev"):
        load_task_items(cfg.task, split)


def check_rationales(cfg: SamplingConfig) -> None:
    """``ValueError`` naming ``--m`` unless it is at least what the method needs (its row's
    ``min_rationales`` in ``rlcd_lab.methods``) and at most
    :data:`rlcd_lab.evaluate.MAX_RATIONALES` (one question's rationales are sampled in one
    batch)."""
    need, why = method_of(cfg).min_rationales(cfg)
    if cfg.m < need:
        raise ValueError(
            f"--m (--num-rationales) must be >= {need} for {cfg.method or 'this method'}: "
            f"{why}; got {cfg.m}"
        )
    if cfg.m > MAX_RATIONALES:
        raise ValueError(
            f"--m (--num-rationales) must be at most {MAX_RATIONALES} per question, got {cfg.m}"
        )


@dataclass
class Session:
    """What a training loop holds: run dir, model, tokenizer, optimizer, data, reference.

    ``model`` is the model itself (sampling, evaluation, saving); ``wrapped`` is what a
    forward pass with gradient calls (DDP-wrapped under several processes, else
    ``model``). ``run`` is None except on the main process, the only one that writes.

    Data parallelism runs on ``accelerate`` (one code path for one process, N CPU
    processes with gloo, N GPUs with NCCL): launched by ``accelerate launch`` or
    ``torchrun``, each process takes ``batch_size / W`` questions of every step (the M
    rationales of a question stay on one process: the leave-one-out baseline needs the
    whole group), the gradient is averaged by DDP. Every loss is a mean over the step's
    questions (or rationales) of all processes, so W processes with ``batch_size / W``
    each, or ``grad_accum`` micro-batches, give the update of one batch."""

    cfg: Any
    acc: Accelerator
    run: RunDir | None
    start_step: int
    device: torch.device
    model: PreTrainedModel
    wrapped: torch.nn.Module
    tok: PreTrainedTokenizerBase
    meta: dict
    ref: PreTrainedModel | None
    params: list[torch.Tensor]
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LRScheduler
    stream: QuestionStream
    dev_items: list[TaskItem]
    eval_kw: dict
    sampler: Sampler | None  # pick_sampler(cfg, model); None: the method samples none
    lr_used: float = 0.0  # the learning rate of the latest optimizer step

    @property
    def main(self) -> bool:
        """Whether this is the main process (the one that writes and evaluates)."""
        return self.acc.is_main_process

    def steps(self, desc: str):
        """The steps still to run, with a progress bar on the main process (a resumed run's
        bar starts at its ``start_step``, not at 0). ``disable`` is passed only to hide the
        other processes' bars: an explicit ``disable`` overrides tqdm's ``TQDM_DISABLE``
        environment variable, which the notebooks set."""
        hide = {} if self.main else {"disable": True}
        return trange(
            self.start_step,
            self.cfg.steps,
            desc=desc,
            initial=self.start_step,
            total=self.cfg.steps,
            **hide,
        )

    def micro_batches(self, step: int) -> Iterator[Batch]:
        """This process's questions of ``step`` in ``grad_accum`` micro-batches (process
        ``r`` of ``W`` takes positions ``r B/W .. (r+1) B/W - 1``). The loop body of every
        micro-batch but the last runs without DDP's gradient exchange."""
        cfg, world = self.cfg, self.acc.num_processes
        share = cfg.batch_size // world
        size = share // cfg.grad_accum
        first = self.acc.process_index * share
        for i in range(cfg.grad_accum):
            last = i == cfg.grad_accum - 1
            sync = nullcontext() if last or world == 1 else self.acc.no_sync(self.wrapped)
            with sync:
                yield self.stream.batch(step, range(first + i * size, first + (i + 1) * size))

    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate the gradient of one micro-batch's ``loss`` (a mean over it)."""
        self.acc.backward(loss / self.cfg.grad_accum)

    def step(self) -> float:
        """Clip, optimizer and schedule step, zero the gradient; returns the gradient norm
        before clipping (of the gradient averaged over processes)."""
        norm = float(self.acc.clip_grad_norm_(self.params, self.cfg.grad_clip))
        self.lr_used = self.opt.param_groups[0]["lr"]
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        if hasattr(self.sampler, "sync"):  # an engine holding a copy of the weights
            self.sampler.sync()
        return norm

    def total(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (detached) summed over processes: the denominator of a mean over the whole
        step that the loop cannot know from its own share (e.g. a token count)."""
        x = x.detach().float()
        return self.acc.reduce(x, "sum") if self.acc.num_processes > 1 else x

    def end_step(self, step: int, rows: list[dict]) -> None:
        """Average the micro-batches' log rows over micro-batches and processes, then (main
        process) the dev eval when due, the log line, and the checkpoint when due."""
        cfg = self.cfg
        row = self._average(rows)
        row["step"], row["lr"] = step, self.lr_used
        if self.main:
            if cfg.eval_every and (step + 1) % cfg.eval_every == 0:
                self.model.eval()
                dev = summarize(run_eval(self.model, self.tok, self.dev_items, **self.eval_kw))
                self.model.train()
                keys = ("accuracy", "brier", "ece", "aurc", "mean_length")
                row |= {f"dev_{k}": dev[k] for k in keys}
            self.run.log(row)
            if cfg.tracker != "none":
                self.acc.log({k: v for k, v in row.items() if isinstance(v, float)}, step=step)
            if (step + 1) % cfg.save_every == 0 or step + 1 == cfg.steps:
                save_step(self.run, step + 1, self.model, self.tok, self.opt, self.meta)

    def _average(self, rows: list[dict]) -> dict:
        """Numbers averaged over ``rows`` and then over processes; others from ``rows[0]``."""
        keys = [k for k, v in rows[0].items() if isinstance(v, (int, float)) and k != "step"]
        keys = [k for k in keys if all(isinstance(r.get(k), (int, float)) for r in rows)]
        out = dict(rows[0])
        if keys:
            where = self.acc.device if self.acc.num_processes > 1 else "cpu"  # NCCL: on GPU
            means = torch.tensor([[r[k] for k in keys] for r in rows], dtype=torch.float64)
            means = means.to(where).mean(0)
            if self.acc.num_processes > 1:
                means = self.acc.reduce(means, "mean")
            out |= dict(zip(keys, means.tolist(), strict=True))
        return out

    def finish(self) -> Path:
        """Final dev/test eval dumps, temperature fitted on dev, and the ``final/``
        checkpoint (main process; the others wait for it); then the run folder's lock is
        released."""
        cfg = self.cfg
        if self.main:
            self._final_eval()
            self.run.close()
        self.acc.wait_for_everyone()
        if self.acc.num_processes > 1:
            # Let DDP's reducer go while the process group lives, and give gloo's worker
            # threads a moment to release the last collective: a process group destroyed
            # while the GIL is held otherwise waits on a worker that waits on the GIL.
            self.wrapped = self.model
            self.acc.free_memory()
            time.sleep(0.05)
        self.acc.end_training()
        return cfg.out

    def _final_eval(self) -> None:
        """Dev and test dumps, T fitted on dev, and ``final/`` whose ``rlcd.json`` metrics
        hold both summaries and ``warnings``: :func:`rlcd_lab.evaluate.eval_warnings` of
        the test rows (the dev rows without a test split) under that T, as ``rlcd-lab
        eval`` warns."""
        cfg, run = self.cfg, self.run
        self.model.eval()
        dev_rows = run_eval(self.model, self.tok, self.dev_items, progress=True, **self.eval_kw)
        run.write_eval("dev", dev_rows)
        result = {"dev": summarize(dev_rows, dev_rows=dev_rows)}
        rows = dev_rows
        if cfg.test_items:
            test_items = load_task_items(cfg.task, "test")[: cfg.test_items]
            rows = run_eval(self.model, self.tok, test_items, progress=True, **self.eval_kw)
            run.write_eval("test", rows)
            result["test"] = summarize(rows, dev_rows=dev_rows)
        result["warnings"] = eval_warnings(rows, result["dev"]["T"])
        meta = {
            **self.meta,
            "step": cfg.steps,
            "stream_end": self.stream.start + cfg.steps,
            "T": result["dev"]["T"],  # rlcd.json key of the fitted calibration T
            "metrics": result,
        }
        if cfg.save_dtype != "float32":
            self.model.to(getattr(torch, cfg.save_dtype))
        save_checkpoint(final_dir(run.path), self.model, self.tok, meta)


def setup(cfg: TrainConfig, needs_ref: bool, eval_mode: str = "reason") -> Session:
    """Open (or resume) the run, load model (+ frozen reference), optimizer and data.

    Whatever dtype the checkpoint was saved in (bf16 for most hub models), the trained
    weights, the AdamW state and the reference model are ``cfg.dtype`` (float32 by
    default): a bf16 weight cannot take an update much below 2^-8 of its size (at lr 2e-6
    most would never move); ``--bf16`` gives bf16 compute through autocast only.

    Settings are checked before the run directory is touched (``check_train_config``);
    only the main process opens it (and holds its lock, ``RunDir``), and the others learn
    from it where to start (or why it could not open). If loading, or checking the task's
    items against the tokenizer and the model's context (``evaluate.check_items``), then
    fails, the run directory is left as it was (``RunDir.abandon``).

    One writer per run folder: the lock is an OS lock on ``.<name>.lock`` beside the
    folder (``io.FolderLock``, released when the run ends, fails or is interrupted:
    ``releases_run`` on each loop, or the process's exit); a second training on the same
    ``--out`` is refused at once with one line naming the holder.

    Resume: a run killed at any moment (SIGKILL included) restarts from its latest
    complete checkpoint and, on CPU with a fixed seed, ends bit-identical to an
    uninterrupted run, because (1) checkpoints are written atomically with the optimizer
    state (:func:`save_step`), (2) the batch of step ``s`` is a pure function of
    ``(seed, s)`` (:class:`QuestionStream`), and (3) every random draw inside a step is
    seeded by ``(seed, s)`` and the question's position in the step (:func:`step_seed`,
    ``reader.mix_seed``), so it does not depend on how the step is split across processes
    or micro-batches either."""
    check_train_config(cfg)
    # accelerate sets up a process group only for CUDA (or when told cpu=True): with
    # "auto" on a machine without CUDA every launched process would train alone
    cpu = cfg.device == "cpu" or (cfg.device == "auto" and not torch.cuda.is_available())
    acc = Accelerator(
        cpu=cpu,
        log_with=None if cfg.tracker == "none" else cfg.tracker,
        project_dir=cfg.out,
    )
    world = acc.num_processes
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched != world:  # each process would write the run folder on its own
        raise RuntimeError(
            f"launched as {launched} processes, but --device {cfg.device} joins "
            f"{world}; use --device auto or cpu (gloo) or one CUDA device per process"
        )
    if cfg.batch_size % (world * cfg.grad_accum):
        raise ValueError(
            f"--batch-size {cfg.batch_size} must be a multiple of the {world} process(es) x "
            f"--grad-accum {cfg.grad_accum}"
        )
    run, opened = None, [None, 0, None]  # error, start step, latest checkpoint
    if acc.is_main_process:
        try:
            run = RunDir(cfg.out, cfg, cfg.resume, overwrite=cfg.overwrite)
            opened = [None, run.start_step, None if run.latest is None else str(run.latest)]
        except Exception as err:  # every process must take part in the broadcast below
            opened[0] = err
    if world > 1:
        shared = [None if opened[0] is None else str(opened[0]), *opened[1:]]
        broadcast_object_list(shared)
        if shared[0] is not None and opened[0] is None:
            raise RuntimeError(f"the main process could not open the run: {shared[0]}")
        opened[1:] = shared[1:]
    if opened[0] is not None:
        raise opened[0]
    try:
        session = _open(cfg, acc, run, opened[1], opened[2], needs_ref, eval_mode)
    except BaseException:
        if run is not None:
            run.abandon()
        raise
    if run is not None:
        run.commit()
        if cfg.tracker != "none":
            acc.init_trackers(cfg.out.name, config=config_dict(cfg))
    return session


def _open(
    cfg: TrainConfig,
    acc: Accelerator,
    run: RunDir | None,
    start_step: int,
    latest: str | None,
    needs_ref: bool,
    eval_mode: str,
) -> Session:
    device = acc.device if acc.num_processes > 1 else pick_device(cfg.device)
    dtype = getattr(torch, cfg.dtype)
    model, tok, meta = load_checkpoint(
        latest or cfg.init, device, dtype=dtype, trainable=True, verify=cfg.verify
    )
    train_items = load_task_items(cfg.task, "train")
    dev_items = load_task_items(cfg.task, "dev")[: cfg.eval_items]
    splits = {"train": train_items, "dev": dev_items}
    if cfg.test_items:
        splits["test"] = load_task_items(cfg.task, "test")[: cfg.test_items]
    # a direct answer has no rationale budget (SFT's config has none)
    budget = {} if eval_mode == "direct" else {"max_new_tokens": cfg.max_new_tokens}
    for split, items in splits.items():  # before any model work: labels, context length
        check_items(
            model, tok, items, mode=eval_mode, **budget, marker=meta["marker"], sep=meta["sep"],
            where=f"task {cfg.task} {split} split",
        )  # fmt: skip
    if cfg.lora_r and not isinstance(model, PeftModel):
        lora = LoraConfig(r=cfg.lora_r, lora_alpha=2 * cfg.lora_r, target_modules="all-linear")
        with torch.random.fork_rng(devices=[]):  # a seeded adapter initialisation
            torch.manual_seed(cfg.seed)
            model = get_peft_model(model, lora)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ref = None
    if needs_ref:
        ref = load_checkpoint(cfg.ref or cfg.init, device, dtype, verify=cfg.verify)[0]
        if isinstance(ref, PeftModel):  # frozen: its adapter merged (W + B A), a plain pass
            ref = ref.merge_and_unload()
        ref.requires_grad_(False)
        if not cfg.bf16:  # read without gradient every step: its products packed
            ref = pack_frozen(ref)
    if cfg.bf16:
        for m in (model, ref):
            if m is not None:  # wrap the innermost forward: PEFT's generate calls it directly
                inner = m.get_base_model() if isinstance(m, PeftModel) else m
                inner.forward = torch.autocast(device.type, dtype=torch.bfloat16)(inner.forward)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if latest is not None:
        load_optimizer(Path(latest), opt)
    schedule = "constant_with_warmup" if cfg.lr_schedule == "constant" else cfg.lr_schedule
    sched = get_scheduler(schedule, opt, cfg.warmup_steps, cfg.steps)
    with warnings.catch_warnings():  # replaying, not stepping early: torch's warning is moot
        warnings.filterwarnings("ignore", "Detected call of `lr_scheduler.step", UserWarning)
        for _ in range(start_step):  # the schedule is a function of the step: replay it
            sched.step()
    wrapped = acc.prepare_model(model) if acc.num_processes > 1 else model
    if latest is not None:  # resuming: the run's own checkpoint knows where it started
        start = meta.get("stream_start", 0)
    else:  # default: where the training of init ended (0 for a model not trained on one)
        start = meta.get("stream_end", 0) if cfg.stream_start is None else cfg.stream_start
    stream = QuestionStream(train_items, cfg.batch_size, cfg.seed, start)
    eval_kw = dict(mode=eval_mode, **budget, marker=meta["marker"], sep=meta["sep"], seed=cfg.seed)
    meta = {**meta, "task": cfg.task, "method": cfg.method, "init": str(cfg.init)}
    meta |= {"stream_start": start, "stream_end": start}
    model.train()
    return Session(
        cfg, acc, run, start_step, device, model, wrapped, tok, meta, ref, params, opt, sched,
        stream, dev_items, eval_kw,
        pick_sampler(cfg, model) if isinstance(cfg, SamplingConfig) else None,
    )  # fmt: skip


def sample_batch(s: Session, batch: Batch):
    """On-policy rationales for a batch (no gradient): ``(rationales, option_ids (B, K))``
    (each question over its own options, -1 pads); question ``j`` of the stream's step
    ``t`` is drawn with seed ``mix_seed(step_seed(seed, t), j)``, wherever it is computed."""
    s.model.eval()  # no dropout while sampling, and the KV cache even with checkpointing
    base = step_seed(s.cfg.seed, batch.step)
    try:
        return sample_questions(
            s.model,
            s.tok,
            [it.prompt for it in batch.items],
            [it.options for it in batch.items],
            s.cfg.m,
            s.cfg.max_new_tokens,
            marker=s.meta["marker"],
            sep=s.meta["sep"],
            sampling_temperature=s.cfg.sampling_temperature,
            seed=[mix_seed(base, j) for j in batch.index],
            sampler=s.sampler,
        )
    finally:
        s.model.train()
        if s.cfg.grad_accum == 1 and isinstance(s.sampler, CopySampler):
            s.sampler.sync()  # the step's one draw is done: its copy is not held through it


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) estimate on tokens sampled from pi (Schulman's k3):
    ``exp(ref - logp) - (ref - logp) - 1`` >= 0, same shape as the inputs; its gradient
    in expectation is that of the KL. Used by the GRPO and RFT+KL baselines."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def sample_answers(
    u: torch.Tensor, seed: int, batch: Batch, m: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one answer per readout row, ``a_i ~ u_i`` (over the options), by inverting the
    CDF at a uniform drawn for the row's place in the whole step (question ``batch.index``,
    rationale ``0..m-1``), seeded by ``(seed, batch.step)``. ``u`` is ``(B m, K)``. Returns
    ``a (B m,)`` and ``log u_i[a_i] (B m,)`` (with gradient): the answer token's
    log-probability for the baselines that sample their answer."""
    rng = np.random.default_rng([seed, batch.step, 1])
    width = max(batch.index) + 1
    r = torch.from_numpy(rng.random((width, m))[batch.index].reshape(-1))
    cdf = u.detach().double().cpu().cumsum(-1)
    answer = (cdf < r[:, None] * cdf[:, -1:]).sum(-1).clamp(max=u.shape[-1] - 1).to(u.device)
    return answer, u.gather(-1, answer[:, None]).squeeze(-1).log()


def token_kl(
    s: Session, rats, option_ids: torch.Tensor, tok_lp: torch.Tensor
) -> torch.Tensor | None:
    """``KL(pi || pi_ref)`` estimated per rationale as the mean k3 over its sampled tokens,
    then averaged over rationales (GRPO's per-sequence mean, Shao et al. 2024, eq. 3; a
    rationale without tokens counts 0), from ``tok_lp`` of ``score_rationales(...,
    per_token=True)``; None without a reference."""
    if s.ref is None:
        return None
    with torch.no_grad():
        _, _, ref_lp = score_rationales(s.ref, rats, option_ids, per_token=True)
    mask = rats.logp_mask
    per_token = torch.where(mask, k3_kl(tok_lp, ref_lp), 0.0)
    return (per_token.sum(-1) / mask.sum(-1).clamp_min(1)).mean()
