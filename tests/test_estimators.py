"""RLCD surrogates: expected gradients equal exact gradients, by exact enumeration.

Tabular model: R rationale types with ``pi = softmax(a)`` and readouts
``u(r) = softmax(B[r])``. We enumerate all R^M rationale tuples and all K outcomes,
weight each surrogate by its probability ``prod_i pi(r_i) * q(y)``, and compare the
gradient of that expectation with minus the exact gradient of the objective.
"""

import itertools

import pytest
import torch

from rlcd_lab.estimators import (
    grad_norm,
    gradient_terms,
    group_advantages,
    lambda_surrogate,
    leave_one_out_mean,
    mixture_surrogate,
    per_rationale_surrogate,
    surrogate_terms,
)
from rlcd_lab.scoring import expected_score

pytestmark = pytest.mark.usefixtures("float64")  # exactness checks run in float64


def tabular(r, k, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(r, generator=g).requires_grad_(True)
    b = (2 * torch.randn(r, k, generator=g)).requires_grad_(True)
    q = torch.rand(k, generator=g).softmax(-1)
    s = torch.randn(r, generator=g)  # per-rationale shaping reward table
    return a, b, q, s


def exact_objective(a, b, q, lam, s, rule="brier"):
    pi, u = a.softmax(-1), b.softmax(-1)
    per = (pi * expected_score(u, q, rule)).sum()
    obj = (1 - lam) * per
    if lam > 0:
        obj = obj + lam * expected_score(pi @ u, q)
    if s is not None:
        obj = obj + (pi * s).sum()
    return obj


def enumerated_batch(a, b, q, m):
    """Every (rationale tuple, outcome) pair as a batch, with its probability."""
    r, k = b.shape
    tuples = torch.tensor(list(itertools.product(range(r), repeat=m)))  # (R^M, M)
    tuples = tuples.repeat_interleave(k, 0)  # (R^M K, M)
    y = torch.arange(k).repeat(r**m)  # (R^M K,)
    logpi = a.log_softmax(-1)
    weight = (logpi[tuples].sum(-1).exp() * q[y]).detach()
    return b.softmax(-1)[tuples], logpi[tuples], y, tuples, weight


def expected_grad(loss_per_item, weight, params):
    return torch.autograd.grad((weight * loss_per_item).sum(), params)


CASES = [(2, 2, 3), (3, 3, 3), (4, 4, 3), (3, 2, 4), (4, 4, 4), (2, 3, 4)]


@pytest.mark.parametrize("r,k,m", CASES)
@pytest.mark.parametrize("lam", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("shaped", [False, True])
def test_expected_gradient_is_exact(r, k, m, lam, shaped):
    a, b, q, s = tabular(r, k, seed=100 * r + 10 * k + m)
    s = s if shaped else None
    u, logp, y, tuples, w = enumerated_batch(a, b, q, m)
    extra = s[tuples] if shaped else None
    loss = lambda_surrogate(u, logp, y, lam, extra=extra, reduction="none")
    got = expected_grad(loss, w, (a, b))
    want = torch.autograd.grad(-exact_objective(a, b, q, lam, s), (a, b))
    for g_, w_ in zip(got, want, strict=True):
        assert (g_ - w_).abs().max().item() < 1e-12
    # the gradient is not trivially zero, so the comparison has teeth
    assert max(w_.abs().max().item() for w_ in want) > 1e-3


@pytest.mark.parametrize("r,k,m", [(3, 3, 2), (4, 4, 3), (3, 4, 4)])
@pytest.mark.parametrize("rule", ["brier", "log", "spherical"])
def test_per_rationale_exact_for_every_rule(r, k, m, rule):
    a, b, q, s = tabular(r, k, seed=7 + m)
    u, logp, y, tuples, w = enumerated_batch(a, b, q, m)
    loss = per_rationale_surrogate(u, logp, y, extra=s[tuples], rule=rule, reduction="none")
    got = expected_grad(loss, w, (a, b))
    want = torch.autograd.grad(-exact_objective(a, b, q, 0.0, s, rule), (a, b))
    for g_, w_ in zip(got, want, strict=True):
        assert (g_ - w_).abs().max().item() < 1e-12


def test_named_surrogates_are_the_lambda_endpoints():
    a, b, q, s = tabular(3, 3, seed=3)
    u, logp, y, tuples, _ = enumerated_batch(a, b, q, 4)
    ex = s[tuples]
    torch.testing.assert_close(
        per_rationale_surrogate(u, logp, y, ex, sf_weight=0.3),
        lambda_surrogate(u, logp, y, 0.0, ex, sf_weight=0.3),
    )
    torch.testing.assert_close(
        mixture_surrogate(u, logp, y, ex, sf_weight=0.3),
        lambda_surrogate(u, logp, y, 1.0, ex, sf_weight=0.3),
    )


@pytest.mark.parametrize("lam", [0.0, 1.0])
def test_pathwise_estimate_is_unbiased_and_stage1_has_no_policy_gradient(lam):
    a, b, q, _ = tabular(3, 3, seed=11)
    u, logp, y, _, w = enumerated_batch(a, b, q, 3)
    terms = surrogate_terms(u, logp, y, lam)
    # E[-pathwise] is the objective's value itself
    value = (w * -terms.pathwise).sum()
    assert abs(value - exact_objective(a, b, q, lam, None)).item() < 1e-12
    # stage 1 (sf_weight = 0): no gradient reaches the rationale policy a
    ga, gb = expected_grad(terms.loss(0.0, "none"), w, (a, b))
    assert ga.abs().max().item() == 0.0
    assert gb.abs().max().item() > 1e-3


def test_hand_worked_advantages_m3():
    # u rows: e_0, e_1, uniform; y = 0 -> R = [1, -1, 2*0.5 - 0.5 = 0.5]
    u = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    logp = torch.zeros(3, requires_grad=True)
    t = surrogate_terms(u, logp, 0)
    torch.testing.assert_close(t.rewards, torch.tensor([1.0, -1.0, 0.5]))
    # A_i = R_i - mean of the other two: [1 - (-0.25), -1 - 0.75, 0.5 - 0]
    torch.testing.assert_close(t.advantages, torch.tensor([1.25, -1.75, 0.5]))
    # mixture: a = [1, 0, .5]; G offdiag row sums: [0 + .5, 0 + .5, .5 + .5] = [.5, .5, 1]
    # f_i = 2 (a_i - off_i / 2) = [1.5, -0.5, 0]
    # b_i = 2/2 * ((sum_a - a_i) - (sum_off - 2 off_i) / 1): sum_a = 1.5, sum_off = 2
    #     = [(0.5 - 1), (1.5 - 1), (1 - 0)] = [-0.5, 0.5, 1]
    tm = surrogate_terms(u, logp, 0, lam=1.0)
    torch.testing.assert_close(tm.advantages, torch.tensor([2.0, -1.0, -1.0]))
    # J_hat = 2/3 * sum(a) - sum(off) / (3 * 2) = 2/3 * 1.5 - 2/6 = 2/3
    torch.testing.assert_close(-tm.pathwise, torch.tensor(2 / 3))


def test_without_outcome_reward_only_the_shaping_reward_is_reinforced():
    # the anchor-only control: pathwise unchanged, advantages from `extra` alone
    u = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]], requires_grad=True)
    logp = torch.tensor([-1.0, -2.0, -3.0], requires_grad=True)
    extra = torch.tensor([0.3, 0.0, -0.3])
    full = surrogate_terms(u, logp, 0, extra=extra)
    anchor = surrogate_terms(u, logp, 0, extra=extra, outcome_reward=False)
    torch.testing.assert_close(anchor.pathwise, full.pathwise)
    # A_i = e_i - mean of the other two: [0.3 - (-0.15), 0 - 0, -0.3 - 0.15]
    torch.testing.assert_close(anchor.advantages, torch.tensor([0.45, 0.0, -0.45]))
    # score function -(1/3) sum A_i logp_i = -(0.45 * -1 + 0 - 0.45 * -3) / 3 = -0.3
    torch.testing.assert_close(anchor.score_function, torch.tensor(-0.3))
    (g,) = torch.autograd.grad(anchor.pathwise, u)
    assert g.abs().sum() > 0  # the readout is still trained
    bare = surrogate_terms(u, logp, 0, outcome_reward=False)
    assert float(bare.score_function.detach()) == 0.0


