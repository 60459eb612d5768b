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
