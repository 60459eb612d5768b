"""Models: tiny in-process causal LMs, their character-level tokenizer, and checkpoints.

Everything here builds offline and seeded. A character-level tokenizer keeps the tiny
world's vocabulary small (about 100 symbols) and makes every single-character label a
single token, so the readout over option tokens is well defined.
"""

from __future__ import annotations

import json
import os
import string
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from .io import atomic_dir
from .readout import MARKER, SEP

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


# ----------------------------------------------------------------------- checkpoints
META_FILE = "rlcd.json"
DEFAULT_META = {"marker": MARKER, "sep": SEP, "temperature": 1.0}


def save_checkpoint(
    path: str | os.PathLike,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    meta: dict | None = None,
) -> Path:
    """Save ``model`` + ``tokenizer`` + ``rlcd.json`` to ``path`` atomically.

    A full model is saved with ``save_pretrained`` (safetensors); a PEFT model saves its
    adapter, whose config names the base model. ``meta`` holds the marker, option format,
    task, method, step, fitted temperature and metrics (JSON-serialisable). The directory
    appears complete or not at all (written to a temp dir, then renamed).
    """
    meta = {**DEFAULT_META, **(meta or {})}
    with atomic_dir(path) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True, default=float))
    return Path(path)


def _require(path: Path, *names: str) -> None:
    missing = [n for n in names if not (path / n).exists()]
    if missing:
        raise FileNotFoundError(f"checkpoint {path} is incomplete: missing {', '.join(missing)}")


def _has_weights(path: Path, stem: str) -> bool:
    return (path / f"{stem}.safetensors").exists() or (
        path / f"{stem}.safetensors.index.json"
    ).exists()


def read_meta(path: str | os.PathLike) -> dict:
    """The checkpoint's ``rlcd.json`` merged over the defaults (defaults alone for a plain
    HF model directory without one)."""
    file = Path(path) / META_FILE
    meta = json.loads(file.read_text()) if file.exists() else {}
    return {**DEFAULT_META, **meta}


def _has_tokenizer(path: Path) -> bool:
    return (path / "tokenizer.json").exists() or (path / "tokenizer_config.json").exists()


def _local_base(base_name: str, meta: dict) -> Path | None:
    """The local directory of an adapter's base model: ``base_name`` if it is one; for an
    adapter trained on the offline SmolLM2 (``meta["source"]``, e.g. a shipped adapter
    whose recorded base path is another machine's) the converted SmolLM2 checkpoint at
    ``pretrained.SMOLLM2_DEFAULT_DIR`` (converted there first if missing); else None."""
    if Path(base_name).expanduser().is_dir():
        return Path(base_name).expanduser()
    from .pretrained import SMOLLM2_DEFAULT_DIR, SMOLLM2_SOURCE, convert_smollm2

    if meta.get("source") == SMOLLM2_SOURCE:
        try:
            return convert_smollm2(SMOLLM2_DEFAULT_DIR)
        except ImportError as err:  # the package is missing: name what to install
            raise FileNotFoundError(f"the base model SmolLM2 is not available: {err}") from None
    return None


def load_checkpoint(
    path: str | os.PathLike,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    trainable: bool = False,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, dict]:
    """Load ``(model, tokenizer, meta)`` from a checkpoint directory, in eval mode.

    Accepts an rlcd_lab checkpoint, a plain HF ``save_pretrained`` directory (meta then
    holds the defaults), or a PEFT adapter directory whose ``adapter_config.json`` names
    its base (a local directory; the offline SmolLM2 for adapters trained on it, see
    ``_local_base``; or a hub name when online); an adapter directory without a tokenizer
    uses its base's. Safetensors only: a
    directory holding only pickled weights is refused. Raises ``FileNotFoundError`` naming
    what is missing, ``ValueError`` for unreadable or mismatched contents. ``trainable``
    loads a PEFT adapter with its weights trainable (resuming LoRA training).
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"checkpoint directory {path} does not exist")
    meta = read_meta(path)
    path_tok = path
    if (path / "adapter_config.json").exists():
        from peft import PeftModel

        _require(path, "adapter_model.safetensors")
        base_name = json.loads((path / "adapter_config.json").read_text()).get(
            "base_model_name_or_path"
        )
        if not base_name:
            raise ValueError(f"{path}/adapter_config.json does not name its base model")
        base_dir = _local_base(base_name, meta)
        base, _, _ = (
            load_checkpoint(base_dir, device, dtype)
            if base_dir is not None
            else (
                AutoModelForCausalLM.from_pretrained(base_name, dtype=dtype, use_safetensors=True),
                None,
                None,
            )
        )
        model = PeftModel.from_pretrained(base, path, is_trainable=trainable)
        if not _has_tokenizer(path) and base_dir is not None:
            path_tok = base_dir  # an adapter shipped without its tokenizer: the base's
    else:
        _require(path, "config.json")
        if not _has_weights(path, "model"):
            if (path / "pytorch_model.bin").exists():
                raise ValueError(f"{path} holds pickled weights only; rlcd_lab loads safetensors")
            raise FileNotFoundError(f"checkpoint {path} is incomplete: missing model.safetensors")
        try:
            model = AutoModelForCausalLM.from_pretrained(
                path.resolve(), dtype=dtype, use_safetensors=True
            )
        except (OSError, ValueError) as err:
            raise ValueError(f"could not load the model in {path}: {err}") from None
    if not _has_tokenizer(path_tok):
        raise FileNotFoundError(f"checkpoint {path} is incomplete: missing tokenizer.json")
    tokenizer = AutoTokenizer.from_pretrained(path_tok)
    vocab = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > vocab:
        raise ValueError(
            f"{path}: tokenizer has {len(tokenizer)} tokens but the model only {vocab}"
        )
    return model.to(device).eval(), tokenizer, meta