def test_gradient_terms_split_and_norms():
    a, b, q, s = tabular(3, 4, seed=5)
    u, logp, y, tuples, _ = enumerated_batch(a, b, q, 3)
    terms = surrogate_terms(u, logp, y, 0.0, s[tuples])
    parts = gradient_terms(terms, [a, b])
    total = torch.autograd.grad(terms.loss(1.0), (a, b))
    for p_, s_, t_ in zip(parts["pathwise"], parts["score_function"], total, strict=True):
        torch.testing.assert_close(p_ + s_, t_)
    assert parts["pathwise"][0].abs().max().item() == 0.0  # no pathwise gradient on pi
    want = torch.sqrt(sum((g**2).sum() for g in parts["score_function"])).item()
    assert grad_norm(parts["score_function"]) == pytest.approx(want)


def test_shapes_batching_and_errors():
    g = torch.Generator().manual_seed(0)
    u = torch.rand(5, 4, 3, generator=g).softmax(-1)
    logp = torch.randn(5, 4, generator=g)
    y = torch.randint(0, 3, (5,), generator=g)
    batched = per_rationale_surrogate(u, logp, y, reduction="none")
    single = torch.stack([per_rationale_surrogate(u[i], logp[i], int(y[i])) for i in range(5)])
    torch.testing.assert_close(batched, single)
    torch.testing.assert_close(
        leave_one_out_mean(torch.tensor([1.0, 2.0, 6.0])), torch.tensor([4.0, 3.5, 1.5])
    )
    with pytest.raises(ValueError, match="at least M = 3"):
        mixture_surrogate(u[:, :2], logp[:, :2], y)
    with pytest.raises(ValueError, match="at least M = 2"):
        per_rationale_surrogate(u[:, :1], logp[:, :1], y)
    with pytest.raises(ValueError, match="disagree"):
        per_rationale_surrogate(u, logp[:, :3], y)
    with pytest.raises(ValueError, match="Brier only"):
        surrogate_terms(u, logp, y, lam=0.5, rule="log")
    with pytest.raises(ValueError, match="lam"):
        lambda_surrogate(u, logp, y, lam=1.5)


