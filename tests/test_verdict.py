"""The verdict, decided in one place: labels, legacy facts, score, derived/effective verdict.

Replies and executor outputs are written as the untrusted JSON they are, and read through the
same edge readers the graph uses (``read_verifier_reply``, ``read_answer``).
"""

from __future__ import annotations

import pytest

from state.records import (
    CLAIM_LABELS,
    VERDICTS,
    ClaimCheck,
    ClaimLabel,
    Decision,
    FactCheck,
    FactLabel,
    GatekeeperResult,
    GatekeeperStatus,
    JSONObject,
    ParseStatus,
    Severity,
    TraceCitation,
    TraceItem,
    VerifierMode,
)
from tests import records
from tests.records import VALID, json_list, json_object
from tests.scenario_kit import check
from verification.executor_output import read_answer
from verification.verdict import (
    LEGACY,
    VALUES,
    claim_checks,
    decide,
    derive_verdict,
    facts_of,
    groundedness_score,
    strictest,
)
from verification.verifier_reply import read_verifier_reply

MALFORMED: ParseStatus = {"status": "malformed", "fence_stripped": False, "error": "bad JSON"}
MISSING: ParseStatus = {"status": "missing", "fence_stripped": False, "error": None}

TRACE: list[TraceItem] = [
    records.trace_item(
        "t1",
        "query_logs",
        ["inv-1", "inv-3"],
        input_summary="service=order-service level=ERROR",
        output_summary="HTTP 500 Cannot acquire connection from pool",
    ),
    records.trace_item(
        "t2",
        "query_metrics",
        ["inv-2"],
        input_summary="service=order-service",
        output_summary="HighErrorRate firing value=12.5",
    ),
]
LOG_TEXT = "2026-03-01T10:01:00Z ERROR order-service order-1: HTTP 500"


def _output(*claim_ids: str) -> JSONObject:
    return records.executor_output(
        *(
            records.claim(cid, f"claim {cid} text", records.binding("inv-1", "logs[0]", "HTTP 500"))
            for cid in claim_ids
        )
    )


def _gatekeeper(
    verified: tuple[str, ...],
    *,
    status: GatekeeperStatus = "pass",
    severity: Severity = "none",
) -> GatekeeperResult:
    return records.gatekeeper_result(
        {cid: [records.excerpt("inv-1", "query_logs", "logs[0]", LOG_TEXT)] for cid in verified},
        status=status,
        severity=severity,
    )


def _labels(checks: list[ClaimCheck]) -> list[str]:
    return [c["verification"] for c in checks]


def finalize(
    raw: object,
    *,
    structured_output: object,
    parse_status: ParseStatus,
    gatekeeper_result: GatekeeperResult,
    trace_summary: list[TraceItem],
    mode: VerifierMode,
) -> Decision:
    """``decide`` on a raw reply and a raw executor object, read as the graph reads them."""
    return decide(
        read_answer(VALID, structured_output),
        gatekeeper_result,
        read_verifier_reply(raw),
        parse_status=parse_status,
        trace=trace_summary,
        mode=mode,
    )


def normalize_claim_checks(
    raw_checks: object,
    structured_output: object,
    gatekeeper_result: GatekeeperResult,
    trace_summary: list[TraceItem],
) -> tuple[list[ClaimCheck], list[str]]:
    """Rule 1 of ``decide`` alone, on raw checks."""
    reply = read_verifier_reply({"claim_checks": raw_checks})
    notes = list(reply["notes"])
    answer = read_answer(VALID, structured_output)
    checks = claim_checks(answer, reply["claim_checks"], gatekeeper_result, trace_summary, notes)
    return checks, notes


def _normalize_c1(raw_checks: object) -> tuple[list[ClaimCheck], list[str]]:
    """``normalize_claim_checks`` for one claim c1 that the Gatekeeper verified."""
    return normalize_claim_checks(raw_checks, _output("c1"), _gatekeeper(("c1",)), TRACE)


def _checks(*labels: ClaimLabel) -> list[ClaimCheck]:
    return [
        ClaimCheck(
            claim_id=f"c{i}",
            verification=label,
            detail="",
            evidence_refs=[],
            model_verification=None,
        )
        for i, label in enumerate(labels, start=1)
    ]


