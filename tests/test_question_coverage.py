"""Question analysis (verification/question.py) and question coverage (verification/coverage.py).

The floor is deterministic and holds in every mode; a Verifier's own ``question_coverage`` can
lower it, never lift it; ``unanswered`` caps the verdict at LOW_CONFID, ``partial`` keeps it.
"""

from __future__ import annotations

from typing import Any

import pytest

from state.records import (
    ClaimCheck,
    ClaimLabel,
    CoverageReport,
    Decision,
    ExecutorAnswer,
    GatekeeperResult,
    JSONObject,
    QuestionKind,
    TraceItem,
    VerifierMode,
)
from tests import records
from tests.records import VALID
from verification.answer import select_material
from verification.coverage import (
    failed_calls,
    floor_coverage,
    question_coverage,
    strictest_status,
)
from verification.executor_output import read_answer
from verification.question import analyze_question, facet_label
from verification.verdict import decide
from verification.verifier_reply import read_verifier_reply

KNOWN = ["api-gateway", "inventory-service", "order-service", "payment-service"]


# --------------------------------------------------------------------------- classifier


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("What is the CPU usage of inventory-service?", "value"),
        ("order-service 的 p99 延迟是多少？", "value"),
        ("order-service 的错误率是多少", "value"),
        ("How high is the memory of payment-service?", "value"),
        ("Why is inventory-service slow?", "why"),
        ("order-service 为什么报 500 错误？", "why"),
        ("What is wrong with api-gateway?", "why"),
        ("inventory-service 怎么了？", "why"),
        ("is the HighErrorRate alert firing for order-service?", "confirm"),
        ("PaymentLatencyHigh 告警现在在触发吗？", "confirm"),
        ("does payment-service have errors?", "confirm"),
        ("order-service 是否有 500 错误？", "confirm"),
        ("inventory-service 有告警吗？", "confirm"),
        ("What is wrong?", "overview"),
        ("出了什么问题？", "overview"),
    ],
)
def test_analyze_question_kind(question: str, kind: QuestionKind) -> None:
    assert analyze_question(question, KNOWN)["kind"] == kind


def test_analyze_question_names_services_alerts_and_metrics() -> None:
    found = analyze_question("is the HighErrorRate alert firing for order-service?", KNOWN)
    assert found["services"] == ["order-service"]
    assert found["alerts"] == ["HighErrorRate"]
    # The words of an alert name are no metric the question asks about.
    assert found["metrics"] == []
    assert [(f["kind"], f["name"]) for f in found["facets"]] == [
        ("service", "order-service"),
        ("alert", "HighErrorRate"),
    ]


@pytest.mark.parametrize(
    ("chinese", "english"),
    [
        ("order-service 的 p99 延迟是多少？", "What is the p99 latency of order-service?"),
        ("inventory-service 的 CPU 使用率是多少？", "What is the CPU usage of inventory-service?"),
        ("order-service 的连接池使用是多少？", "What is the pool usage of order-service?"),
        ("orders-db 的磁盘用了多少？", "How much disk does orders-db use?"),
    ],
)
def test_analyze_question_reads_synonyms_the_same_in_both_languages(
    chinese: str, english: str
) -> None:
    zh, en = analyze_question(chinese, KNOWN), analyze_question(english, KNOWN)
    assert zh["kind"] == en["kind"] == "value"
    assert zh["facets"] == en["facets"]


def test_analyze_question_finds_services_the_backend_does_not_know() -> None:
    found = analyze_question("notification-service 有错误吗？ and billing-api?", KNOWN)
    assert found["services"] == []
    assert found["unknown_services"] == ["notification-service", "billing-api"]
    assert all(not f["known"] for f in found["facets"])
    # An instance of a known service is not another service.
    assert analyze_question("is order-service-5f7b9c-2xkqz up?", KNOWN)["unknown_services"] == []


def test_analyze_question_alert_names_need_an_alert_question() -> None:
    assert analyze_question("why does HikariPool time out?", KNOWN)["alerts"] == []
    assert analyze_question("is CannotAcquireConnectionException alerting?", KNOWN)["alerts"] == []


def test_analyze_question_status_codes_and_errors() -> None:
    found = analyze_question("order-service 是否有 500 错误？", KNOWN)
    assert found["status_codes"] == ["500"]
    assert found["about_errors"] is True
    assert analyze_question("p99 above 500ms?", KNOWN)["status_codes"] == []


def test_facet_label_names_metrics_in_the_answer_language() -> None:
    assert facet_label("latency", "zh") == "延迟"
    assert facet_label("cpu", "en") == "CPU usage"
    assert facet_label("order-service", "zh") == "order-service"


# --------------------------------------------------------------------------- floor


