"""Evidence a skeptic accepts (issue 63): ties at the readout's resolution, the test across
training seeds, the minimal detectable effect, verdicts that do not depend on the
bootstrap draw (or say so), and ``rlcd-lab power``."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest

from rlcd_lab import metrics
from rlcd_lab.cli import main
from rlcd_lab.files import rundir
from rlcd_lab.files.io import read_jsonl
from rlcd_lab.math import paper
from rlcd_lab.math import stats as S
from rlcd_lab.math.verdicts import verdict, verdict_head
from rlcd_lab.reports import power, report, results
from rlcd_lab.summary import row_logits

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "assets" / "results"
RUNG = RESULTS / "basic-skills-arithmetic-verify-pairs"
SHIPPED = sorted(p.parent.name for p in RESULTS.glob("*/summary.json"))
Z = NormalDist().inv_cdf(0.975) + NormalDist().inv_cdf(0.8)


# ---------------------------------------------------------------------------- ties
def test_confidences_one_ulp_apart_tie():
    """Ten items at one confidence, five wrong: whatever the float noise, the tie-fair
    AURC is the error rate 0.5 (every prefix's expected risk is 5/10) and Cov@40% is 0
    (the only threshold takes all ten, risk 0.5)."""
    c = np.full(10, 0.7)
    c[::2] = np.nextafter(0.7, 1.0)  # one ulp above, the wrong answers
    ok = np.arange(10) % 2 == 1
    assert metrics.aurc(c, ok) == pytest.approx(0.5, abs=1e-15)
    assert metrics.coverage_at_risk(c, ok, 0.4) == 0.0
    # beyond the tolerance the ranking counts: the five wrong answers first
    c[::2] = 0.7 + 1e-9
    risks = [5 / k if k > 5 else 1.0 for k in range(1, 11)]
    assert metrics.aurc(c, ok) == pytest.approx(np.mean([min(k, 5) / k for k in range(1, 11)]))
    assert np.mean(risks) > 0.5


def test_facts_seed_29_stated_confidence_is_one_tie_group():
    """The shipped case: facts' RLCR (stated confidence, matched budget) seed 29 states one
    confidence on all 400 test items; its AURC is the error rate (one tie group), not the
    0.3926 that float noise between two equal stated confidences made of it."""
    run = RESULTS / "facts" / "seed-29" / "rlcr-stated-matched"
    rows = read_jsonl(rundir.eval_file(run, "test"))
    assert len(rows) == 400 and len({r["stated_confidence"] for r in rows}) == 1
    loaded = results.load_run(run)
    error = 1 - loaded.view().correct.mean()
    assert loaded.row["ts_aurc"] == pytest.approx(error, abs=1e-12)
    assert error == pytest.approx(0.4375)


def _stated_row(answer: int, c: float, k: int = 2) -> dict:
    """A dump row as ``evaluate.run_eval(stated=True)`` writes it: ``c`` held as float32,
    logits ``log`` of the stated distribution computed from that float32 value."""
    c32 = float(np.float32(c))
    p = np.full(k, (1 - c32) / (k - 1))
    p[answer] = c32
    return {"label": 0, "stated_answer": answer, "stated_confidence": c32,
            "logits": np.log(p).tolist()}  # fmt: skip


def test_a_stated_confidence_is_read_at_the_rounding_its_text_carries():
    """ "0.05 on B" and "0.95 on A" are one distribution over two options; as float32 they
    differ by about 1e-8, read back at their text's rounding they are equal."""
    b, a = _stated_row(1, 0.05), _stated_row(0, 0.95)
    raw = [max(metrics.softmax(np.array([r["logits"]]))[0]) for r in (a, b)]
    assert abs(raw[0] - raw[1]) > 1e-9  # the float32 noise the dumps hold: no tie
    p = [metrics.softmax(np.array([row_logits(r)]))[0].max() for r in (a, b)]
    assert p[0] == pytest.approx(0.95, abs=1e-15)
    assert abs(p[0] - p[1]) <= metrics.TIE_TOL  # one tie group
    # a readout row keeps its logits, with or without a stated confidence beside them
    assert row_logits({"logits": [0.1, 0.2]}) == [0.1, 0.2]
    assert row_logits({**a, "logits": [0.1, 0.2]}) == [0.1, 0.2]


def test_an_rlcr_readout_is_read_as_its_readout_not_its_stated_confidence():
    """RLCR's dumps hold the stated confidence beside the readout: the readout run
    (``rlcr-matched``) is read from its logits, the stated run from its stated ones."""
    for name in ("rlcr-matched", "rlcr-stated-matched"):
        run = RUNG / "seed-17" / name
        rows = read_jsonl(rundir.eval_file(run, "test"))
        loaded = results.load_run(run)
        stated = name.endswith("stated-matched")
        if stated:  # the stated view: its logits are the stated distribution's, to 1e-7
            assert loaded.logits == pytest.approx(np.array([r["logits"] for r in rows]), abs=1e-6)
            assert not np.array_equal(loaded.logits, np.array([r["logits"] for r in rows]))
        else:
            assert np.array_equal(loaded.logits, np.array([r["logits"] for r in rows]))


# ----------------------------------------------------------------- across seeds, MDE
@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 10])
def test_student_t_against_closed_forms_and_scipy(df):
    """df 1 is Cauchy (p = 1 - 2 atan|t| / pi), df 2 has p = 1 - |t| / sqrt(2 + t^2); any df
    agrees with scipy where it is installed."""
    for t in (0.0, 0.3, 2.1, 9.0):
        p = S.student_t_p(t, df)
        if df == 1:
            assert p == pytest.approx(1 - 2 * math.atan(t) / math.pi, abs=1e-14)
        if df == 2:
            assert p == pytest.approx(1 - t / math.sqrt(2 + t * t), abs=1e-14)
        q = S.student_t_quantile(1 - p / 2, df) if 0 < p < 1 else t
        assert q == pytest.approx(t, abs=1e-9)
    sp = pytest.importorskip("scipy.stats")
    for t in (0.5, 2.0, 4.0):
        assert S.student_t_p(t, df) == pytest.approx(2 * sp.t.sf(t, df), abs=1e-12)


