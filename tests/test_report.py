"""The paper-vs-ours tables: verdicts from CIs, and README blocks that are the module's
output for the shipped summaries (never hand-copied numbers)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from rlcd_lab.files.assets import ASSETS
from rlcd_lab.math import paper
from rlcd_lab.math.verdicts import temperature_verdict, verdict
from rlcd_lab.reports.report import (
    GENERATED,
    HEADLINE,
    findings_table,
    judge,
    logged_hours_table,
    sweep_table,
    timing_table,
    update_readme,
    what_reproduces,
)
from rlcd_lab.reports.report import (
    claims as judged_claims,
)

REPO = ASSETS.parent
RESULTS_PAGE = REPO / "docs" / "results.md"


SMALLER = "smaller than the paper's"
NO_SIZE = "the paper gives no size to compare it with"
RUNG = "basic-skills-arithmetic-verify-pairs"
"""The real rung's reproduction, the fair test (SmolLM2-135M taught the task, three seeds)."""


@pytest.mark.parametrize("sign", [+1, -1])
@pytest.mark.parametrize(
    ("lo", "hi", "p", "expected"),
    [  # the paper's effect is +0.2 (mirrored for sign -1); CIs on each side of 0 and of it
        (0.1, 0.3, 0.001, "reproduces"),
        (0.01, 0.1, 0.001, f"{SMALLER}: same direction, CI excludes its effect"),
        (0.25, 0.4, 0.001, "reproduces, larger than the paper's"),
        (-0.3, -0.1, 0.001, "opposite direction"),
        (-0.1, 0.1, 0.5, f"{SMALLER}: not significant, CI excludes its effect"),
        (-0.1, 0.3, 0.5, "not measurable: not significant, CI holds the paper's effect"),
        # the CI excludes 0 but the test does not reject: not significant
        (0.025, 0.15, 0.33, f"{SMALLER}: not significant, CI excludes its effect"),
        (0.025, 0.361, 0.33, "not measurable: not significant, CI holds the paper's effect"),
        # straddling 0, reaching further on the wrong side than the paper's effect: the CI
        # still excludes the effect
        (-0.3, 0.1, 0.5, f"{SMALLER}: not significant, CI excludes its effect"),
    ],
)
def test_verdicts_against_the_papers_effect(lo, hi, p, expected, sign):
    ci = {"ci_low": lo, "ci_high": hi} if sign > 0 else {"ci_low": -hi, "ci_high": -lo}
    assert verdict({**ci, "p": p}, sign, 0.2 * sign) == expected


@pytest.mark.parametrize(
    ("lo", "hi", "p", "direction", "expected"),
    [
        (0.1, 0.3, 0.001, +1, "reproduces"),  # no number from the paper: direction only
        (0.1, 0.3, 0.001, -1, "opposite direction"),
        (-0.1, 0.1, 0.5, +1, "not measurable: not significant"),
        (-0.1, 0.1, 0.5, 0, f"no difference detected (CI half-width 0.100): {NO_SIZE}"),
        (0.05, 0.1, 0.01, 0, "differs: the paper finds no difference"),
        (-0.05, 0.1, 0.2, 0, f"no difference detected (CI half-width 0.075): {NO_SIZE}"),
        (0.05, 0.1, None, +1, "reproduces"),  # an interval over seeds: no test
    ],
)
def test_verdicts_without_a_number(lo, hi, p, direction, expected):
    assert verdict({"ci_low": lo, "ci_high": hi, "p": p}, direction) == expected


@pytest.mark.parametrize(
    ("lo", "hi", "p", "expected"),
    [  # a claim of no difference where the paper measured +0.02 (half-widths by hand)
        (
            -0.01,
            0.03,
            0.4,
            "consistent: no difference, CI half-width 0.020 within the paper's effect",
        ),  # (0.03 + 0.01) / 2 = 0.02 <= |+0.02|: it would see +0.02
        (
            -0.015,
            0.005,
            0.3,
            "consistent: no difference, CI half-width 0.010 within the paper's effect",
        ),
        (
            -0.03,
            0.02,
            0.6,
            "no difference detected (CI half-width 0.025): wider than the paper's +0.020",
        ),  # 0.025 > 0.02: the paper's difference would pass unseen
        (0.01, 0.05, 0.01, "differs: the paper finds no difference"),
    ],
)
def test_a_claim_of_no_difference_is_consistent_only_where_the_ci_would_see_the_papers(
    lo, hi, p, expected
):
    assert verdict({"ci_low": lo, "ci_high": hi, "p": p}, 0, 0.02) == expected
    assert verdict({"ci_low": -hi, "ci_high": -lo, "p": p}, 0, -0.02) == expected.replace(
        "+0.020", "-0.020"
    )


