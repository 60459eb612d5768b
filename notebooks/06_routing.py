# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     notebook_metadata_filter: -jupytext.text_representation
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 6. Routing: from calibrated probabilities to automated decisions
#
# A calibrated decision model earns its keep when software acts on its confidence:
# decide automatically when it is sure, escalate the rest. This notebook turns
# probabilities into decisions three ways:
#
# 1. **A confidence threshold at an error budget.** Choose the threshold on dev so that
#    the decided items have error `<= eps`, then see what it does on test: how many
#    items get decided (coverage) and at what error.
# 2. **Asymmetric costs.** When a false "yes" costs ten times a false "no", and a human
#    review costs something too, the Bayes decision under the model's probabilities is
#    the cheapest policy, *if* the probabilities are calibrated.
# 3. **An AutoThink-style cascade.** Answer directly (no rationale, no generated tokens)
#    when the direct readout is confident, reason only when it is not; compare the
#    tokens spent with the accuracy obtained.
#
# Where the numbers come from: sections 1-2 read the eval dumps of the shipped `verify`
# runs (`rlcd_lab.files.assets.shipped_runs()`, single query) with
# `rlcd_lab.reports.results.load_run`, which fits the temperature on dev. Section 3 runs
# the shipped base checkpoints (`assets/checkpoints/base-verify`, and `base-facts` where
# reasoning does not help) in both modes on the dev and test splits, scored with
# `rlcd_lab.reports.results.from_rows` (T fitted on dev). Section 4 reads the shipped
# `verify` reproduction's RLCR runs (`assets/results/verify/summary.json` and the RLCR
# test dumps) and the shipped bench reports (`assets/results/bench/`,
# `rlcd_lab.files.assets.bench_reports()`). Nothing is trained. The routing math lives in
# `rlcd_lab.math.routing` (tested in `tests/test_tutorial.py`).

# %%
# ruff: noqa: E402  (the settings below must come before the imports)
import os
import warnings

os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars in the notebook output
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' bars too
warnings.filterwarnings("ignore", message="IProgress not found")

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
import torch
from IPython.display import display

from rlcd_lab import metrics
from rlcd_lab.classroom import tutorial
from rlcd_lab.drawing import plots
from rlcd_lab.evaluate import run_eval
from rlcd_lab.files import assets
from rlcd_lab.files.io import read_jsonl
from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.math import routing
from rlcd_lab.reports import report, results
from rlcd_lab.tasks import load_task_items

pio.renderers.default = tutorial.plotly_renderer()  # JupyterLab's; none as a script
torch.set_num_threads(1)

SCALE = tutorial.get_scale()
SIZES = {  # dev / test items for the cascade (section 3), and its tasks
    "ci": dict(dev=100, test=150, tasks=("verify", "facts")),
    "default": dict(dev=200, test=400, tasks=("verify", "facts")),
    "paper": dict(dev=100, test=150, tasks=("verify", "facts")),
}[SCALE]
EPS = metrics.DEFAULT_EPS  # the error budget of Cov@eps (the paper uses 5% on GSM8K-Verify)
print(f"SCALE = {SCALE}: {SIZES}")

# %% [markdown]
# ## 1. A confidence threshold at an error budget
#
# For each shipped run: the single-query test probabilities after temperature scaling
# (T fitted on dev). `Cov@5%` is the oracle number of Table 1 (the largest
# top-confidence share of *test* items with observed error `<= 5%`). A deployed system
# does not see test labels; it fixes a threshold beforehand. Two ways to fix it on dev:
#
# * **labelled dev**: the lowest threshold whose decided dev items have observed error
#   `<= eps` (`routing.threshold_for_risk(conf, correct, eps)`);
# * **label-free**: the lowest threshold whose decided items have *predicted* error
#   `mean(1 - confidence) <= eps` (`routing.threshold_for_risk(conf, None, eps)`); this
#   trusts the calibration.

