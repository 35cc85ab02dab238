"""Citation repair (``verification.citation_repair``): which refs may be added, and which not."""

from __future__ import annotations

from typing import Any

from state.records import Binding, Claim, ExecutorAnswer, Invocation
from tests.test_local_models import _invocation as ledger_row
from verification.citation_repair import ADDED_BY, MAX_ADDED, repair_citations


def _invocation(invocation_id: str, tool: str, refs: list[tuple[str, str]]) -> Invocation:
    """A recorded invocation whose refs are log lines (the local-model tests' builder)."""
    return ledger_row(invocation_id, tool, [(path, text, "log") for path, text in refs])


POOL = "pool HikariPool-1 timed out after 30000ms"
STATUS = "POST /api/orders failed: status=500"
LEDGER = [
    _invocation("inv-1", "query_logs", [("logs[0]", POOL), ("logs[1]", STATUS)]),
    _invocation("inv-2", "query_metrics", [("series[0]", "error ratio last=0.23 p99 7200ms")]),
    _invocation("inv-3", "lookup_knowledge", [("documents[0]", "restart when 42 threads wait")]),
]


def _binding(invocation_id: str, raw_path: str, excerpt: str) -> Binding:
    return Binding(
        index=0,
        source_type="log",
        tool_name="query_logs",
        source_invocation_id=invocation_id,
        source_invocation_ids=None,
        raw_path=raw_path,
        evidence_excerpt=excerpt,
        bad_fields={},
    )


def _answer(text: str, *bindings: Binding) -> ExecutorAnswer:
    claim = Claim(
        index=0,
        claim_id="c1",
        id_valid=True,
        claim_type="observation",
        claim_text=text,
        support_level="direct",
        evidence_bindings=list(bindings),
    )
    return ExecutorAnswer(
        claims=[claim], hypotheses=[], recommended_actions=[], missing_info=[], schema_findings=[]
    )


def _added(answer: ExecutorAnswer) -> list[dict[str, Any]]:
    return [dict(b) for b in answer["claims"][0]["evidence_bindings"] if b.get("added_by")]


def test_a_value_another_ref_of_a_cited_result_states_is_bound_from_it() -> None:
    answer = _answer("order-service returns 500 after 30000ms", _binding("inv-1", "logs[0]", POOL))

    repaired = repair_citations(answer, LEDGER)

    assert [(b["raw_path"], b["evidence_excerpt"], b["added_by"]) for b in _added(repaired)] == [
        ("logs[1]", STATUS, ADDED_BY)
    ]
    assert answer["claims"][0]["evidence_bindings"] == [_binding("inv-1", "logs[0]", POOL)]


def test_a_result_the_claim_does_not_cite_is_never_added() -> None:
    # 0.23 is in inv-2, which the claim does not cite: it stays unbound.
    answer = _answer("error ratio 0.23 and pool timeouts", _binding("inv-1", "logs[0]", POOL))

    assert repair_citations(answer, LEDGER) is answer


def test_a_value_no_cited_ref_states_stays_unbound() -> None:
    answer = _answer("order-service returns 503", _binding("inv-1", "logs[0]", POOL))

    assert repair_citations(answer, LEDGER) is answer


def test_guidance_never_grounds_a_value() -> None:
    answer = _answer("42 threads wait", _binding("inv-3", "documents[0]", "restart when"))

    assert repair_citations(answer, LEDGER) is answer


def test_a_claim_with_no_bindings_is_left_as_it_is() -> None:
    answer = _answer("order-service returns 500")

    assert repair_citations(answer, LEDGER) is answer


def test_at_most_max_added_bindings_per_claim() -> None:
    refs = [(f"logs[{i}]", f"line {i} value {100 + i}") for i in range(6)]
    ledger = [_invocation("inv-1", "query_logs", refs)]
    values = " ".join(str(100 + i) for i in range(1, 6))
    answer = _answer(f"values {values}", _binding("inv-1", "logs[0]", "line 0 value 100"))

    assert len(_added(repair_citations(answer, ledger))) == MAX_ADDED
