"""Ask tab: sample M rationales from a checkpoint, read each one's calibrated readout, route.

For a question and its option labels the model writes ``M`` rationales that end in the
marker and one forward pass reads each rationale's option logits, through the checkpoint's
:class:`rlcd_lab.reader.Reader` (``Reader.read``: :func:`rlcd_lab.reader.read`, as training
and :func:`rlcd_lab.evaluate.run_eval` read). The Reader owns the prompt format, the
context rule and the fitted calibration temperature T (``rlcd.json`` ``"T"``), applied to
those logits: ``u_i = softmax(logits_i / T)`` (``Reader.calibrated``); a checkpoint whose
T was never fitted (a ``pretrain`` base model, a converted pretrained model; its recorded
T is 1) is read raw and said to be "not fitted" (:func:`temperature_status`). The
single-query answer is the first rationale's readout (what the eval dumps and the Routing
tab use); the mixture is ``p = mean_i u_i``.
The routing decision is a :class:`rlcd_lab.math.routing.DecisionRule`: by default max p of the
single query against the threshold; the tab can switch to the mixture and to the
chance-corrected confidence (the server's measure), and says which rule it applied.
The checkpoint side of the tab (its model card, the examples it offers: :func:`model_card`,
:func:`checkpoint_info`, :func:`example_fields`) is :mod:`.ask_checkpoint`'s, re-exported here.

Size limits keep one request from holding the model for minutes while every other user
waits (the app runs one model request at a time, see :mod:`.ui`): a question longer than
:data:`MAX_QUESTION_CHARS` (options text: :data:`MAX_OPTIONS_CHARS`) is refused before
anything is tokenised or loaded, and a prompt that, with ``max_new_tokens`` rationale tokens,
the marker and the answer, needs more positions than the model reads
(:func:`context_length`) is refused before sampling (``Reader.check_question``, the rule
the decision server applies too). Both come back as ``gr.Error`` naming
the limit and the actual size.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import gradio as gr
import numpy as np
import plotly.graph_objects as go
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlcd_lab.dashboard.ask_checkpoint import (
    example_items,
    temperature_status,
)
from rlcd_lab.dashboard.common import checkpoint_dir, compact_layout
from rlcd_lab.decide.questions import unknown_chars
from rlcd_lab.files.assets import ASSETS
from rlcd_lab.lm.checkpoint import MARKER
from rlcd_lab.lm.loading import load_checkpoint, merge_adapter
from rlcd_lab.math.routing import DEFAULT_THRESHOLD, DecisionRule
from rlcd_lab.reader import ContextTooLong, Reader
from rlcd_lab.reports import plots

MAX_QUESTION_CHARS = 2000
"""Longest question the Ask tab takes, in characters (about a page of text; with a BPE
tokenizer, some 500 tokens). Checked before the question is tokenised: it bounds the work
of one request, during which other users' questions wait."""
MAX_OPTIONS_CHARS = 1000
"""Longest options text the Ask tab takes, in characters (checked before it is split)."""
MODEL_CACHE = 4
"""Loaded checkpoints kept in memory (least recently used evicted)."""
GENERIC_HINT = "letters A, B, C or Y, N"
"""Labels suggested for a checkpoint without options of its own (a BPE model: single tokens)."""
NOT_SINGLE = "not a single token"
"""What the reader's message says of labels that are not single tokens."""


@lru_cache(maxsize=MODEL_CACHE)
def _load(path: str, stamp: int) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, dict]:
    model, tokenizer, meta = load_checkpoint(path)
    return merge_adapter(model), tokenizer, meta  # an adapter merged once, at load


def load_model(
    checkpoint: str, root: str | Path = ASSETS
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, dict]:
    """``(model, tokenizer, meta)`` of a shipped checkpoint name or a checkpoint path, from
    a small LRU cache (reloaded when the directory changes). Raises ``gr.Error`` with the
    loader's message for a missing or unreadable checkpoint."""
    path = checkpoint_dir(checkpoint, root)
    try:
        return _load(str(path.resolve()), path.stat().st_mtime_ns)
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise gr.Error(f"could not load checkpoint {checkpoint!r}: {err}") from None


