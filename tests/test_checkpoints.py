"""Checkpoint validation at load: every malformed or corrupt checkpoint is one
``CheckpointError`` naming the file and the problem, never a raw traceback from
safetensors/transformers, and never a silent load (bit flips, NaN weights, missing
tensors). Checksums are written at every save and verified at load."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from rlcd_lab.models import (
    CHECKSUM_FILE,
    CheckpointError,
    check_replaceable,
    load_checkpoint,
    read_meta,
    save_checkpoint,
    tiny_model,
    verify_checksums,
    write_checksums,
)

X = torch.tensor([[10, 11, 12, 13]])
ASSETS = Path(__file__).resolve().parent.parent / "assets" / "checkpoints"


@pytest.fixture()
def ck(tmp_path, tokenizer, tiny_lm):
    """A freshly saved tiny checkpoint (with its checksums)."""
    return save_checkpoint(tmp_path / "ck", tiny_lm, tokenizer, {"task": "verify"})


def sha256(file: Path) -> str:
    return hashlib.sha256(file.read_bytes()).hexdigest()


def rewrite_weights(path: Path, change) -> None:
    """Apply ``change`` to the tensors of ``model.safetensors`` and save them again as a
    valid file with fresh checksums: only the content check under test can object."""
    tensors = load_file(path / "model.safetensors")
    change(tensors)
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    write_checksums(path)


def edit_json(file: Path, change) -> None:
    data = json.loads(file.read_text())
    file.write_text(json.dumps(change(data)))


def q_proj(tensors: dict) -> str:
    return next(k for k in tensors if k.endswith("q_proj.weight"))


# ---------------------------------------------------------------------- checksums
def test_save_writes_the_sha256_of_every_weight_file(ck):
    body = json.loads((ck / CHECKSUM_FILE).read_text())
    weights = sorted(p.name for p in ck.glob("*.safetensors"))
    assert weights == ["model.safetensors"]
    assert body == {"algorithm": "sha256", "files": {n: sha256(ck / n) for n in weights}}
    assert verify_checksums(ck) is True


def test_a_bit_flip_in_the_weight_data_is_caught(ck, tiny_lm):
    file = ck / "model.safetensors"
    data = bytearray(file.read_bytes())
    data[-100] ^= 0x10  # inside the last tensor's data: the header stays valid
    file.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="sha256") as err:
        load_checkpoint(ck)
    assert str(file) in str(err.value)
    # verify=False skips the checksum: the flipped model loads (and differs)
    model, _, _ = load_checkpoint(ck, verify=False)
    assert not torch.equal(model(X).logits, tiny_lm(X).logits)


@pytest.mark.parametrize("with_checksums", [True, False])
def test_truncated_weights_name_the_file(ck, with_checksums):
    file = ck / "model.safetensors"
    if not with_checksums:
        (ck / CHECKSUM_FILE).unlink()
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    want = "sha256" if with_checksums else "not a valid safetensors file"
    with pytest.raises(CheckpointError, match=want) as err:
        load_checkpoint(ck)
    assert str(file) in str(err.value)
    with pytest.raises(CheckpointError, match="not a valid safetensors file"):
        load_checkpoint(ck, verify=False)  # the header check still runs


@pytest.mark.parametrize("offset", [3, 20])  # the header length; the JSON header
def test_a_byte_flip_in_the_header_names_the_file(ck, offset):
    file = ck / "model.safetensors"
    data = bytearray(file.read_bytes())
    data[offset] ^= 0xFF
    file.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="not a valid safetensors file") as err:
        load_checkpoint(ck, verify=False)
    assert str(file) in str(err.value)


def test_checksum_file_problems(ck):
    file = ck / CHECKSUM_FILE
    original = file.read_text()
    file.write_text("[]")
    with pytest.raises(CheckpointError, match=f"{file}: must hold a JSON object"):
        load_checkpoint(ck)
    file.write_text(json.dumps({"algorithm": "md5", "files": {}}))
    with pytest.raises(CheckpointError, match="'algorithm': 'sha256'"):
        load_checkpoint(ck)
    file.write_text(original)
    shutil.copy(ck / "model.safetensors", ck / "adapter_model.safetensors")
    with pytest.raises(CheckpointError, match=r"not covered by checksums.json: \['adapter"):
        load_checkpoint(ck)
    (ck / "adapter_model.safetensors").unlink()
    edit_json(file, lambda b: {**b, "files": {**b["files"], "extra.safetensors": "00"}})
    with pytest.raises(FileNotFoundError, match="extra.safetensors is listed in .* but missing"):
        load_checkpoint(ck)


def test_checkpoints_without_checksums_load_unverified(tmp_path, tokenizer, tiny_lm, ck):
    (ck / CHECKSUM_FILE).unlink()  # an older checkpoint
    assert verify_checksums(ck) is False
    torch.testing.assert_close(load_checkpoint(ck)[0](X).logits, tiny_lm(X).logits)
    tiny_lm.save_pretrained(tmp_path / "hf")  # a plain HF directory
    tokenizer.save_pretrained(tmp_path / "hf")
    assert verify_checksums(tmp_path / "hf") is False
    load_checkpoint(tmp_path / "hf")


@pytest.mark.parametrize("name", ["base-verify", "base-facts", "base-aleatoric"])
def test_shipped_checkpoints_carry_checksums(name):
    assert verify_checksums(ASSETS / name) is True  # False would mean: not verified


# ---------------------------------------------------------------------- tensors
def test_wrong_tensor_shape(ck):
    rewrite_weights(ck, lambda t: t.update({q_proj(t): t[q_proj(t)][:8]}))
    with pytest.raises(CheckpointError, match=r"q_proj.weight has shape \(8, 16\)") as err:
        load_checkpoint(ck)
    assert str(ck) in str(err.value) and "config needs (16, 16)" in str(err.value)


def test_missing_and_extra_tensors(ck):
    kept = load_file(ck / "model.safetensors")
    rewrite_weights(ck, lambda t: t.pop(q_proj(t)))  # would be randomly initialised
    with pytest.raises(CheckpointError, match=r"q_proj.weight is missing"):
        load_checkpoint(ck)
    rewrite_weights(ck, lambda t: t.update(kept, **{"stray.weight": torch.zeros(3)}))
    with pytest.raises(CheckpointError, match=r"stray.weight is not part of the model"):
        load_checkpoint(ck)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused_at_load(ck, value):
    def poison(t):
        t[q_proj(t)][0, 0] = value

    rewrite_weights(ck, poison)
    with pytest.raises(CheckpointError, match=r"q_proj.weight has 1 non-finite values") as err:
        load_checkpoint(ck)
    assert str(ck) in str(err.value)


# ---------------------------------------------------------------------- config.json
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: [c], "must hold a JSON object, got list"),
        (lambda c: {**c, "hidden_size": "16"}, "'hidden_size' must be an integer > 0, got '16'"),
        (lambda c: {**c, "num_hidden_layers": 0}, "'num_hidden_layers' must be an integer > 0"),
        (lambda c: {**c, "vocab_size": True}, "'vocab_size' must be an integer > 0, got True"),
        (lambda c: {k: v for k, v in c.items() if k != "model_type"}, "'model_type' is missing"),
        (lambda c: {**c, "tie_word_embeddings": "yes"}, "'tie_word_embeddings' must be true"),
        (lambda c: {**c, "rms_norm_eps": -1}, "'rms_norm_eps' must be a finite number > 0"),
        (lambda c: {**c, "eos_token_id": 100}, r"'eos_token_id' must be null or a token id"),
        (lambda c: {**c, "num_key_value_heads": 3}, "not a multiple of num_key_value_heads 3"),
    ],
)
def test_config_schema(ck, change, message):
    edit_json(ck / "config.json", change)
    with pytest.raises(CheckpointError, match=message) as err:
        load_checkpoint(ck)
    assert str(ck / "config.json") in str(err.value)


def test_config_not_json(ck):
    (ck / "config.json").write_text("{")
    with pytest.raises(CheckpointError, match="config.json: not readable as JSON"):
        load_checkpoint(ck)


# ---------------------------------------------------------------------- rlcd.json
@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ([1], "must hold a JSON object, got list"),
        ({"temperature": None}, "'temperature' must be a finite number > 0, got None"),
        ({"temperature": 0}, "'temperature' must be a finite number > 0, got 0"),
        ({"temperature": float("nan")}, "'temperature' must be a finite number > 0, got nan"),
        ({"temperature": "1.5"}, "'temperature' must be a finite number > 0, got '1.5'"),
        ({"marker": ""}, "'marker' must be a non-empty string"),
        ({"sep": None}, "'sep' must be a string"),
        ({"options": ["Y"]}, "'options' must be a list of at least two distinct"),
        ({"options": ["Y", "Y"]}, "'options' must be a list of at least two distinct"),
        ({"options": "YN"}, "'options' must be a list of at least two distinct"),
        ({"options": ["Y", 1]}, "'options' must be a list of at least two distinct"),
        ({"step": -1}, "'step' must be an integer >= 0"),
        ({"metrics": []}, "'metrics' must be a JSON object"),
    ],
)
def test_meta_schema(ck, meta, message):
    (ck / "rlcd.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=message) as err:
        load_checkpoint(ck)
    assert str(ck / "rlcd.json") in str(err.value)
    with pytest.raises(CheckpointError, match=message):
        read_meta(ck)


def test_meta_not_json(ck):
    (ck / "rlcd.json").write_text("{")
    with pytest.raises(CheckpointError, match="rlcd.json: not readable as JSON"):
        load_checkpoint(ck)


# ---------------------------------------------------------------------- adapters
def test_corrupt_adapter_names_the_file(tmp_path, tokenizer, tiny_lm):
    from peft import LoraConfig, get_peft_model

    base = save_checkpoint(tmp_path / "base", tiny_lm, tokenizer)
    lora = get_peft_model(load_checkpoint(base)[0], LoraConfig(r=2, target_modules=["q_proj"]))
    adapter = save_checkpoint(tmp_path / "adapter", lora, tokenizer)
    assert set(json.loads((adapter / CHECKSUM_FILE).read_text())["files"]) == {
        "adapter_model.safetensors"
    }
    file = adapter / "adapter_model.safetensors"
    file.write_bytes(file.read_bytes()[:-10])
    with pytest.raises(CheckpointError, match="sha256") as err:
        load_checkpoint(adapter)
    assert str(file) in str(err.value)
    with pytest.raises(CheckpointError, match="not a valid safetensors file"):
        load_checkpoint(adapter, verify=False)
    edit_json(adapter / "adapter_config.json", lambda c: {**c, "base_model_name_or_path": 3})
    with pytest.raises(CheckpointError, match="does not name its base model"):
        load_checkpoint(adapter)


# ---------------------------------------------------------------------- saving safely
def test_save_never_replaces_a_folder_that_is_not_a_checkpoint(tmp_path, tokenizer, tiny_lm):
    folder = tmp_path / "documents"
    folder.mkdir()
    (folder / "thesis.txt").write_text("irreplaceable")
    with pytest.raises(FileExistsError, match="not a checkpoint directory"):
        save_checkpoint(folder, tiny_lm, tokenizer)
    assert (folder / "thesis.txt").read_text() == "irreplaceable"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["documents"]  # no temp debris
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError):
        check_replaceable(tmp_path / "file")
    run = tmp_path / "run"  # a training run: its config.json is not a model's
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"method": "calibrate", "steps": 2}))
    with pytest.raises(FileExistsError, match="not a checkpoint directory"):
        save_checkpoint(run, tiny_lm, tokenizer)
    assert [p.name for p in run.iterdir()] == ["config.json"]
    (tmp_path / "empty").mkdir()
    save_checkpoint(tmp_path / "empty", tiny_lm, tokenizer)  # an empty folder is fine
    save_checkpoint(tmp_path / "empty", tiny_model(tokenizer, seed=1), tokenizer)  # and again
    assert verify_checksums(tmp_path / "empty") is True
