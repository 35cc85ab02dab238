"""The answer's conclusion, checked by code against the confirmed claims it rests on.

A yes/no question (``verification.intent``: health, a metric check, errors, an alert's state) and
a comparison are answered by a conclusion. It is stated either as the executor output's
``conclusion`` object (``{"text", "answer": "yes"|"no"|"value"|"unknown", "rests_on": [claim
ids]}``) or as a claim whose text opens with the answer (``Yes: ...``, ``否：...``; it then rests
on itself). Code reads what the claims it rests on show, from the Gatekeeper-verified text of the
refs they cite, never from their wording:

- a **problem**: a log line at ERROR, FATAL, PANIC, CRITICAL (or an alias) level, a log query at
  such a level that matched lines, a firing alert, a series whose last value is at or above its
  threshold;
- a **clean** result: a negative observation, a log query at such a level that matched nothing,
  an alert in any other state, an alert query that found none, a series below its threshold.

A series' threshold is the one of an alert of the same service measuring the same concept (the
alert ref's ``threshold=``), else ``DEFAULT_THRESHOLDS``. A metric check reads series only, an
alert question alerts only (and negative observations), errors logs only.

The expected answer: a question asking whether something is wrong (``problem`` polarity) is
``yes`` with a problem shown, ``no`` with only clean results; a health question (``ok``) is ``no``
with a problem, ``yes`` with only clean results. A comparison's conclusion must name first the
service whose series' last value is highest (lowest when the question asks which is lower).

An alert question whose alert no confirmed claim's evidence names (an alert that does not exist in
the data) has no conclusion that follows: a nonexistent alert is said so, never a PASS.

Status: ``follows`` (what is stated is what is expected); ``does_not_follow`` (it differs, the
claims show neither, or a claim it rests on is not confirmed): the verdict cannot be PASS;
``derived`` (none is stated, and the confirmed claims support one yes or no: that is the
conclusion, derived by code); ``missing`` (the question wants a conclusion, none is stated and
none can be derived): no facet counts as answered; ``not_required``.

Why a conclusion does not follow is kept as a reason code and its arguments (``REASONS``) beside
the English ``reason``, so the answer states it in its own language (``reason_text``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from knowledge.vocabulary import concepts_in
from state.records import (
    CONFIRMED_LABELS,
    Claim,
    ClaimCheck,
    ConclusionCheck,
    ConclusionStatus,
    ExecutorAnswer,
    GatekeeperResult,
    VerifiedExcerpt,
)
from verification.intent import Intent, read_intent

Signal = Literal["problem", "clean"]

DEFAULT_THRESHOLDS: Final[dict[str, tuple[float, float, str]]] = {
    "cpu": (80.0, 0.8, "%"),
    "memory": (90.0, 0.9, "%"),
    "pool": (90.0, 0.9, "%"),
    "disk": (90.0, 0.9, "%"),
    "error_rate": (5.0, 0.05, "%"),
    "latency": (1000.0, 1.0, "ms"),
}
"""Documented defaults when no alert rule gives a threshold: concept -> (value in percent or
milliseconds, value as a ratio or in seconds, unit of the first). A default applies only where
the series' scale is known (``_threshold``)."""

PROBLEM_LEVELS: Final[frozenset[str]] = frozenset(
    {"ERROR", "ERR", "FATAL", "PANIC", "CRITICAL", "CRIT", "EMERG", "EMERGENCY", "ALERT", "SEVERE"}
)
"""Log levels that show a problem."""

