"""Narrowing untrusted JSON: one set of rules for every backend answer and configuration file.

What a server or a file sends is whatever it sends. These functions narrow a decoded JSON value
to the shape the caller expects and give an empty or absent value otherwise, so a malformed part
of an answer is skipped (or reported by the caller) instead of raising deep inside a parser. A
boolean is never a number here (JSON ``true`` is not ``1``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeGuard


def obj(value: object) -> dict[str, Any]:
    """A JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def objects(value: object) -> list[dict[str, Any]]:
    """The objects of a JSON array (other items dropped), else an empty list."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def items(value: object) -> list[object]:
    """The items of a JSON array, else an empty list."""
    return list(value) if isinstance(value, list) else []


def texts(value: object) -> list[str]:
    """The non-empty strings of a JSON array, as sent (other items dropped)."""
    return [item for item in items(value) if isinstance(item, str) and item]


def at(value: object, *path: str) -> object:
    """The value at a path of nested object keys, or None where a step is missing."""
    current = value
    for key in path:
        if not isinstance(current, dict):
            return None
        current = current.get(key)
    return current


def text(value: object) -> str | None:
    """A non-blank string (stripped), else None."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def is_number(value: object) -> TypeGuard[int | float]:
    """Whether the value is a JSON number (an int or float, never a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def whole(value: object) -> int | None:
    """A JSON integer (never a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def scalar_text(value: object) -> str | None:
    """A string or number as non-blank text (a bool, object or array gives None)."""
    if isinstance(value, str) or is_number(value):
        return str(value).strip() or None
    return None


def strings(value: object) -> list[str] | None:
    """A JSON array of strings, else None (one non-string item spoils it)."""
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    return None


def string_map(value: object) -> dict[str, str] | None:
    """A JSON object whose values are all non-blank strings, else None."""
    if isinstance(value, dict) and all(text(item) for item in value.values()):
        return {str(key): str(item) for key, item in value.items()}
    return None


def loads(text: str, error: Callable[[json.JSONDecodeError], Exception]) -> object:
    """The decoded JSON of ``text``.

    Args:
        text: JSON text from a file, a variable or a request.
        error: Builds the caller's exception from the decoding error (its ``msg``, ``pos``,
            ``lineno`` and ``colno`` say where the text is wrong).

    Raises:
        Exception: ``error(...)`` when ``text`` is not JSON (raised from None).
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(exc) from None


_JSON_TYPES: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "a boolean"),  # before numbers: a bool is an int in Python, never in JSON
    ((int, float), "a number"),
    (str, "a string"),
    (list, "an array"),
    (dict, "an object"),
)
"""How ``json_type`` names each JSON type, tried in order."""


def json_type(value: object) -> str:
    """How a JSON value's type reads in a message (``an object``, ``a string``, ...)."""
    if value is None:
        return "null"
    named = (name for kind, name in _JSON_TYPES if isinstance(value, kind))
    return next(named, type(value).__name__)
