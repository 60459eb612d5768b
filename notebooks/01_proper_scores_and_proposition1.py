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
# # 1. Proper scoring rules, the readout, and Proposition 1
#
# RLCD scores the answer distribution a reasoning model commits to after its own
# rationale. This notebook builds that up from scratch:
#
# 1. **Proper scoring rules.** Why Brier and log scores reward honest probabilities and
#    the linear score does not.
# 2. **The readout.** `u(x, r) = softmax(logits[option tokens])` right after `Answer:`,
#    read from a shipped tiny checkpoint.
# 3. **Proposition 1.** `J(p, q) = E_r J(u(r), q) + E_r ||u(r) - p||^2`: scoring the
#    *mixture* `p` of several rationales pays a bonus for disagreement. We check it to
#    float rounding, first on random readouts, then on readouts the model produced.
# 4. **The RLVR corollary.** RLVR (reward 1 when a sampled answer is right) is the
#    mixture objective without its diversity term, so its optimum is the mode, not `q`.
#
# Where the numbers come from: sections 1, 3a and 4 are exact computations on random
# inputs. Sections 2 and 3b run the shipped checkpoints `assets/checkpoints/base-verify`
# (the base reasoner) and the shipped stage-1 (`calibrate`) run on the `verify` test
# split. Nothing is trained here.
#
# `SCALE` (environment variable `RLCD_SCALE`): `ci` (under a minute), `default` (more
# items and samples), `paper` (print the commands for a real model, run the rest at `ci`
# size).

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
from plotly.subplots import make_subplots

from rlcd_lab.classroom import tutorial
from rlcd_lab.decomposition import sampled_answer_decomposition, variance_decomposition
from rlcd_lab.drawing import plots
from rlcd_lab.evaluate import run_eval
from rlcd_lab.files import assets
from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.scoring import expected_score
from rlcd_lab.tasks import load_task_items

pio.renderers.default = tutorial.plotly_renderer()  # JupyterLab's; none as a script
torch.set_num_threads(1)

SCALE = tutorial.get_scale()
SIZES = {  # items of the verify test split and rationales per item
    "ci": dict(items=12, m=8),
    "default": dict(items=100, m=8),
    "paper": dict(items=12, m=8),
}[SCALE]
print(f"SCALE = {SCALE}: {SIZES}")

# %% [markdown]
# ## 1. Proper scoring rules
#
# A forecaster reports a distribution `u` over K outcomes; the outcome `Y` then happens
# and the forecaster is paid `J(u, Y)` (higher is better). If the truth is `Y ~ q`, the
# expected payment is `J(u, q) = E_{Y~q} J(u, Y)`. The rule is **strictly proper** when
# that expectation is uniquely maximised by reporting `u = q`: honesty is the only
# optimal policy.
#
# | rule | `J(u, y)` | `J(u, q)` |
# |---|---|---|
# | Brier (shifted, negated) | `2 u_y - ‖u‖²` | `2 u.q - ‖u‖²` |
# | log | `log u_y` | `sum_k q_k log u_k` |
# | spherical | `u_y / ‖u‖` | `u.q / ‖u‖` |
# | linear (**not** proper) | `u_y` | `u.q` |
#
# For Brier the proof is one line: `J(u, q) = ||q||^2 - ||u - q||^2`, a paraboloid with
# its top at `u = q`. The linear score is linear in `u`, so its maximum sits at a vertex
# of the simplex: it pays you to put all your mass on the most likely outcome. (It is
# also the expected RLVR reward of an answer sampled from `u`; we come back to this in
# section 4.)
#
# The plot shows, for a binary outcome with `P(Y = 1) = q`, the expected score of the
# report `u = (1 - p, p)` as a function of `p`, each rule rescaled to `[0, 1]` so the
# four fit on one axis (the *location* of the peak is what matters). Move the slider.

# %%
RULES = ("brier", "log", "spherical", "linear")
grid = np.linspace(0.001, 0.999, 999)
q_values = np.round(np.arange(0.1, 0.91, 0.1), 2)
colors = dict(brier="#636efa", log="#EF553B", spherical="#00cc96", linear="#ab63fa")


def rescaled(v):
    span = v.max() - v.min()
    return (v - v.min()) / span if span > 0 else np.ones_like(v)  # a flat line: all optimal


