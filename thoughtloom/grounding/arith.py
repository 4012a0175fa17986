"""Exact rational arithmetic for checking thoughts: number formatting and a safe expression evaluator."""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction

OPS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
}


def fmt(x: Fraction) -> str:
    """A number as people write it: 7, -3, 5/6 (all its digits, however many)."""
    return _digits(x.numerator) if x.denominator == 1 else f"{_digits(x.numerator)}/{_digits(x.denominator)}"


def _digits(n: int) -> str:
    """An integer's decimal digits. int's own conversion refuses numbers longer than
    sys.get_int_max_str_digits() (4300 by default, a guard against its quadratic time); decimal's is
    fast at any size, and the process-wide limit is not ours to change."""
    try:
        return str(n)
    except ValueError:
        return str(Decimal(n))


def parse_number(token: str) -> Fraction:
    """A number token (integer, decimal or a/b) as an exact fraction; ValueError if it is not one."""
    return Fraction(token.strip())


#: The largest number an expression may make, in bits of a numerator or denominator (about 30,000
#: digits). Each step's result is bounded from its operands' sizes before it is computed, so that
#: `9**9**9`, or a long sum of fractions whose denominators multiply, is refused at once instead of
#: taking the machine's time and memory (each step then costs milliseconds at most).
MAX_BITS = 100_000
#: Digits of the largest number that fits in MAX_BITS.
MAX_DIGITS = int(MAX_BITS * math.log10(2)) + 1
#: The largest decimal exponent a number may be written with (1e1000), for the same reason.
MAX_EXPONENT_DIGITS = 1000


class ExpressionError(ValueError):
    """Not an arithmetic expression over numbers with + - * / and parentheses."""


class NumberTooLarge(ExpressionError):
    """An expression that would make a number beyond MAX_BITS (refused before it is computed)."""


def evaluate(expression: str, *, powers: bool = False,
             stop: Callable[[], bool] | None = None) -> tuple[Fraction, list[Fraction]]:
    """The exact value of an arithmetic expression and the numbers it uses, in order (powers: also ** ^ and unary +).

    No step may make a number beyond MAX_BITS (NumberTooLarge, before it is computed). stop: asked
    before each step; True ends the evaluation with ExpressionError (a caller's deadline passed).
    """
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
            if stop is not None and stop():
                raise ExpressionError("the calculation was stopped before it finished")
            _check_size(node.op, left, right, expression)
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
        raise NumberTooLarge(f"the number {written} is too large to compute exactly")
    return Fraction(written)


def _check_size(op: ast.operator, left: Fraction, right: Fraction, expression: str) -> None:
    """Refuse a + - * / step whose result could exceed MAX_BITS, from its operands' bit lengths."""
    na, da = left.numerator.bit_length(), left.denominator.bit_length()
    nb, db = right.numerator.bit_length(), right.denominator.bit_length()
    if isinstance(op, ast.Add | ast.Sub):
        if left.denominator == right.denominator:  # whole numbers, mostly
            num, den = max(na, nb) + 1, da
        else:
            num, den = max(na + db, nb + da) + 1, da + db
    elif isinstance(op, ast.Mult):
        num, den = na + nb, da + db
    elif isinstance(op, ast.Div):
        num, den = na + db, da + nb
    else:
        return  # a power bounds itself (see _power)
    if max(num, den) > MAX_BITS:
        raise NumberTooLarge(f"{_shown(expression)} makes a number of more than {MAX_BITS:,} bits "
                              f"(about {MAX_DIGITS:,} digits); too large to compute exactly")


def _shown(expression: str) -> str:
    """An expression quoted in an error, cut so that the error stays one short line."""
    flat = " ".join(expression.split())
    return repr(flat if len(flat) <= 60 else flat[:57] + "...")


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    """base ** exponent, exactly: whole exponents only, and no result beyond MAX_BITS."""
    if exponent.denominator != 1:
        raise ExpressionError(f"only whole-number powers are exact; got the exponent {fmt(exponent)}")
    if base == 0 and exponent < 0:
        raise ExpressionError("division by zero")
    size = max(base.numerator.bit_length(), base.denominator.bit_length())
    if size > 1 and size * abs(exponent.numerator) > MAX_BITS:
        raise NumberTooLarge(f"the power {_shown(fmt(base))}**{_shown(fmt(exponent))} makes a number of more than "
                              f"{MAX_BITS:,} bits (about {MAX_DIGITS:,} digits); too large to compute exactly")
    return base ** exponent.numerator
