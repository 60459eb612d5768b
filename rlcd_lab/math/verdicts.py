"""The verdict rules on the paper's claims, and how a paired difference is written.

A claim of the paper (:mod:`rlcd_lab.math.paper`) is judged on our paired difference and its
95% CI by :func:`verdict` (reproduces, smaller than the paper's, not measurable, opposite
direction; a claim of no difference is consistent, not detected or differs; its kind:
:func:`verdict_head`), the fitted-T claim by :func:`temperature_verdict`, and
:func:`fmt_diff` writes the difference as the tables show it. Standard library only, so the
reports (:mod:`rlcd_lab.reports.report`), the difficulty map
(:mod:`rlcd_lab.reports.difficulty`) and the notebooks share one set of rules.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

SIGNIFICANCE = 0.05
"""A difference counts when its 95% CI excludes 0 *and* its sign-flip test gives
p < 0.05: both must agree (a percentile bootstrap of a step-function statistic such as
Cov@eps can exclude 0 where the test does not reject)."""

T_NEAR, T_FAR = 2.0, 3.0
"""Fitted-T verdict: "near 1" is within a factor ``T_NEAR`` of 1 (the paper's RLCD: 1.4),
"far from 1" a factor ``T_FAR`` or more (the paper's GRPO and RFT: about 7)."""


def verdict(diff: Mapping[str, float], direction: int, effect: float | None = None) -> str:
    """The verdict on a paired difference ``{"ci_low", "ci_high"[, "p"]}`` for a claim
    of sign ``direction`` (+1 higher, -1 lower, 0 no difference) and size ``effect`` (the
    paper's difference, or None where it gives no number).

    Significant: the CI excludes 0 and p < :data:`SIGNIFICANCE` (p, when given). Then
    *opposite direction* on the wrong side; on the paper's side *reproduces* when the CI
    holds ``effect``, *smaller than the paper's* when the CI lies between 0 and it, and
    *reproduces, larger than the paper's* beyond it. Not significant: *smaller than the
    paper's* when the CI excludes ``effect``, else *not measurable*. A claim of no
    difference *differs* when significant; not significant, it is *consistent* when the
    CI's half-width is at most ``|effect|`` (the CI would have seen a difference the size
    of the paper's), else *no difference detected (CI half-width x)*: the CI is too wide
    to tell no difference from the paper's (or where the paper gives no number, any)."""
    lo, hi, p = diff["ci_low"], diff["ci_high"], diff.get("p")
    sig = (lo > 0 or hi < 0) and (p is None or p < SIGNIFICANCE)
    if direction == 0:
        if sig:
            return "differs: the paper finds no difference"
        half = (hi - lo) / 2
        if effect is not None and half <= abs(effect):
            return f"consistent: no difference, CI half-width {half:.3f} within the paper's effect"
        head = f"no difference detected (CI half-width {half:.3f})"
        if effect is None:
            return f"{head}: the paper gives no size to compare it with"
        return f"{head}: wider than the paper's {effect:+.3f}"
    paper_side = (lo > 0) == (direction > 0)
    if sig and not paper_side:
        return "opposite direction"
    held = effect is not None and lo <= effect <= hi
    beyond = effect is not None and (effect < lo if effect < 0 else effect > hi)
    if sig:
        if effect is None or held:
            return "reproduces"
        if beyond:
            return "smaller than the paper's: same direction, CI excludes its effect"
        return "reproduces, larger than the paper's"
    if beyond:
        return "smaller than the paper's: not significant, CI excludes its effect"
    if held:
        return "not measurable: not significant, CI holds the paper's effect"
    return "not measurable: not significant"


def verdict_head(v: str) -> str:
    """A verdict's kind, what two bootstrap draws must share to read the same: its first
    clause without a parenthesis (``"no difference detected (CI half-width 0.019): ..."``
    -> ``"no difference detected"``; a :func:`verdict` or a borderline-marked one)."""
    return v.split(":")[0].split(" (")[0]


def temperature_verdict(t_rlcd: float, t_baselines: Sequence[float]) -> str:
    """The fitted-T verdict, ordering and size (means over seeds): *reproduces* when
    RLCD's T is the closest to 1 (on a log scale), near 1 (:data:`T_NEAR`) and every
    baseline's far from it (:data:`T_FAR`); *smaller than the paper's* when RLCD is
    closest but not near 1, or near 1 beside a baseline that is not far; *opposite
    direction* when a baseline is as close to 1 or closer."""
    dist = abs(math.log(t_rlcd))
    others = [abs(math.log(t)) for t in t_baselines]
    if not others or dist >= min(others) - 1e-9:
        return "opposite direction: a baseline's T is as close to 1 or closer"
    if dist > math.log(T_NEAR):
        return f"smaller than the paper's: RLCD's T is closest to 1 but not within {T_NEAR:g}x"
    if min(others) < math.log(T_FAR):
        return f"smaller than the paper's: RLCD's T is near 1, a baseline's within {T_FAR:g}x"
    return "reproduces"


def _p(p: float) -> str:
    return f"{p:.2g}"


def fmt_diff(d: Mapping[str, float]) -> str:
    """``+0.012 [-0.003, +0.020], p = 0.04`` (no p for intervals over seeds)."""
    ci = f"{d['diff']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"
    return ci if d.get("p") is None else f"{ci}, p = {_p(d['p'])}"


def fmt_seeds(d: Mapping, short: bool = False) -> str:
    """The test across training seeds and the minimal detectable effect of a paired entry
    (``rlcd_lab.reports.results``): ``seeds -0.037 / -0.005 / -0.059: t p = 0.16, sign-flip
    p = 0.25; MDE 0.054`` (``short``: ``3 seeds: t p = 0.16; MDE 0.054``). ``t p`` is "-" where
    the per-seed differences have no spread (one seed, or all equal)."""
    s = d["seeds"]
    t = "-" if s.get("p_t") is None else _p(s["p_t"])
    mde = f"; MDE {d['mde']:.3f}" if d.get("mde") is not None else ""
    if short:
        return f"{len(s['diffs'])} seeds: t p = {t}{mde}"
    diffs = " / ".join(f"{x:+.3f}" for x in s["diffs"])
    return f"seeds {diffs}: t p = {t}, sign-flip p = {_p(s['p_sign'])}{mde}"