def test_seed_test_by_hand():
    """Three seeds: t = mean / (sd / sqrt 3) with its two-sided p under 2 degrees of
    freedom, and the exact sign flip: all three differences negative, so only the
    identity and the all-flipped pattern reach |mean|: p = 2 / 8."""
    d = [-0.037, -0.005, -0.059]
    out = S.seed_test(d)
    t = np.mean(d) / (np.std(d, ddof=1) / math.sqrt(3))
    assert out["t"] == pytest.approx(t)
    assert out["p_t"] == pytest.approx(1 - abs(t) / math.sqrt(2 + t * t))
    assert out["p_sign"] == 0.25
    assert S.seed_test([0.01])["t"] is None and S.seed_test([0.01])["p_sign"] == 1.0


def test_mde_and_the_sizes_a_difference_needs():
    """MDE = 2.80 SE; a difference of 2 MDE needs a quarter of the items (SE ~ 1/sqrt n);
    the seeds for a t test are the smallest S with (t_.975 + t_.8) sd / sqrt(S) <= delta."""
    assert S.mde(0.019) == pytest.approx(Z * 0.019)
    assert S.items_needed(0.02, 400, 2 * S.mde(0.02)) == 100
    assert S.items_needed(0.02, 400, S.mde(0.02) / 2) == 1600
    sd, delta = 0.027, 0.033
    s = S.seeds_needed(sd, delta)

    def reach(k):
        return (
            (S.student_t_quantile(0.975, k - 1) + S.student_t_quantile(0.8, k - 1))
            * sd
            / math.sqrt(k)
        )

    assert reach(s) <= delta < reach(s - 1)


# --------------------------------------------------------------- shipped summaries
def _claim_cells(summary):
    for claim in paper.CLAIMS[report.summary_kind(summary)]:
        for _, _, where, diff in report._comparisons(summary, claim):
            if where is not None and diff is not None:
                yield claim, where, diff


@pytest.mark.parametrize("task", SHIPPED)
def test_every_claim_cell_has_its_seed_test_mde_and_five_draws(task):
    """Every claim's paired test in a shipped summary holds the test across seeds, the
    MDE (2.80 x its bootstrap SE) and reruns under the other four bootstrap RNG seeds at
    N_CLAIM replicates; the per-seed differences are the per-seed metrics' differences."""
    summary = json.loads((RESULTS / task / "summary.json").read_text())
    cells = list(_claim_cells(summary))
    assert cells
    for claim, (section, key), diff in cells:
        assert diff["n_boot"] == results.N_CLAIM
        assert len(diff["reruns"]) == len(results.RNG_SEEDS) - 1
        assert diff["mde"] == pytest.approx(Z * diff["se"], rel=1e-8)
        assert 1 <= len(diff["seeds"]["diffs"]) <= len(summary["seeds"])
        assert np.mean(diff["seeds"]["diffs"]) == pytest.approx(diff["diff"], abs=1e-9)
        if section == "paired" and claim.metric in results.METRICS:
            a, b = key.split(" - ")  # compared at the seeds both runs have
            src = results.METRICS[claim.metric][1]
            rows = [dict(zip(_run_seeds(summary, r), summary["runs"][r]["per_seed"], strict=True))
                    for r in (a, b)]  # fmt: skip
            shared = [s for s in rows[0] if s in rows[1]]
            per_seed = [rows[0][s][src] - rows[1][s][src] for s in shared]
            assert diff["seeds"]["diffs"] == pytest.approx(per_seed, abs=1e-9)


