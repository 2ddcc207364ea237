"""A safe arithmetic calculator tool: numbers, + - * / // % **, parentheses and unary minus, nothing else.

The expression is parsed with ``ast`` and walked node by node; names, calls, attributes, subscripts and
every other construct are refused, and powers whose result would pass ``MAX_RESULT_BITS`` are refused
before they are computed, so no input can run code or stall the rollout.
"""

from __future__ import annotations

import ast
import math
import operator

from verl_lite.workers.tools.function_tool import tool

# Largest integer result (in bits) a calculation may produce; about 1233 decimal digits.
MAX_RESULT_BITS = 4096
# Longest expression accepted, in characters.
MAX_EXPRESSION_LENGTH = 512

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic ``expression``; ``ValueError`` names what is not allowed.

    Raises ``ZeroDivisionError`` on division by zero.
    """
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise ValueError(f"expression is {len(expression)} characters; at most {MAX_EXPRESSION_LENGTH}.")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as err:
        raise ValueError(f"{expression!r} is not an arithmetic expression ({err.msg}).") from None
    return _eval(tree.body)


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _finite(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        try:
            value = _BINARY[type(node.op)](left, right)
        except OverflowError:
            raise ValueError("the result is too large for a floating-point number.") from None
        if isinstance(value, complex):
            raise ValueError("the result is not a real number (a negative number to a fractional power).")
        if isinstance(value, int) and value.bit_length() > MAX_RESULT_BITS:
            raise ValueError(f"the result has more than {MAX_RESULT_BITS} bits.")
        return _finite(value)
    raise ValueError(
        f"{_describe(node)} is not allowed; only numbers, + - * / // % **, parentheses, unary -."
    )


def _finite(value: int | float) -> int | float:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("the result is too large for a floating-point number.")
    return value


def _check_power(base: int | float, exponent: int | float) -> None:
    """Refuse a power too large to compute before computing it."""
    if isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1:
        if exponent * math.log2(abs(base)) > MAX_RESULT_BITS:
            raise ValueError(f"{base} ** {exponent} has more than {MAX_RESULT_BITS} bits.")


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return f"the name {node.id!r}"
    if isinstance(node, ast.Call):
        return "a function call"
    if isinstance(node, ast.Attribute):
        return f"attribute access (.{node.attr})"
    if isinstance(node, ast.Constant):
        return f"the constant {node.value!r}"
    if isinstance(node, ast.UnaryOp | ast.BinOp):
        return f"the operator {type(node.op).__name__}"
    return f"the construct {type(node).__name__}"


def format_number(value: int | float) -> str:
    """``value`` as the calculator reports it: integers exactly, floats to 12 significant digits."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return str(value) if isinstance(value, int) else format(value, ".12g")


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly.

    Args:
        expression: numbers with + - * / // % ** and parentheses, e.g. "(12 + 7) * 3".
    """
    return format_number(evaluate(expression))
