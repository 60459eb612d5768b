"""``run_eval(progress=True)`` and ``rlcd-lab eval``: a tqdm bar over the items on stderr,
advancing one batch at a time, and the same rows as without it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from rlcd_lab.cli import main
from rlcd_lab.evaluate import run_eval
from rlcd_lab.tasks.items import TaskItem


def _counts(err: str, total: int) -> list[int]:
    """The ``n/total`` counts the bar printed (tqdm redraws with ``\\r`` off a terminal)."""
    return [int(n) for n in re.findall(rf"(\d+)/{total}\b", err)]


def test_progress_bar_counts_batches_and_keeps_rows(tokenizer, marker_lm, capsys):
    items = [TaskItem(str(i), ("Q: 1?", "Q: 22?")[i % 2], ("Y", "N"), i % 2) for i in range(5)]
    kw = dict(mode="reason", m=2, max_new_tokens=12, batch_size=2, seed=3)
    capsys.readouterr()
    quiet = run_eval(marker_lm, tokenizer, items, **kw)
    assert capsys.readouterr().err == ""  # progress=False (the default) prints nothing
    shown = run_eval(marker_lm, tokenizer, items, progress=True, **kw)
    err = capsys.readouterr().err
    assert shown == quiet  # same rows, same seeds, with or without the bar
    counts = _counts(err, len(items))
    assert counts and counts[-1] == len(items), err  # the bar ends at 5/5
    assert set(counts) <= {0, 2, 4, 5}, err  # it moves one batch of 2 at a time
    assert "eval reason" in err and "item" in err


def test_tqdm_disable_hides_the_bar(tiny_base):
    """tqdm reads ``TQDM_*`` variables when it is imported: set them for the process."""
    argv = ["eval", "--checkpoint", str(tiny_base), "--task", "verify", "--split", "dev"]
    argv += ["--limit", "2", "--max-new-tokens", "4", "--mode", "direct"]
    for env, shown in (({}, True), ({"TQDM_DISABLE": "1"}, False)):
        proc = subprocess.run(
            [sys.executable, "-m", "rlcd_lab.cli", *argv],
            env={**os.environ, "OMP_NUM_THREADS": "1", **env},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["accuracy"] >= 0
        assert bool(_counts(proc.stderr, 2)) is shown, proc.stderr


def test_eval_command_shows_progress_on_stderr(tiny_base, capsys):
    capsys.readouterr()
    argv = ["eval", "--checkpoint", str(tiny_base), "--task", "verify", "--split", "dev"]
    main([*argv, "--limit", "3", "--max-new-tokens", "4", "--no-verify"])
    out = capsys.readouterr()
    assert json.loads(out.out)["accuracy"] >= 0  # stdout stays pure JSON
    assert _counts(out.err, 3)[-1] == 3, out.err
