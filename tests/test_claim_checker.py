"""Deterministic claim checker: labels, tokens, evidence refs, and agreement with verdict code."""

from __future__ import annotations

from typing import Any

import pytest

from state.records import (
    Decision,
    GatekeeperResult,
    JSONObject,
    TraceItem,
    VerifiedExcerpt,
    VerifierReply,
)
from tests.records import (
    VALID,
    binding,
    claim,
    excerpt,
    executor_output,
    gatekeeper_result,
    json_list,
    json_object,
    trace_item,
)
from verification.claim_checker import check_claims, claim_tokens
from verification.executor_output import read_answer
from verification.verdict import decide

LOG_TEXT = (
    "2026-03-01T10:01:00Z ERROR order-service order-1: HTTP 500 "
    "java.sql.SQLTransientConnectionException: Cannot acquire connection from pool after 30s"
)
ALERT_TEXT = (
    "HighErrorRate service=order-service severity=critical state=firing value=12.5% "
    "threshold=5% active_at=2026-03-01T10:02:00Z: error ratio above threshold"
)
ZERO_SUMMARY = (
    "query_logs end=2026-03-01T10:30:00Z level=ERROR service=payment-service "
    "start=2026-03-01T10:00:00Z matched 0 of 0 (complete)"
)
FOUND_SUMMARY = "query_logs level=ERROR service=order-service matched 3 of 3 (complete)"
NO_ALERT_SUMMARY = "query_metrics service=payment-service alerts 0 of 0, series 2 of 2 (complete)"
ZERO_METRICS = "query_metrics alert=HighErrorRate alerts 0 of 0, series 0 of 0 (complete)"
SOME_METRICS = "query_metrics alert=HighErrorRate alerts 0 of 0, series 4 of 4 (complete)"
RUNBOOK_TEXT = "Connection pool runbook (wiki): when HTTP 500 appears, raise the pool size to 50"

TRACE: list[TraceItem] = [
    trace_item("t1", "query_logs", ["inv-1", "inv-4"]),
    trace_item("t2", "query_metrics", ["inv-2"]),
    trace_item("t3", "lookup_knowledge", ["inv-3"]),
    trace_item("t4", "query_logs", ["inv-5"]),
]

_SOURCES = {
    "logs[0]": ("inv-1", "query_logs", LOG_TEXT),
    "alerts[0]": ("inv-2", "query_metrics", ALERT_TEXT),
    "documents[0]": ("inv-3", "lookup_knowledge", RUNBOOK_TEXT),
    "summary-zero": ("inv-5", "query_logs", ZERO_SUMMARY),
    "summary-found": ("inv-4", "query_logs", FOUND_SUMMARY),
    "summary-no-alert": ("inv-2", "query_metrics", NO_ALERT_SUMMARY),
    "summary-metrics-zero": ("inv-2", "query_metrics", ZERO_METRICS),
    "summary-metrics-some": ("inv-2", "query_metrics", SOME_METRICS),
}


def _case(
    text: str,
    *,
    sources: tuple[str, ...] = ("logs[0]",),
    claim_type: str = "observation",
    support_level: str = "direct",
) -> tuple[JSONObject, GatekeeperResult]:
    """One claim c1 bound to the given sources, all verified by the Gatekeeper."""
    bindings: list[JSONObject] = []
    excerpts: list[VerifiedExcerpt] = []
    for i, key in enumerate(sources):
        inv, tool, ref_text = _SOURCES[key]
        raw_path = "summary" if key.startswith("summary") else key
        bindings.append(binding(inv, raw_path, ref_text[:10], tool_name=tool))
        excerpts.append(excerpt(inv, tool, raw_path, ref_text, binding=i))
    output = executor_output(
        claim("c1", text, *bindings, claim_type=claim_type, support_level=support_level)
    )
    return output, gatekeeper_result({"c1": excerpts} if excerpts else {})


def reply_of(
    output: JSONObject,
    gatekeeper: GatekeeperResult,
    trace: list[TraceItem],
    known_services: list[str] | None = None,
) -> VerifierReply:
    """The claim checker's reply on a raw executor object, read as the graph reads it."""
    return check_claims(
        read_answer(VALID, output), gatekeeper, trace, known_services=known_services or ()
    )


def check(
    output: JSONObject,
    gatekeeper: GatekeeperResult,
    trace: list[TraceItem],
    known_services: list[str] | None = None,
) -> Decision:
    """The offline decision: the claim checker's reply through ``decide``."""
    reply = reply_of(output, gatekeeper, trace, known_services)
    answer = read_answer(VALID, output)
    return decide(answer, gatekeeper, reply, parse_status=VALID, trace=trace, mode="offline")


