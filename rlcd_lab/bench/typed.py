"""``rlcd-lab bench typed``: a TypedBench-style report card for one decision model.

Start at :func:`run_typed` (what it measures); it writes ``summary.json``, ``report.md``
and ``report.html`` (``common.write_report``).
"""

from __future__ import annotations

import string
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlcd_lab import metrics
from rlcd_lab.bench.backends import Backend, Outcome, Request, open_target, slug
from rlcd_lab.bench.common import (
    INSTRUCTION_TEMPLATES,
    asymmetric_cost_matrices,
    bench_items,
    cpu_name,
    ece_floor_samples,
    floor_summary,
    fmt,
    option_orders,
    paraphrase_rules,
    probs_in_order,
    ranked_probability_score,
    realised_cost_comparison,
    table,
    write_report,
)
from rlcd_lab.bench.configs import TypedBenchConfig

Progress = Callable[[str], None]
QUESTION = "answer"


def _question(kind: str, options: Sequence[str], instructions: Any) -> dict[str, Any]:
    q: dict[str, Any] = {"type": kind}
    if instructions is not None:
        q["instructions"] = instructions
    q["criteria"] = list(options) if kind == "score" else {o: None for o in options}
    return q


def _labels(kind: str, options: Sequence[str]) -> list[str]:
    """The keys of an answer's probabilities in the options' canonical order."""
    return [str(i) for i in range(len(options))] if kind == "score" else list(options)


def variant_requests(
    items: Sequence[Any], kind: str, seed: int
) -> tuple[list[dict[str, str]], list[list[Request]]]:
    """The rule-made variants and, per variant, one request per item: ``(variants,
    requests)`` with ``variants[v] = {"paraphrase", "order"}``. Score questions keep their
    level order (only paraphrases vary)."""
    rules = paraphrase_rules([it.prompt for it in items])
    k_min = min(len(it.options) for it in items)
    orders = list(option_orders(k_min)) if kind == "choice" else ["identity"]
    variants, requests = [], []
    for rule in rules:
        for order in orders:
            batch = []
            for it in items:
                state, instr = rule.apply(it.prompt, None)
                perm = option_orders(len(it.options))[order]
                opts = [it.options[j] for j in perm]
                batch.append(Request(state, {QUESTION: _question(kind, opts, instr)}, seed))
            variants.append({"paraphrase": rule.name, "order": order})
            requests.append(batch)
    return variants, requests


def latency_grid(
    backend: Backend,
    states: Sequence[str],
    options: Sequence[str],
    options_grid: Sequence[int],
    questions_grid: Sequence[int],
    seed: int,
) -> list[dict[str, Any]]:
    """Time one request at a time for every (options K, questions Q) cell: ``len(states)``
    requests, each with Q choice questions of K labels (the task's options first, then
    letters) about one state. Per cell: median seconds per request and per decision
    (request / Q) and mean input / output tokens per decision, or the first error."""
    extra = [c for c in string.ascii_uppercase if c not in options]
    backend.run([Request(states[0], {"q0": _question("choice", options[:2], None)}, seed)], False)
    rows = []
    for k in options_grid:
        labels = (list(options) + extra)[:k]
        for q in questions_grid:
            questions = {
                f"q{j}": _question(
                    "choice", labels, INSTRUCTION_TEMPLATES[j % len(INSTRUCTION_TEMPLATES)]
                )
                for j in range(q)
            }
            outs = backend.run([Request(s, questions, seed) for s in states], batched=False)
            row: dict[str, Any] = {"options": k, "questions": q}
            bad = [o for o in outs if not o.ok]
            if bad:
                rows.append({**row, "ok": False, "error": f"{bad[0].status}: {bad[0].error}"})
                continue
            lat = np.array([o.latency_s for o in outs])
            tin = np.array([o.usage.get("input_tokens", 0) for o in outs]) / q
            tout = np.array([o.usage.get("output_tokens", 0) for o in outs]) / q
            rows.append(
                {
                    **row,
                    "ok": True,
                    "latency_ms": float(np.median(lat) * 1e3),
                    "latency_ms_per_decision": float(np.median(lat / q) * 1e3),
                    "input_tokens_per_decision": float(tin.mean()),
                    "output_tokens_per_decision": float(tout.mean()),
                    "tokens_per_decision": float((tin + tout).mean()),
                }
            )
    return rows