# %%
runs = tutorial.discover_runs(assets.shipped_runs(), task="verify")
group = tutorial.largest_group(runs)  # one seed: one run per variant
runs = [i for i in runs if i["group"] == group]
data = {}
for info in runs:
    r = results.load_run(info["path"], eps=EPS)
    if not r.fitted:  # no dev dump: neither T nor a threshold can be fixed beforehand
        print(f"assets/{info['name']}: T not fitted (no dev dump); left out")
        continue
    data[info["name"]] = dict(
        variant=info["variant"],
        method=info["method"],
        T=r.T,
        p_test=r.scaled,
        y_test=r.labels,
        raw_test=r.probs(calibrated=False),
        p_dev=r.dev_probs(),
        y_dev=r.dev_labels,
    )
print(f"shipped verify runs of one seed ({group}):", ", ".join(f"assets/{n}" for n in data))

rows = []
for d in data.values():
    c_test, ok_test = metrics.confidence_and_correct(d["p_test"], d["y_test"])
    c_dev, ok_dev = metrics.confidence_and_correct(d["p_dev"], d["y_dev"])
    row = {"run": d["variant"], "T": d["T"]}
    row["test Cov@5% (oracle)"] = metrics.coverage_at_risk(c_test, ok_test, EPS)
    for how, labels in (("labelled dev", ok_dev), ("label-free", None)):
        t = routing.threshold_for_risk(c_dev, labels, EPS)
        r = routing.selective_risk(c_test, ok_test, t)
        row[f"{how}: threshold"] = t
        row[f"{how}: test coverage"] = r["coverage"]
        row[f"{how}: test risk"] = r["risk"]
    rows.append(row)
budget = pd.DataFrame(rows).set_index("run")
display(budget.round(3))

# %%
best = budget["label-free: test coverage"].idxmax()
r = budget.loc[best]
print(
    f"With a threshold fixed on dev without labels, '{best}' decides "
    f"{r['label-free: test coverage']:.0%} of the test items automatically, at an observed "
    f"error of {r['label-free: test risk']:.1%} "
    + ("(within" if r["label-free: test risk"] <= EPS else "(above")
    + f" the {EPS:.0%} budget)."
)
over = budget.index[budget["label-free: test risk"] > EPS].tolist()
print(
    "Runs whose label-free threshold overshoots the budget on test: "
    + (", ".join(over) if over else "none")
    + ". A label-free threshold is only as good as the calibration it trusts."
)

# %% [markdown]
# The risk-coverage curves behind these numbers (test, after temperature scaling).
# Lower is better; a curve that stays under the dotted 5% line for longer decides more.

# %%
plots.risk_coverage_figure(
    {d["variant"]: metrics.confidence_and_correct(d["p_test"], d["y_test"]) for d in data.values()},
    eps=EPS,
    oracle="none",
    title="Risk-coverage on verify test (shipped runs, after temperature scaling)",
).show()

# %% [markdown]
# ## 2. Asymmetric costs and the option to escalate
#
# `verify` asks whether a proposed result is right: answering `Y` accepts it, `N`
# rejects it. Suppose accepting a wrong result costs `c_FA`, rejecting a right one costs
# 1, and escalating to a human costs 0.5 whatever the truth. With probabilities `p`, the
# expected cost of each action is `sum_y p_y cost[a, y]` and the Bayes policy takes the
# cheapest (`routing.bayes_actions`). With calibrated `p` this minimises the realised
# cost; with overconfident `p` it escalates too little. Slide `c_FA`.

# %%
c_fa_values = [1, 2, 5, 10, 20, 50]
ESCALATE = 0.5


def costs_for(c_fa):
    return routing.decision_cost_matrix(2, [[0.0, c_fa], [1.0, 0.0]], escalate=ESCALATE)


cost_rows = []
for c_fa in c_fa_values:
    cost = costs_for(c_fa)
    for d in data.values():
        for probs_kind, probs in (("TS", d["p_test"]), ("raw", d["raw_test"])):
            acts = routing.bayes_actions(probs, cost)
            cost_rows.append(
                {
                    "c_FA": c_fa,
                    "run": d["variant"],
                    "probs": probs_kind,
                    "cost per item": routing.realized_costs(acts, d["y_test"], cost).mean(),
                    "escalated": float((acts == 2).mean()),
                }
            )
