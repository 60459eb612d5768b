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
# Solution 1: 2 u_y is the linear score times 2: E = 2 u.q, maximised at a vertex.
best_linear = tutorial.best_report(0.7, "linear")
twice = 2 * tutorial.binary_expected_scores(0.7, [best_linear, 0.7], "linear")
print(
    f"exercise 1: best report {best_linear} (a vertex: not proper), gain {twice[0] - twice[1]:.3f}"
)

# Solution 2: the log gap is >= 0 (Jensen: log is concave) but it is not the squared
# distance; it is the mean KL-type divergence sum_k q_k (log p_k - E_r log u_k).
u = torch.tensor([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.1, 0.3, 0.6]], dtype=torch.float64)
q = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
log_gap_3 = float(expected_score(u.mean(0), q, "log") - expected_score(u, q, "log").mean())
brier_gap_3 = float(variance_decomposition(u, q)["diversity"])
print(f"exercise 2: log gap {log_gap_3:.4f}, Brier gap E_r ||u(r) - p||^2 {brier_gap_3:.4f}")
# ... and on random readouts, as in section 3a:
gaps, divs = [], []
for _ in range(500):
    u = torch.distributions.Dirichlet(torch.ones(3, dtype=torch.float64)).sample((4,))
    q = torch.distributions.Dirichlet(torch.ones(3, dtype=torch.float64)).sample()
    gaps.append(float(expected_score(u.mean(0), q, "log") - expected_score(u, q, "log").mean()))
    divs.append(float(variance_decomposition(u, q)["diversity"]))
worst = float(np.max(np.abs(np.array(gaps) - np.array(divs))))
print(f"exercise 2: min log gap {min(gaps):.4f} (>= 0), max |log gap - diversity| {worst:.3f}")

# Solution 3: 1/2 + (2 q1 - 1)/(2 lambda) < 1  <=>  lambda > 2 q1 - 1 = 0.4
print(f"exercise 3: lambda > 2 q1 - 1 = {2 * 0.7 - 1:.1f}")

# The checks of the answer cell agree with these solutions:
feedback = [
    exercises.check_twice_linear_score(best_linear, twice[0] - twice[1]),
    exercises.check_log_score_gap(log_gap_3, brier_gap_3),
    exercises.check_certainty_threshold(2 * 0.7 - 1, q1=0.7),
]
assert all(f.ok for f in feedback), feedback
