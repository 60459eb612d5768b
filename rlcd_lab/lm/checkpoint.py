"""The checkpoint format: saving (:func:`save_checkpoint`, atomic), checksums,
``rlcd.json`` (the marker, option format, fitted T; :data:`DEFAULT_META`) and
``config.json`` validation. Loading a checkpoint is
:func:`rlcd_lab.lm.loading.load_checkpoint`, above this module and
:mod:`rlcd_lab.lm.pretrained`: an adapter's base may be a GGUF model that is converted (and
saved here) on first use.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from transformers import (
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from rlcd_lab.files.io import atomic_dir, atomic_write_text, read_json_file
from rlcd_lab.files.rundir import CHECKSUMS
from rlcd_lab.files.rundir import (
    META_FILE as META_FILE,  # the checkpoint format's names, stdlib-only
)
from rlcd_lab.files.rundir import CheckpointError as CheckpointError

MARKER = "Answer:"
"""The text a rationale ends with before the readout, unless a checkpoint's ``rlcd.json``
names another (``"marker"``); the readout's reference is :mod:`rlcd_lab.reader.readout`."""
SEP = " "
"""What follows the marker before the option label (``"sep"`` in ``rlcd.json``)."""

CHECKSUM_VERSION = 2
"""``checksums.json`` format: version 2 lists every file of the checkpoint (config,
``rlcd.json``, tokenizer files, adapter config, weights, optimizer state); a manifest
without ``version`` (version 1, written before) lists the weight files only."""
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
    "added_tokens.json", "vocab.json", "merges.txt",
)  # fmt: skip
"""The files ``tokenizer.save_pretrained`` may write into a checkpoint. An adapter
without them loads its base's (:func:`rlcd_lab.lm.loading.load_checkpoint`)."""
DEFAULT_META = {"marker": MARKER, "sep": SEP, "T": 1.0}
T_KEY = "T"
"""The ``rlcd.json`` key of the fitted calibration temperature T."""
OLD_T_KEY = "temperature"
"""Its name in checkpoints written before (still read: :func:`calibration_T`)."""
_CHECKPOINT_MARKERS = ("adapter_config.json", META_FILE, CHECKSUMS)


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
    """The JSON object in ``file``; ``CheckpointError`` naming it when unreadable, not a
    regular file (a FIFO in its place is refused, never waited on), nested too deeply or not
    an object (a list, a number, ...): :func:`rlcd_lab.files.io.read_json_file`."""
    try:
        data = read_json_file(file)
    except ValueError as err:
        raise CheckpointError(str(err)) from None
    except OSError as err:
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


def min_parameters(cfg: Mapping[str, Any]) -> int:
    """A lower bound on the parameters of a decoder built from the model config ``cfg``,
    from its sizes alone: the token embedding, ``vocab_size x hidden_size``, plus per layer
    (``num_hidden_layers``) the MLP's two matrices at least, ``2 x hidden_size x
    intermediate_size`` (``hidden_size`` in its place when the config gives none); GPT-2's
    names (``n_embd``, ``n_layer``, ``n_inner``) count too, a size the config lacks counts
    0. Checked against the weight files' sizes before a model is built (a config edited
    to 100,000 layers would otherwise allocate them first)."""

    def size(*keys: str) -> int:
        return next((cfg[k] for k in keys if _is_int(cfg.get(k)) and cfg[k] > 0), 0)

    hidden = size("hidden_size", "n_embd")
    inner = size("intermediate_size", "n_inner") or hidden
    return size("vocab_size") * hidden + size("num_hidden_layers", "n_layer") * 2 * hidden * inner


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
        if p.is_file() and p.name != CHECKSUMS and not p.name.startswith(".")
    )


def file_sha256(file: Path) -> str:
    """The SHA-256 of the file at ``file`` (hex), read in 1 MiB chunks."""
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
    digests = {name: file_sha256(path / name) for name in _manifest_files(path)}
    body = {"algorithm": "sha256", "version": CHECKSUM_VERSION, "files": digests}
    return atomic_write_text(path / CHECKSUMS, json.dumps(body, indent=2, sort_keys=True))


def _read_manifest(path: Path) -> dict | None:
    """The checked ``checksums.json`` of ``path`` (None when there is none)."""
    file = path / CHECKSUMS
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
                f"checkpoint {path} is incomplete: missing {name} (listed in {CHECKSUMS})"
            )
        got = file_sha256(path / name)
        if got != want.lower():
            raise CheckpointError(
                f"{path / name}: sha256 {got[:12]}... differs from {want[:12]}... in "
                f"{CHECKSUMS}: the file is corrupt or was modified (verify=False / "
                "--no-verify loads it anyway)"
            )
    full = body.get("version", 1) == CHECKSUM_VERSION
    unlisted = [n for n in (_manifest_files if full else _weight_files)(path) if n not in files]
    if unlisted:
        what = "files" if full else "weight files"
        raise CheckpointError(
            f"{path}: {what} not covered by {CHECKSUMS}: {unlisted} (added after the "
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


def _is_checkpoint_dir(path: Path) -> bool:
    """Holds an adapter, ``rlcd.json``, ``checksums.json`` or a model's ``config.json`` (one
    with ``model_type``: a training run's ``config.json`` does not count)."""
    if any((path / name).exists() for name in _CHECKPOINT_MARKERS):
        return True
    try:
        config = read_json_file(path / "config.json")
    except (OSError, ValueError):
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


def read_meta(path: str | os.PathLike) -> dict:
    """The checkpoint's ``rlcd.json`` merged over the defaults (defaults alone for a plain
    HF model directory without one), checked by ``validate_meta`` (``CheckpointError``).
    The fitted T is under ``"T"``, whichever key the file uses (:func:`upgrade_meta`)."""
    file = Path(path) / META_FILE
    meta = _read_json_object(file) if file.exists() else {}
    return validate_meta({**DEFAULT_META, **upgrade_meta(meta)}, file)
