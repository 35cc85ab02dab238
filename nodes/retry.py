"""Retry: prepares the single extra evidence round after a thin round 1."""

from __future__ import annotations

from langgraph.runtime import Runtime

from nodes.common import Node, emit
from state.context import Context
from state.graph_state import DiagnosisState
from state.records import GapNote, RetryContext, Verdict

GAP_LABELS = ("unsupported", "external_unknown", "overstated")


def build_retry_context(state: DiagnosisState) -> RetryContext:
    """What round 1 lacked: verdict, score, gaps, failed rules and suggested queries."""
    answer = state["executor_answer"]
    texts = {claim["claim_id"]: claim["claim_text"] for claim in answer["claims"]}
    gaps = [
        GapNote(
            claim_id=check["claim_id"],
            verification=check["verification"],
            text=texts.get(check["claim_id"], ""),
        )
        for check in state["verifier_result"]["claim_checks"]
        if check["verification"] in GAP_LABELS
    ]
    gaps += [
        GapNote(claim_id=None, verification="missing_info", text=item["text"])
        for item in answer["missing_info"]
        if item["text"]
    ]
    verdict: Verdict = state["verifier_result"]["verdict"]
    return RetryContext(
        previous_round=state.get("round", 1),
        previous_verdict=verdict,
        previous_score=state.get("groundedness_score", 0.0),
        gaps=gaps,
        failed_rules=list(state["gatekeeper_result"]["failed_rules"]),
        suggested_queries=[
            query
            for item in answer["missing_info"]
            if (query := item["suggested_query"]) is not None and query.get("tool")
        ],
    )


def make_retry() -> Node:
    """Build the retry node: round 2 with ``retry_context``."""

    def retry(state: DiagnosisState, *, runtime: Runtime[Context]) -> DiagnosisState:
        context = build_retry_context(state)
        emit("retry", round=2, previous_verdict=context["previous_verdict"])
        return {"round": 2, "retry_context": context, "route": ["retry"]}

    return retry
