"""An optional vLLM sampler for the training loops (``--sampler vllm``, CUDA only).

vLLM draws the rationales (:class:`VLLMSampler`, a ``sampling.Sampler``); everything after
the draw is the same as with ``reader.hf_sampler``: the marker is matched on decoded text,
and the readout and ``log pi(r | x)`` are recomputed by the trained model
(``score_rationales``), so the estimator is exact whatever engine sampled.

Install with ``pip install 'rlcd_lab[vllm]'``."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import torch
from peft import PeftModel
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlcd_lab.methods.configs import TrainConfig
from rlcd_lab.reader.sampling import Generated, SamplingStopped


def hf_weights(model: PreTrainedModel) -> list[tuple[str, Tensor]]:
    """The model's weights under the names of its Hugging Face checkpoint (what vLLM's
    ``load_weights`` takes); a PEFT model's adapters merged into them, its own names
    (``base_model.model.``, ``.base_layer``) mapped back and the adapter tensors left out."""
    if not isinstance(model, PeftModel):
        return [(k, v.detach()) for k, v in model.state_dict().items()]
    model.merge_adapter()
    try:
        out = []
        for name, value in model.state_dict().items():
            if "lora_" in name or "modules_to_save" in name:
                continue
            name = name.removeprefix("base_model.model.").replace(".base_layer", "")
            out.append((name, value.detach().clone()))
        return out
    finally:
        model.unmerge_adapter()


class VLLMSampler:
    """A ``sampling.Sampler`` on a vLLM engine built from ``cfg.init`` at the first call
    (``should_stop`` is asked once, before the draw: vLLM draws a batch in one call).

    The engine runs in the training process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, as TRL's
    colocate mode does) on a share of the same GPU, and gets the trained weights after
    every optimizer step (``sync``; LoRA adapters are merged for the copy). Each rationale
    is drawn with its own seed (``row_seeds``), but vLLM's random streams are not
    ``GumbelSampler``'s: the tokens differ from the HF path's, their distribution does not.
    vLLM reports no log-probabilities here (``token_lp`` is NaN); nothing in training reads
    them."""

    def __init__(self, cfg: TrainConfig, gpu_memory_utilization: float = 0.3):
        self.cfg, self.memory = cfg, gpu_memory_utilization
        self.llm = None
        self._stale = True  # the engine does not hold the trained weights yet

    def _engine(self):
        if self.llm is None:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine
            from vllm import LLM

            self.llm = LLM(
                model=str(self.cfg.init),
                gpu_memory_utilization=self.memory,
                enable_prefix_caching=True,  # the M rationales of a question share a prompt
                seed=self.cfg.seed,
            )
        return self.llm

    def sync(self) -> None:
        """The trained weights changed (an optimizer step): the next draw copies them first."""
        self._stale = True

    def __call__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        ids: Tensor,
        mask: Tensor,
        *,
        row_seeds: Sequence[int],
        max_new_tokens: int,
        marker: str | None,
        eos: Sequence[int],
        sampling_temperature: float = 1.0,
        top_p: float = 1.0,
        should_stop: Callable[[], bool] | None = None,
    ) -> Generated:
        from vllm import SamplingParams

        if should_stop is not None and should_stop():
            raise SamplingStopped("should_stop() asked the sampler to stop")

        llm = self._engine()
        if self._stale:
            weights = hf_weights(model)
            llm.apply_model(lambda m: m.load_weights(weights))
            self._stale = False
        prompts = [
            {"prompt_token_ids": row[keep.bool()].tolist()}
            for row, keep in zip(ids.cpu(), mask.cpu(), strict=True)
        ]
        params = [
            SamplingParams(
                n=1,
                temperature=sampling_temperature,  # vLLM's name
                top_p=top_p,
                max_tokens=max_new_tokens,
                seed=int(seed) % 2**63,
                stop=[] if marker is None else [marker],
                include_stop_str_in_output=True,
            )
            for seed in row_seeds
        ]
        outputs = llm.generate(prompts, sampling_params=params, use_tqdm=False)
        return generated(outputs, marker, eos)


def generated(outputs, marker: str | None, eos: Sequence[int]) -> Generated:
    """vLLM's ``RequestOutput`` list as ``Generated``: a row that stopped on the marker
    ends there; one that stopped on EOS ends with the EOS token (appended when vLLM left it
    out); one that ran out of tokens has ``end = -1``."""
    rows, ends, hits = [], [], []
    for out in outputs:
        done = out.outputs[0]
        tokens = list(done.token_ids)
        hit = marker is not None and done.finish_reason == "stop" and done.stop_reason == marker
        ended_eos = done.finish_reason == "stop" and not hit
        if ended_eos and eos and (not tokens or tokens[-1] not in eos):
            tokens.append(eos[0])
        rows.append(tokens)
        ends.append(len(tokens) if done.finish_reason == "stop" else -1)
        hits.append(hit)
    width = max([1, *map(len, rows)])
    tokens = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        tokens[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return Generated(
        tokens,
        torch.tensor(ends, dtype=torch.long),
        torch.tensor(hits, dtype=torch.bool),
        torch.full(tokens.shape, float("nan")),
    )
