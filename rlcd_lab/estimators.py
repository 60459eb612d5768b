"""Surrogate losses for RLCD: unbiased gradient estimators from M rationales.

For one question ``x`` with outcome ``Y ~ q(x)``, ``M`` rationales ``r_i ~ pi_theta(. | x)``
are read as ``u_i = u_theta(x, r_i)``; every surrogate is ``loss = pathwise + sf_weight *
score_function`` with leave-one-out baselines (:func:`surrogate_terms` has the objectives,
the estimator and its references; :func:`per_rationale_surrogate`,
:func:`mixture_surrogate` and :func:`lambda_surrogate` are its three objectives).

Shapes: ``u (..., M, K)``, ``logp_r (..., M)`` (sum of the rationale's token log-probs,
with gradient), ``y`` int or ``(...)``, ``extra (..., M)``. Leading dims are independent
questions; ``reduction`` averages (``"mean"``), sums (``"sum"``) or keeps (``"none"``) them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from rlcd_lab.math.rule_names import MIXTURE_RULES, Rule
from rlcd_lab.scoring import score

Reduction = Literal["mean", "sum", "none"]


@dataclass(frozen=True)
class SurrogateTerms:
    """The two halves of an RLCD surrogate, per question (shape ``(...)``), plus stats.

    ``pathwise`` and ``score_function`` are losses (lower is better); ``rewards`` are the
    per-rationale scores ``R_i = J(u_i, y)`` and ``advantages`` the ``A_i`` multiplying
    ``log pi(r_i)``, both detached, shape ``(..., M)``.
    """

    pathwise: Tensor
    score_function: Tensor
    rewards: Tensor
    advantages: Tensor

    def loss(self, sf_weight: float = 1.0, reduction: Reduction = "mean") -> Tensor:
        """``pathwise + sf_weight * score_function``, reduced over questions."""
        return _reduce(self.pathwise + sf_weight * self.score_function, reduction)


def _reduce(x: Tensor, reduction: Reduction) -> Tensor:
    if reduction == "mean":
        return x.mean()
    if reduction == "sum":
        return x.sum()
    if reduction == "none":
        return x
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def leave_one_out_mean(x: Tensor) -> Tensor:
    """``out_i = mean_{j != i} x_j`` along the last dim (size M >= 2), shape preserved."""
    m = x.shape[-1]
    if m < 2:
        raise ValueError("a leave-one-out baseline needs at least M = 2 rationales")
    return (x.sum(-1, keepdim=True) - x) / (m - 1)


Advantage = Literal["group-std", "group-mean", "rloo"]
"""How a policy-gradient baseline turns a group's rewards into advantages
(:func:`group_advantages`)."""


def group_advantages(reward: Tensor, advantage: Advantage = "group-std") -> Tensor:
    """Advantages of ``M`` samples of one question from their rewards, along the last dim.

    ``reward (..., M)`` (detached; leading dims are independent questions, M >= 2) gives
    ``A (..., M)``; a positive ``A_i`` makes sample i more likely:

    * ``"group-std"`` (GRPO; Shao et al. 2024, "DeepSeekMath", sec. 4.1):
      ``A_i = (R_i - mean_j R_j) / (std_j R_j + 1e-4)``, ``std`` the sample standard
      deviation (divisor M - 1);
    * ``"group-mean"`` (Dr. GRPO; Liu et al. 2025, "Understanding R1-Zero-Like Training"):
      ``A_i = R_i - mean_j R_j``, no division by the group's spread, so a question whose
      samples mostly agree does not get its rare disagreement scaled up; the advantages of a
      group sum to 0;
    * ``"rloo"`` (Kool, van Hoof & Welling 2019; Ahmadian et al. 2024):
      ``A_i = R_i - mean_{j != i} R_j`` (:func:`leave_one_out_mean`), a baseline free of
      sample i, so the gradient is unbiased; equal to ``M / (M - 1)`` times the group-mean
      advantage.
    """
    if reward.shape[-1] < 2:
        raise ValueError(f"group advantages need M >= 2 samples, got {reward.shape[-1]}")
    centred = reward - reward.mean(-1, keepdim=True)
    if advantage == "group-std":
        return centred / (reward.std(-1, keepdim=True) + 1e-4)
    if advantage == "group-mean":
        return centred
    if advantage == "rloo":
        return reward - leave_one_out_mean(reward)
    raise ValueError(f"advantage must be 'group-std', 'group-mean' or 'rloo', got {advantage!r}")


def _mixture_terms(u: Tensor, a: Tensor) -> tuple[Tensor, Tensor]:
    """Pairwise estimate of ``J(p, q)`` and its per-rationale advantages.

    ``a_i = u_i[Y]`` (..., M), ``G_ij = u_i.u_j``. The estimate is
    ``J_hat = 2/M sum_i a_i - 1/(M(M-1)) sum_{i!=j} G_ij``. The part of ``M * J_hat`` that
    depends on ``r_i`` is ``f_i = 2 (a_i - mean_{j!=i} G_ij)``; its baseline is the same
    quantity for each other rationale ``k``, with the pair term averaged over
    ``j not in {i, k}`` so that it is free of ``r_i``:
    ``b_i = 2 mean_{k!=i} (a_k - mean_{j not in {i,k}} G_kj)`` (needs M >= 3).
    """
    m = u.shape[-2]
    if m < 3:
        raise ValueError("the mixture estimator needs at least M = 3 rationales")
    gram = u @ u.transpose(-1, -2)
    off = gram.sum(-1) - gram.diagonal(dim1=-2, dim2=-1)  # sum_{j != i} G_ij, (..., M)
    j_hat = 2.0 * a.mean(-1) - off.sum(-1) / (m * (m - 1))
    a_d, off_d = a.detach(), off.detach()
    f = 2.0 * (a_d - off_d / (m - 1))
    # sum_{k!=i} sum_{j not in {i,k}} G_kj = sum_{k!=i} off_k - sum_{k!=i} G_ki
    #                                      = (sum_k off_k - off_i) - off_i
    pair = (off_d.sum(-1, keepdim=True) - 2.0 * off_d) / (m - 2)
    b = 2.0 * ((a_d.sum(-1, keepdim=True) - a_d) - pair) / (m - 1)
    return j_hat, f - b


def ace_advantages(adv: Tensor, shift: Tensor, alpha: float) -> Tensor:
    """ACE, the asymmetric confidence-aware error penalty, on leave-one-out advantages.

    ``A_i' = A_i (1 + alpha max(c_i, 0))`` where ``A_i < 0``, else ``A_i``; ``c_i = log
    pi_theta(r_i | x) - log pi_ref(r_i | x)`` is rollout i's confidence shift (``shift``,
    detached). A rationale that scored worse than its group *and* that training made more
    likely than the reference did (an overconfident error, ``c_i > 0``) is pushed down
    harder; other advantages are unchanged, so ``alpha = 0`` is plain RLCD. Shapes: ``adv``,
    ``shift`` ``(..., M)``. After the ACE paper (asymmetric confidence penalties for RL with
    verifiable rewards), which scales negative GRPO advantages by a function of ``c_i``;
    here the reward is RLCD's proper score and the function is ``1 + alpha max(c, 0)``."""
    if alpha < 0:
        raise ValueError(f"the ACE weight must be >= 0, got {alpha}")
    shift = shift.detach()
    return torch.where(adv < 0, adv * (1.0 + alpha * shift.clamp_min(0.0)), adv)


