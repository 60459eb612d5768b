"""lm-evaluation-harness: the rlcd tasks and model report what `rlcd-lab eval` reports.

The reference is ``rlcd_lab.cli.run_eval_command`` (the body of ``rlcd-lab eval``:
``summarize(run_eval(...))``) on the same shipped checkpoint, task, split, mode, seed and
first N items. The harness asks for every option's log-likelihood; the ``rlcd`` model
answers ``log u_k`` from the same reading (same questions in the same order, same seeds,
same batches), so ``softmax`` of the answers is the readout ``rlcd-lab eval`` scores and
every metric agrees to float64 rounding (1e-9 asserted). Offline: no hub, no download.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

lm_eval = pytest.importorskip("lm_eval")

from lm_eval.tasks import TaskManager  # noqa: E402

from rlcd_lab import metrics  # noqa: E402
from rlcd_lab.cli import Eval, run_eval_command  # noqa: E402
from rlcd_lab.evaluate import run_eval  # noqa: E402
from rlcd_lab.lm.loading import load_checkpoint  # noqa: E402
from rlcd_lab.lm_eval_tasks import TASK_DIR, register  # noqa: E402
from rlcd_lab.lm_eval_tasks.tasks import METRICS  # noqa: E402
from rlcd_lab.tasks import load_task_items  # noqa: E402
from rlcd_lab.tasks.items import TaskItem, write_items  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CHECKPOINTS = REPO / "assets" / "checkpoints"
VERIFY = CHECKPOINTS / "base-verify"
OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}
N = 50


@pytest.fixture(scope="module", autouse=True)
def offline():
    """No hub access for datasets or transformers while these tests run."""
    with pytest.MonkeyPatch.context() as mp:
        for k, v in OFFLINE.items():
            mp.setenv(k, v)
        register()
        yield


def harness(task: str, limit: int, include=(), **model_args) -> dict:
    """``lm_eval.simple_evaluate`` with the ``rlcd`` model on one task; its results row."""
    manager = TaskManager(include_path=[str(TASK_DIR), *map(str, include)], include_defaults=False)
    out = lm_eval.simple_evaluate(
        model="rlcd",
        model_args=model_args,
        tasks=[task],
        task_manager=manager,
        limit=limit,
        bootstrap_iters=0,
        log_samples=False,
    )
    row = out["results"][task]
    assert row["sample_len"] == limit
    return row


def assert_same(row: dict, ref: dict, keys=METRICS, tol: float = 1e-9) -> float:
    """Every metric of the harness row equals the reference; returns the largest gap."""
    gaps = {k: abs(row[f"{k},none"] - ref[k]) for k in keys}
    assert max(gaps.values()) <= tol, gaps
    return max(gaps.values())


@pytest.mark.parametrize("mode", ["direct", "reason"])
def test_verify_metrics_equal_rlcd_lab_eval(mode):
    row = harness("rlcd_verify", N, checkpoint=str(VERIFY), mode=mode)
    ref = run_eval_command(Eval(checkpoint=VERIFY, task="verify", mode=mode, limit=N))
    assert ref["n"] == N
    assert_same(row, ref)
    if mode == "reason":  # the rationale made a difference: not the direct readout's numbers
        direct = run_eval_command(Eval(checkpoint=VERIFY, task="verify", mode="direct", limit=N))
        assert row["brier,none"] != direct["brier"]


def test_aleatoric_reports_jsd_too():
    ckpt = CHECKPOINTS / "base-aleatoric"
    row = harness("rlcd_aleatoric", 30, checkpoint=str(ckpt), mode="reason", seed=3)
    ref = run_eval_command(Eval(checkpoint=ckpt, task="aleatoric", mode="reason", limit=30, seed=3))
    assert "jsd" in ref
    assert_same(row, ref, keys=(*METRICS, "jsd"))


def test_a_task_file_with_items_of_their_own_option_counts(tmp_path):
    """A user's task: a task-item JSONL file (2 or 3 options per item) through a YAML that
    includes the shipped template; metrics are per item over its own options."""
    items = [
        TaskItem(it.uid, it.prompt, it.options + (("0",) if i % 3 == 0 else ()), it.label)
        for i, it in enumerate(load_task_items("verify", "test")[:30])
    ]
    write_items(tmp_path / "mine.test.jsonl", items)
    (tmp_path / "rlcd_mine.yaml").write_text(
        f"include: {TASK_DIR / '_rlcd_template_yaml'}\ntask: rlcd_mine\n"
        f"dataset_kwargs:\n  items: {tmp_path / 'mine.jsonl'}\n",
        encoding="utf-8",
    )
    row = harness("rlcd_mine", 30, include=[tmp_path], checkpoint=str(VERIFY), mode="direct")
    ref = run_eval_command(
        Eval(checkpoint=VERIFY, task=str(tmp_path / "mine.jsonl"), mode="direct")
    )
    assert ref["n"] == 30
    assert_same(row, ref)


def test_mixture_readout_scores_the_mean_readout():
    """``readout=mixture``: the answers are ``log p``, ``p`` the mean of the m readouts;
    compared with the float32 ``mixture`` of ``run_eval``'s rows (hence 1e-6)."""
    row = harness("rlcd_verify", 20, checkpoint=str(VERIFY), mode="reason", m=3, readout="mixture")
    model, tok, _ = load_checkpoint(VERIFY)
    rows = run_eval(model, tok, load_task_items("verify", "test")[:20], mode="reason", m=3)
    probs = metrics.pad_ragged([r["mixture"] for r in rows], 0.0)
    ref = metrics.evaluate(probs, [r["label"] for r in rows])
    assert_same(row, ref, tol=1e-6)


