"""What a deadline must leave time for: the measured cost of a reader's forward passes.

:class:`PassCosts` fits the seconds of each kind of pass (direct readouts, rationale
scoring, a sampler's prompt pass) to the tokens it reads; :mod:`rlcd_lab.decide.answering`
budgets a request's readouts with it so that a deadline covers them too.
:func:`read_tokens` and :func:`score_tokens` count the tokens a pass reads.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Sequence

import numpy as np

from rlcd_lab.reader import Reader
from rlcd_lab.reader.sampling import SHARE_MIN_PROMPT, common_prefix_len

__all__ = [
    "PassCosts",
    "pass_costs",
    "read_tokens",
    "score_tokens",
]


class PassCosts:
    """Measured seconds of a reader's forward passes without a cache, by kind (``direct``
    readouts, rationale ``score`` passes, a sampler's ``prompt`` pass), to budget the
    readouts that must finish before a deadline.

    A pass over ``n`` tokens (its rows times its padded width) is modelled as ``t = a + b
    n`` (``n``: the tokens it reads, a prompt it shares once), fitted by least squares with
    ``a, b >= 0`` on the last ``keep`` passes of its kind; :meth:`estimate` is ``safety``
    times the larger of that and the cheapest of those passes. While no pass of a kind was
    measured, its estimate comes from the other kinds' passes times ``unmeasured`` more (a
    scoring pass computes the logits of every rationale token, so it costs more per token
    than a direct readout); 0 before any pass."""

    def __init__(self, keep: int = 32, safety: float = 1.5, unmeasured: float = 3.0) -> None:
        self.passes: dict[str, deque[tuple[int, float]]] = {}
        self.keep, self.safety, self.unmeasured = keep, safety, unmeasured

    def add(self, kind: str, tokens: int, seconds: float) -> None:
        """Record a pass of ``kind`` over ``tokens`` tokens that took ``seconds``."""
        if tokens > 0 and seconds >= 0:
            seen = self.passes.setdefault(kind, deque(maxlen=self.keep))
            seen.append((int(tokens), float(seconds)))

    def _seen(self, kind: str) -> list[tuple[int, float]]:
        return list(self.passes.get(kind) or [p for ps in self.passes.values() for p in ps])

    def fit(self, kind: str) -> tuple[float, float]:
        """``(a, b)``: seconds per pass and per token of ``kind`` (least squares, >= 0)."""
        seen = self._seen(kind)
        n = np.array([p[0] for p in seen], dtype=float)
        t = np.array([p[1] for p in seen], dtype=float)
        if len(n) == 0:
            return 0.0, 0.0
        if np.ptp(n) == 0:  # one size seen: all of it per token (longer passes: more)
            return 0.0, float(t.mean() / n[0])
        b, a = (float(v) for v in np.polyfit(n, t, 1))
        if b < 0:
            return float(t.mean()), 0.0
        if a < 0:
            return 0.0, float(n @ t / (n @ n))
        return a, b

    def estimate(self, kind: str, tokens: int) -> float:
        """Seconds a pass of ``kind`` over ``tokens`` tokens may take (0 for none, or
        before any pass was measured)."""
        seen = self._seen(kind)
        if tokens <= 0 or not seen:
            return 0.0
        a, b = self.fit(kind)
        factor = self.safety * (1.0 if self.passes.get(kind) else self.unmeasured)
        return factor * max(a + b * tokens, min(t for _, t in seen))


_COSTS: weakref.WeakKeyDictionary[Reader, PassCosts] = weakref.WeakKeyDictionary()


def pass_costs(reader: Reader) -> PassCosts:
    """The measured pass costs of ``reader`` (one :class:`PassCosts` per reader, kept as
    long as the reader lives)."""
    costs = _COSTS.get(reader)
    if costs is None:
        costs = _COSTS[reader] = PassCosts()
    return costs


def read_tokens(seqs: Sequence[Sequence[int]], share_prefix: bool = True) -> int:
    """The tokens a direct pass over one request's prompts ``seqs`` reads: their common
    prefix once and each one's rest (``share_prefix`` and more than one), else every
    prompt padded to the longest."""
    if share_prefix and len(seqs) > 1:
        lcp = common_prefix_len([list(q) for q in seqs])
        return lcp + sum(len(q) - lcp for q in seqs)
    return len(seqs) * max((len(q) for q in seqs), default=0)


def score_tokens(prompts: int, m: int, prompt_width: int, rest: int) -> int:
    """The tokens a scoring pass reads over ``prompts * m`` rows of ``prompt_width`` prompt
    tokens and ``rest`` more: the prompts once when ``Reader.score`` shares them (``m >=
    2`` and prompts of :data:`~rlcd_lab.reader.sampling.SHARE_MIN_PROMPT` tokens or more)."""
    if m >= 2 and prompt_width >= SHARE_MIN_PROMPT:
        return prompts * prompt_width + prompts * m * rest
    return prompts * m * (prompt_width + rest)