@pytest.mark.parametrize(
    ("t_rlcd", "others", "expected"),
    [
        (1.3, [6.0, 7.0], "reproduces"),  # |log 1.3| < log 2, both baselines beyond 3x
        (0.6, [0.2, 9.0], "reproduces"),  # below 1 counts on the log scale
        (3.8, [5.6, 5.7], f"{SMALLER}: RLCD's T is closest to 1 but not within 2x"),
        (1.1, [2.5, 7.0], f"{SMALLER}: RLCD's T is near 1, a baseline's within 3x"),
        (5.0, [3.0, 7.0], "opposite direction: a baseline's T is as close to 1 or closer"),
        (50.0, [50.0, 37.0], "opposite direction: a baseline's T is as close to 1 or closer"),
    ],
)
def test_temperature_verdicts(t_rlcd, others, expected):
    assert temperature_verdict(t_rlcd, others) == expected


def summary_of(task, acc, T, cov) -> dict:
    runs = {
        name: {"accuracy": {"mean": a}, "T": {"mean": t, "sd": None}, "cov_at_eps": {"mean": c}}
        for name, a, t, c in zip(("reinforce", "grpo", "rft-kl"), acc, T, cov, strict=True)
    }
    d = {"diff": -0.02, "ci_low": -0.05, "ci_high": -0.001, "p": 0.03}
    paired = {"reinforce - grpo": {"aurc": d}}
    return {"task": task, "eps": 0.05, "seeds": [17], "runs": runs, "paired": paired, "forks": {}}


def test_findings_table_rows_by_hand():
    table = findings_table(summary_of("verify", (0.9, 0.9, 0.8), (1.3, 6.0, 0.1), (0.5, 0.2, 0.1)))
    rows = table.splitlines()
    assert rows[0].startswith("| claim (paper: Qwen3-1.7B on GSM8K-Verify) |")
    # GSM8K-Verify: AURC 0.034 vs 0.061, i.e. -0.027, inside [-0.050, -0.001]
    assert rows[2] == (
        "| RLCD vs GRPO+TS: AURC, lower | 0.034 vs 0.061, p < 1e-3 (§5.1) | "
        "-0.020 [-0.050, -0.001], p = 0.03 | reproduces |"
    )
    # |log 1.3| = 0.26 < log 2; |log 6| = 1.79 and |log 0.1| = 2.30 exceed log 3
    assert rows[3].endswith("| 1.300 / 6.000 / 0.100 | reproduces |")
    # MMLU-Pro states no AURC difference against GRPO and no fitted T of Table 1
    assert (
        findings_table(summary_of("facts", (0.9,) * 3, (1.3, 6.0, 0.1), (0.5,) * 3)).count("\n")
        == 2
    )


def test_claims_use_the_matched_budget_baseline_when_it_exists():
    summary = summary_of("verify", (0.9, 0.9, 0.8), (1.3, 6.0, 0.1), (0.5, 0.2, 0.1))
    summary["runs"]["grpo-matched"] = summary["runs"]["grpo"] | {"T": {"mean": 9.0, "sd": 1.0}}
    far = {"diff": 0.02, "ci_low": 0.01, "ci_high": 0.03, "p": 0.001}
    summary["paired"]["reinforce - grpo-matched"] = {"aurc": far}
    rows = findings_table(summary).splitlines()
    assert rows[2].startswith("| RLCD vs GRPO+TS (matched budget): AURC, lower |")
    assert rows[2].endswith("| +0.020 [+0.010, +0.030], p = 0.001 | opposite direction |")
    assert (
        "GRPO+TS (matched budget) / RFT+KL+TS | RLCD 1.4, GRPO and RFT about 7 (§5.1) |"
        in (rows[3])
    )
    assert "| 1.300 / 9.000 ± 1.000 / 0.100 |" in rows[3]