frames = []
shown = grid[::5]  # 200 points a curve: smooth to the eye, a fifth of the notebook's size
for q1 in q_values:
    traces = []
    for rule in RULES:
        v = tutorial.binary_expected_scores(q1, shown, rule)
        traces.append(go.Scatter(x=shown, y=rescaled(v), name=rule, line={"color": colors[rule]}))
    traces.append(
        go.Scatter(x=[q1, q1], y=[0, 1.05], mode="lines", name="truth q", line={"dash": "dot"})
    )
    frames.append(traces)
fig = tutorial.slider_figure(
    frames,
    [f"{q:.1f}" for q in q_values],
    prefix="q = P(Y = 1) = ",
    active=2,
    title="Expected score of reporting p when the truth is q (rescaled per rule)",
)
fig.update_layout(xaxis_title="reported p = u_1", yaxis_title="expected score (rescaled)")
fig.show()

# %% [markdown]
# The same on a fine grid, as numbers: the report that maximises each rule's expected
# score. The proper rules recover `q`; the linear rule reports a certainty.

# %%
best = pd.DataFrame(
    {rule: [tutorial.best_report(q1, rule) for q1 in q_values] for rule in RULES},
    index=pd.Index(q_values, name="truth q"),
)
display(best)
for rule in ("brier", "log", "spherical"):
    assert np.allclose(best[rule].to_numpy(), q_values, atol=1e-3), rule
assert set(best["linear"]) <= {0.0, 1.0}

# %% [markdown]
# With more than two options the picture is the same. Here `q = (0.6, 0.3, 0.1)`: the
# Brier expected score over the whole simplex (a ternary plot) peaks at `q`, while the
# linear score's best report is the corner `(1, 0, 0)`.

# %%
q3 = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
n = 60
pts = torch.tensor(
    [(i / n, j / n, (n - i - j) / n) for i in range(n + 1) for j in range(n + 1 - i)],
    dtype=torch.float64,
)
fig = make_subplots(rows=1, cols=2, specs=[[{"type": "ternary"}, {"type": "ternary"}]])
for col, rule in ((1, "brier"), (2, "linear")):
    v = tutorial.expected_toy_score(pts, q3, rule).numpy()
    fig.add_trace(
        go.Scatterternary(
            a=pts[:, 0],
            b=pts[:, 1],
            c=pts[:, 2],
            mode="markers",
            marker={"color": v, "colorscale": "Viridis", "size": 5},
            name=rule,
            hovertext=[f"{x:.3f}" for x in v],
        ),
        row=1,
        col=col,
    )
    top = int(np.argmax(v))
    fig.add_trace(
        go.Scatterternary(
            a=[float(pts[top, 0])],
            b=[float(pts[top, 1])],
            c=[float(pts[top, 2])],
            mode="markers",
            marker={"symbol": "star", "size": 14, "color": "red"},
            name=f"{rule} best report",
        ),
        row=1,
        col=col,
    )
    print(f"{rule:>6}: best report on the grid = {pts[top].numpy().round(3)}")
fig.update_ternaries(aaxis_title="u_0", baxis_title="u_1", caxis_title="u_2")
fig.update_layout(
    title="Expected score over the simplex (brighter = higher) for q = (0.6, 0.3, 0.1): "
    "left Brier, right linear; star = best report",
    showlegend=False,
    margin={"t": 110},
)
fig.show()
brier_best = pts[int(np.argmax(tutorial.expected_toy_score(pts, q3, "brier").numpy()))]
assert torch.allclose(brier_best, q3, atol=1 / n)

# %% [markdown]
# ## 2. The readout on a shipped tiny checkpoint
#
# The tiny world's `verify` task asks "is this proposed sum right?" (`47+38+16=91?`,
# options `Y`/`N`). The shipped base model `base-verify` writes a rationale (adding step
# by step, and sometimes dropping a carry), then `Answer:`. We do not sample the answer:
# we read the next-token distribution over the option tokens, `u`. Below, several
# rationales for one test question, and the readout after each.

# %%
ckpts = assets.shipped_checkpoints()
base, tok, meta = load_checkpoint(ckpts["checkpoints/base-verify"])
items = load_task_items("verify", "test")[: SIZES["items"]]
rows_base = run_eval(base, tok, items, m=SIZES["m"], max_new_tokens=48, seed=0)


def diversity_of(row):
    u = torch.tensor(row["readouts"], dtype=torch.float64)
    return float(variance_decomposition(u, u.mean(0))["diversity"])  # E_r ||u(r) - p||^2