_ANSWER_PREFIX = re.compile(r"^\s*(?P<word>yes|no|是|否|不是|不)\s*[:：,，]", re.IGNORECASE)
_LEVEL = re.compile(r"\b(?P<level>[A-Z]{3,9})\b")
_MATCHED = re.compile(r"matched (?P<n>\d+) of")
_ASKED_LEVEL = re.compile(r"\blevel=(?P<level>[A-Za-z]+)")
_ALERTS_COUNT = re.compile(r"\balerts (?P<n>\d+) of")
_STATE = re.compile(r"\bstate=(?P<state>[a-z]+)")
_THRESHOLD = re.compile(r"\bthreshold=(?P<value>-?\d+(?:\.\d+)?)")
_LAST = re.compile(r"\blast=(?P<value>-?\d+(?:\.\d+)?(?:e-?\d+)?)(?P<unit>[a-zA-Z%]*)")
_SERVICE = re.compile(r"\bservice=(?P<service>[^\s,}]+)")
_LOWER = re.compile(
    r"\b(?:lower|less|smaller|fewer|faster|better)\b|更低|更少|更小|更快|更好", re.IGNORECASE
)
_YES_WORDS: Final = {"yes": "yes", "是": "yes", "no": "no", "否": "no", "不是": "no", "不": "no"}

REASONS: Final[dict[str, dict[str, str]]] = {
    "no_conclusion": {
        "en": "the answer states no conclusion",
        "zh": "回答没有给出结论",
    },
    "rests_on_nothing": {
        "en": "it rests on no claim",
        "zh": "它不以任何论断为依据",
    },
    "rests_on_unconfirmed": {
        "en": "it rests on claims that are not confirmed ({claims})",
        "zh": "它依据的论断未经确认（{claims}）",
    },
    "alert_not_in_data": {
        "en": "no evidence names the alert {alerts}: it is not in the data",
        "zh": "没有任何证据提到告警 {alerts}：数据中没有这个告警",
    },
    "compare_too_few": {
        "en": "a comparison rests on the series of fewer than two services",
        "zh": "比较所依据的指标序列来自不到两个服务",
    },
    "compare_first": {
        "en": "{service} has the {extreme} value",
        "zh": "{service} 的值{extreme}",
    },
    "neither": {
        "en": "the claims it rests on show neither a problem nor a clean {kind} result",
        "zh": "它依据的论断既没有显示问题，也没有显示正常的{kind}结果",
    },
    "metric_no_series": {
        "en": "a metric question is answered from its series; the claims cite none",
        "zh": "指标问题要用指标序列回答；这些论断没有引用任何序列",
    },
    "says_otherwise": {
        "en": "it says {said} where the claims it rests on show {expected}",
        "zh": "它的回答是“{said}”，而它依据的论断显示应为“{expected}”",
    },
}
"""Why a conclusion does not follow (or, for a comparison, which service it should name first),
per reason code and answer language; the arguments fill the braces."""

_NAMED_FIRST: Final[dict[str, tuple[str, str]]] = {
    "en": ("; the conclusion names {named} first", "; the conclusion names none of them first"),
    "zh": ("；结论首先提到的是 {named}", "；结论没有提到其中任何一个服务"),
}
"""The clause a comparison's reason ends with when its conclusion names the wrong service first
(with a name, without one)."""

_WORDS: Final[dict[str, dict[str, str]]] = {
    "zh": {
        "yes": "是",
        "no": "否",
        "value": "一个数值",
        "unknown": "未知",
        "highest": "最高",
        "lowest": "最低",
        "health": "健康状况",
        "errors": "错误",
        "alert_state": "告警状态",
    }
}
"""Words of the reason arguments ``said``, ``expected``, ``extreme`` and ``kind``, per language
(English: as they are)."""
_TRANSLATED_ARGS: Final = frozenset({"said", "expected", "extreme", "kind"})


def reason_in(code: str, args: dict[str, str], language: str) -> str:
    """The reason ``code`` with its ``args``, in ``language`` (``zh``; anything else: English).

    A ``named`` argument (a comparison's wrong first service; empty: none of them) adds the
    clause saying which service the conclusion names first.
    """
    lang = "zh" if language == "zh" else "en"
    words = _WORDS.get(lang, {})
    filled = {
        key: words.get(value, value) if key in _TRANSLATED_ARGS else value
        for key, value in args.items()
    }
    text = REASONS[code][lang].format(**filled)
    if "named" in args:
        named, none = _NAMED_FIRST[lang]
        text += named.format(named=args["named"]) if args["named"] else none
    return text


