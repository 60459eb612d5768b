"""The package's structure, read from its source (no module is imported): the import graph
has no cycle (counting the package ``__init__`` an import runs) and no import from a lower
floor to a higher one; no name is imported through a module that does not define it; only
the Reader's package and the modules named in ``READER_USERS`` reach into the Reader
(its modules, the marker, a chat template, a sampler's ``generate``, a softmax or a log
loss over logits, in any disguise); the decision path's files and functions stay small.

The floors (docs/layout.md) are the package's folders: ``math`` and ``files`` (statistics,
the cost model; file formats) under the four contract modules at the top (``scoring``,
``decomposition``, ``estimators``, ``metrics``), ``lm`` and ``tasks`` (models,
checkpoints, task items), ``reader`` (the Reader), ``methods`` (the method registry and
the training configs, torch-free), the lab (``train``, ``decide``,
``reports``, ``classroom``, ``bench``, evaluation, reproduction) and the
faces (``dashboard``, ``server``, ``cli``). The lab floor is ordered too
(:data:`LAB_FLOORS`), and no two folders import each other. ``python tests/test_layering.py``
prints the structure in numbers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "rlcd_lab"

FLOORS = {
    "math": ("scoring", "decomposition", "estimators", "metrics", "math", "files"),
    "lm": ("lm", "tasks", "tasks.items", "tasks.split", "tasks.synthetic", "tasks.worked"),
    "reader": ("reader",),
    "methods": ("methods",),
    "lab": ("tasks.convert", "tasks.fetch"),
    "faces": ("dashboard", "server", "cli"),
}
"""Modules by floor (a name covers its submodules; the longest name that matches wins);
every other module is ``lab``."""
ORDER = ("math", "lm", "reader", "methods", "lab", "faces")
LAB_FLOORS = {
    "drawing": ("drawing",),
    "evaluation": ("evaluate", "summary", "decide", "lm_eval_tasks", "tasks.convert",
                   "tasks.fetch"),
    "reports": ("reports", "bench", "classroom"),
    "training": ("train", "integrations"),
    "reproduction": ("reproduce",),
}  # fmt: skip
"""The lab floor's own floors, lowest first (a name covers its submodules): figures and
pages; reading models into eval dumps, their summaries and decisions; reports and
benchmarks over runs; training; the reproduction over all of them. Every lab module is on
one."""
LAB_ORDER = tuple(LAB_FLOORS)

READER_USERS = {
    # the training loops score rationales with gradient and sample through the Reader's
    # functions (Algorithm 1 needs log pi(r | x) and u together, per batch)
    "train": "scores and samples rationales in the training loops",
    "evaluate": "writes eval dumps from the Reader's readings and direct readouts",
    "integrations.trl": "RLCD inside TRL: its completions are cut at the marker and scored",
    "lm_eval_tasks.model": "lm-eval's option log-likelihoods are the Reader's readouts",
    "tasks.convert": "proposes GSM8K verify items by sampling a checkpoint's own answers",
    "decide": "the decision engine: questions to option tokens, the Reader's phases",
    "lm.checkpoint": "defines the marker a checkpoint's rlcd.json names by default",
    "reproduce": "writes RLCR's stated confidence as a distribution (reader.verbal)",
}
"""Modules outside ``reader/`` that may import its modules and the marker, and why (a
name covers its submodules)."""
LOGIT_CALLS = {
    "metrics": {"softmax", "log_softmax"},  # temperature scaling of stored logits
    "train.sft": {"cross_entropy"},  # SFT's loss on the label token (the paper's baseline)
    "train.vllm": {"generate"},  # vLLM's engine is a Sampler
    "tasks.convert": {"Answer:"},  # parses OLMo's data, whose queries end in "Answer:"
    "lm.checkpoint": {"Answer:"},  # the default marker's definition
}
"""Modules outside ``reader/`` allowed one of :data:`READER_ONLY`, and which."""
READER_ONLY = {"generate", "apply_chat_template", "softmax", "log_softmax", "cross_entropy",
               "nll_loss", "MARKER", "SEP"}  # fmt: skip
"""Names only the Reader uses (as a call, an attribute, a name or an import alias)."""
MARKER_TEXT = "Answer:"
SMALL_FILES = ("decide/*.py", "reader/*.py", "server/*.py", "dashboard/*_tab.py")
MAX_LINES, MAX_FUNCTION_LINES = 500, 80


def modules() -> dict[str, Path]:
    """``{dotted name below rlcd_lab: path}`` for every module of the package."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules ``name`` imports anywhere in its source (functions included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = [p for p in package.split(".") if p]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith("rlcd_lab."):
                target = node.module.removeprefix("rlcd_lab.")
            else:
                continue
            # a submodule named in the import, else the module imported from
            candidates = [
                f"{target}.{a.name}".strip(".")
                if f"{target}.{a.name}".strip(".") in known
                else target
                for a in node.names
            ]
        elif isinstance(node, ast.Import):
            candidates = [a.name.removeprefix("rlcd_lab.") for a in node.names]
        else:
            continue
        found |= {c for c in candidates if c in known and c != name}
    # importing a.b.c first runs the packages a and a.b (their __init__), unless the
    # importer is inside them (then they are already running)
    packages = {
        ".".join(parts[:k]) for c in found for parts in [c.split(".")] for k in range(1, len(parts))
    }
    found |= {pkg for pkg in packages if pkg in known and not (name + ".").startswith(pkg + ".")}
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def floor(name: str) -> int:
    matches = [
        (len(p), level)
        for level, prefixes in FLOORS.items()
        for p in prefixes
        if name == p or name.startswith(p + ".")
    ]
    return ORDER.index(max(matches)[1] if matches else "lab")


