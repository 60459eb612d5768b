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
# Solution 1 (default scale only, about 1.5 minutes):
if SCALE == "default":
    cfg = replace(METHOD_TABLE["mixture"].config, **COMMON, lam=0.5, out=OUT / "lam0.5")
    s = results.load_run(train(cfg)).row
    print(f"exercise 1: lam 0.5: single-query JSD {s['jsd']:.3f} bits (TS {s['ts_jsd']:.3f})")
# Solution 2: the term per item is rlcd_lab.decomposition.variance_decomposition's
# 'diversity' of the item's (M, K) readouts; its mean over the test items of `mrows`, the
# per-rationale run's, is what the table's 'var u across rationales' gives for the mixture.
if runs:
    u = torch.tensor([r["readouts"] for r in mrows], dtype=torch.float64)
    var_u = float(variance_decomposition(u, torch.tensor(q))["diversity"].mean())
    print(f"exercise 2: per-rationale {var_u:.4f}; mixture (table) {var_u_mixture:.4f}")
# Solution 3: Y is drawn from the urn independently of anything the model can compute:
# q(x) is already known from the prompt. Reasoning helps when q(x) is spread only from the
# model's point of view (epistemic), e.g. verify before computing the sum.

# The checks of the answer cell agree with these solutions:
feedback = [exercises.check_urn_forecast([3 / 6, 1 / 6, 2 / 6], "urn 3a1b2c?")]
if runs:
    feedback.append(exercises.check_diversity_term(mrows, var_u))
if SCALE == "default":
    feedback.append(exercises.check_lambda_run(OUT / "lam0.5", s["jsd"], lam=0.5))
assert all(f.ok for f in feedback), feedback