def test_table3_claims_on_aleatoric_summaries_only():
    jsd = {"diff": 0.05, "ci_low": 0.02, "ci_high": 0.08, "p": 0.001}
    summary = summary_of("verify", (0.9, 0.9, 0.8), (1.3, 6.0, 0.1), (0.5, 0.2, 0.1))
    summary["paired"]["mixture - endtoend"] = {"jsd_table3": jsd}
    assert "mixture" not in findings_table(summary)  # GSM8K-Verify has no Table 3 claim
    summary["task"] = "aleatoric"
    rows = findings_table(summary).splitlines()
    assert rows[2:] == [
        "| mixture (lam = 1) vs per-rationale (end to end, KL): JSD, higher | 0.121 vs 0.075 "
        "bits (§5.3) | +0.050 [+0.020, +0.080], p = 0.001 | reproduces |"
    ]


def test_kind_of_task():
    assert [paper.kind(t) for t in ("verify", "facts", "aleatoric")] == list(paper.KINDS)
    assert paper.kind("data/gsm8k-verify.jsonl") == "gsm8k-verify"
    assert paper.kind("/x/assets/data/mmlu-elementary_mathematics.jsonl") == "mmlu-pro"
    assert paper.kind("chaosnli.jsonl") == "chaosnli" and paper.kind("arc-easy") == "mmlu-pro"
    assert paper.EPS["mmlu-pro"] == 0.2 and paper.EPS["gsm8k-verify"] == 0.05


@pytest.mark.parametrize("task", ["verify", "facts", "aleatoric", RUNG])
def test_each_task_is_judged_on_its_own_kind_of_claim(task):
    """No claim, and no paper number, of another kind of task in a shipped task's table:
    each paper text that belongs to other kinds only is absent."""
    summary = json.loads((ASSETS / "results" / task / "summary.json").read_text())
    k = paper.kind(task)
    # the paper's claims, and its ranking claims again against a post-hoc calibrator
    mine = set(judged_claims(k)) | ({paper.TEMPERATURE[k]} if k in paper.TEMPERATURE else set())
    judged = judge(summary)
    assert judged and all(j.claim in mine for j in judged)
    texts = {c.paper for c in mine}
    table = findings_table(summary)
    for other in set(paper.KINDS) - {k}:
        claims = [
            *paper.CLAIMS[other],
            *([paper.TEMPERATURE[other]] if other in paper.TEMPERATURE else []),
        ]
        for c in claims:
            if c.paper not in texts:
                assert c.paper not in table, (task, other, c.paper)
    eps = summary["eps"]
    assert eps == paper.EPS[k]  # Cov@eps at the paper's budget for this kind of task


def test_the_papers_numbers_live_once():
    """Every number the paper states is written in rlcd_lab/math/paper.py only."""
    texts = {
        c.paper for cs in paper.CLAIMS.values() for c in cs if any(ch.isdigit() for ch in c.paper)
    }
    texts |= {t.paper for t in paper.TEMPERATURE.values()}
    for path in (ASSETS.parent / "rlcd_lab").rglob("*.py"):
        if path.name != "paper.py":
            source = path.read_text(encoding="utf-8")
            assert not [t for t in texts if t in source], path


def test_what_reproduces_has_a_column_per_task_and_a_dash_where_no_claim():
    verify = summary_of("verify", (0.9, 0.9, 0.8), (1.3, 6.0, 0.1), (0.5, 0.2, 0.1))
    facts = summary_of("facts", (0.9, 0.9, 0.8), (1.3, 6.0, 0.1), (0.5, 0.2, 0.1))
    facts["paired"]["reinforce - grpo"]["accuracy"] = {
        "diff": 0.1,
        "ci_low": 0.06,
        "ci_high": 0.15,
        "p": 0.001,
    }
    rows = what_reproduces({"verify": verify, "facts": facts}).splitlines()
    assert rows[0] == "| claim | verify (GSM8K-Verify) | facts (MMLU-Pro) |"
    by_claim = {r.split(" | ")[0].removeprefix("| "): r for r in rows[2:]}
    assert by_claim["RLCD vs GRPO+TS: AURC, lower"].endswith(
        "| **reproduces** -0.020 [-0.050, -0.001] (paper -0.027) | - |"
    )
    # GSM8K-Verify claims no accuracy difference, MMLU-Pro +5.2 points: rows per direction
    assert by_claim["RLCD vs GRPO+TS: acc, higher"].endswith(
        "| - | **reproduces, larger than the paper's** +0.100 [+0.060, +0.150] (paper +0.052) |"
    )