def test_headline_cells_name_how_many_seeds_each_test_rests_on():
    """Each README headline cell names the number of seeds its paired test shares (the
    runs' common seeds), which differs between tasks (ten on verify-mixed, three on most)."""
    table = (
        (REPO / "README.md")
        .read_text()
        .split("<!-- headline:begin")[1]
        .split("<!-- headline:end")[0]
    )
    tasks = table.splitlines()[1].split(" | ")[1:]
    tasks = [t.split(" (")[0] for t in tasks]
    for line in table.splitlines()[3:]:
        for task, cell in zip(tasks, line.split(" | ")[1:], strict=True):
            if cell.strip(" |") == "-":
                continue
            summary = json.loads((RESULTS / task / "summary.json").read_text())
            seeds = {len(_run_seeds(summary, r)) for r in ("reinforce", "grpo-matched")}
            assert f"{min(seeds)} seeds: t p = " in cell, (task, cell)


def _run_seeds(summary: dict, run: str) -> list[int]:
    """The seeds a run of a summary was trained at (all the summary's unless listed)."""
    return summary["runs"][run].get("seeds", summary["seeds"])


@pytest.mark.parametrize("task", SHIPPED)
def test_no_verdict_flips_across_five_bootstrap_draws_without_being_marked(task):
    """A claim whose verdict (its first clause) differs under any of the five bootstrap
    RNG seeds reads "borderline" in the tables; every other claim does not."""
    summary = json.loads((RESULTS / task / "summary.json").read_text())
    judged = {(j.row, j.name): j for j in report.judge(summary)}
    for j in judged.values():
        if j.diff is None:
            continue
        heads = {
            verdict_head(verdict(d, j.claim.direction, j.claim.effect))
            for d in (j.diff, *j.diff.get("reruns", ()))
        }
        assert ("(borderline:" in j.verdict) == (len(heads) > 1), (task, j.row, heads)


def test_borderline_names_the_other_verdicts_and_the_count():
    """The marking rule on a made-up cell: one of five draws reads another verdict."""
    first = {"ci_low": -0.05, "ci_high": -0.01, "p": 0.01}
    flip = {"ci_low": -0.05, "ci_high": 0.001, "p": 0.06}
    claim = paper.Claim("reinforce - grpo", "aurc", -1, -0.027, "", "5.1")
    vs = [verdict(d, claim.direction, claim.effect) for d in (first, flip, first, first, first)]
    marked = report.borderline(vs[0], vs[1:])
    assert marked == "reproduces (borderline: not measurable under 1 of 5 bootstrap draws)"
    assert report.borderline(vs[0], [vs[0]] * 4) == "reproduces"


def test_a_cell_shows_the_verdict_most_draws_read():
    """Where the test's own draw reads "reproduces" and four of the five draws "not
    measurable", the cell reads "not measurable" with the first such draw's CI and p,
    marked borderline by the one draw that reproduces; a cell whose draws agree shows its
    own draw."""
    claim = paper.Claim("reinforce - grpo", "aurc", -1, -0.027, "", "5.1")
    first = {"diff": -0.03, "ci_low": -0.05, "ci_high": -0.01, "p": 0.01}
    flip = {"ci_low": -0.05, "ci_high": 0.001, "p": 0.06}
    shown, v = report.majority_draw({**first, "reruns": [flip] * 4}, claim.direction, claim.effect)
    assert v.startswith("not measurable") and v.endswith(
        "(borderline: reproduces under 1 of 5 bootstrap draws)"
    )
    assert (shown["diff"], shown["ci_high"], shown["p"]) == (-0.03, 0.001, 0.06)
    shown, v = report.majority_draw({**first, "reruns": [first] * 4}, claim.direction, claim.effect)
    assert v == "reproduces" and shown["ci_high"] == -0.01


def test_the_rung_cell_recomputes_its_seed_test_from_the_dumps():
    """RLCD minus GRPO (matched) AURC on the rung: the per-seed differences, t and its p
    follow from each seed's dumps (T fitted on dev, tie-fair AURC)."""
    summary = json.loads((RUNG / "summary.json").read_text())
    cell = summary["paired"]["reinforce - grpo-matched"]["aurc"]
    diffs = []
    for seed in summary["seeds"]:
        a, b = (results.load_run(RUNG / f"seed-{seed}" / r) for r in ("reinforce", "grpo-matched"))
        diffs.append(metrics.aurc(a.confidence, a.correct) - metrics.aurc(b.confidence, b.correct))
    assert cell["seeds"]["diffs"] == pytest.approx(diffs, abs=1e-9)
    t = np.mean(diffs) / (np.std(diffs, ddof=1) / math.sqrt(len(diffs)))
    assert cell["seeds"]["t"] == pytest.approx(t, rel=1e-8)


