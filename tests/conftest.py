"""Shared fixtures: a tiny offline causal LM and its character-level tokenizer."""

from __future__ import annotations

import pytest
import torch

from rlcd_lab.models import char_tokenizer, tiny_model


def pytest_collection_modifyitems(config, items):
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
