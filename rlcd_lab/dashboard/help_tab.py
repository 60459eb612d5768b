"""Help tab: a glossary of the dashboard's terms and the tutorial notebooks in ``notebooks/``."""

from __future__ import annotations

import re
from pathlib import Path

from rlcd_lab.files.assets import ASSETS
from rlcd_lab.math.routing import DEFAULT_CHANCE_CORRECTED_THRESHOLD, DEFAULT_THRESHOLD
from rlcd_lab.metrics import DEFAULT_EPS

NOTEBOOKS = ASSETS.parent / "notebooks"
"""The tutorial notebooks (jupytext percent-format ``.py`` files)."""

GLOSSARY: dict[str, str] = {
    "readout u": "the model's next-token distribution over the option tokens, read right "
    "after the rationale and the marker `Answer:`; nothing is sampled for the answer.",
    "single query / mixture": "the single query is the first rationale's readout (the "
    "paper's Table 1 and the eval dumps); the mixture p = (1/M) Σ u_i averages the readouts "
    "of M rationales (Proposition 1: scoring it rewards diverse rationales).",
    "T (temperature)": "temperature scaling: p = softmax(z / T) with T fitted on the dev "
    "split by minimising the NLL (T > 1 softens over-confident readouts). A base "
    "(pretrain) checkpoint was never fitted: the dashboard says **not fitted** and reads "
    "it raw.",
    "max p": "the confidence max_k p_k: for calibrated p, the probability that the answer "
    "is right.",
    "chance-corrected confidence": "(K max p − 1) / (K − 1): 0 at the uniform p, 1 for a "
    "certain one, comparable across option counts K; for a K-level score 1 − Var(p) / "
    f"Var_max. The decision server routes on it (default threshold "
    f"{DEFAULT_CHANCE_CORRECTED_THRESHOLD}, which is max p "
    f"{(1 + DEFAULT_CHANCE_CORRECTED_THRESHOLD) / 2:g} when K = 2).",
    "decision rule, threshold t": "decide automatically when the confidence is ≥ t, "
    f"escalate (to a human, a bigger model) otherwise; the dashboard's default is max p of "
    f"the single query at t = {DEFAULT_THRESHOLD}. Every tab and the server use the rules of "
    "`rlcd_lab.math.routing`.",
    "coverage, risk": "coverage: the share of items decided automatically; risk: the error "
    "rate among them.",
    "AURC": "area under the risk–coverage curve (items ranked by confidence, risk of the top "
    "k against k / N): the average error of selective prediction over all coverages; lower "
    "is better. It rewards ranking right answers above wrong ones.",
    "Cov@ε": "the largest share of the items, taken by decreasing confidence, whose error is "
    f"≤ ε (observed on labelled test items: an oracle); higher is better. ε = {DEFAULT_EPS} "
    "by default (`rlcd_lab.math.routing.DEFAULT_EPS`). *pred. Cov@ε* uses the predicted error "
    "mean(1 − confidence) instead of labels, so it trusts the calibration.",
    "ECE": "expected calibration error: items binned by max p (15 bins); the item-weighted "
    "mean of |accuracy − mean confidence| over bins; 0 for a calibrated model, lower is "
    "better.",
    "Brier, NLL": "proper scores of the whole distribution against the true label: Brier "
    "Σ_k (p_k − 1[k = y])², NLL −log p_y (nats); lower is better.",
    "dev threshold": "the lowest t whose decided *dev* items have error ≤ ε, then applied to "
    "test: what a deployment would fix beforehand.",
    "cost-optimal threshold": "with a cost c_w per wrong automated decision and c_e per "
    "escalation, answering is cheaper in expectation when (1 − max p) c_w ≤ c_e, i.e. "
    "max p ≥ 1 − c_e / c_w (Chow 1970), if the probabilities are calibrated.",
    "diversity": "(1/M) Σ ||u_i − p||²: how much the M readouts disagree; the mixture's "
    "Brier score is the mean per-rationale score plus this bonus (Proposition 1).",
}


def notebooks(folder: str | Path = NOTEBOOKS) -> list[tuple[str, str]]:
    """``(relative path, title)`` of each notebook ``NN_*.py`` in ``folder``, in order; the
    title is its first markdown heading (``# # Title`` in jupytext's percent format)."""
    folder = Path(folder)
    out = []
    for path in sorted(folder.glob("[0-9][0-9]_*.py")):
        title = path.stem
        for line in path.read_text(encoding="utf-8").splitlines()[:60]:
            hit = re.match(r"#\s+#\s+(.+)", line)
            if hit:
                title = hit.group(1).strip()
                break
        out.append((f"{folder.name}/{path.name}", title))
    return out


def help_markdown(folder: str | Path = NOTEBOOKS) -> str:
    """The Help tab: the glossary, then the notebooks (paths relative to the repository)."""
    lines = ["## Glossary", ""]
    lines += [f"- **{term}**: {text}" for term, text in GLOSSARY.items()]
    found = notebooks(folder)
    lines += ["", "## Notebooks", ""]
    if found:
        lines.append(
            "Tutorials in the repository's `notebooks/` folder, one jupytext `.py` file "
            "each: after `make app`, `.venv/bin/jupyter lab notebooks/` opens each file as "
            "a notebook, and saving writes the `.py` back "
            "(`RLCD_SCALE=ci` in front: under a minute each). "
            "`python notebooks/<name>.py` runs one as a script: its printed numbers and "
            "tables, no figures (`PLOTLY_RENDERER=browser` in front opens them in a browser):"
        )
        lines.append("")
        lines += [f"- `{path}`: {title}" for path, title in found]
    else:
        lines.append("No notebooks found next to this installation.")
    return "\n".join(lines)