def test_claims_that_do_not_hold_link_to_the_why_table_that_explains_them():
    """Every cell of "What reproduces" whose verdict is not "reproduces" or "consistent"
    links to its task's "Why" heading in docs/results.md (from the README through that
    page), naming the columns of its metric, where that table holds one of the claim's
    runs; those that hold link nowhere."""
    from rlcd_lab.reports.report import HELD, load_summaries, why_column, why_runs

    summaries = load_summaries(REPO / "assets" / "results")

    headings = {
        re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", RESULTS_PAGE.read_text(encoding="utf-8"), re.M)
    }
    for page, prefix in ((RESULTS_PAGE, ""), (REPO / "README.md", "docs/results.md")):
        name = "what-reproduces" if page == RESULTS_PAGE else "headline"
        rows = block(name, page).splitlines()
        tasks = [c.split(" (")[0] for c in rows[0].strip("|").split(" | ")[1:]]
        checked = 0
        for row in rows[2:]:
            claim, *cells = row.strip("| ").split(" | ")
            for task, cell in zip(tasks, cells, strict=True):
                if cell == "-":
                    continue
                verdict = cell.split("**")[1]
                links = re.findall(r"\[why(?:: ([^\]]+))?\]\(([^)]*)#([^)]+)\)", cell)
                if verdict.startswith(HELD):
                    assert not links, cell
                    continue
                summary = summaries[task]
                (j,) = [j for j in judge(summary) if j.row == claim]
                if not set(j.runs) & set(why_runs(summary)):  # the table holds neither
                    assert not links, cell
                    continue
                kind = "gsm8k-verify" if "verify" in task else "other"
                ((cols, target, slug),) = links
                assert target == prefix and slug == f"why-{task}" and slug in headings, cell
                assert cols == (why_column(claim, kind) if "JSD" not in claim else ""), cell
                checked += 1
        assert checked >= 3, page


def test_every_why_link_targets_a_table_holding_one_of_the_claims_runs():
    """Each "why" link of the generated "What reproduces" tables (docs/results.md and the
    README's headline) points at a "Why" table, read back from the generated page, whose
    rows hold at least one of the two runs the claim compares (:func:`judge`'s runs)."""
    from rlcd_lab.reports.report import label, load_summaries

    summaries = load_summaries(REPO / "assets" / "results")
    text = RESULTS_PAGE.read_text(encoding="utf-8")
    tables = {}  # anchor -> the run labels of the Why table under that heading
    for task, body in re.findall(r"^### Why: (\S+)\n(.*?)(?=^#)", text, re.M | re.S):
        rows = re.findall(r"^\| ([^|]+?) \|", body.split(":begin", 1)[-1], re.M)
        tables[f"why-{task}"] = set(rows[1:]) - {"---"}  # less the header
    checked = 0
    for page, name in ((RESULTS_PAGE, "what-reproduces"), (REPO / "README.md", "headline")):
        rows = block(name, page).splitlines()
        tasks = [c.split(" (")[0] for c in rows[0].strip("|").split(" | ")[1:]]
        for row in rows[2:]:
            claim, *cells = row.strip("| ").split(" | ")
            for task, cell in zip(tasks, cells, strict=True):
                for slug in re.findall(r"\]\([^)#]*#([^)]+)\)", cell):
                    (j,) = [j for j in judge(summaries[task]) if j.row == claim]
                    assert len(j.runs) >= 2, (task, claim)
                    held = tables[slug] & {label(r) for r in j.runs}
                    assert held, (page.name, task, claim, j.runs, sorted(tables[slug]))
                    checked += 1
    assert checked >= 20


