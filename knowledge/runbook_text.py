"""Markdown runbooks read into chunks, and text into the tokens the runbook index stores.

**Chunks.** A runbook is cut at its headings (ATX ``#`` and setext underlines; not inside code
fences). Its title is its first level-1 heading, else the ``title:`` of its YAML front matter,
else the file name (``knowledge.markdown`` reads all three). Each section below a heading is one
chunk (several when longer than ``CHUNK_CHARS``, cut at paragraph, then sentence, then word
boundaries), titled with the runbook's title and the heading path (``KubePodCrashLooping >
Diagnosis``). The chunk text is one line: HTML tags dropped, whitespace collapsed, code kept.

**Tokens.** Lower-case words of letters and digits; an identifier written in camel case is kept
whole and also split into its words (``KubePodCrashLooping`` gives ``kubepodcrashlooping kube pod
crash looping``), so an alert name and a plain-words query both find it; CJK text becomes
overlapping character bigrams (``数据库连接`` gives ``数据 据库 库连 连接``), a lone character
itself. The same function tokenises what is stored and what is asked, so both databases see the
same words (they stem them: ``looping`` finds ``loop``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from knowledge.markdown import read_markdown
from state.display import one_line

CHUNK_CHARS = 900
"""A chunk is at most this long (under the tool runner's 1,000-character field cap)."""
TITLE_SEPARATOR = " > "

_INLINE_MARKUP = (
    (re.compile(r"\[([^\]\n]*)\]\([^)\n]*\)"), r"\1"),
    (re.compile(r"<[^>\n]{1,200}>"), " "),
)
"""Inline markup made plain, in this order: a link keeps its text, an HTML tag is a space."""
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"[A-Za-z0-9\u00c0-\u024f]+|[{_CJK}]+")
CJK_RUN = re.compile(rf"[{_CJK}]+")
"""A run of CJK characters (Chinese, Japanese kana, Korean)."""
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+")
URL = re.compile(r"https?://[^\s<>\"';,)]+")
"""A URL in a text (a runbook a query or a question names); trailing punctuation left out."""

QUERY_STOPWORDS = frozenset(
    "a an and are as at be by can do does for from has have how i in is it its of on or our "
    "should the there this to was we were what when where which who why with".split()
)
"""Dropped from queries only (the stored text keeps every word)."""


@dataclass(frozen=True)
class Section:
    """One section of a runbook: its heading path below the title and its text (one line)."""

    path: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class Runbook:
    """A runbook read from Markdown: its title and its sections in document order."""

    title: str
    sections: tuple[Section, ...]


def tokens(text: str) -> list[str]:
    """The index tokens of a text, in order (see the module docstring)."""
    found: list[str] = []
    for match in _TOKEN.finditer(text):
        word = match.group(0)
        if CJK_RUN.fullmatch(word):
            found += [word] if len(word) == 1 else [word[i : i + 2] for i in range(len(word) - 1)]
            continue
        parts = _CAMEL.findall(word)
        found.append(word.casefold())
        if len(parts) > 1:
            found += [part.casefold() for part in parts]
    return found


def query_tokens(text: str) -> list[str]:
    """The distinct tokens of a query, stopwords left out (all of them if nothing else is left)."""
    every = list(dict.fromkeys(tokens(text)))
    kept = [t for t in every if t not in QUERY_STOPWORDS]
    return kept or every


def terms(text: str) -> str:
    """``tokens`` joined by spaces: what the ``*_terms`` columns hold."""
    return " ".join(tokens(text))


def _plain(text: str) -> str:
    for pattern, replacement in _INLINE_MARKUP:
        text = pattern.sub(replacement, text)
    return one_line(text.replace("**", ""))


def read_runbook(text: str, *, name: str) -> Runbook:
    """Read one Markdown runbook into its title and sections (``knowledge.markdown``).

    Args:
        text: The Markdown.
        name: The file name without its extension (the title when nothing else gives one).
    """
    document = read_markdown(text)
    headings: list[tuple[int, str]] = []
    bodies: list[list[str]] = [[]]
    for line in document.lines:
        if line.kind == "heading":
            headings.append((line.level, _plain(line.text)))
            bodies.append([])
        else:
            bodies[-1].append(line.text)
    title = document.title(name, plain=_plain)
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    intro = _plain("\n".join(bodies[0]))
    if intro:
        sections.append(Section((), intro))
    seen_title = False
    for (level, heading), body in zip(headings, bodies[1:], strict=True):
        if level == 1 and heading == title and not seen_title:
            seen_title = True
            stack = []
        else:
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, heading))
        content = _plain("\n".join(body))
        if content:
            sections.append(Section(tuple(h for _, h in stack), content))
    return Runbook(title=title, sections=tuple(sections))


def pieces(text: str, limit: int = CHUNK_CHARS) -> list[str]:
    """A section's text cut into pieces of at most ``limit`` characters at natural boundaries."""
    if len(text) <= limit:
        return [text]
    found: list[str] = []
    current = ""
    for sentence in _SENTENCE.split(text):
        words = [sentence] if len(sentence) <= limit else sentence.split(" ")
        for part in words:
            part = part[:limit]
            if current and len(current) + 1 + len(part) > limit:
                found.append(current)
                current = part
            else:
                current = f"{current} {part}" if current else part
    if current:
        found.append(current)
    return found


def slug(path: tuple[str, ...]) -> str:
    """A heading path as an anchor, ``("Mitigation", "Short term")``: ``mitigation/short-term``."""
    parts = [re.sub(r"[^\w]+", "-", p.casefold()).strip("-") or "section" for p in path]
    return "/".join(parts) or "intro"
