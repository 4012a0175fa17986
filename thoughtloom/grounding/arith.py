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


#: With powers: the largest result a power may make, in bits of its numerator or denominator
#: (about 30,000 digits), so that `9**9**9` is refused instead of taking the machine's memory.
MAX_POWER_BITS = 100_000
#: The largest decimal exponent a number may be written with (1e1000), for the same reason.
MAX_EXPONENT_DIGITS = 1000


class ExpressionError(ValueError):
    """Not an arithmetic expression over numbers with + - * / and parentheses."""


def evaluate(expression: str, *, powers: bool = False) -> tuple[Fraction, list[Fraction]]:
    """The exact value of an arithmetic expression and the numbers it uses, in order (powers: also ** ^ and unary +)."""
    text = expression.replace("×", "*").replace("÷", "/").replace("x", "*")
    if powers:
        # A calculator's user writes 2^10 for a power; Python's ^ (xor) means nothing here.
        text = text.replace("^", "**")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError) as exc:  # ValueError: a null byte
        raise ExpressionError(f"not an arithmetic expression: {expression!r}") from exc
    used: list[Fraction] = []

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
            value = _literal(node, text)
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
            if powers and isinstance(node.op, ast.Pow):
                return _power(left, right)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if powers and isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
            return walk(node.operand)
        raise ExpressionError(f"unsupported element in {expression!r}")

    return walk(tree.body), used


def _literal(node: ast.Constant, text: str) -> Fraction:
    """A number as written (not as the float Python reads): 0.12345678901234567890 stays exact."""
    written = ast.get_source_segment(text, node) or str(node.value)
    exponent = written.lower().partition("e")[2]
    # 1e999999999 is a short way to ask for a billion-digit integer.
    if exponent and abs(int(exponent)) > MAX_EXPONENT_DIGITS:
        raise ExpressionError(f"the number {written} is too large to compute exactly")
    return Fraction(written)


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    """base ** exponent, exactly: whole exponents only, and no result beyond MAX_POWER_BITS."""
    if exponent.denominator != 1:
        raise ExpressionError(f"only whole-number powers are exact; got the exponent {fmt(exponent)}")
    if base == 0 and exponent < 0:
        raise ExpressionError("division by zero")
    size = max(base.numerator.bit_length(), base.denominator.bit_length())
    if size > 1 and size * abs(exponent.numerator) > MAX_POWER_BITS:
        raise ExpressionError(f"the power {fmt(base)}**{fmt(exponent)} is too large to compute exactly")
    return base ** exponent.numerator
