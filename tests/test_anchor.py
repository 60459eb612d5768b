"""Stage 2 stays near its anchor: the KL estimate to the stage-1 model, logged every step,
stays bounded over a short reinforce run on the tiny model and on the SmolLM2 rung.

The estimate is the mean over a step's rationales of ``log pi_theta(r) - log pi_ref(r)``
(sequence level, nats): 0 at the first step, when the trained model is its anchor. In the
rung's 12-step stage 2 at lr 3e-4 it peaked at 1.7 to 11 nats, at 1e-4 within 1.4
(``assets/results/rung-lr/lr-*/seed-*/reinforce/log.jsonl``; docs/results.md quotes them,
``tests/test_docs.py`` checks the quote): the drift is the step size.
"""

import json

import pytest

from rlcd_lab.files.assets import ASSETS
from rlcd_lab.files.rundir import read_log
from rlcd_lab.methods.configs import preset
from rlcd_lab.reproduce import RUNG_GRID, SCALES
from rlcd_lab.train.rlcd import train


def _kl(run) -> list[float]:
    log = read_log(run)
    assert all(isinstance(r["kl"], float) for r in log)  # logged at every step
    return [r["kl"] for r in log]


def test_a_short_stage2_on_the_tiny_model_stays_near_its_anchor(tmp_path):
    """At the tiny scale's learning rate the estimate stays under a nat over ten steps (the
    shipped tiny runs: at most 1.8 over 200); ten times that rate leaves the anchor at once
    (2 to 8 nats within ten steps), the drift the rung showed at 3e-4."""
    tiny = SCALES["tiny"]
    kl = {}
    for lr in (tiny["lr"], 10 * tiny["lr"]):
        cfg = preset(
            "reinforce",
            init=ASSETS / "checkpoints" / "base-verify",
            task="verify",
            out=tmp_path / f"r{lr:g}",
            steps=10,
            lr=lr,
            max_new_tokens=tiny["max_new_tokens"],
            eval_items=4,
            test_items=0,
            eval_every=0,
            device="cpu",
            seed=3,
        )
        kl[lr] = _kl(train(cfg))
        assert abs(kl[lr][0]) < 1e-5 and len(kl[lr]) == 10  # the anchor is the start
    assert max(map(abs, kl[tiny["lr"]])) < 1.0, kl
    assert max(kl[10 * tiny["lr"]]) > 1.0, kl


def _arithmetic_task(path):
    """A few basic-skills-style verification items (true answer or off by one), as the
    rung's task file with its three splits."""
    rows = []
    for i, (a, b) in enumerate([(4, 8), (9, 5), (15, 7), (6, 7), (12, 9), (8, 5), (3, 9), (7, 6)]):
        wrong = i % 2
        proposed = a + b + wrong
        prompt = (
            f"Question: {a} + {b} =\nProposed answer: {proposed}\n"
            "Is the proposed answer correct? (yes or no)"
        )
        rows.append({"uid": f"a{i}", "prompt": prompt, "options": ["yes", "no"], "label": wrong})
    text = "".join(json.dumps(r) + "\n" for r in rows)
    for name in ("", ".train", ".dev", ".test"):
        (path.parent / f"{path.stem}{name}.jsonl").write_text(text)
    return path


@pytest.mark.smollm2
def test_a_short_stage2_on_the_rung_stays_near_its_anchor(smollm2_dir, tmp_path):
    rung = SCALES["rung"]
    cfg = preset(
        "reinforce",
        init=ASSETS / "checkpoints" / "smollm2-arith-verify",
        task=str(_arithmetic_task(tmp_path / "arith.jsonl")),
        out=tmp_path / "r",
        steps=3,
        batch_size=2,
        m=4,
        lr=max(RUNG_GRID),
        lora_r=rung["lora_r"],
        max_new_tokens=rung["max_new_tokens"],
        eval_items=1,
        test_items=0,
        eval_every=0,
        device="cpu",
        seed=0,
    )
    kl = _kl(train(cfg))
    assert abs(kl[0]) < 1e-4 and len(kl) == 3
    assert max(map(abs, kl)) < 0.5, kl
