#!/bin/bash
# Stop the fair test's two reproductions (go-on.sh started each in its own session): the
# whole process group of each, its pool worker included. Each run goes on from its last
# checkpoint (every 10 steps) when go-on.sh starts them again.
for pid in $(pgrep -f "rlcd_lab.cli reproduce .*--out /work/main/runs/rung"); do
  kill -- "-$(ps -o pgid= -p "$pid" | tr -d ' ')" 2>/dev/null || true
done
sleep 3
pgrep -f "multiprocessing.spawn import spawn_main" >/dev/null \
  && echo "a worker is still running: pgrep -af spawn_main" || echo "stopped"
