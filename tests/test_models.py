"""Checkpoints: safetensors round trip, PEFT adapters, atomic replace, clear errors."""

import json

import pytest
import torch

from rlcd_lab.lm.checkpoint import read_meta, save_checkpoint, write_checksums
from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.lm.model import char_tokenizer, tiny_model

X = torch.tensor([[10, 11, 12, 13]])


def test_round_trip(tmp_path, tokenizer, tiny_lm):
    path = save_checkpoint(tmp_path / "ck", tiny_lm, tokenizer, {"task": "verify", "T": 1.7})
    model, tok, meta = load_checkpoint(path)
    torch.testing.assert_close(model(X).logits, tiny_lm(X).logits)
    assert tok("Answer: Y").input_ids == tokenizer("Answer: Y").input_ids
    assert tok.padding_side == "left" and tok.pad_token_id == tokenizer.pad_token_id
    assert meta["task"] == "verify" and meta["T"] == 1.7 and meta["marker"] == "Answer:"
    assert sorted(p.name for p in path.iterdir()) == sorted(
        [
            "checksums.json",
            "config.json",
            "generation_config.json",
            "model.safetensors",
            "rlcd.json",
            "tokenizer.json",
            "tokenizer_config.json",
        ]
    )


def test_save_replaces_atomically(tmp_path, tokenizer, tiny_lm):
    path = tmp_path / "ck"
    save_checkpoint(path, tiny_lm, tokenizer, {"step": 1})
    (path / "stale.txt").write_text("from an older save")
    other = tiny_model(tokenizer, seed=1)
    save_checkpoint(path, other, tokenizer, {"step": 2})
    assert not (path / "stale.txt").exists() and read_meta(path)["step"] == 2
    torch.testing.assert_close(load_checkpoint(path)[0](X).logits, other(X).logits)
    assert [p.name for p in tmp_path.iterdir()] == ["ck"]


def test_peft_adapter_round_trip(tmp_path, tokenizer, tiny_lm):
    from peft import LoraConfig, get_peft_model

    base = save_checkpoint(tmp_path / "base", tiny_lm, tokenizer)
    base_model, _, _ = load_checkpoint(base)
    lora = get_peft_model(
        base_model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    )
    adapter = save_checkpoint(tmp_path / "adapter", lora, tokenizer, {"method": "calibrate"})
    assert (adapter / "adapter_model.safetensors").exists() and not (
        adapter / "model.safetensors"
    ).exists()
    loaded, _, meta = load_checkpoint(adapter)
    torch.testing.assert_close(loaded(X).logits, lora(X).logits)
    assert not torch.allclose(loaded(X).logits, tiny_lm(X).logits)  # the adapter does something
    assert meta["method"] == "calibrate"
    # shipped without its tokenizer (as the SmolLM2 adapters in assets/): the base's is used
    for f in adapter.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "chat_template")):
            f.unlink()
    with pytest.raises(FileNotFoundError, match="missing tokenizer.json .listed in checksums"):
        load_checkpoint(adapter)  # the checksums cover every file saved, the tokenizer too
    write_checksums(adapter)  # shipped that way: its checksums list what it ships
    slim, slim_tok, _ = load_checkpoint(adapter)
    torch.testing.assert_close(slim(X).logits, lora(X).logits)
    assert slim_tok.get_vocab() == tokenizer.get_vocab()


def test_errors_name_what_is_wrong(tmp_path, tokenizer, tiny_lm):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_checkpoint(tmp_path / "nope")
    path = save_checkpoint(tmp_path / "ck", tiny_lm, tokenizer)
    (path / "model.safetensors").rename(path / "moved")
    with pytest.raises(FileNotFoundError, match="missing model.safetensors"):
        load_checkpoint(path)
    (path / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(ValueError, match="pickled weights only"):
        load_checkpoint(path)
    (path / "moved").rename(path / "model.safetensors")
    (path / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="missing config.json"):
        load_checkpoint(path)
    path = save_checkpoint(tmp_path / "ck2", tiny_lm, tokenizer)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (path / name).unlink()
    with pytest.raises(FileNotFoundError, match="missing tokenizer.json"):
        load_checkpoint(path)
    small = tiny_model(char_tokenizer("0123456789"))  # 14-token vocabulary
    path = save_checkpoint(tmp_path / "ck3", small, tokenizer)
    with pytest.raises(ValueError, match="tokenizer has 100 tokens but the model only 14"):
        load_checkpoint(path)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="does not name its base model"):
        load_checkpoint(adapter)


def test_plain_hf_directory_gets_default_meta(tmp_path, tokenizer, tiny_lm):
    from rlcd_lab.lm.checkpoint import UnverifiedCheckpointWarning

    tiny_lm.save_pretrained(tmp_path / "hf")
    tokenizer.save_pretrained(tmp_path / "hf")
    with pytest.warns(UnverifiedCheckpointWarning, match="has no checksums.json"):
        _, _, meta = load_checkpoint(tmp_path / "hf")
    assert meta == {"marker": "Answer:", "sep": " ", "T": 1.0}


def test_torch_threads_follow_the_free_cores(monkeypatch):
    """Cores minus the rounded 1-minute load, at least one; OMP_NUM_THREADS wins."""
    import torch

    from rlcd_lab.lm import model as models

    monkeypatch.setattr(models.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    for load, free in ((0.2, 4), (1.6, 2), (3.9, 1), (9.0, 1)):
        monkeypatch.setattr(models.os, "getloadavg", lambda load=load: (load, 0.0, 0.0))
        assert models.free_cores() == free
    n = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        monkeypatch.setattr(models.os, "getloadavg", lambda: (2.2, 0.0, 0.0))
        assert models.use_free_cores() == 2 == torch.get_num_threads()
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        torch.set_num_threads(3)
        monkeypatch.setattr(models.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
        assert models.use_free_cores() == 3  # the environment's count is kept
    finally:
        torch.set_num_threads(n)
