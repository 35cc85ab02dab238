from __future__ import annotations

import pytest

from state.records import GatekeeperResult, Invocation, InvocationStatus, JSONObject, RuleEvaluation
from tests import records
from tests.records import VALID, excerpt, refs
from verification.executor_output import read_answer
from verification.gatekeeper import internal_error, run_gatekeeper
from verification.rule_evaluation import FORMULA_VERSION
from verification.rule_evaluation import evaluate_rules as evaluate_records


def evaluate_rules(
    rows: list[Invocation], output: JSONObject | None, gatekeeper: GatekeeperResult
) -> RuleEvaluation:
    """``evaluate_rules`` on a raw executor object, read as the graph reads it."""
    return evaluate_records(rows, read_answer(VALID, output), gatekeeper)


LOG_0 = "2026-03-01T10:05:00Z ERROR order-service order-1: Cannot acquire connection from pool"
LOG_1 = "2026-03-01T10:06:00Z ERROR order-service order-2: Connection is not available"


def make_invocation(
    number: int,
    tool_name: str,
    *,
    status: InvocationStatus = "ok",
    ref_pairs: list[tuple[str, str]] | None = None,
) -> Invocation:
    return records.invocation(
        f"inv-{number}",
        tool_name,
        status=status,
        output={},
        details={"evidence_refs": refs(*(ref_pairs or []))},
        error="backend down" if status == "error" else None,
    )


def invocations() -> list[Invocation]:
    return [
        make_invocation(1, "get_current_time"),
        make_invocation(2, "query_logs", ref_pairs=[("logs[0]", LOG_0), ("logs[1]", LOG_1)]),
        make_invocation(3, "query_metrics", status="no_hit", ref_pairs=[("summary", "matched 0")]),
        make_invocation(4, "query_logs", status="error"),
    ]


def bind(raw_path: str, text: str, invocation_id: str = "inv-2") -> JSONObject:
    return records.binding(invocation_id, raw_path, text)


def claim(claim_id: str, *bindings: JSONObject) -> JSONObject:
    return records.claim(claim_id, "order-service cannot get database connections", *bindings)


def structured(*claims: JSONObject) -> JSONObject:
    return records.executor_output(*claims)


def evaluate(output: JSONObject | None) -> RuleEvaluation:
    rows = invocations()
    return evaluate_rules(rows, output, run_gatekeeper(VALID, output, rows))


def test_rule_evaluation_counts_evidence_calls_by_status_without_helpers() -> None:
    result = evaluate(structured(claim("c1", bind("logs[0]", "Cannot acquire connection"))))

    assert result["formula_version"] == FORMULA_VERSION == "rule-eval.v1"
    assert result["evidence_calls"] == {"ok": 1, "no_hit": 1, "error": 1}


def _counts(result: RuleEvaluation) -> tuple[int, int, int, int, int]:
    """Claims, verified claims, bindings checked, bindings valid and distinct refs cited."""
    return (
        result["claim_count"],
        result["verified_claims"],
        result["bindings_checked"],
        result["bindings_valid"],
        result["distinct_refs_cited"],
    )


@pytest.mark.parametrize(
    ("output", "counts", "fraction", "score"),
    [
        pytest.param(
            structured(
                claim("c1", bind("logs[0]", "Cannot acquire connection")),
                claim("c2", bind("logs[1]", "Connection is not available")),
            ),
            (2, 2, 2, 2, 2),
            1.0,
            0.5 + 0.3 + 0.2 / 3,
            id="fully-verified",
        ),
        pytest.param(
            structured(
                claim(
                    "c1",
                    bind("logs[0]", "Cannot acquire connection"),
                    bind("logs[9]", "made up"),
                ),
                claim("c2", bind("logs[1]", "not in the log")),
            ),
            (2, 1, 3, 1, 3),
            0.5,
            0.25 + 0.1 + 0.2 / 3,
            id="partially-verified",
        ),
    ],
)
def test_rule_evaluation_scores_verified_output(
    output: JSONObject, counts: tuple[int, int, int, int, int], fraction: float, score: float
) -> None:
    result = evaluate(output)

    assert _counts(result) == counts
    assert result["verified_claim_fraction"] == fraction
    assert result["score"] == pytest.approx(score, abs=1e-4)


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
def test_rule_evaluation_scores_zero_without_claims(output: JSONObject | None) -> None:
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
    inflated = internal_error(RuntimeError("odd"))
    inflated["checked_bindings"] = 1
    inflated["verified_excerpts"] = {
        "c1": [excerpt("inv-2", "query_logs", "x", text) for text in ("a", "b", "c")],
        "zz": [excerpt("inv-2", "query_logs", "x", "d")],
    }
    output = structured(claim("c1", bind("logs[0]", "x")))

    result = evaluate_rules(invocations(), output, inflated)

    assert 0.0 <= result["score"] <= 1.0
    assert result["bindings_valid"] == 1
    assert result["verified_claims"] == 1
