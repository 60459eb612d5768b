"""Checkpoint validation at load: every malformed or corrupt checkpoint is one
``CheckpointError`` naming the file and the problem, never a raw traceback from
safetensors/transformers, and never a silent load (bit flips, NaN weights, missing
tensors, an edited config). Checksums of every file are written at every save and
verified at load; a checkpoint without them loads with a warning."""

import hashlib
import json
import os
import shutil
import threading
import warnings
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from rlcd_lab.decide import DecisionModel
from rlcd_lab.files.io import read_json_file
from rlcd_lab.files.rundir import CHECKSUMS, CheckpointError
from rlcd_lab.lm.checkpoint import (
    CheckpointMissingError,
    UnverifiedCheckpointWarning,
    calibration_T,
    check_replaceable,
    checksum_coverage,
    min_parameters,
    read_meta,
    save_checkpoint,
    sign_checkpoint,
    verify_checksums,
    write_checksums,
)
from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.lm.model import tiny_model
from rlcd_lab.reader import Reader, raw_meta, temperature_fitted

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


def weights_only_manifest(path: Path) -> None:
    """Rewrite ``checksums.json`` as versions before 2 wrote it: the weight files only."""
    weights = sorted(p.name for p in path.glob("*.safetensors"))
    body = {"algorithm": "sha256", "files": {n: sha256(path / n) for n in weights}}
    (path / CHECKSUMS).write_text(json.dumps(body))


# ---------------------------------------------------------------------- checksums
def test_save_writes_the_sha256_of_every_file(ck):
    body = json.loads((ck / CHECKSUMS).read_text())
    files = sorted(p.name for p in ck.iterdir() if p.name != CHECKSUMS)
    assert files == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "rlcd.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    want = {n: sha256(ck / n) for n in files}
    assert body == {"algorithm": "sha256", "version": 2, "files": want}
    assert verify_checksums(ck) is True and checksum_coverage(ck) == "all"


@pytest.mark.parametrize(
    ("name", "change"),
    [
        ("config.json", lambda c: {**c, "rms_norm_eps": 0.5}),  # valid, and changes answers
        ("rlcd.json", lambda m: {**m, "T": 3.0}),
        ("tokenizer_config.json", lambda t: {**t, "padding_side": "right"}),
    ],
)
def test_an_edited_config_or_tokenizer_is_caught(ck, tiny_lm, name, change):
    edit_json(ck / name, change)
    with pytest.raises(CheckpointError, match=f"{name}: sha256 .* differs") as err:
        load_checkpoint(ck)
    assert str(ck / name) in str(err.value)
    load_checkpoint(ck, verify=False)  # still loads when asked to skip the checks


def test_a_file_added_after_the_save_is_caught(ck):
    (ck / "chat_template.jinja").write_text("{{ messages }}")  # would change every prompt
    with pytest.raises(CheckpointError, match=r"files not covered by checksums.json: \['chat"):
        load_checkpoint(ck)
    (ck / "chat_template.jinja").unlink()
    (ck / ".DS_Store").write_text("hidden files are not read by a load")
    load_checkpoint(ck)


def test_a_missing_manifest_warns_and_then_misses_a_flipped_byte(ck, tiny_lm):
    (ck / CHECKSUMS).unlink()
    edit_json(ck / "config.json", lambda c: {**c, "rms_norm_eps": 0.5})
    with pytest.warns(UnverifiedCheckpointWarning, match="has no checksums.json"):
        model, _, _ = load_checkpoint(ck)
    assert not torch.allclose(model(X).logits, tiny_lm(X).logits)  # what the warning is for
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_checkpoint(ck, verify=False)  # asked not to verify: no warning


def test_an_older_weights_only_manifest_still_checks_the_weights(ck):
    weights_only_manifest(ck)
    assert checksum_coverage(ck) == "weights" and verify_checksums(ck) is True
    with pytest.warns(UnverifiedCheckpointWarning, match="over its weights only"):
        load_checkpoint(ck)
    edit_json(ck / "config.json", lambda c: {**c, "rms_norm_eps": 0.5})
    with pytest.warns(UnverifiedCheckpointWarning):
        load_checkpoint(ck)  # not covered by the old format: loads, with the warning
    file = ck / "model.safetensors"
    data = bytearray(file.read_bytes())
    data[-100] ^= 0x10
    file.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="model.safetensors: sha256"):
        load_checkpoint(ck)


