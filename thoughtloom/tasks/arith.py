"""Exact rational arithmetic for checking thoughts: number formatting and a safe expression evaluator."""

from __future__ import annotations

import ast
from fractions import Fraction

OPS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
}


def fmt(x: Fraction) -> str:
    """A number as people write it: 7, -3, 5/6."""
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def parse_number(token: str) -> Fraction:
    """A number token (integer, decimal or a/b) as an exact fraction; ValueError if it is not one."""
    return Fraction(token.strip())


class ExpressionError(ValueError):
    """Not an arithmetic expression over numbers with + - * / and parentheses."""


def evaluate(expression: str) -> tuple[Fraction, list[Fraction]]:
    """The exact value of an arithmetic expression and the numbers it uses, in order."""
    try:
        tree = ast.parse(expression.replace("×", "*").replace("÷", "/").replace("x", "*"), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"not an arithmetic expression: {expression!r}") from exc
    used: list[Fraction] = []

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
            value = Fraction(str(node.value))
            used.append(value)
            return value
        if isinstance(node, ast.BinOp):
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Add):
                return left + right
            if isinstance(node.op, ast.Sub):
                return left - right
            if isinstance(node.op, ast.Mult):
                return left * right
            if isinstance(node.op, ast.Div):
                if right == 0:
                    raise ExpressionError("division by zero")
                return left / right
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        raise ExpressionError(f"unsupported element in {expression!r}")

    return walk(tree.body), used
