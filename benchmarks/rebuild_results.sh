#!/usr/bin/env bash
# Rebuild the shipped tiny reproductions (verify, facts, aleatoric) from a fresh clone of
# this repository's HEAD, --jobs 2, and copy what assets/README.md lists into
# assets/results/ of the repository this script is run from.
#
#     bash benchmarks/rebuild_results.sh [TASK ...]      # default: verify facts aleatoric
#
# Wall times: each task's timing.json, and the total printed at the end. Run it on a quiet
# machine: the wall-time targets (verify <= 45 min, all three <= 90 min) are for that.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tasks=("${@:-verify facts aleatoric}")
read -r -a tasks <<<"${tasks[*]}"
work=/tmp/regen
rm -rf "$work"
git clone -q "$repo" "$work"
cd "$work"
make .venv/.installed >/dev/null
start=$(date +%s)
for task in "${tasks[@]}"; do
  .venv/bin/rlcd-lab reproduce --task "$task" --out runs/reproduce --jobs 2 >"runs-$task.log" 2>&1
  echo "$task: $(( $(date +%s) - start )) s since the start"
done
echo "total: $(( $(date +%s) - start )) s for ${tasks[*]}"
for task in "${tasks[@]}"; do
  .venv/bin/python - "$task" "$repo" <<'EOF'
import shutil, sys
from pathlib import Path

task, repo = sys.argv[1], Path(sys.argv[2])
src, dst = Path("runs/reproduce") / task, repo / "assets/results" / task
weights = {"calibrate", "reinforce", "grpo", "rft-kl", "sft"} if task == "verify" else set()
shutil.rmtree(dst, ignore_errors=True)
for run in sorted(src.glob("seed-*/*")):
    out = dst / run.relative_to(src)
    for name in ("config.json", "log.jsonl", "done.json"):
        if (run / name).exists():
            out.mkdir(parents=True, exist_ok=True)
            shutil.copy2(run / name, out / name)
    for dump in (run / "eval").glob("*.jsonl"):
        (out / "eval").mkdir(parents=True, exist_ok=True)
        shutil.copy2(dump, out / "eval" / dump.name)
    if run.parent.name == "seed-17" and run.name in weights:
        shutil.copytree(run / "final", out / "final")
for name in ("timing.json", "summary.json", "report.md", "report.html"):
    shutil.copy2(src / name, dst / name)
if (src / "figures").exists():
    shutil.copytree(src / "figures", dst / "figures")
print(f"{task}: copied to {dst}")
EOF
done
