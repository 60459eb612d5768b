"""Proposition 1 (variance decomposition of the Brier score) and its RLVR corollary.

Notation (OpenJev-RLCD, sec. 3.1): ``u`` is an ``(M, K)`` tensor of readouts, one row per
rationale ``r_i``; the decision distribution is the mixture ``p = E_r u(r)``, estimated by
the row mean (or a weighted mean with rationale probabilities ``w``). ``q`` is the
``(K,)`` outcome distribution. All scores are Brier, ``J(u, q) = 2 u.q - ||u||^2``,
higher is better.

Proposition 1 (:func:`variance_decomposition`): ``J(p, q) = E_r J(u(r), q) + E_r ||u(r) -
p||^2``. Scoring the mixture pays a bonus for rationales that disagree; the per-rationale
score does not. Corollary 1: :func:`sampled_answer_decomposition`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlcd_lab.scoring import expected_score


def _weights(u: Tensor, w: Tensor | None) -> Tensor:
    m = u.shape[-2]
    if w is None:
        return torch.full(u.shape[:-1], 1.0 / m, dtype=u.dtype, device=u.device)
    return w / w.sum(-1, keepdim=True)


def variance_decomposition(u: Tensor, q: Tensor, w: Tensor | None = None) -> dict[str, Tensor]:
    """Proposition 1 terms for readouts ``u (..., M, K)`` and outcomes ``q (..., K)``.

    ``w (..., M)`` are optional rationale weights (e.g. exact probabilities on a tabular
    model); the default is the empirical mean over the M rows. Returns tensors of shape
    ``(...)``:

    * ``mixture_score`` = ``J(p, q)`` with ``p = sum_i w_i u_i``;
    * ``mean_score`` = ``sum_i w_i J(u_i, q)``;
    * ``diversity`` = ``sum_i w_i ||u_i - p||^2`` (>= 0);

    with ``mixture_score == mean_score + diversity`` up to float rounding. Higher is
    better for the scores. OpenJev-RLCD, Proposition 1.
    """
    w = _weights(u, w)
    p = (w.unsqueeze(-1) * u).sum(-2)
    mean_score = (w * expected_score(u, q.unsqueeze(-2))).sum(-1)
    diversity = (w * ((u - p.unsqueeze(-2)) ** 2).sum(-1)).sum(-1)
    return {
        "mixture": p,
        "mixture_score": expected_score(p, q),
        "mean_score": mean_score,
        "diversity": diversity,
    }


def sampled_answer_decomposition(p: Tensor, q: Tensor) -> dict[str, Tensor]:
    """Corollary 1 terms for a mixture ``p (..., K)`` and outcomes ``q (..., K)``.

    Returns tensors of shape ``(...)``:

    * ``rlvr_reward`` = ``p.q``, the probability that a sampled answer is correct;
    * ``sampled_brier`` = ``E_{a~p, Y~q} J(e_a, Y) = 2 p.q - 1``;
    * ``gini`` = ``1 - ||p||^2``, the diversity bonus of one-hot answers;
    * ``mixture_score`` = ``J(p, q) = sampled_brier + gini``.

    Higher is better for the scores. OpenJev-RLCD, Corollary 1.

    Corollary 1: if each rationale ends in a *sampled* one-hot answer ``e_a`` with
    ``a ~ u(r)``, the expected Brier of that answer is ``E J(e_a, q) = 2 p.q - 1`` (an
    affine function of the RLVR reward ``P(a = Y) = p.q``), and adding the Gini bonus
    ``1 - ||p||^2`` gives back ``J(p, q)``: RLVR is the mixture objective without its
    diversity term.
    """
    pq = (p * q).sum(-1)
    sampled = 2.0 * pq - 1.0
    gini = 1.0 - (p * p).sum(-1)
    return {
        "rlvr_reward": pq,
        "sampled_brier": sampled,
        "gini": gini,
        "mixture_score": sampled + gini,
    }
