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
# Solution 1: stage 1 uses c = 0, so the score-function term never enters the loss; the
# loop still computes its gradient every grad_terms_every steps to measure how large it
# *would* be, which is the diagnostic that motivates separating the stages.
#
# Solution 2: change TASK and rerun (default scale: a few minutes). Compare the ordering
# of c with the verify table, and the column 'pathwise norm at step 0': the base models'
# readouts are near one-hot, so the Brier gradient through the softmax starts tiny and the
# ratio is enormous early in training, whatever the task.
#
# Solution 3: Adam's second moment is per coordinate. Parameters that only the readout
# uses (e.g. the unembedding rows of the option tokens) see little score-function noise
# and keep their step size; shared parameters (embeddings, attention, MLPs), which both
# terms move, are diluted. The dilution is strongest exactly where the readout has to
# learn *from the rationale's content*. Per coordinate, the toy gives 1 where there is no
# noise and about 1 / sqrt(1 + rho^2) = 0.0995 where there is.
print("see the comments in this cell")

# The checks of the answer cell agree with these solutions:
stage1 = min(
    (
        i
        for i in shipped
        if i["task"] == "verify" and i["method"] == "calibrate" and i["parent"] is None
        if i["name"] in dil
    ),
    key=lambda i: i["name"],
)
d = dil[stage1["name"]][1]
late = slice(d["steps"].size // 2, None)  # the last half of the logged steps
stage1_ratio = results.rms(d["score_function"][late]) / results.rms(d["pathwise"][late])
print(f"exercise 1: c = {stage1['sf_weight']:g}, late RMS ratio {stage1_ratio:.3g}")
feedback = [
    exercises.check_stage1_weight(stage1["sf_weight"], stage1_ratio, stage1["path"]),
    exercises.check_per_coordinate_dilution(1.0, 1 / np.sqrt(1 + 10**2), rho=10.0),
]
if len(res):
    best_first = list(res["Brier (TS)"].sort_values(kind="stable").index)
    spread = res["Brier (TS)"].max() - res["Brier (TS)"].min()
    print(f"exercise 2: best first {best_first}, Brier (TS) spread {spread:.4f}")
    feedback.append(exercises.check_sweep_ordering(sweep, best_first, spread))
assert all(f.ok for f in feedback), feedback
