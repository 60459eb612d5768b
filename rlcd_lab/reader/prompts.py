"""Prompts: the text a model continues, its option tokens, and the token rows every pass
runs on (the reader's lowest floor; OpenJev-RLCD sec. 2).

Start at :func:`build_prompt` (plain or chat text, reason or direct mode); then
:func:`item_options` and :func:`direct_prompts` (each question's option tokens),
:func:`encode_prompts` and :func:`left_pad` (the ``(N, T)`` rows, padded on the left so
the readout sits at column -1), and :func:`detect_prompt_format` (how a checkpoint is
prompted: ``chat``, ``task`` or ``plain``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch
from torch import Tensor
from transformers import PreTrainedTokenizerBase

from rlcd_lab.lm.checkpoint import MARKER, SEP
from rlcd_lab.reader.readout import OptionTokens, option_token_ids

Mode = Literal["direct", "reason"]
"""How a question is read: ``direct`` (the prompt ends with the marker, one empty
rationale) or ``reason`` (``m`` sampled rationales)."""

PromptFormat = Literal["auto", "task", "chat", "plain"]
"""A checkpoint's prompt format (:func:`detect_prompt_format`; ``auto``: detect it)."""


FEW_SHOT = (
    (
        "Which animal can fly?\nA) dog\nB) eagle\nC) fish",
        ("A", "B", "C"),
        "Dogs and fish cannot fly; eagles can.",
        "B",
    ),
)
"""Worked examples shown to chat models before the question (question, options, rationale,
answer): with one, SmolLM2-135M-Instruct writes the marker itself in most rationales
(without, in almost none); each costs prompt tokens in every forward pass."""


def build_prompt(
    tokenizer: PreTrainedTokenizerBase,
    question: str,
    *,
    direct: bool = False,
    marker: str = MARKER,
    chat: bool | None = None,
    instruction: str | None = None,
    options: Sequence[str] | None = None,
) -> str:
    """The text the model continues: a rationale (``direct=False``) or straight the answer.

    Plain models (the tiny world): ``question + "\n"``, plus the marker when ``direct``.
    Chat models (``chat=None`` means: the tokenizer has a chat template) get, through the
    chat template with thinking disabled (Qwen3 ``enable_thinking=False``): a system turn
    (``instruction``; default: reason in a sentence or two, then a last line
    ``"<marker> X"``), the :data:`FEW_SHOT` example as earlier turns, then the question
    followed by ``Options: ...`` (when ``options`` are given). In direct mode the examples
    answer at once and the assistant turn starts with the marker.
    """
    if not question.strip():
        raise ValueError("the question (prompt) is empty")
    if chat is None:
        chat = getattr(tokenizer, "chat_template", None) is not None
    if not chat:
        return question + "\n" + (marker if direct else "")
    if instruction is None:
        instruction = (
            f"Reply with '{marker} X', X one of the options."
            if direct
            else f"Reason in a sentence or two, then end with '{marker} X', X one of the options."
        )

    def user(q: str, opts: Sequence[str] | None) -> dict:
        listed = f"\nOptions: {', '.join(opts)}" if opts else ""
        return {"role": "user", "content": q + listed}

    messages = [{"role": "system", "content": instruction}]
    for q, opts, rationale, answer in FEW_SHOT:
        reply = f"{marker} {answer}" if direct else f"{rationale}\n{marker} {answer}"
        messages += [user(q, opts), {"role": "assistant", "content": reply}]
    messages.append(user(question, options))
    return chat_text(tokenizer, messages, enable_thinking=False) + (marker if direct else "")


def chat_text(tokenizer: PreTrainedTokenizerBase, messages: Sequence[Mapping], **kwargs) -> str:
    """``messages`` (``{"role", "content"}`` dicts) rendered by the tokenizer's chat template,
    ending with the generation prompt (the assistant turn begins); ``kwargs`` go to the
    template (``enable_thinking=False``: Qwen3's non-thinking mode). The one place a chat
    prompt is rendered (:func:`build_prompt`, the GSM8K proposer's prompt)."""
    return tokenizer.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=True, **kwargs
    )


def direct_prompts(
    tokenizer: PreTrainedTokenizerBase,
    questions: Sequence[str],
    option_lists: Sequence[Sequence[str]],
    marker: str = MARKER,
    sep: str = SEP,
    chat: bool | None = None,
) -> tuple[list[str], list[OptionTokens]]:
    """Direct-mode prompts (ending with the marker, :func:`build_prompt`) of questions with
    their own option labels, and each question's option tokens (:func:`item_options`)."""
    opts = item_options(tokenizer, option_lists, marker, sep)
    texts = [
        build_prompt(tokenizer, q, direct=True, marker=marker, chat=chat, options=o.labels)
        for q, o in zip(questions, opts, strict=True)
    ]
    return texts, opts


def item_options(
    tokenizer: PreTrainedTokenizerBase,
    option_lists: Sequence[Sequence[str]],
    marker: str = MARKER,
    sep: str = SEP,
) -> list[OptionTokens]:
    """Option tokens of each question's own labels (``readout.option_token_ids``, computed
    once per distinct label tuple). Raises ``ValueError`` naming bad labels."""
    cache: dict[tuple[str, ...], OptionTokens] = {}
    out = []
    for labels in option_lists:
        key = tuple(labels)
        if key not in cache:
            cache[key] = option_token_ids(tokenizer, key, marker, sep)
        out.append(cache[key])
    return out


def padded_option_ids(options: Sequence[OptionTokens]) -> Tensor:
    """``(B, K_max)`` option ids, -1 where a question has fewer options (``-inf`` logit)."""
    k = max(len(o) for o in options)
    return torch.tensor([list(o.ids) + [-1] * (k - len(o)) for o in options])


def encode_prompts(
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    bridge: Sequence[int] | Sequence[Sequence[int]] = (),
) -> list[list[int]]:
    """Token ids of each text (no special tokens added: texts are complete prompts,
    e.g. from ``build_prompt``), followed by the ``bridge`` tokens (one shared, or one
    per text)."""
    if not texts:
        raise ValueError("no prompts given")
    bridges = _per_prompt(bridge, len(texts))
    return [
        list(ids) + list(b)
        for ids, b in zip(
            tokenizer(list(texts), add_special_tokens=False)["input_ids"], bridges, strict=True
        )
    ]


def _per_prompt(bridge, n: int) -> list[tuple[int, ...]]:
    """``bridge`` as one tuple per prompt (a flat sequence of ints is shared by all)."""
    bridge = list(bridge)
    if bridge and not isinstance(bridge[0], int):
        if len(bridge) != n:
            raise ValueError(f"{len(bridge)} bridges for {n} prompts")
        return [tuple(b) for b in bridge]
    return [tuple(bridge)] * n


def left_pad(rows: list[list[int]], pad_id: int, device) -> tuple[Tensor, Tensor]:
    """Left-pad token-id lists into ``(ids, attention_mask)`` ``(N, T)`` on ``device``."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r) :] = torch.tensor(r)
            mask[i, width - len(r) :] = 1
    return ids.to(device), mask.to(device)


def detect_prompt_format(chat_template: bool, meta: Mapping[str, Any]) -> str:
    """How a checkpoint is prompted: ``chat`` when its tokenizer has a chat template,
    ``task`` when its ``rlcd.json`` lists its own ``options`` (a character-level model that
    only knows its task's format), else ``plain``. The one rule (:class:`Reader`, the Ask
    tab's model card, which reads the template from the files without loading the model)."""
    if chat_template:
        return "chat"
    return "task" if len(meta.get("options") or ()) >= 2 else "plain"
