"""Does a shipped eval dump rerun bit for bit on this machine, under each CPU kernel?

Re-evaluates one shipped final checkpoint (default: verify, seed 17, two-stage RLCD) on
its test split with the settings of its run, once per ``ATEN_CPU_CAPABILITY`` this CPU
offers, and compares each new dump with the shipped one: whole file, sampled rationales,
and logits (bit-equal items, largest difference). Prints one table, with the CPU model.

    .venv/bin/python benchmarks/kernel_rerun.py [--run assets/results/verify/seed-17/reinforce]
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from rlcd_lab.bench.common import machine

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "assets" / "results" / "verify" / "seed-17" / "reinforce"


def kernels() -> list[str]:
    """The kernels torch can run here, widest first (``default``: the portable one)."""
    flags = Path("/proc/cpuinfo").read_text()
    out = ["avx512"] if " avx512f " in flags and " avx512bw " in flags else []
    return out + (["avx2"] if " avx2 " in flags else []) + ["default"]


def compare(shipped: Path, mine: Path) -> dict:
    from rlcd_lab.files.io import jsonl_path, read_jsonl

    a, b = read_jsonl(shipped), read_jsonl(mine)  # the shipped dump is packed (.jsonl.xz)
    shipped_bytes = jsonl_path(shipped).read_bytes()
    if jsonl_path(shipped).name.endswith(".xz"):
        shipped_bytes = lzma.decompress(shipped_bytes)
    pairs = list(zip(a, b, strict=True))
    return {
        "bytes identical": shipped_bytes == mine.read_bytes(),
        "same rationales": sum(x["rationales"] == y["rationales"] for x, y in pairs),
        "logits bit-equal": sum(x["logits"] == y["logits"] for x, y in pairs),
        "max |d logit|": max(
            abs(p - q) for x, y in pairs for p, q in zip(x["logits"], y["logits"], strict=True)
        ),
        "items": len(pairs),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=DEFAULT)
    args = ap.parse_args()
    cfg = json.loads((args.run / "config.json").read_text())
    shipped = args.run / "eval" / "test.jsonl"
    print(f"{args.run.relative_to(ROOT)} on {machine()}, one thread")
    print(f"{'kernel':8s} {'bytes identical':>15s} {'same rationales':>15s} "
          f"{'logits bit-equal':>16s} {'max |d logit|':>13s}")  # fmt: skip
    for k in kernels():
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "test.jsonl"
            cmd = [
                sys.executable, "-m", "rlcd_lab.cli", "eval", "--checkpoint",
                str(args.run / "final"), "--task", cfg["task"], "--split", "test",
                "--limit", str(cfg["test_items"]), "--max-new-tokens",
                str(cfg["max_new_tokens"]), "--seed", str(cfg["seed"]), "--out", str(out),
            ]  # fmt: skip
            env = {**os.environ, "ATEN_CPU_CAPABILITY": k, "OMP_NUM_THREADS": "1"}
            subprocess.run(cmd, env=env, cwd=ROOT, check=True, capture_output=True)
            r = compare(shipped, out)
        n = r["items"]
        print(
            f"{k:8s} {str(r['bytes identical']):>15s} {r['same rationales']:>9d} / {n} "
            f"{r['logits bit-equal']:>10d} / {n} {r['max |d logit|']:>13.2g}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