def test_the_import_graph_has_no_cycle():
    g = graph()
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(g[node]):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt) :] + [nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(g):
        if node not in state:
            visit(node, [node])


def test_every_module_imports_first_at_run_time():
    """No cycle at run time either: each module, imported first in an interpreter that has
    loaded no other module of the package, imports (a cycle would leave a name undefined
    in a partly run module). One interpreter, the package's modules dropped between."""
    import subprocess
    import sys

    code = (
        "import importlib, sys\n"
        "bad = []\n"
        f"for name in {sorted(modules())!r}:\n"
        "    for m in [m for m in sys.modules if m.startswith('rlcd_lab')]:\n"
        "        del sys.modules[m]\n"
        "    try:\n"
        "        importlib.import_module('rlcd_lab.' + name)\n"
        "    except ModuleNotFoundError as err:\n"  # an optional extra not installed
        "        if (err.name or '').startswith('rlcd_lab'):\n"
        "            bad.append(f'{name}: {err!r}')\n"
        "    except ImportError as err:\n"
        "        bad.append(f'{name}: {err!r}')\n"
        "print('\\n'.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == ""


def test_no_import_runs_up_a_floor():
    up = [
        f"{a} ({ORDER[floor(a)]}) imports {b} ({ORDER[floor(b)]})"
        for a, targets in graph().items()
        for b in targets
        if floor(b) > floor(a)
    ]
    assert not up, "\n".join(up)


def folder(name: str) -> str:
    """The top-level entry of the package that module ``name`` is in (a subpackage or a
    top module)."""
    return name.split(".")[0]


def lab_floor(name: str) -> int | None:
    """The index in :data:`LAB_ORDER` of a lab module (None: not on the lab floor, or on
    none of its floors)."""
    if ORDER[floor(name)] != "lab":
        return None
    matches = [
        (len(p), level)
        for level, prefixes in LAB_FLOORS.items()
        for p in prefixes
        if name == p or name.startswith(p + ".")
    ]
    return LAB_ORDER.index(max(matches)[1]) if matches else None


def lab_up_arrows(g: dict[str, set[str]]) -> list[str]:
    """``a (floor) imports b (floor)`` for every import up the lab floor's order."""
    return [
        f"{a} ({LAB_ORDER[lab_floor(a)]}) imports {b} ({LAB_ORDER[lab_floor(b)]})"
        for a, targets in g.items()
        for b in targets
        if lab_floor(a) is not None and lab_floor(b) is not None and lab_floor(b) > lab_floor(a)
    ]


def folder_cycles(g: dict[str, set[str]]) -> list[str]:
    """``a <-> b`` for every pair of the package's folders (subpackages and top modules)
    that import each other, each pair once."""
    arrows = {(folder(a), folder(b)) for a, targets in g.items() for b in targets}
    return sorted(f"{a} <-> {b}" for a, b in arrows if a < b and (b, a) in arrows)


def test_every_lab_module_is_on_a_lab_floor():
    lost = [name for name in modules() if ORDER[floor(name)] == "lab" and lab_floor(name) is None]
    assert not lost, "not on a floor of LAB_FLOORS: " + ", ".join(sorted(lost))


def test_no_import_runs_up_the_lab_floor():
    up = lab_up_arrows(graph())
    assert not up, "\n".join(up)


def test_no_two_folders_import_each_other():
    """Drawn folder by folder (each subpackage or top module of the package one node), the
    import graph has no pair of folders importing each other."""
    assert folder_cycles(graph()) == []


def test_the_lab_order_and_folder_checks_can_fail():
    """An import from the evaluation floor up to training, and two folders importing each
    other through different modules, are seen."""
    g = {"evaluate": {"train.verbal"}, "train.common": {"evaluate"}, "reports.report": {"train"}}
    assert lab_up_arrows(g) == [
        "evaluate (evaluation) imports train.verbal (training)",
        "reports.report (reports) imports train (training)",
    ]
    assert folder_cycles(g) == ["evaluate <-> train"]
    assert floor("drawing.plots") == floor("reproduce") == ORDER.index("lab")
    assert lab_floor("drawing.plots") < lab_floor("summary") < lab_floor("reports.results")
    assert lab_floor("reports.report") < lab_floor("train.common") < lab_floor("reproduce")
    assert lab_floor("reader.verbal") is None and lab_floor("server.app") is None


def test_the_cycle_and_floor_checks_can_fail(tmp_path):
    """The checks above see a function-level import and a relative one."""
    (tmp_path / "a.py").write_text("def f():\n    from .b import x\n")
    (tmp_path / "b.py").write_text("from rlcd_lab.a import y\n")
    known = {"a", "b"}
    assert imports("a", tmp_path / "a.py", known) == {"b"}
    assert imports("b", tmp_path / "b.py", known) == {"a"}
    assert floor("metrics") < floor("lm.model") < floor("reader.reading")
    assert floor("math.stats") < floor("reader") < floor("decide.jev") < floor("server.app")
    assert floor("tasks.items") < floor("reader") < floor("tasks.convert")
    # importing a package's module runs the package first (from outside it)
    (tmp_path / "c.py").write_text("from rlcd_lab.p.q import z\n")
    assert imports("c", tmp_path / "c.py", {"c", "p", "p.q"}) == {"p", "p.q"}
    assert imports("p.r", tmp_path / "c.py", {"p", "p.q", "p.r"}) == {"p.q"}


def _within(name: str, prefixes) -> str | None:
    """The entry of ``prefixes`` that covers module ``name`` (itself or a package above)."""
    return next((p for p in prefixes if name == p or name.startswith(p + ".")), None)


def reader_reach(name: str, path: Path) -> list[str]:
    """Where module ``name`` reaches into the Reader without being on the list: an import
    of a ``reader`` module (the package itself, :class:`Reader` and the names its
    ``__init__`` defines beside it, is open to all) or of the marker; a
    :data:`READER_ONLY` name called, read as an attribute, bound or imported under another
    name; a hand-written softmax (``exp(..) / ..exp(..)..``); a
    string that builds a prompt with the marker text."""
    if name == "reader" or name.startswith("reader."):
        return []
    user = _within(name, READER_USERS)
    allowed = LOGIT_CALLS.get(name, set())
    tree = ast.parse(path.read_text())
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    entry = {f"reader.{n}" for n in defined_names(PACKAGE / "reader" / "__init__.py")}
    bad = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom | ast.Import) and not user:
            module = (getattr(node, "module", None) or "").removeprefix("rlcd_lab")
            targets = [module + "." + a.name if module else a.name for a in node.names]
            for target in targets:
                target = target.removeprefix("rlcd_lab.").strip(".")
                if target.startswith("reader.") and target not in entry:
                    bad.append(f"{line}: imports {target}")
        if isinstance(node, ast.alias) and node.name in READER_ONLY - allowed:
            if node.name not in ("MARKER", "SEP") or not user:
                bad.append(f"{line}: imports {node.name}")
        ref = (
            node.attr
            if isinstance(node, ast.Attribute)
            else node.id
            if isinstance(node, ast.Name)
            else None
        )
        if ref in READER_ONLY - allowed - ({"MARKER", "SEP"} if user else set()):
            bad.append(f"{line}: uses {ref}")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            exps = [
                any(
                    isinstance(c, ast.Call)
                    and getattr(c.func, "attr", getattr(c.func, "id", None)) == "exp"
                    for c in ast.walk(side)
                )
                for side in (node.left, node.right)
            ]
            if all(exps):
                bad.append(f"{line}: divides an exp by a sum of exps (a softmax)")
        text = (
            node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
        )
        if (
            text is not None
            and id(node) not in docstrings
            and text.rstrip().endswith(MARKER_TEXT)
            and MARKER_TEXT not in allowed
        ):
            bad.append(f"{line}: a string ending in the marker {MARKER_TEXT!r}")
    return bad


def test_only_the_reader_reads():
    """No module outside ``reader/`` and the named lists imports the Reader's modules or
    the marker, samples, renders a chat template, takes a softmax or a log loss over
    logits, or writes the marker into a prompt (calls, attributes and aliases read from
    the syntax tree; docstrings and comments do not count)."""
    bad = [
        f"rlcd_lab/{path.relative_to(PACKAGE)}:{problem}"
        for name, path in modules().items()
        for problem in reader_reach(name, path)
    ]
    assert not bad, "\n".join(bad)


FACES = ("dashboard", "server", "cli")


def checkpoint_openings(path: Path) -> list[str]:
    """Where a module opens a checkpoint other than through ``Reader.load``: an import of
    ``load_checkpoint`` or a call of ``Reader(...)`` itself."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.alias) and node.name == "load_checkpoint":
            bad.append(f"{node.lineno}: imports load_checkpoint")
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Reader":
            bad.append(f"{node.lineno}: builds a Reader by hand")
    return bad


def test_the_faces_open_checkpoints_through_reader_load():
    """The dashboard, the server and the command line (evaluation included) open a
    checkpoint one way: ``Reader.load`` (directly, or through ``DecisionModel``'s
    ``from_checkpoint``), which also gives its fitted T and whether it was fitted."""
    bad = [
        f"rlcd_lab/{path.relative_to(PACKAGE)}:{problem}"
        for name, path in modules().items()
        if _within(name, FACES)
        for problem in checkpoint_openings(path)
    ]
    assert not bad, "\n".join(bad)


def test_the_checkpoint_opening_check_can_fail(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("from rlcd_lab.lm.loading import load_checkpoint\nr = Reader(m, t, {})\n")
    assert checkpoint_openings(path) == ["1: imports load_checkpoint", "2: builds a Reader by hand"]
    path.write_text("r = Reader.load(p)\n")
    assert checkpoint_openings(path) == []


DISGUISES = {
    "a hand-built prompt": 'def f(q):\n    return f"{q}\\nAnswer:"\n',
    "a prompt's tail": 'TAIL = "\\nAnswer:"\n',
    "generate, renamed": "def f(model):\n    gen = model.generate\n    return gen\n",
    "a softmax by hand": "def f(np, z):\n    return np.exp(z) / np.exp(z).sum()\n",
    "a log loss": "def f(F, z, y):\n    return F.cross_entropy(z, y)\n",
    "an aliased softmax": "from torch.nn.functional import softmax as s\n",
    "softmax bound to a name": "import torch\n\nsm = torch.softmax\n",
    "a chat template": "def f(t, m):\n    return t.apply_chat_template(m)\n",
    "the marker imported": "from rlcd_lab.lm.checkpoint import MARKER\n",
    "a Reader module imported": "from rlcd_lab.reader.reading import score_rationales\n",
    "a Reader module, relative": "from ..reader import readout\n",
}


@pytest.mark.parametrize("disguise", sorted(DISGUISES))
def test_the_reader_rule_sees_each_disguise(tmp_path, disguise):
    """Each way round the rule that an earlier, call-name rule let through is caught in a
    module off the lists, and the same code in a ``reader/`` module passes."""
    path = tmp_path / "m.py"
    path.write_text(DISGUISES[disguise])
    assert reader_reach("bench.m", path), disguise
    assert reader_reach("reader.m", path) == []


def long_functions(path: Path) -> list[str]:
    """``name: N lines`` of each function in ``path`` over :data:`MAX_FUNCTION_LINES`
    (``def`` line to last line) without a ``# long: <why>`` comment on the line above it."""
    text = path.read_text()
    lines = text.splitlines()
    return [
        f"{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
        and not lines[node.lineno - 2 - len(node.decorator_list)].strip().startswith("# long:")
    ]


def test_the_decision_path_stays_small():
    files = sorted({p for pattern in SMALL_FILES for p in PACKAGE.glob(pattern)})
    assert len(files) >= 10
    bad = [
        f"{path.relative_to(PACKAGE)}: {len(path.read_text().splitlines())} lines"
        for path in files
        if len(path.read_text().splitlines()) > MAX_LINES
    ]
    assert not bad, "\n".join(bad)


def test_functions_stay_short():
    """Every function of the package fits a screen, or says why not in one line."""
    bad = [f"{name}.{f}" for name, path in modules().items() for f in long_functions(path)]
    assert not bad, "\n".join(bad)


def test_the_length_check_can_fail(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "a.py").write_text(f"def f():\n{body}\n\n# long: one table\ndef g():\n{body}")
    assert long_functions(tmp_path / "a.py") == [f"f: {MAX_FUNCTION_LINES + 1} lines"]


def test_every_name_is_imported_from_the_module_that_defines_it():
    """No re-export: an import names the module that defines the name (or a submodule),
    so the import graph shows every arrow; no module redirects names at run time (a
    module-level ``__getattr__``, PEP 562)."""
    mods = modules()
    assert pass_through(mods) == []
    redirects = [
        name
        for name, path in mods.items()
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
    ]
    assert redirects == []


def test_the_pass_through_check_can_fail(tmp_path):
    (tmp_path / "a.py").write_text("X = 1\n")
    (tmp_path / "b.py").write_text("from .a import X\n")
    (tmp_path / "c.py").write_text("from rlcd_lab.b import X\nfrom rlcd_lab.a import X as Y\n")
    mods = {m: tmp_path / f"{m}.py" for m in "abc"}
    assert pass_through(mods) == ["c: X from b"]


def defined_names(path: Path) -> set[str]:
    """Names a module defines at its top level (functions, classes, assignments)."""
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return out


def pass_through(mods: dict[str, Path]) -> list[str]:
    """``module: name from source`` for every name a module imports from a package module
    that does not define it (the name lives elsewhere and is passed on)."""
    out = []
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = [p for p in package.split(".") if p]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith("rlcd_lab."):
                source = node.module.removeprefix("rlcd_lab.")
            else:
                continue
            if source not in mods:
                continue
            have = defined_names(mods[source])
            out += [
                f"{name}: {a.name} from {source}"
                for a in node.names
                if a.name not in have and f"{source}.{a.name}" not in mods
            ]
    return out


def figures() -> dict[str, object]:
    """The structure in numbers (``python tests/test_layering.py``): modules, entries at
    the package's top level, import arrows between modules, pass-through imports,
    functions over ``MAX_FUNCTION_LINES`` lines."""
    mods = modules()
    long = [f"{name}.{f}" for name, path in mods.items() for f in long_functions(path)]
    return {
        "modules": len(mods),
        "top-level entries": len([p for p in PACKAGE.iterdir() if p.name != "__pycache__"]),
        "import arrows": sum(len(v) for v in graph().values()),
        "pass-through imports": len(pass_through(mods)),
        "functions over 80 lines": sorted(long, key=lambda s: -int(s.split()[-2])),
    }


if __name__ == "__main__":
    for key, value in figures().items():
        print(f"{key}: {len(value) if isinstance(value, list) else value}")
        if isinstance(value, list):
            print("  " + "\n  ".join(value))
