"""Worked rationales, built by rule from a real set's items: the demonstrations that teach
a pretrained model its task's format and skill (``rlcd-lab train teach``), the way the
tiny bases learn theirs from their task's teacher.

``WORKED[kind](item)`` returns the rationale a careful solver writes for ``item`` (without
the marker and the answer, which the trainer appends), or ``None`` when the rule cannot
solve the item or its answer is not the gold option (such items are left out): kinds
``arithmetic`` (:func:`arithmetic`) and ``arithmetic-verify`` (:func:`arithmetic_verify`).
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable

from rlcd_lab.tasks.items import TaskItem

OPERATIONS: dict[str, Callable[[float, float], float]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "^": operator.pow,
    "mod": operator.mod,
}
"""What each operation a worked rationale writes (``a op b = c``) computes."""
_OPS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "^", ast.Mod: "mod"
}  # fmt: skip
_OPTION = re.compile(r"^([A-Z])\. (.+)$")


def written(x: float) -> str:
    """How a worked rationale writes a number: ``12`` for integral values, else up to 4
    decimals (``2.5``, ``0.3333``)."""
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
            sym = _OPS[type(node.op)]
            if sym in ("/", "mod") and b == 0:
                raise ZeroDivisionError
            out = OPERATIONS[sym](a, b)
            self.lines.append(f"{written(a)} {sym} {written(b)} = {written(out)}")
            return out
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "sqrt"
            and len(node.args) == 1
        ):
            x = self(node.args[0])
            out = math.sqrt(x)
            self.lines.append(f"sqrt({written(x)}) = {written(out)}")
            return out
        raise ValueError(f"not arithmetic: {ast.dump(node)}")


def _percent(expr: str) -> str:
    """``p% of x`` -> ``(p / 100 * x)``; other ``%`` stay remainders."""
    return re.sub(r"(-?\d+(?:\.\d+)?)% of (-?\d+(?:\.\d+)?)", r"(\1 / 100 * \2)", expr)


def evaluate(expr: str) -> tuple[list[str], float] | None:
    """The operations of an arithmetic expression in precedence order (``a op b = c``)
    and its value, or None when it is not arithmetic this rule understands."""
    source = _percent(expr).replace("^", "**").replace(" mod ", " % ")
    steps = _Steps()
    try:
        value = steps(ast.parse(source, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError):
        return None
    return (steps.lines or [f"{expr} = {written(value)}"]), value


def arithmetic(item: TaskItem) -> str | None:
    """The worked rationale of a ``basic-skills-arithmetic`` item.

    * ``arithmetic`` (``basic-skills-arithmetic``, 10 options such as ``6 + 8 / 2 =``):
      each operation in the order of precedence, ``8 / 2 = 4; 6 + 4 = 10``, then the option
      that holds the result, ``10 is option F.`` Understands ``+ - * /``, powers (``^``),
      ``sqrt(x)``, remainders (``a % b``, ``a mod b``, Python's sign convention) and
      percentages (``p% of x``). Synthetic text over a real set's questions.
    """
    lines = item.prompt.split("\n")
    done = evaluate(lines[0].strip().removesuffix("=").strip())
    if done is None:
        return None
    steps, value = done
    hits = []
    for line in lines[1:]:
        m = _OPTION.match(line.strip())
        if m and _is_number(m.group(2)) and abs(float(m.group(2)) - value) < 1e-6:
            hits.append(m.group(1))
    gold = item.options[item.label]
    if hits != [gold]:
        return None
    return f"{'; '.join(steps)}. {written(value)} is option {gold}."


_VERIFY = re.compile(r"^Question: (.+?)=?\s*\nProposed answer: (\S+)\n", re.S)


def arithmetic_verify(item: TaskItem) -> str | None:
    """The worked rationale of a ``basic-skills-arithmetic-verify`` item (module
    docstring): the operations, then the result against the proposed answer.

    * ``arithmetic-verify`` (``basic-skills-arithmetic-verify``: ``Question: 6 + 8 / 2 =`` with
      a proposed answer, yes or no): the same operations, then ``10 vs 11: different.``
    """
    m = _VERIFY.match(item.prompt)
    done = evaluate(m.group(1).strip()) if m else None
    if done is None or not _is_number(m.group(2)):
        return None
    steps, value = done
    same = abs(float(m.group(2)) - value) < 1e-6
    if item.options[item.label] != ("yes" if same else "no"):
        return None
    verdict = "same" if same else "different"
    return f"{'; '.join(steps)}. {written(value)} vs {m.group(2)}: {verdict}."


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


WORKED: dict[str, Callable[[TaskItem], str | None]] = {
    "arithmetic": arithmetic,
    "arithmetic-verify": arithmetic_verify,
}
"""Worked-rationale rules by kind of task."""