# the question whose rationales disagree most (computed, not chosen by hand)
j = int(np.argmax([diversity_of(r) for r in rows_base]))
demo_item, demo = items[j], rows_base[j]
print(f"question: {demo_item.prompt}   options {demo_item.options}   label {demo['label']}")
display(
    pd.DataFrame(
        {
            "rationale": demo["rationales"],
            "u(Y)": np.array(demo["readouts"])[:, 0].round(4),
            "u(N)": np.array(demo["readouts"])[:, 1].round(4),
        }
    )
)
plots.rationale_bars(
    demo["readouts"],
    labels=demo_item.options,
    texts=demo["rationales"],
    title=f"base-verify: readouts after {SIZES['m']} rationales for {demo_item.prompt}",
).show()

# %% [markdown]
# The base model concludes every rationale with near-certainty: each `u` is almost
# one-hot, so the model's confidence says nothing about whether *this* rationale
# dropped a carry. Its *mixture* `p` (black) is hedged only because the rationales
# disagree.

# %% [markdown]
# ## 3. Proposition 1: the variance decomposition
#
# For readouts `u(r)` of rationales `r ~ pi(. | x)`, their mixture `p = E_r u(r)`, and any
# outcome distribution `q`, the Brier score satisfies
#
# `J(p, q) = E_r J(u(r), q) + E_r ||u(r) - p||^2`.
#
# Proof: `J(u, q) = 2 u.q - ||u||^2` is affine in `u` except for `-||u||^2`, so
# `J(p, q) - E_r J(u(r), q) = E_r ||u(r)||^2 - ||p||^2 = E_r ||u(r) - p||^2`.
#
# ### 3a. On random readouts
# 2000 random problems (K from 2 to 10 options, M from 2 to 16 rationales, random
# readouts and random `q`), in float64: the residual is at the level of float rounding.

# %%
gen = torch.Generator().manual_seed(0)
residuals = []
for _ in range(2000):
    k = int(torch.randint(2, 11, (1,), generator=gen))
    m = int(torch.randint(2, 17, (1,), generator=gen))
    u = torch.distributions.Dirichlet(torch.ones(k, dtype=torch.float64)).sample((m,))
    q = torch.distributions.Dirichlet(torch.ones(k, dtype=torch.float64)).sample()
    d = variance_decomposition(u, q)
    residuals.append(float((d["mixture_score"] - d["mean_score"] - d["diversity"]).abs()))
print(f"max |J(p,q) - E J(u,q) - E||u - p||^2| over 2000 random problems: {max(residuals):.2e}")
assert max(residuals) < 1e-12

# %% [markdown]
# ### 3b. On model-produced readouts
# Now the readouts of real rationales: the base model and the shipped stage-1
# (`calibrate`) model, each with several rationales for each of the first test
# questions, `q` = the one-hot label.

# %%
# the first shipped stage-1 run trained from the base model that ships its checkpoint
stage1 = [
    i
    for i in tutorial.discover_runs(assets.shipped_runs(), task="verify")
    if i["method"] == "calibrate" and i["parent"] is None and (i["path"] / "final").is_dir()
]
calib_name = stage1[0]["name"]
calib, _, _ = load_checkpoint(stage1[0]["path"] / "final")
rows_calib = run_eval(calib, tok, items, m=SIZES["m"], max_new_tokens=48, seed=0)
print(f"stage-1 run: assets/{calib_name}")

table = []
for model_name, rows in (("base-verify", rows_base), ("calibrate", rows_calib)):
    for r in rows:
        u = torch.tensor(r["readouts"], dtype=torch.float64)
        q = torch.nn.functional.one_hot(torch.tensor(r["label"]), u.shape[1]).double()
        d = variance_decomposition(u, q)
        table.append(
            {
                "model": model_name,
                "uid": r["uid"],
                "J(p,q)": float(d["mixture_score"]),
                "E_r J(u,q)": float(d["mean_score"]),
                "E_r ||u-p||^2": float(d["diversity"]),
                "residual": float(d["mixture_score"] - d["mean_score"] - d["diversity"]),
            }
        )
table = pd.DataFrame(table)
display(table.groupby("model")[["J(p,q)", "E_r J(u,q)", "E_r ||u-p||^2"]].mean().round(4))
print(f"max |residual| on model readouts: {table['residual'].abs().max():.2e}")
assert table["residual"].abs().max() < 1e-12

# %%
fig = go.Figure()
for i, (model_name, sub) in enumerate(table.groupby("model")):
    fig.add_trace(
        go.Scatter(
            x=sub["E_r J(u,q)"],
            y=sub["J(p,q)"],
            mode="markers",
            name=model_name,
            marker={"color": plots.COLORS[i], "size": 8},
            hovertext=sub["uid"],
        )
    )