def test_floor_answered_when_every_facet_is_in_a_confirmed_claim() -> None:
    report = floor_coverage(
        "What is the CPU usage of inventory-service?",
        KNOWN,
        ["inventory-service cpu_usage_percent last=69.3%"],
    )
    assert report == CoverageReport(
        status="answered", asked=["inventory-service", "cpu"], unanswered=[]
    )


FLOOR_CASES: dict[str, tuple[str, list[str], dict[str, object]]] = {
    "a_value_question_is_unanswered_when_its_metric_is_missing": (
        # The service is named, the value asked is not: an answer to another question.
        "What is the CPU usage of inventory-service?",
        ["Alert InventoryServiceSlowQueries on inventory-service is firing"],
        {"status": "unanswered", "unanswered": ["cpu"]},
    ),
    "a_value_question_is_partial_when_one_of_its_metrics_is_missing": (
        "What are the CPU and memory usage of inventory-service?",
        ["inventory-service cpu_usage_percent last=69.3%"],
        {"status": "partial", "unanswered": ["memory"]},
    ),
    "partial_when_a_service_is_missing": (
        "What is the CPU usage of inventory-service and order-service?",
        ["inventory-service cpu_usage_percent last=69.3%"],
        {"status": "partial", "unanswered": ["order-service"]},
    ),
    "a_why_question_naming_a_metric_is_partial_without_it": (
        "Why is the latency of order-service high?",
        ["order-service logged HikariPool-1 - Connection is not available"],
        {"status": "partial", "unanswered": ["latency"]},
    ),
    "unanswered_when_only_other_services_are_confirmed": (
        "notification-service 有错误吗？",
        ["order-service has 8 ERROR log entries"],
        {"status": "unanswered", "unanswered": ["notification-service"]},
    ),
    "counts_a_negative_observation_about_the_facet": (
        "is the HighErrorRate alert firing for order-service?",
        ["No: no alert named HighErrorRate exists for order-service."],
        {"status": "answered"},
    ),
    "matches_a_metric_by_its_concept_in_either_language-zh": (
        "order-service 的 p99 延迟是多少？",
        ["order-service 的 p99 为 30040ms"],
        {"status": "answered"},
    ),
    "matches_a_metric_by_its_concept_in_either_language-en": (
        "What is the latency of order-service?",
        ["http_request_duration_p99_ms{service=order-service} last=30040ms"],
        {"status": "answered"},
    ),
    "a_question_naming_nothing_needs_one_confirmed_claim-one": (
        "What is wrong?",
        ["x"],
        {"status": "answered"},
    ),
    "a_question_naming_nothing_needs_one_confirmed_claim-none": (
        "What is wrong?",
        [],
        {"status": "unanswered"},
    ),
    "service_names_are_whole_names": (
        "Is payment-service ok?",
        ["payment-service-7c4d8 restarted"],
        {"status": "unanswered"},
    ),
}
"""The floor of a question, given the texts of the confirmed claims, by the test it stands for."""


@pytest.mark.parametrize(
    ("question", "confirmed", "expected"), FLOOR_CASES.values(), ids=FLOOR_CASES.keys()
)
def test_floor(question: str, confirmed: list[str], expected: dict[str, object]) -> None:
    """Each case states the parts of the report it is about; those parts must hold."""
    report = floor_coverage(question, KNOWN, confirmed)
    assert {key: report.get(key) for key in expected} == expected


# --------------------------------------------------------------------------- combined


def _answer(*texts: str) -> tuple[list[ClaimCheck], JSONObject]:
    output = records.executor_output(
        *(
            records.claim(f"c{i}", text, records.binding("inv-1", "logs[0]", "x"))
            for i, text in enumerate(texts, start=1)
        )
    )
    checks = [
        ClaimCheck(
            claim_id=f"c{i}",
            verification="direct_observation",
            detail="",
            evidence_refs=[],
            model_verification=None,
        )
        for i in range(1, len(texts) + 1)
    ]
    return checks, output


def test_coverage_model_can_lower_but_never_lift_the_floor() -> None:
    checks, output = _answer("order-service has 8 ERROR log entries")
    answer = read_answer(VALID, output)
    question = "What is the CPU usage of inventory-service?"
    lifted = question_coverage(
        question,
        KNOWN,
        answer,
        checks,
        model=CoverageReport(status="answered", asked=["cpu"], unanswered=[]),
    )
    assert lifted["status"] == "unanswered"
    assert lifted["floor"]["status"] == "unanswered"

    checks, output = _answer("inventory-service cpu_usage_percent last=69.3%")
    lowered = question_coverage(
        question,
        KNOWN,
        read_answer(VALID, output),
        checks,
        model=CoverageReport(status="partial", asked=["max CPU"], unanswered=["max CPU"]),
    )
    assert lowered["floor"]["status"] == "answered"
    assert lowered["status"] == "partial"
    assert lowered["unanswered"] == ["max CPU"]
    assert lowered["asked"] == ["inventory-service", "cpu", "max CPU"]


