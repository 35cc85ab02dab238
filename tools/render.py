"""How every ref text renders a value, and the one-line ``<head>: <message>`` shape.

Ref texts are a contract (docs/contracts.md section 2): a claim's excerpt must occur in them, so
every tool renders its entries with these two functions.
"""

from __future__ import annotations

import json


def format_value(value: object) -> str:
    """Render one value the way every ref text shows it.

    ``None`` -> ``null``; bool -> ``true``/``false``; int -> digits; an integral float -> its int
    form (``12.0`` -> ``12``); any other float -> ``repr`` (``0.23``); str as is; list/dict ->
    compact JSON (no spaces, non-ASCII kept); anything else -> ``str()``.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return str(value)


def with_message(head: list[str], message: object) -> str:
    """Join the head parts with spaces and append ``: <message>`` when there is one."""
    text = " ".join(head)
    if message is None:
        return text
    return f"{text}: {format_value(message)}" if text else format_value(message)
