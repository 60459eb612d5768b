#!/usr/bin/env bash
# The difficulty map (docs/results.md, "When RLCD helps"): RLCD two-stage vs GRPO at matched budget,
# three seeds, in the tiny verify world at each teacher slip of the shipped bases
# (assets/checkpoints/base-verify-slip*); the slip-0.25 level is the shipped verify
# reproduction. Runs in this checkout, one job at a time (--jobs), then copies the eval
# dumps to assets/results/difficulty/slip-S and writes map.json, report.md and the figure.
#
#     bash benchmarks/difficulty_map.sh [JOBS]        # default 1
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${1:-1}
levels=(0.25=assets/results/verify)
for s in 0.05 0.6; do
  start=$(date +%s)
  .venv/bin/rlcd-lab reproduce --task verify --init "assets/checkpoints/base-verify-slip$s" \
    --runs base calibrate reinforce grpo-matched --jobs "$jobs" --out "runs/difficulty/slip-$s"
  echo "slip $s: $(( $(date +%s) - start )) s"
  .venv/bin/python -c 'import sys; from rlcd_lab.reproduce import ship; ship(*sys.argv[1:])' \
    "runs/difficulty/slip-$s/verify" "assets/results/difficulty/slip-$s"
  rm "assets/results/difficulty/slip-$s/report.html"  # 5 MB of inlined plotly: report.md suffices
  levels+=("$s=assets/results/difficulty/slip-$s")
done
.venv/bin/python -m rlcd_lab.reports.difficulty assets/results/difficulty "${levels[@]}"
.venv/bin/python -m rlcd_lab.reports.report --readme README.md docs/results.md
