"""Reading Markdown runbooks: front matter, headings, code fences and the title, one rule each.

- **Front matter**: a first line ``---`` opens a YAML block closed by ``---`` or ``...`` (within
  the first 200 lines); only its ``title:`` is read.
- **Code fences**: a line of three or more backticks or tildes (indented at most three spaces)
  opens a fence; a line of the same character, at least as long, closes it. Nothing inside is a
  heading.
- **Headings**: ATX (``#`` to ``######`` then a space; closing ``#`` dropped) and setext (a text
  line, not a list item, underlined with ``===`` for level 1 or ``---`` for level 2).
- **Title**: the first level-1 heading, else the front matter's ``title:``, else the name the
  caller gives (the file name). The heading is what a reader of the runbook sees as its title,
  and in runbook libraries it is the alert's own name (``# KubePodCrashLooping``) where the
  front matter holds a site's menu label (``title: Kube Pod Crash Looping``).

The runbook index (``knowledge.runbook_text``) and the ranking of runbook documents
(``knowledge.rank``) both read Markdown through this module.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

FRONT_MATTER_LINES = 200
"""Front matter not closed within this many lines is no front matter."""

_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_ATX = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")
_LIST_ITEM = re.compile(r"^\s*([-*+]|\d+[.)])\s")


@dataclass(frozen=True)
class Line:
    """One line of a Markdown body: a heading (``level`` 1-6), text, or code (a fence's)."""

    kind: Literal["heading", "text", "code"]
    text: str
    level: int = 0


@dataclass(frozen=True)
class Markdown:
    """A Markdown text read: its front matter title and its body's lines."""

    matter_title: str | None
    lines: tuple[Line, ...]

    @property
    def headings(self) -> list[Line]:
        """The headings, in order."""
        return [line for line in self.lines if line.kind == "heading"]

    def title(self, default: str = "", *, plain: Callable[[str], str] = str.strip) -> str:
        """The title: the first level-1 heading, else the front matter title, else ``default``.

        ``plain`` turns a heading's Markdown into the text the title shows.
        """
        first = next((plain(h.text) for h in self.headings if h.level == 1), None)
        return first or self.matter_title or default


def _front_matter(lines: Sequence[str]) -> tuple[str | None, Sequence[str]]:
    if not lines or lines[0].strip() != "---":
        return None, lines
    for end in range(1, min(len(lines), FRONT_MATTER_LINES)):
        if lines[end].strip() in ("---", "..."):
            title = None
            for line in lines[1:end]:
                key, sep, value = line.partition(":")
                if sep and key.strip().casefold() == "title":
                    title = value.strip().strip("'\"") or None
            return title, lines[end + 1 :]
    return None, lines


def _lines(lines: Sequence[str]) -> Iterator[Line]:
    fence: str | None = None
    pending: str | None = None  # the last text line, which a setext underline makes a heading
    for line in lines:
        opening = _FENCE.match(line)
        setext = _SETEXT.match(line)
        if fence is None and setext and pending and pending.strip():
            if not _LIST_ITEM.match(pending):
                yield Line("heading", pending.strip(), 1 if setext.group(1)[0] == "=" else 2)
                pending = None
                continue
        if pending is not None:
            yield Line("text", pending)
            pending = None
        if fence is not None:
            if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
                fence = None
            yield Line("code", line)
            continue
        if opening:
            fence = opening.group(1)
            yield Line("code", line)
            continue
        atx = _ATX.match(line)
        if atx:
            yield Line("heading", atx.group(2), len(atx.group(1)))
            continue
        pending = line
    if pending is not None:
        yield Line("text", pending)


def read_markdown(text: str) -> Markdown:
    """Read a Markdown text (see the module docstring)."""
    matter_title, body = _front_matter(text.splitlines())
    return Markdown(matter_title=matter_title, lines=tuple(_lines(body)))