def parse_options(text: str | None) -> list[str]:
    """Option labels from ``"Y, N"`` (commas) or ``"A B C"`` (spaces); each is stripped.
    Raises ``gr.Error`` when there are none."""
    text = (text or "").strip()
    if not text:
        raise gr.Error("enter the answer options, e.g. 'Y, N' (each a single token)")
    return [s.strip() for s in text.split(",")] if "," in text else text.split()


def check_sizes(question: str | None, options: str | None = None) -> None:
    """Refuse a question longer than :data:`MAX_QUESTION_CHARS` or an options text longer
    than :data:`MAX_OPTIONS_CHARS` characters (counted as typed, before anything is
    tokenised). Raises ``gr.Error`` naming the limit and the actual length."""
    for what, text, limit in (
        ("question", question, MAX_QUESTION_CHARS),
        ("options text", options, MAX_OPTIONS_CHARS),
    ):
        n = len(text or "")
        if n > limit:
            raise gr.Error(
                f"the {what} is {n:,} characters long; the Ask tab takes at most {limit:,}: "
                "shorten it"
            )


def check_sampling(m: float, sampling_temperature: float) -> None:
    """Refuse ``M`` rationales outside 1..64 or a sampling temperature that is not positive
    (``gr.Error``); the Ask and Batch tabs check their controls alike."""
    if not 1 <= int(m) <= 64:
        raise gr.Error("M must be between 1 and 64")
    if not sampling_temperature or sampling_temperature <= 0:
        raise gr.Error("the sampling temperature must be positive")


def positions_needed(
    tokenizer: PreTrainedTokenizerBase,
    meta: dict,
    question: str,
    labels: Sequence[str],
    max_new_tokens: int,
) -> tuple[int, int]:
    """``(prompt tokens, positions)`` a reading of ``question`` uses at most: the prompt
    :func:`rlcd_lab.reader.read` builds for it (chat template and worked example included),
    then ``max_new_tokens`` rationale tokens, the marker and the bridge to the answer token
    (``Reader.question_positions``; a reader without a model, which only builds prompts).
    Raises ``ValueError`` for bad labels or an empty question (as ``read`` would)."""
    reader = Reader(None, tokenizer, meta)  # type: ignore[arg-type]
    return reader.question_positions(question, list(labels), max_new_tokens=int(max_new_tokens))


def option_hint(meta: dict) -> str:
    """The labels to suggest for this checkpoint: its own options (``rlcd.json``
    ``"options"``, e.g. ``Y, N`` for the tiny verify checkpoints, whose vocabulary holds
    no other letters), else :data:`GENERIC_HINT`."""
    options = meta.get("options")
    return ", ".join(map(str, options)) if options else GENERIC_HINT


def check_input(
    tokenizer: PreTrainedTokenizerBase, meta: dict, question: str, labels: Sequence[str]
) -> None:
    """The decision server's input policy, applied to a typed question: characters the
    tokenizer maps to its unknown token are refused by the server's own check
    (:func:`rlcd_lab.decide.questions.unknown_chars`), and labels that are not single
    tokens are refused with :func:`option_hint`. Raises ``gr.Error`` (control characters
    shown escaped)."""
    reader = Reader(None, tokenizer, meta)  # type: ignore[arg-type]
    bad = unknown_chars(tokenizer, question, reader.encode)
    if bad:
        raise gr.Error(
            f"the question contains characters this model cannot read: {bad[:10]}; the "
            "decision server refuses them too"
        )
    try:
        reader.options(list(labels))
    except ValueError as err:
        msg = str(err)
        if NOT_SINGLE in msg:
            msg = msg.split(";")[0] + f"; this model reads the options {option_hint(meta)}"
        raise gr.Error(msg) from None


