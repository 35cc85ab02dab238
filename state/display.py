r"""Text for storing and showing: each rule once, used by every layer.

- **Storable** (``clean_text``; ``clean_value`` for every string of a JSON value): no lone
  UTF-16 surrogates, no NUL. A lone surrogate cannot be
  encoded as UTF-8 (it breaks JSON payloads and database writes) and PostgreSQL refuses NUL in
  text and JSON. Both can arrive in a log line, a model reply or a question; they are replaced by
  U+FFFD where such text enters, so nothing fails later.
- **Invisible characters** (``strip_invisible``): zero-width spaces and joiners, bidirectional
  controls, the byte-order mark and soft hyphens are removed; they hide or reorder what a reader
  sees (and would split ``503`` into ``5`` and ``03`` for a comparison).
- **One line** (``one_line``): invisible characters, terminal escape sequences and other control
  characters removed, every run of whitespace (line and paragraph separators included) one
  space, the ends trimmed.
- **Clip** (``clip``): at most ``limit`` characters; a cut text ends with ``…`` (counted in the
  limit), with the whitespace before the mark removed. Cut at a boundary (``at``): at the last
  separator in the second half of the room, with the punctuation before it removed too.
  ``clip_bytes`` is the same bound in UTF-8 bytes; ``word_prefix`` the longest prefix ending at
  a word, with no mark (an exact excerpt of the text).
- **Terminal-safe** (``terminal_safe``): every control character shown as a visible escape
  (``\x1b``), line breaks and tabs kept, for text printed on a terminal.
- **Error line** (``error_line``): ``<Type>: <message>`` on one line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

REPLACEMENT = "\ufffd"
ELLIPSIS = "…"
"""The mark of a cut text."""

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
INVISIBLE = re.compile("[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff]")
"""Zero-width, invisible-format and bidirectional control characters."""
_CONTROL = re.compile("[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]")
# Terminal escape sequences (CSI such as colours and cursor moves, OSC such as window titles).
_ESCAPE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
)
_WHITESPACE = re.compile(r"\s+")
_TERMINAL_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_BOUNDARY_PUNCTUATION = " \t,;:"
"""Removed from the end of a text cut at a boundary (``a=1, b=2,`` -> ``a=1, b=2``)."""


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate and NUL replaced by U+FFFD."""
    return _UNSTORABLE.sub(REPLACEMENT, text)


def clean_value(value: object) -> object:
    """A JSON-like value with ``clean_text`` applied to every string in it, keys included.

    Dicts, lists and tuples are walked (a tuple becomes a list); other values are kept.
    """
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {
            clean_text(key) if isinstance(key, str) else key: clean_value(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [clean_value(item) for item in value]
    return value


def has_unstorable(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate or a NUL character."""
    return _UNSTORABLE.search(text) is not None


def strip_invisible(text: str) -> str:
    """Remove zero-width, invisible-format and bidirectional control characters."""
    return INVISIBLE.sub("", text)


def one_line(text: str, limit: int | None = None) -> str:
    """Text for one line of output: no control or invisible characters, whitespace collapsed.

    Line and paragraph separators, tabs and form feeds become single spaces; terminal escape
    sequences and other control characters (BEL, backspace) are removed. With ``limit`` the
    line is clipped (``clip``).
    """
    text = _CONTROL.sub("", _ESCAPE.sub("", strip_invisible(text)))
    line = _WHITESPACE.sub(" ", text).strip()
    return line if limit is None else clip(line, limit)


def clip(text: str, limit: int, *, at: Sequence[str] = ()) -> str:
    """``text`` cut to at most ``limit`` characters, a cut marked with ``…``.

    Args:
        text: The text.
        limit: The most characters returned, the mark included.
        at: Separators to cut at, preferred in order (``("; ", " ")``): the cut is made at the
            last one found in the second half of the room, else anywhere.
    """
    if len(text) <= limit:
        return text
    if limit <= len(ELLIPSIS):
        return ELLIPSIS[:limit]
    room = limit - len(ELLIPSIS)
    head = text[:room]
    for separator in at:
        cut = head.rfind(separator)
        if cut >= room // 2:
            return head[:cut].rstrip(_BOUNDARY_PUNCTUATION) + ELLIPSIS
    return head.rstrip() + ELLIPSIS


def clip_bytes(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes (the ``…`` mark included), whole characters."""
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    mark = len(ELLIPSIS.encode("utf-8"))
    return raw[: max(0, limit - mark)].decode("utf-8", errors="ignore") + ELLIPSIS


def word_prefix(text: str, limit: int) -> str:
    """A prefix of ``text`` of at most ``limit`` characters that ends before a word it cuts.

    Unmarked, so it is an exact excerpt of ``text``; a text without a space in its first
    ``limit`` characters is cut there.
    """
    if len(text) <= limit:
        return text
    head = text[:limit]
    return head.rsplit(" ", 1)[0] if " " in head else head


def continued(prefix: str, text: str) -> str:
    """A prefix of ``text`` as quoted: followed by `` …`` when it is not all of ``text``.

    The mark stands apart, so the quoted prefix stays an exact excerpt.
    """
    return prefix if prefix == text else f"{prefix} {ELLIPSIS}"


def terminal_safe(text: str) -> str:
    r"""Text that cannot drive a terminal, for output meant to be read there.

    Every control character (escape, BEL, backspace, carriage return, C1 controls,
    bidirectional overrides) is shown as a visible escape such as ``\x1b``; line breaks and
    tabs stay.
    """
    return _TERMINAL_UNSAFE.sub(
        lambda m: (
            f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}"
        ),
        text,
    )


def error_line(exc: BaseException) -> str:
    """``<Type>: <message>`` on one line (``<Type>`` alone when there is no message)."""
    message = one_line(str(exc))
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