def _probs(outs: Sequence[Outcome], items: Sequence[Any], kind: str) -> list[np.ndarray | None]:
    return [
        probs_in_order(o.answers[QUESTION], _labels(kind, it.options)) if o.ok else None
        for o, it in zip(outs, items, strict=True)
    ]


def _mean_accuracy_by(per_variant: Sequence[dict[str, Any]], key: str) -> dict[str, float]:
    """Mean accuracy of the variants sharing each value of ``key`` (``"paraphrase"`` or
    ``"order"``), in first-seen order: ``{value: mean accuracy}`` from the per-variant
    rows of :func:`_variant_accuracy`, to see which rule moves accuracy."""
    names = dict.fromkeys(r[key] for r in per_variant)
    return {n: float(np.mean([r["accuracy"] for r in per_variant if r[key] == n])) for n in names}


def _variant_accuracy(
    backend: Backend, items: Sequence[Any], y: np.ndarray, kind: str, seed: int, say: Progress
) -> tuple[dict[str, Any], list[np.ndarray | None]]:
    """Section 1 of the bench: ask every rule-made variant (:func:`variant_requests`) of
    the items, ``y (N,)`` their labels. Returns ``(accuracy, canonical)``: the summary's
    ``"accuracy"`` dict (median and range over variants, means per paraphrase and per
    order, the share of items decided alike on every variant, per-variant rows, refused
    requests) and the first (canonical) variant's probabilities per item, canonical
    option order (None where refused), which sections 2-5 score."""
    variants, requests = variant_requests(items, kind, seed)
    say(f"typed: {len(variants)} variants x {len(items)} items ({backend.where})")
    per_variant, decided, canonical = [], [], None
    n_refused = 0
    for v, reqs in zip(variants, requests, strict=True):
        outs = backend.run(reqs)
        probs = _probs(outs, items, kind)
        n_refused += sum(p is None for p in probs)
        choice = np.array([-1 if p is None else int(np.argmax(p)) for p in probs])
        answered = choice >= 0
        acc = float((choice[answered] == y[answered]).mean()) if answered.any() else float("nan")
        per_variant.append({**v, "accuracy": acc, "answered": int(answered.sum())})
        decided.append(choice)
        if canonical is None:
            canonical = probs
    accs = np.array([r["accuracy"] for r in per_variant])
    same = np.all(np.array(decided) == decided[0][None], axis=0) & (decided[0] >= 0)
    accuracy = {
        "median": float(np.nanmedian(accs)),
        "min": float(np.nanmin(accs)),
        "max": float(np.nanmax(accs)),
        "n_variants": len(variants),
        "by_paraphrase": _mean_accuracy_by(per_variant, "paraphrase"),
        "by_order": _mean_accuracy_by(per_variant, "order"),
        "same_decision_all_variants": float(same.mean()),
        "per_variant": per_variant,
        "refused_requests": n_refused,
    }
    assert canonical is not None
    return accuracy, canonical