cost_df = pd.DataFrame(cost_rows)
frames = []
for c_fa in c_fa_values:
    sub = cost_df[cost_df["c_FA"] == c_fa]
    frames.append(
        [
            go.Bar(
                x=sub[sub["probs"] == kind]["run"],
                y=sub[sub["probs"] == kind]["cost per item"],
                name=f"{kind} probabilities",
                marker={"color": plots.COLORS[i]},
            )
            for i, kind in enumerate(("TS", "raw"))
        ]
    )
fig = tutorial.slider_figure(
    frames,
    [str(c) for c in c_fa_values],
    prefix="cost of a false accept c_FA = ",
    active=3,
    title="Realised cost per test item of the Bayes policy (lower is better)",
)
plots.category_ticks(fig)  # horizontal run names, the slider below them
plots.legend_hline(fig, ESCALATE, f"always escalate (cost {ESCALATE:g})")
fig.update_layout(barmode="group", yaxis_title="mean realised cost")
fig.show()

pivot = cost_df.pivot_table(index=["run", "probs"], columns="c_FA", values="cost per item")
display(pivot.round(3))

# %%
c_fa = 10
sub = cost_df[(cost_df["c_FA"] == c_fa) & (cost_df["probs"] == "TS")].set_index("run")
cheapest = sub["cost per item"].idxmin()
print(
    f"At c_FA = {c_fa}: the cheapest policy is '{cheapest}' with TS probabilities, "
    f"{sub.loc[cheapest, 'cost per item']:.3f} per item (escalating "
    f"{sub.loc[cheapest, 'escalated']:.0%} of the items), against {ESCALATE} for "
    "escalating everything."
)
c_hi = max(c_fa_values)
print(f"At c_FA = {c_hi}, temperature scaling changes the realised cost per item (raw -> TS):")
for d in data.values():
    pair = cost_df[(cost_df["c_FA"] == c_hi) & (cost_df["run"] == d["variant"])]
    raw_c = float(pair[pair["probs"] == "raw"]["cost per item"].iloc[0])
    ts_c = float(pair[pair["probs"] == "TS"]["cost per item"].iloc[0])
    change = "lower" if ts_c < raw_c - 1e-12 else "higher" if ts_c > raw_c + 1e-12 else "same"
    print(f"  {d['variant']:<10} fitted T {d['T']:6.2f}: {raw_c:.3f} -> {ts_c:.3f} ({change})")

# %% [markdown]
# ## 3. An AutoThink-style cascade: reason only when needed
#
# A reasoning model can also answer *directly*: the prompt ends with the bare marker
# and we read `u` right away (`evaluate.run_eval(mode="direct")`), generating no tokens.
# The cascade answers directly when the direct readout's confidence is at least `t`,
# and writes a rationale (`mode="reason"`) only for the others. Both readouts are
# temperature-scaled with their own T fitted on dev, so that "confidence >= t" means
# the same thing for every item.
#
# We sweep `t` and plot accuracy against the mean number of generated rationale tokens
# per item. `t = 0` is "always direct", `t > 1` "always reason".

# %%
thresholds = np.concatenate([[0.0], np.linspace(0.5, 1.0, 51), [1.01]])
cascades = {}
for task in SIZES["tasks"]:
    model, tok, meta = load_checkpoint(assets.shipped_checkpoints()[f"checkpoints/base-{task}"])
    dev_items = load_task_items(task, "dev")[: SIZES["dev"]]
    test_items = load_task_items(task, "test")[: SIZES["test"]]
    out = {}
    for mode in ("direct", "reason"):
        dev_rows = run_eval(model, tok, dev_items, mode=mode, max_new_tokens=48, seed=1)
        test_rows = run_eval(model, tok, test_items, mode=mode, max_new_tokens=48, seed=2)
        res = results.from_rows(test_rows, dev_rows)  # T fitted on dev
        out[mode], out[f"T_{mode}"], out[f"{mode}_raw"] = res.scaled, res.T, res.probs(False)
        out[f"{mode}_dev"] = res.dev_probs()
        out[f"tokens_{mode}"] = np.array([r["lengths"][0] for r in test_rows], float)
        out[f"tokens_{mode}_dev"] = np.array([r["lengths"][0] for r in dev_rows], float)
    out["y"] = np.array([it.label for it in test_items])
    out["y_dev"] = np.array([it.label for it in dev_items])
    out["curve"] = routing.cascade_curve(
        out["direct"], out["reason"], out["y"], out["tokens_reason"], thresholds
    )
    out["curve_dev"] = routing.cascade_curve(
        out["direct_dev"], out["reason_dev"], out["y_dev"], out["tokens_reason_dev"], thresholds
    )
    cascades[task] = out
    acc_d = metrics.accuracy(out["direct"], out["y"])
    acc_r = metrics.accuracy(out["reason"], out["y"])
    print(
        f"base-{task}: direct accuracy {acc_d:.3f} (T {out['T_direct']:.2f}), "
        f"after reasoning {acc_r:.3f} (T {out['T_reason']:.2f}, "
        f"{out['tokens_reason'].mean():.1f} tokens per item)"
    )
    # the ends of the curve are the two pure modes
    assert abs(out["curve"]["accuracy"][0] - acc_d) < 1e-12
    assert abs(out["curve"]["accuracy"][-1] - acc_r) < 1e-12

