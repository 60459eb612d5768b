"""The settings of every training method: frozen dataclasses parsed by tyro, written to
each run's ``config.json`` and checked on construction (``__post_init__``); the RLCD presets
(``METHODS``, ``preset``). Each method's config holds the settings its loop reads:
``TrainConfig`` those every loop shares, ``RationaleConfig`` adds the rationale budget,
``SamplingConfig`` the sampled rationales and the KL anchor.

Standard library and tyro only: ``rlcd-lab train ... --help`` and code that only builds
configs load no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from rlcd_lab.math.rule_names import MIXTURE_RULES, Rule


def field_names(config: Any) -> frozenset[str]:
    """The settings of a config (an instance or its class): the keys of its ``config.json``.
    A record written when every method had every setting holds more; those a method does
    not have are not read (``rundir.config_diff`` compares the config's own only)."""
    return frozenset(f.name for f in fields(config))


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _at_least(cfg: Any, **lows: int) -> None:
    """``ValueError`` naming the option unless each named integer setting is >= its bound
    (``None``, an unset optional one, passes)."""
    for name, low in lows.items():
        value = getattr(cfg, name)
        if value is not None and value < low:
            raise ValueError(f"{_flag(name)} must be >= {low}, got {value}")


def _finite(cfg: Any, **lows: float | None) -> None:
    """``ValueError`` naming the option unless each named setting is finite and > its bound
    (``None``: >= 0)."""
    for name, low in lows.items():
        value = getattr(cfg, name)
        if not math.isfinite(value) or value < 0 or (low is not None and value <= low):
            want = ">= 0" if low is None else f"> {low}"
            raise ValueError(f"{_flag(name)} must be finite and {want}, got {value}")


@dataclass(frozen=True)
class TrainConfig:
    """Settings every training method shares (defaults: tiny CPU scale), each checked on
    construction (``ValueError`` naming the option and the value)."""

    method: tyro.conf.Fixed[str] = ""
    """The method (fixed per subcommand; recorded in config.json and rlcd.json)."""
    init: Path = Path("assets/checkpoints/base-verify")
    """Checkpoint to start from."""
    out: Path = Path("runs/run")
    """Run directory (config.json, log.jsonl, checkpoints/, eval/, final/)."""
    task: str = "verify"
    """Synthetic task name or a task-item JSONL file (with .train/.dev/.test siblings)."""
    steps: int = 200
    """Optimizer steps of this run (a resumed run may raise it to train on)."""
    batch_size: int = 8
    """Questions per step, over all processes: each of ``W`` processes takes
    ``batch_size / W`` of them (the question stream does not depend on ``W``)."""
    lr: float = 1e-4
    """AdamW learning rate (the paper uses 2e-6 for 1.7B models)."""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """Learning-rate schedule after the warmup (``transformers.get_scheduler``)."""
    warmup_steps: int = 0
    """Steps of linear warmup from 0 to ``lr``."""
    grad_accum: int = 1
    """Gradient accumulation: each process takes its questions of a step in this many
    micro-batches (less memory, the same update as one batch)."""
    weight_decay: float = 0.0
    """AdamW's decoupled weight decay."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this before each step (``accelerate``'s
    ``clip_grad_norm_``); the norm before clipping is logged as ``grad_norm``."""
    eval_every: int = 50
    """Evaluate the first ``eval_items`` dev items every this many steps (logged as
    ``dev_*``; 0: only the final evaluation)."""
    eval_items: int = 100
    """The first this many dev items: evaluated every ``eval_every`` steps (single query)
    and in the final evaluation, where they fit the temperature T."""
    test_items: int = 400
    """Test items in the final eval dump (0 skips it)."""
    save_every: int = 50
    """Write ``checkpoints/step-N/`` (weights, optimizer, RNG) every this many steps: where
    ``--resume`` restarts."""
    seed: int = 0
    """Seed of the question stream, of every sampled rationale and answer, and of LoRA's
    initialisation: the same seed gives the same run on any number of processes."""
    stream_start: int | None = None
    """Step of the question stream at which this run starts: its step ``s`` takes the
    stream's step ``stream_start + s`` (questions, outcomes and sampling seeds). Default:
    continue where the training of ``init`` ended (its ``rlcd.json`` ``stream_end``), 0
    for a model not trained on a stream; so stage 2 and its forks see new questions."""
    lora_r: int = 0
    """LoRA rank on every linear layer (alpha = 2 r); 0 trains all weights."""
    bf16: bool = False
    """bfloat16 autocast for every forward pass (weights and AdamW state stay float32)."""
    save_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Dtype of the weights in ``final/`` (step checkpoints stay float32 so a resumed run
    is bit-identical); training itself is always float32 (see ``setup``)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, about a third more time)."""
    device: str = "auto"
    """``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``; under ``accelerate launch`` or
    ``torchrun`` each process takes its own CUDA device (``auto`` with CUDA) or the CPU
    (``cpu``, or ``auto`` on a machine without CUDA: a gloo group)."""
    dtype: Literal["float32", "float64"] = "float32"
    """Dtype of the trained weights and of AdamW's state (float64 for exactness checks)."""
    tracker: Literal["none", "tensorboard", "trackio"] = "none"
    """Also send each log row to a tracker (``accelerate``'s trackers; the package must be
    installed); ``log.jsonl`` is always written."""
    resume: bool = False
    """Continue the run in ``out`` from its latest checkpoint."""
    overwrite: bool = False
    """Replace the run in ``out`` (only a run directory: never another folder); the old
    run is deleted once the new one has started, kept if it cannot start."""
    verify: bool = True
    """Check the checksums of the checkpoints loaded (``--no-verify`` skips)."""

    def __post_init__(self) -> None:
        _at_least(
            self, steps=1, batch_size=1, save_every=1, eval_every=0, eval_items=1, test_items=0,
            lora_r=0, grad_accum=1, warmup_steps=0, stream_start=0,
        )  # fmt: skip
        _finite(self, lr=0, grad_clip=0)
        _finite(self, weight_decay=None)
        if self.bf16 and self.dtype == "float64":
            raise ValueError("--bf16 computes in bfloat16; it cannot go with --dtype float64")


