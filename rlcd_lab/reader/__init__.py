"""The reader: prompt -> rationales -> per-rationale readout, one checkpoint at a time
(OpenJev-RLCD sec. 2 and Algorithm 1).

Start at :class:`Reader`, the one entry for the faces (the decision engine, the dashboard,
the server, the command line's evaluation, the GSM8K proposer): :meth:`Reader.load` opens a
checkpoint with its prompt format, context rule (:func:`reading_length`,
:class:`ContextTooLong`), fitted temperature ``T`` (:func:`temperature_fitted`) and
sampler. Its modules, lowest first: :mod:`.readout`, :mod:`.sampling`, :mod:`.packing`,
:mod:`.prompts`, :mod:`.decoding`, :mod:`.rationales`, :mod:`.reading`, :mod:`.verbal`;
only the modules named in ``tests/test_layering.py`` (``READER_USERS``) call them
directly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlcd_lab.files.io import read_json_file
from rlcd_lab.files.rundir import META_FILE
from rlcd_lab.lm.checkpoint import DEFAULT_META, calibration_T, upgrade_meta
from rlcd_lab.lm.loading import load_checkpoint, merge_adapter
from rlcd_lab.lm.model import context_length
from rlcd_lab.metrics import apply_temperature
from rlcd_lab.reader.prompts import (
    Mode,
    PromptFormat,
    build_prompt,
    detect_prompt_format,
    encode_prompts,
    left_pad,
)
from rlcd_lab.reader.rationales import Rationales, generate_text, sample_rationales
from rlcd_lab.reader.reading import Reading, read, score_rationales, shared_prefix_readout
from rlcd_lab.reader.readout import OptionTokens, option_token_ids
from rlcd_lab.reader.readout import readout as readout_at_end
from rlcd_lab.reader.sampling import Sampler, pad_id

DEFAULT_NEW_TOKENS = 64
"""Rationale tokens when the checkpoint records none (a converted pretrained model such as
SmolLM2): the Ask tab's and ``reader.read``'s default; a request's ``max_new_tokens``
overrides it."""
PRETRAINED_METHODS = ("pretrain", "pretrained")
"""``rlcd.json`` methods of checkpoints whose calibration T was never fitted: a base model
from ``rlcd-lab pretrain``, a converted pretrained model (``rlcd-lab gguf smollm2``)."""


def temperature_fitted(raw_meta: Mapping[str, Any] | None) -> tuple[bool, str]:
    """``(fitted, note)``: whether a checkpoint's calibration temperature T was fitted,
    from its own ``rlcd.json`` as written (``raw_meta``; None: there is none), not merged
    over the defaults. Fitted means the file records T (``"T"``, or the old key
    ``"temperature"``: :func:`rlcd_lab.lm.checkpoint.calibration_T`) and the method is
    not a pretraining one (:data:`PRETRAINED_METHODS`: a base checkpoint's T = 1 is a
    default, not a fit). ``note`` says why not (else ``""``)."""
    raw = raw_meta if isinstance(raw_meta, Mapping) else {}
    method = raw.get("method")
    if method in PRETRAINED_METHODS:
        return False, f"method {method}: a base model, never calibrated"
    if calibration_T(raw) is None:
        return False, "no T in rlcd.json"
    return True, ""


def raw_meta(path: str | Path) -> dict | None:
    """A checkpoint's ``rlcd.json`` as written (not merged over the defaults); None when it
    has none or it cannot be read."""
    try:
        raw = read_json_file(Path(path) / META_FILE)
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) else None


def has_chat_template(path: Path) -> bool:
    """Whether the checkpoint at ``path`` ships a chat template (read from its files, the
    model is not loaded)."""
    if (path / "chat_template.jinja").is_file():
        return True
    try:
        return bool(json.loads((path / "tokenizer_config.json").read_text()).get("chat_template"))
    except (OSError, ValueError, AttributeError):
        return False


def checkpoint_prompt_format(path: str | Path, meta: Mapping[str, Any]) -> str:
    """The prompt format a :class:`Reader` of the checkpoint at ``path`` uses
    (:func:`detect_prompt_format` on ``meta``, its ``rlcd.json``), read from its files: the
    chat template is looked up by :func:`has_chat_template`, the model is not loaded."""
    return detect_prompt_format(has_chat_template(Path(path)), meta)


def reading_length(
    prompt_tokens: int,
    bridge_tokens: int,
    marker_tokens: int,
    *,
    mode: str = "reason",
    max_new_tokens: int = DEFAULT_NEW_TOKENS,
) -> int:
    """Positions a reading uses at most (the context rule). ``direct``: the prompt, which
    ends with the marker, and the bridge to the answer token; otherwise (``reason``,
    ``auto``): the prompt, ``max_new_tokens`` rationale tokens, the marker and the bridge
    (a rationale that writes the marker itself stops sooner). The answer token is read at
    the last position, so it takes none."""
    if mode == "direct":
        return prompt_tokens + bridge_tokens
    return prompt_tokens + int(max_new_tokens) + marker_tokens + bridge_tokens


class ContextTooLong(ValueError):
    """A reading needs more positions than the model reads (:meth:`Reader.check_fits`):
    ``prompt_tokens``, ``needed`` (:func:`reading_length`), ``n_ctx`` (the model's limit,
    ``models.context_length``), ``mode`` and ``max_new_tokens``. Each face words it."""

    def __init__(self, prompt_tokens: int, needed: int, n_ctx: int, mode: str, max_new: int):
        self.prompt_tokens, self.needed, self.n_ctx = prompt_tokens, needed, n_ctx
        self.mode, self.max_new_tokens = mode, max_new
        super().__init__(
            f"a reading needs {needed:,} positions (prompt {prompt_tokens:,} tokens"
            + ("" if mode == "direct" else f", {max_new} rationale tokens")
            + f"), but the model reads at most {n_ctx:,}"
        )


class Reader:
    """A checkpoint's calibrated readouts, the one entry the faces read through (the
    decision engine, the dashboard's Ask, Compare and Batch tabs, the GSM8K proposer).

    It owns, decided once from the checkpoint:

    * the prompt format ``prompt_format`` (``auto``: :func:`detect_prompt_format`;
      ``chat`` renders through the chat template, :func:`build_prompt`) and
      :meth:`prompt`;
    * the context budget: ``n_ctx`` (``models.context_length``) and :meth:`check_fits`,
      the rule (:func:`reading_length`) every face checks a question with;
    * the fitted calibration temperature ``T`` (``rlcd.json`` ``"T"``, 1 when
      none is recorded; ``T`` overrides it), ``T_fitted`` (:func:`temperature_fitted`;
      a base model's recorded T = 1 is not a fit) and ``T_note`` (why not, else ``""``):
      :meth:`calibrate` is ``softmax(z / T)``;
      :meth:`read` returns raw readings (``u = softmax(z)``), :meth:`calibrated` their
      calibrated readouts;
    * the shared-prefix direct readout :meth:`direct`;
    * sampling through a :class:`Sampler` (``sampler``; None: :func:`default_sampler`):
      :meth:`sample` (rationales), :meth:`generate_text` (free text), and scoring
      :meth:`score` (:func:`score_rationales`).

    The module-level functions are the implementation (training calls them directly).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        meta: Mapping[str, Any] | None = None,
        *,
        prompt_format: PromptFormat = "auto",
        T: float | None = None,
        T_fitted: bool | None = None,
        sampler: Sampler | None = None,
    ):
        self.model, self.tokenizer, self.sampler = model, tokenizer, sampler
        self.meta = {**DEFAULT_META, **upgrade_meta(meta)}
        self.marker, self.sep = self.meta["marker"], self.meta["sep"]
        fitted, note = temperature_fitted(meta)
        if T_fitted is None:
            T_fitted = T is not None or fitted
        self.T_fitted = bool(T_fitted)
        self.T_note = "" if self.T_fitted else note or "not fitted"
        recorded = self.meta.get("T")
        self.T = float((1.0 if recorded is None else recorded) if T is None else T)
        if not (math.isfinite(self.T) and self.T > 0):
            raise ValueError(f"T must be positive and finite, got {self.T}")
        self.task_options = tuple(self.meta.get("options") or ())
        if prompt_format == "auto":
            chat = getattr(tokenizer, "chat_template", None) is not None
            prompt_format = detect_prompt_format(chat, self.meta)  # type: ignore[assignment]
        if prompt_format == "task" and len(self.task_options) < 2:
            raise ValueError("prompt_format 'task' needs the checkpoint's options in rlcd.json")
        if prompt_format not in ("task", "chat", "plain"):
            raise ValueError(f"unknown prompt_format {prompt_format!r}")
        self.prompt_format: str = prompt_format
        self.chat = prompt_format == "chat"
        self.n_ctx = context_length(model, tokenizer)
        cfg = self.meta.get("config") if isinstance(self.meta.get("config"), dict) else {}
        self.default_new_tokens = int(
            self.meta.get("max_new_tokens") or cfg.get("max_new_tokens") or DEFAULT_NEW_TOKENS
        )
        self.pad_id = pad_id(tokenizer)
        self.marker_len = len(tokenizer(self.marker, add_special_tokens=False)["input_ids"])

    @classmethod
    def load(
        cls,
        path: str | Path,
        device: str | torch.device = "cpu",
        verify: bool = True,
        **kwargs: Any,
    ) -> Reader:
        """A checkpoint directory (``loading.load_checkpoint``; ``verify=False`` skips its
        checksums; a LoRA adapter merged into its weights, ``loading.merge_adapter``) as a
        reader, the one way every face opens a checkpoint: ``T_fitted`` and ``T_note`` from
        its own ``rlcd.json`` as written (none: not fitted) unless ``T_fitted`` (or ``T``)
        is given."""
        model, tokenizer, meta = load_checkpoint(path, device=device, verify=verify)
        model = merge_adapter(model)  # an adapter's W + B A, once: one matrix per layer
        fitted, note = temperature_fitted(raw_meta(path))
        if "T_fitted" not in kwargs and kwargs.get("T") is None:
            kwargs["T_fitted"] = fitted
        reader = cls(model, tokenizer, meta, **kwargs)
        if not reader.T_fitted:
            reader.T_note = note or reader.T_note
        return reader

    # ------------------------------------------------------------------ prompts
    def prompt(
        self, question: str, *, direct: bool = False, options: Sequence[str] | None = None
    ) -> str:
        """:func:`build_prompt` in this checkpoint's format, with its marker."""
        return build_prompt(
            self.tokenizer, question, direct=direct, marker=self.marker, chat=self.chat,
            options=options,
        )  # fmt: skip

    def encode(self, text: str) -> list[int]:
        """The token ids of a complete prompt (no special tokens added)."""
        return encode_prompts(self.tokenizer, [text])[0]

    def options(self, labels: Sequence[str]) -> OptionTokens:
        """The option tokens of ``labels`` after this checkpoint's marker and separator
        (``readout.option_token_ids``; ``ValueError`` naming bad labels)."""
        return option_token_ids(self.tokenizer, tuple(labels), self.marker, self.sep)

    # ------------------------------------------------------------------ context budget
    def check_fits(
        self,
        prompt_tokens: int,
        bridge_tokens: int,
        *,
        mode: str = "reason",
        max_new_tokens: int | None = None,
    ) -> int:
        """The positions a reading needs (:func:`reading_length` with this checkpoint's
        marker; ``max_new_tokens`` None: ``default_new_tokens``); raises
        :class:`ContextTooLong` when that is more than ``n_ctx`` (a model stating no limit
        is not checked). The one context rule of every face."""
        new = self.default_new_tokens if max_new_tokens is None else int(max_new_tokens)
        needed = reading_length(
            prompt_tokens, bridge_tokens, self.marker_len, mode=mode, max_new_tokens=new
        )
        if self.n_ctx is not None and needed > self.n_ctx:
            raise ContextTooLong(prompt_tokens, needed, self.n_ctx, mode, new)
        return needed

    def _sizes(self, question: str, labels: Sequence[str], mode: str) -> tuple[int, int]:
        """``(prompt tokens, bridge tokens)`` of the prompt :meth:`read` builds for
        ``question`` (chat template and worked example included)."""
        opts = self.options(labels)
        prompt = self.prompt(question, direct=mode == "direct", options=opts.labels)
        return len(self.encode(prompt)), len(opts.bridge)

    def question_positions(
        self,
        question: str,
        labels: Sequence[str],
        *,
        mode: str = "reason",
        max_new_tokens: int | None = None,
    ) -> tuple[int, int]:
        """``(prompt tokens, positions)`` a reading of ``question`` uses at most: the prompt
        :meth:`read` builds for it, then (not ``direct``) ``max_new_tokens`` rationale
        tokens and the marker, then the bridge. Raises ``ValueError`` for bad labels or an
        empty question; not the context check (:meth:`check_question`)."""
        n_prompt, n_bridge = self._sizes(question, labels, mode)
        new = self.default_new_tokens if max_new_tokens is None else int(max_new_tokens)
        return n_prompt, reading_length(
            n_prompt, n_bridge, self.marker_len, mode=mode, max_new_tokens=new
        )

    def check_question(
        self,
        question: str,
        labels: Sequence[str],
        *,
        mode: str = "reason",
        max_new_tokens: int | None = None,
    ) -> tuple[int, int]:
        """:meth:`question_positions`, refused past the context (:meth:`check_fits`:
        :class:`ContextTooLong`)."""
        n_prompt, n_bridge = self._sizes(question, labels, mode)
        return n_prompt, self.check_fits(
            n_prompt, n_bridge, mode=mode, max_new_tokens=max_new_tokens
        )

    # ------------------------------------------------------------------ readouts
    def calibrate(self, logits: Tensor | np.ndarray | Sequence) -> np.ndarray:
        """Calibrated readouts ``softmax(z / T)`` ``(..., K)`` in float64
        (``metrics.apply_temperature``) of option logits ``z``."""
        if isinstance(logits, Tensor):
            logits = logits.detach().double().cpu().numpy()
        return apply_temperature(np.asarray(logits, dtype=np.float64), self.T)

    def calibrated(self, reading: Reading) -> np.ndarray:
        """A reading's calibrated readouts ``(M, K)``: ``softmax(logits / T)`` per rationale
        (its ``u`` is the raw ``softmax(logits)``)."""
        return self.calibrate(reading.logits)

    def read(
        self,
        questions: Sequence[str],
        option_lists: Sequence[Sequence[str]],
        *,
        mode: Mode = "reason",
        m: int = 1,
        max_new_tokens: int | None = None,
        sampling_temperature: float = 1.0,
        seed: int | None = 0,
        batch_size: int = 64,
        on_batch: Callable[[int], object] | None = None,
    ) -> list[Reading]:
        """Raw readings (:func:`read`) in this checkpoint's prompt format, marker and
        sampler; ``max_new_tokens`` None: ``default_new_tokens``. Calibrate them with
        :meth:`calibrated`."""
        return read(
            self.model, self.tokenizer, questions, option_lists, mode=mode, m=m,
            max_new_tokens=self.default_new_tokens if max_new_tokens is None else max_new_tokens,
            sampling_temperature=sampling_temperature, seed=seed, marker=self.marker, sep=self.sep,
            batch_size=batch_size, on_batch=on_batch, chat=self.chat, sampler=self.sampler,
        )  # fmt: skip

    @torch.no_grad()
    def direct(
        self,
        groups: Sequence[Sequence[Sequence[int]]],
        option_ids: Tensor | Sequence[Sequence[int]],
        *,
        share_prefix: bool = True,
    ) -> tuple[Tensor, Tensor]:
        """Raw direct readouts ``(u, logits)`` ``(R, K)`` of token-id prompts that end with
        the marker and bridge, grouped by what they share (the questions about one state):
        :func:`shared_prefix_readout` when ``share_prefix`` and a group holds more than one
        prompt, else one plain pass (``readout.readout``). ``option_ids`` ``(R, K)`` for the
        ``R`` prompts in order (-1 = absent option)."""
        if share_prefix and any(len(g) > 1 for g in groups):
            return shared_prefix_readout(self.model, groups, option_ids, self.pad_id)
        flat = [list(s) for g in groups for s in g]
        ids, mask = left_pad(flat, self.pad_id, self.model.device)
        return readout_at_end(self.model, ids, mask, option_ids)

    # ------------------------------------------------------------------ sampling
    def sample(
        self,
        prompts: Sequence[str],
        m: int,
        max_new_tokens: int | None = None,
        *,
        bridge: Sequence[int] | Sequence[Sequence[int]] = (),
        sampling_temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | Sequence[int] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> Rationales:
        """``m`` rationales per prompt (:func:`sample_rationales`) with this checkpoint's
        marker and sampler; ``max_new_tokens`` None: ``default_new_tokens``."""
        return sample_rationales(
            self.model, self.tokenizer, prompts, m,
            self.default_new_tokens if max_new_tokens is None else max_new_tokens,
            bridge=bridge, marker=self.marker, sampling_temperature=sampling_temperature,
            top_p=top_p,
            seed=seed, sampler=self.sampler, should_stop=should_stop,
        )  # fmt: skip

    def score(
        self, rats: Rationales, option_ids: Tensor | Sequence[int]
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Raw ``(u, logits, logp_r)`` of sampled rationales (:func:`score_rationales`);
        ``option_ids`` ``(K,)`` shared or ``(B, K)`` per prompt."""
        return score_rationales(self.model, rats, option_ids)

    def generate_text(
        self,
        prompts: Sequence[str],
        max_new_tokens: int,
        *,
        sampling_temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | Sequence[int] = 0,
    ) -> list[str]:
        """Free text, one sample per prompt (:func:`generate_text`) with this sampler."""
        return generate_text(
            self.model, self.tokenizer, prompts, max_new_tokens,
            sampling_temperature=sampling_temperature,
            top_p=top_p, seed=seed, sampler=self.sampler,
        )  # fmt: skip
