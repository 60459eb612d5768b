"""The Hugging Face Space builds and runs (docs/dashboard.md, "Deploy to a Hugging Face Space").

A Space installs ``requirements.txt`` *before* it copies the repository in, then runs
``python app.py`` from the checkout. Simulated here without network:

* ``requirements.txt`` names no local path and pins every package; the pins are the
  versions installed in this environment (the ones the test suite runs with), and they
  are closed under dependencies: every dependency of a pinned distribution (its metadata,
  markers evaluated for the Space: Linux x86_64, the README's ``python_version``) is pinned
  at a version it accepts, starting from pyproject.toml's main dependencies, with nothing
  pinned that they do not need. (A real resolve against the package index:
  ``RLCD_LAB_SPACE_RESOLVE=1``, which needs the network.)
* ``python app.py`` runs from a copy of the repository's files (tracked, plus untracked
  ones not git-ignored: what a commit would hold) with the current interpreter, with
  every installed distribution that ``requirements.txt`` does not pin made unimportable
  and every connection beyond the loopback refused; it must serve the dashboard (HTTP
  200), import ``rlcd_lab`` from the copy and try no network.
* Every binary file in the repository matches a Git LFS rule of ``.gitattributes``, and no
  other file reaches the Hub's 10 MB limit for plain git files.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
REQUIREMENTS = REPO / "requirements.txt"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
IN_SPACE_IMAGE = {"pip", "setuptools", "wheel"}
"""Distributions a Space's Python image has before requirements.txt is installed."""