def reason_text(check: ConclusionCheck, language: str) -> str:
    """Why the checked conclusion does not follow, in ``language``.

    A check recorded before reason codes were kept has only its English ``reason``.
    """
    code = check.get("reason_code")
    if not code or code not in REASONS:
        return check["reason"]
    return reason_in(code, check.get("reason_args", {}), language)


def stated_answer(text: str) -> str | None:
    """The yes or no a claim text opens with (``Yes: ...``, ``否：...``), or None."""
    match = _ANSWER_PREFIX.match(text)
    return _YES_WORDS[match.group("word").casefold()] if match else None


@dataclass(frozen=True)
class SeriesReading:
    """A series ref read: service, concept, last value, threshold (and where from), signal."""

    service: str
    concept: str | None
    last: float
    threshold: float | None
    from_alert: bool
    signal: Signal | None


def _number(text: str) -> float:
    return float(text)


def alert_measures(alert: str, concept: str | None) -> bool:
    """Whether an alert ref's alert name measures a concept (``...HighCPU`` measures cpu)."""
    return concept is not None and concept in concepts_in(alert.split(" ")[0])


def _threshold(
    concept: str | None, metric: str, unit: str, alerts: Sequence[str]
) -> tuple[float | None, bool]:
    """The series' threshold: an alert's of the same concept, else the documented default.

    A default applies only where the scale is known: a percentage (unit ``%``, or ``percent``
    in the metric name), a ratio (``ratio`` or ``fraction`` in the name), milliseconds or
    seconds for latency; a count (connections, messages) has no default.
    """
    for alert in alerts:
        found = _THRESHOLD.search(alert)
        if found and alert_measures(alert, concept):
            return _number(found.group("value")), True
    default = DEFAULT_THRESHOLDS.get(concept or "")
    if default is None:
        return None, False
    big, small, big_unit = default
    name = metric.casefold()
    if big_unit == "%":
        if unit == "%" or "percent" in name or name.endswith("_pct"):
            return big, False
        if not unit and ("ratio" in name or "fraction" in name):
            return small, False
        return None, False
    if unit == "ms" or name.endswith("_ms"):
        return big, False
    if unit == "s" or name.endswith("_seconds"):
        return small, False
    return None, False


def series_reading(text: str, alerts: Sequence[str]) -> SeriesReading | None:
    """A series ref read: its service, concept, last value and what it shows."""
    last = _LAST.search(text)
    if last is None:
        return None
    metric = text.split("{", 1)[0]
    concepts = [c for c in concepts_in(metric) if c in DEFAULT_THRESHOLDS or c in ("lag",)]
    concept = concepts[0] if concepts else None
    service = _SERVICE.search(text)
    value = _number(last.group("value"))
    same = [a for a in alerts if service is None or f"service={service.group('service')}" in a]
    threshold, from_alert = _threshold(concept, metric, last.group("unit"), same)
    signal: Signal | None = None
    if threshold is not None:
        signal = "problem" if value >= threshold else "clean"
    name = service.group("service") if service else ""
    return SeriesReading(name, concept, value, threshold, from_alert, signal)


def excerpt_signal(excerpt: VerifiedExcerpt, alerts: Sequence[str]) -> tuple[str, Signal] | None:
    """What one verified ref shows: ``(what, signal)`` with what in log/alert/series, or None."""
    path, text = excerpt["raw_path"], excerpt["text"]
    if path.startswith("logs["):
        head = text.split(": ", 1)[0]
        levels = [m.group("level") for m in _LEVEL.finditer(head)]
        if any(level in PROBLEM_LEVELS for level in levels):
            return "log", "problem"
        return None
    if path.startswith("alerts["):
        state = _STATE.search(text)
        if state is None:
            return None
        return "alert", "problem" if state.group("state") == "firing" else "clean"
    if path.startswith("series["):
        reading = series_reading(text, alerts)
        if reading is None or reading.signal is None:
            return None
        return f"series:{reading.concept}", reading.signal
    if path == "summary":
        matched = _MATCHED.search(text)
        asked = _ASKED_LEVEL.search(text)
        if matched is not None:
            level = asked.group("level").upper() if asked else None
            if level is not None and level not in PROBLEM_LEVELS:
                return None
            return "log", "problem" if int(matched.group("n")) > 0 else "clean"
        count = _ALERTS_COUNT.search(text)
        if count is not None and int(count.group("n")) == 0:
            return "alert", "clean"
    return None


