#!/usr/bin/env bash
# The paper's own setup on one GPU: a Qwen3-1.7B-class model fine-tuned in full (bfloat16),
# AdamW lr 2e-6, 400 steps per stage of 8 questions x 4 rationales of up to 256 tokens,
# Algorithm 1's beta 0.04 and c 0.3, three seeds, against GRPO, RFT+KL, RLCR and SFT at the
# matched budget (800 steps), each temperature-scaled on dev; the report at OUT/report.md.
# The settings are `rlcd-lab reproduce --scale paper` (rlcd_lab/reproduce.py, SCALES).
#
#     examples/paper_gpu.sh MODEL_DIR [TASK] [OUT]
#
# MODEL_DIR: a local Hugging Face directory of the model (nothing is downloaded here).
# TASK: a task-item JSONL file with .train/.dev/.test siblings; default GSM8K-Verify,
#   written by `rlcd-lab data fetch gsm8k-verify` to ~/.cache/rlcd_lab/data/.
# OUT: where the runs and the report go (default runs/paper); rerun to resume.
# Time on one H100/H200: `python benchmarks/gpu_estimate.py` (an estimate; docs/training.md).
# RLCD_LAB_EXTRA: more `reproduce` arguments (tests/test_paper_recipe.py runs this script
#   at toy size on a CPU with them).
set -euo pipefail
model=${1:?usage: examples/paper_gpu.sh MODEL_DIR [TASK] [OUT]}
task=${2:-$HOME/.cache/rlcd_lab/data/gsm8k-verify.jsonl}
out=${3:-runs/paper}
rlcd=${RLCD_LAB:-rlcd-lab}
# shellcheck disable=SC2086  # RLCD_LAB_EXTRA is a list of arguments
exec $rlcd reproduce --scale paper --init "$model" --task "$task" --out "$out" --jobs 1 \
  --runs base calibrate reinforce grpo-matched rft-kl-matched rlcr-matched sft-matched \
  ${RLCD_LAB_EXTRA:-}