def _run(
    labels: dict[str, str],
    *,
    verified: tuple[str, ...] | None = None,
    model_verdict: str = "PASS",
    parse_status: ParseStatus | None = None,
    mode: VerifierMode = "model",
    status: GatekeeperStatus = "pass",
    severity: Severity = "none",
) -> Decision:
    claim_ids = tuple(labels)
    raw = {
        "verdict": model_verdict,
        "groundedness_score": 0.99,
        "critical_fact_count": len(labels),
        "claim_checks": [check(cid, label) for cid, label in labels.items()],
        "rationale": "because",
    }
    return finalize(
        raw,
        structured_output=_output(*claim_ids),
        parse_status=VALID if parse_status is None else parse_status,
        gatekeeper_result=_gatekeeper(
            claim_ids if verified is None else verified, status=status, severity=severity
        ),
        trace_summary=TRACE,
        mode=mode,
    )


# --- constants -------------------------------------------------------------------------------


def test_verdict_constants_cover_the_contract() -> None:
    assert set(VERDICTS) == {"PASS", "LOW_CONFID", "REJECT"}
    assert set(CLAIM_LABELS) == set(LEGACY)
    assert VALUES == {
        "direct_evidence": 1.0,
        "indirect_support": 0.6,
        "no_evidence": 0.0,
        "contradicted": 0.0,
    }


@pytest.mark.parametrize(
    ("label", "legacy"),
    [
        ("direct_observation", "direct_evidence"),
        ("reasonable_inference", "indirect_support"),
        ("overstated", "indirect_support"),
        ("unsupported", "no_evidence"),
        ("external_unknown", "no_evidence"),
        ("contradicted", "contradicted"),
    ],
    ids=lambda v: str(v),
)
def test_facts_of_maps_every_label(label: ClaimLabel, legacy: FactLabel) -> None:
    answer = read_answer(VALID, _output("c1"))
    citation = TraceCitation(
        trace_ref="t1", tool_name="query_logs", source_invocation_ids=["inv-1"]
    )
    checks: list[ClaimCheck] = [{**_checks(label)[0], "detail": "d", "evidence_refs": [citation]}]
    facts = facts_of(checks, answer)
    assert facts == [
        {
            "fact": "claim c1 text",
            "is_critical": True,
            "verification": legacy,
            "detail": "d",
            "evidence_refs": [citation],
        }
    ]


# --- score and derived verdict ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "score", "verdict"),
    [
        ({"c1": "direct_observation", "c2": "direct_observation"}, 1.0, "PASS"),
        ({"c1": "direct_observation", "c2": "contradicted"}, 0.0, "REJECT"),
        ({"c1": "reasonable_inference", "c2": "reasonable_inference"}, 0.6, "LOW_CONFID"),
        (
            {"c1": "direct_observation", "c2": "direct_observation", "c3": "unsupported"},
            0.6667,
            "LOW_CONFID",
        ),
        ({"c1": "direct_observation", "c2": "reasonable_inference"}, 0.8, "PASS"),
        ({"c1": "direct_observation", "c2": "overstated"}, 0.8, "LOW_CONFID"),
    ],
    ids=["all-direct", "contradicted", "inference-only", "one-unsupported", "mixed", "overstated"],
)
def test_finalize_score_and_verdict_examples(
    labels: dict[str, str], score: float, verdict: str
) -> None:
    result = _run(labels, model_verdict="PASS")
    assert result["groundedness_score"] == score
    assert result["derived_verdict"] == verdict
    assert result["verdict"] == verdict
    assert result["critical_fact_count"] == len(labels)


def test_finalize_no_claims_scores_zero_low_confid() -> None:
    result = finalize(
        {"verdict": "PASS", "claim_checks": []},
        structured_output=_output(),
        parse_status=VALID,
        gatekeeper_result=_gatekeeper(()),
        trace_summary=TRACE,
        mode="model",
    )
    assert result["groundedness_score"] == 0.0
    assert result["verdict"] == "LOW_CONFID"
    assert result["critical_fact_count"] == 0
    assert result["claim_checks"] == [] and result["facts_checked"] == []


def test_groundedness_score_rules() -> None:
    def fact(v: FactLabel, critical: bool = True) -> FactCheck:
        return FactCheck(
            fact="f", is_critical=critical, verification=v, detail="", evidence_refs=[]
        )

    assert groundedness_score([]) == 0.0
    assert groundedness_score([fact("direct_evidence"), fact("contradicted")]) == 0.0
    assert groundedness_score([fact("direct_evidence"), fact("no_evidence")]) == 0.5
    assert groundedness_score([fact("indirect_support")] * 3) == 0.6
    # non-critical facts do not count
    assert groundedness_score([fact("direct_evidence"), fact("no_evidence", False)]) == 1.0
    assert groundedness_score([fact("direct_evidence")] * 2 + [fact("no_evidence")]) == 0.6667


