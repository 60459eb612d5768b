"""Verbalized (stated) confidence: its format, parser, reading and distribution.

RLCR (Damani et al. 2025, "Beyond Binary Rewards: Training LMs to Reason About Their
Uncertainty", trained by :mod:`rlcd_lab.train.rlcr`) has the model write, after its
rationale, an answer ``a`` *and* a confidence ``c`` in [0, 1] that ``a`` is right; this
module reads that confidence. Start at :func:`read_stated` (eval dumps); the format is
:func:`digit_confidence`'s, the distribution over the options :func:`stated_probs`'s.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlcd_lab.lm.checkpoint import MARKER, SEP
from rlcd_lab.reader.rationales import Rationales, mix_seed, sample_questions
from rlcd_lab.reader.reading import score_rationales
from rlcd_lab.reader.readout import option_token_ids
from rlcd_lab.reader.sampling import base_model

CUE = "\nConfidence:"
"""Written (not sampled) after the answer token; the confidence token follows it."""
DIGITS = "0123456789"
PROB_FLOOR = 1e-6
"""Smallest probability a stated distribution gives an option (its logit is finite)."""


# ----------------------------------------------------------------------- pure functions
def digit_confidence(d: int) -> float:
    """``c = (d + 0.5) / 10`` for a digit ``d`` in 0..9 (the centre of its bin).

    Format here (every tokenizer, the tiny character-level one included): after
    ``marker + sep + answer`` the cue :data:`CUE` (``"\\nConfidence:"``), the separator, then
    ONE token, a digit ``d`` in 0..9 meaning ``c = (d + 0.5) / 10`` (:func:`digit_confidence`,
    the centre of the bin ``[d/10, (d+1)/10)``). The token is read from the model's
    next-token distribution over its whole vocabulary, so a token that is not a confidence is
    a format failure. :func:`parse_confidence` parses free text too ("0.8", "80%", "8/10",
    ``<confidence>0.8</confidence>``, a lone digit).
    """
    return (d + 0.5) / 10


_TAG = re.compile(r"<confidence>(.*?)</confidence>", re.IGNORECASE | re.DOTALL)
_LABEL = re.compile(r"confidence\s*(?:level)?\s*[:=]?", re.IGNORECASE)
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d*)?|\.\d+)(?:\s*(%)|\s*/\s*(\d+(?:\.\d+)?))?")


def parse_confidence(text: str) -> float | None:
    """A stated confidence in [0, 1] from free text, or None (a format failure).

    Where: inside ``<confidence>...</confidence>`` if present, else after the last
    "confidence" label (``Confidence: 0.8``), else the whole text; the LAST number there
    is read:

    * ``80%`` -> 0.8 (percent); ``8/10`` -> 0.8 (fraction, denominator > 0);
    * ``0.8``, ``.8``, ``1.`` -> the decimal itself;
    * a lone digit ``8`` -> 0.85, the digit-bin format (:func:`digit_confidence`);
    * a whole number 10..100 -> percent (``80`` -> 0.8).

    Anything outside [0, 1] after that, or no number, is None.
    """
    inside = _TAG.search(text)
    if inside is not None:
        text = inside.group(1)
    else:
        labels = list(_LABEL.finditer(text))
        if labels:
            text = text[labels[-1].end() :]
    numbers = list(_NUMBER.finditer(text))
    if not numbers:
        return None
    value, percent, denominator = numbers[-1].groups()
    x = float(value)
    if percent:
        x /= 100
    elif denominator is not None:
        if float(denominator) == 0:
            return None
        x /= float(denominator)
    elif "." not in value:
        if len(value) == 1:
            x = digit_confidence(int(value))
        elif 10 <= x <= 100:
            x /= 100
        else:
            return None
    return x if 0.0 <= x <= 1.0 else None


def stated_probs(answer: Tensor, c: Tensor, k: Tensor | int) -> Tensor:
    """The distribution a stated confidence implies: ``p(a) = c``, ``(1 - c) / (K - 1)`` on
    each other option, 0 on absent ones.

    ``answer (N,)`` long, ``c (N,)`` in [0, 1], ``k``: options per row (int or ``(N,)``);
    returns ``(N, max k)`` rows summing to 1 (float64).

    For the metrics a stated confidence becomes a distribution over the K options
    (:func:`stated_probs`): ``p(a) = c``, the rest spread evenly over the other K - 1; its
    logits ``log p`` (:func:`stated_logits`) go through temperature scaling and every metric
    of :mod:`rlcd_lab.metrics` unchanged. :func:`read_stated` reads a model's stated
    confidence for eval dumps (``evaluate.run_eval(..., stated=True)``).
    """
    k = torch.as_tensor(k, dtype=torch.long).expand(answer.shape)
    width = int(k.max())
    c = c.double()
    present = torch.arange(width)[None, :] < k[:, None]
    rest = ((1 - c) / (k - 1).double())[:, None].expand(-1, width)
    p = torch.where(present, rest, 0.0)
    return p.scatter(1, answer[:, None], c[:, None])


def stated_logits(answer: Tensor, c: Tensor, k: Tensor | int) -> Tensor:
    """``log max(stated_probs, PROB_FLOOR)``, ``-inf`` on absent options: logits whose
    softmax is the stated distribution (up to the floor), for temperature scaling and
    :mod:`rlcd_lab.metrics`. Shapes as :func:`stated_probs`."""
    k = torch.as_tensor(k, dtype=torch.long).expand(answer.shape)
    p = stated_probs(answer, c, k)
    present = torch.arange(p.shape[1])[None, :] < k[:, None]
    return torch.where(present, p.clamp_min(PROB_FLOOR).log(), -math.inf)


# ----------------------------------------------------------------------- on the model
@dataclass(frozen=True)
class ConfidenceTokens:
    """``cue``: the token ids written after the answer (the cue, then the bridge to the
    digit); ``digits``: the ids of ``0..9`` as they follow it."""

    cue: tuple[int, ...]
    digits: tuple[int, ...]


def confidence_tokens(
    tokenizer: PreTrainedTokenizerBase, cue: str = CUE, sep: str = SEP
) -> ConfidenceTokens:
    """The cue's tokens and the digit tokens after ``cue + sep`` (as option labels are
    found after the marker: ``readout.option_token_ids``; ``ValueError`` if a digit is
    not one token there)."""
    digits = option_token_ids(tokenizer, list(DIGITS), marker=cue, sep=sep)
    ids = list(tokenizer(cue, add_special_tokens=False)["input_ids"])
    return ConfidenceTokens(tuple(ids) + digits.bridge, digits.ids)


def with_confidence_cue(
    rats: Rationales, option_ids: Tensor, answer: Tensor, conf: ConfidenceTokens
) -> Rationales:
    """``rats`` with the answer token and the cue appended to every row, so the scoring
    pass reads the confidence token at the last column. ``option_ids (B, K)`` per prompt,
    ``answer (N,)``. The rows are left-padded, so the new columns go on the right; the
    appended tokens are not part of ``log pi(r)`` (``rationale_mask`` False there)."""
    ids = option_ids.to(rats.input_ids.device)[rats.prompt_index]
    answer_tok = ids.gather(1, answer.to(ids.device)[:, None])
    cue = torch.tensor(conf.cue, device=ids.device).expand(len(answer_tok), -1)
    extra = torch.cat([answer_tok, cue], dim=1)
    return replace(
        rats,
        input_ids=torch.cat([rats.input_ids, extra], dim=1),
        attention_mask=torch.cat([rats.attention_mask, torch.ones_like(extra)], dim=1),
        rationale_mask=torch.cat([rats.rationale_mask, torch.zeros_like(extra, dtype=bool)], 1),
    )


def confidence_logprobs(
    model: torch.nn.Module,
    rats: Rationales,
    option_ids: Tensor,
    answer: Tensor,
    conf: ConfidenceTokens,
) -> Tensor:
    """``(N, V)`` log-probabilities of the next token after ``rationale + marker + answer
    + cue`` over the whole vocabulary (one more forward pass, with gradient when enabled;
    ``reader.score_rationales`` on :func:`with_confidence_cue`'s rows)."""
    vocab = base_model(model).get_output_embeddings().weight.shape[0]
    everything = torch.arange(vocab, device=rats.input_ids.device)
    _, logits, _ = score_rationales(
        model, with_confidence_cue(rats, option_ids, answer, conf), everything
    )
    return logits.log_softmax(-1)


def token_confidences(tokenizer: PreTrainedTokenizerBase, tokens: Sequence[int]) -> Tensor:
    """``(N,)`` float64: :func:`parse_confidence` of each token's text, NaN where it is
    not a confidence (a digit token ``d`` gives ``(d + 0.5) / 10``)."""
    values = [parse_confidence(tokenizer.decode([int(t)])) for t in tokens]
    return torch.tensor([math.nan if v is None else v for v in values], dtype=torch.float64)


@torch.no_grad()
def read_stated(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    questions: Sequence[str],
    option_lists: Sequence[Sequence[str]],
    *,
    max_new_tokens: int = 64,
    sampling_temperature: float = 1.0,
    seed: int = 0,
    marker: str = MARKER,
    sep: str = SEP,
    cue: str = CUE,
    batch_size: int = 64,
) -> list[dict]:
    """The stated confidence after each question's first rationale, per question.

    The rationale is the one ``reader.read(..., m=1, seed=seed)`` samples (same seeds:
    question ``i`` with ``mix_seed(seed, i)``, a row's draw independent of its batch);
    the answer is the readout's argmax; the confidence token is the most likely token
    after the cue (greedy), parsed (:func:`token_confidences`); if that is not a
    confidence, the most likely digit is taken and ``stated_valid`` is False. Returns
    dicts with ``rationale`` (text), ``stated_answer``, ``stated_confidence``,
    ``stated_valid``, ``confidence_probs`` (the 10 digits' probabilities under the whole
    vocabulary: their sum is the format's share) and ``stated_logits``
    (:func:`stated_logits` over the question's own options)."""
    conf = confidence_tokens(tokenizer, cue, sep)
    digits = torch.tensor(conf.digits)
    out: list[dict] = []
    for start in range(0, len(questions), batch_size):
        qs = questions[start : start + batch_size]
        labels = option_lists[start : start + batch_size]
        rats, ids = sample_questions(
            model, tokenizer, qs, labels, 1, max_new_tokens, marker=marker, sep=sep,
            sampling_temperature=sampling_temperature,
            seed=[mix_seed(seed, start + i) for i in range(len(qs))],
        )  # fmt: skip
        u, _, _ = score_rationales(model, rats, ids)
        answer = u.argmax(-1)
        logq = confidence_logprobs(model, rats, ids, answer, conf).float().cpu()
        digit_p = logq.exp()[:, digits]
        c = token_confidences(tokenizer, logq.argmax(-1).tolist()).double()  # CPU here
        valid = ~c.isnan()
        c = torch.where(valid, c, (digit_p.argmax(-1).double() + 0.5) / 10)
        k = torch.tensor([len(o) for o in labels])
        logits = stated_logits(answer.cpu(), c, k)
        for i in range(len(qs)):
            out.append(
                {
                    "rationale": rats.texts[i],
                    "stated_answer": int(answer[i]),
                    "stated_confidence": float(c[i]),
                    "stated_valid": bool(valid[i]),
                    "confidence_probs": digit_p[i].tolist(),
                    "stated_logits": logits[i, : int(k[i])].tolist(),
                }
            )
    return out
