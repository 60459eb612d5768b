"""Does the documented rebuild of a rung run train what the shipped run trained? Its first
steps, trained again, against the shipped log.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rebuild_step.py [--run calibrate] [--seed 17]
        [--steps 1] [--out runs/rebuild-step]

The run's config is the one docs/results.md's rebuild commands plan (the first command
that plans ``--run`` for ``--seed``, parsed as ``rlcd-lab`` parses it, ``reproduce.plan``),
with only ``steps`` cut to ``--steps``, no dev curve or test dump, and 4 dev items for the
final T (none of which the training steps read). A run that starts from another's
checkpoint (stage 2) needs that one in its planned place. Prints each value the shipped
``log.jsonl`` holds for those steps beside the rebuilt one, whether all but the timings
are equal, and the CPU seconds taken.
"""

from __future__ import annotations

import argparse
import re
import time
from dataclasses import replace
from pathlib import Path

from rlcd_lab import reproduce
from rlcd_lab.cli import parse
from rlcd_lab.files.assets import ASSETS
from rlcd_lab.files.rundir import read_log

REPO = ASSETS.parent
FAIR = ASSETS / "results" / "basic-skills-arithmetic-verify-pairs"


def documented_commands() -> list[list[str]]:
    """The ``rlcd-lab`` arguments of docs/results.md's rebuild commands."""
    text = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    start = text.index("Every other trained run's final adapter is rebuilt")
    block = re.search(r"```bash\n(.*?)```", text[start:], re.S).group(1)
    return [c.split()[1:] for c in block.replace("\\\n", " ").splitlines()]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="calibrate")
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("runs/rebuild-step"))
    args = ap.parse_args(argv)
    from rlcd_lab.train import train

    jobs = [j for c in documented_commands() for j in sum(reproduce.plan(parse(c)), [])]
    job = next(j for j in jobs if (j.name, j.seed) == (args.run, args.seed))
    cfg = replace(job.train, steps=args.steps, out=args.out / args.run, eval_items=4,
                  test_items=0, eval_every=0, overwrite=True)  # fmt: skip
    t0 = time.process_time()
    train(cfg)
    cpu = time.process_time() - t0
    mine, shipped = read_log(cfg.out), read_log(FAIR / f"seed-{args.seed}" / args.run)
    same = True
    for a, b in zip(shipped[: args.steps], mine, strict=True):
        for key in sorted(a):
            timing = key.startswith("time_")
            same &= timing or a[key] == b.get(key)
            print(f"step {a['step']} {key}: shipped {a[key]!r}, rebuilt {b.get(key)!r}")
    print(f"equal but the timings: {same}; {cpu:.0f} CPU seconds")


if __name__ == "__main__":
    main()