# %%
fig = go.Figure()
for i, (task, out) in enumerate(cascades.items()):
    c = out["curve"]
    fig.add_trace(
        go.Scatter(
            x=c["mean_tokens"],
            y=c["accuracy"],
            mode="lines+markers",
            name=f"base-{task} cascade",
            marker={"color": plots.COLORS[i], "size": 5},
            hovertext=[
                f"t = {t:.2f}, reasons on {f:.0%}"
                for t, f in zip(c["threshold"], c["reason_fraction"], strict=True)
            ],
        )
    )
    for j, label in ((0, "always direct"), (-1, "always reason")):
        fig.add_trace(
            go.Scatter(
                x=[c["mean_tokens"][j]],
                y=[c["accuracy"][j]],
                mode="markers+text",
                text=[label],
                textposition="top center",
                marker={"color": plots.COLORS[i], "size": 12, "symbol": "diamond"},
                showlegend=False,
            )
        )
fig.update_layout(
    title="Cascade: accuracy vs generated tokens per item (test; threshold swept)",
    xaxis_title="mean rationale tokens generated per item",
    yaxis_title="accuracy",
)
fig.show()

# %% [markdown]
# Pick the threshold on **dev**: the one with the fewest tokens among those within one
# point of the best dev accuracy. Then report it on test, and check that the
# cascade's accuracy is exactly the mix of the two modes on the items each one answered.

# %%
summary = []
for task, out in cascades.items():
    cd = out["curve_dev"]
    ok = np.flatnonzero(cd["accuracy"] >= cd["accuracy"].max() - 0.01)
    j = int(ok[np.argmin(cd["mean_tokens"][ok])])
    t = float(thresholds[j])
    probs, routed = routing.cascade(out["direct"], out["reason"], t)
    y = out["y"]
    f = routed.mean()
    acc_kept = (out["direct"][~routed].argmax(1) == y[~routed]).mean() if f < 1 else 0.0
    acc_routed = (out["reason"][routed].argmax(1) == y[routed]).mean() if f > 0 else 0.0
    acc = metrics.accuracy(probs, y)
    assert abs(acc - ((1 - f) * acc_kept + f * acc_routed)) < 1e-12
    c = out["curve"]
    summary.append(
        {
            "task": task,
            "threshold (dev)": t,
            "reasons on": f,
            "accuracy direct": c["accuracy"][0],
            "accuracy reason": c["accuracy"][-1],
            "accuracy cascade": acc,
            "tokens reason": c["mean_tokens"][-1],
            "tokens cascade": float(np.where(routed, out["tokens_reason"], 0).mean()),
        }
    )
summary = pd.DataFrame(summary).set_index("task")
display(summary.round(3))
for task, s in summary.iterrows():
    saved = 1 - s["tokens cascade"] / s["tokens reason"] if s["tokens reason"] else 0.0
    best_pure = max(s["accuracy direct"], s["accuracy reason"])
    verdict = (  # within half a point counts as a tie
        "beats both pure modes"
        if s["accuracy cascade"] > best_pure + 0.005
        else "matches the better pure mode"
        if s["accuracy cascade"] >= best_pure - 0.005
        else "loses accuracy against the better pure mode"
    )
    print(
        f"{task}: the cascade reasons on {s['reasons on']:.0%} of the items, saves "
        f"{saved:.0%} of the rationale tokens of always reasoning, and {verdict} "
        f"({s['accuracy cascade']:.3f} vs direct {s['accuracy direct']:.3f}, "
        f"reason {s['accuracy reason']:.3f})."
    )

