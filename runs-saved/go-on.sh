#!/bin/bash
# Go on with the rung's fair test on this machine (README.md beside this file): on a machine
# without its run folder, copy the saved runs into a new one; then start its two
# one-job reproductions in the background on a fixed copy of the code; their progress
# is appended to runs/rung/progress-{A,B}.log. Run from the checkout at /work/main.
set -euo pipefail
cd /work/main
CODE=43970bd  # the commit the test started from; its training code is 97f6af1's
TASK=basic-skills-arithmetic-verify-pairs
OUT=/work/main/runs/rung
[ -f .venv/.installed ] || make .venv/.installed
[ -f ~/.cache/rlcd_lab/data/$TASK.jsonl ] || .venv/bin/rlcd-lab data fetch $TASK
.venv/bin/rlcd-lab gguf smollm2 > /dev/null  # the adapter's base, once, before two processes
if [ ! -d $OUT/$TASK ]; then  # this machine's own folder, where there is one, has them all
  mkdir -p $OUT/$TASK
  cp -rn runs-saved/rung/. $OUT/$TASK/
fi
[ -d /work/rung-code ] || git worktree add --detach /work/rung-code $CODE
cd /work/rung-code
ARGS=(reproduce --task ~/.cache/rlcd_lab/data/$TASK.jsonl --scale rung
      --init assets/checkpoints/smollm2-arith-verify --jobs 1 --out $OUT
      --lr-grid 1e-5 3e-5 1e-4 --tune-steps 25)
PY="/work/main/.venv/bin/python -m rlcd_lab.cli"
(setsid nohup $PY "${ARGS[@]}" --runs rlcr-matched rft-kl-matched \
    >> $OUT/progress-A.log 2>&1 &)
(setsid nohup $PY "${ARGS[@]}" --runs base calibrate reinforce grpo-matched sft-matched \
    >> $OUT/progress-B.log 2>&1 &)
echo "started; where it stands: add --status to the command of docs/results.md"
