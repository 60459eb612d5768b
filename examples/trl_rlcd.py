"""RLCD inside TRL: stage 1 (calibrate), then stage 2 (reinforce), on the shipped tiny base.

    OMP_NUM_THREADS=1 .venv/bin/python examples/trl_rlcd.py [--steps 5] [--out DIR]

Needs the optional extra (``pip install 'rlcd_lab[trl]'``); offline, CPU, well under a
minute. The model is ``assets/checkpoints/base-verify`` (a 381k-parameter Llama with a
character tokenizer, pretrained on the ``verify`` task: is this proposed sum right?).
Both stages run in TRL's ``GRPOTrainer`` machinery (its data loader, its ``generate``,
its optimizer and logging) with RLCD's loss (``rlcd_lab.integrations.trl.RLCDTrainer``):

* stage 1, ``calibrate``: the Brier score of the readout after each sampled rationale,
  pathwise gradient only;
* stage 2, ``reinforce``: the same score also as the reward of the rationale (score-function
  term, weight 0.3, leave-one-out baseline over the question's 4 rationales) with the KL
  anchor (beta 0.04) at the stage-1 model.

It prints the readout metrics TRL logged at every step and, before and after each stage,
those of 32 dev questions read with 2 rationales each (accuracy and Brier error of the
mixture readout, mean per-rationale Brier score, forced-marker rate).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
from transformers import PrinterCallback
from transformers.utils import logging as hf_logging

from rlcd_lab.integrations.trl import RLCDSettings, RLCDTrainer, rlcd_args, rlcd_dataset
from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.metrics import accuracy, brier
from rlcd_lab.reader.reading import read
from rlcd_lab.scoring import brier_score
from rlcd_lab.tasks import load_task_items

BASE = Path(__file__).resolve().parents[1] / "assets" / "checkpoints" / "base-verify"
QUESTIONS, M, MAX_NEW = 4, 4, 48  # questions per step, rationales per question, new tokens
STEP_KEYS = ("reward", "accuracy_u", "forced_rate", "rationale_length", "readout_variance", "kl")


def dev_metrics(model, tok, meta, items) -> dict[str, float]:
    """Readout metrics of ``items`` with 2 rationales each (seeded, so every call reads the
    same way): the mixture's accuracy and Brier error, the mean per-rationale Brier score
    ``J = 2 u_y - ||u||^2`` (higher is better) and the forced-marker rate."""
    model.eval()
    readings = read(
        model, tok, [it.prompt for it in items], [it.options for it in items], m=2,
        max_new_tokens=MAX_NEW, seed=0, marker=meta["marker"], sep=meta["sep"],
    )  # fmt: skip
    model.train()
    labels = np.array([it.label for it in items])
    mixture = np.stack([r.mixture.numpy() for r in readings])
    score = torch.cat([brier_score(r.u, it.label) for r, it in zip(readings, items, strict=True)])
    return {
        "accuracy": accuracy(mixture, labels),
        "brier_error": brier(mixture, labels),
        "proper_score": float(score.mean()),
        "forced_rate": float(np.mean([f for r in readings for f in r.forced])),
    }


def show(title: str, metrics: dict[str, float]) -> None:
    print(f"  {title:<16}" + "  ".join(f"{k} {v:.3f}" for k, v in metrics.items()))


def run_stage(method: str, model, tok, meta, data, out: Path, steps: int, **kw) -> None:
    """Train ``model`` in place for ``steps`` TRL steps of ``method``; print each step."""
    args = rlcd_args(
        method, output_dir=str(out / method), max_steps=steps, logging_steps=1,
        per_device_train_batch_size=QUESTIONS * M, num_generations=M,
        max_completion_length=MAX_NEW, use_cpu=True, save_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    settings = RLCDSettings.from_method(method, marker=meta["marker"], sep=meta["sep"])
    trainer = RLCDTrainer(
        model, args, train_dataset=data, processing_class=tok, rlcd=settings, **kw
    )
    trainer.remove_callback(PrinterCallback)  # this script prints its own lines
    trainer.train()
    print(f"  {'step':<6}" + "".join(f"{k:>18}" for k in STEP_KEYS))
    for row in trainer.state.log_history:
        if "reward" in row:
            cells = [row.get(k) for k in STEP_KEYS]
            print(
                f"  {int(row['step']):<6}"
                + "".join(f"{'-':>18}" if v is None else f"{v:>18.4g}" for v in cells)
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5, help="TRL steps per stage")
    ap.add_argument("--out", type=Path, default=None, help="TRL output dir (default: temp)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.manual_seed(0)

    model, tok, meta = load_checkpoint(BASE, trainable=True)
    train_items = load_task_items("verify", "train")[: QUESTIONS * args.steps]
    dev_items = load_task_items("verify", "dev")[:32]
    data = rlcd_dataset(tok, train_items, marker=meta["marker"])
    print(
        f"{BASE.name}: {sum(p.numel() for p in model.parameters())} parameters; "
        f"{QUESTIONS} questions x {M} rationales x {MAX_NEW} tokens per step, "
        f"torch threads {torch.get_num_threads()} (OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS', 'unset')})"
    )
    with tempfile.TemporaryDirectory(prefix="trl_rlcd_") as tmp:
        out = args.out or Path(tmp)
        print("dev readout (32 questions x 2 rationales)")
        show("base", dev_metrics(model, tok, meta, dev_items))

        print("\nstage 1: calibrate (pathwise only)")
        run_stage("calibrate", model, tok, meta, data, out, args.steps)
        show("after stage 1", dev_metrics(model, tok, meta, dev_items))

        # stage 2 anchors at the stage-1 model; TRL's own default reference would be a
        # fresh load of the checkpoint the model came from (the base). A fresh load with
        # the stage-1 weights, not copy.deepcopy: TRL patched the trained model's forward
        anchor = load_checkpoint(BASE)[0]
        anchor.load_state_dict(model.state_dict())
        print("\nstage 2: reinforce (pathwise + 0.3 x score function, KL anchor 0.04)")
        run_stage("reinforce", model, tok, meta, data, out, args.steps, ref_model=anchor)
        show("after stage 2", dev_metrics(model, tok, meta, dev_items))


if __name__ == "__main__":
    main()
