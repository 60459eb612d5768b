#!/usr/bin/env bash
# The rung's extra seeds (issue 65): two-stage RLCD (lr 1e-4) and GRPO-matched (lr 3e-5), the
# learning rates the fair test chose on dev (assets/results/basic-skills-arithmetic-verify-pairs/
# tune/choice.json), at the shipped --scale rung, one run at a time, one seed after the other.
# Resumable: run it again and every run goes on from its last checkpoint (every 10 steps).
#
#     bash benchmarks/rung_seeds.sh [OUT] [SEED ...]     # default: runs/rung, seeds 31 37 41 43 47 53 59
#
# The shipped seeds 17, 23, 29 are copied into OUT first (without weights: reused as ended
# for the report, never retrained). About 1.8 h (RLCD) and 1.8 h (GRPO) a seed on one core of
# the 2-core AMD EPYC (the fair test's paces, docs/performance.md). The shipped seeds 31 and 59
# were trained at 6e0fa6c, seeds 37-53 at f1de669 (1.52x faster steps; docs/results.md says
# what differs): run it from a checkout at one of those to retrain a seed as shipped.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
out=${1:-runs/rung}
shift || true
seeds=("${@:-31 37 41 43 47 53 59}")
read -r -a seeds <<<"${seeds[*]}"
name=basic-skills-arithmetic-verify-pairs
task=$HOME/.cache/rlcd_lab/data/$name.jsonl
[[ -f $task ]] || .venv/bin/rlcd-lab data fetch "$name"
mkdir -p "$out/$name"
cp -rn "assets/results/$name/." "$out/$name/"
for s in "${seeds[@]}"; do
  for args in "base calibrate reinforce --lr 1e-4" "grpo-matched --lr 3e-5"; do
    read -r -a a <<<"$args"
    .venv/bin/rlcd-lab reproduce --task "$task" --scale rung \
      --init assets/checkpoints/smollm2-arith-verify --jobs 1 --out "$out" \
      --runs "${a[@]}" --seeds "$s"
    echo "seed $s (${a[*]}): ended $(date -u +%H:%M)"
  done
done
