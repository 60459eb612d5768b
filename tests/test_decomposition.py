"""Proposition 1 and Corollary 1, checked to float64 rounding on random inputs."""

import itertools

import pytest
import torch

from rlcd_lab.decomposition import sampled_answer_decomposition, variance_decomposition
from rlcd_lab.scoring import brier_score, expected_score

pytestmark = pytest.mark.usefixtures("float64")  # exactness checks run in float64


def test_proposition1_identity_random():
    g = torch.Generator().manual_seed(0)
    for m, k in [(1, 2), (2, 2), (4, 3), (16, 10)]:
        u = torch.rand(50, m, k, generator=g).softmax(-1) ** 3
        u = u / u.sum(-1, keepdim=True)
        q = torch.rand(50, k, generator=g).softmax(-1)
        d = variance_decomposition(u, q)
        err = (d["mixture_score"] - d["mean_score"] - d["diversity"]).abs().max()
        assert err < 1e-12
        assert (d["diversity"] >= 0).all()
        # each term against its definition, computed the slow way
        p = u.mean(1)
        torch.testing.assert_close(d["mixture_score"], 2 * (p * q).sum(-1) - (p * p).sum(-1))
        slow_mean = torch.stack(
            [sum(expected_score(u[b, i], q[b]) for i in range(m)) / m for b in range(50)]
        )
        torch.testing.assert_close(d["mean_score"], slow_mean)


def test_proposition1_weighted_and_identical_readouts():
    g = torch.Generator().manual_seed(1)
    u = torch.rand(5, 3, generator=g).softmax(-1)
    w = torch.rand(5, generator=g)
    q = torch.tensor([0.2, 0.5, 0.3])
    d = variance_decomposition(u, q, w)
    assert abs(d["mixture_score"] - d["mean_score"] - d["diversity"]) < 1e-12
    torch.testing.assert_close(d["mixture"], (w[:, None] * u).sum(0) / w.sum())
    # identical rationales: no diversity, mixture score equals the per-rationale score
    same = variance_decomposition(u[:1].expand(4, 3), q)
    assert same["diversity"].item() < 1e-15
    torch.testing.assert_close(same["mixture_score"], expected_score(u[0], q))


def test_corollary1_by_enumeration():
    g = torch.Generator().manual_seed(2)
    for k in [2, 3, 5]:
        p = torch.rand(20, k, generator=g).softmax(-1)
        q = torch.rand(20, k, generator=g).softmax(-1)
        c = sampled_answer_decomposition(p, q)
        # E_{a~p, Y~q} J(e_a, Y) by enumerating every (a, y) pair
        eye = torch.eye(k)
        enum = sum(
            p[:, a] * q[:, y] * brier_score(eye[a], y)
            for a, y in itertools.product(range(k), range(k))
        )
        assert (c["sampled_brier"] - enum).abs().max() < 1e-12
        assert (c["sampled_brier"] - (2 * c["rlvr_reward"] - 1)).abs().max() < 1e-12
        assert (c["mixture_score"] - expected_score(p, q)).abs().max() < 1e-12
