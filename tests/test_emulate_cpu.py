"""tests/emulate_cpu.py with several CPU kinds (``make test``'s numerics reruns): one
pytest-xdist worker per kind, started with that kind's variables, each running every test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import emulate_cpu

SCRIPT = Path(emulate_cpu.__file__)
PROBE = """
import json, os, pytest
from numpy._core import _multiarray_umath as npu

@pytest.mark.parametrize("name", ["a", "b"])
def test_probe(name):
    env = {k: os.environ.get(k) for k in KEYS}
    off = (env["NPY_DISABLE_CPU_FEATURES"] or "").split()
    seen = {f: npu.__cpu_features__.get(f) for f in off}
    with open(f"{os.environ['PYTEST_XDIST_WORKER']}-{name}.json", "w") as f:
        json.dump({"env": env, "numpy": seen}, f)
"""


def test_two_kinds_run_every_test_each_under_its_own_variables(tmp_path):
    kinds = ["avx2", "portable"]
    want = [emulate_cpu.cpu_env(kind) for kind in kinds]
    keys = sorted(set().union(*want))
    (tmp_path / "test_probe.py").write_text(f"KEYS = {keys!r}\n{PROBE}")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_probe.py"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *kinds, "--", *cmd],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "4 passed" in done.stdout  # two tests, each on both workers
    for i, env in enumerate(want):
        for name in ("a", "b"):
            got = json.loads((tmp_path / f"gw{i}-{name}.json").read_text())
            assert got["env"] == {k: env.get(k) for k in keys}, (kinds[i], got["env"])
            # numpy read the variable when it loaded: the features it names are off
            assert not any(got["numpy"].values()), (kinds[i], got["numpy"])


def test_one_kind_runs_the_command_with_its_variables(tmp_path):
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "portable", "--", sys.executable, "-c", code],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    env = json.loads(done.stdout)
    assert all(env[k] == v for k, v in emulate_cpu.cpu_env("portable").items())
