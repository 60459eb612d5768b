"""The source paper's findings as data: each claim with its number and its section.

OpenJev-RLCD (Qwen3-1.7B, three seeds) reports on three kinds of task, each with its own
findings; a reproduction is judged against the findings of its own kind only
(:func:`kind`). Each finding is a :class:`Claim` (a paired difference on one metric) or a
:class:`TemperatureClaim`; numbers are the paper's text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

KINDS = ("gsm8k-verify", "mmlu-pro", "chaosnli")
"""The paper's three kinds of task, in the order its results section takes them."""

KIND_NAMES = {"gsm8k-verify": "GSM8K-Verify", "mmlu-pro": "MMLU-Pro", "chaosnli": "ChaosNLI"}

EPS = {"gsm8k-verify": 0.05, "mmlu-pro": 0.2, "chaosnli": 0.05}
"""Error budget of Cov@eps per kind (Table 1's caption: 5% on GSM8K-Verify, 20% on
MMLU-Pro, whose error rates are higher)."""


def kind(task: str) -> str:
    """The paper's kind of task for a task name or task-file path (see the module
    docstring): ``verify`` and names holding ``verify`` or starting ``gsm8k`` ->
    ``gsm8k-verify``; ``aleatoric`` and names holding ``chaos`` or ``nli`` ->
    ``chaosnli``; everything else (multiple choice) -> ``mmlu-pro``.

    * ``gsm8k-verify`` (sections 5.1-5.2, Tables 1-2): reasoning is computation. The tiny
      ``verify`` task and any ``*verify*`` / ``gsm8k*`` task file.
    * ``mmlu-pro`` (sections 5.1-5.2, Table 4 in 5.4): knowledge-heavy multiple choice, where
      reasoning adds little. The tiny ``facts`` task and every other multiple-choice task
      (MMLU subjects, ARC, ...).
    * ``chaosnli`` (section 5.3, Table 3): annotator disagreement (aleatoric outcomes). The
      tiny ``aleatoric`` task and any ``*chaos*`` / ``*nli*`` task file.
    """
    name = Path(str(task)).name.lower().removesuffix(".jsonl")
    if "verify" in name or name.startswith("gsm8k"):
        return "gsm8k-verify"
    if name == "aleatoric" or "chaos" in name or "nli" in name:
        return "chaosnli"
    return "mmlu-pro"


@dataclass(frozen=True)
class Claim:
    """The paper's finding that ``pair`` differs on ``metric`` with sign ``direction``
    (+1 higher, -1 lower, 0 no difference), by ``effect`` where it gives a number
    (signed, our units), in its words ``paper``, from ``section``.

    A :class:`Claim` is a paired difference ``A - B`` on one metric with the paper's sign and,
    where the paper states it, its size (``effect``, in the units our metrics report:
    accuracy and coverage as fractions, Brier and AURC as ``rlcd_lab.metrics`` computes
    them, JSD in bits). ``pair`` is a key of a summary's ``paired`` section (``"reinforce -
    grpo"``: two-stage RLCD minus GRPO), ``"fork:<name>"`` (a Table 2 fork minus its stage-1
    checkpoint) or ``"sweep:<weight>"`` (Table 4: the end-to-end objective at that
    score-function weight minus stage 1, the weight-0 run). Numbers are the paper's text.
    """

    pair: str
    metric: str
    direction: int
    effect: float | None
    paper: str
    section: str


@dataclass(frozen=True)
class TemperatureClaim:
    """Table 1's fitted temperatures: RLCD's near ``rlcd``, the reasoning baselines'
    (GRPO, RFT+KL) near ``baselines`` (1 = calibrated as trained)."""

    rlcd: float
    baselines: float
    paper: str
    section: str


