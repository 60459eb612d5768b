"""RLCD inside TRL: :class:`RLCDTrainer`, a ``GRPOTrainer`` that trains stage 1 and stage 2.

Install with ``pip install 'rlcd_lab[trl]'``. Start at :class:`RLCDTrainer` (the step, and
what it keeps from TRL); :func:`rlcd_args` and :func:`rlcd_dataset` build its arguments
and data set.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from accelerate.utils import gather_object, is_peft_model
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback

try:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from trl.models.utils import disable_gradient_checkpointing, prepare_deepspeed, prepare_fsdp
    from trl.trainer.utils import create_model_from_path, use_adapter
except ImportError as err:  # the optional extra is not installed
    raise ImportError("rlcd_lab.integrations.trl needs TRL: pip install 'rlcd_lab[trl]'") from err

from rlcd_lab.estimators import SurrogateTerms, surrogate_terms
from rlcd_lab.lm.checkpoint import MARKER, SEP
from rlcd_lab.math.rule_names import MIXTURE_RULES, Rule
from rlcd_lab.methods.configs import preset
from rlcd_lab.reader.decoding import _StopCheck
from rlcd_lab.reader.prompts import build_prompt, encode_prompts, item_options, padded_option_ids
from rlcd_lab.reader.rationales import Rationales, sample_rationales
from rlcd_lab.reader.reading import score_rationales
from rlcd_lab.reader.sampling import Generated, Sampler, pad_id
from rlcd_lab.scoring import RULES
from rlcd_lab.tasks.items import TaskItem
from rlcd_lab.train.common import rationale_stats

__all__ = [
    "RLCDSettings",
    "RLCDTrainer",
    "proper_score",
    "replay_sampler",
    "rlcd_args",
    "rlcd_dataset",
]


# ----------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class RLCDSettings:
    """What RLCD adds to TRL's ``GRPOConfig``: the objective and the answer format.

    * ``sf_weight`` c >= 0: weight of the score-function term (0: stage 1, pathwise only);
    * ``lam`` in [0, 1]: mixture weight of ``(1 - lam) E_r J + lam J(p, q)`` (Brier only,
      ``num_generations >= 3`` when > 0);
    * ``rule``: the proper score ``J`` (``rlcd_lab.scoring``), higher is better;
    * ``outcome_reward``: False leaves only the KL shaping reward in the score-function
      term (the anchor-only control); the readout is still trained pathwise;
    * ``marker``, ``sep``: the answer marker and what separates it from the option label,
      as recorded in the checkpoint's ``rlcd.json``.

    The KL weight beta is TRL's ``GRPOConfig.beta``.
    """

    sf_weight: float = 0.0
    lam: float = 0.0
    rule: Rule = "brier"
    outcome_reward: bool = True
    marker: str = MARKER
    sep: str = SEP

    def __post_init__(self) -> None:
        if not (math.isfinite(self.sf_weight) and self.sf_weight >= 0):
            raise ValueError(f"sf_weight must be finite and >= 0, got {self.sf_weight}")
        if not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"lam must be in [0, 1], got {self.lam}")
        if self.rule not in RULES:
            raise ValueError(f"rule must be one of {tuple(RULES)}, got {self.rule!r}")
        if self.lam > 0 and self.rule not in MIXTURE_RULES:
            raise ValueError("the mixture objective (lam > 0) has an estimator for Brier only")
        if not self.marker:
            raise ValueError("the marker is empty")

    @classmethod
    def from_method(cls, method: str, **overrides: Any) -> RLCDSettings:
        """The objective of an RLCD-family method of ``configs.METHODS`` (``calibrate``,
        ``reinforce``, ``endtoend``, ``mixture``), with ``overrides`` applied."""
        cfg = preset(method)
        base = dict(
            sf_weight=cfg.sf_weight, lam=cfg.lam, rule=cfg.rule, outcome_reward=cfg.outcome_reward
        )
        return cls(**(base | overrides))


def rlcd_args(method: str, **overrides: Any) -> GRPOConfig:
    """TRL's ``GRPOConfig`` with the settings of ``configs.METHODS[method]`` that TRL
    names otherwise: ``beta``, ``learning_rate``, ``num_generations`` (``m``),
    ``max_completion_length`` (``max_new_tokens``), ``temperature`` (``sampling_temperature``),
    ``max_grad_norm``,
    ``weight_decay``, ``seed``, ``max_steps``, a constant learning rate, and
    ``per_device_train_batch_size = batch_size * m`` (completions, one process); float32
    without gradient checkpointing (TRL's defaults are bf16 and checkpointing on), no
    reporting. ``overrides`` are ``GRPOConfig`` fields and win."""
    cfg = preset(method)
    base = dict(
        beta=cfg.beta,
        learning_rate=cfg.lr,
        num_generations=cfg.m,
        max_completion_length=cfg.max_new_tokens,
        temperature=cfg.sampling_temperature,
        max_grad_norm=cfg.grad_clip,
        weight_decay=cfg.weight_decay,
        seed=cfg.seed,
        max_steps=cfg.steps,
        lr_scheduler_type="constant",
        per_device_train_batch_size=cfg.batch_size * cfg.m,
        bf16=False,
        activation_checkpointing=False,  # transformers' new name of gradient_checkpointing
        report_to="none",
    )
    return GRPOConfig(**(base | overrides))


def rlcd_dataset(
    tokenizer: PreTrainedTokenizerBase,
    items: Sequence[TaskItem],
    *,
    marker: str = MARKER,
    outcomes: Sequence[int] | None = None,
    seed: int = 0,
) -> Dataset:
    """Task items as the rows :class:`RLCDTrainer` reads: ``prompt`` (``build_prompt``,
    reason mode), ``options`` (labels) and ``label`` (the outcome ``Y``: ``outcomes[i]``
    when given, else one draw ``Y ~ q`` seeded by ``(seed, i)`` for an item with ``q``,
    else its label)."""
    if outcomes is not None and len(outcomes) != len(items):
        raise ValueError(f"{len(outcomes)} outcomes for {len(items)} items")
    rows = []
    for i, it in enumerate(items):
        if outcomes is not None:
            y = int(outcomes[i])
        elif it.q is not None:
            q = np.asarray(it.q, dtype=float)
            y = int(np.random.default_rng([seed, i]).choice(len(q), p=q / q.sum()))
        else:
            y = int(it.label)
        prompt = build_prompt(tokenizer, it.prompt, marker=marker, options=it.options)
        rows.append({"prompt": prompt, "options": list(it.options), "label": y})
    return Dataset.from_list(rows)


# ---------------------------------------------------------------- completions -> rationales
def replay_sampler(completions: Sequence[Sequence[int]]) -> Sampler:
    """A ``reader`` :class:`Sampler` that returns given completions (token ids, row ``i``
    for row ``i`` of the batch) and stops each where our loop's sampler would have: at
    the first token whose decoded window contains the marker, or at a token of ``eos``
    (``decoding._StopCheck``, the rule of ``reader._MarkerStop``). A completion that
    stops at neither must have run to ``max_new_tokens``; one that ended earlier (a stop
    string or an end token the model's generation config does not list) is an error.
    Its ``token_lp`` is 0: ``score_rationales`` computes the log-probabilities."""

    def replay(
        model, tokenizer, ids: Tensor, mask: Tensor, *, max_new_tokens: int, marker: str,
        eos: Sequence[int], **_: Any,
    ) -> Generated:  # fmt: skip
        if len(completions) != ids.shape[0]:
            raise ValueError(f"{len(completions)} completions for {ids.shape[0]} rows")
        stop = _StopCheck(tokenizer, marker, eos)
        end = torch.full((len(completions),), -1, dtype=torch.long)
        hit = torch.zeros(len(completions), dtype=torch.bool)
        for i, row in enumerate(completions):
            row = list(row)
            for t in range(1, len(row) + 1):  # the rule reads the last `window` tokens
                found = stop.check([row[max(0, t - stop.window) : t]])[0]
                if found is not None:
                    end[i], hit[i] = t, found
                    break
            else:
                if len(row) != max_new_tokens:
                    raise ValueError(
                        f"completion {i} ended after {len(row)} of {max_new_tokens} tokens "
                        f"without the marker {marker!r} or an EOS token of the model's "
                        f"generation config ({list(eos)}): add its last token to "
                        "generation_config.eos_token_id, or drop the stop string"
                    )
        width = max(int(e) if e >= 0 else max_new_tokens for e in end)
        tokens = torch.full((len(completions), max(width, 1)), pad_id(tokenizer))
        for i, row in enumerate(completions):
            n = int(end[i]) if end[i] >= 0 else max_new_tokens
            if n:
                tokens[i, :n] = torch.tensor(list(row[:n]), dtype=torch.long)
        return Generated(tokens, end, hit, torch.zeros(tokens.shape))

    return replay


_ROW_KEYS = ("input_ids", "attention_mask", "rationale_mask", "eos_col", "forced", "lengths")
_ROW_KEYS += ("logp_r", "prompt_len")


def _grouped(rats: Rationales, b: int, m: int) -> dict[str, Tensor]:
    """The per-row tensors of ``rats`` shaped ``(B, M, ...)``: TRL's buffer shuffles and
    splits along the first dimension, which then keeps each question's M rows together."""
    return {k: getattr(rats, k).reshape(b, m, *getattr(rats, k).shape[1:]) for k in _ROW_KEYS}


def _flat(inputs: dict[str, Any]) -> Rationales:
    """The :class:`Rationales` of a (shuffled, split) batch of :func:`_grouped` rows, with
    the leading columns that pad every row dropped (a chunk of the generation batch is
    narrower than the whole)."""
    b, m = inputs["input_ids"].shape[:2]
    row = {k: inputs[k].flatten(0, 1) for k in _ROW_KEYS}
    first = int(row["attention_mask"].any(0).nonzero()[0, 0])
    for k in ("input_ids", "attention_mask", "rationale_mask"):
        row[k] = row[k][:, first:]
    row["eos_col"] = torch.where(row["eos_col"] >= 0, row["eos_col"] - first, row["eos_col"])
    texts = [t for group in inputs["texts"] for t in group]
    return Rationales(**row, eos_id=int(inputs["eos_id"]), texts=texts, m=m)


def _questions(inputs: Sequence[dict[str, Any]], m: int) -> list[dict[str, Any]]:
    """The distinct questions of a generation batch whose rows come in consecutive groups
    of ``m`` copies (TRL's sampler), each with ``prompt`` (text), ``options``, ``label``."""
    if len(inputs) % m:
        raise ValueError(f"{len(inputs)} rows do not split into groups of {m} generations")
    out = []
    for start in range(0, len(inputs), m):
        group = inputs[start : start + m]
        q = group[0]
        missing = [k for k in ("prompt", "options", "label") if k not in q]
        if missing:
            raise ValueError(f"RLCDTrainer's dataset rows need {missing} (see rlcd_dataset)")
        if not isinstance(q["prompt"], str):
            raise ValueError(
                "RLCDTrainer needs plain-text prompts (reader.build_prompt applies a chat "
                "template itself); got a conversation"
            )
        key = (q["prompt"], list(q["options"]), q["label"])
        if any((x["prompt"], list(x["options"]), x["label"]) != key for x in group):
            raise ValueError(
                "the rows of a question must come in consecutive groups of num_generations "
                "(each process needs whole groups: per_device_train_batch_size a multiple "
                "of num_generations)"
            )
        out.append(q)
    return out


# ------------------------------------------------------------------------------ trainer
def proper_score(completions: list, **kwargs: Any) -> list[float]:
    """What fills TRL's reward-function slot (it requires one): never called. RLCD's reward
    is the proper score ``J(u_i, Y)`` of each rationale's readout, computed with gradient
    inside :meth:`RLCDTrainer.compute_loss` (``estimators.surrogate_terms``)."""
    raise RuntimeError("RLCDTrainer computes its reward in compute_loss")


class RLCDTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` with RLCD's loss: stage 1 and stage 2.

    Arguments as ``GRPOTrainer``'s, without reward functions (the reward is the proper
    score of the readout), tools or rollout functions; plus ``rlcd`` (the objective,
    default stage 1) and ``ref_model``: the KL anchor (a model, or a path TRL loads in the
    policy's dtype) used when ``args.beta > 0`` instead of TRL's default reference, a
    fresh load of the policy's checkpoint (a model passed as an object, e.g. a stage-1
    model still in memory, is otherwise anchored at the checkpoint it was loaded from).

    Requirements checked here: ``per_device_train_batch_size`` (and, when evaluating, the
    eval batch size: checked per batch) a multiple of ``num_generations`` (the
    leave-one-out baseline needs a question's rationales on one process),
    ``num_generations >= 2`` (3 for ``lam > 0``), and on-policy rationales
    (``num_iterations == 1``, ``gradient_accumulation_steps`` a multiple of
    ``steps_per_generation``).

    Logged per step (averaged over processes and micro-batches): ``reward`` (mean proper
    score of the readouts, higher is better), ``accuracy_u`` (argmax of u is the outcome),
    ``rationale_length``, ``forced_rate``, ``readout_variance`` (``train.common.
    rationale_stats``), ``loss/pathwise`` and ``loss/score_function`` (per question), and
    ``kl`` (mean ``log pi_theta(r) - log pi_ref(r)``) when the anchor is in use.

    Per step, for the ``B`` questions of a
    process and ``M = num_generations`` completions each, the estimator of
    ``rlcd_lab.train.rlcd.train`` (loss terms from ``rlcd_lab.estimators``):

    1. TRL samples the completions, no gradient (its generation path: the model's
       ``generate``, vLLM in server or colocate mode, or continuous batching), on prompts
       tokenized as the reader does (``reader.encode_prompts``: no special tokens added);
    2. each completion becomes a rationale exactly as in our loop: it is replayed through
       ``reader.sample_rationales``'s sampler hook with our loop's stop rule, so it ends at the
       first marker (a token that merges the marker with what follows is cut and the rest of
       the marker appended), and a completion that never writes the marker gets it appended
       and is flagged ``forced`` (a sampled EOS dropped from the text but kept in ``log pi(r)``);
       everything TRL generated after the marker is ignored;
    3. the scoring pass with gradient (``reader.score_rationales``) gives the readout
       ``u (B, M, K) = softmax(logits[option tokens])`` after ``marker + sep`` and
       ``log pi_theta(r | x) (B, M)``;
    4. the reward of rationale ``i`` is the proper score ``R_i = J(u_i, Y)`` plus, when
       ``GRPOConfig.beta > 0`` and the score-function term is on, the KL shaping reward
       ``-beta (log pi_theta(r_i) - log pi_ref(r_i))``; the reference is TRL's (its
       ``ref_model``, or the PEFT model with its adapter disabled) or ``ref_model=``;
    5. loss (lower is better) ``= pathwise + c * score_function`` from
       ``estimators.surrogate_terms``: pathwise ``-(1/M) sum_i R_i`` differentiated through
       ``u``, score function ``-(1/M) sum_i sg(A_i) log pi(r_i)`` with leave-one-out advantages
       ``A_i`` over the question's M rationales; a mean over the questions, divided by the
       gradient-accumulation steps (TRL's convention), so that with DDP's average over
       processes one optimizer step takes the gradient of the mean over all questions of the
       step, as ``rlcd.train`` does.

    Stage 1 ("calibrate", ``RLCDSettings(sf_weight=0)``) is pathwise only; stage 2
    ("reinforce", ``sf_weight=0.3`` and ``beta=0.04``, anchored at the stage-1 model) adds the
    score-function term. ``RLCDSettings.from_method`` and :func:`rlcd_args` take their
    defaults from ``rlcd_lab.methods.configs.METHODS``.

    From TRL this keeps: the data loader (each prompt repeated ``num_generations`` times),
    generation, PEFT (the reference is the model with its adapter disabled), accelerate
    (DDP, DeepSpeed and FSDP wrappers, mixed precision, gradient accumulation), the reference
    model and ``sync_ref_model``, optimizer, scheduler, clipping, logging and checkpoints.
    TRL's policy loss does not apply (``loss_type``, ``epsilon``, ``scale_rewards``,
    ``reward_funcs``, importance-sampling corrections, entropy terms,
    ``mask_truncated_completions``): the rationales are on-policy, so the settings must not
    reuse a generation across optimizer steps (``num_iterations == 1``, and
    ``gradient_accumulation_steps`` a multiple of ``steps_per_generation``). The KL anchor is
    RLCD's sequence-level shaping reward above, not TRL's per-token penalty, and it acts only
    through the score-function term (stage 1 has no use for it). Tools, environments and
    multimodal inputs are not supported. Dataset rows are plain-text prompts (``prompt``,
    from ``reader.build_prompt``, which applies a chat model's template itself), their
    ``options`` (labels) and ``label`` (the outcome index ``Y``): :func:`rlcd_dataset`.
    """

    _tag_names = ["trl", "rlcd"]
    _name = "RLCD"
    _paper: dict = {}

    def __init__(
        self,
        model: str | PreTrainedModel,
        args: GRPOConfig | None = None,
        train_dataset: Dataset | None = None,
        eval_dataset: Dataset | None = None,
        processing_class: PreTrainedTokenizerBase | None = None,
        callbacks: list[TrainerCallback] | None = None,
        optimizers: tuple[Any, Any] = (None, None),
        peft_config: Any = None,
        *,
        rlcd: RLCDSettings | None = None,
        ref_model: str | PreTrainedModel | None = None,
    ):
        self.rlcd = RLCDSettings() if rlcd is None else rlcd
        if args is not None:
            _check_args(args, self.rlcd)
        super().__init__(
            model,
            reward_funcs=proper_score,
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            callbacks=callbacks,
            optimizers=optimizers,
            peft_config=peft_config,
        )
        _check_args(self.args, self.rlcd)
        if self._is_vlm:
            raise ValueError("RLCDTrainer reads text models only (no processor with images)")
        if ref_model is not None and self.beta != 0.0:
            if self.args.sync_ref_model:
                raise ValueError("ref_model= fixes the anchor; it excludes sync_ref_model")
            self.ref_model = self._prepare_reference(ref_model)

    def _prepare_reference(self, ref: str | PreTrainedModel) -> torch.nn.Module:
        """``ref`` loaded (a path, in the policy's dtype), frozen and wrapped as TRL wraps
        its own reference model. A model whose forward calls another model is refused: a
        ``copy.deepcopy`` of a model a TRL trainer has held keeps TRL's patched forward,
        which still runs the original (copy the weights into a fresh load instead)."""
        if isinstance(ref, str):
            dtype = self.accelerator.unwrap_model(self.model).dtype
            ref = create_model_from_path(ref, dtype=dtype)
        if _forward_calls_another(ref):
            raise ValueError(
                "ref_model's forward calls another model (a deepcopy of a model TRL patched?): "
                "pass a fresh load, e.g. with the policy's weights through load_state_dict"
            )
        ref.eval().requires_grad_(False)
        if self.is_deepspeed_enabled:
            return prepare_deepspeed(ref, self.accelerator)
        if self.is_fsdp_enabled:
            return prepare_fsdp(ref, self.accelerator)
        return self.accelerator.prepare_model(ref, evaluation_mode=True)

    # -------------------------------------------------------------------- generation
    def _tokenize_prompts(self, prompts: list) -> tuple[list[list[int]], None, dict]:
        """Prompt ids as the reader encodes them (``reader.encode_prompts``: the text's
        tokens, no special tokens added), so generation and scoring see the same ids."""
        if not all(isinstance(p, str) for p in prompts):
            raise ValueError("RLCDTrainer needs plain-text prompts (see rlcd_dataset)")
        return encode_prompts(self.processing_class, prompts), None, {}

    @contextmanager
    def _reference(self) -> Iterator[torch.nn.Module]:
        """The KL anchor, no gradient: ``self.ref_model``, else the PEFT policy with its
        adapter disabled (or switched to TRL's ``ref`` adapter when there is one)."""
        if self.ref_model is not None:
            with torch.no_grad():
                yield self.ref_model
            return
        unwrapped = self.accelerator.unwrap_model(self.model)
        if not is_peft_model(unwrapped):
            raise RuntimeError("beta > 0 needs a reference model or a PEFT policy")
        adapter = "ref" if "ref" in unwrapped.peft_config else None
        plain = nullcontext()  # (TRL's helper warns even when checkpointing is off)
        kwargs = self.args.gradient_checkpointing_kwargs
        with (
            torch.no_grad(),
            use_adapter(unwrapped, adapter_name=adapter),
            disable_gradient_checkpointing(self.model, kwargs)
            if self.args.gradient_checkpointing
            else plain,
        ):
            yield self.model

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """TRL's generation, then the rationales, readout options, outcomes and (stage 2)
        the reference's ``log pi_ref(r)``: tensors ``(B, M, ...)`` per question (see
        :func:`_grouped`), ``option_ids (B, K)``, ``y (B,)``, ``ref_logp (B, M)``."""
        mode = "train" if self.model.training else "eval"
        m = self.num_generations if mode == "train" else self.num_generations_eval
        questions = _questions(inputs, m)
        completion_ids = self._generate([x["prompt"] for x in inputs])[1]
        s, tok = self.rlcd, self.processing_class
        options = item_options(tok, [q["options"] for q in questions], s.marker, s.sep)
        policy = self.accelerator.unwrap_model(self.model)
        longest = max((len(c) for c in completion_ids), default=1)
        rats = sample_rationales(
            policy,
            tok,
            [q["prompt"] for q in questions],
            m,
            self.max_completion_length or max(longest, 1),
            bridge=[o.bridge for o in options],
            marker=s.marker,
            seed=0,  # unused by the replay; an int keeps torch's global generator untouched
            sampler=replay_sampler(completion_ids),
        )
        device = rats.input_ids.device
        option_ids = padded_option_ids(options).to(device)
        b = len(questions)
        out: dict[str, Any] = _grouped(rats, b, m) | {
            "option_ids": option_ids,
            "y": torch.tensor([int(q["label"]) for q in questions], device=device),
            "texts": [rats.texts[i * m : (i + 1) * m] for i in range(b)],
            "prompts": [q["prompt"] for q in questions],
            "eos_id": torch.tensor(rats.eos_id, device=device),
        }
        if self.beta != 0.0 and s.sf_weight > 0:
            with self._reference() as ref:
                out["ref_logp"] = score_rationales(ref, rats, option_ids)[2].view(b, m)
        return out

    # --------------------------------------------------------------------------- loss
    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Tensor:
        """RLCD's loss on a batch of questions (lower is better): ``pathwise + c *
        score_function`` of ``estimators.surrogate_terms`` over ``u (B, M, K)`` and
        ``log pi(r) (B, M)``, a mean over the B questions, divided by the gradient
        accumulation steps in training."""
        if return_outputs:
            raise ValueError("RLCDTrainer does not return outputs")
        s = self.rlcd
        mode = "train" if self.model.training else "eval"
        b, m = inputs["input_ids"].shape[:2]
        rats, y = _flat(inputs), inputs["y"]
        u, _, logp = score_rationales(model, rats, inputs["option_ids"])
        u, logp = u.view(b, m, -1), logp.view(b, m)
        extra = log_ratio = None
        if "ref_logp" in inputs:  # the anchor never gets a gradient
            log_ratio = logp.detach() - inputs["ref_logp"]
            extra = -self.beta * log_ratio
        terms = surrogate_terms(u, logp, y, s.lam, extra, s.rule, s.outcome_reward)
        loss = terms.loss(s.sf_weight)
        self._log_batch(mode, terms, u.detach(), y, rats, log_ratio, inputs)
        if mode == "train":
            loss = loss / self.current_gradient_accumulation_steps
        return loss

    def _log_batch(
        self,
        mode: str,
        terms: SurrogateTerms,
        u: Tensor,
        y: Tensor,
        rats: Rationales,
        log_ratio: Tensor | None,
        inputs: dict[str, Any],
    ) -> None:
        """Append this micro-batch's readout metrics, averaged over processes, to TRL's
        metrics (``log`` averages them over the logging interval)."""
        b, m = u.shape[:2]
        stats = {
            "reward": terms.rewards.mean(),
            "accuracy_u": (u.argmax(-1) == y[:, None]).double().mean(),
            "loss/pathwise": terms.pathwise.detach().mean(),
            "loss/score_function": terms.score_function.detach().mean(),
        }
        stats |= rationale_stats(u, rats.lengths.view(b, m), rats.forced.view(b, m))
        if log_ratio is not None:
            stats["kl"] = log_ratio.mean()
        local = torch.tensor(
            [float(v) for v in stats.values()], dtype=torch.float64, device=u.device
        )
        means = self.accelerator.gather(local[None]).mean(0).tolist()
        for key, value in zip(stats, means, strict=True):
            self._metrics[mode][key].append(value)
        if self.log_completions:  # TRL's completions table: one row per rationale
            logs = self._logs
            logs["prompt"].extend(gather_object([p for p in inputs["prompts"] for _ in range(m)]))
            logs["completion"].extend(gather_object(rats.texts))
            logs["rewards"]["proper_score"].extend(gather_object(terms.rewards.flatten().tolist()))
            logs["advantages"].extend(gather_object(terms.advantages.flatten().tolist()))


def _forward_calls_another(model: torch.nn.Module) -> bool:
    """Whether ``model``'s own (instance) ``forward`` closes over a method of another
    module: what ``copy.deepcopy`` leaves of a forward that TRL patched on the original."""
    forward = vars(model).get("forward")
    cells = getattr(getattr(forward, "__func__", forward), "__closure__", None) or ()
    for cell in cells:
        owner = getattr(cell.cell_contents, "__self__", None)
        if isinstance(owner, torch.nn.Module) and owner is not model:
            return True
    return False


def _check_args(args: GRPOConfig, s: RLCDSettings) -> None:
    """Reject TRL settings RLCD's estimator cannot train with (``ValueError``)."""
    m = args.num_generations
    need = 3 if s.lam > 0 else 2
    if m is None or m < need:
        why = "the mixture estimate (lam > 0)" if s.lam > 0 else "the leave-one-out baseline"
        raise ValueError(f"num_generations must be >= {need} for {why}, got {m}")
    if args.per_device_train_batch_size % m:
        raise ValueError(
            f"per_device_train_batch_size ({args.per_device_train_batch_size}) must be a "
            f"multiple of num_generations ({m}): each question's rationales on one process"
        )
    spg = args.steps_per_generation or args.gradient_accumulation_steps
    if args.num_iterations != 1 or args.gradient_accumulation_steps % spg:
        raise ValueError(
            "RLCD trains on-policy: num_iterations must be 1 and gradient_accumulation_steps "
            f"a multiple of steps_per_generation (got {args.num_iterations}, "
            f"{args.gradient_accumulation_steps}, {spg})"
        )