# ------------------------------------------------------------------------- power
def test_power_from_the_rung_dumps_and_from_its_summary(capsys):
    """``rlcd-lab power`` on the rung's dumps: the pilot's SE and MDE, the items that halve
    the MDE are four times the pilot's; the summary gives the same plan at its replicates."""
    seeds = (17, 23, 29, 31)  # the seeds of docs/results.md's worked example
    a = [str(RUNG / f"seed-{s}" / "reinforce") for s in seeds]
    b = [str(RUNG / f"seed-{s}" / "grpo-matched") for s in seeds]
    main(["power", "--delta", "-0.03", "--a", *a, "--b", *b])
    out = json.loads(capsys.readouterr().out)
    pilot = out["pilot"]
    assert pilot["items"] == 209 and pilot["seeds"] == len(seeds)
    assert pilot["mde"] == pytest.approx(Z * pilot["se"])
    assert out["items_needed"] == math.ceil(209 * (Z * pilot["se"] / 0.03) ** 2)
    assert S.items_needed(pilot["se"], 209, pilot["mde"] / 2) == pytest.approx(4 * 209, abs=1)
    # docs/results.md's worked example prints these numbers
    text = " ".join((REPO / "docs" / "results.md").read_text(encoding="utf-8").split())
    diffs = ", ".join(f"{d:.4f}" for d in pilot["seed_diffs"])
    assert (
        f'"items": 209, "seeds": {len(seeds)}, "diff": {pilot["diff"]:.4f}, '
        f'"se": {pilot["se"]:.4f}, '
        f'"mde": {pilot["mde"]:.4f}, "seed_diffs": [{diffs}], "p_t": {pilot["p_t"]:.3f}, '
        f'"items_needed": {out["items_needed"]}, "seeds_needed": {out["seeds_needed"]}' in text
    )
    summary = json.loads((RUNG / "summary.json").read_text())
    plan = power.plan_from_summary(summary, "reinforce - grpo-matched", "aurc", -0.03)
    assert plan["pilot"]["seed_diffs"] == pytest.approx(pilot["seed_diffs"], abs=1e-9)
    assert plan["seeds_needed"] == out["seeds_needed"]


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--delta", "0", "--summary", str(RUNG / "summary.json")], "--delta"),
        (["--delta", "-0.03", "--summary", str(RUNG / "summary.json"), "--pair", "x - y"],
         "--pair 'x - y'"),
        (["--delta", "-0.03", "--a", str(RUNG / "seed-17" / "reinforce")], "--a and --b"),
        (["--delta", "-0.03", "--a", "nowhere", "--b", "nowhere"], "nowhere"),
    ],
)  # fmt: skip
def test_power_user_errors_are_one_line(capsys, argv, match):
    with pytest.raises(SystemExit) as err:
        main(["power", *argv])
    assert err.value.code == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("rlcd-lab: error:") and match in line and "\n" not in line


def test_the_seed_level_reading_of_verify_mixed_is_its_summarys():
    """docs/results.md quotes verify-mixed's per-seed AURC differences (RLCD minus GRPO),
    the item-level p and the t test across seeds as the summary holds them."""
    text = " ".join((REPO / "docs" / "results.md").read_text(encoding="utf-8").split())
    summary = json.loads((RESULTS / "verify-mixed" / "summary.json").read_text())
    cell = summary["paired"]["reinforce - grpo-matched"]["aurc"]
    d = [f"{x:+.3f}" for x in cell["seeds"]["diffs"]]
    assert len(d) == len(summary["seeds"]) == 10
    negative = sum(x < 0 for x in cell["seeds"]["diffs"])
    assert (
        f"On `verify-mixed` (ten seeds), RLCD minus GRPO's AURC per seed is "
        f"{', '.join(d[:-1])} and {d[-1]}: the item-level p is {cell['p']:.2g}, across seeds "
        f"t = {cell['seeds']['t']:.2f}, p = {cell['seeds']['p_t']:.2f}, {NUMBERS[negative]} "
        f"seeds of ten negative" in text
    )


NUMBERS = dict(enumerate("zero one two three four five six seven eight nine ten".split()))


def test_sign_flip_over_seeds_enumerates_every_pattern():
    """The exact p over seeds is the share of the 2^S sign patterns whose |mean| reaches
    the observed one (S = 4, by enumeration)."""
    d = np.array([0.02, -0.01, 0.03, 0.015])
    null = [abs(np.mean(np.array(s) * d)) for s in itertools.product((1, -1), repeat=4)]
    expected = np.mean(np.array(null) >= abs(d.mean()) - 1e-12)
    assert S.seed_test(d)["p_sign"] == pytest.approx(expected)
