"""Two reinforce steps of the rung's training loop: their sampling and step CPU seconds and
the process's peak resident memory.

    OMP_NUM_THREADS=1 TQDM_DISABLE=1 PYTHONPATH=<tree> .venv/bin/python \
        benchmarks/step_memory.py

``train.rlcd.train`` as ``benchmarks/eval_speed.py --kinds step --items 8`` configures it
(the shipped seed-17 rung adapter as model and anchor, 8 questions x 4 rationales of at
most 40 tokens, lr 3e-4) with the gradient-dilution diagnostic off; the loop's clock is
the process's CPU time. Prints one JSON line: ``maxrss_gb`` (``ru_maxrss``), the logged
``time_sample`` and ``time_step`` of both steps, the first step's ``reward`` and ``kl``
(equal across trees when both drew the same rationales). Run it once per tree (the
``PYTHONPATH``) to compare code.
"""

from __future__ import annotations

import json
import resource
import shutil
import tempfile
import time
from pathlib import Path

import torch

RUNG = Path(__file__).resolve().parents[1] / "assets/results"
RUNG = RUNG / "basic-skills-arithmetic-verify-pairs" / "seed-17" / "reinforce" / "final"
TASK = Path.home() / ".cache/rlcd_lab/data/basic-skills-arithmetic-verify-pairs.jsonl"


def main() -> None:
    torch.set_num_threads(1)
    time.perf_counter = time.process_time  # the loop's clock: CPU seconds of this process
    from rlcd_lab.files.io import read_jsonl
    from rlcd_lab.methods.configs import preset
    from rlcd_lab.train.rlcd import train

    tmp = Path(tempfile.mkdtemp(prefix="step-memory-"))
    try:
        cfg = preset(
            "reinforce", init=RUNG, ref=RUNG, task=str(TASK), out=tmp / "run", steps=2,
            batch_size=8, m=4, max_new_tokens=40, lr=3e-4, eval_items=1, test_items=0,
            eval_every=0, save_every=1000, device="cpu", seed=0, grad_terms_every=0,
        )  # fmt: skip
        log = list(read_jsonl(Path(train(cfg)) / "log.jsonl"))
    finally:
        shutil.rmtree(tmp)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(
        json.dumps(
            {
                "maxrss_gb": peak,
                "time_sample": [r["time_sample"] for r in log],
                "time_step": [r["time_step"] for r in log],
                "reward": log[0]["reward"],
                "kl": log[0]["kl"],
            }
        )
    )


if __name__ == "__main__":
    main()