@torch.no_grad()
def ask_model(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    meta: dict,
    question: str,
    labels: Sequence[str],
    m: int = 4,
    sampling_temperature: float = 1.0,
    max_new_tokens: int = 64,
    seed: int | None = 0,
) -> dict:
    """Sample ``m`` rationales for ``question`` and read each one's calibrated readout.

    Returns a JSON-ready dict: ``options``, ``T`` (the checkpoint's fitted calibration
    temperature), ``m``, ``max_new_tokens``, ``marker``, ``rationales`` (per rationale: ``text``,
    ``forced`` (the model did not write the marker: it hit ``max_new_tokens`` or stopped;
    the marker was appended), ``length`` (sampled tokens), ``logp`` (``log pi(r | x)``), ``logits``,
    ``u_raw = softmax(logits)`` and ``u = softmax(logits / T)``), ``mixture`` (mean of
    ``u``), ``diversity`` (``(1/M) sum_i ||u_i - p||^2``), and the single-query answer
    (first rationale): ``probs``, ``answer``, ``confidence``. Raises ``ValueError`` for
    bad labels (:func:`rlcd_lab.reader.readout.option_token_ids`), an empty question, or a
    question whose reading needs more positions than the model reads
    (``Reader.check_question``: :func:`positions_needed` > :func:`context_length`; checked
    before sampling).
    """
    reader = Reader(model, tokenizer, meta)
    labels = list(labels)
    try:
        reader.check_question(question, labels, max_new_tokens=int(max_new_tokens))
    except ContextTooLong as err:
        raise ValueError(
            f"the question is too long for this model: its prompt is {err.prompt_tokens:,} "
            f"tokens, and with {int(max_new_tokens)} rationale tokens, the marker and the "
            f"answer a reading needs {err.needed:,} positions, but the model reads at most "
            f"{err.n_ctx:,}; shorten the question or lower the max rationale tokens"
        ) from None
    (r,) = reader.read(
        [question], [labels], m=int(m), max_new_tokens=int(max_new_tokens),
        sampling_temperature=float(sampling_temperature), seed=None if seed is None else int(seed),
    )  # fmt: skip
    u_raw, logits = r.u, r.logits.numpy().astype(np.float64)
    u = reader.calibrated(r)
    T, marker = reader.T, reader.marker
    p = u.mean(0)
    single = u[0]
    rows = [
        {
            "text": r.texts[i],
            "forced": bool(r.forced[i]),
            "length": int(r.lengths[i]),
            "logp": float(r.logp[i]),
            "logits": logits[i].tolist(),
            "u_raw": u_raw[i].tolist(),
            "u": u[i].tolist(),
        }
        for i in range(len(r.texts))
    ]
    return {
        "question": question,
        "options": labels,
        "T": T,
        "m": int(m),
        "max_new_tokens": int(max_new_tokens),
        "marker": marker,
        "rationales": rows,
        "mixture": p.tolist(),
        "diversity": float(((u - p) ** 2).sum(1).mean()),
        "probs": single.tolist(),
        "answer": labels[int(single.argmax())],
        "confidence": float(single.max()),
    }


def make_rule(
    threshold: float = DEFAULT_THRESHOLD, measure: str = "max_p", aggregate: str = "single"
) -> DecisionRule:
    """The :class:`rlcd_lab.math.routing.DecisionRule` of the tab's controls; bad values raise
    ``gr.Error`` with routing's message."""
    try:
        return DecisionRule(measure, threshold, aggregate)  # type: ignore[arg-type]
    except ValueError as err:
        raise gr.Error(str(err)) from None


def _as_rule(rule: DecisionRule | float) -> DecisionRule:
    return rule if isinstance(rule, DecisionRule) else make_rule(float(rule))


def route_result(result: dict, rule: DecisionRule | float) -> dict:
    """The rule applied to a result's readouts ``u`` (:meth:`DecisionRule.apply`):
    ``{"rule", "description", "answer", "confidence", "probs", "decision"}``."""
    rule = _as_rule(rule)
    routed = rule.apply(np.array([r["u"] for r in result["rationales"]], dtype=np.float64))
    return {
        "rule": {"measure": rule.measure, "threshold": rule.threshold, "aggregate": rule.aggregate},
        "description": rule.describe(len(result["options"])),
        "answer": result["options"][routed.answer],
        "confidence": routed.confidence,
        "probs": routed.probs.tolist(),
        "decision": routed.decision,
    }


def decision(result: dict, rule: DecisionRule | float) -> str:
    """``"automate"`` or ``"escalate"``: the rule (a threshold alone: max p of the single
    query) on the result's readouts. The Routing tab and the server decide alike
    (:mod:`rlcd_lab.math.routing`)."""
    return route_result(result, rule)["decision"]


