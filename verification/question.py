"""What a question asks, read deterministically, in Chinese and English.

``analyze_question`` finds the services (known to the evidence backend, or names that look like
services it does not know), alert names and metrics a question names, its symptoms, and its kind:

- ``value``: "what is the CPU / p99 / error rate / pool usage of X", "X 的 p99 延迟是多少";
- ``confirm``: a yes/no question, "is alert A firing", "does X have errors", "X 有错误吗", and
  any question about a named alert ("A 告警现在是什么状态");
- ``why``: "why is X slow / failing / returning 5xx", "X 为什么报 500", and "what is wrong with X";
- ``overview``: "what is wrong?", "出了什么问题？" (no service named).

Metrics and symptoms are concept ids of ``knowledge.vocabulary`` (``latency`` stands for latency,
p99, 延迟 and the like). The same reading serves the deterministic floor of question coverage
(``verification.coverage``) and the offline planner, so both agree on what was asked.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Final

from knowledge.vocabulary import concepts_in
from state.records import Facet, QuestionFacets, QuestionKind

METRIC_CONCEPTS: Final[tuple[str, ...]] = (
    "cpu",
    "memory",
    "latency",
    "error_rate",
    "pool",
    "disk",
    "lag",
    "certificate",
    "throughput",
)
"""Concepts that are measured: a question naming one asks about that metric."""

METRIC_NAMES: Final[dict[str, dict[str, str]]] = {
    "en": {
        "cpu": "CPU usage",
        "memory": "memory usage",
        "latency": "latency",
        "error_rate": "error rate",
        "pool": "connection pool usage",
        "disk": "disk usage",
        "lag": "consumer lag",
        "certificate": "certificate expiry",
        "throughput": "throughput",
    },
    "zh": {
        "cpu": "CPU 使用率",
        "memory": "内存使用",
        "latency": "延迟",
        "error_rate": "错误率",
        "pool": "连接池使用",
        "disk": "磁盘使用",
        "lag": "消费积压",
        "certificate": "证书有效期",
        "throughput": "吞吐量",
    },
}
"""How a metric concept reads in an answer."""

ERROR_CONCEPTS: Final[frozenset[str]] = frozenset(
    {"error", "5xx", "timeout", "crash", "down", "exhaustion", "restart"}
)
"""Symptoms that make a yes/no question one about errors."""

SERVICE_SUFFIXES: Final[tuple[str, ...]] = (
    "service", "svc", "api", "app", "db", "database", "server", "worker", "gateway", "proxy",
    "consumer", "producer", "job", "cache", "queue", "web", "backend", "frontend", "ingress",
    "broker", "cluster",
)  # fmt: skip
"""Endings that make a hyphenated name (``billing-api``) read as a service name."""

_KEBAB = re.compile(r"(?<![a-z0-9_.-])[a-z][a-z0-9]*(?:[-_][a-z0-9]+)+(?![a-z0-9_-])")
_CAPITALISED = re.compile(r"(?<![A-Za-z0-9_])[A-Z][A-Za-z0-9]+(?![A-Za-z0-9_-])")
_PERCENTILE = re.compile(r"(?<![a-z0-9])p(?:50|75|90|95|99|999)(?![0-9])")
_STATUS_CODE = re.compile(r"(?<![A-Za-z0-9.])([1-5]\d\d)(?![0-9.]|ms|s\b|m\b)")
_ALERT_CONTEXT = re.compile(r"\b(?:alert\w*|alarm\w*|fir(?:e|es|ed|ing))\b|告警|报警|触发")
_WHY = re.compile(
    r"\bwhy\b|\bhow come\b|\broot cause\b|\bwhat (?:is |'s )?caus\w+|\bcause of\b|\breason\b|"
    r"为什么|为何|为啥|原因|根因|怎么回事|咋回事|什么导致"
)
_WRONG = re.compile(
    r"\bwhat(?: is|'s) (?:wrong|going on|happening)\b|\bwhat happened\b|"
    r"\bany (?:issues?|problems?)\b|"
    r"怎么了|出了什么问题|有什么问题|什么问题|出问题|什么情况|发生了什么"
)
_YES_NO = re.compile(
    r"^\s*(?:is|are|does|do|did|has|have|was|were|can|could|will|should|any)\b|"
    r"是否|有没有|是不是|有无|会不会|[吗么][？?]?\s*$"
)
_VALUE = re.compile(
    r"\bwhat(?: is|'s| are)\b|\bhow (?:much|high|many|long|big|fast)\b|\bcurrent\b|\bvalue\b|"
    r"\bshow\b|多少|多高|多大|多长|几|数值|当前值|现在的"
)
_IDENTIFIER_SUFFIXES = ("Exception", "Error")


def _fold(question: str) -> str:
    return unicodedata.normalize("NFKC", question)


def asks_why(question: str) -> bool:
    """Whether a question asks for a cause ("why", "what caused", "为什么", "根因")."""
    return _WHY.search(_fold(question).casefold()) is not None


_ALERT_CONTEXT_PARTS = re.compile(
    r"\((?:severity|级别)[^)]*\)|;\s*(?:summary|description|runbook|摘要|描述)\s*:[^;\n]*|"
    r"\bfiring since [^\s;,]+|\bseverity\s*[=:]?\s*\w+|\b(?:starts_?at|startsAt)\s*[=:]?\s*\S+",
    re.IGNORECASE,
)


def question_words(question: str) -> str:
    """The question without the context an alert carries (severity, annotations, start time).

    Its severity, its summary and description annotations, its runbook link and its start time
    are left out. An alert's labels and annotations are evidence context, never question words:
    "severity critical" is not a question about CRITICAL log lines, and a summary saying "timeout"
    does not make the question one about timeouts. Alert names and services stay.
    """
    return _ALERT_CONTEXT_PARTS.sub(" ", question)


def _whole(name: str, text: str) -> int:
    """Where ``name`` occurs in ``text`` as a whole name (case-insensitive), or -1."""
    found = re.search(
        r"(?<![a-z0-9_.-])" + re.escape(name.casefold()) + r"(?![a-z0-9_-])", text.casefold()
    )
    return found.start() if found else -1


def stem_of(service: str) -> str:
    """A service name without its generic ending: ``checkout-service`` -> ``checkout``."""
    parts = re.split(r"[-_]", service.casefold())
    while len(parts) > 1 and parts[-1] in SERVICE_SUFFIXES:
        parts.pop()
    return "-".join(parts)


def stem_services(question: str, known_services: Sequence[str]) -> list[str]:
    """Known services a question names by their stem only ("checkout" for checkout-service).

    A stem counts when it is at least four characters, a whole word of the question and the
    stem of exactly one known service.
    """
    text = _fold(question).casefold()
    by_stem: dict[str, list[str]] = {}
    for name in known_services:
        stem = stem_of(name)
        if stem != name.casefold() and len(stem) >= 4:
            by_stem.setdefault(stem, []).append(name)
    found = [
        (pos, names[0])
        for stem, names in by_stem.items()
        if len(names) == 1 and (pos := _whole(stem, text)) >= 0
    ]
    return [name for _, name in sorted(found)]


def named_services(question: str, known_services: Sequence[str]) -> tuple[list[str], list[str]]:
    """The services a question names: ``(known, unknown)``, each in order of appearance.

    A known service counts when its name occurs as a whole name. An unknown one is a hyphenated
    or underscored name ending like a service (``payment-service``, ``billing-api``,
    ``orders-db``) that no known service is a prefix of (``order-service-5f7b9`` is an instance
    of ``order-service``).
    """
    text = _fold(question)
    known = sorted(
        ((pos, name) for name in known_services if (pos := _whole(name, text)) >= 0),
        key=lambda item: item[0],
    )
    names = [name.casefold() for name in known_services]
    unknown: list[str] = []
    for match in _KEBAB.finditer(text.casefold()):
        token = match.group(0)
        if token in names or any(token.startswith(name + "-") for name in names):
            continue
        last = re.split(r"[-_]", token)[-1]
        if (last in SERVICE_SUFFIXES or "service" in token) and token not in unknown:
            unknown.append(token)
    return [name for _, name in known], unknown


def named_alerts(question: str) -> list[str]:
    """Alert names in a question about alerts: CamelCase names such as ``HighErrorRate``.

    ``TLSCertificateExpired`` counts too; exception and error class names never do.
    """
    text = _fold(question)
    if not _ALERT_CONTEXT.search(text.casefold()):
        return []
    return list(
        dict.fromkeys(
            name
            for match in _CAPITALISED.finditer(text)
            if _camel_case(name := match.group(0)) and not name.endswith(_IDENTIFIER_SUFFIXES)
        )
    )


def _camel_case(name: str) -> bool:
    """``HighErrorRate``, ``TLSCertificateExpired``: two or more capitals and a lower-case one."""
    return sum(c.isupper() for c in name) >= 2 and any(c.islower() for c in name)


def _kind(
    text: str, services: list[str], metrics: list[str], about: bool, alerts: list[str]
) -> QuestionKind:
    lowered = text.casefold()
    if _WHY.search(lowered):
        return "why"
    if alerts:
        return "confirm"
    if _WRONG.search(lowered):
        return "why" if services else "overview"
    yes_no = bool(_YES_NO.search(lowered))
    if yes_no and (about or not metrics):
        return "confirm"
    if metrics:
        return "value"
    if yes_no:
        return "confirm"
    if _VALUE.search(lowered) and services:
        return "why"
    return "why" if services else "overview"


def analyze_question(
    question: str, known_services: Sequence[str] = (), *, stems: bool = False
) -> QuestionFacets:
    """Read what a question asks (see the module docstring).

    Args:
        question: The user's question, in Chinese or English.
        known_services: Every service the evidence backend knows.
        stems: Whether a question that names no service by its full name may name one by its
            stem ("checkout" for checkout-service). The coverage floor does not; the offline
            planner does, to know whom to ask about.

    Returns:
        Its kind and facets: each service, alert and metric it names, in that order.
    """
    text = _fold(question)
    services, unknown = named_services(text, known_services)
    words = question_words(text)
    stemmed: list[str] = []
    if stems and not services and not unknown:
        services = stemmed = stem_services(text, known_services)
    alerts = named_alerts(text)
    rest = words
    for name in [*services, *unknown, *alerts, *(stem_of(name) for name in stemmed)]:
        rest = re.sub(re.escape(name), " ", rest, flags=re.IGNORECASE)
    concepts = concepts_in(rest)
    metrics = [concept for concept in concepts if concept in METRIC_CONCEPTS]
    symptoms = [concept for concept in concepts if concept not in METRIC_CONCEPTS]
    codes = list(dict.fromkeys(_STATUS_CODE.findall(rest)))
    about_alerts = bool(alerts) or "alert" in symptoms or bool(_ALERT_CONTEXT.search(rest))
    about_errors = bool(codes) or any(concept in ERROR_CONCEPTS for concept in symptoms)
    kind = _kind(words, services + unknown, metrics, about_alerts or about_errors, alerts)
    facets = [Facet(kind="service", name=name, known=True) for name in services]
    facets += [Facet(kind="service", name=name, known=False) for name in unknown]
    facets += [Facet(kind="alert", name=name, known=True) for name in alerts]
    facets += [Facet(kind="metric", name=name, known=True) for name in metrics]
    # A percentile the question names ("p99") must be the one answered, not another.
    percentiles = dict.fromkeys(_PERCENTILE.findall(rest.casefold()))
    facets += [Facet(kind="metric", name=name, known=True) for name in percentiles]
    return QuestionFacets(
        kind=kind,
        facets=facets,
        services=services,
        unknown_services=unknown,
        alerts=alerts,
        metrics=metrics,
        symptoms=symptoms,
        status_codes=codes,
        about_alerts=about_alerts,
        about_errors=about_errors,
        error_level=error_level(words),
    )


_SEVERE_LEVELS = (("fatal", "FATAL"), ("panic", "PANIC"), ("critical", "CRITICAL"))


def error_level(question: str) -> str:
    """The log level a question asks about as its errors: one it names as a word, else ERROR.

    "postgres 最近有什么 FATAL 错误？" asks for ``FATAL`` entries (PostgreSQL logs a failed
    connection as ``FATAL``, not ``ERROR``).
    """
    lowered = question.casefold()
    for word, level in _SEVERE_LEVELS:
        if re.search(rf"(?<![a-z]){word}(?![a-z])", lowered):
            return level
    return "ERROR"


def is_percentile(name: str) -> bool:
    """Whether a metric facet is a percentile (``p99``), matched as a whole token."""
    return _PERCENTILE.fullmatch(name) is not None


def facet_label(name: str, language: str) -> str:
    """How a facet reads in an answer: a metric by its name in that language, else as it is."""
    return METRIC_NAMES.get(language, METRIC_NAMES["en"]).get(name, name)
