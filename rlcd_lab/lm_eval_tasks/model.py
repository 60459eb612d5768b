"""The ``rlcd`` model of lm-evaluation-harness: option log-likelihoods from the readout.

Start at :class:`RLCDLM`: it answers all options of one question from one reading of an
rlcd_lab checkpoint, ``log u_k`` per option. Register it with
:func:`rlcd_lab.lm_eval_tasks.register` (or run lm-eval through ``python -m
rlcd_lab.lm_eval_tasks``, which does).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Literal

import lm_eval.models  # noqa: F401  (the harness's own models, registered before ours)
import numpy as np
import torch
from lm_eval.api.instance import Instance
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from tqdm import tqdm

from rlcd_lab.evaluate import MAX_RATIONALES, check_items
from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.reader.prompts import Mode
from rlcd_lab.reader.reading import Reading, read
from rlcd_lab.tasks.items import TaskItem

Readout = Literal["single", "mixture"]
log = logging.getLogger(__name__)


def option_loglikelihoods(reading: Reading, readout: Readout = "single") -> np.ndarray:
    """``(K,)`` float64 log-probabilities of a question's options from its reading
    (``Reading.log_probs``): ``single``, the first rationale's readout (the single-query
    readout ``rlcd-lab eval`` scores); ``mixture``, ``log`` of the mean readout."""
    if readout not in ("single", "mixture"):
        raise ValueError(f"readout must be 'single' or 'mixture', got {readout!r}")
    return reading.log_probs(readout)


def resolve_device(device: str | None) -> torch.device:
    """The device to read on: ``device`` as given, except that a CUDA device (lm-eval's
    command line passes ``cuda:0`` by default) falls back to the CPU, with a logged
    warning, when CUDA is not available; None: CUDA if available, else the CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        log.warning("rlcd: CUDA is not available; reading on the CPU instead of %s", device)
        return torch.device("cpu")
    return dev