def surrogate_terms(
    u: Tensor,
    logp_r: Tensor,
    y: int | Tensor,
    lam: float = 0.0,
    extra: Tensor | None = None,
    rule: Rule = "brier",
    outcome_reward: bool = True,
    ace: float = 0.0,
    shift: Tensor | None = None,
) -> SurrogateTerms:
    """Pathwise and score-function losses of the lambda objective, per question.

    Objective: ``(1 - lam) E_r J(u(r), q) + lam J(p, q) + E_r extra(r)``; higher is
    better. ``lam = 0`` is the per-rationale objective (any ``rule``), ``lam = 1`` the
    mixture objective (Brier only, M >= 3). Shapes as in the module docstring; returns
    terms of shape ``(...)``.

    ``outcome_reward=False`` removes the outcome score from the score-function term only:
    the advantages come from ``extra`` alone (zero without it), while the pathwise term,
    which trains the readout, is unchanged. This is the paper's "anchor only" control
    (OpenJev-RLCD sec. 5.2): RLCD-RL minus the outcome reward.

    ``ace > 0``: the final advantages go through ``ace_advantages`` with the confidence
    shift ``shift`` (``log pi_theta(r) - log pi_ref(r)``, required then).

    Each of ``M`` rationales ``r_i ~ pi_theta(. | x)`` is read as ``u_i = u_theta(x, r_i)``;
    the mixture's score is estimated without bias by ``J_hat = 2/M sum_i u_i[Y] -
    1/(M(M-1)) sum_{i!=j} u_i.u_j`` (Brier only). ``extra`` (a KL anchor ``-beta (log pi -
    log pi_ref)``, a length cost, ...) is a constant: it enters through the score-function
    term only. The loss is ``pathwise + sf_weight * score_function``: ``pathwise =
    -(estimate of the objective)``, differentiated through ``u`` only; ``score_function =
    -(1/M) sum_i sg(A_i) log pi(r_i)``, ``A_i`` the part of the estimate that depends on
    ``r_i`` (scaled by M) minus a leave-one-out baseline from the other rationales, so the
    baseline adds no bias. With ``sf_weight = 1`` the expected gradient equals minus the
    exact gradient of the objective (``tests/test_estimators.py`` enumerates);
    ``sf_weight = 0`` is RLCD stage 1 (pathwise only).
    References: OpenJev-RLCD sec. 3.2 and Appendix A; Kool, van Hoof & Welling (2019), "Buy
    4 REINFORCE samples, get a baseline for free!".
    """
    if u.shape[:-1] != logp_r.shape:
        raise ValueError(f"u {tuple(u.shape)} and logp_r {tuple(logp_r.shape)} disagree")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    y = torch.as_tensor(y, device=u.device, dtype=torch.long)
    if y.dim() == u.dim() - 2:
        y = y.unsqueeze(-1)
    rewards = score(u, y, rule)  # R_i, (..., M), with pathwise gradient
    objective = (1.0 - lam) * rewards.mean(-1)
    adv = (1.0 - lam) * (rewards.detach() - leave_one_out_mean(rewards.detach()))
    if lam > 0.0:
        if rule not in MIXTURE_RULES:
            raise ValueError("the mixture objective has an unbiased estimator for Brier only")
        a = u.gather(-1, y.expand(u.shape[:-1]).unsqueeze(-1)).squeeze(-1)
        j_hat, adv_mix = _mixture_terms(u, a)
        objective = objective + lam * j_hat
        adv = adv + lam * adv_mix
    if not outcome_reward:
        adv = torch.zeros_like(adv)
    if extra is not None:
        if extra.shape != logp_r.shape:
            raise ValueError(f"extra {tuple(extra.shape)} must match logp_r {tuple(logp_r.shape)}")
        extra = extra.detach()
        adv = adv + extra - leave_one_out_mean(extra)
    if ace:
        if shift is None or shift.shape != logp_r.shape:
            raise ValueError("ace > 0 needs the confidence shift, shaped like logp_r")
        adv = ace_advantages(adv, shift, ace)
    return SurrogateTerms(
        pathwise=-objective,
        score_function=-(adv * logp_r).mean(-1),
        rewards=rewards.detach(),
        advantages=adv,
    )