def test_sweep_table_orders_weights_and_puts_stage1_at_zero():
    cell = {k: {"mean": 0.5, "sd": 0.1} for k in ("accuracy", "brier", "aurc", "T", "length")}
    runs = {
        "endtoend-c1": cell | {"grad_rms_ratio": {"mean": 9.0, "sd": 1.0}},
        "calibrate": cell,
        "endtoend-c0.1": cell | {"grad_rms_ratio": {"mean": 2.5, "sd": None}},
        "grpo": cell,
    }
    rows = sweep_table({"runs": runs}).splitlines()
    assert [r.split(" | ")[0] for r in rows[2:]] == ["| 0", "| 0.1", "| 1"]
    assert rows[2].endswith("| - |") and rows[3].endswith("| 2.500 |")
    assert rows[4].endswith("| 9.000 ± 1.000 |")


def block(name: str, page=RESULTS_PAGE) -> str:
    text = page.read_text(encoding="utf-8")
    m = re.search(rf"<!-- {name}:begin.*?-->\n(.*?)<!-- {name}:end -->", text, re.S)
    assert m, f"{page.name} has no {name} block"
    return m.group(1)


def test_generated_blocks_are_the_modules_output_for_the_shipped_summaries():
    """README.md, docs/results.md and docs/bench.md: every generated block is what
    ``python -m rlcd_lab.reports.report --readme FILE`` writes, none is empty."""
    for name in (
        "what-reproduces",
        "verify",
        "aleatoric",
        "facts",
        "real-model",
        "rung-lr",
        "tune-rung",
        "dev-rung",
    ):
        assert block(name).strip(), f"docs/results.md block {name} is empty"
    assert block("headline", REPO / "README.md").strip()
    for name in ("bench-typed-verify", "bench-typed-facts", "bench-attack-verify"):
        assert "|" in block(name, REPO / "docs" / "bench.md"), name  # a table, generated
    for name in GENERATED:
        page = REPO / name
        assert update_readme(page) == page.read_text(encoding="utf-8"), name


def test_the_headline_keeps_the_main_comparison_and_its_tasks_only():
    """The README's headline table: the full table's RLCD-vs-GRPO rows, cell for cell,
    and only the tasks that have one (aleatoric has none)."""

    def cells(row: str) -> list[str]:  # the "Why" links point into the page from the README
        row = row.replace("](docs/results.md#why-", "](#why-")
        return [c.strip() for c in row.strip().strip("|").split("|")]

    full = block("what-reproduces").splitlines()
    head = block("headline", REPO / "README.md").splitlines()
    rows = [cells(r) for r in full[2:] if r.startswith(f"| {HEADLINE}")]
    assert rows and len(head) == len(rows) + 2
    tasks, kept = cells(full[0])[1:], cells(head[0])[1:]
    assert kept == [t for t in tasks if not t.startswith("aleatoric")]
    for row, mine in zip(rows, head[2:], strict=True):
        by_task = dict(zip(tasks, row[1:], strict=True))
        assert cells(mine) == [row[0]] + [by_task[t] for t in kept]


@pytest.mark.numerics
def test_a_shipped_aurc_ci_recomputes_from_the_dumps_with_the_joint_item_bootstrap():
    """RLCD minus matched-budget GRPO on AURC in the shipped verify summary, recomputed
    from the raw eval dumps: T fitted on dev per seed, AURC per seed averaged, and each
    bootstrap replicate drawing one set of test items for all seeds (loop reference)."""
    from rlcd_lab import metrics
    from rlcd_lab.files.io import read_jsonl

    root = ASSETS / "results" / "verify"
    summary = json.loads((root / "summary.json").read_text())
    seeds = summary["seeds"]
    n = summary["paired"]["reinforce - grpo-matched"]["aurc"]["n_boot"]  # a claim's cell
    conf, ok = {}, {}
    for run in ("reinforce", "grpo-matched"):
        conf[run], ok[run] = [], []
        for s in seeds:
            ev = root / f"seed-{s}" / run / "eval"
            dev, test = read_jsonl(ev / "dev.jsonl"), read_jsonl(ev / "test.jsonl")
            T = metrics.fit_temperature([r["logits"] for r in dev], [r["label"] for r in dev])
            p = metrics.apply_temperature([r["logits"] for r in test], T)
            c, r = metrics.confidence_and_correct(p, [r["label"] for r in test])
            conf[run].append(c)
            ok[run].append(r)
    a, b = "reinforce", "grpo-matched"

    def diff(idx):
        return sum(
            metrics.aurc(conf[a][k][idx], ok[a][k][idx])
            - metrics.aurc(conf[b][k][idx], ok[b][k][idx])
            for k in range(len(seeds))
        ) / len(seeds)

    items = len(conf[a][0])
    draws = np.random.default_rng(0).integers(0, items, size=(n, items))
    reps = [diff(i) for i in draws]
    shipped = summary["paired"][f"{a} - {b}"]["aurc"]
    # the summary holds 10 significant digits (results.SUMMARY_DIGITS): rel 5e-10
    assert shipped["diff"] == pytest.approx(diff(np.arange(items)), rel=1e-9)
    assert shipped["ci_low"] == pytest.approx(np.percentile(reps, 2.5), rel=1e-9)
    assert shipped["ci_high"] == pytest.approx(np.percentile(reps, 97.5), rel=1e-9)