# %% [markdown]
# How to read this: the cascade can only save tokens on items whose *direct* readout is
# confident and right. On `verify` (reasoning is computation) the base model's direct
# readout is close to chance (see its accuracy and fitted T above), so a good threshold
# sends most or all items to reasoning. On `facts` the base model's reasoning *hurts*
# (it commits to one half-remembered value), so the best threshold may keep every
# direct answer. Neither base model has the mixed profile (sure of some items
# directly, unsure of others) that makes a cascade pay off on both axes; the printed
# verdicts above say which case each task is in. Either way, the decision of *when to
# think* is made from a confidence, which only works if that confidence is calibrated.

# %% [markdown]
# ## 4. Neighbours: stated confidence (RLCR), a report card, and attacks
#
# Routing trusts a confidence. Three neighbours of RLCD ask where that confidence comes
# from and how far it can be trusted:
#
# * **RLCR** trains the model to *state* its confidence after its answer (here one digit
#   after `Confidence:`), rewarded with correctness plus the Brier score of what it
#   stated (`rlcd-lab train rlcr`; `rlcd_lab.reader.verbal`). The shipped `verify`
#   reproduction runs it at RLCD's budget; we score both its readout and its stated
#   confidence, after temperature scaling.
# * **A report card** (`rlcd-lab bench typed`): accuracy over rule-made rewordings and
#   option orders, and ECE beside the range a perfectly calibrated model with the same
#   confidences reaches by chance.
# * **Attacks** (`rlcd-lab bench attack`): one edit to a request, and how often the
#   decision flips, beyond the flips of identical re-runs.

# %%
shipped = assets.shipped_runs()
verify = report.load_summaries(assets.ASSETS / "results")["verify"]
rows_of = {
    "reinforce": "RLCD (two-stage)",
    "grpo-matched": "GRPO",
    "rlcr-matched": "RLCR: its readout",
    "rlcr-stated-matched": "RLCR: its stated confidence",
}
keys = ("accuracy", "brier", "aurc", "cov_at_eps", "T")
neighbours = pd.DataFrame(
    {label: {k: verify["runs"][run][k]["mean"] for k in keys} for run, label in rows_of.items()}
).T
display(neighbours.round(3))

stated = [
    row
    for seed in verify["seeds"]
    for row in read_jsonl(
        shipped[f"results/verify/seed-{seed}/rlcr-matched"] / "eval" / "test.jsonl"
    )
]
conf = np.array([r["stated_confidence"] for r in stated])
right = np.array([r["stated_answer"] == r["label"] for r in stated])
mode = float(pd.Series(conf).mode()[0])
print(
    f"RLCR's stated confidence on {len(stated)} test answers (3 seeds): mean "
    f"{conf[right].mean():.3f} when right, {conf[~right].mean():.3f} when wrong; "
    f"{np.mean(conf == mode):.0%} state {mode:.2f}"
)
assert 0 <= conf.min() and conf.max() <= 1

# %% [markdown]
# How to read this: a stated confidence can be calibrated *on average* (its fitted T is
# near 1, like RLCD's readout) and still say almost nothing about which answers are
# wrong: nearly every answer here states the same digit, about as often when wrong as
# when right, so its AURC and Cov@eps come from how the ties happen to fall. Compare the
# AURC column with RLCD's readout. Routing needs the ranking, not only the average.