def _answered_matrix(
    probs_list: Sequence[np.ndarray | None], y: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(P (n, K), labels (n,))`` of the answered items of the canonical variant
    (``probs_list``: per item its probabilities or None; ``y (N,)``): rows padded with 0 to
    the most options (:func:`rlcd_lab.metrics.pad_ragged`); ``ValueError`` when no
    item was answered, as there is then nothing to score."""
    keep = np.array([p is not None for p in probs_list])
    if not keep.any():
        raise ValueError("no item of the canonical variant was answered")
    P = metrics.pad_ragged([p for p in probs_list if p is not None], 0.0)
    return P, y[keep]


def _calibration_and_selective(
    P: np.ndarray, yk: np.ndarray, cfg: TypedBenchConfig
) -> tuple[dict[str, Any], dict[str, Any], np.ndarray]:
    """Sections 2 and 3 on the canonical variant's ``P (n, K)`` and labels ``yk (n,)``:
    ``(calibration, selective, sims)``, the summary's two dicts (ECE beside its noise
    floor, Brier, NLL; accuracy, AURC, Cov@eps on ``max p``) and the ``(cfg.n_sim,)``
    ECEs of a perfectly calibrated predictor with the same confidences (the floor, also
    drawn in the report)."""
    conf, correct = metrics.confidence_and_correct(P, yk)
    ece = metrics.ece(P, yk, cfg.n_bins)
    sims = ece_floor_samples(conf, cfg.n_bins, cfg.n_sim, cfg.seed)
    calibration = {
        **floor_summary(ece, sims),
        "n_bins": cfg.n_bins,
        "brier": metrics.brier(P, yk),
        "nll": metrics.nll(P, yk),
    }
    selective = {
        "accuracy": metrics.accuracy(P, yk),
        "aurc": metrics.aurc(conf, correct),
        "cov_at_eps": metrics.coverage_at_risk(conf, correct, cfg.eps),
        "eps": cfg.eps,
        "confidence": "max p of the canonical variant",
    }
    return calibration, selective, sims


def _ordinal_score(
    cfg: TypedBenchConfig, task: str, levels: int | None, P: np.ndarray, yk: np.ndarray
) -> dict[str, Any]:
    """Section 4, the summary's ``"ordinal"`` dict: the mean RPS of ``P (n, K)`` against
    ``yk (n,)`` when score questions were asked (``cfg.ordinal``) over a fixed number of
    ``levels`` (None: the items' option counts differ), else why it does not apply."""
    if cfg.ordinal and levels is not None:
        return {
            "applicable": True,
            "rps": float(ranked_probability_score(P, yk).mean()),
            "levels": levels,
        }
    why = (
        "options differ in number across items"
        if cfg.ordinal
        else f"task {task}'s answers are categorical (choice questions); no score "
        "(ordinal) question was asked (--ordinal asks its options as ordered levels)"
    )
    return {"applicable": False, "reason": why}


def _realised_costs(P: np.ndarray, yk: np.ndarray, cfg: TypedBenchConfig) -> dict[str, Any]:
    """Section 5, the summary's ``"costs"`` dict: per asymmetric cost matrix over the K
    options of ``P (n, K)`` its description, the matrix and
    :func:`rlcd_lab.bench.common.realised_cost_comparison` (expected-cost decisions vs the
    top answer, paired bootstrap over the ``n`` items)."""
    costs: dict[str, Any] = {}
    for name, spec in asymmetric_cost_matrices(P.shape[1], cfg.cost_ratio).items():
        found = realised_cost_comparison(P, yk, spec["matrix"], cfg.n_boot, cfg.seed)
        costs[name] = {
            "description": spec["description"],
            "matrix": spec["matrix"].tolist(),
            **found,
        }
    return costs


def run_typed(
    cfg: TypedBenchConfig, backend: Backend | None = None, progress: Progress | None = None
) -> dict[str, Any]:
    """Run the bench as ``cfg`` says (``backend``: answer with this one instead of opening
    ``cfg``'s target); write the reports; return the summary (its ``"paths"`` name the
    files).

    For a checkpoint (in-process) or a running server (``--url``), on the first N items of a
    task split, every item asked as a typed question (a ``choice`` over the item's options;
    with ``--ordinal`` a ``score`` over them as ordered levels):

    1. accuracy on every rule-made variant (paraphrase x option order; ``common.paraphrase_rules``
       and ``common.option_orders``): median and range over variants, per rule, and the share
       of items decided alike on every variant;
    2. calibration of the canonical variant: top-label ECE beside the noise floor, the 95%
       range of the ECE a perfectly calibrated predictor with the same confidences shows
       (``common.ece_floor_samples``);
    3. selective prediction: AURC and Cov@eps (:mod:`rlcd_lab.metrics`) on ``max p``;
    4. ordinal proper score: the RPS (``common.ranked_probability_score``) for score
       questions; "not applicable" for categorical answers;
    5. realised cost per decision under two asymmetric cost matrices, deciding by expected
       cost vs taking the top answer (``common.realised_cost_comparison``);
    6. latency and tokens per decision as the options per question (2, 3, 4, ...) and the
       questions per request (1, 2, 4, 8) grow, one timed request at a time.

    Writes ``summary.json``, ``report.md`` and ``report.html`` (``common.write_report``).
    """
    say = progress or (lambda msg: None)
    t_start = time.perf_counter()
    backend, task = open_target(cfg, backend)
    kind = "score" if cfg.ordinal else "choice"
    items = bench_items(task, cfg.split, cfg.n_items)
    y = np.array([it.label for it in items])

    # 1. accuracy over rule-made variants ------------------------------------------------
    accuracy, canonical = _variant_accuracy(backend, items, y, kind, cfg.seed, say)

    # 2-5. the canonical variant: calibration, selective prediction, RPS, costs ----------
    P, yk = _answered_matrix(canonical, y)
    calibration, selective, sims = _calibration_and_selective(P, yk, cfg)
    fixed_k = len({len(it.options) for it in items}) == 1
    levels = len(items[0].options) if fixed_k else None
    ordinal = _ordinal_score(cfg, task, levels, P, yk)
    costs = _realised_costs(P, yk, cfg) if fixed_k else {}

    # 6. latency and tokens ----------------------------------------------------------------
    say("typed: latency grid")
    states = [it.prompt for it in items[: max(1, cfg.latency_states)]]
    latency = latency_grid(
        backend, states, items[0].options, cfg.options_grid, cfg.questions_grid, cfg.seed
    )

    summary: dict[str, Any] = {
        "bench": "typed",
        "target": backend.describe(),
        "task": task,
        "split": cfg.split,
        "n_items": len(items),
        "question_type": kind,
        "seed": cfg.seed,
        "accuracy": accuracy,
        "calibration": calibration,
        "selective": selective,
        "ordinal": ordinal,
        "costs": costs,
        "latency": latency,
        "host": {"cpu": cpu_name(), "threads": cfg.threads},
        "wall_s": time.perf_counter() - t_start,
    }
    out = Path(cfg.out) if cfg.out else Path("runs") / "bench" / slug(cfg) / "typed"
    figs = typed_figures(summary, P, yk, sims)
    title = f"Typed bench: {task}"
    paths = write_report(out, summary, typed_markdown(summary), figs, title)
    summary["paths"] = {k: str(p) for k, p in paths.items()}
    return summary


# ------------------------------------------------------------------------- report
def typed_markdown(s: dict[str, Any]) -> str:
    """The report's Markdown from a summary of :func:`run_typed`."""
    t, a, c, sel = s["target"], s["accuracy"], s["calibration"], s["selective"]
    who = t.get("checkpoint") or f"{t.get('url')} (model {t.get('model')})"
    lines = [
        f"# Typed bench: {s['task']} ({s['split']}, {s['n_items']} items)\n",
        f"Target: `{who}`, {t['where']}, mode {t['mode']}, m = {t['m']}, "
        f"{s['question_type']} questions, seed {s['seed']}. CPU: {s['host']['cpu']}; "
        f"wall time {s['wall_s']:.1f} s.\n",
        "## Accuracy over rule-made variants\n",
        f"Median {fmt(a['median'])}, range [{fmt(a['min'])}, {fmt(a['max'])}] over "
        f"{a['n_variants']} variants (paraphrase x option order); "
        f"{fmt(a['same_decision_all_variants'])} of the items get the same decision on every "
        f"variant; {a['refused_requests']} requests refused.\n",
        table(
            ["paraphrase", "order", "accuracy"],
            [[r["paraphrase"], r["order"], fmt(r["accuracy"])] for r in a["per_variant"]],
        ),
        "## Calibration (canonical variant)\n",
        table(
            ["ECE", "floor mean", "floor 95% range", "inside floor", "Brier", "NLL"],
            [
                [
                    fmt(c["ece"], 4),
                    fmt(c["floor_mean"], 4),
                    f"[{fmt(c['floor_low'], 4)}, {fmt(c['floor_high'], 4)}]",
                    "yes" if c["inside"] else "no",
                    fmt(c["brier"], 4),
                    fmt(c["nll"], 4),
                ]
            ],
        ),
        f"\nThe floor: ECE of a perfectly calibrated predictor with the same confidences "
        f"(labels drawn as Bernoulli(max p), {c['n_sim']} simulations, {c['n_bins']} bins).\n",
        "## Selective prediction\n",
        table(
            ["accuracy", "AURC", f"Cov@{sel['eps']:g}"],
            [[fmt(sel["accuracy"]), fmt(sel["aurc"], 4), fmt(sel["cov_at_eps"])]],
        ),
        "## Ordinal score (RPS)\n",
        (
            f"RPS {fmt(s['ordinal']['rps'], 4)} over {s['ordinal']['levels']} levels "
            "(lower is better).\n"
            if s["ordinal"]["applicable"]
            else f"Not applicable: {s['ordinal']['reason']}.\n"
        ),
        "## Realised cost per decision\n",
        _cost_section(s["costs"]),
        "\n## Latency and tokens per decision\n",
        *_latency_lines(s["latency"]),
        "\nOne request at a time (median over the states); tokens from `usage`.\n",
    ]
    return "\n".join(lines)


def _cost_section(costs: dict[str, Any]) -> str:
    """The report's realised-cost table from the summary's ``"costs"`` (one row per cost
    matrix: cost by expected cost and by top answer, their difference with its 95% CI,
    the share of decisions changed), or a note when none was computed."""
    if not costs:
        return "Not computed: options differ in number across items.\n"
    rows = []
    for name, r in costs.items():
        d = r["diff"]
        rows.append(
            [
                f"{name}: {r['description']}",
                fmt(r["expected_cost"]),
                fmt(r["top_answer"]),
                f"{d['diff']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]",
                fmt(r["changed"]),
            ]
        )
    head = ["cost matrix", "by expected cost", "top answer", "difference [95% CI]"]
    return table(head + ["decisions changed"], rows)


def _latency_lines(latency: Sequence[dict[str, Any]]) -> list[str]:
    """The report's latency table from the summary's ``"latency"`` rows
    (:func:`latency_grid`: one row per options x questions cell) and, per option count
    with a refused cell, one line quoting its first error (cut to 160 characters)."""
    rows, refused = [], {}
    for r in latency:
        if r["ok"]:
            rows.append(
                [
                    r["options"],
                    r["questions"],
                    fmt(r["latency_ms"], 1),
                    fmt(r["latency_ms_per_decision"], 1),
                    fmt(r["input_tokens_per_decision"], 1),
                    fmt(r["output_tokens_per_decision"], 1),
                ]
            )
        else:
            refused.setdefault(r["options"], r["error"])
    head = ["options", "questions", "ms / request", "ms / decision", "in tok / dec"]
    lines = [table([*head, "out tok / dec"], rows)]
    lines += [f"\n{k} options: refused ({err[:160]})." for k, err in refused.items()]
    return lines


def typed_figures(
    s: dict[str, Any], probs: np.ndarray, labels: np.ndarray, sims: np.ndarray
) -> dict[str, Any]:
    """The report's plotly figures: accuracy per variant, reliability diagram, the ECE
    noise floor, risk-coverage, realised costs, latency and tokens per decision."""
    import plotly.graph_objects as go

    from rlcd_lab.drawing.plots import reliability_diagram, risk_coverage_figure

    figs: dict[str, Any] = {}
    a = s["accuracy"]
    fig = go.Figure()
    for order in a["by_order"]:
        rows = [r for r in a["per_variant"] if r["order"] == order]
        fig.add_bar(x=[r["paraphrase"] for r in rows], y=[r["accuracy"] for r in rows], name=order)
    fig.add_hline(y=a["median"], line={"dash": "dash"}, annotation_text="median")
    fig.update_layout(title="Accuracy per variant", yaxis_title="accuracy", barmode="group")
    figs["accuracy"] = fig
    figs["reliability"] = reliability_diagram(probs, labels, s["calibration"]["n_bins"])
    c = s["calibration"]
    fig = go.Figure(go.Histogram(x=sims, nbinsx=40, name="calibrated predictor"))
    fig.add_vline(x=c["ece"], line={"color": "red"}, annotation_text=f"model {c['ece']:.4f}")
    for q in ("floor_low", "floor_high"):
        fig.add_vline(x=c[q], line={"dash": "dot", "color": "gray"})
    fig.update_layout(
        title="ECE vs the noise floor (95% range dotted)", xaxis_title="ECE", yaxis_title="count"
    )
    figs["ece_floor"] = fig
    conf, correct = metrics.confidence_and_correct(probs, labels)
    figs["risk_coverage"] = risk_coverage_figure(
        {"canonical": (conf, correct)}, eps=s["selective"]["eps"]
    )
    if s["costs"]:
        names = list(s["costs"])
        fig = go.Figure()
        for rule in ("expected_cost", "top_answer"):
            fig.add_bar(x=names, y=[s["costs"][n][rule] for n in names], name=rule)
        fig.update_layout(title="Realised cost per decision (lower is better)", barmode="group")
        figs["costs"] = fig
    ok = [r for r in s["latency"] if r["ok"]]
    if ok:
        for key, title in (
            ("latency_ms", "Latency per request (ms)"),
            ("tokens_per_decision", "Tokens per decision (input + output)"),
        ):
            fig = go.Figure()
            for k in sorted({r["options"] for r in ok}):
                rows = [r for r in ok if r["options"] == k]
                fig.add_scatter(
                    x=[r["questions"] for r in rows], y=[r[key] for r in rows], name=f"K = {k}"
                )
            fig.update_layout(title=title, xaxis_title="questions per request", xaxis_type="log")
            figs[key] = fig
    return figs