def _label(
    text: str,
    *,
    sources: tuple[str, ...] = ("logs[0]",),
    claim_type: str = "observation",
    support_level: str = "direct",
    known_services: list[str] | None = None,
) -> str:
    output, gatekeeper = _case(
        text, sources=sources, claim_type=claim_type, support_level=support_level
    )
    return check(output, gatekeeper, TRACE, known_services)["claim_checks"][0]["verification"]


def negative(source: str) -> dict[str, Any]:
    """The ``_label`` options of a negative observation bound to one summary ref."""
    return {"sources": (source,), "claim_type": "negative_observation"}


NO_ALERT = "No alert named HighErrorRate exists in the data"
NO_SERIES = "No metric series exists for HighErrorRate"


# --- tokens ----------------------------------------------------------------------------------


def test_extract_tokens_finds_every_kind_of_specific() -> None:
    tokens = claim_tokens(
        "order-service 在 10:00 后 HTTP 500 错误率 12.5%，超时 30s，"
        "抛出 SQLTimeoutException，错误码 ORA-01555，payments 也受影响。",
        ["payments"],
    )
    assert tokens == [
        "10:00",
        "500",
        "12.5%",
        "30s",
        "sqltimeoutexception",
        "ora-01555",
        "payments",
        "order-service",
    ]


def test_extract_tokens_ignores_plain_words_and_log_levels() -> None:
    assert claim_tokens("The Error rate is high and ERROR logs exist") == []
    assert claim_tokens("数据库连接池耗尽") == []


def test_extract_tokens_reads_full_width_characters() -> None:
    assert claim_tokens("ＨＴＴＰ ５００") == ["500"]


# --- labels ----------------------------------------------------------------------------------


def test_check_claims_all_tokens_present_is_direct_observation() -> None:
    output, gatekeeper = _case("order-service returned HTTP 500 after 30s")
    result = check(output, gatekeeper, TRACE)
    checked = result["claim_checks"][0]
    assert checked["verification"] == "direct_observation"
    assert checked["evidence_refs"] == [
        {"trace_ref": "t1", "tool_name": "query_logs", "source_invocation_ids": ["inv-1"]}
    ]
    assert "500" in checked["detail"] and "missing" not in checked["detail"]
    assert result["verdict"] == "PASS"
    assert result["groundedness_score"] == 1.0
    assert result["critical_fact_count"] == 1


def test_check_claims_some_tokens_missing_is_overstated() -> None:
    output, gatekeeper = _case("order-service returned HTTP 500 and 503 errors")
    result = check(output, gatekeeper, TRACE)
    checked = result["claim_checks"][0]
    assert checked["verification"] == "overstated"
    assert "missing: 503" in checked["detail"]
    assert result["verdict"] == "LOW_CONFID"
    assert result["groundedness_score"] == 0.6


