#!/usr/bin/env bash
# Rebuild the shipped tiny reproductions (verify, facts, aleatoric) from a fresh clone of
# this repository's HEAD, --jobs 2, and copy what assets/README.md lists into
# assets/results/ of the repository this script is run from (reproduce.ship: eval dumps
# and logs packed as .jsonl.xz; report.html loads assets/results/plotly.min.js, which
# write_report put in runs/reproduce/ and is copied beside the reports here).
#
#     bash benchmarks/rebuild_results.sh [--time-only] [TASK ...]   # default: verify facts aleatoric
#
# --time-only: run and time the reproductions, ship nothing (the runs stay in the scratch
# folder it prints, made by mktemp).
#
# Wall times: each task's timing.json, and the total printed at the end. Run it on a quiet
# machine: the wall-time targets (verify <= 45 min, all three <= 90 min) are for that.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
ship=1
if [[ ${1:-} == --time-only ]]; then ship=0; shift; fi
tasks=("${@:-verify facts aleatoric}")
read -r -a tasks <<<"${tasks[*]}"
work=$(mktemp -d -t rlcd-regen.XXXXXX)
echo "scratch folder: $work"
git clone -q "$repo" "$work/repo"
cd "$work/repo"
make .venv/.installed >/dev/null
start=$(date +%s)
for task in "${tasks[@]}"; do
  .venv/bin/rlcd-lab reproduce --task "$task" --out runs/reproduce --jobs 2 >"runs-$task.log" 2>&1
  echo "$task: $(( $(date +%s) - start )) s since the start"
done
echo "total: $(( $(date +%s) - start )) s for ${tasks[*]}"
((ship)) || exit 0
for task in "${tasks[@]}"; do
  weights=()
  [[ $task == verify ]] && weights=(calibrate reinforce grpo)
  .venv/bin/python -c 'import sys; from rlcd_lab.reproduce import ship
ship(f"runs/reproduce/{sys.argv[1]}", f"{sys.argv[2]}/assets/results/{sys.argv[1]}", tuple(sys.argv[3:]))' \
    "$task" "$repo" "${weights[@]}"
  echo "$task: copied to $repo/assets/results/$task"
done
cp runs/reproduce/plotly.min.js "$repo/assets/results/plotly.min.js"
