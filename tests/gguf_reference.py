"""The reference side of tests/test_pretrained.py's GGUF cross-checks, stored: transformers'
own reading of each GGUF file (``from_pretrained(dir, gguf_file=...)``, which dequantizes
every tensor: tens of seconds a model on 2 cores), reduced to its model class, its config
and the SHA-256 of every float32 tensor, with the inputs it was computed from (the GGUF
file's SHA-256 and the versions of transformers, gguf and torch).

    python tests/gguf_reference.py           # rewrite tests/fixtures/gguf_reference.json
    python tests/gguf_reference.py --check   # recompute it; exit 1 where it differs

``make check-refs`` runs the second. The tests compare the converted checkpoints with the
stored digests when the installed GGUF file and versions are the recorded ones, and
recompute the reference (the slow way) when they are not.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import sys
import tempfile
from pathlib import Path

import torch

from rlcd_lab.lm.checkpoint import file_sha256
from rlcd_lab.lm.pretrained import MODELS, gguf_path

REFERENCE = Path(__file__).parent / "fixtures" / "gguf_reference.json"
"""The stored references, one entry per name of ``rlcd_lab.lm.pretrained.MODELS``."""
VERSIONED = ("transformers", "gguf", "torch")
"""The packages whose versions the reading depends on (recorded with the reference)."""
VOLATILE = (
    "dtype",
    "torch_dtype",
    "transformers_version",
    "quantization_config",
    "_name_or_path",
    "architectures",
)
"""Config keys left out of the comparison: how and where a model was loaded or saved from
(``architectures`` is written by saving; the class is compared on its own), not what it
computes."""


def tensor_digests(model: torch.nn.Module) -> dict[str, str]:
    """``{name: SHA-256 of the tensor's float32 bytes}`` for every entry of the model's
    state dict (tied tensors are hashed once and listed under each name)."""
    seen: dict[int, str] = {}
    out = {}
    for name, tensor in model.state_dict().items():
        key = tensor.data_ptr()
        if key not in seen:
            data = tensor.detach().to(torch.float32).contiguous().cpu()
            seen[key] = hashlib.sha256(data.view(torch.uint8).numpy().tobytes()).hexdigest()
        out[name] = seen[key]
    return out


def config_entries(model: torch.nn.Module) -> dict:
    """The model's config as a JSON-ready dict, without the ``VOLATILE`` keys."""
    config = json.loads(model.config.to_json_string(use_diff=False))
    return {k: v for k, v in sorted(config.items()) if k not in VOLATILE}


def inputs(name: str, workdir: Path) -> dict:
    """What the reading of model ``name`` depends on: its GGUF file's SHA-256 (assembled
    into ``workdir`` where the package ships chunks) and the ``VERSIONED`` versions."""
    out = {"gguf_sha256": file_sha256(gguf_path(MODELS[name], workdir))}
    out.update({pkg: importlib.metadata.version(pkg) for pkg in VERSIONED})
    return out


def compute(name: str) -> dict:
    """The reference of model ``name``: its ``inputs``, transformers' model class, config
    entries and tensor digests of its GGUF reading (float32)."""
    from transformers import AutoModelForCausalLM

    spec = MODELS[name]
    with tempfile.TemporaryDirectory(prefix="rlcd-gguf-ref-") as work:
        path = gguf_path(spec, Path(work))
        ref = AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32, local_files_only=True
        )
        entry = inputs(name, Path(work))
    return {
        **entry,
        "class": type(ref).__name__,
        "config": config_entries(ref),
        "tensors": tensor_digests(ref),
    }


def stored() -> dict:
    """The stored references (``REFERENCE``), by model name."""
    return json.loads(REFERENCE.read_text())


def main(argv: list[str]) -> int:
    fresh = {name: compute(name) for name in sorted(MODELS)}
    if "--check" not in argv:
        REFERENCE.write_text(json.dumps(fresh, indent=1, sort_keys=True) + "\n")
        return 0
    old = stored()
    differs = [n for n in sorted(set(fresh) | set(old)) if fresh.get(n) != old.get(n)]
    for name in differs:
        print(f"{REFERENCE.name}: {name} differs from a fresh reading; rewrite it with "
              f"python {Path(__file__).name}", file=sys.stderr)  # fmt: skip
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
