"""Models: tiny in-process causal LMs and their character-level tokenizer.

Everything here builds offline and seeded. A character-level tokenizer keeps the tiny
world's vocabulary small (about 100 symbols) and makes every single-character label a
single token, so the readout over option tokens is well defined.
"""

from __future__ import annotations

import string

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

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


def tiny_model(
    tokenizer: PreTrainedTokenizerFast, *, seed: int = 0, **config_kwargs
) -> LlamaForCausalLM:
    """A randomly initialised tiny Llama (seeded, without touching the global RNG)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(tiny_config(tokenizer, **config_kwargs))
    return model.eval()