def verdict_markdown(result: dict | None, rule: DecisionRule | float) -> str:
    """The decision, the rule that made it, both answers (single query and mixture) and
    the calibration temperature T, in words."""
    if not result or "confidence" not in result:
        return ""
    rule = _as_rule(rule)
    routed = route_result(result, rule)
    labels, p = result["options"], np.array(result["mixture"])
    conf, t = routed["confidence"], rule.threshold
    which = "single query (r1)" if rule.aggregate == "single" else f"mixture of M = {result['m']}"
    if routed["decision"] == "automate":
        route = f"**decide automatically** (confidence {conf:.3f} ≥ threshold {t:.3f})"
    else:
        route = f"**escalate** to a human (confidence {conf:.3f} < threshold {t:.3f})"
    n_limit = sum(_hit_limit(result, r) for r in result["rationales"])
    n_stopped = sum(r["forced"] for r in result["rationales"]) - n_limit
    single = result["rationales"][0]["u"]
    lines = [
        f"### {which.capitalize()}: **{routed['answer']}** → {route}",
        f"**Rule:** {routed['description']}.",
        f"Single query (r1): **{result['answer']}** ("
        + ", ".join(f"{lab} {v:.3f}" for lab, v in zip(labels, single, strict=True))
        + f"). Mixture of M = {result['m']}: **{labels[int(p.argmax())]}** ("
        + ", ".join(f"{lab} {v:.3f}" for lab, v in zip(labels, p, strict=True))
        + f"; diversity {result['diversity']:.4f}).",
    ]
    if result.get("T_fitted", True):
        lines.append(
            f"Readouts use the checkpoint's fitted temperature **T = {result['T']:.3f}** "
            '(`rlcd.json` "T"): u = softmax(logits / T)'
            + (" (T = 1: no scaling)." if result["T"] == 1.0 else ".")
        )
    else:
        lines.append(
            f"T **not fitted** for this checkpoint ({result.get('T_note', 'never calibrated')}): "
            f"raw readouts u = softmax(logits), T = {result['T']:.3f}; their confidences are "
            "not calibrated, so read the routing decision with care."
        )
    if n_limit:
        lines.append(
            f"**Length limit:** {n_limit} of {result['m']} rationales hit it; the marker was "
            "forced, so their readout follows an unfinished rationale."
        )
    if n_stopped:
        lines.append(
            f"**No marker:** {n_stopped} of {result['m']} rationales ended without writing "
            f"`{result.get('marker', MARKER)}`; it was appended before the readout."
        )
    item = result.get("item")
    if item:
        truth = item["label"]
        mark = "✓" if truth == routed["answer"] else "✗"
        lines.append(f"Task item `{item['uid']}`: true label **{truth}** {mark}.")
    return "\n\n".join(lines)


def _hit_limit(result: dict, rationale: dict) -> bool:
    """Whether a forced rationale used up ``max_new_tokens`` (else it stopped, e.g. at EOS,
    without the marker); a result without ``max_new_tokens`` counts every forced one."""
    limit = result.get("max_new_tokens")
    return bool(rationale["forced"]) and (limit is None or rationale["length"] >= limit)


def rationales_html(result: dict | None) -> str:
    """Each rationale's text next to bars of its readout ``u`` (colours as in the chart)."""
    if not result or "rationales" not in result:
        return ""
    labels = result["options"]
    width = min(6.0, max(1.5, 0.65 * max(len(lab) for lab in labels)))  # label column, em
    cards = []
    for i, r in enumerate(result["rationales"]):
        color = plots.COLORS[i % len(plots.COLORS)]
        bars = "".join(
            f'<div style="display:flex;align-items:center;gap:6px;font-size:12px">'
            f'<span style="flex:0 0 {width:.1f}em;overflow:hidden;text-overflow:ellipsis;'
            f'white-space:nowrap;text-align:right" title="{html.escape(lab)}">'
            f"{html.escape(lab)}</span>"
            f'<span style="display:inline-block;height:10px;width:{100 * v:.1f}px;'
            f'background:{color}"></span><span>{v:.3f}</span></div>'
            for lab, v in zip(labels, r["u"], strict=True)
        )
        flag = ""
        if r["forced"]:
            why = "length limit hit" if _hit_limit(result, r) else "stopped without the marker"
            flag = f' <span style="color:#c2410c;font-weight:600">{why}: marker forced</span>'

        text = html.escape(r["text"]) if r["text"] else "<i>(empty rationale)</i>"
        cards.append(
            f'<div style="display:flex;gap:12px;padding:6px 0;'
            f'border-bottom:1px solid var(--border-color-primary, #e5e7eb)">'
            f'<div style="flex:1;min-width:0"><b style="color:{color}">r{i + 1}</b> '
            f'<span style="font-size:12px;opacity:.7">{r["length"]} tokens</span>{flag}<br>'
            f'<code style="white-space:pre-wrap;word-break:break-word">{text}</code></div>'
            f'<div style="flex:0 0 auto">{bars}</div></div>'
        )
    return "".join(cards)