@pytest.mark.numerics
def test_shipped_real_model_summary_recomputes_from_its_dumps():
    """Every run's T and accuracy in the shipped rung summary follow from its eval dumps
    (per seed, then the mean over the seeds it was trained on: three, more for two-stage
    RLCD and GRPO-matched, which get ten)."""
    from rlcd_lab.files.io import read_jsonl
    from rlcd_lab.summary import summarize

    root = ASSETS / "results" / RUNG
    summary = json.loads((root / "summary.json").read_text())
    names = {"base", "calibrate", "reinforce", "sft-matched", "rft-kl-matched", "grpo-matched"}
    names |= {"rlcr-matched", "rlcr-stated-matched"}
    posthoc = {f"grpo-matched+{c}" for c in summary["posthoc"]["cv_dev_brier"]}
    assert set(summary["runs"]) == names | posthoc
    for run, entry in summary["runs"].items():
        if run in posthoc:  # recalibrated on dev, no dumps of its own (test_posthoc.py)
            continue
        rows, sizes = [], []
        evals = sorted(root.glob(f"seed-*/{run}/eval"))
        assert len(evals) >= (4 if run in ("calibrate", "reinforce", "grpo-matched") else 3), run
        for ev in evals:
            rows.append(summarize(read_jsonl(ev / "test.jsonl"), read_jsonl(ev / "dev.jsonl")))
            config = json.loads((ev.parents[1] / "calibrate" / "config.json").read_text())
            sizes.append(config["test_items"])  # every run of a seed tests the same items
        # the summary holds 10 significant digits (results.SUMMARY_DIGITS): rel 5e-10
        assert np.mean([r["T"] for r in rows]) == pytest.approx(entry["T"]["mean"], rel=1e-9)
        acc = np.mean([r["ts_accuracy"] for r in rows])
        assert acc == pytest.approx(entry["accuracy"]["mean"], rel=1e-9)
        assert [r["n"] for r in rows] == sizes


def test_shipped_adapter_loads_on_the_smollm2_base(smollm2_dir):
    """A shipped adapter (no tokenizer files, base path of the machine that trained it)
    loads on the offline SmolLM2 and changes its output."""
    import torch

    from rlcd_lab.lm.loading import load_checkpoint

    final = ASSETS / "results" / RUNG / "seed-17" / "reinforce" / "final"
    assert not (final / "tokenizer.json").exists()
    model, tok, meta = load_checkpoint(final)
    base, _, _ = load_checkpoint(smollm2_dir)
    ids = tok("Answer: B", return_tensors="pt").input_ids
    with torch.no_grad():
        assert not torch.allclose(model(ids).logits, base(ids).logits)
    assert meta["method"] == "reinforce" and Path(meta["task"]).stem.startswith(RUNG)


def test_paired_table_lists_only_rlcd_minus_each_run():
    """The aleatoric summary also holds Table 3's own pairs (mixture - endtoend, ...): the
    "RLCD minus" table shows RLCD's pairs only, one row per run, each once."""
    from rlcd_lab.reports.report import label, paired_table

    summary = json.loads((ASSETS / "results" / "aleatoric" / "summary.json").read_text())
    assert any(not p.startswith("reinforce - ") for p in summary["paired"])
    rows = paired_table(summary).splitlines()[2:]
    mine = [p.split(" - ")[1] for p in summary["paired"] if p.startswith("reinforce - ")]
    assert sorted(r.split(" | ")[0].removeprefix("| ") for r in rows) == sorted(map(label, mine))


