"""The paper's own setup (examples/paper_gpu.sh, ``reproduce --scale paper``) run end to end
at toy size on the CPU: the shipped tiny base model, 2 steps per stage, 4 test items, one
seed. Every run's recorded config must carry the paper's settings (Algorithm 1 and its
section 4: AdamW lr 2e-6, 8 questions x 4 rationales, beta 0.04, c 0.3, full fine-tuning in
bfloat16, 400 steps per stage) except the sizes the toy overrides."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlcd_lab.files import rundir
from rlcd_lab.reproduce import SCALES

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "examples" / "paper_gpu.sh"
RUNS = ("calibrate", "reinforce", "grpo-matched", "rft-kl-matched", "rlcr-matched", "sft-matched")


def test_the_paper_scale_is_the_papers_setup():
    paper = SCALES["paper"]
    assert (paper["steps"], paper["lr"], paper["bf16"]) == (400, 2e-6, True)
    assert "lora_r" not in paper and "batch_size" not in paper and "m" not in paper  # 0, 8, 4


@pytest.mark.slow
def test_the_gpu_recipe_runs_end_to_end_at_toy_size(tmp_path):
    env = dict(
        os.environ,
        RLCD_LAB=f"{sys.executable} -m rlcd_lab.cli",
        RLCD_LAB_EXTRA="--steps 2 --test-items 4 --seeds 17",
        OMP_NUM_THREADS="1",
        TQDM_DISABLE="1",
    )
    base = REPO / "assets" / "checkpoints" / "base-verify"
    out = tmp_path / "paper"
    done = subprocess.run(
        ["bash", str(SCRIPT), str(base), "verify", str(out)],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    task = out / "verify"
    assert (task / "report.md").is_file() and (task / "summary.json").is_file()
    seed = rundir.seed_dir(task, 17)
    assert rundir.has_eval(seed / "base", "test")
    for name in RUNS:
        cfg = json.loads(rundir.config_file(seed / name).read_text())
        assert rundir.has_final(seed / name), name
        assert (cfg["lr"], cfg["batch_size"], cfg["lora_r"], cfg["bf16"]) == (2e-6, 8, 0, True)
        if name != "sft-matched":  # SFT answers directly: no rationales to sample
            assert (cfg["m"], cfg["max_new_tokens"]) == (4, 256)
        else:
            assert "m" not in cfg and "max_new_tokens" not in cfg
        assert cfg["steps"] == (4 if name.endswith("-matched") else 2), name
        if name != "calibrate" and name != "sft-matched":
            assert cfg["beta"] == 0.04, name  # every RL run anchored by KL, as Algorithm 1
    reinforce = json.loads(rundir.config_file(seed / "reinforce").read_text())
    assert reinforce["sf_weight"] == 0.3
    assert Path(reinforce["init"]) == rundir.final_dir(seed / "calibrate")
    summary = json.loads((task / "summary.json").read_text())
    assert {"reinforce", "grpo-matched"} <= set(summary["runs"])