def test_derive_verdict_needs_a_direct_observation_and_no_gatekeeper_failure() -> None:
    mixed = _checks("direct_observation", "reasonable_inference")
    passing, warning = _gatekeeper(()), _gatekeeper((), status="warn")
    failing = _gatekeeper((), status="fail")
    assert derive_verdict(mixed, 0.8, passing) == "PASS"
    assert derive_verdict(mixed, 0.8, warning) == "PASS"
    assert derive_verdict(mixed, 0.8, failing) == "LOW_CONFID"
    assert derive_verdict(_checks("reasonable_inference"), 0.6, passing) == "LOW_CONFID"
    assert derive_verdict(_checks("direct_observation"), 0.4, passing) == "LOW_CONFID"
    assert derive_verdict([], 0.0, passing) == "LOW_CONFID"


# --- effective verdict -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("severity", "expected"),
    [("reject", "REJECT"), ("low_confid", "LOW_CONFID"), ("none", "PASS")],
)
def test_effective_verdict_gatekeeper_severity_caps(severity: Severity, expected: str) -> None:
    result = _run({"c1": "direct_observation"}, status="warn", severity=severity)
    assert result["derived_verdict"] == "PASS"
    assert result["verdict"] == expected


def test_finalize_model_pass_with_gatekeeper_reject_is_reject() -> None:
    result = _run(
        {"c1": "direct_observation"}, model_verdict="PASS", status="fail", severity="reject"
    )
    assert result["model_verdict"] == "PASS"
    assert result["verdict"] == "REJECT"


def test_finalize_gatekeeper_low_confid_caps_pass() -> None:
    result = _run({"c1": "direct_observation"}, status="warn", severity="low_confid")
    assert result["derived_verdict"] == "PASS"
    assert result["verdict"] == "LOW_CONFID"


@pytest.mark.parametrize("parse_status", [MALFORMED, MISSING], ids=["malformed", "missing"])
def test_finalize_parse_status_not_valid_caps_low_confid(parse_status: ParseStatus) -> None:
    result = _run({"c1": "direct_observation"}, parse_status=parse_status)
    assert result["derived_verdict"] == "PASS"
    assert result["verdict"] == "LOW_CONFID"


def test_finalize_parse_status_cap_keeps_stricter_reject() -> None:
    result = _run({"c1": "contradicted"}, parse_status=MALFORMED)
    assert result["verdict"] == "REJECT"


def test_finalize_model_stricter_than_derived_stands() -> None:
    result = _run({"c1": "direct_observation"}, model_verdict="REJECT")
    assert result["derived_verdict"] == "PASS"
    assert result["verdict"] == "REJECT"
    result = _run({"c1": "direct_observation"}, model_verdict="LOW_CONFID")
    assert result["verdict"] == "LOW_CONFID"


def test_finalize_model_looser_than_derived_does_not_stand() -> None:
    result = _run({"c1": "direct_observation", "c2": "unsupported"}, model_verdict="PASS")
    assert result["model_verdict"] == "PASS"
    assert result["derived_verdict"] == "LOW_CONFID"
    assert result["verdict"] == "LOW_CONFID"


def test_finalize_unknown_model_verdict_is_ignored() -> None:
    result = _run({"c1": "direct_observation"}, model_verdict="GREAT")
    assert result["model_verdict"] is None
    assert result["verdict"] == "PASS"
    assert any("GREAT" in note for note in result["notes"])


def test_strictest_verdict_ignores_absent_bounds() -> None:
    assert strictest(None, "PASS") == "PASS"
    assert strictest("PASS", "LOW_CONFID", None) == "LOW_CONFID"
    assert strictest("LOW_CONFID", "REJECT", "PASS") == "REJECT"


# --- normalisation ---------------------------------------------------------------------------


def test_normalize_unknown_label_becomes_unsupported() -> None:
    checks, notes = _normalize_c1([check("c1", "totally_true")])
    assert checks[0]["verification"] == "unsupported"
    assert checks[0]["model_verification"] == "totally_true"
    assert any("totally_true" in n for n in notes)


def test_normalize_tolerates_label_spelling() -> None:
    checks, _ = _normalize_c1([check("c1", " Direct Observation ")])
    assert checks[0]["verification"] == "direct_observation"