def per_rationale_surrogate(
    u: Tensor,
    logp_r: Tensor,
    y: int | Tensor,
    extra: Tensor | None = None,
    sf_weight: float = 1.0,
    rule: Rule = "brier",
    reduction: Reduction = "mean",
) -> Tensor:
    """RLCD per-rationale loss (lower is better) for ``E_r J(u(r), q) + E_r extra``.

    ``R_i = J(u_i, y)``; loss ``-(1/M) sum_i R_i - sf_weight (1/M) sum_i sg(A_i) logp_r_i``
    with ``A_i = (R_i + extra_i) - mean_{j!=i}(R_j + extra_j)``. ``sf_weight=0`` is
    stage 1 (calibrate); stage 2 uses ``sf_weight=c`` and a KL ``extra``.
    Shapes: see the module docstring. OpenJev-RLCD eq. (2) and Appendix A; the estimator
    is :func:`surrogate_terms`'s.
    """
    terms = surrogate_terms(u, logp_r, y, 0.0, extra, rule)
    return terms.loss(sf_weight, reduction)


def mixture_surrogate(
    u: Tensor,
    logp_r: Tensor,
    y: int | Tensor,
    extra: Tensor | None = None,
    sf_weight: float = 1.0,
    reduction: Reduction = "mean",
) -> Tensor:
    """Loss for the mixture (group) objective ``J(p, q) + E_r extra`` (Brier, M >= 3).

    Pathwise part: minus the unbiased pairwise estimate
    ``2/M sum_i u_i[y] - 1/(M(M-1)) sum_{i!=j} u_i.u_j``; score-function part: for each
    rationale, the part of that estimate depending on ``r_i`` minus a baseline free of
    ``r_i``. Lower is better. OpenJev-RLCD Appendix A, "Mixture objective".
    """
    return surrogate_terms(u, logp_r, y, 1.0, extra).loss(sf_weight, reduction)


