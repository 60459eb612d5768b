"""Scoring rules: hand-worked values, batch shapes, strict properness."""

import math

import pytest
import torch

from rlcd_lab.scoring import (
    RULES,
    brier_score,
    expected_score,
    log_score,
    score,
    spherical_score,
)

pytestmark = pytest.mark.usefixtures("float64")  # exactness checks run in float64


def test_hand_worked_values():
    u = torch.tensor([0.5, 0.3, 0.2])
    # ||u||^2 = 0.25 + 0.09 + 0.04 = 0.38
    assert brier_score(u, 0).item() == pytest.approx(2 * 0.5 - 0.38)
    assert brier_score(u, 2).item() == pytest.approx(2 * 0.2 - 0.38)
    # equals 1 - ||u - e_y||^2: (0.5-1)^2 + 0.09 + 0.04 = 0.38 -> 0.62
    assert brier_score(u, 0).item() == pytest.approx(1 - 0.38)
    assert log_score(u, 1).item() == pytest.approx(math.log(0.3))
    assert spherical_score(u, 0).item() == pytest.approx(0.5 / math.sqrt(0.38))
    # range endpoints of Brier: confident right = 1, confident wrong = -1
    assert brier_score(torch.tensor([1.0, 0.0]), 0).item() == 1.0
    assert brier_score(torch.tensor([1.0, 0.0]), 1).item() == -1.0


def test_the_rules_are_listed_once():
    """The settings' type names exactly the rules of the one table."""
    from typing import get_args

    from rlcd_lab.math.rule_names import Rule

    assert get_args(Rule) == tuple(RULES)
    # the training settings offer the same rules (tyro reads this annotation for --rule)
    from typing import get_type_hints

    from rlcd_lab.methods.configs import RLCDConfig

    assert get_args(get_type_hints(RLCDConfig)["rule"]) == tuple(RULES)
    with pytest.raises(ValueError, match=r"choose one of \('brier', 'log', 'spherical'\)"):
        expected_score(torch.ones(2) / 2, torch.ones(2) / 2, "hinge")


def test_batch_shapes_and_label_broadcast():
    g = torch.Generator().manual_seed(0)
    u = torch.rand(5, 3, 4, generator=g).softmax(-1)
    y = torch.randint(0, 4, (5, 3), generator=g)
    for rule in RULES:
        s = score(u, y, rule)
        assert s.shape == (5, 3)
        ref = torch.stack([score(u[i, j], int(y[i, j]), rule) for i in range(5) for j in range(3)])
        torch.testing.assert_close(s.flatten(), ref)
    assert brier_score(u, 2).shape == (5, 3)
    with pytest.raises(ValueError, match="unknown scoring rule"):
        score(u, 0, "hinge")


@pytest.mark.parametrize("rule", list(RULES))
def test_expected_score_matches_enumeration(rule):
    g = torch.Generator().manual_seed(1)
    u = torch.rand(7, 5, generator=g).softmax(-1)
    q = torch.rand(7, 5, generator=g).softmax(-1)
    ref = sum(q[:, k] * score(u, k, rule) for k in range(5))
    torch.testing.assert_close(expected_score(u, q, rule), ref)


@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("k", [2, 3, 6])
def test_strict_properness(rule, k):
    g = torch.Generator().manual_seed(k)
    for _ in range(20):
        q = torch.rand(k, generator=g).softmax(-1) * 0.9 + 0.1 / k  # interior point
        best = expected_score(q, q, rule)
        # every perturbed forecast on the simplex scores strictly less
        d = torch.randn(200, k, generator=g)
        d = d - d.mean(-1, keepdim=True)
        scale = torch.rand(200, 1, generator=g) * 0.5 * q.min()
        u = q + scale * d / d.abs().max(-1, keepdim=True).values
        assert (expected_score(u, q.expand_as(u), rule) < best).all()
        # the gradient at u = q, projected on the simplex's tangent space, vanishes
        uq = q.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(expected_score(uq, q, rule), uq)
        projected = grad - grad.mean()
        assert projected.abs().max().item() < 1e-12


def test_log_score_eps_and_zero_prob_term():
    u = torch.tensor([1.0, 0.0])
    assert log_score(u, 1).item() == -math.inf
    assert log_score(u, 1, eps=1e-6).item() == pytest.approx(math.log(1e-6))
    # q_k = 0 contributes nothing even when u_k = 0
    assert expected_score(u, torch.tensor([1.0, 0.0]), "log").item() == 0.0
