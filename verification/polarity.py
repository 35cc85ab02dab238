"""Polarity: where a text denies something, and what it denies, read as a whole.

The claim checker compares a claim's polarity with its evidence's through these rules, in claims
and in evidence texts alike, so that a quoted log line that itself holds a negation states what
that line states.

- **Cues.** English: ``no longer``, ``no more``, ``never``, ``none``, ``nothing``, ``nobody``,
  ``neither``, ``nor``, ``without``, ``cannot``, ``no``, ``not``, ``zero``, any ``...n't``, a
  ``0`` before a word (``0 errors``), and the implicit ``failed to``, ``fails to``, ``unable
  to``, ``lack of``, ``absence of``. ``not only``, ``not just``, ``no more than``, ``no less
  than``, ``not more than``, ``not less than``, ``no fewer than``, ``nothing but`` and ``no.``
  (a number) deny nothing. Chinese: ``没有``, ``并非``, ``不再``, ``不是``, ``毫无``, ``无法``,
  ``没``, ``未``, ``无``, ``不``, ``非``, except inside words that deny nothing (``未来``,
  ``不同``, ``不断``, ``不少``, ``不过``, ``不仅``, ``不久``, ``不但``, ``不管``, ``不论``,
  ``无论``, ``非常``...).
- **Scope.** A cue denies what follows it up to the end of its clause: punctuation (ASCII,
  full-width and Chinese, quotes and brackets), a contrast or a new clause (``but``, ``however``,
  ``although``, ``though``, ``yet``, ``while``, ``whereas``, ``except``, ``and``, ``or``;
  ``但``, ``而``, ``却``, ``并且``), the next cue, or 48 characters, whichever comes first.
- **Key terms** of a scope: what it denies concretely. Before its first preposition (``to``,
  ``for``, ``from``, ``in``, ``on``...; not ``of``): its specifics (``verification.text``) and
  its words of at least three letters that are not function words, the cue's own tail (``any``,
  ``longer``) or words naming the form of the evidence (``log``, ``entries``, ``returned``,
  ``shows``); after it, only names (hyphenated, dotted, with digits) and specifics, and only when
  something came before it. A hyphenated or dotted name is one term. Words are compared by a
  light stem (``errors``, ``failures`` and ``failed`` are ``error``, ``fail``, ``fail``). A
  Chinese scope with no such term keys on its Chinese words (``错误`` also as ``error``, ``超时``
  as ``timeout``...).
- **Asserted text**: a text with every denied clause (cue and scope) blanked out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from verification.text import contains_whole, normalize, specifics

MAX_SCOPE_CHARS: Final = 48
"""A scope ends at most this many characters after its cue."""

_EN_CUES: Final = (
    r"no longer|no more|never|none|nothing|nobody|neither|nor|without|cannot|zero|no|not"
    r"|[a-z]+n't|failed to|fails to|failing to|unable to|lack of|absence of"
)
_EN_CUE = re.compile(rf"(?<![a-z0-9_'.-])(?:{_EN_CUES})(?![a-z0-9_-])|(?:(?<=\s)|^)0 (?=[a-z])")
_EN_NOT_A_DENIAL = re.compile(
    r"(?:no|not) (?:only|just|more than|less than|fewer than|later than|earlier than|"
    r"sooner than|doubt)\b|nothing but\b|no\.\s*\d"
)
_ZH_CUE = re.compile("没有|并非|不再|不是|毫无|无法|没|未|无|不|非")
_ZH_NOT_A_DENIAL: Final = (
    "未来",
    "未知",
    "不同",
    "不断",
    "不少",
    "不过",
    "不仅",
    "不久",
    "不但",
    "不管",
    "不论",
    "不得不",
    "不足",
    "无论",
    "无关",
    "非常",
    "并非常",
)
_BOUNDARY = re.compile(
    r"[;!?()\[\]{}<>|\"“”«»「」『』（）【】，。；：！？、\n]|\.(?=\s|$)|,(?!\d)|:(?!\d)"
    r"|\s(?:but|however|although|though|yet|while|whereas|except|and|or|so|then)\b"
    r"|但|而|却|并且|然后"
)
_TOKEN = re.compile(r"[a-z0-9]+(?:[-_.][a-z0-9]+)*|[\u4e00-\u9fff]+")
_CJK = re.compile(r"[\u4e00-\u9fff]")
_FUNCTION_WORDS: Final = frozenset(
    "the and for with from was were are has have had this that these those been being into its "
    "there their than then also which while when where who what all any per a an of to in on at "
    "by as or is be it did does do done ever yet far any single other such same more longer "
    "further again anymore else one ones some further".split()
)
_FORM_WORDS: Final = frozenset(
    "log logs logged logging entry entries line lines message messages record records recorded "
    "event events return returns returned returning show shows showed shown report reports "
    "reported see saw seen contain contains contained appear appears appeared occur occurs "
    "occurred happen happens happened emit emits emitted produce produces produced raise raises "
    "raised throw throws threw thrown get gets got receive receives received observe observes "
    "observed detect detects detected mention mentions mentioned indicate indicates indicated "
    "include includes included find finds found there hit hits".split()
)
_PREPOSITION = re.compile(
    r"(?<![a-z0-9_-])(?:to|for|from|in|on|at|by|with|after|before|since|during|within|over"
    r"|under|between|via|per|into|onto|across|through)(?![a-z0-9_-])"
)
_CJK_FORM = re.compile(r"^(?:任何|出现|发现|返回|记录|报|有|的|过)+|(?:日志|记录|的|条|次|个)+$")
_CJK_ENGLISH: Final = {
    "错误": "error",
    "报错": "error",
    "超时": "timeout",
    "告警": "alert",
    "重启": "restart",
    "失败": "fail",
    "异常": "exception",
}
_SUFFIXES: Final = ("ing", "ed", "es", "s", "ure", "ion")
_MIN_STEM = 4


@dataclass(frozen=True)
class Scope:
    """One denied clause of a normalised text: its cue and what the cue denies."""

    cue: str
    start: int
    """Offset of the cue in the normalised text."""
    body_start: int
    end: int
    """Offset just past the scope."""
    body: str
    """The denied words, after the cue."""


def stem(word: str) -> str:
    """A word's light stem: up to two endings removed while at least four letters remain."""
    for _ in range(2):
        for suffix in _SUFFIXES:
            if word.endswith(suffix) and len(word) - len(suffix) >= _MIN_STEM:
                word = word[: -len(suffix)]
                break
        else:
            break
    return word


