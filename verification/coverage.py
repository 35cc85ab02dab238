"""Question coverage: whether the confirmed claims answer what was asked, decided in code.

A PASS means the question was answered, not only that every confirmed claim is grounded.

- **Floor** (deterministic, every mode): each service, alert name and metric the question names
  (``verification.question``) must appear in at least one confirmed claim (a negative
  observation about it counts); those that do not are ``unanswered``. A question naming nothing
  is answered by any confirmed claim. Status: nothing unanswered -> ``answered``; some ->
  ``partial``; all (or no confirmed claim at all) -> ``unanswered``. A value question ("what is
  the CPU usage of X?") whose metrics are all unanswered is ``unanswered`` too: the service's
  other facts answer another question.
- **Model**: the Verifier's ``question_coverage`` (when its reply has one) can only make the
  coverage stricter: the status is the strictest of the two, its unanswered facets are added.
- **Budget**: tool calls the tool budget cut (``not_run``) make the coverage at most ``partial``.
- **Failures**: so do tool calls that failed every time they were made (``failed``, with the
  error): what the source would have said is not in the answer.
- **What it asks** (``verification.intent``): a question about changes is answered only by a
  confirmed claim about a change, one naming a time only by a confirmed claim stating an
  absolute time, one asking what to do only by a next step from a source (so a question naming
  no service is not answered by any confirmed claim), one asking which errors were logged only
  by a confirmed claim naming the level asked (``FATAL``; ``ERROR``, 错误 or 报错 for errors) in
  its text or in the log line it quotes, so an answer about something else (a root cause) does
  not answer it.
- **Conclusion** (``verification.conclusion``): a question wanting a conclusion (yes/no, a
  comparison) whose answer states none, or one that does not follow from its claims, is
  ``unanswered``: no facet counts as answered unless the conclusion answers it.
- **Effect**: ``unanswered`` caps the effective verdict at LOW_CONFID; ``partial`` keeps it, and
  the answer lists the unanswered facets, the calls not run and the calls that failed as gaps.

A facet appears in a claim when the claim text names the service or alert as a whole name, or
names the metric's concept (``p99``, ``延迟`` and ``http_request_duration_p99_ms`` all name
latency; ``knowledge.vocabulary``); a percentile the question names (``p99``) must be in the claim
itself, so a p95 value does not answer a p99 question.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from knowledge.vocabulary import concepts_in
from state.records import (
    CONFIRMED_LABELS,
    ClaimCheck,
    ConclusionStatus,
    CoverageReport,
    CoverageStatus,
    ExecutorAnswer,
    Facet,
    QuestionCoverage,
    TraceItem,
    Verdict,
)
from verification.intent import CHANGE, read_intent
from verification.question import analyze_question, is_percentile
from verification.text import normalize

_RANK: Final[dict[CoverageStatus, int]] = {"unanswered": 0, "partial": 1, "answered": 2}


def strictest_status(*statuses: CoverageStatus | None) -> CoverageStatus:
    """The strictest of the given statuses (unanswered < partial < answered); None is no bound."""
    given = [status for status in statuses if status is not None]
    return min(given, key=lambda status: _RANK[status]) if given else "answered"


def names_facet(facet: Facet, text: str) -> bool:
    """Whether a text (a claim, a ref) names the facet (see the module docstring)."""
    if facet["kind"] == "metric" and is_percentile(facet["name"]):
        pattern = r"(?<![a-z0-9])" + re.escape(facet["name"]) + r"(?![0-9])"
        return re.search(pattern, normalize(text)) is not None
    if facet["kind"] == "metric":
        return facet["name"] in concepts_in(text)
    pattern = r"(?<![a-z0-9_.-])" + re.escape(normalize(facet["name"])) + r"(?![a-z0-9_-])"
    return re.search(pattern, normalize(text)) is not None


def confirmed_texts(answer: ExecutorAnswer, checks: Sequence[ClaimCheck]) -> list[str]:
    """The texts of the claims whose final label is confirmed, in claim order."""
    confirmed = {check["claim_id"] for check in checks if check["verification"] in CONFIRMED_LABELS}
    return [claim["claim_text"] for claim in answer["claims"] if claim["claim_id"] in confirmed]


def floor_coverage(
    question: str, known_services: Sequence[str], confirmed: Sequence[str]
) -> CoverageReport:
    """The deterministic floor: which facets of the question no confirmed claim names.

    Unanswered when nothing is confirmed, when no facet is named, or when a value question's
    metrics are all left open (whatever else is named); partial when some facet is open.

    Args:
        question: The user's question.
        known_services: The services the evidence backend knows.
        confirmed: The texts of the confirmed claims.
    """
    read = analyze_question(question, known_services)
    facets = read["facets"]
    asked = list(dict.fromkeys(facet["name"] for facet in facets))
    open_facets = [
        facet["name"] for facet in facets if not any(names_facet(facet, text) for text in confirmed)
    ]
    unanswered = list(dict.fromkeys(open_facets))
    metrics = {facet["name"] for facet in facets if facet["kind"] == "metric"}
    # A value question is about its metrics: with none of them stated, what was confirmed
    # (the service's alerts, its logs) answers another question.
    value_missing = read["kind"] == "value" and bool(metrics) and metrics <= set(unanswered)
    if not confirmed or value_missing or (asked and len(unanswered) == len(asked)):
        status: CoverageStatus = "unanswered"
    else:
        status = "partial" if unanswered else "answered"
    return CoverageReport(status=status, asked=asked, unanswered=unanswered)


_ABSOLUTE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
"""An absolute time as an answer states it."""
LEVEL_WORDS: Final[dict[str, str]] = {
    "ERROR": r"(?<![a-z])err|错误|报错",
    "FATAL": r"(?<![a-z])fatal|致命",
    "PANIC": r"(?<![a-z])panic",
    "CRITICAL": r"(?<![a-z])crit",
}
"""How a claim names the log level a listing asks for (``verification.question.error_level``)."""


PRIMARY_FACETS: Final[frozenset[str]] = frozenset({"changes", "next steps", "log lines"})
"""Facets a question is about: left unanswered, the whole question is unanswered."""


def intent_facets(
    question: str,
    known_services: Sequence[str],
    answer: ExecutorAnswer,
    confirmed: Sequence[str],
) -> tuple[list[str], list[str]]:
    """What a question asks beyond the names it names: ``(asked, unanswered)``.

    A question about changes is answered only by a confirmed claim about a change (or that none
    was logged); one naming a time only by a confirmed claim stating an absolute time; one
    asking what to do only by a next step from a source; one asking which errors were logged
    only by a confirmed claim naming the level asked (or that none was logged).
    """
    intent = read_intent(question, known_services)
    asked: list[str] = []
    unanswered: list[str] = []
    if intent.kind == "changes":
        asked.append("changes")
        if not any(CHANGE.search(text.casefold()) for text in confirmed):
            unanswered.append("changes")
    if intent.time is not None:
        asked.append("time window")
        if not any(_ABSOLUTE_TIME.search(text) for text in confirmed):
            unanswered.append("time window")
    if intent.kind == "listing":
        asked.append("log lines")
        level = intent.facets["error_level"]
        words = re.compile(LEVEL_WORDS.get(level, re.escape(level.casefold())))
        # A claim names the level in its text, or quotes the line with it.
        quoted = [
            binding["evidence_excerpt"] or ""
            for claim in answer["claims"]
            if claim["claim_text"] in confirmed
            for binding in claim["evidence_bindings"]
            if binding["tool_name"] == "query_logs"
        ]
        if not any(words.search(text.casefold()) for text in [*confirmed, *quoted]):
            unanswered.append("log lines")
    if intent.kind == "action":
        asked.append("next steps")
        if not any(step["source"].strip() for step in answer["recommended_actions"]):
            unanswered.append("next steps")
    return asked, unanswered


def question_coverage(
    question: str,
    known_services: Sequence[str],
    answer: ExecutorAnswer,
    checks: Sequence[ClaimCheck],
    *,
    model: CoverageReport | None = None,
    not_run: Sequence[str] = (),
    failed: Sequence[str] = (),
    conclusion: ConclusionStatus = "not_required",
    conclusion_text: str = "",
) -> QuestionCoverage:
    """The round's coverage: the floor, lowered (never lifted) by the model and the budget.

    Args:
        question: The user's question.
        known_services: The services the evidence backend knows.
        answer: The executor's answer.
        checks: The final claim checks (their labels decide what is confirmed).
        model: The Verifier's own coverage report, when its reply had one.
        not_run: Tool calls the tool budget cut, rendered (``query_logs level=ERROR ...``).
        failed: Tool calls that failed every time, rendered with their error (``failed_calls``).
        conclusion: The status of the answer's conclusion (``verification.conclusion``): a
            question wanting one is unanswered when none follows from the confirmed claims.
        conclusion_text: Its text; one that follows answers what it states (the window).
    """
    confirmed = confirmed_texts(answer, checks)
    floor = floor_coverage(question, known_services, confirmed)
    concluded = [conclusion_text] if conclusion == "follows" and conclusion_text else []
    more_asked, more_open = intent_facets(
        question, known_services, answer, [*confirmed, *concluded]
    )
    if more_asked:
        asked_all = floor["asked"] + [item for item in more_asked if item not in floor["asked"]]
        open_all = floor["unanswered"] + more_open
        status: CoverageStatus = floor["status"]
        if more_open:
            # What the question is about (the changes, the steps) left open leaves it open.
            primary = any(item in PRIMARY_FACETS for item in more_open)
            whole = primary or len(open_all) == len(asked_all)
            status = "unanswered" if whole else "partial"
        floor = CoverageReport(
            status=strictest_status(floor["status"], status),
            asked=asked_all,
            unanswered=open_all,
        )
    if conclusion in ("missing", "does_not_follow"):
        floor = CoverageReport(
            status="unanswered",
            asked=floor["asked"] or ["conclusion"],
            unanswered=floor["asked"] or ["conclusion"],
        )
    asked = list(floor["asked"])
    unanswered = list(floor["unanswered"])
    if model is not None:
        asked += [item for item in model["asked"] if item not in asked]
        unanswered += [item for item in model["unanswered"] if item not in unanswered]
    status = strictest_status(
        floor["status"],
        model["status"] if model is not None else None,
        "partial" if unanswered or not_run or failed else None,
    )
    return QuestionCoverage(
        status=status,
        asked=asked,
        unanswered=unanswered,
        floor=floor,
        model=model,
        not_run=list(not_run),
        failed=list(failed),
    )


def failed_calls(trace: Sequence[TraceItem]) -> list[str]:
    """The trace's calls that failed every time they were made, each with its error.

    ``query_logs level=ERROR service=order-service: error: Loki ... answered 504``. A call that
    failed once and then succeeded (a retry round) is not a gap.
    """
    failed: list[str] = []
    for item in trace:
        errors = item.get("failed_count", 1 if item["output_summary"].startswith("error") else 0)
        if item["success"] or errors != item.get("repeat_count", 1):
            continue
        call = " ".join(part for part in (item["tool_name"], item["input_summary"]) if part)
        failed.append(f"{call}: {item['output_summary']}")
    return list(dict.fromkeys(failed))


def coverage_cap(coverage: QuestionCoverage) -> Verdict | None:
    """The verdict cap of a coverage: LOW_CONFID when the question was left unanswered."""
    return "LOW_CONFID" if coverage["status"] == "unanswered" else None