def test_coverage_budget_cut_makes_it_at_most_partial() -> None:
    checks, output = _answer("inventory-service cpu_usage_percent last=69.3%")
    coverage = question_coverage(
        "What is the CPU usage of inventory-service?",
        KNOWN,
        read_answer(VALID, output),
        checks,
        not_run=["query_logs level=ERROR service=inventory-service"],
    )
    assert coverage["status"] == "partial"
    assert coverage["unanswered"] == []
    assert coverage["not_run"] == ["query_logs level=ERROR service=inventory-service"]


def test_coverage_unconfirmed_claims_answer_nothing() -> None:
    checks, output = _answer("inventory-service cpu_usage_percent last=69.3%")
    checks[0]["verification"] = "overstated"
    coverage = question_coverage(
        "What is the CPU usage of inventory-service?", KNOWN, read_answer(VALID, output), checks
    )
    assert coverage["status"] == "unanswered"


def test_strictest_status() -> None:
    assert strictest_status("answered", "partial") == "partial"
    assert strictest_status("partial", "unanswered", None) == "unanswered"
    assert strictest_status(None) == "answered"


# --------------------------------------------------------------------------- in the verdict


def _claimed(text: str) -> tuple[ExecutorAnswer, GatekeeperResult]:
    """An answer of one claim ``c1`` bound to ``logs[0]`` of ``inv-1``, and its Gatekeeper pass."""
    output = records.executor_output(
        records.claim("c1", text, records.binding("inv-1", "logs[0]", "HTTP 500"))
    )
    gatekeeper = records.gatekeeper_result(
        {"c1": [records.excerpt("inv-1", "query_logs", "logs[0]", "ERROR order-service HTTP 500")]}
    )
    return read_answer(VALID, output), gatekeeper


def _decide(
    question: str,
    text: str,
    *,
    label: ClaimLabel = "direct_observation",
    coverage: object = None,
    mode: VerifierMode = "model",
    not_run: tuple[str, ...] = (),
    more_trace: tuple[TraceItem, ...] = (),
) -> Decision:
    answer, gatekeeper = _claimed(text)
    raw: dict[str, object] = {
        "verdict": "PASS",
        "claim_checks": [
            {
                "claim_id": "c1",
                "verification": label,
                "detail": "",
                "evidence_refs": [
                    {"trace_ref": "t1", "tool_name": "query_logs", "source_invocation_ids": []}
                ],
            }
        ],
    }
    if coverage is not None:
        raw["question_coverage"] = coverage
    trace = [records.trace_item("t1", "query_logs", ["inv-1"]), *more_trace]
    return decide(
        answer,
        gatekeeper,
        read_verifier_reply(raw),
        parse_status=VALID,
        trace=trace,
        mode=mode,
        question=question,
        known_services=KNOWN,
        not_run=not_run,
    )


@pytest.mark.parametrize("mode", ["model", "offline", "fallback"])
def test_decide_floor_holds_in_every_mode(mode: VerifierMode) -> None:
    decision = _decide(
        "Does payment-service have errors?", "order-service has HTTP 500 errors", mode=mode
    )
    assert decision["verdict"] == "LOW_CONFID"


PAYMENT_ERRORS = "Does payment-service have errors?"
WHY_500 = "Why does order-service return 500?"
HTTP_500 = "order-service has HTTP 500 errors"


def _outcome(decision: Decision) -> dict[str, object]:
    """What ``decide`` made of the question coverage, by the name a case states it under."""
    coverage = decision["question_coverage"]
    return {
        "derived": decision["derived_verdict"],
        "status": coverage["status"],
        "verdict": decision["verdict"],
        "model_read": coverage["model"] is not None,
        "floor": coverage["floor"]["status"],
        "capped": any("capped at LOW_CONFID" in note for note in decision["notes"]),
    }


