"""The shared text rules: normalisation, specifics, whole-token matching.

The Gatekeeper, the claim checker and the check of a model-written summary all use these, so
they are tested once, here.
"""

from __future__ import annotations

import pytest

from verification.text import (
    contains_whole,
    grounded,
    is_quantity,
    normalize,
    specifics,
    strip_fence,
)

INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u202e"]


def test_specifics_finds_numbers_and_exception_names() -> None:
    text = "返回 ５００, p99 30s, 12%. java.lang.NullPointerException: TimeoutError at 10:30."

    assert specifics(text) == [
        "500",
        "p99",
        "30s",
        "12%",
        "java.lang.NullPointerException",
        "TimeoutError",
        "10:30",
    ]
    assert specifics("An Error occurred, the error rate rose") == []


def test_specifics_split_on_chinese_punctuation() -> None:
    assert specifics("HTTP 500：Cannot acquire，耗时 30000ms。") == ["500", "30000ms"]
    assert specifics("错误率 ２３％") == ["23%"]


@pytest.mark.parametrize("char", INVISIBLE, ids=lambda c: f"U+{ord(c):04X}")
def test_specifics_are_not_split_by_invisible_characters(char: str) -> None:
    assert specifics(f"order-service returned HTTP 5{char}03") == ["503"]


@pytest.mark.parametrize(
    ("needle", "haystack", "found"),
    [
        ("2", "2026-03-01t10:07:00z error", False),
        ("0.2", "value=0.23", False),
        ("500", "status=500 error", True),
        ("500", "http 500s at the gateway", True),
        ("23%", "ratio is 23% over", True),
        ("0.3", "value=0.3 threshold", True),
        ("3", "value=0.3 threshold", False),
        ("p99", "http_server_latency_p99{service=a}", True),
        ("timeouterror", "sockettimeouterror raised", False),
        ("nullpointerexception", "java.lang.nullpointerexception at", True),
        ("5", "0.5 seconds", False),
    ],
    ids=[
        "year-is-not-2",
        "0.23-is-not-0.2",
        "status",
        "plural",
        "percent",
        "decimal",
        "3-is-not-0.3",
        "underscore-separates",
        "word-inside-word",
        "dotted-name",
        "decimal-from-the-left",
    ],
)
def test_contains_whole_matches_whole_tokens_only(needle: str, haystack: str, found: bool) -> None:
    assert contains_whole(needle, haystack) is found


def test_grounded_time_range_needs_both_ends() -> None:
    assert grounded("10:00-10:30", ["from 10:00 until 10:30"])
    assert not grounded("10:00-10:45", ["from 10:00 until 10:30"])


@pytest.mark.parametrize(
    ("specific", "evidence", "found"),
    [
        ("5minutes", "5xx ratio is 23% over the last 5m (threshold 5%)", True),
        ("5 minutes", "over the last 5m", True),
        ("5min", "over the last 5 minutes", True),
        ("30seconds", "timed out after 30s", True),
        ("2hours", "for 2h", True),
        ("30000ms", "timed out after 30000ms", True),
        ("5minutes", "took 5ms", False),
        ("5minutes", "over the last 5h", False),
        ("5m", "over the last 50m", False),
    ],
)
def test_grounded_reads_a_duration_in_any_of_its_unit_spellings(
    specific: str, evidence: str, found: bool
) -> None:
    assert grounded(specific, [evidence]) is found


def test_grounded_timestamp_range_needs_both_ends() -> None:
    # A window written as two ISO timestamps joined by a dash (as a tool's summary states its
    # start= and end= apart) is grounded by its two ends, like a clock range.
    summary = "query_logs end=2023-04-01T01:00:00Z level=ERROR start=2023-04-01T00:00:00Z matched 0"
    assert grounded("2023-04-01T00:00:00Z-2023-04-01T01:00:00Z", [summary])
    assert grounded(
        "2023-04-01T00:00:00+00:00-2023-04-01T01:00:00+00:00",
        ["from 2023-04-01T00:00:00+00:00 to 2023-04-01T01:00:00+00:00"],
    )
    assert not grounded("2023-04-01T00:00:00Z-2023-04-01T02:00:00Z", [summary])
    assert not is_quantity("2023-04-01T00:00:00Z-2023-04-01T01:00:00Z")
    # The ends of a range are never counts: a quantity-only text cannot ground them.
    assert not grounded("2023-04-01T00:00:00Z-2023-04-01T01:00:00Z", ["matched 0 of 0"])


def test_grounded_compares_normalised_and_case_insensitively() -> None:
    assert grounded("TimeoutError", ["raised ＴｉｍｅｏｕｔＥｒｒｏｒ"])
    assert not grounded("TimeoutError", ["raised timeouterror"], casefold=False)


def test_normalize_folds_width_case_whitespace_and_invisible_characters() -> None:
    assert normalize("Ｃａｎｎｏｔ\u200b  Acquire\n\u2028pool") == "cannot acquire pool"
    assert normalize("A  b", collapse_whitespace=False) == "a  b"


def test_strip_fence_strips_one_fence_and_says_so() -> None:
    assert strip_fence('```json\n{"a": 1}\n```') == ('{"a": 1}', True)
    assert strip_fence('  {"a": 1} ') == ('{"a": 1}', False)


def test_grounded_time_of_day_with_fractions_by_a_log_line_timestamp() -> None:
    """``07:37:37.261`` is a time (a log line's timestamp may ground it), not a quantity."""
    line = '2026-12-05T07:37:37.261Z FATAL postgres: database "x" does not exist'
    assert grounded("07:37:37.261", [], name_texts=[line])
    assert not grounded("07:37:37.262", [], name_texts=[line])
    assert not grounded("37.261", [], name_texts=[line])  # a quantity: never from a timestamp