def claim_signals(
    claim: Claim, excerpts: Sequence[VerifiedExcerpt], alerts: Sequence[str]
) -> list[tuple[str, Signal]]:
    """What one claim's verified refs show; a negative observation whose refs show nothing is clean.

    What the refs show wins over the claim's type: a firing alert chosen as a "negative
    observation" (as a small model typed one) still shows a problem.
    """
    signals = [s for e in excerpts if (s := excerpt_signal(e, alerts)) is not None]
    if claim["claim_type"] == "negative_observation":
        return signals or [("any", "clean")]
    return signals


def _reads(intent: Intent, what: str) -> bool:
    """Whether a kind of signal answers the question's kind (a metric check reads series)."""
    if what == "any":
        return True
    if intent.kind == "metric_check":
        metrics = intent.facets["metrics"]
        return what.startswith("series:") and (not metrics or what[7:] in metrics)
    if intent.kind == "alert_state":
        return what == "alert"
    if intent.kind == "errors":
        return what == "log"
    return True


def expected_answer(intent: Intent, signals: Sequence[tuple[str, Signal]]) -> str | None:
    """The yes or no the signals support for the question, or None when they show neither."""
    read = [signal for what, signal in signals if _reads(intent, what)]
    if not read:
        return None
    problem = "problem" in read
    if intent.polarity == "ok":
        return "no" if problem else "yes"
    return "yes" if problem else "no"


def _comparison(
    intent: Intent, text: str, rested: Sequence[VerifiedExcerpt], alerts: Sequence[str]
) -> tuple[str | None, tuple[str, dict[str, str]]]:
    """The service a comparison should name first, and why (a reason code and its arguments)."""
    readings = [
        reading
        for excerpt in rested
        if excerpt["raw_path"].startswith("series[")
        and (reading := series_reading(excerpt["text"], alerts)) is not None
        and reading.service
    ]
    metrics = intent.facets["metrics"]
    readings = [r for r in readings if not metrics or r.concept in metrics] or readings
    services = {r.service for r in readings}
    if len(services) < 2:
        return None, ("compare_too_few", {})
    pick = min if _LOWER.search(intent.question) else max
    best = pick(readings, key=lambda r: r.last)
    extreme = "lowest" if pick is min else "highest"
    return best.service, ("compare_first", {"service": best.service, "extreme": extreme})


def _first_named(text: str, services: set[str]) -> str | None:
    lowered = text.casefold()
    positions = [(lowered.find(s.casefold()), s) for s in services if s.casefold() in lowered]
    return min(positions)[1] if positions else None


def check_conclusion(
    question: str,
    known_services: Sequence[str],
    answer: ExecutorAnswer,
    checks: Sequence[ClaimCheck],
    gatekeeper: GatekeeperResult,
) -> ConclusionCheck:
    """Check the answer's conclusion against the claims it rests on (see the module docstring)."""
    intent = read_intent(question, known_services, stems=True)
    labels = {check["claim_id"]: check["verification"] for check in checks}
    claims = {claim["claim_id"]: claim for claim in answer["claims"]}
    confirmed = {cid for cid, label in labels.items() if label in CONFIRMED_LABELS}
    excerpts = gatekeeper["verified_excerpts"]
    alerts = [
        e["text"]
        for cid in confirmed
        for e in excerpts.get(cid, [])
        if e["raw_path"].startswith("alerts[")
    ]
    stated = answer.get("conclusion")
    statements: list[tuple[str | None, str, list[str], str | None]] = []
    if stated:
        statements.append((stated["answer"], stated["text"], list(stated["rests_on"]), None))
    for claim in answer["claims"]:
        said = stated_answer(claim["claim_text"])
        if said is not None and claim["claim_id"] in confirmed:
            statements.append((said, claim["claim_text"], [claim["claim_id"]], claim["claim_id"]))
    base = ConclusionCheck(
        status="not_required",
        kind=intent.kind,
        text="",
        stated=None,
        expected=None,
        rests_on=[],
        claim_id=None,
        reason="",
        reason_code="",
        reason_args={},
    )
    if not statements:
        if not intent.concluded:
            return base
        derived = _derive(intent, answer["claims"], confirmed, excerpts, alerts)
        if derived is not None:
            return {**base, "status": "derived", "expected": derived, "rests_on": sorted(confirmed)}
        return {
            **base,
            "status": "missing",
            "reason": reason_in("no_conclusion", {}, "en"),
            "reason_code": "no_conclusion",
        }
    if not intent.concluded and stated is None:
        return base
    first: ConclusionCheck | None = None
    for said, text, rests_on, claim_id in statements:
        result = _check_one(
            intent, said, text, rests_on, claim_id, claims, confirmed, excerpts, alerts
        )
        if result["status"] == "does_not_follow":
            return result
        first = first or result
    return first or base