def test_the_performance_page_quotes_the_wall_times_the_reproductions_ship(tmp_path):
    """docs/performance.md's wall times of the reproductions are their shipped timing.json
    files, one row each (fabricated files: minutes from seconds, runs counted, a run in
    pieces said so), and the page quotes no other reproduction wall time."""
    runs = [{"run": "a", "seed": 1, "reused": False}, {"run": "b", "seed": 1, "reused": True}]
    for task, wall, jobs, rows in (("b-task", 90, 1, runs[:1]), ("a-task", 1800, 2, runs)):
        (tmp_path / task).mkdir()
        (tmp_path / task / "timing.json").write_text(
            json.dumps({"wall_s": wall, "jobs": jobs, "runs": rows})
        )
    for run, steps in (("seed-1/a", [3600.0, 1800.0]), ("tune/lr-0.1/a-task/seed-1/b", [720.0])):
        (tmp_path / "a-task" / run).mkdir(parents=True)
        log = "".join(json.dumps({"step": i, "time_step": t}) + "\n" for i, t in enumerate(steps))
        (tmp_path / "a-task" / run / "log.jsonl").write_text(log)
    (tmp_path / "no-timing").mkdir()
    assert timing_table(tmp_path).splitlines()[2:] == [  # it ran in pieces: 1.5 h + 0.2 h logged
        "| `a-task` | 2 | 2 | ran in pieces (1 of its runs had finished before the invocation "
        "`timing.json` times): 1.7 h of training steps in its runs' logs |",
        "| `b-task` | 1 | 1 | 1.5 min |",
    ]
    page = REPO / "docs" / "performance.md"
    shipped = block("timing-shipped", page)
    assert shipped == timing_table(ASSETS / "results")
    tasks = sorted(p.parent.name for p in (ASSETS / "results").glob("*/timing.json"))
    assert {"verify", "facts", "aleatoric"} <= set(tasks) and shipped.count("\n") == len(tasks) + 2
    rows = [r for r in page.read_text(encoding="utf-8").splitlines() if "`rlcd-lab reproduce`" in r]
    quoted = {m for r in rows if "tiny" in r for m in re.findall(r"\d+\.\d+ min", r)}
    assert not quoted, f"reproduction wall times quoted beside the shipped ones: {quoted}"


def test_the_logged_hours_table_sums_each_runs_step_times_by_seed_and_tuning(tmp_path):
    """Fabricated logs: a seed's run is its ``time_step`` summed, the tuning runs are
    summed over the grid, a seed without a run is a blank cell, folders without a log
    are left out; rows by seed number, then tuning and the total, each with its sum."""
    logs = {  # run folder -> step times (s)
        "seed-9/calibrate": [1800.0, 1800.0],
        "seed-9/grpo-matched": [360.0],
        "seed-10/calibrate": [900.0],
        "tune/lr-0.1/t/seed-9/calibrate": [180.0],
        "tune/lr-0.2/t/seed-9/calibrate": [540.0],
    }
    for run, steps in logs.items():
        (tmp_path / run).mkdir(parents=True)
        rows = [{"step": i, "time_step": t} for i, t in enumerate(steps)]
        (tmp_path / run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "seed-9" / "base").mkdir()  # an evaluation, no log
    assert logged_hours_table(tmp_path).splitlines() == [
        "| hours | `grpo-matched` | `calibrate` | all |",
        "|---|---|---|---|",
        "| seed-9 | 0.10 | 1.00 | 1.10 |",
        "| seed-10 |  | 0.25 | 0.25 |",
        "| tuning (every value of the grid) |  | 0.20 | 0.20 |",
        "| total | 0.10 | 1.45 | 1.55 |",
    ]