def lambda_surrogate(
    u: Tensor,
    logp_r: Tensor,
    y: int | Tensor,
    lam: float,
    extra: Tensor | None = None,
    sf_weight: float = 1.0,
    reduction: Reduction = "mean",
) -> Tensor:
    """Loss for ``(1 - lam) E_r J(u(r), q) + lam J(p, q) + E_r extra`` (Brier).

    ``lam = 0``: per-rationale; ``lam = 1``: mixture. Lower is better.
    OpenJev-RLCD sec. 5 (ChaosNLI, lambda objective).
    """
    return surrogate_terms(u, logp_r, y, lam, extra).loss(sf_weight, reduction)


def gradient_terms(
    terms: SurrogateTerms,
    params: Iterable[Tensor],
    reduction: Reduction = "mean",
    retain_graph: bool = True,
) -> dict[str, list[Tensor]]:
    """Pathwise and score-function gradients of a surrogate, separately.

    Returns ``{"pathwise": [...], "score_function": [...]}``, one tensor per parameter
    (zeros where a parameter does not enter a term). The score-function gradient is the
    unweighted one (``sf_weight = 1``). Used to log gradient dilution: the RMS ratio of
    the two norms (OpenJev-RLCD sec. 4).
    """
    params = [p for p in params if p.requires_grad]
    out = {}
    for name, part in (("pathwise", terms.pathwise), ("score_function", terms.score_function)):
        if not part.requires_grad:  # e.g. a constant reader: no pathwise term at all
            out[name] = [torch.zeros_like(p) for p in params]
            continue
        out[name] = list(
            torch.autograd.grad(
                _reduce(part, reduction),
                params,
                retain_graph=retain_graph,
                allow_unused=True,
                materialize_grads=True,
            )
        )
    return out


def grad_norm(grads: Iterable[Tensor]) -> float:
    """Global L2 norm ``sqrt(sum ||g||^2)`` of a list of gradient tensors."""
    total = torch.zeros((), dtype=torch.float64)
    for g in grads:
        total = total + (g.detach().double() ** 2).sum().cpu()
    return float(total.sqrt())