def _denies(text: str, cue: re.Match[str]) -> bool:
    """Whether an English cue match denies something (``not only`` and the like do not)."""
    return _EN_NOT_A_DENIAL.match(text, cue.start()) is None


def _zh_denies(text: str, start: int) -> bool:
    return not any(
        text.startswith(word, start - offset)
        for word in _ZH_NOT_A_DENIAL
        for offset in range(len(word))
        if start - offset >= 0 and text[start] == word[offset]
    )


def _cues(text: str) -> list[tuple[int, int, str]]:
    found = [
        (m.start(), m.end(), m.group().strip()) for m in _EN_CUE.finditer(text) if _denies(text, m)
    ]
    for match in _ZH_CUE.finditer(text):
        if _zh_denies(text, match.start()):
            found.append((match.start(), match.end(), match.group()))
    found.sort()
    kept: list[tuple[int, int, str]] = []
    for cue in found:
        if not kept or cue[0] >= kept[-1][1]:
            kept.append(cue)
    return kept


@lru_cache(maxsize=4096)
def _scopes(text: str) -> tuple[Scope, ...]:
    cues = _cues(text)
    result: list[Scope] = []
    for index, (start, end, cue) in enumerate(cues):
        limit = min(len(text), end + MAX_SCOPE_CHARS)
        if index + 1 < len(cues):
            limit = min(limit, cues[index + 1][0])
        boundary = _BOUNDARY.search(text, end, limit)
        stop = boundary.start() if boundary else limit
        if boundary is None and stop < len(text) and stop == end + MAX_SCOPE_CHARS:
            space = text.rfind(" ", end, stop)
            stop = space if space > end else stop
        result.append(Scope(cue=cue, start=start, body_start=end, end=stop, body=text[end:stop]))
    return tuple(result)


def scopes(text: str) -> tuple[Scope, ...]:
    """The denied clauses of a text (normalised here), in order."""
    return _scopes(normalized(text))