CLAIMS: dict[str, tuple[Claim, ...]] = {
    "gsm8k-verify": (
        Claim("reinforce - sft", "accuracy", +1, 0.218, "92.2% vs 70.4%", "5.1"),
        Claim("reinforce - sft", "brier", -1, -0.247, "-0.247", "5.1"),
        Claim("reinforce - grpo", "accuracy", 0, 0.004, "92.2% vs 91.8%, n.s.", "5.1"),
        Claim("reinforce - grpo", "brier", 0, -0.015, "-0.015, p = 0.09", "5.1"),
        Claim("reinforce - grpo", "aurc", -1, -0.027, "0.034 vs 0.061, p < 1e-3", "5.1"),
        Claim("reinforce - grpo", "cov_at_eps", +1, 0.62, "Cov@5% 81% vs 19%", "5.1"),
        Claim("reinforce - rft-kl", "brier", -1, -0.025, "-0.025, p < 0.01", "5.1"),
        Claim("reinforce - rft-kl", "aurc", -1, -0.041, "-0.041, p < 0.01", "5.1"),
        Claim("reinforce - rft-kl", "cov_at_eps", +1, 0.69, "Cov@5% 81% vs 12%", "5.1"),
        Claim("fork:readout-only", "brier", +1, None, "readout alone degrades", "5.2"),
        Claim("reinforce - readout-only", "accuracy", +1, 0.035, "+3.5 points", "5.2"),
        Claim("reinforce - readout-only", "brier", -1, -0.057, "-0.057, p < 1e-3", "5.2"),
        Claim("reinforce - anchor-only", "accuracy", +1, 0.044, "+4.4 points", "5.2"),
        Claim("reinforce - grpo-cont", "accuracy", 0, None, "as good as RLCD-RL", "5.2"),
        # section 3.2 states gradient dilution for training from scratch in general; its
        # Table 4 measures it on MMLU-Pro only
        Claim("sweep:*", "brier", +1, None, "every positive weight hurts", "3.2"),
        Claim("sweep:*", "accuracy", -1, None, "every positive weight hurts", "3.2"),
    ),
    "mmlu-pro": (
        Claim("reinforce - sft", "accuracy", +1, 0.053, "+5.3 points, p < 1e-3", "5.1"),
        Claim("reinforce - sft", "brier", -1, -0.053, "-0.053, p < 1e-3", "5.1"),
        Claim("reinforce - sft", "cov_at_eps", +1, 0.12, "Cov@20% 28% vs 16%", "5.1"),
        Claim("reinforce - grpo", "accuracy", +1, 0.052, "+5.2 points, p < 1e-3", "5.1"),
        Claim("reinforce - grpo", "brier", -1, -0.095, "-0.095, p < 1e-3", "5.1"),
        Claim("reinforce - grpo", "cov_at_eps", +1, 0.28, "Cov@20% 28% vs 0%", "5.1"),
        Claim("reinforce - rft-kl", "cov_at_eps", +1, 0.28, "Cov@20% 28% vs 0%", "5.1"),
        Claim("reinforce - anchor-only", "brier", -1, -0.011, "-0.011, p < 0.01", "5.2"),
        Claim("reinforce - grpo-cont", "accuracy", +1, 0.018, "+1.8 points", "5.2"),
        Claim("reinforce - grpo-cont", "brier", -1, -0.035, "-0.035, p < 1e-3", "5.2"),
        Claim("fork:grpo-cont", "brier", +1, None, "worse than its checkpoint", "5.2"),
        Claim("fork:grpo-cont", "aurc", +1, None, "worse than its checkpoint", "5.2"),
        Claim("fork:grpo-cont", "T", +1, 2.4, "T from 1.4 to 3.8", "5.2"),
        Claim("reinforce - readout-only", "brier", 0, 0.002, "+0.002, n.s.", "5.2"),
        Claim("sweep:*", "brier", +1, None, "every positive weight hurts", "5.4, Table 4"),
        Claim("sweep:*", "accuracy", -1, None, "every positive weight hurts", "5.4, Table 4"),
    ),
    "chaosnli": (
        Claim("mixture - endtoend", "jsd_table3", +1, 0.046, "0.121 vs 0.075 bits", "5.3"),
        Claim("sft - endtoend", "jsd_table3", 0, -0.001, "0.074 vs 0.075 bits", "5.3"),
    ),
}
"""Each kind's claims (``"sweep:*"`` stands for every weight of Table 4 that a
reproduction ran)."""

TEMPERATURE: dict[str, TemperatureClaim] = {
    "gsm8k-verify": TemperatureClaim(1.4, 7.0, "RLCD 1.4, GRPO and RFT about 7", "5.1"),
}
"""The fitted-temperature finding, where the paper states one (GSM8K-Verify)."""
