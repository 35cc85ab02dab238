from __future__ import annotations

from typing import Any

import pytest

from state.records import GatekeeperResult, ParseStatus, RuleEvaluation
from verification.executor_output import read_answer
from verification.gatekeeper import internal_error, run_gatekeeper
from verification.rule_evaluation import FORMULA_VERSION
from verification.rule_evaluation import evaluate_rules as evaluate_records

VALID: ParseStatus = {"status": "valid", "fence_stripped": False, "error": None}


def evaluate_rules(
    rows: list[Any], output: dict[str, Any] | None, gatekeeper: GatekeeperResult
) -> RuleEvaluation:
    """``evaluate_rules`` on a raw executor object, read as the graph reads it."""
    return evaluate_records(rows, read_answer(VALID, output), gatekeeper)
LOG_0 = "2026-03-01T10:05:00Z ERROR order-service order-1: Cannot acquire connection from pool"
LOG_1 = "2026-03-01T10:06:00Z ERROR order-service order-2: Connection is not available"


def make_invocation(
    number: int,
    tool_name: str,
    *,
    status: str = "ok",
    refs: list[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    return {
        "invocation_id": f"inv-{number}",
        "diagnosis_id": "diag-1",
        "thread_id": "thread-1",
        "round": 1,
        "tool_name": tool_name,
        "arguments": {},
        "status": status,
        "output": {},
        "retrieval_details": {
            "evidence_refs": [
                {"raw_path": path, "text": text, "source_type": "log"} for path, text in refs or []
            ]
        },
        "idempotency_key": f"call-{number}",
        "started_at": "2026-03-01T10:30:00Z",
        "duration_ms": 4,
        "error": "backend down" if status == "error" else None,
    }


def invocations() -> list[dict[str, Any]]:
    return [
        make_invocation(1, "get_current_time"),
        make_invocation(2, "query_logs", refs=[("logs[0]", LOG_0), ("logs[1]", LOG_1)]),
        make_invocation(3, "query_metrics", status="no_hit", refs=[("summary", "matched 0")]),
        make_invocation(4, "query_logs", status="error"),
    ]


def bind(raw_path: str, excerpt: str, invocation_id: str = "inv-2") -> dict[str, Any]:
    return {
        "source_type": "log",
        "tool_name": "query_logs",
        "source_invocation_id": invocation_id,
        "raw_path": raw_path,
        "evidence_excerpt": excerpt,
    }


def claim(claim_id: str, *bindings: dict[str, Any]) -> dict[str, Any]:
    return {
        "claim_id": claim_id,
        "claim_type": "observation",
        "claim_text": "order-service cannot get database connections",
        "support_level": "direct",
        "evidence_bindings": list(bindings),
    }


def structured(*claims: dict[str, Any]) -> dict[str, Any]:
    return {
        "answer_version": "executor_evidence_v2",
        "claims": list(claims),
        "hypotheses": [],
        "recommended_actions": [],
        "missing_info": [],
    }


def evaluate(output: dict[str, Any] | None) -> dict[str, Any]:
    rows = invocations()
    return evaluate_rules(rows, output, run_gatekeeper(VALID, output, rows))


def test_rule_evaluation_counts_evidence_calls_by_status_without_helpers() -> None:
    result = evaluate(structured(claim("c1", bind("logs[0]", "Cannot acquire connection"))))

    assert result["formula_version"] == FORMULA_VERSION == "rule-eval.v1"
    assert result["evidence_calls"] == {"ok": 1, "no_hit": 1, "error": 1}


def test_rule_evaluation_scores_fully_verified_output() -> None:
    output = structured(
        claim("c1", bind("logs[0]", "Cannot acquire connection")),
        claim("c2", bind("logs[1]", "Connection is not available")),
    )

    result = evaluate(output)

    assert result["claim_count"] == 2
    assert result["verified_claims"] == 2
    assert result["verified_claim_fraction"] == 1.0
    assert result["bindings_checked"] == 2
    assert result["bindings_valid"] == 2
    assert result["distinct_refs_cited"] == 2
    assert result["score"] == pytest.approx(0.5 + 0.3 + 0.2 / 3, abs=1e-4)


def test_rule_evaluation_scores_partially_verified_output() -> None:
    output = structured(
        claim("c1", bind("logs[0]", "Cannot acquire connection"), bind("logs[9]", "made up")),
        claim("c2", bind("logs[1]", "not in the log")),
    )

    result = evaluate(output)

    assert result["verified_claims"] == 1
    assert result["verified_claim_fraction"] == 0.5
    assert result["bindings_checked"] == 3
    assert result["bindings_valid"] == 1
    assert result["distinct_refs_cited"] == 3
    assert result["score"] == pytest.approx(0.25 + 0.1 + 0.2 / 3, abs=1e-4)


def test_rule_evaluation_counts_repeated_citations_once() -> None:
    output = structured(
        claim("c1", bind("logs[0]", "Cannot acquire")),
        claim("c2", bind("logs[0]", "connection from pool")),
    )

    result = evaluate(output)

    assert result["distinct_refs_cited"] == 1
    assert result["bindings_valid"] == 2


def test_rule_evaluation_counts_backfilled_refs() -> None:
    rows = invocations()[:3]
    backfilled = bind("logs[0]", "Cannot acquire connection")
    del backfilled["source_invocation_id"]
    output = structured(claim("c1", backfilled))

    result = evaluate_rules(rows, output, run_gatekeeper(VALID, output, rows))

    assert result["distinct_refs_cited"] == 1
    assert result["bindings_valid"] == 1


@pytest.mark.parametrize(
    "output",
    [pytest.param(None, id="no-output"), pytest.param(structured(), id="no-claims")],
)
def test_rule_evaluation_scores_zero_without_claims(output: dict[str, Any] | None) -> None:
    rows = invocations()
    gatekeeper_result = run_gatekeeper(VALID, output, rows)

    result = evaluate_rules(rows, output, gatekeeper_result)

    assert result["score"] == 0.0
    assert result["claim_count"] == 0
    assert result["verified_claim_fraction"] == 0.0
    assert result["evidence_calls"]["ok"] == 1


def test_rule_evaluation_uses_gatekeeper_verification_only() -> None:
    output = structured(claim("c1", bind("logs[0]", "Cannot acquire connection")))
    failed_closed = internal_error(RuntimeError("boom"))

    result = evaluate_rules(invocations(), output, failed_closed)

    assert result["bindings_valid"] == 0
    assert result["verified_claims"] == 0
    assert result["distinct_refs_cited"] == 1
    assert result["score"] == pytest.approx(0.2 / 3, abs=1e-4)


def test_rule_evaluation_score_stays_in_unit_interval_with_odd_inputs() -> None:
    excerpt = {"binding": 0, "invocation_id": "inv-2", "tool_name": "query_logs", "raw_path": "x"}
    inflated = internal_error(RuntimeError("odd"))
    inflated["checked_bindings"] = 1
    inflated["verified_excerpts"] = {
        "c1": [{**excerpt, "text": "a"}, {**excerpt, "text": "b"}, {**excerpt, "text": "c"}],  # type: ignore[list-item]
        "zz": [{**excerpt, "text": "d"}],  # type: ignore[list-item]
    }
    output = structured(claim("c1", bind("logs[0]", "x")))

    result = evaluate_rules(invocations(), output, inflated)

    assert 0.0 <= result["score"] <= 1.0
    assert result["bindings_valid"] == 1
    assert result["verified_claims"] == 1
