"""Deterministic claim checker: labels, tokens, evidence refs, and agreement with verdict code."""

from __future__ import annotations

from typing import Any

import pytest

from verification.claim_checker import check_claims, extract_tokens
from verification.verdict import finalize

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
RUNBOOK_TEXT = "Connection pool runbook (wiki): when HTTP 500 appears, raise the pool size to 50"

TRACE: list[dict[str, Any]] = [
    {"trace_ref": "t1", "tool_name": "query_logs", "source_invocation_ids": ["inv-1", "inv-4"]},
    {"trace_ref": "t2", "tool_name": "query_metrics", "source_invocation_ids": ["inv-2"]},
    {"trace_ref": "t3", "tool_name": "lookup_knowledge", "source_invocation_ids": ["inv-3"]},
    {"trace_ref": "t4", "tool_name": "query_logs", "source_invocation_ids": ["inv-5"]},
]

_SOURCES = {
    "logs[0]": ("inv-1", "query_logs", LOG_TEXT),
    "alerts[0]": ("inv-2", "query_metrics", ALERT_TEXT),
    "documents[0]": ("inv-3", "lookup_knowledge", RUNBOOK_TEXT),
    "summary-zero": ("inv-5", "query_logs", ZERO_SUMMARY),
    "summary-found": ("inv-4", "query_logs", FOUND_SUMMARY),
}