@dataclass(frozen=True)
class RationaleConfig(TrainConfig):
    """Settings of the methods whose model writes a rationale before its answer (the
    evaluation's budget; ``sft`` answers directly)."""

    max_new_tokens: int = 48
    """Token budget of one rationale; one that reaches it without writing the marker gets
    the marker appended and is flagged ``forced`` (``rlcd_lab.reader``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _at_least(self, max_new_tokens=1)


@dataclass(frozen=True)
class SamplingConfig(RationaleConfig):
    """Settings of the methods that sample rationales while training, with an optional KL
    anchor to a reference model."""

    m: Annotated[int, tyro.conf.arg(aliases=("--num-rationales",))] = 4
    """Rationales per question (``--num-rationales`` is the same setting: use it under
    ``torchrun`` and ``accelerate launch``, whose parsers take ``--m`` for one of theirs)."""
    sampling_temperature: float = 1.0
    """Sampling temperature of the rationales (``temperature`` in configs recorded before
    the rename: ``rundir.upgrade_config``)."""
    sampler: Literal["hf", "fast", "bf16", "vllm"] = "hf"
    """Who samples the rationales: the trained model itself (``hf``: ``generate``'s tokens
    from ``decoding.kv_sampler``, bit for bit; a LoRA model from a float32 copy with its
    adapter merged, made once per step, ``decoding.merged_sampler``: the same tokens but
    at near ties); a copy of its weights with any LoRA adapter
    merged, refreshed after every optimizer step, its matrices packed for oneDNN on the CPU
    (``decoding.CopySampler``: ``fast`` in ``decoding.fast_dtype``, bfloat16 where the
    machine multiplies in it natively, else float32, and for models under
    ``decoding.FAST_MIN_PARAMS`` parameters the model itself as ``hf``; ``bf16`` always
    bfloat16), the draw off-policy by the copy's rounding; or a vLLM engine (CUDA only,
    ``pip install rlcd_lab[vllm]``). The readout and ``log pi(r)`` are always recomputed
    by the trained model in its own dtype. See docs/performance.md for what each is worth."""
    beta: float = 0.0
    """KL anchor weight towards the reference model (0: no anchor)."""
    ref: Path | None = None
    """Reference (anchor) model; default: ``init``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _at_least(self, m=1)
        _finite(self, sampling_temperature=0)
        _finite(self, beta=None)


