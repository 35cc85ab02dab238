"""Text that can be stored and sent anywhere: no lone UTF-16 surrogates, no NUL characters.

A lone surrogate cannot be encoded as UTF-8 (so it breaks JSON payloads and database writes) and
PostgreSQL refuses NUL in text and JSON. Both can arrive in a log line, a model reply or a
question; they are replaced by U+FFFD where such text enters, so nothing fails later.
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate and NUL replaced by U+FFFD."""
    return _UNSTORABLE.sub(REPLACEMENT, text)


def has_unstorable(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate or a NUL character."""
    return _UNSTORABLE.search(text) is not None