def _case(
    text: str,
    *,
    sources: tuple[str, ...] = ("logs[0]",),
    claim_type: str = "observation",
    support_level: str = "direct",
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One claim c1 bound to the given sources, all verified by the Gatekeeper."""
    bindings = []
    excerpts = []
    for i, key in enumerate(sources):
        inv, tool, ref_text = _SOURCES[key]
        raw_path = "summary" if key.startswith("summary") else key
        bindings.append(
            {
                "source_type": "log",
                "tool_name": tool,
                "source_invocation_id": inv,
                "raw_path": raw_path,
                "evidence_excerpt": ref_text[:10],
            }
        )
        excerpts.append(
            {
                "binding": i,
                "invocation_id": inv,
                "tool_name": tool,
                "raw_path": raw_path,
                "text": ref_text,
            }
        )
    output = {
        "answer_version": "executor_evidence_v2",
        "claims": [
            {
                "claim_id": "c1",
                "claim_type": claim_type,
                "claim_text": text,
                "support_level": support_level,
                "evidence_bindings": bindings,
            }
        ],
        "hypotheses": [],
        "recommended_actions": [],
        "missing_info": [],
    }
    gatekeeper = {
        "status": "pass",
        "severity": "none",
        "failed_rules": [],
        "verified_excerpts": {"c1": excerpts} if excerpts else {},
    }
    return output, gatekeeper


def _label(text: str, **kwargs: Any) -> str:
    known = kwargs.pop("known_services", None)
    output, gatekeeper = _case(text, **kwargs)
    result = check_claims(output, gatekeeper, TRACE, known_services=known)
    return str(result["claim_checks"][0]["verification"])


# --- tokens ----------------------------------------------------------------------------------


def test_extract_tokens_finds_every_kind_of_specific() -> None:
    tokens = extract_tokens(
        "order-service 在 10:00 后 HTTP 500 错误率 12.5%，超时 30s，"
        "抛出 SQLTimeoutException，错误码 ORA-01555，payments 也受影响。",
        known_services=["payments"],
    )
    assert tokens == [
        "10:00",
        "500",
        "12.5%",
        "30s",
        "ora-01555",
        "sqltimeoutexception",
        "payments",
        "order-service",
    ]


def test_extract_tokens_ignores_plain_words_and_log_levels() -> None:
    assert extract_tokens("The Error rate is high and ERROR logs exist") == []
    assert extract_tokens("数据库连接池耗尽") == []


def test_extract_tokens_reads_full_width_characters() -> None:
    assert extract_tokens("ＨＴＴＰ ５００") == ["500"]


# --- labels ----------------------------------------------------------------------------------


def test_check_claims_all_tokens_present_is_direct_observation() -> None:
    output, gatekeeper = _case("order-service returned HTTP 500 after 30s")
    result = check_claims(output, gatekeeper, TRACE)
    check = result["claim_checks"][0]
    assert check["verification"] == "direct_observation"
    assert check["evidence_refs"] == [
        {"trace_ref": "t1", "tool_name": "query_logs", "source_invocation_ids": ["inv-1"]}
    ]
    assert "500" in check["detail"] and "missing" not in check["detail"]
    assert result["verdict"] == "PASS"
    assert result["groundedness_score"] == 1.0
    assert result["critical_fact_count"] == 1


def test_check_claims_some_tokens_missing_is_overstated() -> None:
    output, gatekeeper = _case("order-service returned HTTP 500 and 503 errors")
    result = check_claims(output, gatekeeper, TRACE)
    check = result["claim_checks"][0]
    assert check["verification"] == "overstated"
    assert "missing: 503" in check["detail"]
    assert result["verdict"] == "LOW_CONFID"
    assert result["groundedness_score"] == 0.6


def test_check_claims_no_token_present_is_unsupported() -> None:
    assert _label("payment-service returned HTTP 502") == "unsupported"


def test_check_claims_number_inside_a_longer_number_does_not_count() -> None:
    # "5" is not stated by "500", nor "2.5%" by "12.5%"
    assert _label("order-service had 5 errors") == "overstated"
    assert _label("error ratio was 2.5%", sources=("alerts[0]",)) == "unsupported"
    assert _label("error ratio was 12.5%", sources=("alerts[0]",)) == "direct_observation"


def test_check_claims_exception_names_compare_case_insensitively() -> None:
    assert _label("order-service threw sqltransientconnectionexception") == "direct_observation"
    assert _label("order-service threw SQLTimeoutException") == "overstated"


def test_check_claims_known_services_are_tokens() -> None:
    assert _label("checkout reports HTTP 500", known_services=["checkout"]) == "overstated"
    assert _label("checkout reports HTTP 500") == "direct_observation"


def test_check_claims_time_range_counts_when_both_ends_are_stated() -> None:
    label = _label(
        "payment-service 在 10:00-10:30 没有 ERROR 日志",
        sources=("summary-zero",),
        claim_type="negative_observation",
    )
    assert label == "direct_observation"


def test_check_claims_without_verified_binding_is_unsupported() -> None:
    output, gatekeeper = _case("order-service returned HTTP 500")
    gatekeeper["verified_excerpts"] = {}
    result = check_claims(output, gatekeeper, TRACE)
    assert result["claim_checks"][0]["verification"] == "unsupported"
    assert result["claim_checks"][0]["evidence_refs"] == []


def test_check_claims_knowledge_only_is_external_unknown() -> None:
    output, gatekeeper = _case("HTTP 500 means the pool size must be 50", sources=("documents[0]",))
    result = check_claims(output, gatekeeper, TRACE)
    check = result["claim_checks"][0]
    assert check["verification"] == "external_unknown"
    assert check["evidence_refs"][0]["trace_ref"] == "t3"


def test_check_claims_knowledge_tool_read_from_binding_when_excerpt_lacks_it() -> None:
    output, gatekeeper = _case("raise the pool size to 50", sources=("documents[0]",))
    del gatekeeper["verified_excerpts"]["c1"][0]["tool_name"]
    assert check_claims(output, gatekeeper, TRACE)["claim_checks"][0]["verification"] == (
        "external_unknown"
    )


def test_check_claims_knowledge_text_does_not_support_incident_tokens() -> None:
    # "50" is only in the runbook, not in the incident evidence
    label = _label(
        "order-service pool size is 50 and it returned 500", sources=("logs[0]", "documents[0]")
    )
    assert label == "overstated"


@pytest.mark.parametrize("claim_type", ["correlation", "causal", "state"])
def test_check_claims_inferential_types_are_at_most_inference(claim_type: str) -> None:
    assert _label("order-service returned HTTP 500", claim_type=claim_type) == (
        "reasonable_inference"
    )
    assert _label("the pool exhaustion caused the outage", claim_type=claim_type) == (
        "reasonable_inference"
    )


def test_check_claims_indirect_support_is_at_most_inference() -> None:
    assert _label("order-service returned HTTP 500", support_level="indirect") == (
        "reasonable_inference"
    )


def test_check_claims_tokenless_observation_with_word_overlap_is_direct() -> None:
    assert _label("Cannot acquire connection from the pool") == "direct_observation"


def test_check_claims_tokenless_observation_without_overlap_is_inference() -> None:
    assert _label("Database replicas are lagging behind") == "reasonable_inference"
    assert _label("Cannot acquire connection from the pool", support_level="indirect") == (
        "reasonable_inference"
    )


def test_check_claims_tokenless_cjk_claim_is_inference() -> None:
    assert _label("数据库连接池耗尽") == "reasonable_inference"


def test_check_claims_tokenless_negated_claim_without_negation_in_evidence_is_inference() -> None:
    assert _label("Connection from the pool was not acquired") == "reasonable_inference"


def test_check_claims_negative_observation_on_zero_match_summary_is_direct() -> None:
    assert (
        _label(
            "payment-service had no ERROR logs",
            sources=("summary-zero",),
            claim_type="negative_observation",
        )
        == "direct_observation"
    )
    assert (
        _label(
            "no ERROR logs in the window",
            sources=("summary-zero",),
            claim_type="negative_observation",
        )
        == "direct_observation"
    )


def test_check_claims_negative_observation_tokens_must_match_the_summary() -> None:
    assert (
        _label(
            "order-service had no ERROR logs",
            sources=("summary-zero",),
            claim_type="negative_observation",
        )
        == "unsupported"
    )


def test_check_claims_negative_observation_without_zero_match_is_not_direct() -> None:
    assert (
        _label(
            "order-service had no ERROR logs",
            sources=("summary-found",),
            claim_type="negative_observation",
        )
        == "reasonable_inference"
    )


def test_check_claims_positive_claim_on_zero_match_summary_is_unsupported() -> None:
    assert _label("payment-service has ERROR logs", sources=("summary-zero",)) == "unsupported"
    # an absence typed as a plain observation still reads as one
    assert _label("payment-service 没有 ERROR 日志", sources=("summary-zero",)) == (
        "direct_observation"
    )


# --- refs, agreement, robustness -------------------------------------------------------------


def test_check_claims_refs_come_from_trace_items_of_verified_invocations() -> None:
    output, gatekeeper = _case(
        "order-service HighErrorRate at 12.5% with HTTP 500", sources=("logs[0]", "alerts[0]")
    )
    check = check_claims(output, gatekeeper, TRACE)["claim_checks"][0]
    assert check["verification"] == "direct_observation"
    assert [r["trace_ref"] for r in check["evidence_refs"]] == ["t1", "t2"]


def test_check_claims_direct_without_trace_item_is_downgraded() -> None:
    output, gatekeeper = _case("order-service returned HTTP 500")
    result = check_claims(output, gatekeeper, [])
    assert result["claim_checks"][0]["verification"] == "unsupported"
    assert result["verdict"] == "LOW_CONFID"


def test_check_claims_verdict_and_score_agree_with_finalize() -> None:
    output, gatekeeper = _case("order-service returned HTTP 500")
    output["claims"].append(
        {
            "claim_id": "c2",
            "claim_type": "causal",
            "claim_text": "the pool exhaustion caused the HTTP 500",
            "support_level": "indirect",
            "evidence_bindings": output["claims"][0]["evidence_bindings"],
        }
    )
    output["claims"].append({"claim_id": "c3", "claim_text": "payment-service is down"})
    gatekeeper["verified_excerpts"]["c2"] = gatekeeper["verified_excerpts"]["c1"]
    raw = check_claims(output, gatekeeper, TRACE)
    assert [c["verification"] for c in raw["claim_checks"]] == [
        "direct_observation",
        "reasonable_inference",
        "unsupported",
    ]
    final = finalize(
        raw,
        structured_output=output,
        parse_status={"status": "valid", "fence_stripped": False, "error": None},
        gatekeeper_result=gatekeeper,
        trace_summary=TRACE,
        mode="offline",
    )
    assert final["groundedness_score"] == raw["groundedness_score"] == 0.5333
    assert final["verdict"] == raw["verdict"] == "LOW_CONFID"
    assert final["notes"] == []
    assert set(raw) == {
        "verdict",
        "groundedness_score",
        "critical_fact_count",
        "claim_checks",
        "rationale",
    }
    assert "3 claim" in raw["rationale"]


@pytest.mark.parametrize(
    ("structured_output", "gatekeeper", "trace"),
    [
        (None, {}, []),
        ("text", None, None),
        ({"claims": "x"}, {"verified_excerpts": []}, "t"),
        (
            {"claims": [None, 3, {"claim_id": 5}, {"claim_id": "c1", "claim_text": 7}]},
            {
                "verified_excerpts": {
                    "c1": [None, {"text": 3}, {"text": "HTTP 500", "binding": "x"}]
                }
            },
            [None, {"trace_ref": None}, {"trace_ref": "t1", "source_invocation_ids": "inv-1"}],
        ),
    ],
    ids=["none", "strings", "wrong-types", "junk-items"],
)
def test_check_claims_never_raises_on_garbage(
    structured_output: Any, gatekeeper: Any, trace: Any
) -> None:
    result = check_claims(structured_output, gatekeeper, trace)
    assert result["verdict"] == "LOW_CONFID"
    assert all(c["verification"] != "direct_observation" for c in result["claim_checks"])


def test_check_claims_no_claims_scores_zero() -> None:
    result = check_claims({"claims": []}, {"status": "pass"}, TRACE)
    assert result["groundedness_score"] == 0.0
    assert result["claim_checks"] == []
    assert result["verdict"] == "LOW_CONFID"
