"""Evaluation and a training step on the rung, old code against new, side by side.

    .venv/bin/python benchmarks/eval_speed.py --old a835595 [--items 16] [--reps 3] \
        [--kinds eval step]

Both trees run the same work in fresh processes, one thread each, interleaved (old, new,
old, new, ...), each timed in CPU seconds of its own process around the measured call
(not the load):

* ``eval``: ``evaluate.run_eval`` of the shipped rung adapter (the fair test's seed-17
  two-stage RLCD,
  ``assets/results/basic-skills-arithmetic-verify-pairs/seed-17/reinforce/final``,
  SmolLM2-135M + LoRA r = 8) on the first ``--items`` test items of
  ``basic-skills-arithmetic-verify-pairs`` (``rlcd-lab data fetch
  basic-skills-arithmetic-verify-pairs`` writes them), m = 1, 40 new tokens, seed 0: the
  rung's evaluation settings. Reported per item. (The figures of benchmarks/RESULTS.md up
  to 2026-12-07 timed the 12-step rung's adapter on ``basic-skills-arithmetic-verify``,
  the same model, adapter rank and test questions.)
* ``step``: reinforce steps of the training loop itself (``train.rlcd.train``, 3 steps of
  ``--items`` questions x 4 rationales, 40 tokens, LoRA r = 8 on SmolLM2, the shipped
  stage-2 adapter as both the trained model and the frozen anchor, as only it ships its
  weights): the loop's own ``time_step`` of steps 2 and 3 (sampling, the scoring pass with
  gradient, the anchor's pass, backward, the optimizer), its clock set to CPU seconds. The
  first step's reward and KL say whether both trees drew the same rationales.

``--old`` is a git revision of this repository, checked out into a worktree in a scratch
folder (``tempfile.mkdtemp``), removed when the script ends. The rows also say how many
rationales came out identical and the largest readout difference on those (the new path
reads the shared prefix once and merges the adapter, so the bits, and rarely a token,
differ). The CPU is named on the first line.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNG = REPO / "assets" / "results" / "basic-skills-arithmetic-verify-pairs" / "seed-17"

CHILD = r"""
import json, sys, time, torch
from pathlib import Path
torch.set_num_threads(1)
kind, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:  # the module paths since the restructuring, else the old code's
    from rlcd_lab.lm.loading import load_checkpoint
    from rlcd_lab.files.io import read_jsonl
    from rlcd_lab.methods.configs import preset
except ImportError:
    from rlcd_lab.loading import load_checkpoint
    from rlcd_lab.io import read_jsonl
    from rlcd_lab.methods.configs import preset
from rlcd_lab.tasks import load_task_items
rung = Path(sys.argv[4])
task = Path.home() / ".cache/rlcd_lab/data/basic-skills-arithmetic-verify-pairs.jsonl"
items = list(load_task_items(str(task), "test"))[:n]
if kind == "eval":
    from rlcd_lab.evaluate import run_eval
    model, tok, meta = load_checkpoint(rung / "reinforce" / "final")
    model.eval()
    t0 = time.process_time()
    rows = run_eval(model, tok, items, m=1, max_new_tokens=40, seed=0)
    cpu = time.process_time() - t0
    res = {"cpu": cpu / len(items), "texts": [r["rationales"][0] for r in rows],
           "logits": [r["logits"] for r in rows]}
else:  # real training steps, their CPU time as the loop logs it (time_step)
    import tempfile
    time.perf_counter = time.process_time  # the loop's clock: CPU seconds of this process
    from rlcd_lab.train.rlcd import train
    init = rung / "reinforce" / "final"
    tmp = Path(tempfile.mkdtemp())
    cfg = preset("reinforce", init=init, ref=init, task=str(task), out=tmp / "run",
                 steps=3, batch_size=n, m=4, max_new_tokens=40, lr=3e-4, eval_items=1,
                 test_items=0, eval_every=0, save_every=1000, device="cpu", seed=0)
    run = train(cfg)
    log = [r for r in read_jsonl(Path(run) / "log.jsonl") if "time_step" in r]
    steps = [r["time_step"] for r in log[1:]]  # the first step warms up
    res = {"cpu": sum(steps) / len(steps), "texts": [], "logits": [],
           "first": [log[0]["reward"], log[0]["kl"]]}
Path(out).write_text(json.dumps(res))
"""


def worktree(rev: str) -> Path:
    """A detached git worktree of ``rev`` in a new scratch folder (``tempfile.mkdtemp``),
    removed with its folder when the process exits."""
    path = Path(tempfile.mkdtemp(prefix="rlcd-lab-old-")) / "tree"
    atexit.register(remove_worktree, path)
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), rev],
                   check=True, capture_output=True)  # fmt: skip
    return path


def remove_worktree(path: Path) -> None:
    """Remove the worktree at ``path`` from the repository and its scratch folder."""
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)],
                   capture_output=True)  # fmt: skip
    shutil.rmtree(path.parent, ignore_errors=True)


def run(tree: Path, kind: str, items: int) -> dict:
    fd, name = tempfile.mkstemp(prefix="eval-speed-", suffix=".json")
    os.close(fd)
    out = Path(name)
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    subprocess.run([sys.executable, "-c", CHILD, kind, str(items), str(out), str(RUNG)],
                   check=True, env=env, cwd=tree)  # fmt: skip
    try:
        return json.loads(out.read_text())
    finally:
        out.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", required=True, help="git revision of the old code")
    ap.add_argument("--items", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--kinds", nargs="+", default=["eval", "step"])
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from rlcd_lab.bench.common import machine

    print(f"CPU: {machine()}; one torch thread per process; CPU seconds")
    old = worktree(args.old)
    print("| work | old (s) | new (s) | old / new | identical rationales | max logit diff |")
    print("|---|---|---|---|---|---|")
    for kind in args.kinds:
        times = {"old": [], "new": []}
        last = {}
        for _ in range(args.reps):
            for name, tree in (("old", old), ("new", REPO)):
                last[name] = run(tree, kind, args.items)
                times[name].append(last[name]["cpu"])
        if kind == "step":
            o, n = statistics.median(times["old"]), statistics.median(times["new"])
            same = f"{last['old']['first']} vs {last['new']['first']}"
            print(f"| step ({args.items} questions x 4) | {o:.2f} [{min(times['old']):.2f}, "
                  f"{max(times['old']):.2f}] | {n:.2f} [{min(times['new']):.2f}, "
                  f"{max(times['new']):.2f}] | {o / n:.2f}x | first step's reward and KL: "
                  f"{same} | |")  # fmt: skip
            continue
        pairs = zip(last["old"]["texts"], last["new"]["texts"], strict=True)
        same = [i for i, (a, b) in enumerate(pairs) if a == b]
        diffs = [
            abs(x - y)
            for i in same
            for x, y in zip(last["old"]["logits"][i], last["new"]["logits"][i], strict=True)
            if abs(x) != float("inf")
        ]
        diff = max(diffs, default=0.0)
        o, n = statistics.median(times["old"]), statistics.median(times["new"])
        unit = "per item" if kind == "eval" else "per step"
        print(f"| {kind} ({unit}) | {o:.3f} [{min(times['old']):.3f}, {max(times['old']):.3f}] "
              f"| {n:.3f} [{min(times['new']):.3f}, {max(times['new']):.3f}] | {o / n:.2f}x "
              f"| {len(same)}/{len(last['new']['texts'])} | {diff:.1e} |")  # fmt: skip


if __name__ == "__main__":
    main()