def _derive(
    intent: Intent,
    claims: Sequence[Claim],
    confirmed: set[str],
    excerpts: dict[str, list[VerifiedExcerpt]],
    alerts: Sequence[str],
) -> str | None:
    """The yes or no all confirmed claims support, when the answer states none (or None)."""
    if intent.polarity is None:
        return None
    signals = [
        signal
        for claim in claims
        if claim["claim_id"] in confirmed
        for signal in claim_signals(claim, excerpts.get(claim["claim_id"], []), alerts)
    ]
    return expected_answer(intent, signals)


def _check_one(
    intent: Intent,
    said: str | None,
    text: str,
    rests_on: list[str],
    claim_id: str | None,
    claims: dict[str, Claim],
    confirmed: set[str],
    excerpts: dict[str, list[VerifiedExcerpt]],
    alerts: Sequence[str],
) -> ConclusionCheck:
    def result(
        status: ConclusionStatus, expected: str | None, code: str = "", /, **args: str
    ) -> ConclusionCheck:
        return ConclusionCheck(
            status=status,
            kind=intent.kind,
            text=text,
            stated=said,
            expected=expected,
            rests_on=rests_on,
            claim_id=claim_id,
            reason=reason_in(code, args, "en") if code else "",
            reason_code=code,
            reason_args=args,
        )

    unconfirmed = [cid for cid in rests_on if cid not in confirmed]
    if not rests_on:
        return result("does_not_follow", None, "rests_on_nothing")
    if unconfirmed:
        return result(
            "does_not_follow", None, "rests_on_unconfirmed", claims=", ".join(unconfirmed)
        )
    rested = [e for cid in rests_on for e in excerpts.get(cid, [])]
    seen = " ".join(
        e["text"] for cid in confirmed for e in excerpts.get(cid, []) if e["raw_path"] != "summary"
    ).casefold()
    absent = [name for name in intent.facets["alerts"] if name.casefold() not in seen]
    if intent.kind == "alert_state" and absent:
        return result("does_not_follow", None, "alert_not_in_data", alerts=", ".join(absent))
    if intent.kind == "compare":
        winner, why = _comparison(intent, text, rested, alerts)
        services = {
            r.service
            for e in rested
            if (r := series_reading(e["text"], alerts)) is not None and r.service
        }
        named = _first_named(text, services)
        ok = winner is not None and named == winner
        return result(
            "follows" if ok else "does_not_follow",
            winner,
            why[0],
            **why[1],
            **({} if ok else {"named": named or ""}),
        )
    if intent.polarity is None:
        return result("follows", said)
    signals = [
        signal
        for cid in rests_on
        if cid in claims
        for signal in claim_signals(claims[cid], excerpts.get(cid, []), alerts)
    ]
    expected = expected_answer(intent, signals)
    if expected is None:
        if intent.kind == "metric_check":
            return result("does_not_follow", None, "metric_no_series")
        return result("does_not_follow", None, "neither", kind=intent.kind)
    if said != expected:
        return result(
            "does_not_follow", expected, "says_otherwise", said=str(said), expected=expected
        )
    return result("follows", expected)