LABEL_CASES: dict[str, list[tuple[str, dict[str, Any], str]]] = {
    "no_token_present_is_unsupported": [("payment-service returned HTTP 502", {}, "unsupported")],
    "number_inside_a_longer_number_does_not_count": [
        # "5" is not stated by "500", nor "2.5%" by "12.5%"
        ("order-service had 5 errors", {}, "overstated"),
        ("error ratio was 2.5%", {"sources": ("alerts[0]",)}, "unsupported"),
        ("error ratio was 12.5%", {"sources": ("alerts[0]",)}, "direct_observation"),
    ],
    "exception_names_compare_case_insensitively": [
        ("order-service threw sqltransientconnectionexception", {}, "direct_observation"),
        ("order-service threw SQLTimeoutException", {}, "overstated"),
    ],
    "known_services_are_tokens": [
        ("checkout reports HTTP 500", {"known_services": ["checkout"]}, "overstated"),
        ("checkout reports HTTP 500", {}, "direct_observation"),
    ],
    "knowledge_text_does_not_support_incident_tokens": [
        # "50" is only in the runbook, not in the incident evidence
        (
            "order-service pool size is 50 and it returned 500",
            {"sources": ("logs[0]", "documents[0]")},
            "overstated",
        )
    ],
    "indirect_support_is_at_most_inference": [
        ("order-service returned HTTP 500", {"support_level": "indirect"}, "reasonable_inference")
    ],
    "tokenless_observation_with_word_overlap_is_direct": [
        ("Cannot acquire connection from the pool", {}, "direct_observation")
    ],
    "tokenless_observation_without_overlap_is_inference": [
        ("Database replicas are lagging behind", {}, "reasonable_inference"),
        (
            "Cannot acquire connection from the pool",
            {"support_level": "indirect"},
            "reasonable_inference",
        ),
    ],
    "tokenless_cjk_claim_is_inference": [("数据库连接池耗尽", {}, "reasonable_inference")],
    "tokenless_negated_claim_without_negation_in_evidence_is_inference": [
        (
            "The error ratio was not acknowledged",
            {"sources": ("alerts[0]",)},
            "reasonable_inference",
        )
    ],
    # "Cannot acquire connection" in the log is a negation: the claim restates it.
    "tokenless_negated_claim_restating_a_negation_in_evidence_is_direct": [
        ("Connection from the pool was not acquired", {}, "direct_observation")
    ],
    "positive_claim_on_zero_match_summary_is_unsupported": [
        ("payment-service has ERROR logs", {"sources": ("summary-zero",)}, "unsupported"),
        # an absence typed as a plain observation still reads as one
        ("payment-service 没有 ERROR 日志", {"sources": ("summary-zero",)}, "direct_observation"),
    ],
    "positive_alert_claim_on_zero_alerts_summary_is_unsupported": [
        ("payment-service alert is firing", {"sources": ("summary-no-alert",)}, "unsupported")
    ],
    "time_range_counts_when_both_ends_are_stated": [
        (
            "payment-service 在 10:00-10:30 没有 ERROR 日志",
            negative("summary-zero"),
            "direct_observation",
        )
    ],
    "negative_observation_on_zero_match_summary_is_direct": [
        ("payment-service had no ERROR logs", negative("summary-zero"), "direct_observation"),
        ("no ERROR logs in the window", negative("summary-zero"), "direct_observation"),
    ],
    "zero_match_reads_separate_alert_and_series_counts": [
        (NO_ALERT, negative("summary-metrics-zero"), "direct_observation"),
        # zero alerts is an observed absence for a claim about alerts, whatever the series count
        (NO_ALERT, negative("summary-metrics-some"), "direct_observation"),
        # but not for a claim about metric series when series were found
        (NO_SERIES, negative("summary-metrics-zero"), "direct_observation"),
        (NO_SERIES, negative("summary-metrics-some"), "reasonable_inference"),
    ],
    "negative_observation_tokens_must_match_the_summary": [
        ("order-service had no ERROR logs", negative("summary-zero"), "unsupported")
    ],
    "negative_observation_without_zero_match_is_not_direct": [
        ("order-service had no ERROR logs", negative("summary-found"), "reasonable_inference")
    ],
    "no_alert_claim_on_zero_alerts_metrics_summary_is_direct": [
        ("payment-service has no firing alert", negative("summary-no-alert"), "direct_observation"),
        ("payment-service 没有告警", negative("summary-no-alert"), "direct_observation"),
    ],
    "no_series_claim_on_a_summary_with_series_is_not_direct": [
        # the summary found two series: it observes no absence of metrics
        (
            "payment-service has no metric series",
            negative("summary-no-alert"),
            "reasonable_inference",
        )
    ],
}
"""Claims of one test, by its name: the text, the options of ``_label`` and the label expected."""


@pytest.mark.parametrize("cases", LABEL_CASES.values(), ids=LABEL_CASES.keys())
def test_check_claims(cases: list[tuple[str, dict[str, Any], str]]) -> None:
    for text, options, expected in cases:
        assert _label(text, **options) == expected, (text, options)


def test_check_claims_without_verified_binding_is_unsupported() -> None:
    output, gatekeeper = _case("order-service returned HTTP 500")
    gatekeeper["verified_excerpts"] = {}
    result = check(output, gatekeeper, TRACE)
    assert result["claim_checks"][0]["verification"] == "unsupported"
    assert result["claim_checks"][0]["evidence_refs"] == []


def test_check_claims_knowledge_only_is_external_unknown() -> None:
    output, gatekeeper = _case("HTTP 500 means the pool size must be 50", sources=("documents[0]",))
    result = check(output, gatekeeper, TRACE)
    checked = result["claim_checks"][0]
    assert checked["verification"] == "external_unknown"
    assert checked["evidence_refs"][0]["trace_ref"] == "t3"


