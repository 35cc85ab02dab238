"""Small, exact readings of PromQL text: a rule's threshold, a bare selector, a metric's unit.

None of these parse PromQL in full; each answers one narrow question and says "no" (``None``,
``False``) whenever the text is not plainly of the shape it reads, so nothing is ever guessed:
a threshold is given only for ``<expr> <op> <number>`` (or ``<number> <op> <expr>``) with one
comparison at the top level and no ``bool``, ``and``, ``or`` or ``unless`` there.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_COMPARISONS = ("==", "!=", ">=", "<=", ">", "<")
_SET_OPERATORS = re.compile(r"\b(?:and|or|unless|bool)\b")
_SELECTOR = re.compile(r"\s*(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)\s*(?:\{[^{}]*\})?\s*")


class Comparison(NamedTuple):
    """A top-level comparison with a number on one side."""

    expression: str
    """The side that is not the number (what the rule measures)."""
    operator: str
    threshold: float


def _top_level(text: str) -> tuple[list[tuple[int, str]], str]:
    """Top-level comparison operators (position, operator) and the text outside nesting.

    Returns the operators found outside parentheses, brackets, braces and strings, and the text
    with everything nested blanked out (so keywords inside label matchers do not count).
    """
    depth = 0
    quote: str | None = None
    found: list[tuple[int, str]] = []
    outside: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if quote is not None:
            if char == "\\":
                outside.append("  ")
                i += 2
                continue
            if char == quote:
                quote = None
            outside.append(" ")
            i += 1
            continue
        if char in "\"'`":
            quote = char
            outside.append(" ")
        elif char in "([{":
            depth += 1
            outside.append(" ")
        elif char in ")]}":
            depth -= 1
            outside.append(" ")
        elif depth == 0:
            operator = next((op for op in _COMPARISONS if text.startswith(op, i)), None)
            if operator is not None:
                found.append((i, operator))
                outside.append(" " * len(operator))
                i += len(operator)
                continue
            outside.append(char)
        else:
            outside.append(" ")
        i += 1
    return found, "".join(outside)


def comparison(expression: str) -> Comparison | None:
    """The plain comparison of an alert rule's expression, or None when it is not one.

    ``sum(rate(x[5m])) / sum(rate(y[5m])) > 0.05`` -> ``(..., ">", 0.05)``.
    """
    operators, outside = _top_level(expression)
    if len(operators) != 1 or _SET_OPERATORS.search(outside):
        return None
    position, operator = operators[0]
    left = expression[:position].strip()
    right = expression[position + len(operator) :].strip()
    if _NUMBER.fullmatch(right) and left:
        return Comparison(left, operator, float(right))
    if _NUMBER.fullmatch(left) and right:
        flipped = {">": "<", "<": ">", ">=": "<=", "<=": ">="}.get(operator, operator)
        return Comparison(right, flipped, float(left))
    return None


def bare_selector(expression: str) -> str | None:
    """The metric name when the expression is only a selector (``name{...}``), else None."""
    match = _SELECTOR.fullmatch(expression)
    return match.group("name") if match else None


def unit_of(metric: str | None, *, rated: bool = False) -> str | None:
    """The unit a metric's name states: ``_seconds`` s, ``_bytes`` B; a rated ``_total`` /s.

    ``_ratio`` (and any other name) is dimensionless: no unit is given rather than a guess.
    """
    if not metric:
        return None
    if rated:
        return "/s"
    if metric.endswith("_seconds"):
        return "s"
    if metric.endswith("_bytes"):
        return "B"
    return None