@pytest.mark.parametrize(
    ("question", "options", "expected"),
    [
        pytest.param(
            PAYMENT_ERRORS,
            {},
            {"derived": "PASS", "status": "unanswered", "verdict": "LOW_CONFID", "capped": True},
            id="unanswered_caps_the_verdict_at_low_confid",
        ),
        pytest.param(
            PAYMENT_ERRORS,
            {
                "coverage": {
                    "status": "answered",
                    "asked": ["payment-service errors"],
                    "unanswered": [],
                }
            },
            {"model_read": True, "status": "unanswered", "verdict": "LOW_CONFID"},
            id="model_answered_cannot_lift_an_unanswered_floor",
        ),
        pytest.param(
            WHY_500,
            {"coverage": {"status": "unanswered", "asked": ["why"], "unanswered": ["why"]}},
            {"floor": "answered", "verdict": "LOW_CONFID"},
            id="model_unanswered_caps_a_floor_that_passes",
        ),
        pytest.param(
            WHY_500,
            {
                "coverage": {
                    "status": "partial",
                    "asked": ["who calls it"],
                    "unanswered": ["who calls it"],
                }
            },
            {"status": "partial", "verdict": "PASS"},
            id="partial_keeps_the_verdict",
        ),
        pytest.param(
            WHY_500,
            {},
            {"model_read": False, "status": "answered", "verdict": "PASS"},
            id="reply_without_coverage_is_judged_by_the_floor_alone",
        ),
        pytest.param(
            WHY_500,
            {"not_run": ("query_logs level=WARN service=order-service",)},
            {"status": "partial", "verdict": "PASS"},
            id="not_run_calls_make_coverage_partial_and_keep_pass",
        ),
        pytest.param(
            WHY_500,
            {
                "coverage": {"status": "unanswered", "asked": [], "unanswered": []},
                "mode": "fallback",
            },
            {"model_read": False},
            id="fallback_ignores_a_coverage_it_could_not_read",
        ),
    ],
)
def test_decide_question_coverage(
    question: str, options: dict[str, Any], expected: dict[str, object]
) -> None:
    """Each case states the facts of the outcome it is about; those facts must hold."""
    outcome = _outcome(_decide(question, HTTP_500, **options))
    assert {name: outcome[name] for name in expected} == expected


def _failed_item(ref: str, args: str, *, calls: int = 1, errors: int = 1) -> TraceItem:
    item = records.trace_item(
        ref, "query_logs", [f"inv-{ref}"], input_summary=args, output_summary="no match"
    )
    item["success"] = False
    if errors == calls:
        item["output_summary"] = "error: BackendError: Loki answered HTTP 504"
    if calls > 1:
        item["repeat_count"] = calls
        item["failed_count"] = errors
    return item


def test_failed_calls_are_the_calls_that_never_succeeded_with_their_error() -> None:
    ok = records.trace_item("t1", "query_metrics", ["inv-1"], input_summary="service=a")
    failed = _failed_item("t2", "level=ERROR service=a")
    twice = _failed_item("t3", "level=WARN service=a", calls=2, errors=2)
    no_hit = _failed_item("t4", "level=INFO service=a", errors=0)
    mixed = _failed_item("t5", "level=DEBUG service=a", calls=2, errors=1)  # one error, no match
    recovered = _failed_item("t6", "level=FATAL service=a", calls=2, errors=1)
    recovered["success"] = True  # failed in round 1, answered in round 2

    assert failed_calls([ok, failed, twice, no_hit, mixed, recovered]) == [
        "query_logs level=ERROR service=a: error: BackendError: Loki answered HTTP 504",
        "query_logs level=WARN service=a: error: BackendError: Loki answered HTTP 504",
    ]


def test_decide_a_failed_call_makes_coverage_partial_keeps_pass_and_is_a_gap() -> None:
    text = "order-service has HTTP 500 errors"
    failed = _failed_item("t2", "level=WARN service=order-service")
    decision = _decide("Why does order-service return 500?", text, more_trace=(failed,))

    coverage = decision["question_coverage"]
    assert coverage["status"] == "partial" and decision["verdict"] == "PASS"
    assert coverage.get("failed") == [
        "query_logs level=WARN service=order-service: error: BackendError: Loki answered HTTP 504"
    ]
    answer, gatekeeper = _claimed(text)
    gaps = select_material(decision["claim_checks"], answer, gatekeeper, coverage=coverage)["gaps"]
    assert [(g["kind"], g["text"]) for g in gaps] == [("failed", coverage["failed"][0])]


# --------------------------------------------------------------------------- reply reader


@pytest.mark.parametrize(
    ("raw", "expected", "note"),
    [
        (None, None, None),
        ("answered", None, "not an object"),
        ({"status": "done"}, None, "is not known"),
        (
            {"status": "partial", "asked": ["a", 3, " a "], "unanswered": ["b"]},
            CoverageReport(status="partial", asked=["a"], unanswered=["b"]),
            None,
        ),
        (
            {"status": "answered", "unanswered": ["b"]},
            CoverageReport(status="partial", asked=[], unanswered=["b"]),
            "lists unanswered facets",
        ),
    ],
    ids=["absent", "not-object", "unknown-status", "lists", "answered-with-open-facets"],
)
def test_reply_reader_reads_question_coverage_at_the_edge(
    raw: object, expected: CoverageReport | None, note: str | None
) -> None:
    reply = read_verifier_reply(
        {"verdict": "PASS", "claim_checks": [], "question_coverage": raw}
        if raw is not None
        else {"verdict": "PASS", "claim_checks": []}
    )
    assert reply.get("question_coverage") == expected
    if note is None:
        assert not reply["notes"]
    else:
        assert any(note in n for n in reply["notes"])