@pytest.mark.parametrize("claim_type", ["correlation", "causal", "state"])
def test_check_claims_inferential_types_are_at_most_inference(claim_type: str) -> None:
    assert _label("order-service returned HTTP 500", claim_type=claim_type) == (
        "reasonable_inference"
    )
    assert _label("the pool exhaustion caused the outage", claim_type=claim_type) == (
        "reasonable_inference"
    )


# --- refs, agreement, robustness -------------------------------------------------------------


def test_check_claims_refs_come_from_trace_items_of_verified_invocations() -> None:
    output, gatekeeper = _case(
        "order-service HighErrorRate at 12.5% with HTTP 500", sources=("logs[0]", "alerts[0]")
    )
    checked = check(output, gatekeeper, TRACE)["claim_checks"][0]
    assert checked["verification"] == "direct_observation"
    assert [r["trace_ref"] for r in checked["evidence_refs"]] == ["t1", "t2"]


def test_check_claims_direct_without_trace_item_is_downgraded() -> None:
    output, gatekeeper = _case("order-service returned HTTP 500")
    result = check(output, gatekeeper, [])
    assert result["claim_checks"][0]["verification"] == "unsupported"
    assert result["verdict"] == "LOW_CONFID"


def test_check_claims_verdict_and_score_agree_with_decide() -> None:
    output, gatekeeper = _case("order-service returned HTTP 500")
    claims = json_list(output["claims"])
    claims.append(
        {
            "claim_id": "c2",
            "claim_type": "causal",
            "claim_text": "the pool exhaustion caused the HTTP 500",
            "support_level": "indirect",
            "evidence_bindings": json_object(claims[0])["evidence_bindings"],
        }
    )
    claims.append({"claim_id": "c3", "claim_text": "payment-service is down"})
    gatekeeper["verified_excerpts"]["c2"] = gatekeeper["verified_excerpts"]["c1"]
    reply = reply_of(output, gatekeeper, TRACE)
    final = decide(
        read_answer(VALID, output),
        gatekeeper,
        reply,
        parse_status=VALID,
        trace=TRACE,
        mode="offline",
    )
    assert [c["verification"] for c in final["claim_checks"]] == [
        "direct_observation",
        "reasonable_inference",
        "unsupported",
    ]
    assert final["groundedness_score"] == reply["groundedness_score"] == 0.5333
    assert final["verdict"] == reply["verdict"] == "LOW_CONFID"
    assert "3 claim" in reply["rationale"]


def test_check_claims_no_claims_scores_zero() -> None:
    output, gatekeeper = _case("x")
    output["claims"] = []
    result = reply_of(output, gatekeeper, TRACE)
    assert result["groundedness_score"] == 0.0
    assert result["claim_checks"] == []
    assert result["verdict"] == "LOW_CONFID"


# --- contradictions: opposite states and polarity ----------------------------------------------

# (claim, log message): the message states the opposite of the claim.
CONTRADICTED = [
    pytest.param("the database orders-db is up", "database orders-db down", id="up-vs-down"),
    pytest.param("the database orders-db is down", "database orders-db up", id="down-vs-up"),
    pytest.param(
        "the deploy of v2.3.1 succeeded", "deploy of v2.3.1 failed", id="succeeded-vs-failed"
    ),
    pytest.param(
        "the deploy of v2.3.1 failed", "deploy of v2.3.1 succeeded", id="failed-vs-succeeded"
    ),
    pytest.param("the health check passed", "health check failed", id="passed-vs-failed"),
    pytest.param(
        "the index orders_by_customer is present",
        "index orders_by_customer missing",
        id="present-vs-missing",
    ),
    pytest.param(
        "the index orders_by_customer is missing",
        "index orders_by_customer present",
        id="missing-vs-present",
    ),
    pytest.param(
        "the index orders_by_customer exists",
        "index orders_by_customer absent",
        id="exists-vs-absent",
    ),
    pytest.param(
        "the index orders_by_customer is present",
        "index orders_by_customer not found",
        id="present-vs-not-found",
    ),
    pytest.param(
        "the index orders_by_customer was not found",
        "index orders_by_customer present",
        id="not-found-vs-present",
    ),
    pytest.param("数据库 orders-db 正常", "数据库 orders-db 异常", id="zh-normal-vs-abnormal"),
    pytest.param("数据库 orders-db 异常", "数据库 orders-db 正常", id="zh-abnormal-vs-normal"),
    pytest.param("v2.3.1 发布成功", "v2.3.1 发布失败", id="zh-succeeded-vs-failed"),
    pytest.param("v2.3.1 发布失败", "v2.3.1 发布成功", id="zh-failed-vs-succeeded"),
    pytest.param(
        "索引 orders_by_customer 存在", "索引 orders_by_customer 缺失", id="zh-present-vs-missing"
    ),
    pytest.param(
        "索引 orders_by_customer 存在",
        "索引 orders_by_customer 不存在",
        id="zh-present-vs-not-present",
    ),
    pytest.param(
        "索引 orders_by_customer 不存在",
        "索引 orders_by_customer 存在",
        id="zh-not-present-vs-present",
    ),
    pytest.param("order-service 没有异常", "order-service 宕机", id="zh-no-abnormality-vs-down"),
    pytest.param("order-service 无异常", "order-service 异常", id="zh-no-abnormality-vs-abnormal"),
]

