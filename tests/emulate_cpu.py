"""Run a command as it would run on another kind of x86 CPU: numpy's SIMD dispatch,
OpenBLAS's kernel, torch's ATen kernel and oneDNN's ISA limited together.

    python tests/emulate_cpu.py avx2 -- python -m pytest -m numerics
    python tests/emulate_cpu.py portable -- python -m pytest -m numerics
    python tests/emulate_cpu.py avx2 portable -- python -m pytest -m numerics

With several kinds the command must be a pytest run: it gets one pytest-xdist worker per
kind (``--tx popen//env:NAME=VALUE...``), each started with its kind's variables, and
``--dist each``, so every worker runs every test: the kinds side by side in one run.

* ``avx2``: the most common machine (AMD Zen 2, Intel Haswell..Comet Lake): numpy without
  its AVX-512 kernels (NPY_DISABLE_CPU_FEATURES), OPENBLAS_CORETYPE=Haswell,
  ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2.
* ``portable``: every library on its baseline path: numpy with no dispatched kernel,
  OPENBLAS_CORETYPE=Nehalem (SSE4), ATEN_CPU_CAPABILITY=default, ONEDNN_MAX_CPU_ISA=SSE41,
  MKL_ENABLE_INSTRUCTIONS=SSE4_2.

Only features this CPU has are disabled (numpy refuses to disable its baseline), and
OpenBLAS is forced to Haswell only where the CPU has AVX2. Make's ``test`` target runs
the numerics tests (``-m numerics``: tolerances that must hold on any CPU, and the
shipped summaries recomputed from their dumps) under both, side by side, so a developer
on an AVX-512 machine sees what an AVX2 or an old machine computes.
"""

from __future__ import annotations

import os
import sys


def cpu_env(kind: str) -> dict[str, str]:
    """The environment variables of ``kind`` (``avx2`` or ``portable``) on this CPU."""
    from numpy._core import _multiarray_umath as npu

    found = [f for f in npu.__cpu_dispatch__ if npu.__cpu_features__.get(f)]
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    if kind == "avx2":
        off = [f for f in found if f.startswith(("AVX512", "X86_V4"))]
        env = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
        env["MKL_ENABLE_INSTRUCTIONS"] = "AVX2"
        if " avx2" in flags:
            env["OPENBLAS_CORETYPE"] = "Haswell"
    elif kind == "portable":
        off = found
        env = {
            "ATEN_CPU_CAPABILITY": "default",
            "ONEDNN_MAX_CPU_ISA": "SSE41",
            "OPENBLAS_CORETYPE": "Nehalem",
            "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
        }
    else:
        raise SystemExit(f"unknown CPU kind {kind!r}: avx2 or portable")
    if off:
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(off)
    return env


def xdist_workers(kinds: list[str]) -> list[str]:
    """pytest arguments for one pytest-xdist worker per CPU kind, each running every test:
    ``--dist each`` and a ``--tx popen//env:NAME=VALUE...`` per kind (execnet sets the
    variables in the worker before it imports pytest, numpy or torch)."""
    args = ["--dist", "each"]
    for kind in kinds:
        args += ["--tx", "//".join(["popen", *(f"env:{k}={v}" for k, v in cpu_env(kind).items())])]
    return args


def main(argv: list[str]) -> None:
    if "--" not in argv[1:] or len(argv) < argv.index("--") + 2:
        raise SystemExit("usage: emulate_cpu.py avx2|portable [avx2|portable] -- COMMAND ...")
    split = argv.index("--")
    kinds, command = argv[:split], argv[split + 1 :]
    for i, kind in enumerate(kinds):
        env = cpu_env(kind)
        worker = f" (pytest worker gw{i})" if len(kinds) > 1 else ""
        sys.stderr.write(
            f"CPU kind {kind}{worker}: {' '.join(f'{k}={v!r}' for k, v in env.items())}\n"
        )
    sys.stderr.flush()
    if len(kinds) > 1:
        os.execvp(command[0], [*command, *xdist_workers(kinds)])
    os.execvpe(command[0], command, {**os.environ, **env})


if __name__ == "__main__":
    main(sys.argv[1:])