fig.add_trace(go.Scatter(x=[-1, 1], y=[-1, 1], mode="lines", name="no bonus", line={"dash": "dot"}))
fig.update_layout(
    title="Mixture score vs mean per-rationale score (gap = diversity bonus)",
    xaxis_title="E_r J(u(r), q)  (per-rationale objective)",
    yaxis_title="J(p, q)  (mixture objective)",
)
fig.show()

# %%
gap = table.groupby("model")["E_r ||u-p||^2"].mean()
print(
    f"Mean diversity bonus: base {gap['base-verify']:.3f}, calibrate {gap['calibrate']:.3f}. "
    + (
        "The mixture objective pays the base model more for its disagreeing rationales."
        if gap["base-verify"] > gap["calibrate"]
        else "Here the calibrated model's rationales disagree at least as much as the base's."
    )
)

# %% [markdown]
# Every point lies on or above the diagonal: the mixture score is the per-rationale
# score *plus* the disagreement. A policy that randomises its conclusions collects that
# bonus without knowing anything more. The per-rationale objective `E_r J(u(r), q)` has
# no bonus: its optimum is `u(r) = q` for every rationale, so a *single* query is
# calibrated (the paper's Proposition 2).

# %% [markdown]
# ## 4. The RLVR corollary
#
# RLVR samples an answer `a ~ u(r)` and pays 1 if it is right. Write the sampled answer
# as a one-hot readout `e_a`. Then, with `p` the mixture,
#
# * `E J(e_a, q) = 2 p.q - 1`: affine in the RLVR reward `P(a = Y) = p.q`;
# * the diversity term of one-hot readouts is the Gini impurity `1 - ||p||^2`;
# * Proposition 1 gives `J(p, q) = (2 p.q - 1) + (1 - ||p||^2)`: **the calibrated group
#   reward is RLVR plus a Gini bonus**, with coefficient exactly one.
#
# First the identity, exactly and by simulation on the model readouts above.

# %%
u = torch.tensor(demo["readouts"], dtype=torch.float64)
p = u.mean(0)
q = torch.nn.functional.one_hot(torch.tensor(demo["label"]), 2).double()
c = sampled_answer_decomposition(p, q)
print({k: round(float(v), 6) for k, v in c.items()})
assert abs(float(c["mixture_score"] - expected_score(p, q))) < 1e-12

# Monte Carlo: sample a rationale, then an answer from its readout, score the one-hot
draws = 200_000 if SCALE == "default" else 20_000
i = torch.randint(0, u.shape[0], (draws,), generator=gen)
a = torch.multinomial(u[i], 1, generator=gen).squeeze(1)
mc = float(expected_score(torch.nn.functional.one_hot(a, 2).double(), q).mean())
se = float(expected_score(torch.nn.functional.one_hot(a, 2).double(), q).std()) / draws**0.5
print(f"Monte Carlo E J(e_a, q) = {mc:.4f} +- {se:.4f}; exact 2 p.q - 1 = {c['sampled_brier']:.4f}")
assert abs(mc - float(c["sampled_brier"])) < 5 * se + 1e-9

# %% [markdown]
# Now weight the Gini bonus by `lambda`: the objective of a policy whose answer
# distribution is `p` is `(2 p.q - 1) + lambda (1 - ||p||^2)`. RLVR is `lambda = 0`; the
# calibrated mixture objective is `lambda = 1`. For a binary outcome the optimum is
# `p_1 = 1/2 + (2 q_1 - 1) / (2 lambda)`, clipped to `[0, 1]`: for every `lambda < 1` it
# overshoots towards the mode, and RLVR (`lambda = 0`) reports a certainty. Slide
# `lambda`.

# %%
q1 = 0.7
qq = torch.tensor([1 - q1, q1], dtype=torch.float64)
pg = torch.tensor(grid, dtype=torch.float64)
P = torch.stack([1 - pg, pg], -1)
lams = [0.0, 0.25, 0.5, 0.75, 1.0]
frames, rows = [], []
for lam in lams:
    d = sampled_answer_decomposition(P, qq)
    obj = (d["sampled_brier"] + lam * d["gini"]).numpy()
    best_p = float(grid[int(np.argmax(obj))])
    closed = min(1.0, max(0.0, 0.5 + (2 * q1 - 1) / (2 * lam))) if lam > 0 else 1.0
    rows.append({"lambda": lam, "best p_1 (grid)": best_p, "closed form": closed})
    frames.append(
        [
            go.Scatter(x=grid, y=obj, name="objective"),
            go.Scatter(
                x=[best_p],
                y=[obj.max()],
                mode="markers",
                name="optimum",
                marker={"size": 12, "symbol": "star"},
            ),
        ]
    )