# %%
cards = assets.bench_reports()
card = cards["verify-reinforce/typed"]
acc, cal = card["accuracy"], card["calibration"]
print(
    f"report card, {card['target']['checkpoint']}: accuracy median {acc['median']:.3f}, range "
    f"[{acc['min']:.3f}, {acc['max']:.3f}] over {acc['n_variants']} rule-made variants; "
    f"ECE {cal['ece']:.3f} against a calibrated model's [{cal['floor_low']:.3f}, "
    f"{cal['floor_high']:.3f}]: {'inside' if cal['inside'] else 'outside'} the noise floor"
)
attack = cards["verify-reinforce/attack"]
ran = {name: a for name, a in attack["attacks"].items() if a["run"]}
fig = go.Figure(
    go.Bar(
        x=list(ran),
        y=[a["flip"]["diff"] for a in ran.values()],
        error_y=dict(
            type="data",
            symmetric=False,
            array=[a["flip"]["ci_high"] - a["flip"]["diff"] for a in ran.values()],
            arrayminus=[a["flip"]["diff"] - a["flip"]["ci_low"] for a in ran.values()],
        ),
    )
)
fig.update_layout(
    title=f"Decisions flipped beyond re-runs (floor {attack['floor_flip_rate']:.3f}), 95% CI",
    yaxis_title="flip rate - re-run flip rate",
    xaxis_title="single edit to the request",
)
plots.apply_theme(fig)
fig.show()

# %% [markdown]
# The tiny model never read prose: any sentence appended to its state (the neutral
# `neutral_text` control as much as an opinion or an injected command) moves its readout,
# while rewording the sum or reordering the options stays near the re-run floor. A
# decision service has to measure this for its own model; `rlcd-lab bench attack --url`
# runs the same suite against a server, where a field outside the schema is refused.

# %% [markdown]
# ## Commands at paper scale
# The cascade for a real model: evaluate both modes on dev and test, then run
# section 3 on the dumps.

# %%
if SCALE == "paper":
    print("rlcd-lab data split data/gsm8k-verify.jsonl --dev 200 --test 500  # once")
    for split in ("dev", "test"):
        for mode in ("direct", "reason"):
            print(
                f"rlcd-lab eval --checkpoint runs/stage2/final --task data/gsm8k-verify.jsonl "
                f"--split {split} --mode {mode} --max-new-tokens 1024 "
                f"--out runs/cascade/{mode}-{split}.jsonl"
            )
else:
    print("(set RLCD_SCALE=paper to print the commands for a real model)")

# %% [markdown]
# ## Exercises
#
# 1. In section 2, derive the escalation band of `p_Y` by hand: with symmetric errors
#    (`c_FA = 1`), does the Bayes policy ever escalate? At `c_FA = 10`, for which `p_Y`
#    does it escalate, and what share of the test items of the RLCD run (`reinforce`,
#    temperature-scaled probabilities) does it escalate?
# 2. A label-free threshold (section 1) needs confident direct readouts: the lowest `t`
#    whose directly answered dev items have predicted error `mean(1 - confidence) <= 5%`
#    does not exist for either base model. Without labels, the cascade can still predict
#    its own accuracy: each item is right with probability the confidence of the readout
#    the cascade uses for it. At the threshold chosen on dev above (`summary`), what test
#    accuracy does each task's cascade predict, and how does it compare with the
#    accuracy it gets?
# 3. Run the cascade with the *raw* (not temperature-scaled) direct probabilities. The
#    base model's direct readout on `facts` has T close to 1.3; on `verify` it is constant
#    (its fitted T sits at the fitting bound). By how much does each task's cascade
#    accuracy change at most over the thresholds, and why?
#
# Put your answers in the next cell (replace each `None`) and run it: the `classroom`
# checks compute the right answers themselves (with `rlcd_lab.math.routing`, on this
# notebook's `data`, `summary` and `cascades`) and say whether yours match.

# %%
from rlcd_lab.classroom import exercises

band = None  # 1: the p_Y where the Bayes policy escalates at c_FA = 10, as (low, high)
escalated = None  # 1: the share of reinforce's test items it escalates at c_FA = 10
predicted_accuracy = None  # 2: {task: the cascade's predicted test accuracy}
accuracy_change = None  # 3: {task: largest |accuracy change| over the thresholds}
print("1:", exercises.check_escalation_band(band, escalated, data, c_fa=10, escalate=ESCALATE))
print(
    "2:",
    exercises.check_label_free_accuracy(cascades, summary["threshold (dev)"], predicted_accuracy),
)
print("3:", exercises.check_raw_cascade(cascades, thresholds, accuracy_change))