@register_model("rlcd")
class RLCDLM(LM):
    """An rlcd_lab checkpoint as an lm-eval model (``--model rlcd``).

    ``model_args``: ``checkpoint`` (directory, required), ``mode`` (``direct`` |
    ``reason``), ``m`` (rationales per question), ``readout`` (``single``: the first
    rationale's readout, as ``rlcd-lab eval``; ``mixture``: the mean readout over ``m``),
    ``max_new_tokens``, ``sampling_temperature`` (how rationales are drawn), ``seed``,
    ``read_batch_size``, ``verify`` (checkpoint checksums) and ``device``.

    A multiple-choice task asks a harness model for ``loglikelihood(context, continuation)``
    of each option. :class:`RLCDLM` answers all options of one question from ONE reading of
    an rlcd_lab checkpoint (:func:`rlcd_lab.reader.read`, the reader ``rlcd-lab eval`` uses):

    * ``mode=direct``: the prompt ends with the marker; ``reason`` (default): one sampled
      rationale per question (``m`` with ``readout=mixture``), then the marker;
    * the readout ``u = softmax(logits[option tokens])`` ``(K,)`` at the position after the
      marker, and the answer to each option ``k`` is ``log u_k`` (float64,
      ``metrics.log_softmax`` of the readout logits), so ``softmax`` over a question's answers
      is ``u`` again. ``is_greedy`` is ``k == argmax_k u_k`` (greedy among the options).

    Context and continuations: the context is the question (an item's ``prompt``; the reader
    builds the prompt, marker and chat template included, so do not pass
    ``--apply_chat_template``), each continuation an option label after the task's
    ``target_delimiter`` (whitespace around it is stripped). Labels must be single tokens
    after the marker (``readout.option_token_ids``); a task whose options are free text is
    refused with a ``ValueError``.

    Seeds and batches, as ``rlcd-lab eval``: the questions of one task are read in the order
    of their ``doc_id`` in batches of ``read_batch_size`` (default 64, ``run_eval``'s); the
    ``i``-th question gets the seed ``mix_seed(seed, i)``. With ``--limit N`` the docs are the
    task's first ``N`` items, so the readings, and every metric of
    :mod:`rlcd_lab.lm_eval_tasks.tasks`, equal ``rlcd-lab eval --limit N`` on the same
    checkpoint, task, split, mode and seed, read on the same device (``rlcd-lab eval`` reads
    on the CPU; lm-eval's command line asks for ``cuda:0``, which falls back to the CPU where
    there is no GPU: pass ``--device cpu`` to compare on a GPU machine). lm-eval's
    ``--batch_size`` is accepted and not used (it would change float rounding only).
    """

    def __init__(
        self,
        checkpoint: str,
        mode: Mode = "reason",
        m: int = 1,
        readout: Readout = "single",
        max_new_tokens: int = 64,
        sampling_temperature: float = 1.0,
        seed: int = 0,
        read_batch_size: int = 64,
        verify: bool = True,
        device: str | None = None,
        batch_size: int | str | None = None,
        max_batch_size: int | None = None,
    ) -> None:
        super().__init__()
        if mode not in ("direct", "reason"):
            raise ValueError(f"mode must be 'direct' or 'reason', got {mode!r}")
        if readout not in ("single", "mixture"):
            raise ValueError(f"readout must be 'single' or 'mixture', got {readout!r}")
        for name, value in (("m", m), ("max_new_tokens", max_new_tokens)):
            if int(value) < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if int(m) > MAX_RATIONALES:
            raise ValueError(f"m must be at most {MAX_RATIONALES}, got {m}")
        if int(read_batch_size) < 1:
            raise ValueError(f"read_batch_size must be >= 1, got {read_batch_size}")
        self.mode: Mode = mode
        self.m = int(m)
        self.readout: Readout = readout
        self.max_new_tokens = int(max_new_tokens)
        self.sampling_temperature = float(sampling_temperature)
        self.seed = int(seed)
        self.read_batch_size = int(read_batch_size)
        self._device = resolve_device(device)
        self.model, self.tokenizer, self.meta = load_checkpoint(
            str(checkpoint), device=self._device, verify=bool(verify)
        )
        self.checkpoint = str(checkpoint)

    # ------------------------------------------------------------------ harness requests
    def loglikelihood(
        self, requests: list[Instance], disable_tqdm: bool = False
    ) -> list[tuple[float, bool]]:
        """``(log u_k, k == argmax u)`` for each request ``(context, continuation)``.

        Requests are grouped into questions by ``(task_name, doc_id)`` (by context when a
        request has no ``doc_id``); a question's options are its continuations in the
        order of ``Instance.idx``, and all its requests must share the context. Each task's
        questions are read at once, in ``doc_id`` order (see :class:`RLCDLM`)."""
        questions: dict[str, dict[object, dict]] = {}
        where: list[tuple[str, object, int]] = []
        for req in requests:
            context, continuation = req.args[0], req.args[1]
            task = str(req.task_name)
            key = req.doc_id if req.doc_id is not None else context
            q = questions.setdefault(task, {}).setdefault(key, {"context": context, "labels": {}})
            if q["context"] != context:
                raise ValueError(
                    f"rlcd: task {task} doc {key}: requests with different contexts "
                    f"({q['context']!r}, {context!r}); the readout needs one question per doc "
                    "(unconditional requests such as acc_mutual_info are not supported)"
                )
            idx = req.idx if req.idx is not None else len(q["labels"])
            q["labels"].setdefault(idx, continuation.strip())
            where.append((task, key, idx))
        answers: dict[tuple[str, object], dict[int, float]] = {}
        for task, docs in questions.items():
            keys = list(docs)
            if all(isinstance(k, int) for k in keys):
                keys.sort()
            option_idx = [sorted(docs[k]["labels"]) for k in keys]
            lls = self.read_task(
                task,
                [docs[k]["context"] for k in keys],
                [
                    [docs[k]["labels"][i] for i in idx]
                    for k, idx in zip(keys, option_idx, strict=True)
                ],
                names=[f"doc {k!r}" for k in keys],
                disable_tqdm=disable_tqdm,
            )
            for k, idx, ll in zip(keys, option_idx, lls, strict=True):
                answers[task, k] = dict(zip(idx, ll.tolist(), strict=True))
        out = []
        for task, key, idx in where:
            ll = answers[task, key]
            out.append((ll[idx], idx == max(ll, key=ll.__getitem__)))
        return out

    def read_task(
        self,
        task: str,
        contexts: Sequence[str],
        option_lists: Sequence[Sequence[str]],
        names: Sequence[str] | None = None,
        disable_tqdm: bool = False,
    ) -> list[np.ndarray]:
        """Read one task's questions (``contexts``, each with its option labels) as
        ``rlcd-lab eval`` does and return each question's ``(K,)`` float64 option
        log-likelihoods (:func:`option_loglikelihoods`). Questions are checked first
        (``evaluate.check_items``: single-token labels, readings that fit the context);
        otherwise a ``ValueError`` naming the task and the question (``names[i]``, default
        ``"doc i"``)."""
        marker, sep = self.meta["marker"], self.meta["sep"]
        # TaskItem wants a label or q to validate; check_items reads prompts and options only
        names = [f"doc {i}" for i in range(len(contexts))] if names is None else names
        items = [
            TaskItem(uid=n, prompt=c, options=tuple(o), label=0)
            for n, c, o in zip(names, contexts, option_lists, strict=True)
        ]
        check_items(
            self.model, self.tokenizer, items, mode=self.mode,
            max_new_tokens=self.max_new_tokens, marker=marker, sep=sep,
            where=f"lm-eval task {task}",
        )  # fmt: skip
        hide = {"disable": True} if disable_tqdm else {}  # else TQDM_DISABLE=1 hides it
        bar = tqdm(total=len(contexts), desc=f"rlcd {self.mode} {task}", unit="item", **hide)
        try:
            readings = read(
                self.model, self.tokenizer, list(contexts), [list(o) for o in option_lists],
                mode=self.mode, m=self.m if self.mode == "reason" else 1,
                max_new_tokens=self.max_new_tokens, sampling_temperature=self.sampling_temperature,
                seed=self.seed, marker=marker, sep=sep, batch_size=self.read_batch_size,
                on_batch=bar.update,
            )  # fmt: skip
        finally:
            bar.close()
        return [option_loglikelihoods(r, self.readout) for r in readings]

    def loglikelihood_rolling(
        self, requests: list[Instance], disable_tqdm: bool = False
    ) -> list[float]:
        """Not offered: the readout scores options after the marker, not free text."""
        raise NotImplementedError(
            "the rlcd model reads option readouts; loglikelihood_rolling (perplexity tasks) "
            "is not supported"
        )

    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        """Not offered: the readout scores options after the marker, not free text."""
        raise NotImplementedError(
            "the rlcd model reads option readouts; generate_until (generation tasks) is not "
            "supported"
        )

    def get_model_info(self) -> dict:
        """What lm-eval records in its results' ``config``: the checkpoint and reading."""
        return {
            "checkpoint": self.checkpoint,
            "mode": self.mode,
            "m": self.m,
            "readout": self.readout,
            "max_new_tokens": self.max_new_tokens,
            "sampling_temperature": self.sampling_temperature,
            "seed": self.seed,
            "marker": self.meta["marker"],
        }
