"""Worked rationales, built by rule from a real set's items: the demonstrations that teach
a pretrained model its task's format and skill (``rlcd-lab train teach``), the way the
tiny bases learn theirs from their task's teacher.

``WORKED[kind](item)`` returns the rationale a careful solver writes for ``item`` (without
the marker and the answer, which the trainer appends), or ``None`` when the rule cannot
solve the item or its answer is not the gold option (such items are left out).

* ``arithmetic`` (``basic-skills-arithmetic``, 10 options such as ``6 + 8 / 2 =``):
  each operation in the order of precedence, ``8 / 2 = 4; 6 + 4 = 10``, then the option
  that holds the result, ``10 is option F.`` Understands ``+ - * /``, powers (``^``),
  ``sqrt(x)``, remainders (``a % b``, ``a mod b``, Python's sign convention) and
  percentages (``p% of x``). Synthetic text over a real set's questions.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable

from .items import TaskItem

_OPS = {
    ast.Add: ("+", operator.add),
    ast.Sub: ("-", operator.sub),
    ast.Mult: ("*", operator.mul),
    ast.Div: ("/", operator.truediv),
    ast.Pow: ("^", operator.pow),
    ast.Mod: ("mod", operator.mod),
}
_OPTION = re.compile(r"^([A-Z])\. (.+)$")


def _num(x: float) -> str:
    """``12`` for integral values, else up to 4 decimals (``2.5``)."""
    return str(int(round(x))) if abs(x - round(x)) < 1e-9 else f"{x:.4f}".rstrip("0")


class _Steps:
    """Evaluates an expression tree bottom-up, writing one ``a op b = c`` per operation."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -self(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            a, b = self(node.left), self(node.right)
            sym, fn = _OPS[type(node.op)]
            if sym in ("/", "mod") and b == 0:
                raise ZeroDivisionError
            out = fn(a, b)
            self.lines.append(f"{_num(a)} {sym} {_num(b)} = {_num(out)}")
            return out
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "sqrt"
            and len(node.args) == 1
        ):
            x = self(node.args[0])
            out = math.sqrt(x)
            self.lines.append(f"sqrt({_num(x)}) = {_num(out)}")
            return out
        raise ValueError(f"not arithmetic: {ast.dump(node)}")


def _percent(expr: str) -> str:
    """``p% of x`` -> ``(p / 100 * x)``; other ``%`` stay remainders."""
    return re.sub(r"(-?\d+(?:\.\d+)?)% of (-?\d+(?:\.\d+)?)", r"(\1 / 100 * \2)", expr)


def arithmetic(item: TaskItem) -> str | None:
    """The worked rationale of a ``basic-skills-arithmetic`` item (module docstring)."""
    lines = item.prompt.split("\n")
    expr = lines[0].strip().removesuffix("=").strip()
    options = {}
    for line in lines[1:]:
        m = _OPTION.match(line.strip())
        if m:
            options[m.group(1)] = m.group(2)
    source = _percent(expr).replace("^", "**").replace(" mod ", " % ")
    steps = _Steps()
    try:
        value = steps(ast.parse(source, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError):
        return None
    hits = []
    for letter, text in options.items():
        try:
            if abs(float(text) - value) < 1e-6:
                hits.append(letter)
        except ValueError:
            continue
    gold = item.options[item.label]
    if hits != [gold]:
        return None
    work = "; ".join(steps.lines) if steps.lines else f"{expr} = {_num(value)}"
    return f"{work}. {_num(value)} is option {gold}."


WORKED: dict[str, Callable[[TaskItem], str | None]] = {"arithmetic": arithmetic}
"""Worked-rationale rules by kind of task."""