def test_normalize_missing_check_is_unsupported() -> None:
    checks, notes = normalize_claim_checks(
        [check("c1", "direct_observation")], _output("c1", "c2"), _gatekeeper(("c1", "c2")), TRACE
    )
    assert [c["claim_id"] for c in checks] == ["c1", "c2"]
    assert _labels(checks) == ["direct_observation", "unsupported"]
    assert checks[1]["detail"] == "not checked by the verifier"
    assert checks[1]["model_verification"] is None
    assert any("c2" in n and "not checked" in n for n in notes)


def test_normalize_follows_claim_order_and_drops_checks_for_unknown_claims() -> None:
    raw = [
        check("c2", "reasonable_inference"),
        check("c9", "direct_observation"),
        check("c1", "direct_observation"),
    ]
    checks, notes = normalize_claim_checks(
        raw, _output("c1", "c2"), _gatekeeper(("c1", "c2")), TRACE
    )
    assert [c["claim_id"] for c in checks] == ["c1", "c2"]
    assert _labels(checks) == ["direct_observation", "reasonable_inference"]
    assert any("c9" in n for n in notes)


def test_normalize_invalid_trace_ref_dropped_and_direct_downgraded() -> None:
    checks, notes = _normalize_c1([check("c1", "direct_observation", trace_ref="t7")])
    assert checks[0]["evidence_refs"] == []
    assert checks[0]["verification"] == "unsupported"
    assert checks[0]["model_verification"] == "direct_observation"
    assert any("t7" in n for n in notes)


def test_normalize_invalid_trace_ref_keeps_inference_label() -> None:
    checks, _ = _normalize_c1([check("c1", "reasonable_inference", trace_ref="t7")])
    assert checks[0]["verification"] == "reasonable_inference"
    assert checks[0]["evidence_refs"] == []


def test_normalize_drops_invocation_ids_not_in_trace_item_and_fills_tool_name() -> None:
    raw = check("c1", "direct_observation")
    ref = json_object(json_list(raw["evidence_refs"])[0])
    ref["source_invocation_ids"] = ["inv-1", "inv-2", "inv-99"]
    ref["tool_name"] = "made_up_tool"
    checks, notes = _normalize_c1([raw])
    assert checks[0]["evidence_refs"] == [
        {"trace_ref": "t1", "tool_name": "query_logs", "source_invocation_ids": ["inv-1"]}
    ]
    assert checks[0]["verification"] == "direct_observation"
    assert any("inv-2" in n for n in notes) and any("inv-99" in n for n in notes)


def test_normalize_unverified_claim_is_unsupported_but_contradicted_stays() -> None:
    raw = [check("c1", "direct_observation"), check("c2", "contradicted")]
    checks, notes = normalize_claim_checks(raw, _output("c1", "c2"), _gatekeeper(()), TRACE)
    assert _labels(checks) == ["unsupported", "contradicted"]
    assert any("c1" in n and "Gatekeeper" in n for n in notes)


def test_normalize_duplicate_checks_keep_the_strictest() -> None:
    checks, notes = _normalize_c1([check("c1", "direct_observation"), check("c1", "overstated")])
    assert len(checks) == 1
    assert checks[0]["verification"] == "overstated"
    assert any("more than once" in n for n in notes)


@pytest.mark.parametrize(
    "raw_checks",
    [None, "garbage", 42, [None, "x", {"claim_id": None}, {"verification": "direct_observation"}]],
    ids=["none", "string", "number", "junk-items"],
)
def test_reading_garbage_checks_leaves_every_claim_unsupported(raw_checks: object) -> None:
    checks, _ = _normalize_c1(raw_checks)
    assert _labels(checks) == ["unsupported"]


@pytest.mark.parametrize(
    "structured_output",
    [None, "text", {}, {"claims": "x"}, {"claims": None}],
    ids=["none", "string", "empty", "claims-string", "claims-none"],
)
def test_normalize_no_readable_claims_gives_no_checks(structured_output: object) -> None:
    checks, _ = normalize_claim_checks(
        [check("c1", "direct_observation")], structured_output, _gatekeeper(("c1",)), TRACE
    )
    assert checks == []