def test_sign_checkpoint_upgrades_but_never_blesses_a_changed_file(ck):
    weights_only_manifest(ck)
    sign_checkpoint(ck)  # the weights verify: the manifest now covers every file
    assert checksum_coverage(ck) == "all" and verify_checksums(ck) is True
    edit_json(ck / "rlcd.json", lambda m: {**m, "T": 2.0})
    with pytest.raises(CheckpointError, match="rlcd.json: sha256 .* pass --force"):
        sign_checkpoint(ck)
    sign_checkpoint(ck, force=True)  # the change is ours
    assert load_checkpoint(ck)[2]["T"] == 2.0
    (ck / CHECKSUMS).unlink()
    sign_checkpoint(ck)  # none yet: written over the files as they are
    assert verify_checksums(ck) is True
    with pytest.raises(CheckpointMissingError, match="does not exist"):
        sign_checkpoint(ck.parent / "nowhere")
    (ck.parent / "docs").mkdir()
    with pytest.raises(CheckpointError, match="not a checkpoint directory"):
        sign_checkpoint(ck.parent / "docs")


def test_a_bit_flip_in_the_weight_data_is_caught(ck, tiny_lm):
    file = ck / "model.safetensors"
    data = bytearray(file.read_bytes())
    # an exponent bit of a float in the last tensor (floats are 4-byte aligned from the
    # end, little-endian: byte 3 is the high one): the value moves 256-fold, so the
    # logits differ on any CPU kernel; the header stays valid
    data[-97] ^= 0x10
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
        (ck / CHECKSUMS).unlink()
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
    file = ck / CHECKSUMS
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
    with pytest.raises(FileNotFoundError, match=r"missing extra.safetensors \(listed in"):
        load_checkpoint(ck)
    edit_json(file, lambda b: {**b, "version": 3})
    with pytest.raises(CheckpointError, match="'version': 2"):
        load_checkpoint(ck)


def test_checkpoints_without_checksums_load_unverified(tmp_path, tokenizer, tiny_lm, ck):
    (ck / CHECKSUMS).unlink()  # an older checkpoint
    assert verify_checksums(ck) is False and checksum_coverage(ck) == "none"
    with pytest.warns(UnverifiedCheckpointWarning, match=f"{ck} has no checksums.json"):
        torch.testing.assert_close(load_checkpoint(ck)[0](X).logits, tiny_lm(X).logits)
    tiny_lm.save_pretrained(tmp_path / "hf")  # a plain HF directory
    tokenizer.save_pretrained(tmp_path / "hf")
    assert verify_checksums(tmp_path / "hf") is False
    with pytest.warns(UnverifiedCheckpointWarning):
        load_checkpoint(tmp_path / "hf")


SHIPPED = sorted(p.parent for p in ASSETS.parent.glob("**/checksums.json"))


@pytest.mark.parametrize("ck", SHIPPED, ids=lambda p: str(p.relative_to(ASSETS.parent.parent)))
def test_shipped_checkpoints_carry_checksums(ck):
    """Every checkpoint shipped in assets/ (the base models, the reproductions' final
    weights and adapters) has a manifest over all of its files, and it holds."""
    # every base model and every shipped final checkpoint of a reproduction has one: the 7
    # under checkpoints/ and 4 final/ (assets/README.md lists them)
    expected = {*ASSETS.glob("*/"), *ASSETS.parent.glob("results/**/final/")}
    assert set(SHIPPED) == expected and len(expected) >= 11
    assert verify_checksums(ck) is True  # False would mean: not verified
    assert checksum_coverage(ck) == "all"  # config and tokenizer too


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
        ({"T": None}, "'T' must be a finite number > 0, got None"),
        ({"T": 0}, "'T' must be a finite number > 0, got 0"),
        ({"T": float("nan")}, "'T' must be a finite number > 0, got nan"),
        ({"T": "1.5"}, "'T' must be a finite number > 0, got '1.5'"),
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
    assert set(json.loads((adapter / CHECKSUMS).read_text())["files"]) == {
        "README.md",  # peft's model card
        "adapter_config.json",
        "adapter_model.safetensors",
        "rlcd.json",
        "tokenizer.json",
        "tokenizer_config.json",
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


@pytest.fixture()
def adapter(tmp_path, tokenizer, tiny_lm):
    """A LoRA adapter over a tiny base saved in ``tmp_path / "base"``."""
    from peft import LoraConfig, get_peft_model

    base = save_checkpoint(tmp_path / "base", tiny_lm, tokenizer)
    lora = get_peft_model(load_checkpoint(base)[0], LoraConfig(r=2, target_modules=["q_proj"]))
    return save_checkpoint(tmp_path / "adapter", lora, tokenizer)


def set_base(adapter: Path, name: str) -> None:
    edit_json(adapter / "adapter_config.json", lambda c: {**c, "base_model_name_or_path": name})
    write_checksums(adapter)


def no_network(monkeypatch, cache: Path) -> None:
    """An empty Hugging Face cache at ``cache``, and any hub request a test failure."""
    import huggingface_hub.constants
    import huggingface_hub.file_download

    def refuse(*args, **kwargs):
        raise AssertionError("a hub request while loading a checkpoint")

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.file_download, "get_hf_file_metadata", refuse)