def test_command_line_wrapper_runs_lm_eval_with_the_rlcd_model(tmp_path):
    """``python -m rlcd_lab.lm_eval_tasks`` is lm-eval's command line with ``rlcd``
    registered and the task folder included; its results file holds the same numbers."""
    args = [
        "--model", "rlcd",
        "--model_args", f"checkpoint={VERIFY},mode=direct",
        "--tasks", "rlcd_verify",
        "--limit", "20",
        "--output_path", str(tmp_path / "out"),
    ]  # fmt: skip
    env = {**os.environ, **OFFLINE, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "rlcd_lab.lm_eval_tasks", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (results,) = (tmp_path / "out").rglob("results_*.json")
    row = json.loads(results.read_text(encoding="utf-8"))["results"]["rlcd_verify"]
    ref = run_eval_command(Eval(checkpoint=VERIFY, task="verify", mode="direct", limit=20))
    assert_same(row, ref)
    assert "rlcd_verify" in done.stdout and "cov_at_eps" in done.stdout  # lm-eval's table


def test_each_option_gets_its_log_readout_and_bad_options_are_refused():
    """Direct calls: a question's answers are ``log u`` (``exp`` sums to 1, equals the
    reader's ``u``), the greedy flag marks ``argmax u`` only, requests come back in their
    order; an option that is not one token after the marker is a ``ValueError`` naming the
    task and doc."""
    from lm_eval.api.instance import Instance

    from rlcd_lab.lm_eval_tasks.model import RLCDLM
    from rlcd_lab.reader.reading import read

    lm = RLCDLM(checkpoint=str(VERIFY), mode="direct")
    prompts = ["12+3=15?", "40+2=43?"]

    def req(doc_id: int, idx: int, option: str, task: str = "t") -> Instance:
        ctx = prompts[doc_id]
        return Instance("loglikelihood", {}, (ctx, f" {option}"), idx, (task, doc_id, 1))

    requests = [req(1, 1, "N"), req(0, 0, "Y"), req(1, 0, "Y"), req(0, 1, "N")]
    out = lm.loglikelihood(requests)
    u = [
        r.u[0].double().numpy()
        for r in read(lm.model, lm.tokenizer, prompts, [["Y", "N"]] * 2, mode="direct")
    ]
    got = {(r.doc_id, r.idx): o for r, o in zip(requests, out, strict=True)}
    for d in (0, 1):
        p = [float(np.exp(got[d, k][0])) for k in (0, 1)]
        assert sum(p) == pytest.approx(1.0, abs=1e-12)
        assert p == pytest.approx(u[d].tolist(), abs=1e-6)
        assert [got[d, k][1] for k in (0, 1)] == [k == int(np.argmax(p)) for k in (0, 1)]
    with pytest.raises(ValueError, match=r"lm-eval task t: item 'doc 0'"):
        lm.loglikelihood([req(0, 0, "Yes"), req(0, 1, "No")])
