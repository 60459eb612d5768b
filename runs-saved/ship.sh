#!/bin/bash
# Steps 1 and 2 of README.md beside this file, once both reproductions have ended: the
# full command once on the code that trained them (it reuses every run and writes
# tune/choice.json with all six tuned runs, the RLCR stated views and the report), then
# the results shipped in place of the 12-step rung and the generated tables rewritten.
# Step 3 (the prose, the tests, removing this folder) is by hand. ship() is given the run
# folder as the configs name it (absolute), so that their paths are rewritten to runs/rung.
set -euo pipefail
TASK=basic-skills-arithmetic-verify-pairs
cd /work/rung-code
/work/main/.venv/bin/python -m rlcd_lab.cli reproduce --task ~/.cache/rlcd_lab/data/$TASK.jsonl \
    --scale rung --init assets/checkpoints/smollm2-arith-verify --jobs 2 --out /work/main/runs/rung \
    --runs base calibrate reinforce grpo-matched rft-kl-matched rlcr-matched sft-matched \
    --lr-grid 1e-5 3e-5 1e-4 --tune-steps 25
cd /work/main
.venv/bin/python -c "
from pathlib import Path
from rlcd_lab import reproduce
reproduce.ship(Path('/work/main/runs/rung/$TASK'), Path('assets/results/$TASK'), weights=('reinforce',),
               out='runs/rung')
"
git rm -rq assets/results/basic-skills-arithmetic-verify
# the generated blocks that read the old rung's summary (why-rung, real-model) read the new one
sed -i "s#results/basic-skills-arithmetic-verify/summary.json#results/$TASK/summary.json#" docs/results.md
# and the heading the claims table links to (#why-<task>, from the summary's task name)
sed -i "s/^### Why: basic-skills-arithmetic-verify$/### Why: $TASK/" docs/results.md
.venv/bin/python -m rlcd_lab.reports.report --readme README.md docs/*.md
du -sh assets  # within tests/test_assets.py's budget? (README.md: what to drop first)