def test_an_adapter_whose_local_base_is_gone_names_it(adapter):
    shutil.rmtree(adapter.parent / "base")
    with pytest.raises(CheckpointMissingError) as err:
        load_checkpoint(adapter)
    msg = str(err.value)
    assert f"its base model {adapter.parent / 'base'} does not exist" in msg
    assert "Repo id" not in msg and "\n" not in msg


def test_an_adapter_on_a_hub_base_missing_from_the_cache_fails_at_once(
    adapter, monkeypatch, tmp_path
):
    import time

    no_network(monkeypatch, tmp_path / "hf-cache")
    set_base(adapter, "someorg/some-model")
    start = time.perf_counter()
    with pytest.raises(CheckpointMissingError, match="neither a local directory nor in the Hug"):
        load_checkpoint(adapter)
    assert time.perf_counter() - start < 2  # no retries against an unreachable hub
    monkeypatch.chdir(tmp_path)
    set_base(adapter, "runs/base")  # a relative path that reads as a hub name: same line
    with pytest.raises(CheckpointMissingError, match="'runs/base' .*`hf download runs/base`"):
        load_checkpoint(adapter)


def test_an_adapter_on_a_cached_hub_base_loads_offline(
    adapter, monkeypatch, tmp_path, tokenizer, tiny_lm
):
    cache = tmp_path / "hf-cache"
    repo = cache / "models--someorg--tiny"
    tiny_lm.save_pretrained(repo / "snapshots" / "abc")  # the cache layout of a download
    tokenizer.save_pretrained(repo / "snapshots" / "abc")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc")
    no_network(monkeypatch, cache)
    want = load_checkpoint(adapter)[0](X).logits
    set_base(adapter, "someorg/tiny")
    torch.testing.assert_close(load_checkpoint(adapter)[0](X).logits, want)


def test_an_old_rlcd_json_with_temperature_loads_with_T(ck, tmp_path, tiny_lm, tokenizer):
    """Checkpoints written before the rename hold the fitted calibration T under
    ``"temperature"``: every reader takes it as ``T``; saving writes ``"T"`` only."""
    edit_json(ck / "rlcd.json", lambda m: {**{k: v for k, v in m.items() if k != "T"},
                                           "temperature": 2.0})  # fmt: skip
    write_checksums(ck)
    raw = raw_meta(ck)
    assert "T" not in raw and calibration_T(raw) == 2.0
    assert temperature_fitted(raw) == (True, "")
    meta = load_checkpoint(ck)[2]
    assert meta["T"] == 2.0 and "temperature" not in meta and read_meta(ck) == meta
    reader = Reader.load(ck)
    assert reader.T == 2.0 and reader.T_fitted
    decider = DecisionModel.from_checkpoint(ck)
    assert decider.T == 2.0 and decider.T_fitted
    assert Reader(tiny_lm, tokenizer, {"temperature": 2.0}).T == 2.0  # a dict passed in
    assert calibration_T({"T": 3.0, "temperature": 2.0}) == 3.0  # the new key wins
    assert calibration_T({}) is None and calibration_T(None) is None
    # saved again (an old meta dict passed through): "T" only
    save_checkpoint(tmp_path / "re", tiny_lm, tokenizer, {"temperature": 2.0})
    written = json.loads((tmp_path / "re" / "rlcd.json").read_text())
    assert written["T"] == 2.0 and "temperature" not in written