def test_ace_scales_only_negative_advantages_by_the_confidence_shift():
    """Hand-computed: Brier J(u, y=0) = 2 u_0 - |u|^2 = (0.98, 0.28, 0.82); leave-one-out
    advantages (0.43, -0.62, 0.19); with c = (0.5, 2.0, -1.0) and alpha = 0.5 only the
    negative one changes: -0.62 (1 + 0.5 * 2) = -1.24. The score-function gradient with
    respect to log pi(r_i) is -A_i' / M."""
    from rlcd_lab.estimators import surrogate_terms

    u = torch.tensor([[0.9, 0.1], [0.4, 0.6], [0.7, 0.3]], dtype=torch.float64)
    logp = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    shift = torch.tensor([0.5, 2.0, -1.0], dtype=torch.float64)
    plain = surrogate_terms(u, logp, 0)
    torch.testing.assert_close(plain.advantages, torch.tensor([0.43, -0.62, 0.19]).double())
    ace = surrogate_terms(u, logp, 0, ace=0.5, shift=shift)
    torch.testing.assert_close(ace.advantages, torch.tensor([0.43, -1.24, 0.19]).double())
    ace.score_function.backward()
    torch.testing.assert_close(logp.grad, -ace.advantages / 3)
    off = surrogate_terms(u, logp, 0, ace=0.0, shift=shift)
    assert torch.equal(off.advantages, plain.advantages)
    with pytest.raises(ValueError, match="needs the confidence shift"):
        surrogate_terms(u, logp, 0, ace=0.5)


