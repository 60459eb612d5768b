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

# %% jupyter={"source_hidden": true} tags=["solution"]
# Solution 1: costs: accept c_FA p_N, reject p_Y, escalate 0.5. With c_FA = 1 accept
# when p_N < 0.5 and p_N < p_Y, i.e. p_Y > 0.5, and reject when p_Y < 0.5: escalation
# never wins, since min(p_Y, p_N) <= 0.5 always (it ties at p_Y = 0.5). With c_FA = 10,
# escalate when 0.5 < p_Y and 0.5 < 10 (1 - p_Y): 0.5 < p_Y < 0.95.
grid = np.linspace(0, 1, 11)
acts = routing.bayes_actions(np.stack([grid, 1 - grid], 1), costs_for(1))
print("exercise 1: actions for p_Y = 0, 0.1, ..., 1:", acts.tolist(), "(0 Y, 1 N, 2 escalate)")
rlcd = next(d for d in data.values() if d["variant"] == "reinforce")
share = float((routing.bayes_actions(rlcd["p_test"], costs_for(10)) == 2).mean())
print(f"exercise 1: at c_FA = 10, band (0.5, 0.95); reinforce escalates {share:.1%} of test")

# Solution 2: the label-free threshold does not exist at 5% (no direct readout is that
# confident); the cascade's predicted accuracy at the dev threshold, against the observed.
predicted = {}
for task, out in cascades.items():
    conf_dev = out["direct_dev"].max(1)
    t_free = routing.threshold_for_risk(conf_dev, None, EPS)
    t = summary.loc[task, "threshold (dev)"]
    probs, routed = routing.cascade(out["direct"], out["reason"], t)
    predicted[task] = float(probs.max(1).mean())
    print(
        f"exercise 2: {task}: label-free t at {EPS:.0%} = {t_free:.3f}; at t = {t:.2f} the "
        f"cascade predicts accuracy {predicted[task]:.3f}, gets "
        f"{metrics.accuracy(probs, out['y']):.3f}"
    )

# Solution 3: the raw (unscaled) direct probabilities in the cascade.
gaps = {}
for task, out in cascades.items():
    raw = out["direct_raw"]
    c_raw = routing.cascade_curve(raw, out["reason"], out["y"], out["tokens_reason"], thresholds)
    gaps[task] = np.abs(c_raw["accuracy"] - out["curve"]["accuracy"]).max()
    print(f"exercise 3: {task}: largest accuracy change over thresholds {gaps[task]:.3f}")

# The checks of the answer cell agree with these solutions:
feedback = [
    exercises.check_escalation_band((0.5, 0.95), share, data, c_fa=10, escalate=ESCALATE),
    exercises.check_label_free_accuracy(cascades, summary["threshold (dev)"], predicted),
    exercises.check_raw_cascade(cascades, thresholds, gaps),
]
assert all(f.ok for f in feedback), feedback