# ------------------------------ RLCD family (rlcd.py)
@dataclass(frozen=True)
class RLCDConfig(SamplingConfig):
    """Settings of the RLCD-family methods."""

    sf_weight: float = 0.0
    """Weight c of the score-function term (0: stage 1, pathwise only)."""
    lam: float = 0.0
    """Mixture weight: 0 per-rationale, 1 mixture (group) objective."""
    rule: Rule = "brier"
    """The proper scoring rule ``J(u, Y)``, a name of ``rlcd_lab.scoring.RULES``: Brier
    ``2 u_Y - ||u||^2``, log ``log u_Y`` or spherical ``u_Y / ||u||`` (the mixture objective,
    ``lam > 0``, takes Brier only)."""
    outcome_reward: bool = True
    """False: the score-function term gets the KL shaping reward only, the readout is still
    trained by the pathwise term (the anchor-only control of OpenJev-RLCD sec. 5.2)."""
    ace: float = 0.0
    """ACE weight alpha: negative advantages of rationales the model made more likely than
    the reference did are scaled by ``1 + alpha c`` (``estimators.ace_advantages``); 0: off."""
    grad_terms_every: int = 10
    """Log pathwise vs score-function gradient norms every this many steps (0: never)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _finite(self, ace=None, sf_weight=None)
        if not (math.isfinite(self.lam) and 0 <= self.lam <= 1):
            raise ValueError(f"--lam must be in [0, 1], got {self.lam}")
        if self.lam > 0 and self.rule not in MIXTURE_RULES:
            raise ValueError(
                f"--rule {self.rule}: the mixture objective (--lam > 0) has an estimator for "
                f"{' and '.join(MIXTURE_RULES)} only"
            )


@dataclass(frozen=True)
class Calibrate(RLCDConfig):
    """RLCD stage 1 (``METHODS["calibrate"]``)."""

    method: tyro.conf.Fixed[str] = "calibrate"


@dataclass(frozen=True)
class Reinforce(RLCDConfig):
    """RLCD stage 2 (``METHODS["reinforce"]``)."""

    method: tyro.conf.Fixed[str] = "reinforce"


@dataclass(frozen=True)
class EndToEnd(RLCDConfig):
    """The per-rationale objective end to end (``METHODS["endtoend"]``)."""

    method: tyro.conf.Fixed[str] = "endtoend"


@dataclass(frozen=True)
class Mixture(RLCDConfig):
    """The lambda (mixture) objective (``METHODS["mixture"]``)."""

    method: tyro.conf.Fixed[str] = "mixture"


METHODS: dict[str, RLCDConfig] = {
    "calibrate": Calibrate(out=Path("runs/calibrate")),
    "reinforce": Reinforce(
        out=Path("runs/reinforce"), init=Path("runs/calibrate/final"), sf_weight=0.3, beta=0.04
    ),
    "endtoend": EndToEnd(out=Path("runs/endtoend"), sf_weight=1.0),
    "mixture": Mixture(out=Path("runs/mixture"), sf_weight=1.0, lam=1.0),
}
DESCRIPTIONS = {
    "calibrate": "RLCD stage 1: proper score of the readout after own rationales, pathwise only.",
    "reinforce": "RLCD stage 2: same proper score as reward, weight c, KL anchor to stage 1.",
    "endtoend": "Per-rationale objective end to end: System-One collapse, gradient dilution.",
    "mixture": "Lambda objective (1 - lam) E_r J + lam J(p, q); lam = 1: the mixture.",
}


def preset(method: str, **overrides: Any) -> RLCDConfig:
    """The default config of ``method`` (see ``METHODS``) with ``overrides`` applied."""
    return replace(METHODS[method], **overrides)


# ------------------------------ baselines (sft.py, rft.py, grpo.py, rlcr.py)
@dataclass(frozen=True)
class SFTConfig(TrainConfig):
    """Settings of the SFT baseline (direct answers, cross-entropy on the label token)."""

    method: tyro.conf.Fixed[str] = "sft"
    out: Path = Path("runs/sft")


@dataclass(frozen=True)
class TeachConfig(RationaleConfig):
    """Settings of ``teach``: teacher-forced SFT on worked rationales built by rule
    (``rlcd_lab.tasks.worked``), which gives a pretrained model its task's format and skill
    before the comparison, as pretraining gives the tiny bases theirs."""

    method: tyro.conf.Fixed[str] = "teach"
    out: Path = Path("runs/teach")
    worked: Literal["arithmetic", "arithmetic-verify"] = "arithmetic"
    """The rule that writes each training item's worked rationale (``WORKED``)."""


@dataclass(frozen=True)
class RFTConfig(SamplingConfig):
    """Settings of the RFT/STaR baseline (clone correct trajectories; optional KL)."""

    method: tyro.conf.Fixed[str] = "rft"
    out: Path = Path("runs/rft")


@dataclass(frozen=True)
class GRPOConfig(SamplingConfig):
    """Settings of the GRPO baseline (correctness reward, group-normalized, KL anchor)."""

    method: tyro.conf.Fixed[str] = "grpo"
    out: Path = Path("runs/grpo")
    beta: float = 0.04
    """KL anchor weight towards the reference model (the k3 per-token estimate)."""
    advantage: Literal["group-std", "group-mean", "rloo"] = "group-std"
    """How the group's rewards become advantages (``estimators.group_advantages``):
    ``group-std`` GRPO's (minus the group mean, over the group's standard deviation),
    ``group-mean`` Dr. GRPO's (minus the group mean only), ``rloo`` minus the mean of the
    other samples."""


@dataclass(frozen=True)
class RLCRConfig(SamplingConfig):
    """Settings of RLCR (Damani et al. 2025): correctness of a sampled answer plus the
    Brier score of the confidence the model states after it (``rlcr.py``)."""

    method: tyro.conf.Fixed[str] = "rlcr"
    out: Path = Path("runs/rlcr")
    beta: float = 0.04
    """KL anchor weight towards the reference model (as GRPO's)."""
    format_steps: int = 20
    """The first this many steps teach the confidence format instead of rewarding it:
    cross-entropy of the digit of the model's own readout probability for its sampled
    answer (``rlcr.py``); they count in ``steps``."""
    cue: str = "\nConfidence:"
    """Written after the answer; the confidence digit follows it (``reader.verbal.CUE``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _at_least(self, format_steps=0)