# (claim, log message, label): the same state on both sides, or states that do not exclude each
# other; the claim is grounded, never contradicted.
AGREEING = [
    pytest.param(
        "the database orders-db is up", "database orders-db up", "direct_observation", id="up"
    ),
    pytest.param(
        "the database orders-db is down", "database orders-db down", "direct_observation", id="down"
    ),
    pytest.param("the deploy succeeded", "deploy succeeded", "direct_observation", id="succeeded"),
    pytest.param("the deploy failed", "deploy failed", "direct_observation", id="failed"),
    pytest.param(
        "the index orders_by_customer is present",
        "index orders_by_customer present",
        "direct_observation",
        id="present",
    ),
    pytest.param(
        "the index orders_by_customer is missing",
        "index orders_by_customer missing",
        "direct_observation",
        id="missing",
    ),
    pytest.param(
        "the index orders_by_customer was not found",
        "index orders_by_customer not found",
        "direct_observation",
        id="not-found",
    ),
    pytest.param(
        "order-service is healthy",
        "order-service alert resolved",
        "direct_observation",
        id="healthy-and-resolved",
    ),
    pytest.param(
        "order-service 发布成功", "order-service 发布成功", "direct_observation", id="zh-succeeded"
    ),
    pytest.param(
        "order-service 异常", "order-service 异常", "direct_observation", id="zh-abnormal"
    ),
    pytest.param(
        "order-service 不存在", "order-service 不存在", "direct_observation", id="zh-not-present"
    ),
    pytest.param(
        "order-service 正常",
        "order-service 告警已恢复",
        "direct_observation",
        id="zh-normal-and-recovered",
    ),
    pytest.param(
        "order-service 告警触发",
        "order-service 异常",
        "direct_observation",
        id="zh-firing-and-abnormal",
    ),
    pytest.param(
        "order-service retries calls to orders-db up to 3 times",
        "orders-db down; order-service retries calls to orders-db 3 times",
        "direct_observation",
        id="up-to-is-no-state",
    ),
    pytest.param(
        "order-service errors spiked up after orders-db went down",
        "orders-db went down; order-service errors spiked",
        "direct_observation",
        id="spiked-up-is-no-state",
    ),
    pytest.param(
        "order-service 没有异常",
        "order-service 运行正常",
        "direct_observation",
        id="zh-no-abnormality-and-normal",
    ),
]


def _against(text: str, message: str) -> Decision:
    """The offline decision on claim c1 bound to one log line whose message is ``message``."""
    ref_text = f"2026-03-01T10:05:00Z ERROR order-service order-1: {message}"
    output = executor_output(claim("c1", text, binding("inv-1", "logs[0]", message)))
    gatekeeper = gatekeeper_result({"c1": [excerpt("inv-1", "query_logs", "logs[0]", ref_text)]})
    return check(output, gatekeeper, TRACE)


@pytest.mark.parametrize(("text", "message"), CONTRADICTED)
def test_check_claims_opposite_state_in_the_evidence_is_contradicted(
    text: str, message: str
) -> None:
    result = _against(text, message)
    checked = result["claim_checks"][0]

    assert checked["verification"] == "contradicted", checked["detail"]
    assert result["verdict"] == "REJECT"
    assert result["groundedness_score"] == 0.0


@pytest.mark.parametrize(("text", "message", "label"), AGREEING)
def test_check_claims_same_state_in_the_evidence_is_not_contradicted(
    text: str, message: str, label: str
) -> None:
    result = _against(text, message)
    checked = result["claim_checks"][0]

    assert checked["verification"] == label, checked["detail"]
    assert result["verdict"] == "PASS"