def test_decision_model_old_keywords_warn(tiny_lm, tokenizer):
    with pytest.warns(DeprecationWarning, match="use T="):
        decider = DecisionModel(tiny_lm, tokenizer, {}, temperature=3.0)
    assert decider.T == 3.0 and decider.T_fitted  # an explicit T counts as fitted
    with pytest.warns(DeprecationWarning, match="use T_fitted="):
        assert DecisionModel(tiny_lm, tokenizer, {}, temperature_fitted=False).T_fitted is False
    with pytest.warns(DeprecationWarning, match="use .T"):
        assert decider.temperature == 3.0
    with pytest.raises(TypeError, match="both temperature= and T="):
        DecisionModel(tiny_lm, tokenizer, {}, temperature=3.0, T=2.0)
    with pytest.raises(TypeError, match="unexpected keyword"):
        DecisionModel(tiny_lm, tokenizer, {}, temprature=3.0)


# ---------------------------------------------------------------------- bounded reads
@contextmanager
def unblocked(fifo: Path, after_s: float = 10.0):
    """A FIFO whose reader, if one ever waits on it, is released after ``after_s`` (a
    writer opens and closes it): a load that waits on it fails its test instead of hanging
    the suite. A load that never opens it for a blocking read is not affected."""

    def release():
        with suppress(OSError):  # ENXIO: nobody reads it (what a bounded reader leaves)
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    os.mkfifo(fifo)
    timer = threading.Timer(after_s, release)
    timer.start()
    try:
        yield fifo
    finally:
        timer.cancel()


@pytest.mark.parametrize("name", ["config.json", "rlcd.json", "tokenizer.json"])
def test_a_fifo_in_a_checkpoint_is_refused_without_waiting(ck, name):
    (ck / name).unlink()
    with unblocked(ck / name):
        for verify in (True, False):
            with pytest.raises(CheckpointError, match=f"not a regular file: {name} "):
                load_checkpoint(ck, verify=verify)


def test_a_fifo_as_json_file_is_refused(tmp_path):
    with unblocked(tmp_path / "x.json") as fifo:
        with pytest.raises(ValueError, match=r"x.json: not a regular file \(a FIFO\)"):
            read_json_file(fifo)


def test_nested_checksums_are_one_error(ck):
    (ck / CHECKSUMS).write_text("[" * 100_000 + "]" * 100_000)  # valid JSON, too deep
    with pytest.raises(CheckpointError, match=f"{CHECKSUMS}: not readable as JSON.*nested"):
        load_checkpoint(ck)


@pytest.mark.parametrize("key", ["num_hidden_layers", "hidden_size", "intermediate_size"])
def test_a_config_larger_than_its_weights_is_refused_before_building(ck, key, monkeypatch):
    """The tiny model (V = len(tokenizer), h = 16, 1 layer, I = 32) holds its embedding
    (tied) and its layer's weights; a size of 100,000 asks for at least 100,000 x 16 x 32
    (layers), V x 100,000 (hidden) or 2 x 16 x 100,000 (intermediate) parameters, each more
    than the file holds. Refused before transformers builds anything."""
    import transformers

    cfg = json.loads((ck / "config.json").read_text())
    held = sum(t.numel() for t in load_file(ck / "model.safetensors").values())
    assert min_parameters(cfg) <= held  # the saved config fits its weights
    edit_json(ck / "config.json", lambda c: {**c, key: 100_000})
    write_checksums(ck)
    assert min_parameters({**cfg, key: 100_000}) > held

    def never(*args, **kwargs):
        raise AssertionError("the model was built")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", never)
    with pytest.raises(CheckpointError, match=rf"at least [\d,]+ parameters.*hold {held:,}"):
        load_checkpoint(ck)


def test_min_parameters_counts_what_every_decoder_holds(tiny_lm):
    """Derived: embedding V x h plus, per layer, the MLP's 2 x h x I (a Llama MLP holds 3);
    so it is at most the real count, for the tiny Llama and for GPT-2's names."""
    c = tiny_lm.config
    assert min_parameters(c.to_dict()) == c.vocab_size * 16 + 1 * 2 * 16 * 32
    assert min_parameters(c.to_dict()) <= sum(p.numel() for p in tiny_lm.parameters())
    gpt2 = {"vocab_size": 50, "n_embd": 8, "n_layer": 3, "n_inner": None}
    assert min_parameters(gpt2) == 50 * 8 + 3 * 2 * 8 * 8  # no n_inner: h in its place
    assert min_parameters({"model_type": "llama"}) == 0