fig = tutorial.slider_figure(
    frames,
    [f"{lam:g}" for lam in lams],
    prefix="lambda = ",
    static=[
        go.Scatter(
            x=[q1, q1],
            y=[-1, 1],
            mode="lines",
            name="truth q_1",
            line={"dash": "dot", "color": "gray"},
        )
    ],
    title=f"RLVR + lambda x Gini bonus, truth q_1 = {q1}",
)
fig.update_layout(xaxis_title="p_1 (answer distribution)", yaxis_title="objective")
fig.show()
best_by_lam = pd.DataFrame(rows)
display(best_by_lam)
assert np.allclose(best_by_lam["best p_1 (grid)"], best_by_lam["closed form"], atol=2e-3)
assert abs(best_by_lam.iloc[-1]["best p_1 (grid)"] - q1) < 2e-3  # lambda = 1: p = q
assert best_by_lam.iloc[0]["best p_1 (grid)"] == grid[-1]  # RLVR: the mode, a certainty

# %% [markdown]
# **Takeaways.** Score what the model actually commits to with a strictly proper rule.
# Scoring the mixture of several samples (or, equivalently, RLVR plus a diversity
# bonus) rewards disagreement; RLVR alone rewards the mode, i.e. overconfidence. The
# per-rationale objective is calibrated at its optimum, one query at a time.

# %% [markdown]
# ## Commands at paper scale
# The same readouts and decomposition for a real model (any local HF causal LM, e.g.
# Qwen3-1.7B) on converted real data, on a GPU:

# %%
if SCALE == "paper":
    print(
        "rlcd-lab data convert gsm8k-verify gsm8k_test.jsonl data/gsm8k-verify.jsonl\n"
        "rlcd-lab data split data/gsm8k-verify.jsonl --dev 200 --test 500\n"
        "rlcd-lab eval --checkpoint PATH/TO/Qwen3-1.7B --task data/gsm8k-verify.jsonl "
        "--split test --m 16 --max-new-tokens 1024 --out runs/qwen-readouts.jsonl\n"
        "# then load runs/qwen-readouts.jsonl with rlcd_lab.files.io.read_jsonl and run\n"
        "# section 3b on its 'readouts' and 'label' fields"
    )
else:
    print("(set RLCD_SCALE=paper to print the commands for a real model)")

# %% [markdown]
# ## Exercises
#
# 1. Add a fifth rule to the slider of section 1: the *quadratic score without the
#    `||u||^2` term*, `J(u, y) = 2 u_y`. Is it proper? Why not? At `q_1 = 0.7`, which
#    report maximises its expected score, and how much more does that report expect to
#    score than the truthful one (`p = 0.7`)?
# 2. Proposition 1 is specific to the Brier score. Take three rationales whose readouts
#    over three options are `u(r) = (0.7, 0.2, 0.1)`, `(0.2, 0.5, 0.3)` and
#    `(0.1, 0.3, 0.6)`, and `q = (0.5, 0.3, 0.2)`. Compute the log score's gap
#    `J_log(p, q) - E_r J_log(u(r), q)` and the Brier gap `E_r ||u(r) - p||^2`. Is the
#    log gap non-negative? Is it equal to the Brier gap? (Then try the random readouts of
#    section 3a: does the answer hold on every problem?)
# 3. For `q_1 = 0.7`, for which `lambda` does the optimum of section 4 stop being a
#    certainty (`p_1 < 1`)? Derive it from the closed form and check it on the slider.
#
# Put your answers in the next cell (replace each `None`) and run it: the `classroom`
# checks compute the right answers themselves and say whether yours match.

# %%
from rlcd_lab.classroom import exercises

best_p = None  # 1: the report p = u_1 that maximises E[2 u_Y] when q_1 = 0.7
overconfidence_gain = None  # 1: E[2 u_Y] at that report minus at the truthful p = 0.7
log_gap = None  # 2: J_log(p, q) - E_r J_log(u(r), q) for the three readouts above
brier_gap = None  # 2: E_r ||u(r) - p||^2 for the same readouts
lambda_threshold = None  # 3: the optimum is p_1 < 1 for every lambda above this value
print("1:", exercises.check_twice_linear_score(best_p, overconfidence_gain))
print("2:", exercises.check_log_score_gap(log_gap, brier_gap))
print("3:", exercises.check_certainty_threshold(lambda_threshold, q1=0.7))
