"""Fabrication: what a claim names that nothing gathered in the diagnosis names.

``evidence.fabricated`` (a Gatekeeper rule, severity reject) fails a claim naming a key entity,
an error code or a cause that appears in none of the evidence gathered in the diagnosis (every
invocation's evidence refs, arguments, output and error, knowledge included). What is present
somewhere in that evidence but not in the claim's own bindings, and every number, stays with
``evidence.unbound_specifics`` (capped, never rejected): a value may be computed, a name may be
bound to the wrong line, but a name or code nothing gathered ever showed was made up.

What a claim **names** (``named``), as written after NFKC and invisible characters removed:

- **entities**: a name joined by ``-``, ``_`` or ``.`` that starts with a letter and holds a
  digit (``order-1``, ``HikariPool-1``, ``ORA-00060``, ``db-7f9c.prod``), ends with a kind
  (``-service``, ``-svc``, ``-api``, ``-db``, ``-database``, ``-server``, ``-gateway``,
  ``-worker``, ``-app``, ``-cache``, ``-queue``, ``-broker``, ``-proxy``, ``-backend``,
  ``-frontend``, ``-cluster``, ``-exporter``, ``-operator``, ``-controller``, ``-daemon``,
  ``-renderer``, ``-processor``, ``-consumer``, ``-producer``, ``-scheduler``, ``-topic``,
  ``-bucket``) or begins with a store (``db-``, ``pg-``, ``redis-``, ``kafka-``, ``mysql-``,
  ``mongo-``, ``postgres-``, ``rabbitmq-``, ``zk-``, ``etcd-``, ``es-``, ``svc-``), holds an
  underscore
  (``orders_by_customer``, ``DEADLINE_EXCEEDED``), or is dotted with parts of two letters or more
  (``db1.prod.internal``); a CamelCase name of two capitalised parts or more (``HighErrorRate``,
  ``CrashLoopBackOff``). Versions (``v2.3.1``), plain hyphenated words (``full-table``,
  ``out-of-memory``) and encodings (``utf-8``) are no entity.
- **error codes**: an exception class (an identifier ending in ``Exception`` or ``Error``; a
  dotted one is present when its last part is), an HTTP status in context (``HTTP 503``,
  ``status=503``, ``returned 503``, ``503 errors``, ``503s``, ``返回 503``, ``状态码 503``), an
  errno name (``ECONNREFUSED``), a vendor code after ``errno``, ``error code``, ``exit code``,
  ``SQLSTATE`` (``SQLSTATE 40001``, ``exit code 137``).
- **causes**: the words of a clause a claim gives as a cause (after ``because``, ``due to``,
  ``caused by``, ``root cause is``, ``由于``, ``因为``, ``原因是``, ``根因是``; before ``led to``,
  ``caused``, ``导致``, ``造成``): its English words of three letters or more that are neither
  function words nor vague (``issue``, ``problem``, ``likely``, ``inferred``...). The cause is
  fabricated when it has such words, none of them (by stem or five-letter prefix) appears in the
  evidence, and it names nothing the evidence holds.

A name is **present** when the evidence holds it as a whole token, case-insensitively
(``verification.text.contains_whole``: ``order-service`` is in ``order-service-7d9c-x1``).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Final

from state.display import strip_invisible
from verification.polarity import stem
from verification.text import contains_whole, normalize

_KINDS: Final = (
    "service svc api db database server gateway worker app cache queue broker proxy backend "
    "frontend cluster exporter operator controller daemon renderer processor consumer producer "
    "scheduler topic bucket"
).split()
_PREFIX_KINDS: Final = frozenset(
    "db pg redis kafka mysql mongo postgres rabbitmq zk etcd es svc".split()
)
_NOT_NAMES: Final = frozenset(
    "utf-8 utf-16 utf-32 sha-1 sha-256 sha-512 iso-8859-1 md5 base-64 x-1 covid-19".split()
)
_JOINED = re.compile(r"(?<![\w.$-])[A-Za-z][A-Za-z0-9]*(?:[-_.][A-Za-z0-9]+)+(?![\w$-])")
_CAMEL = re.compile(r"(?<![\w.$-])[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+(?![\w$-])")
_VERSION = re.compile(r"^v?\d+(?:\.\d+)+[a-z0-9.-]*$", re.IGNORECASE)
_EXCEPTION = re.compile(r"(?<![\w$.])[A-Za-z_$][\w$.]*(?:Exception|Error)(?![\w$])")
_HTTP_STATUS = re.compile(
    r"(?:\bhttp(?:/\d(?:\.\d)?)?\s*|\bstatus(?:[ _]?code)?\s*[=:]?\s*|"
    r"\b(?:returned|returns|returning|answered|answers|responded|responds|response|responses)"
    r"\s+(?:with\s+)?(?:an?\s+|http\s+)?|返回\s*|状态码\s*[=:：]?\s*|响应\s*)([1-5]\d\d)(?!\d)"
    # "500s" are status codes; "in 590s", "after 300s", "took 120s" are durations.
    r"|(?<![\d.])(?<!\bin )(?<!after )(?<!took )(?<!over )(?<!every )(?<!within )"
    r"([1-5]\d\d)(?:s\b|\s+(?:errors?|responses?|status|codes?)\b|\s*(?:错误|响应))",
    re.IGNORECASE,
)
_ERRNO = re.compile(
    r"\bE(?:CONN[A-Z]+|TIMEDOUT|NOSPC|PIPE|ACCES|NOENT|HOSTUNREACH|NETUNREACH|ADDRINUSE|MFILE"
    r"|NOMEM|AGAIN|PERM|EXIST|INVAL|IO|DQUOT|ROFS)\b"
)
_VENDOR_CODE = re.compile(
    r"\b(?:errno|(?:error|err|exit|return)\s*code|sqlstate)\s*[=:#]?\s*([0-9A-Z]{2,6})\b",
    re.IGNORECASE,
)
_CAUSE_AFTER = re.compile(
    r"\b(?:root causes?(?:\s+(?:is|was|are|were|appears to be|seems to be))?\s*:?|caused by"
    r"|because(?: of)?|due to|owing to|(?:as )?(?:a |the )?result of|the cause (?:is|was))\b"
    r"|原因是|根因是|根因为|根因[:：]|由于|因为",
    re.IGNORECASE,
)
_CAUSE_BEFORE = re.compile(
    r"\b(?:led to|leads to|leading to|resulted in|results in|causing|caused(?!\s+by)|causes)\b"
    r"|导致|造成|引起|引发"
)
_CAUSE_HINTS: Final = (
    "cause",
    "because",
    "due to",
    "owing",
    "result",
    "led to",
    "leads to",
    "leading to",
    "原因",
    "根因",
    "由于",
    "因为",
    "导致",
    "造成",
    "引起",
    "引发",
)
_DIGIT = re.compile(r"\d")
_CLAUSE_END = re.compile(r"[.;!?。；！？\n]|,\s|，")
_CLAUSE_START = re.compile(r".*(?:[.;!?。；！？\n]|,\s|，)", re.DOTALL)
_CAUSE_WORD = re.compile(r"(?<![\w-])[a-z][a-z0-9]{2,}(?![\w-])")
_VAGUE: Final = frozenset(
    "the and for with from was were are has have had this that these those been being into its "
    "there their than then also which while when where who what all any per a an of to in on at "
    "by as or is be it did does do done not no its was likely probably possibly maybe might "
    "could would should may can seems seem appears appear issue issues problem problems "
    "something reason reasons unknown underlying some other such more less very high low "
    "same one two three many few cause causes caused root result results due because led lead "
    "leads which it they them most inferred inference suspected suspect probable candidate "
    "mechanism".split()
)
_PREFIX = 5


def _text(claim_text: str) -> str:
    return unicodedata.normalize("NFKC", strip_invisible(claim_text))


def _is_entity(token: str) -> bool:
    lowered = token.casefold()
    if lowered in _NOT_NAMES or _VERSION.match(token):
        return False
    parts = re.split(r"[-_.]", lowered)
    if "_" in token or any(c.isdigit() for c in token):
        return True
    if "." in token and "-" not in token:
        return all(len(part) >= 2 for part in parts) and any(len(part) >= 3 for part in parts)
    return parts[-1] in _KINDS or parts[0] in _PREFIX_KINDS


def named(claim_text: str) -> list[str]:
    """The entities and error codes a claim names, distinct, in order of appearance."""
    return list(_named(claim_text))


@lru_cache(maxsize=8192)
def _named(claim_text: str) -> tuple[str, ...]:
    text = _text(claim_text)
    found: list[tuple[int, str]] = []
    if "-" in text or "_" in text or "." in text:
        for match in _JOINED.finditer(text):
            token = match.group().strip(".-_")
            if _is_entity(token):
                found.append((match.start(), token))
    has_upper = not text.islower()
    if has_upper:
        found += [(m.start(), m.group()) for m in _CAMEL.finditer(text)]
    if "Exception" in text or "Error" in text:
        for match in _EXCEPTION.finditer(text):
            token = match.group().strip(".")
            if token not in ("Exception", "Error"):
                found.append((match.start(), token))
    if _DIGIT.search(text):
        for match in _HTTP_STATUS.finditer(text):
            found.append((match.start(), match.group(1) or match.group(2)))
        found += [(m.start(1), m.group(1)) for m in _VENDOR_CODE.finditer(text)]
    if has_upper:
        found += [(m.start(), m.group()) for m in _ERRNO.finditer(text)]
    found.sort(key=lambda item: item[0])
    return tuple(dict.fromkeys(token for _, token in found))


def cause_clauses(claim_text: str) -> list[str]:
    """The clauses a claim gives as a cause (normalised)."""
    text = normalize(claim_text)
    if not any(cue in text for cue in _CAUSE_HINTS):
        return []
    clauses: list[str] = []
    for match in _CAUSE_AFTER.finditer(text):
        end = _CLAUSE_END.search(text, match.end())
        clauses.append(text[match.end() : end.start() if end else len(text)])
    for match in _CAUSE_BEFORE.finditer(text):
        start = _CLAUSE_START.match(text[: match.start()])
        clauses.append(text[start.end() if start else 0 : match.start()])
    return [clause.strip() for clause in clauses if clause.strip()]


def cause_words(clause: str) -> list[str]:
    """The checkable English words of a cause clause (not function or vague words, not names)."""
    return [word for word in _CAUSE_WORD.findall(clause) if word not in _VAGUE]


@dataclass
class Evidence:
    """Everything gathered in a diagnosis, searched for names (built lazily, searched cached)."""

    texts: Iterable[str]
    _found: dict[str, bool] = field(default_factory=dict)

    @cached_property
    def corpus(self) -> str:
        """The gathered texts, normalised, one per line."""
        return "\n".join(normalize(text, collapse_whitespace=False) for text in self.texts)

    @cached_property
    def stems(self) -> tuple[frozenset[str], frozenset[str]]:
        """The stems of the corpus's words, and their five-letter prefixes."""
        stems = frozenset(stem(word) for word in re.findall(r"[a-z][a-z0-9]{2,}", self.corpus))
        return stems, frozenset(s[:_PREFIX] for s in stems if len(s) >= _PREFIX)

    def has(self, name: str) -> bool:
        """Whether a name or code appears in the evidence (an exception also by its last part)."""
        key = normalize(name)
        if key not in self._found:
            last = key.rsplit(".", 1)[-1]
            self._found[key] = contains_whole(key, self.corpus) or (
                last != key and contains_whole(last, self.corpus)
            )
        return self._found[key]

    def has_word(self, word: str) -> bool:
        """Whether a word appears in the evidence by its stem or its five-letter prefix."""
        stems, prefixes = self.stems
        root = stem(word)
        return root in stems or (len(root) >= _PREFIX and root[:_PREFIX] in prefixes)


def fabricated(claim_text: str, evidence: Evidence, own: Iterable[str] = ()) -> list[str]:
    """What the claim names or gives as a cause that none of the evidence holds.

    Args:
        claim_text: The claim's text.
        evidence: Everything gathered in the diagnosis.
        own: The claim's verified texts, searched first (a name found there needs no corpus).

    Returns:
        The names and codes (as written), and each fabricated cause as ``cause: <clause>``.
    """
    own_texts = [normalize(text, collapse_whitespace=False) for text in own]
    missing = [
        name
        for name in named(claim_text)
        if not any(contains_whole(normalize(name), text) for text in own_texts)
        and not evidence.has(name)
    ]
    for clause in cause_clauses(claim_text):
        words = cause_words(clause)
        if (
            words
            and not any(evidence.has_word(word) for word in words)
            and not any(evidence.has(name) for name in named(clause))
        ):
            missing.append(f"cause: {clause}")
    return missing
