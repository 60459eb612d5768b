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
# Solution 1 (runs only at default scale: about 2 minutes):
if SCALE == "default":
    cfg = preset("endtoend", out=OUT / "no-KL-lr1e-3", beta=0.0, **{**COMMON, "lr": 1e-3})
    rows = read_log(train(cfg))
    print(
        "exercise 1: lr 1e-3: length (last 10%)",
        round(window(rows, "rationale_length", 0.1), 1),
        "forced",
        round(window(rows, "forced_rate", 0.1), 2),
        "dev accuracy",
        round(tutorial.log_column(rows, "dev_accuracy")[1][-1], 3),
    )

# Solution 2: the hedge, from the eval dumps.
for name, path in runs.items():
    dev_rows = read_jsonl(Path(path) / "eval/dev.jsonl")
    top = np.mean([max(r["probs"]) for r in dev_rows])
    print(f"exercise 2: {name}: mean top probability on dev {top:.3f}")

# Solution 3: always writing a rationale of base probability p costs beta * log(1/p) per
# question; the gain is the Brier difference between direct and reasoned answers.
direct_dev = read_meta(BASE)["metrics"]["dev"]["direct"]
gain = base_dev["brier"] - direct_dev["brier"]
for p in (0.01, 0.02):
    print(f"exercise 3: p = {p}: KL price {0.04 * np.log(1 / p):.3f} vs Brier gain {gain:.3f}")
if gain > 0.04 * np.log(100):
    print(
        "  the gain is larger: even the anchored objective prefers answering directly here; "
        "the anchor slows the drift (the KL run still reasons at 250 steps) but cannot rule "
        "it out on a task where reasoning hurts. On a real LM p is far smaller."
    )
else:
    print("  the KL price is larger: at its optimum the anchored objective keeps reasoning.")

# The checks of the answer cell agree with these solutions:
price = 0.04 * np.log(100)
feedback = [
    exercises.check_kl_price(price, gain, "direct" if gain > price else "reason", base=BASE)
]
if "no KL" in runs:
    dev_rows = read_jsonl(Path(runs["no KL"]) / "eval/dev.jsonl")
    top = np.mean([max(r["probs"]) for r in dev_rows])
    feedback.append(exercises.check_mean_top_probability(runs["no KL"], top))
if SCALE == "default":
    length = window(read_log(OUT / "no-KL-lr1e-3"), "rationale_length", 0.1)
    feedback.append(exercises.check_lr_run(OUT / "no-KL-lr1e-3", length))
assert all(f.ok for f in feedback), feedback
