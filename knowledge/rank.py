"""Runbook ranking: BM25 over each document's title and headings, the same in both languages.

A runbook is found by what it is about, which its title and headings say ("Runbook: database
connection pool exhaustion", "## Mitigation"), not by every word of its body (a CPU question must
not find the pool runbook because its text mentions "CPU-bound"). Text is tokenised by
``knowledge.vocabulary.concept_tokens``: English and Chinese surface forms become one concept id
(磁盘 and disk, 连接池 and connection pool), identifiers are split
(``NodeFilesystemSpaceFillingUp``), other CJK text becomes bigrams. So a Chinese question and
its English twin rank the same documents the same way.

Storage-independent: ``rank`` takes ``(title, headings)`` pairs, from whatever holds them (the
sample backend's environment, an index of Markdown files). ``markdown_fields`` reads the title
and headings of a Markdown runbook; ``procedure_sentence`` picks the action sentence of its
procedure (never its impact or timeline).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Final, NamedTuple

from knowledge.markdown import read_markdown
from knowledge.vocabulary import concept_tokens, fold
from state.display import clip

K1: Final = 1.2
"""BM25 term-frequency saturation."""
B: Final = 0.75
"""BM25 length normalisation."""
TITLE_WEIGHT: Final = 2
"""A title token counts this many times (the title says more than a heading)."""


class Ranked(NamedTuple):
    """One ranked document: its position in the input, its BM25 score, the query terms it has."""

    position: int
    score: float
    matched: int


def document_terms(title: str, headings: Sequence[str] = ()) -> list[str]:
    """The terms a document is ranked on: its title's (weighted) and each heading's.

    A term counts once per title or heading: "502/504" names 5xx once, not twice.
    """
    terms = list(dict.fromkeys(concept_tokens(title))) * TITLE_WEIGHT
    for heading in headings:
        terms += list(dict.fromkeys(concept_tokens(heading)))
    return terms


def query_terms(query: str) -> list[str]:
    """The distinct terms of a query, in order."""
    return list(dict.fromkeys(concept_tokens(query)))


def rank(
    query: str, documents: Sequence[tuple[str, Sequence[str]]], *, top_k: int | None = None
) -> list[Ranked]:
    """Rank documents for a query by BM25 over their titles and headings.

    Args:
        query: What is looked for, in English, Chinese or both.
        documents: ``(title, headings)`` per document.
        top_k: At most this many results (all when None).

    Returns:
        The documents matching at least one query term, best first; ties keep input order.
    """
    terms = query_terms(query)
    if not terms or not documents:
        return []
    bags = [Counter(document_terms(title, headings)) for title, headings in documents]
    lengths = [sum(bag.values()) for bag in bags]
    average = (sum(lengths) / len(lengths)) or 1.0
    count = len(bags)
    idf = {
        term: math.log(1.0 + (count - df + 0.5) / (df + 0.5))
        for term in terms
        if (df := sum(1 for bag in bags if term in bag))
    }
    ranked: list[Ranked] = []
    for index, (bag, length) in enumerate(zip(bags, lengths, strict=True)):
        score = 0.0
        matched = 0
        for term, weight in idf.items():
            tf = bag.get(term, 0)
            if not tf:
                continue
            matched += 1
            score += weight * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / average))
        if matched:
            ranked.append(Ranked(position=index, score=round(score, 6), matched=matched))
    ranked.sort(key=lambda item: (-item.score, item.position))
    return ranked if top_k is None else ranked[:top_k]


# --------------------------------------------------------------------------- Markdown


def markdown_headings(text: str) -> list[str]:
    """The headings of a Markdown text, in order, outside code fences (``knowledge.markdown``)."""
    return [line.text for line in read_markdown(text).headings if line.text]


def markdown_fields(text: str, name: str = "") -> tuple[str, list[str]]:
    """The title and the other headings of a Markdown runbook file.

    The title is the one rule of ``knowledge.markdown`` (first level-1 heading, else the front
    matter's ``title:``, else ``name``); the headings are the others, in order.
    """
    document = read_markdown(text)
    title = document.title(name)
    first = next((line for line in document.headings if line.level == 1), None)
    return title, [
        line.text
        for line in document.headings
        if line.text and not (line is first and line.text == title)
    ]


# --------------------------------------------------------------------------- procedure

_PROCEDURE_SECTIONS: Final[tuple[str, ...]] = (
    "mitigation", "mitigations", "mitigate", "remediation", "procedure", "steps", "fix",
    "follow-ups", "follow ups", "followups", "follow-up", "action items", "actions", "recovery",
    "resolution steps", "处理", "处理步骤", "步骤", "缓解", "解决", "修复", "后续", "改进",
)  # fmt: skip
_DIAGNOSIS_SECTIONS: Final[tuple[str, ...]] = (
    "diagnosis", "diagnose", "triage", "investigation", "investigate", "troubleshooting",
    "checks", "排查", "诊断", "定位",
)  # fmt: skip
_OTHER_SECTIONS: Final[tuple[str, ...]] = (
    "impact", "timeline", "symptoms", "symptom", "meaning", "cause", "causes", "root cause",
    "background", "summary", "overview", "context", "resolution", "detection", "lessons learned",
    "full context", "影响", "时间线", "现象", "症状", "原因", "根因", "背景", "概述", "总结",
)  # fmt: skip
_SECTION_ORDER: Final[dict[str, int]] = {
    **dict.fromkeys(_PROCEDURE_SECTIONS, 0),
    **dict.fromkeys(_DIAGNOSIS_SECTIONS, 1),
    **dict.fromkeys(_OTHER_SECTIONS, 9),
}
_UNLABELLED: Final = 2
_ACTION_VERBS: Final[frozenset[str]] = frozenset(
    "add adjust alert apply call capture check clean clear compare confirm consider debug "
    "decrease delete disable drain enable ensure expand extend find fix follow free identify "
    "increase inspect investigate kill limit look lower make mitigate move open page pause "
    "raise read reduce reissue remove renew replace rerun reset resize restart restore revert "
    "review roll rollback rotate run scale set shed stop study switch throttle tune update "
    "upgrade use verify wait watch".split()
)
_LEADING: Final[frozenset[str]] = frozenset("first then next also always finally".split())
_NEGATIVE_INSTRUCTIONS: Final[tuple[str, ...]] = ("do not ", "don't ", "never ", "avoid ")
_ZH_ACTIONS: Final[tuple[str, ...]] = (
    "检查", "确认", "查看", "重启", "扩容", "回滚", "停止", "暂停", "清理", "删除", "执行",
    "增加", "降低", "限制", "续期", "更新", "替换", "先", "然后",
)  # fmt: skip
_INLINE_LABEL = re.compile(r"^(?P<label>[A-Za-z][A-Za-z -]{1,24}|[\u4e00-\u9fff]{2,6})[:：]\s*")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|(?<=[。！？])")
_CAUSE = re.compile(
    r"\b(?:root causes?|caused by|because|due to|owing to|led to|leads? to)\b|导致|由于|因为|造成",
    re.IGNORECASE,
)
ACTION_CHARS: Final = 240
"""Longest action sentence kept (longer ones are cut at a word boundary and marked)."""


def _section_rank(label: str) -> int | None:
    key = fold(label).strip().rstrip(":：").strip()
    return _SECTION_ORDER.get(key)


def title_section_rank(title: str) -> int:
    """How a chunk's title path ranks as a procedure (``A > Mitigation > B``: 0).

    The innermost section the path names that is known decides: procedure 0, diagnosis 1,
    impact, meaning and the like 9; a path naming none is unlabelled (2).
    """
    for part in reversed(title.split(" > ")[1:]):
        found = _section_rank(part)
        if found is not None:
            return found
    return _UNLABELLED


def _sections(text: str) -> list[tuple[int, str]]:
    """(section rank, paragraph text) in order; Markdown headings open sections."""
    rank_now = _UNLABELLED
    parts: list[tuple[int, str]] = []
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            parts.append((rank_now, " ".join(paragraph)))
            paragraph.clear()

    for line in read_markdown(text).lines:
        if line.kind == "code":
            flush()
            continue
        if line.kind == "heading":
            flush()
            found = _section_rank(line.text)
            rank_now = _UNLABELLED if found is None else found
            continue
        stripped = line.text.strip()
        if not stripped or stripped.startswith(("<", "|", "- [", "[")):
            flush()
            continue
        paragraph.append(stripped.lstrip("-*0123456789. ").strip())
    flush()
    return parts


def _imperative(sentence: str) -> bool:
    words = re.findall(r"[A-Za-z]+", sentence)
    while words and words[0].lower() in _LEADING:
        words = words[1:]
    if words and words[0].lower() in _ACTION_VERBS:
        return True
    if sentence.lower().startswith(_NEGATIVE_INSTRUCTIONS):
        return True
    return sentence.startswith(_ZH_ACTIONS)


def procedure_sentence(text: str) -> str | None:
    """The action sentence of a runbook: the first instruction of its procedure.

    Sections are Markdown headings or inline labels (``Impact: ...``, ``Follow-ups: ...``). A
    sentence in a mitigation or procedure section comes first, then one in a diagnosis section,
    then one in unlabelled text; sentences under impact, timeline, symptoms, cause and the like
    are never chosen. A chosen sentence tells what to do (it starts with an action verb) and
    states no cause as established. None when the text has no such sentence.
    """
    candidates: list[tuple[int, int, str]] = []
    for rank_here, paragraph in _sections(text):
        for sentence in (s.strip() for s in _SENTENCE_END.split(paragraph)):
            if not sentence:
                continue
            section = rank_here
            label = _INLINE_LABEL.match(sentence)
            if label:
                found = _section_rank(label.group("label"))
                if found is not None:
                    section = found
                    sentence = sentence[label.end() :].strip()
                    sentence = sentence[:1].upper() + sentence[1:]
            if section >= 9 or not _imperative(sentence) or _CAUSE.search(sentence):
                continue
            candidates.append((section, len(candidates), clip(sentence, ACTION_CHARS, at=(" ",))))
    return min(candidates)[2] if candidates else None