def _binary_groups(m):
    """Every reward vector of a group of ``m`` binary outcomes, shape ``(2^m, m)``."""
    return torch.tensor(list(itertools.product((0.0, 1.0), repeat=m)))


def test_group_advantages_by_hand_and_the_identities_between_them():
    # one success in four: mean 1/4, sample s.d. sqrt((3/4)^2 + 3 (1/4)^2) / 3) = 1/2
    r = torch.tensor([1.0, 0.0, 0.0, 0.0])
    centred = torch.tensor([0.75, -0.25, -0.25, -0.25])
    torch.testing.assert_close(group_advantages(r, "group-std"), centred / (0.5 + 1e-4))
    torch.testing.assert_close(group_advantages(r, "group-mean"), centred)
    # leave one out: 1 - 0, 0 - 1/3
    torch.testing.assert_close(
        group_advantages(r, "rloo"), torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3])
    )
    g = torch.Generator().manual_seed(0)
    for m in (2, 3, 4, 5):
        rewards = torch.cat([_binary_groups(m), torch.rand(7, m, generator=g)])
        mean_adv = group_advantages(rewards, "group-mean")
        # Dr. GRPO: zero-sum per group; RLOO = M / (M - 1) x Dr. GRPO;
        # GRPO = Dr. GRPO / (s.d. + 1e-4)
        torch.testing.assert_close(mean_adv.sum(-1), torch.zeros(len(rewards)))
        torch.testing.assert_close(group_advantages(rewards, "rloo"), m / (m - 1) * mean_adv)
        sd = rewards.std(-1, keepdim=True)
        torch.testing.assert_close(group_advantages(rewards, "group-std"), mean_adv / (sd + 1e-4))
        # GRPO's default keeps the formula its loop used inline, bit for bit (float32)
        r32 = rewards.float()
        old = (r32 - r32.mean(1, keepdim=True)) / (r32.std(1, keepdim=True) + 1e-4)
        assert torch.equal(group_advantages(r32), old)
    # a unanimous group teaches nothing under any of them
    for kind in ("group-std", "group-mean", "rloo"):
        assert torch.equal(group_advantages(torch.ones(2, 4), kind), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="advantage must be .* got 'std'"):
        group_advantages(r, "std")
    with pytest.raises(ValueError, match="M >= 2 samples, got 1"):
        group_advantages(torch.ones(3, 1), "rloo")


@pytest.mark.parametrize("m", [2, 3, 4])
def test_rloo_is_unbiased_and_dr_grpo_is_scaled_by_m_minus_1_over_m(m):
    """Expected policy gradient ``E[(1/M) sum_i A_i grad log pi(r_i)]`` over all R^M
    tuples of a tabular policy with a fixed reward per rationale type: RLOO's is exactly
    ``grad E_pi R``; Dr. GRPO's subtracts each sample's own share of the mean, so it is
    ``(M - 1) / M`` of that; both point the same way."""
    g = torch.Generator().manual_seed(m)
    a = torch.randn(3, generator=g).requires_grad_(True)
    reward = torch.tensor([1.0, 0.0, 0.4])
    exact = torch.autograd.grad((torch.softmax(a, 0) * reward).sum(), a)[0]
    for kind, factor in (("rloo", 1.0), ("group-mean", (m - 1) / m)):
        logp = torch.log_softmax(a, 0)
        total = torch.zeros(())
        for tup in itertools.product(range(3), repeat=m):
            idx = torch.tensor(tup)
            prob = logp[idx].sum().exp().detach()
            adv = group_advantages(reward[idx], kind)
            total = total + prob * (adv * logp[idx]).mean()
        got = torch.autograd.grad(total, a)[0]
        torch.testing.assert_close(got, factor * exact)