def read_requirements(path: Path = REQUIREMENTS) -> tuple[list[str], list[Requirement]]:
    """``(option lines, requirements)`` of a pip requirements file (comments dropped)."""
    options, reqs = [], []
    for raw in path.read_text().splitlines():
        line = raw.split(" #")[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        if line.startswith("-"):
            options.append(line)
        else:
            reqs.append(Requirement(line))
    return options, reqs


def front_matter() -> dict[str, str]:
    """The README's YAML front matter (flat ``key: value`` lines: the Space's settings)."""
    text = (REPO / "README.md").read_text()
    block = re.match(r"---\n(.*?)\n---\n", text, re.S)
    assert block, "README.md must start with the Space's front matter"
    pairs = (line.split(":", 1) for line in block.group(1).splitlines() if ":" in line)
    return {k.strip(): v.strip().strip("\"'") for k, v in pairs}


def space_environment() -> dict[str, str]:
    """Marker environment of the Space: Linux x86_64 CPython at the README's version."""
    version = front_matter()["python_version"]
    env = default_environment()
    env.update(
        python_version=version,
        python_full_version=f"{version}.0",
        sys_platform="linux",
        platform_system="Linux",
        platform_machine="x86_64",
        implementation_name="cpython",
        platform_python_implementation="CPython",
        os_name="posix",
    )
    return env


def pins() -> dict[str, Version]:
    """``{canonical name: pinned version}`` of requirements.txt."""
    _, reqs = read_requirements()
    out = {}
    for r in reqs:
        (spec,) = r.specifier
        out[canonicalize_name(r.name)] = Version(spec.version)
    return out


def installed(name: str) -> Version:
    """The public version of an installed distribution (``2.13.0+cpu`` -> ``2.13.0``)."""
    return Version(Version(md.version(name)).public)


# --------------------------------------------------------------------------- requirements
def test_requirements_need_no_checkout_and_pin_everything():
    options, reqs = read_requirements()
    assert options == [f"--extra-index-url {TORCH_CPU_INDEX}"], options
    names = [canonicalize_name(r.name) for r in reqs]
    assert len(names) == len(set(names)), "a package is listed twice"
    assert "rlcd-lab" not in names  # the package itself comes from the checkout
    for r in reqs:
        assert r.url is None, f"{r}: a URL or local path"
        specs = list(r.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"{r}: not pinned with =="
        assert "*" not in specs[0].version and "+" not in specs[0].version, r
    assert pins()["torch"] == Version("2.13.0")
    for line in REQUIREMENTS.read_text().splitlines():  # a Space cannot install the checkout
        assert not re.match(r"\s*(\.|-e\b|--editable\b|file:|/)", line), line


def test_requirements_pin_the_tested_versions():
    env = space_environment()
    for r in read_requirements()[1]:
        if r.marker is None or r.marker.evaluate(env):
            assert installed(r.name) == pins()[canonicalize_name(r.name)], r.name


def test_transformers_range_ends_at_the_tested_release():
    """pyproject admits transformers up to the minor release requirements.txt pins (the one
    ``make test`` runs), not the next: ``llama.LlamaSteps`` copies its Llama internals.
    The supported range, as the package declares it: >= 5.0 (5.x tokenizers), < 5.25."""
    text = (REPO / "pyproject.toml").read_text()
    (line,) = re.findall(r'^\s*"(transformers[^"]*)"', text, re.M)
    spec = Requirement(line).specifier
    pinned = pins()["transformers"]
    assert pinned in spec and installed("transformers") in spec
    assert Version(f"{pinned.major}.{pinned.minor + 1}.0") not in spec
    assert spec == SpecifierSet(">=5.0,<5.25")


def test_requirements_are_closed_under_dependencies():
    """From pyproject's main dependencies, follow every dependency of every pinned
    distribution (installed metadata == pinned version, checked above): each must be
    pinned at a version its specifier accepts, and every pin must be reached."""
    env = space_environment()
    pinned = pins()
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    roots = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    todo = [(Requirement(r), "pyproject.toml") for r in roots]
    reached: set[str] = set()
    while todo:
        req, parent = todo.pop()
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req} (needed by {parent}) is not in requirements.txt"
        assert req.specifier.contains(pinned[name], prereleases=True), (
            f"{parent} needs {req}, requirements.txt pins {name}=={pinned[name]}"
        )
        wanted = {""} | set(req.extras)
        key = f"{name}[{','.join(sorted(req.extras))}]"
        if key in reached:
            continue
        reached.add(key)
        for dep in md.requires(name) or []:
            d = Requirement(dep)
            if d.marker is None or any(d.marker.evaluate({**env, "extra": e}) for e in wanted):
                todo.append((d, f"{name}{sorted(req.extras) or ''}"))
    reached_names = {k.split("[")[0] for k in reached}
    assert reached_names == set(pinned), f"pinned but not needed: {set(pinned) - reached_names}"


def test_space_front_matter_matches_the_pins():
    fm = front_matter()
    assert fm["sdk"] == "gradio" and fm["app_file"] == "app.py"
    assert Version(fm["sdk_version"]) == pins()["gradio"]
    python = Version(f"{fm['python_version']}.0")
    assert Version(platform.python_version()).release[:2] == python.release[:2], (
        "the suite runs on another Python than the Space's python_version"
    )
    for name in pins():
        requires = md.metadata(name).get("Requires-Python")
        if requires:
            assert python in SpecifierSet(requires), f"{name} needs Python {requires}"


@pytest.mark.skipif(
    os.environ.get("RLCD_LAB_SPACE_RESOLVE") != "1",
    reason="resolves requirements.txt against the package indexes: set RLCD_LAB_SPACE_RESOLVE=1",
)
def test_requirements_resolve_from_the_index(tmp_path):
    """``pip install --dry-run`` of requirements.txt alone, in an empty folder: pip picks
    exactly the pinned distributions (torch from the CPU index), nothing else."""
    shutil.copy(REQUIREMENTS, tmp_path / "requirements.txt")
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q"]
    cmd += ["--report", str(report), "-r", "requirements.txt"]
    subprocess.run(cmd, cwd=tmp_path, check=True, timeout=1800)
    chosen = {
        canonicalize_name(i["metadata"]["name"]): Version(i["metadata"]["version"])
        for i in json.loads(report.read_text())["install"]
    }
    assert chosen.pop("torch") == Version("2.13.0+cpu")
    assert chosen == {n: v for n, v in pins().items() if n != "torch"}


# ------------------------------------------------------------------------ the app itself
SITECUSTOMIZE = r'''
"""Test harness (tests/test_space.py): the interpreter as a Space built from
requirements.txt would have it: unpinned distributions unimportable, no network."""
import importlib.machinery
import json
import os
import sys

_LOG = os.environ["RLCD_SPACE_LOG"]
_BLOCKED = frozenset(json.loads(os.environ["RLCD_SPACE_BLOCKED"]))
_LOCAL = {"127.0.0.1", "::1", "localhost", "0.0.0.0", "::", ""}


def _log(kind, what):
    with open(_LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps([kind, str(what)]) + "\n")


class _PinnedOnly(importlib.machinery.PathFinder):
    """The path finder, blind to the top-level modules of unpinned distributions: for
    them ``import`` raises ModuleNotFoundError and ``importlib.util.find_spec`` gives
    None, as when they are not installed."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if path is None and name in _BLOCKED:
            _log("import", name)
            return None
        return super().find_spec(name, path, target)


def _host(x):
    x = x.decode() if isinstance(x, bytes) else x
    return x if x is None or isinstance(x, str) else str(x)


def _audit(event, args):
    if event == "open" and isinstance(args[0], str) and "rlcd_lab" in args[0]:
        _log("open", args[0])
    elif event == "socket.connect" and isinstance(args[1], tuple):
        if _host(args[1][0]) not in _LOCAL:
            _log("network", args[1])
            raise OSError(f"network blocked by the test: {args[1]!r}")
    elif event == "socket.getaddrinfo":
        if _host(args[0]) not in _LOCAL and args[0] is not None:
            _log("network", args[0])
            raise OSError(f"network blocked by the test: {args[0]!r}")


sys.meta_path[sys.meta_path.index(importlib.machinery.PathFinder)] = _PinnedOnly
sys.addaudithook(_audit)
'''


def repository_files() -> list[str]:
    """What a commit of this working tree would hold: tracked files (as they are now) and
    untracked ones that are not ignored."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return sorted({f for f in out.split("\0") if f and (REPO / f).is_file()})


def unpinned_modules() -> set[str]:
    """Top-level import names of the installed distributions requirements.txt leaves out
    (and that a Space's Python image does not have)."""
    allowed = set(pins()) | IN_SPACE_IMAGE | {"rlcd-lab"}
    return {
        top
        for top, dists in md.packages_distributions().items()
        if not any(canonicalize_name(d) in allowed for d in dists)
    } - {"rlcd_lab"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_app_serves_from_a_copy_of_the_repository_offline(tmp_path):
    app = tmp_path / "app"
    for f in repository_files():
        (app / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, app / f)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    log = tmp_path / "log.jsonl"
    log.touch()
    blocked = unpinned_modules()
    assert {"pytest", "jupytext", "IPython"} <= blocked  # dev tools are really hidden
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "GRADIO_"))}
    env |= {
        "PYTHONPATH": str(hook),  # only the harness: rlcd_lab must come from the copy
        "RLCD_SPACE_LOG": str(log),
        "RLCD_SPACE_BLOCKED": json.dumps(sorted(blocked)),
        "GRADIO_SERVER_PORT": str(port),
        "OMP_NUM_THREADS": "1",
    }
    out = (tmp_path / "app.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "app.py"], cwd=app, env=env, stdout=out, stderr=subprocess.STDOUT
    )
    try:
        status, body, deadline = None, "", time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
                    status, body = r.status, r.read().decode("utf-8", "replace")
                break
            except OSError:
                time.sleep(0.5)
        output = (tmp_path / "app.log").read_text()
        assert status == 200, f"app.py did not serve (exit {proc.poll()}):\n{output[-3000:]}"
        assert "rlcd_lab dashboard" in body
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        out.close()
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e for e in events if e[0] == "network"] == [], "app.py tried to reach the network"
    # the package's modules (a data file under ~/.cache/rlcd_lab, e.g. a converted model's
    # rlcd.json the Compare tab reads for its default pair, is not the package)
    opened = [
        Path(p) for kind, p in events if kind == "open" and "/rlcd_lab/" in p and p.endswith(".py")
    ]
    assert opened, "the harness saw no rlcd_lab module being read"
    outside = [p for p in opened if not p.is_relative_to(app)]
    assert not outside, f"rlcd_lab read from outside the copy: {outside[:3]}"


