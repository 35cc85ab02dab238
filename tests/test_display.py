"""The text helpers at the bottom (``state/display.py``): each rule once, every caller using it.

Every layer shortens, flattens and cleans text through these functions; the last tests check that
no product module writes one of these rules again.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from state.display import (
    ELLIPSIS,
    clean_text,
    clean_value,
    clip,
    clip_bytes,
    continued,
    error_line,
    one_line,
    strip_invisible,
    terminal_safe,
    word_prefix,
)

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = (
    "analysis apps evidence graph knowledge models nodes persistence state tools verification"
).split()
HOME = ROOT / "state" / "display.py"


# --------------------------------------------------------------------------- one line


@pytest.mark.parametrize(
    "text",
    [
        "first\nsecond",
        "first\u2028second",
        "first\u2029second",
        "first\x0bsecond",
        "first\x0csecond",
        "first\x85second",
        "first\r\nsecond",
        "  first \t second  ",
    ],
    ids=["lf", "line-separator", "paragraph-separator", "vt", "ff", "nel", "crlf", "spaces"],
)
def test_one_line_turns_every_line_break_into_one_space(text: str) -> None:
    assert one_line(text) == "first second"


def test_one_line_removes_control_and_invisible_characters() -> None:
    assert one_line("\x1b[31mred\x1b[0m \x07bell\x08 z\u200bw") == "red bell zw"
    assert one_line("\x1b]0;owned\x07title") == "title"


def test_one_line_with_a_limit_is_clipped_after_flattening() -> None:
    assert one_line("a\n\n\nb", 3) == "a b"
    assert one_line("alpha\nbeta gamma", 8) == "alpha b…"


def test_strip_invisible_keeps_visible_text() -> None:
    assert strip_invisible("5\u200b0\u200d3 \u202eok\ufeff\u00ad") == "503 ok"
    assert strip_invisible("naïve 中文") == "naïve 中文"


def test_clean_text_replaces_what_cannot_be_stored() -> None:
    assert clean_text("a\x00b\ud800c") == "a\ufffdb\ufffdc"


def test_clean_value_cleans_every_string_and_key_of_a_json_value() -> None:
    value = {"q\ud800": ["a\x00", ("b\udc00", 3)], "n": None, "x": 1.5}

    assert clean_value(value) == {"q\ufffd": ["a\ufffd", ["b\ufffd", 3]], "n": None, "x": 1.5}


def test_readable_calls_replace_lone_surrogates_in_tool_call_arguments() -> None:
    from langchain_core.messages import AIMessage

    from models.messages import readable_calls

    reply = AIMessage(
        content="",
        tool_calls=[{"name": "query_logs", "args": {"query": "x\ud83d"}, "id": "c1"}],
    )

    calls = readable_calls(reply)

    assert calls[0]["args"] == {"query": "x\ufffd"}
    assert calls[0]["id"] == "c1" and calls[0]["name"] == "query_logs"


# --------------------------------------------------------------------------- clip


def test_clip_leaves_a_short_text_alone() -> None:
    assert clip("abcdef", 6) == "abcdef"
    assert clip("", 0) == ""


def test_clip_counts_the_mark_in_the_limit() -> None:
    assert clip("abcdef", 4) == "abc…"
    assert all(len(clip("x" * 50, limit)) == limit for limit in range(1, 50))
    assert clip("abcdef", 1) == ELLIPSIS
    assert clip("abcdef", 0) == ""


def test_clip_drops_the_space_before_the_mark() -> None:
    assert clip("abc def", 5) == "abc…"


def test_clip_at_a_boundary_in_the_second_half_of_the_room() -> None:
    text = "service=a; level=ERROR; query=connection pool exhausted"
    assert clip(text, 30, at=("; ", " ")) == "service=a; level=ERROR…"
    # A boundary in the first half would throw most of the room away: the cut is made anyway.
    assert clip("ab cdefghijklmnopqrstuvwxyz", 12, at=(" ",)) == "ab cdefghij…"
    # Punctuation before the boundary goes with it.
    assert clip("first part, second part", 14, at=(" ",)) == "first part…"


def test_clip_bytes_counts_utf8_and_keeps_whole_characters() -> None:
    text = "错误" * 20
    clipped = clip_bytes(text, 20)
    assert len(clipped.encode("utf-8")) <= 20
    assert clipped.endswith(ELLIPSIS) and text.startswith(clipped[:-1])
    assert clip_bytes("short", 20) == "short"


def test_word_prefix_is_an_exact_prefix_ending_at_a_word() -> None:
    message = "Cannot acquire connection from pool (timeout 30000ms)"
    assert word_prefix(message, 31) == "Cannot acquire connection from"
    # The word the limit cuts through is left out, never half quoted.
    assert word_prefix(message, 29) == "Cannot acquire connection"
    assert all(message.startswith(word_prefix(message, n)) for n in range(1, 60))
    assert word_prefix("x" * 40, 10) == "x" * 10
    assert word_prefix(message, 100) == message


def test_continued_marks_a_quoted_prefix_apart() -> None:
    assert continued("Cannot acquire", "Cannot acquire connection") == "Cannot acquire …"
    assert continued("whole", "whole") == "whole"


# --------------------------------------------------------------------------- terminal, errors


def test_terminal_safe_shows_controls_and_keeps_line_breaks() -> None:
    assert terminal_safe("a\x1b[2Jb\x07") == "a\\x1b[2Jb\\x07"
    assert terminal_safe("x\u202ey") == "x\\u202ey"
    assert terminal_safe("line\n\tnext") == "line\n\tnext"


def test_error_line_is_one_line_with_the_type() -> None:
    assert error_line(ValueError("bad\nthing")) == "ValueError: bad thing"
    assert error_line(KeyboardInterrupt()) == "KeyboardInterrupt"


# --------------------------------------------------------------------------- each rule once


def _product_trees() -> list[tuple[Path, ast.Module]]:
    return [
        (path, ast.parse(path.read_text(encoding="utf-8")))
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != HOME
    ]


def _flattens_whitespace(node: ast.AST) -> bool:
    """``" ".join(text.split())``: the one-line rule written again."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "join"
        and isinstance(node.func.value, ast.Constant)
        and node.func.value.value == " "
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Call)
        and isinstance(node.args[0].func, ast.Attribute)
        and node.args[0].func.attr == "split"
        and not node.args[0].args
    )


def _marks_a_cut(node: ast.AST) -> bool:
    """``text[:n] + "…"``: the clip rule written again."""
    return (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Add)
        and any(
            isinstance(side, ast.Constant) and isinstance(side.value, str) and "…" in side.value
            for side in (node.left, node.right)
        )
    )


def _lists_invisible_characters(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and "\u200b" in node.value


def test_display_rules_are_written_once() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
        for path, tree in _product_trees()
        for node in ast.walk(tree)
        if _flattens_whitespace(node) or _marks_a_cut(node) or _lists_invisible_characters(node)
    ]
    assert not found, "a display rule written again (use state.display): " + ", ".join(found)


@pytest.mark.parametrize(
    "name", ["one_line", "clip", "clip_bytes", "terminal_safe", "error_line", "strip_invisible"]
)
def test_display_helpers_are_defined_once(name: str) -> None:
    defined = [
        str(path.relative_to(ROOT))
        for path, tree in _product_trees()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == name
    ]
    assert not defined, f"{name} defined again in {', '.join(defined)}"
