"""The tutorials' exercises: the checks their answer cells call, and how their solution
cells are tagged.

Every tutorial (``notebooks/NN_*.py``, :data:`NOTEBOOK_GLOB`) ends with exercises and an
answer cell that calls one ``check_*`` function per exercise (:data:`CHECKS`), as
``exercises.check_...``; each returns a :class:`Feedback` (what a check may and may not
do). Solution cells, tagged ``solution`` (:func:`is_solution`), are kept in
:data:`SOLUTIONS_DIR` and appended by :func:`with_solutions`; :func:`assert_correct` serves
the grader assignments (:mod:`rlcd_lab.classroom.assignments`). Torch and the package's
heavier modules are imported inside the checks that need them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlcd_lab.files.rundir import LOG, config_file, eval_file, final_dir, log_path, read_config

SOLUTION_TAG = "solution"
"""Cell tag of the solution cells (a student copy, :func:`rlcd_lab.classroom.student.write_student`,
drops them)."""
NOTEBOOK_GLOB = "[0-9][0-9]_*.py"
"""The tutorial notebooks in their directory (``01_...py`` to ``06_...py``)."""
SOLUTIONS_DIR = "instructors/solutions"
"""Where the tutorials' solution cells are kept, from the repository's root: one jupytext
file per tutorial, named as it, holding only its ``solution``-tagged cells (the tutorials
in ``notebooks/``, which students open, hold none)."""


def is_solution(cell: Mapping[str, Any]) -> bool:
    """Whether a notebook cell carries the ``solution`` tag."""
    return SOLUTION_TAG in (cell.get("metadata", {}).get("tags") or [])


def with_solutions(path: str | Path, solutions_dir: str | Path = SOLUTIONS_DIR) -> Any:
    """The full tutorial: the notebook at ``path`` (a jupytext ``nbformat`` notebook) with
    the cells of ``<solutions_dir>/<its file name>`` appended (the solutions come last, as
    the notebook's answer cell needs them). Raises ``FileNotFoundError`` when that file is
    missing and ``ValueError`` when a cell of it is not tagged ``solution`` or one of the
    notebook is."""
    import jupytext

    path = Path(path)
    source = Path(solutions_dir) / path.name
    if not source.is_file():
        raise FileNotFoundError(f"no solutions for {path.name}: {source} is missing")
    nb, solutions = jupytext.read(path), jupytext.read(source).cells
    if any(is_solution(c) for c in nb.cells) or not all(is_solution(c) for c in solutions):
        raise ValueError(
            f"{path} must hold no solution cell and {source} only {SOLUTION_TAG}-tagged ones"
        )
    nb.cells += solutions
    return nb


# ------------------------------------------------------------------------------ feedback
@dataclass(frozen=True, repr=False)
class Feedback:
    """What a check says about an answer: ``ok`` is ``True`` (right), ``False`` (wrong) or
    ``None`` (not answered yet, or nothing to check against); ``message`` says why, with
    a hint when wrong. ``str()`` and ``repr()`` are the message.

    The checks compute the expected answer themselves, from the same library functions
    and files the notebook uses (shipped runs, a run trained in the notebook, the
    notebook's own arrays), so they stay right when the data change. They never raise for
    a missing or wrong answer (the message gives a hint, not the answer), so that
    ``print(check(...))`` in a cell shows it and "Run All" on a student copy runs through.
    No exercise can be passed by a guess: each asks for at least one finite number that
    needs the computation (from the notebook's data, or derived from the question's
    numbers), compared with a tolerance, never a constant, an infinity or one option of a
    two-way choice alone.
    """

    ok: bool | None
    message: str

    def __str__(self) -> str:
        return self.message

    __repr__ = __str__


NOT_ANSWERED = "not answered yet: replace None with your answer and run the cell again"


def assert_correct(feedback: Feedback) -> None:
    """Raise ``AssertionError`` with the check's message unless ``feedback.ok`` is ``True``.

    For the graded test cells of nbgrader and otter-grader assignments
    (:mod:`rlcd_lab.classroom.assignments`): a grader counts a test cell that raises as failed, so
    ``exercises.assert_correct(exercises.check_...(answer))`` earns its points only for a
    right answer. A wrong answer fails with the hint (``not yet: ...``), a missing one with
    ``not answered yet: ...``, and ``nothing to check: ...`` (the notebook produced nothing
    to compare with at this scale) fails too: there is nothing to give points for. Raises
    ``TypeError`` for anything that is not a :class:`Feedback`.
    """
    if not isinstance(feedback, Feedback):
        raise TypeError(f"assert_correct takes a check's Feedback, not {type(feedback).__name__}")
    if feedback.ok is not True:
        raise AssertionError(feedback.message)


def _right(text: str) -> Feedback:
    return Feedback(True, f"correct: {text}")


def _wrong(text: str) -> Feedback:
    return Feedback(False, f"not yet: {text}")


def _nothing(text: str) -> Feedback:
    return Feedback(None, f"nothing to check: {text}")


def _missing(*answers: Any) -> bool:
    return any(a is None or a is Ellipsis for a in answers)


def _number(x: Any) -> float | None:
    """``x`` as a finite float, else None (a string, a list, NaN, a bool)."""
    if _bool(x) is not None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _close(x: float, expected: float, tol: float) -> bool:
    """Whether ``x`` is within ``tol`` (plus 1e-9 relative) of ``expected``; an infinite
    ``expected`` matches only itself (no exercise expects one: an answer of ``inf`` could
    be typed without computing anything)."""
    if not math.isfinite(expected):
        return x == expected
    return abs(x - expected) <= tol + 1e-9 * abs(expected)


def _per_task_wrong(
    answers: Any, expected: Mapping[str, float], what: str, hint: str, tol: float = 1e-3
) -> Feedback | None:
    """The feedback for ``answers`` (``{task: number}``) that miss ``expected`` (within
    ``tol``): a dict of the wrong tasks, or the first task off (``"{task}: {hint}"``);
    None when every task's number is right."""
    if not isinstance(answers, Mapping) or set(answers) != set(expected):
        return _wrong(f"give a dict with one {what} per task: {sorted(expected)}")
    for task, value in expected.items():
        x = _number(answers[task])
        if x is None or not _close(x, value, tol):
            return _wrong(f"{task}: {hint}")
    return None


def _bool(x: Any) -> bool | None:
    """``x`` as a bool when it is one (Python's or numpy's, as ``min(gaps) >= 0`` gives),
    else None."""
    if isinstance(x, bool | np.bool_):
        return bool(x)
    return None


# -------------------------------------------------------- notebook 1: proper scores, Prop 1
def check_twice_linear_score(best_report: Any, gain: Any, q1: float = 0.7) -> Feedback:
    """Notebook 1, exercise 1: the score ``J(u, y) = 2 u_y``.

    ``best_report``: the report ``p = u_1`` that maximises its expected score when
    ``P(Y = 1) = q1``; ``gain``: how much more that report expects to score than the
    truthful report ``p = q1`` (a proper rule gains nothing by misreporting). Expected
    values: the argmax of ``2 E_{Y~q} u_Y``
    (:func:`rlcd_lab.classroom.tutorial.binary_expected_scores`
    of the linear rule, doubled) on a 1001-point grid, and the difference of that curve
    between the argmax and ``q1`` (tolerances 0.01 and 0.002).
    """
    if _missing(best_report, gain):
        return Feedback(None, NOT_ANSWERED)
    from rlcd_lab.classroom import tutorial

    grid = np.linspace(0.0, 1.0, 1001)
    curve = 2 * tutorial.binary_expected_scores(q1, grid, "linear")
    best = int(np.argmax(curve))
    expected = float(grid[best])
    exp_gain = float(curve[best] - 2 * tutorial.binary_expected_scores(q1, [q1], "linear")[0])
    p, g = _number(best_report), _number(gain)
    if p is None or g is None:
        return _wrong("give best_report as a number in [0, 1] and the gain as a number")
    if not _close(p, expected, 0.01):
        return _wrong(
            f"p = {p:g} is not the best report for q_1 = {q1:g}. Hint: the expected score "
            "2 u.q is linear in p; where on [0, 1] is a linear function largest?"
        )
    if not _close(g, exp_gain, 0.002):
        return _wrong(
            f"the best report p = {p:g} is right, but not the gain. Hint: E[2 u_Y] = "
            f"2 (q_1 p + (1 - q_1)(1 - p)); evaluate it at p = {p:g} and at p = q_1 = {q1:g}."
        )
    return _right(
        f"the best report is p = {expected:g}, not q_1 = {q1:g}, and it expects {exp_gain:.3f} "
        "more than the truthful report: 2 u_y is twice the linear score, its expectation "
        "2 u.q is linear in u and peaks at a vertex, so it rewards overconfidence and is not "
        "proper. The -||u||^2 term of the Brier score is what makes it proper."
    )


LOG_GAP_READOUTS: tuple[tuple[float, ...], ...] = (
    (0.7, 0.2, 0.1),
    (0.2, 0.5, 0.3),
    (0.1, 0.3, 0.6),
)
"""Notebook 1, exercise 2: the readouts ``u(r)`` of three rationales over three options."""
LOG_GAP_Q: tuple[float, ...] = (0.5, 0.3, 0.2)
"""Notebook 1, exercise 2: the outcome distribution ``q``."""


def check_log_score_gap(
    log_gap: Any,
    diversity: Any,
    readouts: Sequence[Sequence[float]] = LOG_GAP_READOUTS,
    q: Sequence[float] = LOG_GAP_Q,
) -> Feedback:
    """Notebook 1, exercise 2: Proposition 1's gap under the log score.

    ``log_gap``: ``J_log(p, q) - E_r J_log(u(r), q)`` for the readouts ``readouts`` (one
    row per rationale; :data:`LOG_GAP_READOUTS`), their mixture ``p`` and the outcome
    distribution ``q`` (:data:`LOG_GAP_Q`); ``diversity``: Proposition 1's
    ``E_r ||u(r) - p||^2`` for the same readouts (the Brier gap). Expected values:
    :func:`rlcd_lab.scoring.expected_score` with the log rule and
    :func:`rlcd_lab.decomposition.variance_decomposition` (tolerances 0.001).
    """
    if _missing(log_gap, diversity):
        return Feedback(None, NOT_ANSWERED)
    import torch

    from rlcd_lab.decomposition import variance_decomposition
    from rlcd_lab.scoring import expected_score

    u = torch.tensor(readouts, dtype=torch.float64)
    qt = torch.tensor(q, dtype=torch.float64)
    exp_gap = float(expected_score(u.mean(0), qt, "log") - expected_score(u, qt, "log").mean())
    exp_div = float(variance_decomposition(u, qt)["diversity"])
    a, b = _number(log_gap), _number(diversity)
    if a is None or b is None:
        return _wrong("give both gaps as numbers")
    if not _close(b, exp_div, 1e-3):
        return _wrong(
            "not E_r ||u(r) - p||^2. Hint: p = u.mean(0); the mean over rationales of the "
            "squared distance, or variance_decomposition(u, q)['diversity']"
        )
    if not _close(a, exp_gap, 1e-3):
        return _wrong(
            "not the log gap. Hint: expected_score(u.mean(0), q, 'log') - "
            "expected_score(u, q, 'log').mean(), i.e. sum_k q_k (log p_k - E_r log u_k(r))"
        )
    return _right(
        f"the log gap is {exp_gap:.4f} >= 0 (Jensen: log is concave, so log E_r u_k >= "
        f"E_r log u_k) but it is not E_r ||u(r) - p||^2 = {exp_div:.4f}: it is "
        "sum_k q_k (log p_k - E_r log u_k). Proposition 1's exact form is specific to Brier."
    )


def check_certainty_threshold(lam: Any, q1: float = 0.7) -> Feedback:
    """Notebook 1, exercise 3: the ``lambda`` above which the optimum of
    ``(2 p.q - 1) + lambda (1 - ||p||^2)`` stops being the certainty ``p_1 = 1``.

    Expected value: the optimum leaves ``p_1 = 1`` once the objective's slope there turns
    negative; the slope is ``a + lambda b``, with ``a`` and ``b`` the derivatives of the
    ``sampled_brier`` and ``gini`` terms of
    :func:`rlcd_lab.decomposition.sampled_answer_decomposition` at ``p_1 = 1`` (autograd),
    so the threshold is ``-a / b`` (tolerance 0.01).
    """
    if _missing(lam):
        return Feedback(None, NOT_ANSWERED)
    import torch

    from rlcd_lab.decomposition import sampled_answer_decomposition

    p1 = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    q = torch.tensor([1 - q1, q1], dtype=torch.float64)
    terms = sampled_answer_decomposition(torch.stack([1 - p1, p1]), q)
    (a,) = torch.autograd.grad(terms["sampled_brier"], p1, retain_graph=True)
    (b,) = torch.autograd.grad(terms["gini"], p1)
    expected = float(-a / b)
    value = _number(lam)
    if value is None:
        return _wrong("give lambda as a number")
    if not _close(value, expected, 0.01):
        return _wrong(
            f"lambda = {value:g} is not where the optimum leaves p_1 = 1. Hint: set the closed "
            "form p_1 = 1/2 + (2 q_1 - 1) / (2 lambda) equal to 1 and solve for lambda."
        )
    return _right(
        f"for lambda > {expected:.2f} (= 2 q_1 - 1) the optimum is p_1 < 1; below it the Gini "
        "bonus is too weak to pull the report off the mode."
    )


# --------------------------------------------------------- notebook 2: System-One collapse
def _read_rows(path: Path) -> list[dict]:
    from rlcd_lab.files.io import read_jsonl

    return read_jsonl(path)


def _config(run: Path) -> dict:
    return read_config(run)


def check_lr_run(run: str | Path | None, length_last_10pct: Any, lr: float = 1e-3) -> Feedback:
    """Notebook 2, exercise 1: the no-KL run retrained at learning rate ``lr``.

    ``run``: its run directory (None: nothing trained at this scale);
    ``length_last_10pct``: its mean rationale length over the last 10% of steps. Expected
    value: from the run's ``log.jsonl`` (:func:`rlcd_lab.classroom.tutorial.log_column` of
    ``rationale_length``, as the notebook's ``window``); the run's ``config.json`` must say
    ``lr`` and ``beta = 0`` (tolerance 0.05 tokens).
    """
    if run is None or not (Path(run) / LOG).exists():
        return _nothing("train the no-KL run with lr=1e-3 first (about 2 minutes at default scale)")
    if _missing(length_last_10pct):
        return Feedback(None, NOT_ANSWERED)
    from rlcd_lab.classroom import tutorial

    cfg = _config(Path(run))
    if not math.isclose(float(cfg.get("lr", float("nan"))), lr, rel_tol=1e-6):
        return _wrong(f"{run} was trained with lr={cfg.get('lr')}, not {lr:g}")
    if cfg.get("beta", 0.0) != 0.0:
        return _wrong(f"{run} has the KL anchor (beta={cfg.get('beta')}); the exercise drops it")
    _, v = tutorial.log_column(_read_rows(Path(run) / LOG), "rationale_length")
    expected = float(np.mean(v[-max(1, int(0.1 * len(v))) :]))
    value = _number(length_last_10pct)
    if value is None or not _close(value, expected, 0.05):
        return _wrong(
            "that is not the run's mean rationale length over its last 10% of steps. Hint: "
            "window(read_log(run), 'rationale_length', 0.1)"
        )
    empty = expected <= 9.0  # an empty rationale is 8 tokens (" Answer:")
    return _right(
        f"{expected:.1f} tokens over the last 10% of steps: "
        + ("the rationales collapsed to the empty one." if empty else "the rationales kept text.")
    )


def check_mean_top_probability(run: str | Path | None, answer: Any, split: str = "dev") -> Feedback:
    """Notebook 2, exercise 2: the mean top probability of a final model's readouts.

    ``run``: a run directory (its ``eval/<split>.jsonl``) or an eval-dump file (e.g. from
    ``rlcd-lab eval --out``); None: nothing trained at this scale. Expected value: the mean
    over items of ``max(probs)`` in that dump (tolerance 0.005).
    """
    if run is None:
        return _nothing("no run was trained at this scale")
    path = Path(run)
    path = eval_file(path, split) if path.is_dir() else path
    if not path.exists():
        return _nothing(f"{path} does not exist")
    if _missing(answer):
        return Feedback(None, NOT_ANSWERED)
    rows = _read_rows(path)
    expected = sum(max(r["probs"]) for r in rows) / len(rows)
    value = _number(answer)
    if value is None or not _close(value, expected, 0.005):
        return _wrong(
            f"that is not the mean top probability of {path.name}. Hint: "
            "np.mean([max(r['probs']) for r in assets.read_jsonl(path)])"
        )
    return _right(
        f"mean top probability {expected:.3f} over {len(rows)} items "
        + ("(a hedging readout)." if expected < 0.9 else "(a confident readout).")
    )


def check_kl_price(
    price: Any,
    brier_gain: Any,
    winner: Any,
    base: str | Path | None = None,
    beta: float = 0.04,
    p_empty: float = 0.01,
) -> Feedback:
    """Notebook 2, exercise 3: the KL price of always writing the empty rationale.

    ``price``: ``beta log(1 / p_empty)`` per question; ``brier_gain``: the base model's dev
    Brier after reasoning minus answering directly (from its ``rlcd.json``, default
    ``assets/checkpoints/base-facts``); ``winner``: ``"direct"`` when the gain is larger
    (the anchored objective still prefers answering directly), else ``"reason"``.
    Tolerances 0.002.
    """
    if _missing(price, brier_gain, winner):
        return Feedback(None, NOT_ANSWERED)
    from rlcd_lab.files import assets
    from rlcd_lab.lm.checkpoint import read_meta

    base = assets.shipped_checkpoints()["checkpoints/base-facts"] if base is None else base
    dev = read_meta(base)["metrics"]["dev"]
    exp_price = beta * -math.log(p_empty)
    exp_gain = dev["reason"]["brier"] - dev["direct"]["brier"]
    exp_winner = "direct" if exp_gain > exp_price else "reason"
    a, b = _number(price), _number(brier_gain)
    if a is None or not _close(a, exp_price, 0.002):
        return _wrong(
            f"not the KL price at p = {p_empty:g}. Hint: the policy writes the empty rationale "
            "with probability about 1, the base model with probability p: log pi/pi_ref = ?"
        )
    if b is None or not _close(b, exp_gain, 0.002):
        return _wrong(
            "not the Brier gain. Hint: read_meta(BASE)['metrics']['dev'][mode]['brier'] for "
            "mode 'reason' minus mode 'direct' (Brier here is a loss: lower is better)"
        )
    if str(winner).strip().lower() != exp_winner:
        return _wrong("compare the two numbers: which is larger, the price or the gain?")
    return _right(
        f"KL price {exp_price:.3f} vs Brier gain {exp_gain:.3f}: "
        + (
            "the gain is larger, so even the anchored objective prefers answering directly; "
            "the anchor only slows the drift."
            if exp_winner == "direct"
            else "the price is larger, so at its optimum the anchored objective keeps reasoning."
        )
    )


# ---------------------------------------------------------- notebook 3: gradient dilution
def _shipped_stage1(task: str = "verify") -> Path | None:
    from rlcd_lab.classroom import tutorial
    from rlcd_lab.files import assets

    infos = tutorial.discover_runs(assets.shipped_runs(), task=task)
    stage1 = [i for i in infos if i["method"] == "calibrate" and i["parent"] is None]
    stage1 = [i for i in stage1 if log_path(i["path"]).exists()]
    return min(stage1, key=lambda i: i["name"])["path"] if stage1 else None


def check_stage1_weight(c_used: Any, rms_ratio: Any, run: str | Path | None = None) -> Feedback:
    """Notebook 3, exercise 1: the score-function term in stage 1 (``calibrate``).

    ``c_used``: the score-function weight the run trains with; ``rms_ratio``: how large
    the score-function gradient it logs is against the pathwise one late in training,
    ``RMS(score function) / RMS(pathwise)`` over the last half of its logged steps (the
    notebook shows the ratio over all of them). Expected values: ``sf_weight`` in the
    run's ``config.json`` and :func:`late_rms_ratio` of its ``log.jsonl`` (tolerance 1%),
    for ``run`` (default: the first shipped ``verify`` stage-1 run).
    """
    if _missing(c_used, rms_ratio):
        return Feedback(None, NOT_ANSWERED)
    run = _shipped_stage1() if run is None else Path(run)
    if run is None:
        return _nothing("no stage-1 run with a log is shipped")
    exp_c = float(_config(run).get("sf_weight", 0.0))
    exp_ratio = late_rms_ratio(_read_rows(run / LOG))
    if not math.isfinite(exp_ratio):
        return _nothing(f"{run.name}'s log holds no pair of gradient norms to compare")
    c, ratio = _number(c_used), _number(rms_ratio)
    if c is None or not _close(c, exp_c, 1e-9):
        return _wrong("not the weight stage 1 uses. Hint: the run's config.json, key sf_weight")
    if ratio is None or not _close(ratio, exp_ratio, 0.01 * abs(exp_ratio)):
        return _wrong(
            "not the ratio of the logged norms over the last half of the logged steps. Hint: "
            "d = results.gradient_dilution(read_log(run)); h = d['steps'].size // 2; then "
            "results.rms of d['score_function'][h:] over that of d['pathwise'][h:]"
        )
    return _right(
        f"stage 1 trains with c = {exp_c:g}: the score-function term never enters its loss. "
        f"The loop still logs that term's norm, {exp_ratio:.3g} times the pathwise one late "
        "in training (RMS over the last half of the logged steps), to measure how large it "
        "would be: the diagnostic that motivates separating the stages."
    )


def late_rms_ratio(rows: Sequence[Mapping[str, Any]]) -> float:
    """``RMS(score function) / RMS(pathwise)`` of a run's logged gradient norms over the
    last half of the steps that log both (:func:`rlcd_lab.reports.results.gradient_dilution`;
    the middle step of an odd count included); NaN when none does or the pathwise norms
    are all 0."""
    from rlcd_lab.reports import results

    d = results.gradient_dilution(rows)
    half = d["steps"].size // 2
    pathwise = results.rms(d["pathwise"][half:])
    return results.rms(d["score_function"][half:]) / pathwise if pathwise > 0 else math.nan


def _final_metrics(run: Path) -> dict:
    from rlcd_lab.lm.checkpoint import read_meta

    metrics = read_meta(final_dir(run))["metrics"]
    return metrics["test"] if metrics.get("test") else metrics["dev"]


SPREAD_TOL = 1e-9
"""Absolute tolerance of exercise 3.2's spread: float64 rounding of a difference of two
stored Briers is about 1e-16, a number rounded to 4 decimals is off by up to 5e-5 (it
passes only if the spread lies within 1e-9 of a multiple of 1e-4)."""


def check_sweep_ordering(sweep: Mapping[float, str | Path], ordering: Any, spread: Any) -> Feedback:
    """Notebook 3, exercise 2: the score-function weights ``c`` of a sweep, best first.

    ``sweep``: ``{c: run directory}`` (the notebook's ``sweep``); ``ordering``: the ``c``
    values sorted by Brier after temperature scaling, lowest (best) first; ``spread``: the
    worst run's Brier (TS) minus the best one's, computed from the unrounded values (the
    notebook's ``res``). Expected values: the ``ts_brier`` each run's ``final/rlcd.json``
    stores (test when the run was tested, else dev), which ``res`` holds as they are. The
    spread's tolerance, :data:`SPREAD_TOL`, is far below the 4 decimals the notebook shows,
    so no number it displays (a Brier, or the spread of the rounded values) passes.
    """
    if not sweep:
        return _nothing("no sweep was trained at this scale")
    if _missing(ordering, spread):
        return Feedback(None, NOT_ANSWERED)
    brier = {float(c): _final_metrics(Path(p))["ts_brier"] for c, p in sweep.items()}
    expected = sorted(brier, key=lambda c: (brier[c], c))
    exp_spread = max(brier.values()) - min(brier.values())
    try:
        given = [float(c) for c in ordering]
    except (TypeError, ValueError):
        return _wrong("give the ordering as a list of c values, e.g. [0.3, 0.0, 1.0]")
    if sorted(given) != sorted(brier):
        return _wrong(f"list each c of the sweep once: {sorted(brier)}")
    if [brier[c] for c in given] != sorted(brier.values()):  # ties: either order is right
        return _wrong("sort the c values by the column 'Brier (TS)', lowest first")
    value = _number(spread)
    if value is None or not _close(value, exp_spread, SPREAD_TOL):
        return _wrong(
            "the ordering is right, but not the spread. Hint: the largest 'Brier (TS)' of "
            "the sweep minus the smallest, from the unrounded values in res (the table "
            "shows 4 decimals; the check wants the spread to 1e-9)"
        )
    monotone = expected == sorted(brier)
    return _right(
        "by Brier (TS): "
        + " < ".join(f"c={c:g} ({brier[c]:.4f})" for c in expected)
        + f", a spread of {exp_spread:.4f}"
        + (". More c is worse here, as in the paper's Table 4." if monotone else ".")
    )


SHARED_RTOL = 0.003
"""Relative tolerance of exercise 3.3's answer on the shared coordinates."""


@functools.lru_cache(maxsize=16)
def _adam_progress(rho: float) -> float:
    """:func:`rlcd_lab.classroom.tutorial.adam_signal_step` as exercise 3.3 checks it (seeded, so
    the same for the same ``rho``; about a second, hence cached)."""
    from rlcd_lab.classroom import tutorial

    return tutorial.adam_signal_step(rho, dim=1000, steps=200)


def check_per_coordinate_dilution(readout_only: Any, shared: Any, rho: float = 10.0) -> Feedback:
    """Notebook 3, exercise 3: Adam's progress along the readout signal when the
    score-function noise (``rho`` times the signal) only reaches the *shared* parameters.

    ``readout_only``: the relative progress on coordinates the noise does not reach (e.g.
    the option tokens' unembedding rows); ``shared``: on coordinates it does reach.
    Expected values: :func:`rlcd_lab.classroom.tutorial.adam_signal_step` at ratio 0 and at ``rho``
    (Adam's second moment is per coordinate, so each block behaves like the isotropic toy
    at its own noise level): ``readout_only`` within 0.03; ``shared`` within 0.3% of the
    toy's value or of its closed form ``1 / sqrt(1 + rho^2)``, so three significant digits
    of either pass and the round guess ``1 / rho`` (0.1 at ``rho = 10``, 0.5% off the
    closed form) does not.
    """
    if _missing(readout_only, shared):
        return Feedback(None, NOT_ANSWERED)
    exp_clean, exp_noisy = _adam_progress(0.0), _adam_progress(float(rho))
    closed = 1 / math.sqrt(1 + float(rho) ** 2)
    a, b = _number(readout_only), _number(shared)
    if a is None or b is None:
        return _wrong("give both as numbers (progress relative to noiseless Adam)")
    if not _close(a, exp_clean, 0.03):
        return _wrong(
            "not the progress on the coordinates without noise. Hint: Adam normalises each "
            "coordinate by its own second moment; what is v there?"
        )
    if not any(_close(b, x, SHARED_RTOL * x) for x in (exp_noisy, closed)):
        return _wrong(
            f"not the progress on the noisy coordinates (to three significant digits). Hint: "
            f"section 1's curve at rho = {rho:g}"
        )
    return _right(
        f"readout-only coordinates keep their full step ({exp_clean:.2f}); shared ones are "
        f"diluted to {exp_noisy:.3f} (about 1/sqrt(1 + rho^2)). The dilution hits exactly the "
        "parameters through which the readout learns from the rationale's content."
    )


# ------------------------------------------------------ notebook 4: calibrate, then reinforce
def check_aurc_before_after(result: Any, aurc_raw: Any, aurc_ts: Any) -> Feedback:
    """Notebook 4, exercise 1: a run's AURC before and after temperature scaling.

    ``result``: a :class:`rlcd_lab.reports.results.RunResult` (e.g. ``first[GRPO]``). Expected
    values: :func:`rlcd_lab.metrics.aurc` of the raw and of the scaled probabilities
    (tolerance 0.001).
    """
    if result is None:
        return _nothing("no run to check against")
    if _missing(aurc_raw, aurc_ts):
        return Feedback(None, NOT_ANSWERED)
    from rlcd_lab import metrics

    exp_raw = metrics.aurc(*metrics.confidence_and_correct(result.probs(False), result.labels))
    exp_ts = metrics.aurc(result.confidence, result.correct)
    a, b = _number(aurc_raw), _number(aurc_ts)
    if a is None or not _close(a, exp_raw, 1e-3):
        return _wrong(
            "not the AURC of the raw probabilities. Hint: metrics.aurc(*metrics."
            "confidence_and_correct(r.probs(False), r.labels))"
        )
    if b is None or not _close(b, exp_ts, 1e-3):
        return _wrong("not the AURC after scaling. Hint: metrics.aurc(r.confidence, r.correct)")
    return _right(
        f"AURC {exp_raw:.4f} raw and {exp_ts:.4f} after scaling: one temperature T > 0 keeps "
        "the order of the confidences (up to ties), so the ranking metrics cannot change."
    )


def check_coverage_at_risk(result: Any, answer: Any, eps: float = 0.02) -> Feedback:
    """Notebook 4, exercise 2: Cov@eps of a run after temperature scaling, as a fraction.

    ``result``: a :class:`rlcd_lab.reports.results.RunResult` (e.g. ``first[RLCD]``). Expected
    value:
    :func:`rlcd_lab.metrics.coverage_at_risk` at ``eps`` (tolerance 0.001).
    """
    if result is None:
        return _nothing("no run to check against")
    if _missing(answer):
        return Feedback(None, NOT_ANSWERED)
    from rlcd_lab import metrics

    expected = metrics.coverage_at_risk(result.confidence, result.correct, eps)
    value = _number(answer)
    if value is not None and value > 1 and _close(value / 100, expected, 1e-3):
        return _wrong("give the coverage as a fraction in [0, 1], not in percent")
    if value is None or not _close(value, expected, 1e-3):
        return _wrong(
            f"not Cov@{eps:.0%}. Hint: metrics.coverage_at_risk(r.confidence, r.correct, {eps:g})"
        )
    return _right(
        f"Cov@{eps:.0%} = {expected:.1%}: the share of test items decided automatically with "
        f"at most {eps:.0%} errors (Cov@eps is the number a product owner needs)."
    )


def check_fair_budget(stage1: str | Path | None, stage2: str | Path | None, steps: Any) -> Feedback:
    """Notebook 4, exercise 3: the steps a baseline should train for a fair comparison
    with two-stage RLCD.

    ``stage1``, ``stage2``: the run directories of stage 1 and stage 2; ``steps``: the
    baseline's step budget. Expected value: the sum of the ``steps`` in their
    ``config.json`` files.
    """
    cfgs = [_config(Path(p)) if p is not None else {} for p in (stage1, stage2)]
    if not all("steps" in c for c in cfgs):
        return _nothing("the two stages were not trained at this scale")
    if _missing(steps):
        return Feedback(None, NOT_ANSWERED)
    expected = int(cfgs[0]["steps"]) + int(cfgs[1]["steps"])
    value = _number(steps)
    if value is None or value != expected:
        return _wrong("not the total budget. Hint: RLCD trained stage 1 *and* stage 2")
    return _right(
        f"{expected} steps ({cfgs[0]['steps']} + {cfgs[1]['steps']}): train each baseline that "
        "long (the '(matched budget)' runs), or give RLCD's two stages half the steps each."
    )


# ------------------------------------------------------------ notebook 5: aleatoric task
def check_lambda_run(run: str | Path | None, jsd_single: Any, lam: float = 0.5) -> Feedback:
    """Notebook 5, exercise 1: the ``lambda`` objective in between.

    ``run``: the run directory of ``rlcd-lab train mixture --lam 0.5`` (None: nothing
    trained at this scale); ``jsd_single``: its single-query test JSD to ``q`` in bits,
    before temperature scaling. Expected value: ``row['jsd']`` of
    :func:`rlcd_lab.reports.results.load_run`; the run's ``config.json`` must say ``lam``
    (tolerance 0.002).
    """
    if run is None or not config_file(run).exists():
        return _nothing("train the lambda = 0.5 run first (about 1.5 minutes at default scale)")
    if _missing(jsd_single):
        return Feedback(None, NOT_ANSWERED)
    from rlcd_lab.reports import results

    cfg = _config(Path(run))
    if not math.isclose(float(cfg.get("lam", float("nan"))), lam):
        return _wrong(f"{run} was trained with lam={cfg.get('lam')}, not {lam:g}")
    expected = results.load_run(run).row["jsd"]
    value = _number(jsd_single)
    if value is None or not _close(value, expected, 0.002):
        return _wrong("not its single-query JSD. Hint: results.load_run(run).row['jsd']")
    return _right(f"single-query JSD {expected:.3f} bits at lambda = {lam:g}.")


def check_diversity_term(rows: Sequence[Mapping[str, Any]] | None, answer: Any) -> Feedback:
    """Notebook 5, exercise 2: Proposition 1's diversity term ``E_r ||u(r) - p||^2``,
    averaged over items.

    ``rows``: eval-dump rows with several ``readouts`` per item (e.g. ``mrows``). Expected
    value: the mean over items of ``diversity`` from
    :func:`rlcd_lab.decomposition.variance_decomposition` (tolerance 2% or 1e-4).
    """
    if not rows:
        return _nothing("no readouts at this scale")
    if _missing(answer):
        return Feedback(None, NOT_ANSWERED)
    import torch

    from rlcd_lab.decomposition import variance_decomposition

    values = []
    for r in rows:
        u = torch.tensor(r["readouts"], dtype=torch.float64)
        values.append(float(variance_decomposition(u, u.mean(0))["diversity"]))
    expected = sum(values) / len(values)
    value = _number(answer)
    if value is None or not _close(value, expected, max(1e-4, 0.02 * expected)):
        return _wrong(
            "not the mean diversity term. Hint: variance_decomposition(u, q)['diversity'] per "
            "item, u = the item's (M, K) readouts; then the mean over items"
        )
    return _right(
        f"mean E_r ||u(r) - p||^2 = {expected:.4f} over {len(values)} items: "
        + (
            "the rationales' readouts disagree: the mixture objective pays for that."
            if expected > 0.01
            else "the readouts after different rationales hardly differ."
        )
    )


@functools.lru_cache(maxsize=16)
def _urn_items(prompt: str) -> tuple[Any, ...]:
    """The shipped ``aleatoric`` task's items (all splits) that ask ``prompt``."""
    from rlcd_lab.tasks import load_task_items

    return tuple(
        it
        for split in ("train", "dev", "test")
        for it in load_task_items("aleatoric", split)
        if it.prompt == prompt
    )


def check_urn_forecast(answer: Any, prompt: str = "urn 3a1b2c?") -> Feedback:
    """Notebook 5, exercise 3: the best forecast for an urn question.

    ``answer``: the distribution over the options (A, B, C) that minimises the expected
    JSD to the outcome. Expected value: the ``q`` of the ``aleatoric`` task's items with
    that ``prompt`` (:func:`rlcd_lab.tasks.load_task_items`; tolerance 0.001 each).
    """
    if _missing(answer):
        return Feedback(None, NOT_ANSWERED)
    items = _urn_items(prompt)
    if not items:
        return _nothing(f"no item of the aleatoric task asks {prompt!r}")
    expected = items[0].q
    try:
        given = [float(x) for x in answer]
    except (TypeError, ValueError):
        return _wrong("give the forecast as a list of probabilities, one per option")
    if len(given) != len(expected) or not all(
        _close(g, e, 1e-3) for g, e in zip(given, expected, strict=False)
    ):
        return _wrong(
            "not the best forecast. Hint: the outcome is one ball drawn from the urn; what is "
            "the chance of each colour?"
        )
    labels = sorted({it.options[it.label] for it in items})
    return _right(
        f"q = ({', '.join(f'{x:.3f}' for x in expected)}), read off the prompt alone. The "
        f"{len(items)} items asking {prompt!r} have outcomes {', '.join(labels)}: no rationale "
        "can predict the draw. Reasoning narrows q only when it is spread from the model's "
        "point of view (epistemic), e.g. verify before computing the sum."
    )


# ------------------------------------------------------------------ notebook 6: routing
def escalation_band(c_fa: float = 1.0, escalate: float = 0.5, n: int = 10001) -> tuple[float, ...]:
    """The values of ``p_Y`` for which the Bayes policy of notebook 6, section 2 escalates:
    ``(low, high)``, or ``()`` when it never does. Actions accept (``Y``), reject (``N``),
    escalate; accepting a wrong result costs ``c_fa``, rejecting a right one 1, escalating
    ``escalate``. Computed with :func:`rlcd_lab.math.routing.bayes_actions` on ``n`` values of
    ``p_Y`` (ties go to the lower action index, so a lone tie point is not a band)."""
    from rlcd_lab.math import routing

    cost = routing.decision_cost_matrix(2, [[0.0, c_fa], [1.0, 0.0]], escalate=escalate)
    grid = np.linspace(0.0, 1.0, n)
    acts = routing.bayes_actions(np.stack([grid, 1 - grid], 1), cost)
    band = grid[acts == 2]
    return (float(band.min()), float(band.max())) if band.size >= 2 else ()


def check_escalation_band(
    band: Any,
    escalated: Any,
    runs: Mapping[str, Mapping[str, Any]] | None,
    c_fa: float = 10.0,
    escalate: float = 0.5,
    variant: str = "reinforce",
) -> Feedback:
    """Notebook 6, exercise 1: when does the Bayes policy escalate, and how often?

    ``band``: ``(low, high)``, the range of ``p_Y`` where it escalates at ``c_fa``, or
    ``()`` (or ``"never"``) when it never does; ``escalated``: the share of the test items
    of the run ``variant`` that it escalates. ``runs``: the notebook's ``data`` (per run
    its ``variant`` and ``p_test``, the temperature-scaled test probabilities, ``Y``
    first). Expected values: :func:`escalation_band` (tolerance 0.01 on the ends) and
    the share of :func:`rlcd_lab.math.routing.bayes_actions` that escalate (tolerance 0.001).
    """
    probs = next((r["p_test"] for r in (runs or {}).values() if r.get("variant") == variant), None)
    if probs is None:
        return _nothing(f"no {variant} run with test probabilities")
    if _missing(band, escalated):
        return Feedback(None, NOT_ANSWERED)
    from rlcd_lab.math import routing

    expected = escalation_band(c_fa, escalate)
    cost = routing.decision_cost_matrix(2, [[0.0, c_fa], [1.0, 0.0]], escalate=escalate)
    exp_share = float(np.mean(routing.bayes_actions(np.asarray(probs), cost) == 2))
    never = isinstance(band, str) and band.strip().lower() in ("never", "none", "empty")
    given: tuple[float, ...] | None
    if never:
        given = ()
    else:
        try:
            given = tuple(float(x) for x in band)
        except (TypeError, ValueError):
            given = None
    if given is None or len(given) not in (0, 2):
        return _wrong("give the band as (low, high), or () if the policy never escalates")
    if len(given) != len(expected) or not all(
        _close(g, e, 0.01) for g, e in zip(given, expected, strict=True)
    ):
        return _wrong(
            f"not the band at c_FA = {c_fa:g}. Hint: escalating costs {escalate:g} whatever "
            "the truth; escalate when that is below both p_Y (the cost of rejecting) and "
            "c_FA p_N (the cost of accepting)"
        )
    share = _number(escalated)
    if share is None or not _close(share, exp_share, 1e-3):
        return _wrong(
            f"the band is right, but not the share of {variant}'s test items it escalates. "
            "Hint: routing.bayes_actions(p_test, costs_for(c_FA)) == 2, the mean over items"
        )
    where = (
        f"for p_Y in ({expected[0]:.3f}, {expected[1]:.3f})"
        if expected
        else "never (a tie at most)"
    )
    return _right(
        f"at c_FA = {c_fa:g} the Bayes policy escalates {where}: {exp_share:.1%} of "
        f"{variant}'s test items. (At c_FA = 1 it never does: min(p_Y, p_N) <= 0.5, so one "
        "of the two answers is always at least as cheap as escalating.)"
    )


def _threshold_of(chosen: Any, task: str) -> float | None:
    try:
        return float(chosen[task])
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def check_label_free_accuracy(
    cascades: Mapping[str, Mapping[str, Any]], chosen: Any, answers: Any
) -> Feedback:
    """Notebook 6, exercise 2: the test accuracy a cascade predicts for itself, without
    labels, at its threshold chosen on dev.

    ``cascades``: the notebook's ``cascades`` (``direct`` and ``reason``: temperature-scaled
    test probabilities); ``chosen``: ``{task: threshold}`` (the notebook's
    ``summary["threshold (dev)"]``); ``answers``: ``{task: predicted accuracy}``. Expected
    values: the mean over test items of the confidence ``max p`` of the readout
    :func:`rlcd_lab.math.routing.cascade` uses at that threshold (tolerance 0.001).
    """
    if not cascades:
        return _nothing("no cascade was computed")
    if _missing(answers):
        return Feedback(None, NOT_ANSWERED)
    from rlcd_lab.math import routing

    expected = {}
    for task, out in cascades.items():
        t = _threshold_of(chosen, task)
        if t is None:
            return _nothing(f"no threshold was chosen on dev for {task}")
        probs, _ = routing.cascade(out["direct"], out["reason"], t)
        expected[task] = float(probs.max(1).mean())
    wrong = _per_task_wrong(
        answers, expected, "predicted accuracy", "not the accuracy the cascade predicts. "
        "Hint: probs, routed = routing.cascade(out['direct'], out['reason'], t); a calibrated "
        "readout expects to be right with probability max p, so take the mean of probs.max(1)",
    )  # fmt: skip
    if wrong is not None:
        return wrong
    return _right(
        "predicted test accuracy at the dev threshold: "
        + ", ".join(f"{task} {acc:.3f}" for task, acc in expected.items())
        + ". Compare it with the accuracy the cascade gets: the label-free number is only "
        "as good as the calibration it trusts."
    )


def check_raw_cascade(
    cascades: Mapping[str, Mapping[str, Any]], thresholds: Any, answer: Any
) -> Feedback:
    """Notebook 6, exercise 3: how much each task's cascade changes with the *raw* direct
    probabilities.

    ``cascades``: the notebook's ``cascades``; ``thresholds``: its threshold sweep;
    ``answer``: ``{task: change}``, the largest absolute change of the cascade's test
    accuracy over the thresholds. Expected values: the cascade accuracy
    (:func:`rlcd_lab.math.routing.cascade_curve`) with ``direct_raw`` against the one with the
    temperature-scaled ``direct`` readout (tolerance 0.001).
    """
    if not cascades:
        return _nothing("no cascade was computed")
    if _missing(answer):
        return Feedback(None, NOT_ANSWERED)
    from rlcd_lab.math import routing

    change = {}
    for task, out in cascades.items():
        raw = routing.cascade_curve(
            out["direct_raw"], out["reason"], out["y"], out["tokens_reason"], thresholds
        )
        scaled = routing.cascade_curve(
            out["direct"], out["reason"], out["y"], out["tokens_reason"], thresholds
        )
        change[task] = float(np.abs(raw["accuracy"] - scaled["accuracy"]).max())
    wrong = _per_task_wrong(
        answer, change, "accuracy change", "not the largest accuracy change over the "
        "thresholds. Hint: routing.cascade_curve with out['direct_raw'] in place of "
        "out['direct'], then the largest |difference| of the two 'accuracy' arrays",
    )  # fmt: skip
    if wrong is not None:
        return wrong
    top = max(change, key=change.get)
    return _right(
        "largest accuracy change over the thresholds: "
        + ", ".join(f"{t} {c:.3f}" for t, c in change.items())
        + f"; {top} moves most. The cascade acts on the direct confidence's value; where T "
        "moves it across the thresholds, more items change route (a constant readout ranks "
        "nothing, whatever its temperature, but T still moves its one value)."
    )


CHECKS: dict[str, tuple[str, ...]] = {
    "01_proper_scores_and_proposition1": (
        "check_twice_linear_score",
        "check_log_score_gap",
        "check_certainty_threshold",
    ),
    "02_system_one_collapse": ("check_lr_run", "check_mean_top_probability", "check_kl_price"),
    "03_gradient_dilution": (
        "check_stage1_weight",
        "check_sweep_ordering",
        "check_per_coordinate_dilution",
    ),
    "04_calibrate_then_reinforce": (
        "check_aurc_before_after",
        "check_coverage_at_risk",
        "check_fair_budget",
    ),
    "05_when_rl_cannot_help": ("check_lambda_run", "check_diversity_term", "check_urn_forecast"),
    "06_routing": ("check_escalation_band", "check_label_free_accuracy", "check_raw_cascade"),
}
"""The checks of each notebook's exercises 1, 2 and 3, by notebook name."""