def test_claims_without_usable_ids_get_positional_ids() -> None:
    output = {
        "claims": [
            {"claim_text": "a"},
            {"claim_id": "", "claim_text": "b"},
            {"claim_id": "c1", "claim_text": "c"},
            {"claim_id": "c1", "claim_text": "d"},
            "bare text",
            7,
        ]
    }
    answer = read_answer(VALID, output)
    ids = [claim["claim_id"] for claim in answer["claims"]]
    assert ids == ["claims[0]", "claims[1]", "c1", "claims[3]", "claims[4]", "claims[5]"]
    gatekeeper = _gatekeeper(("claims[0]",))
    checks, _ = normalize_claim_checks(
        [check("claims[0]", "direct_observation")], output, gatekeeper, TRACE
    )
    assert _labels(checks)[0] == "direct_observation"
    assert _labels(checks)[1:] == ["unsupported"] * 5
    facts = facts_of(checks, answer)
    assert [f["fact"] for f in facts] == ["a", "b", "c", "d", "bare text", ""]


# --- finalize --------------------------------------------------------------------------------


def test_finalize_fallback_mode_is_capped_at_low_confid() -> None:
    result = _run({"c1": "direct_observation"}, mode="fallback")
    assert result["derived_verdict"] == "PASS"
    assert result["verdict"] == "LOW_CONFID"
    assert result["verifier_mode"] == "fallback"
    assert any("claim checker" in n for n in result["notes"])


def test_finalize_offline_mode_is_not_capped() -> None:
    result = _run({"c1": "direct_observation"}, mode="offline")
    assert result["verdict"] == "PASS"
    assert result["verifier_mode"] == "offline"


def test_finalize_result_shape_and_score_from_code() -> None:
    result = _run({"c1": "direct_observation", "c2": "reasonable_inference"})
    assert set(result) == {
        "verdict",
        "model_verdict",
        "derived_verdict",
        "groundedness_score",
        "critical_fact_count",
        "claim_checks",
        "facts_checked",
        "rationale",
        "verifier_mode",
        "notes",
        "unchecked",
        "question_coverage",
        "conclusion",
    }
    assert result["unchecked"] == []
    assert result["groundedness_score"] == 0.8  # the model said 0.99
    assert any("0.99" in n for n in result["notes"])
    assert result["rationale"] == "because"
    assert [f["verification"] for f in result["facts_checked"]] == [
        "direct_evidence",
        "indirect_support",
    ]
    assert set(result["claim_checks"][0]) == {
        "claim_id",
        "verification",
        "detail",
        "evidence_refs",
        "model_verification",
    }


@pytest.mark.parametrize("raw", [None, "not json", [], {"claim_checks": "x"}], ids=str)
def test_finalize_garbage_raw_output_is_unsupported_everywhere(raw: object) -> None:
    result = finalize(
        raw,
        structured_output=_output("c1"),
        parse_status=VALID,
        gatekeeper_result=_gatekeeper(("c1",)),
        trace_summary=TRACE,
        mode="model",
    )
    assert result["model_verdict"] is None
    assert _labels(result["claim_checks"]) == ["unsupported"]
    assert result["groundedness_score"] == 0.0
    assert result["verdict"] == "LOW_CONFID"


def test_normalize_meets_padded_claim_ids_at_their_normal_form() -> None:
    # The executor wrote " c1 " and the Verifier "c1" with a zero-width space: both read as
    # "c1", the id the Gatekeeper keys its excerpts by, so the check lands on its claim.
    output = _output("c1")
    json_object(json_list(output["claims"])[0])["claim_id"] = " c1 "
    checks, notes = normalize_claim_checks(
        [check("c1\u200b", "direct_observation")], output, _gatekeeper(("c1",)), TRACE
    )
    assert [c["claim_id"] for c in checks] == ["c1"]
    assert _labels(checks) == ["direct_observation"]
    assert notes == []


@pytest.mark.parametrize(
    "label", ["direct_observation", "reasonable_inference", "overstated"], ids=str
)
def test_verdict_claim_bound_only_to_knowledge_is_external_unknown(label: str) -> None:
    gate = _gatekeeper(("c1",))
    gate["verified_excerpts"]["c1"] = [
        records.excerpt("inv-1", "lookup_knowledge", "documents[0]", "Runbook (runbook/x.md): ...")
    ]
    result = finalize(
        {"verdict": "PASS", "claim_checks": [check("c1", label)]},
        structured_output=_output("c1"),
        parse_status=VALID,
        gatekeeper_result=gate,
        trace_summary=TRACE,
        mode="model",
    )

    assert _labels(result["claim_checks"]) == ["external_unknown"]
    assert result["verdict"] == "LOW_CONFID"
    assert result["groundedness_score"] == 0.0
