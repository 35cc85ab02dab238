"""Text rules shared by every check: normalisation, specifics and whole-token matching.

The Gatekeeper (excerpts and ``evidence.unbound_specifics``), the deterministic claim checker and
the check of a model-written answer all compare claim text with evidence text through these
functions, so the three can never disagree about what a text states.

- **Invisible characters** (zero-width spaces and joiners, bidirectional controls, the byte-order
  mark, soft hyphens; ``state.display.strip_invisible``) are removed before anything else: they
  must not split ``503`` into ``5`` and ``03``, nor hide a word.
- **Normalisation** for comparison: NFKC (full-width letters and digits become half-width),
  case folding, every run of whitespace (line and paragraph separators included) one space.
- **Specifics**: what a claim states concretely. A maximal run of ``[A-Za-z0-9._%:/-]`` holding a
  digit (numbers, percentages, durations, status and error codes, versions, ids), and an
  identifier ending in ``Exception`` or ``Error``. Full-width punctuation separates runs as it
  does in the original text (``HTTP 500：timeout`` states ``500``).
- **Whole tokens**: a specific is found only as a whole: ``2`` is not in ``2026`` nor ``0.2`` in
  ``0.23``, ``Error`` is not in ``TimeoutError``, while ``500`` is in ``status=500`` and ``500s``.
  A time range ``10:00-10:30`` is found when both of its ends are.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from functools import lru_cache
from typing import Literal

from state.display import strip_invisible

UnicodeForm = Literal["NFKC", "NFC", "NFKD", "NFD", "none"]
UNICODE_FORMS: tuple[UnicodeForm, ...] = ("NFKC", "NFC", "NFKD", "NFD", "none")

IDENTIFIER_SUFFIXES: tuple[str, ...] = ("Exception", "Error")
"""Suffixes that make an identifier a specific (``NullPointerException``, ``TimeoutError``)."""
EDGE_PUNCTUATION = ".:/-"
"""Stripped from both ends of a specific (``500.`` at the end of a sentence states ``500``)."""

_WHITESPACE = re.compile(r"\s+")
_FULLWIDTH_PUNCTUATION = re.compile(
    "[\u3000-\u303f\uff01-\uff04\uff06-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65]"
)
_DIGIT = re.compile(r"\d")
# A maximal run of the specific characters that holds a digit.
_DIGIT_RUN = re.compile(r"(?<![A-Za-z0-9._%:/-])[A-Za-z0-9._%:/-]*[0-9][A-Za-z0-9._%:/-]*")
# A range of two clock times ("10:00-10:30") or of two ISO timestamps
# ("2023-04-01t00:00:00z-2023-04-01t01:00:00z", as texts are compared case-folded).
_RANGE_END = (
    r"(?:\d{4}-\d{2}-\d{2}t\d{1,2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:z|[+-]\d{2}:?\d{2})?"
    r"|\d{1,2}:\d{2}(?::\d{2})?)"
)
_TIME_RANGE = re.compile(rf"^({_RANGE_END})-({_RANGE_END})$", re.IGNORECASE)
_TIME = re.compile(
    r"^(?:\d{4}-\d{2}-\d{2}(?:t\S*)?|\d{1,2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?)$", re.IGNORECASE
)
_CLOCK = re.compile(r"^\d{1,2}:\d{2}$")
# "30000 ms" and "30000ms" are one quantity: the space before a unit is dropped.
_UNIT_GAP = re.compile(
    r"(?<=\d)[ \t]+(?=(?:ms|s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?|d|days?|%|[kmgt]i?b"
    r"|bytes?|rps|qps)(?![A-Za-z]))",
    re.IGNORECASE,
)
# One spelling per duration unit, so "5 minutes" is the "5m" a series or alert states.
_DURATION_UNITS = (
    (re.compile(r"(?<=\d)(?:minutes?|mins?)(?![a-z])"), "m"),
    (re.compile(r"(?<=\d)(?:seconds?|secs?)(?![a-z])"), "s"),
    (re.compile(r"(?<=\d)(?:hours?|hrs?)(?![a-z])"), "h"),
    (re.compile(r"(?<=\d)days?(?![a-z])"), "d"),
)


def _duration_units(text: str) -> str:
    """``text`` (case-folded, unit gaps closed) with each duration unit in its short spelling."""
    for pattern, short in _DURATION_UNITS:
        text = pattern.sub(short, text)
    return text


_FENCE = re.compile(r"^```[A-Za-z0-9_-]*[ \t]*\r?\n(?P<body>.*?)\r?\n```$", re.DOTALL)
_WORD_CHAR = re.compile(r"[A-Za-z0-9]")


_ASSERTS_CAUSE = re.compile(
    r"\b(?:root causes?|caused by|because|due to|owing to|(?:a |the )?result of|led to|leads? to|"
    r"the cause (?:is|was)|is caused|was caused)\b|原因是|根因|导致|由于|因为|造成",
    re.IGNORECASE,
)


def asserts_cause(text: str) -> bool:
    """Whether a text states a cause as established (``caused by``, ``root cause``, ``导致``...)."""
    return _ASSERTS_CAUSE.search(normalize(text)) is not None


@lru_cache(maxsize=8192)
def normalize(
    text: str,
    *,
    unicode_form: UnicodeForm = "NFKC",
    casefold: bool = True,
    collapse_whitespace: bool = True,
) -> str:
    """Normalise text for comparison (invisible characters are always removed first).

    Args:
        text: The text to normalise.
        unicode_form: A ``unicodedata`` normal form (``NFKC`` folds full-width characters to
            half-width), or ``"none"``.
        casefold: Whether to casefold.
        collapse_whitespace: Whether to collapse whitespace runs to one space and strip the ends.

    Returns:
        The normalised text.
    """
    text = strip_invisible(text)
    if unicode_form != "none":
        text = unicodedata.normalize(unicode_form, text)
    if casefold:
        text = text.casefold()
    if collapse_whitespace:
        text = _WHITESPACE.sub(" ", text).strip()
    return text


@lru_cache(maxsize=32)
def _identifier_pattern(suffixes: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(suffix) for suffix in suffixes)
    return re.compile(
        rf"(?<![A-Za-z0-9_$.])[A-Za-z_$][A-Za-z0-9_$.]*(?:{alternatives})(?![A-Za-z0-9_$])"
    )


def specifics(
    text: str,
    *,
    identifier_suffixes: Iterable[str] = IDENTIFIER_SUFFIXES,
    strip_punctuation: str = EDGE_PUNCTUATION,
) -> list[str]:
    """The specifics a text states, distinct (case-insensitively), in order of appearance.

    Args:
        text: A claim or summary text.
        identifier_suffixes: Suffixes marking exception or error identifiers (case-sensitive, with
            at least one character before the suffix).
        strip_punctuation: Characters stripped from both ends of a run before it is kept.

    Returns:
        The specifics as written (after NFKC), e.g. ``["500", "30s", "NullPointerException"]``.
    """
    separated = _FULLWIDTH_PUNCTUATION.sub(" ", strip_invisible(text))
    normalised = _UNIT_GAP.sub("", unicodedata.normalize("NFKC", separated))
    found: list[tuple[int, str]] = []
    for match in _DIGIT_RUN.finditer(normalised):
        token = match.group().strip(strip_punctuation)
        if _DIGIT.search(token):
            found.append((match.start(), token))
    suffixes = tuple(suffix for suffix in identifier_suffixes if suffix)
    if suffixes:
        for match in _identifier_pattern(suffixes).finditer(normalised):
            token = match.group().strip(strip_punctuation)
            if any(token.endswith(suffix) and len(token) > len(suffix) for suffix in suffixes):
                found.append((match.start(), token))
    found.sort(key=lambda item: item[0])
    result: list[str] = []
    seen: set[str] = set()
    for _, token in found:
        key = token.casefold()
        if key not in seen:
            seen.add(key)
            result.append(token)
    return result


def _continues(edge: str, neighbour: str, beyond: str) -> bool:
    """Whether ``neighbour`` (then ``beyond``) would continue the token past its ``edge`` char.

    A digit is continued by a digit, and by ``.`` or ``:`` before a digit: ``12`` is no quantity
    of its own inside ``0.12`` or ``10:01:12``.
    """
    if not neighbour:
        return False
    if edge.isdigit():
        return neighbour.isdigit() or (neighbour in ".:" and beyond.isdigit())
    if _WORD_CHAR.match(edge):
        return bool(_WORD_CHAR.match(neighbour))
    return False


def contains_whole(needle: str, haystack: str) -> bool:
    """Whether ``needle`` occurs in ``haystack`` as a whole token (both already normalised).

    A needle that starts or ends with a digit must not be part of a longer number; one that
    starts or ends with a letter must not run on into more letters or digits (``_``, ``.`` and
    other punctuation separate: ``p99`` is found in ``latency_p99``).
    """
    if not needle:
        return False
    start = haystack.find(needle)
    while start >= 0:
        end = start + len(needle)
        before = haystack[start - 1] if start > 0 else ""
        before2 = haystack[start - 2] if start > 1 else ""
        after = haystack[end] if end < len(haystack) else ""
        after2 = haystack[end + 1] if end + 1 < len(haystack) else ""
        # ``before2`` guards the decimal case from the left: ``0.5`` must not match ``5``.
        left = _continues(needle[0], before, "") or (
            needle[0].isdigit() and before in ".:" and before2.isdigit()
        )
        right = _continues(needle[-1], after, after2)
        if right and after == ":" and _CLOCK.match(needle):
            right = _continues(needle[-1], haystack[end + 3 : end + 4], "")  # 10:01 in 10:01:12
        if not left and not right:
            return True
        start = haystack.find(needle, start + 1)
    return False


def is_time(specific: str) -> bool:
    """Whether a specific is a time of day or a date (which a timestamp may ground)."""
    return _TIME.match(specific) is not None


def _haystack(text: str, casefold: bool) -> str:
    closed = _UNIT_GAP.sub("", normalize(text, casefold=casefold, collapse_whitespace=False))
    return _duration_units(closed) if casefold else closed


def is_quantity(specific: str) -> bool:
    """Whether a specific is a count or a value (it starts with a digit and is no time)."""
    return specific[:1].isdigit() and not is_time(specific) and not _TIME_RANGE.match(specific)


def grounded(
    specific: str,
    texts: Iterable[str],
    *,
    casefold: bool = True,
    name_texts: Iterable[str] = (),
) -> bool:
    """Whether a specific is stated by one of ``texts`` (a time range: both of its ends).

    Args:
        specific: One specific, as returned by ``specifics``.
        texts: Evidence texts, raw (they are normalised here, with the same case rule).
        casefold: Compare case-insensitively.
        name_texts: Texts that may ground times, dates and names but no count or value (whole
            log lines, whose timestamp and instance are no quantity of the incident).

    Returns:
        True when one text states it as a whole token, with its unit.
    """
    needle = _UNIT_GAP.sub("", normalize(specific, casefold=casefold, collapse_whitespace=False))
    if casefold:
        needle = _duration_units(needle)
    haystacks = [_haystack(text, casefold) for text in texts]
    if not is_quantity(needle):
        haystacks += [_haystack(text, casefold) for text in name_texts]
    if any(contains_whole(needle, haystack) for haystack in haystacks):
        return True
    span = _TIME_RANGE.match(needle)
    if span is None:
        return False
    return all(
        any(contains_whole(end, haystack) for haystack in haystacks) for end in span.groups()
    )


def strip_fence(text: str) -> tuple[str, bool]:
    """Strip one surrounding Markdown code fence; tell whether there was one."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced is None:
        return body, False
    return fenced.group("body").strip(), True


def normalize_id(value: str) -> str:
    """An identifier as compared everywhere: NFKC, invisible characters removed, trimmed."""
    return unicodedata.normalize("NFKC", strip_invisible(value)).strip()