# -------------------------------------------------------------------------------- LFS
def _is_binary(path: Path) -> bool:
    """Git's rule (a NUL byte in the first 8000 bytes), or not UTF-8 text."""
    data = path.read_bytes()
    if b"\0" in data[:8000]:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _lfs_files(files: list[str]) -> set[str]:
    out = subprocess.run(
        ["git", "check-attr", "filter", "--stdin", "-z"],
        cwd=REPO,
        input="\0".join(files).encode(),
        capture_output=True,
        check=True,
    ).stdout.decode()
    parts = out.split("\0")
    return {parts[i] for i in range(0, len(parts) - 2, 3) if parts[i + 2] == "lfs"}


def test_binaries_go_through_lfs():
    files = repository_files()
    binary = [f for f in files if _is_binary(REPO / f)]
    assert any(f.startswith("assets/") and f.endswith(".safetensors") for f in binary)
    assert any(f.startswith("assets/") and f.endswith(".png") for f in binary)
    lfs = _lfs_files(files)
    missing = [f for f in binary if f not in lfs]
    assert not missing, f"binary files without a .gitattributes LFS rule: {missing}"
    big = [f for f in files if f not in lfs and (REPO / f).stat().st_size >= 10 * 2**20]
    assert not big, f"files of 10 MB or more outside LFS (the Hub refuses them): {big}"