def normalized(text: str) -> str:
    """A text as the polarity rules read it: ``verification.text.normalize``, one apostrophe."""
    return normalize(text).replace("\u2019", "'").replace("\u2018", "'")


def denies(text: str) -> bool:
    """Whether a text denies anything (holds a negation)."""
    return bool(scopes(text))


def asserted_text(text: str) -> str:
    """The normalised text with every denied clause (cue and scope) blanked out."""
    value = normalized(text)
    for scope in reversed(_scopes(value)):
        value = value[: scope.start] + " " * (scope.end - scope.start) + value[scope.end :]
    return value


def denied_at(text: str, position: int) -> bool:
    """Whether the character at ``position`` of a normalised text lies in a scope (not its cue)."""
    return any(s.body_start <= position < s.end for s in _scopes(text))


def _words(body: str) -> list[str]:
    return [
        token
        for token in _TOKEN.findall(body)
        if not _CJK.match(token)
        and len(token) >= 3
        and not token.isdigit()
        and token not in _FUNCTION_WORDS
        and token not in _FORM_WORDS
    ]


def key_terms(body: str) -> tuple[str, ...]:
    """What a scope denies concretely.

    Its specifics and stemmed content words before the first preposition, with the names and
    specifics after it (``returned http 500 to its callers``: ``500``, ``http``; ``errors from
    order-service``: ``error``, ``order-service``); nothing when no content word comes before
    the preposition (``not found for order 42`` denies ``found``, a form word). A scope without
    English terms keys on its Chinese words.
    """
    cut = _PREPOSITION.search(body)
    before, after = (body[: cut.start()], body[cut.start() :]) if cut else (body, "")
    found = [token.casefold() for token in specifics(before)]
    found += [stem(word) for word in _words(before) if not any(c.isdigit() for c in word)]
    if cut and not found:
        return ()
    if found:
        found += [token.casefold() for token in specifics(after)]
        found += [word for word in _words(after) if not word.isalpha()]
    if not found:
        for run in re.findall(r"[\u4e00-\u9fff]+", body):
            core = _CJK_FORM.sub("", run)
            if len(core) >= 2:
                found.append(core)
    return tuple(dict.fromkeys(found))


def _word_stems(text: str) -> frozenset[str]:
    """The stems of a text's words; a dotted name also gives its parts (``java.net.X``: ``x``)."""
    found: set[str] = set()
    for token in _TOKEN.findall(text):
        if not _CJK.match(token):
            found.add(stem(token))
            if "." in token:
                found.update(stem(part) for part in token.split(".") if part)
    return frozenset(found)


def states_term(term: str, text: str) -> bool:
    """Whether a normalised (asserted) text states a key term.

    A specific or a name as a whole token, a word by its stem, a Chinese word as a substring (or
    its English word).
    """
    if _CJK.match(term):
        english = next((e for zh, e in _CJK_ENGLISH.items() if zh in term), None)
        return term in text or (english is not None and english in _word_stems(text))
    if any(c.isdigit() for c in term) or not term.isalnum():
        return contains_whole(term, text)
    return term in _word_stems(text)


def same_denial(scope: Scope, text: str) -> bool:
    """Whether a text denies what ``scope`` denies.

    The same clause, a scope of its own whose key terms include all of ``scope``'s, or one
    denying the same first content word (a claim quoting or restating a log line that holds a
    negation: ``No contacts according to contactsId``).
    """
    value = normalized(text)
    clause = f"{scope.cue} {scope.body.strip()}".strip()
    if clause and clause in value:
        return True
    keys, head = set(key_terms(scope.body)), _head(scope.body)
    return any(
        (keys and keys <= set(key_terms(other.body))) or (head and head == _head(other.body))
        for other in _scopes(value)
    )


def _head(body: str) -> str:
    """The first content word a scope denies (``no ledger entries for x``: ``ledger``)."""
    words = _words(body)
    return stem(words[0]) if words else ""


def head_terms(text: str) -> set[str]:
    """The first key term of each denied clause of a text (``no timeout, ...`` -> ``timeout``)."""
    heads: set[str] = set()
    for scope in scopes(text):
        words = [stem(word) for word in _words(scope.body)]
        if words:
            heads.add(words[0])
    return heads


def asserted_words(text: str) -> frozenset[str]:
    """The stems of the words a text states outside every denied clause."""
    return _word_stems(asserted_text(text))