def test_the_performance_page_gives_the_rungs_hours_its_shipped_logs_hold():
    """docs/performance.md's table of the rung's training hours is the generator's output
    for the shipped reproduction, and its cells and totals are the logs' ``time_step``
    sums, read here straight from the packed files."""
    import lzma
    from collections import defaultdict

    fair = ASSETS / "results" / "basic-skills-arithmetic-verify-pairs"
    shipped = block("hours-rung", REPO / "docs" / "performance.md")
    assert shipped == logged_hours_table(fair)
    hours: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for log in fair.rglob("log.jsonl.xz"):
        run = log.parent
        where = "tuning" if "tune" in run.relative_to(fair).parts else run.parent.name
        with lzma.open(log, "rt", encoding="utf-8") as f:
            hours[where][run.name] += sum(json.loads(line)["time_step"] for line in f) / 3600
    rows = {r.split(" | ")[0].removeprefix("| "): r for r in shipped.splitlines()[2:]}
    for where, by_run in hours.items():
        row = rows["tuning (every value of the grid)" if where == "tuning" else where]
        assert row.endswith(f" | {sum(by_run.values()):.2f} |"), row
        for run, h in by_run.items():
            col = shipped.splitlines()[0].split(" | ").index(f"`{run}`")
            assert row.split(" | ")[col] == f"{h:.2f}", (where, run)
    total = sum(h for by_run in hours.values() for h in by_run.values())
    assert rows["total"].endswith(f" | {total:.2f} |")
    assert f"{total:.1f} h of training steps in its runs' logs" in block(
        "timing-shipped", REPO / "docs" / "performance.md"
    )


def test_the_performance_page_gives_rlcds_and_grpos_pace_from_the_shipped_logs():
    """The sentence under the rung's hours: the median over the shipped seeds of two-stage
    RLCD's (stage 1 + stage 2) and GRPO-matched's hours, and ten seeds of both at that pace;
    why the median: seed 31's stages each logged one step that spans a stop of the process."""
    from rlcd_lab.files.rundir import read_log
    from rlcd_lab.reports.report import logged_hours

    root = ASSETS / "results" / "basic-skills-arithmetic-verify-pairs"
    hours = logged_hours(root)
    seeds = sorted(hours["reinforce"].keys() - {"tune"})
    rlcd = np.median([hours["calibrate"][s] + hours["reinforce"][s] for s in seeds])
    grpo = np.median([hours["grpo-matched"][s] for s in seeds])
    text = " ".join((REPO / "docs" / "performance.md").read_text(encoding="utf-8").split())
    assert (
        f"Two-stage RLCD (stage 1 and stage 2) took {rlcd:.2f} h and GRPO-matched {grpo:.2f} h "
        f"of training steps a seed, the median over the shipped seeds: at that pace ten seeds "
        f"of the two come to {10 * (rlcd + grpo):.1f} core-hours of training steps"
    ) in text
    stops = [
        max(r["time_step"] for r in read_log(root / "seed-31" / n))
        for n in ("calibrate", "reinforce")
    ]
    assert (
        "one step each that spans hours the process spent stopped ({:,.0f} s and {:,.0f} s;".format(
            *stops
        )
        in text
    )
    assert f"against the {10 * (rlcd + grpo):.1f} core-hours of training steps above" in text


def test_the_wall_time_line_says_when_a_reproduction_ran_in_pieces(tmp_path):
    """A timing.json whose runs all ran in its invocation gives the reproduction's wall
    time; one where some runs had finished in earlier invocations (reused) says that it
    times the last piece only, and how many runs were reused."""
    import shutil

    shutil.copy(ASSETS / "results" / "rung-lr" / "lr-1e-4" / "summary.json", tmp_path)
    page = tmp_path / "page.md"
    block = "<!-- x:begin (generated from summary.json by hand) -->\n<!-- x:end -->\n"
    runs = [{"run": "a", "seed": 1, "reused": False}, {"run": "b", "seed": 1, "reused": False}]
    for reused, expected in (
        (0, "Wall time of this reproduction: 2.5 min for 2 runs, 2 at a time (`timing.json`)."),
        (1, "Wall time of the last of the invocations that ran this reproduction: 2.5 min, 2 "
            "runs at a time; 1 of its 2 runs had finished in earlier ones (`timing.json`)."),
    ):  # fmt: skip
        runs[0]["reused"] = bool(reused)
        (tmp_path / "timing.json").write_text(json.dumps({"wall_s": 150, "jobs": 2, "runs": runs}))
        page.write_text(block)
        assert expected in update_readme(page)