def _figure(result: dict) -> go.Figure:
    fig = plots.rationale_bars(
        [r["u"] for r in result["rationales"]],
        result["options"],
        mixture=result["mixture"],
        texts=[r["text"] for r in result["rationales"]],
        title=f"Readouts u (T = {result['T']:.3f}) and their mixture",
    )
    return plots.apply_theme(compact_layout(fig, 0.25))


def ask(
    checkpoint: str,
    question: str,
    options: str,
    m: float = 4,
    sampling_temperature: float = 1.0,
    max_new_tokens: float = 64,
    seed: float | None = 0,
    threshold: float = DEFAULT_THRESHOLD,
    measure: str = "max_p",
    aggregate: str = "single",
    root: str | Path = ASSETS,
) -> tuple[str, str, go.Figure, dict]:
    """The Ask tab's callback: ``(verdict markdown, rationales html, bar chart, result)``.

    ``result`` is :func:`ask_model`'s dict plus ``checkpoint``, ``T_fitted`` (and
    ``T_note``, :func:`temperature_status`), ``threshold``, ``routing`` (the rule
    ``DecisionRule(measure, threshold, aggregate)`` applied: :func:`route_result`),
    ``decision`` and, when the question is one of the checkpoint's examples (a test item
    of its task, or a generic example) with the same options, ``item`` (``uid``, true
    ``label``). Bad input raises ``gr.Error``: a question or options text over the size
    limits (checked first, before anything is loaded or tokenised), characters or labels
    the server would refuse (:func:`check_input`), a prompt past the model's context, an
    unknown rule.
    """
    check_sizes(question, options)
    if not (question or "").strip():
        raise gr.Error("type a question, or pick a task example")
    labels = parse_options(options)
    rule = make_rule(threshold, measure, aggregate)
    check_sampling(m, sampling_temperature)
    model, tokenizer, meta = load_model(checkpoint, root)
    path = checkpoint_dir(checkpoint, root)
    check_input(tokenizer, meta, question.strip(), labels)
    try:
        result = ask_model(
            model, tokenizer, meta, question.strip(), labels, m, sampling_temperature,
            max_new_tokens, seed,
        )  # fmt: skip
    except ValueError as err:
        raise gr.Error(str(err)) from None
    result["checkpoint"] = checkpoint
    result["T_fitted"], result["T_note"] = temperature_status(path, meta)
    for item in example_items(path, meta):
        if item.prompt == result["question"] and list(item.options) == labels:
            label = None if item.label is None else labels[item.label]
            result["item"] = {"uid": item.uid, "label": label, "q": item.q}
            break
    result = _routed(result, rule)
    return verdict_markdown(result, rule), rationales_html(result), _figure(result), result


def _routed(result: dict, rule: DecisionRule) -> dict:
    routed = route_result(result, rule)
    return {
        **result,
        "threshold": rule.threshold,
        "routing": routed,
        "decision": routed["decision"],
    }


def reroute(
    result: dict | None,
    threshold: float,
    measure: str = "max_p",
    aggregate: str = "single",
) -> tuple[str, dict | None]:
    """Re-decide a previous answer under a new rule (no new sampling)."""
    if not result or "confidence" not in result:
        return "", result
    rule = make_rule(threshold, measure, aggregate)
    result = _routed(result, rule)
    return verdict_markdown(result, rule), result
