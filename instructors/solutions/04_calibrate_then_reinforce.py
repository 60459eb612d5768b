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
if GRPO in first:
    r = first[GRPO]
    a_raw = metrics.aurc(*metrics.confidence_and_correct(r.probs(False), r.labels))
    a_ts = metrics.aurc(r.confidence, r.correct)
    print(f"exercise 1: GRPO AURC raw {a_raw:.4f}, after TS {a_ts:.4f} (same up to ties)")
for lab, r in first.items():
    print(
        f"exercise 2: {lab}: Cov@2% = {metrics.coverage_at_risk(r.confidence, r.correct, 0.02):.0%}"
    )
print("exercise 3: e.g. baselines for stage-1 + stage-2 steps, or RLCD stages of half length")

# The checks of the answer cell agree with these solutions:
feedback = []
if GRPO in first:
    feedback.append(exercises.check_aurc_before_after(first[GRPO], a_raw, a_ts))
if RLCD in first:
    r = first[RLCD]
    cov = metrics.coverage_at_risk(r.confidence, r.correct, 0.02)
    feedback.append(exercises.check_coverage_at_risk(r, cov, eps=0.02))
if SCALE != "paper":
    steps = sum(cfg.steps for name, cfg in plan if name in ("calibrate", "reinforce"))
    feedback.append(exercises.check_fair_budget(OUT / "calibrate", OUT / "reinforce", steps))
assert all(f.ok for f in feedback), feedback
