"""The tiny in-process causal LM and its character-level tokenizer; a model's context
length; torch's thread count.

Everything here builds offline and seeded. A character-level tokenizer keeps the tiny
world's vocabulary small (about 100 symbols) and makes every single-character label a
single token, so the readout over option tokens is well defined. The checkpoint format
(saving, checksums, ``rlcd.json``) is :mod:`rlcd_lab.lm.checkpoint`.
"""

from __future__ import annotations

import os
import string

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
CHARS = string.digits + string.ascii_letters + string.punctuation + " \n"


def char_tokenizer(chars: str = CHARS) -> PreTrainedTokenizerFast:
    """A character-level ``PreTrainedTokenizerFast``: one token per character.

    Vocabulary: ``<pad> <bos> <eos> <unk>`` then ``chars`` in order (duplicates dropped).
    Unknown characters map to ``<unk>``; decoding concatenates characters unchanged.
    No BOS/EOS is added automatically: prompts are exactly the characters given.
    """
    symbols = list(dict.fromkeys(chars))
    vocab = {tok: i for i, tok in enumerate([PAD, BOS, EOS, UNK, *symbols])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )


def tiny_config(
    tokenizer: PreTrainedTokenizerFast,
    *,
    hidden_size: int = 16,
    layers: int = 1,
    heads: int = 2,
    max_positions: int = 512,
) -> LlamaConfig:
    """A Llama config sized for CPU tests and the tiny world (a few thousand parameters)."""
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )


def tiny_parameters(vocab_size: int, hidden_size: int, layers: int) -> int:
    """Parameters of the model :func:`tiny_config` describes (``vocab_size``:
    ``len(tokenizer)``), counted from its sizes without building it: the tied embedding
    ``V h``, per layer four ``h x h`` attention projections, a gated MLP of three ``h x 2h``
    matrices and two norms (``10 h^2 + 2 h``), and the final norm ``h``."""
    return vocab_size * hidden_size + layers * (10 * hidden_size**2 + 2 * hidden_size) + hidden_size


def tiny_model(
    tokenizer: PreTrainedTokenizerFast, *, seed: int = 0, **config_kwargs
) -> LlamaForCausalLM:
    """A randomly initialised tiny Llama (seeded, without touching the global RNG)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(tiny_config(tokenizer, **config_kwargs))
    return model.eval()


def context_length(
    model: PreTrainedModel | object, tokenizer: PreTrainedTokenizerBase | None = None
) -> int | None:
    """The most positions the model reads: the smaller of its config's
    ``max_position_embeddings`` (``n_positions`` in GPT-2-style configs) and the
    tokenizer's ``model_max_length``, of those that are set (transformers stores a huge
    sentinel, ``VERY_LARGE_INTEGER``, when the tokenizer does not know it); None when
    neither is. ``model`` may also be the config itself."""
    config = getattr(model, "config", model)
    limits = [
        getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None),
        getattr(tokenizer, "model_max_length", None),
    ]
    known = [
        int(n)
        for n in limits
        if isinstance(n, int) and not isinstance(n, bool) and 0 < n < VERY_LARGE_INTEGER
    ]
    return min(known) if known else None


# ------------------------------------------------------------------------- threads
def free_cores() -> int:
    """CPU cores this process may use that other processes are not already busy on: the
    cores it may run on (``os.sched_getaffinity``) minus the 1-minute load average
    (rounded), at least 1. Why: torch starts one thread per core, and its threads spin at
    every barrier, so beside one busy process a training step takes several times as long
    as on the free cores alone. The load average lags a change of load by about a minute."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        busy = round(os.getloadavg()[0])
    except OSError:  # not available on this platform
        busy = 0
    return max(1, (cores or 1) - busy)


def use_free_cores() -> int:
    """Set torch's threads to :func:`free_cores` unless ``OMP_NUM_THREADS`` says how many
    (then torch already follows it); returns the thread count in force. The command line
    (``rlcd-lab train|eval|reproduce|app|serve``) calls it once at start."""
    if not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(free_cores())
    return torch.get_num_threads()
