"""Retry: prepares the single extra evidence round after a thin round 1."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from nodes.common import Node, emit
from state.context import Context
from state.graph_state import DiagnosisState

GAP_LABELS = ("unsupported", "external_unknown", "overstated")


def build_retry_context(state: DiagnosisState) -> dict[str, Any]:
    """What round 1 lacked: verdict, score, gaps, failed rules and suggested queries."""
    result = state.get("verifier_result") or {}
    structured = state.get("structured_output") or {}
    claims = structured.get("claims") if isinstance(structured, dict) else None
    texts = {
        str(c.get("claim_id")): str(c.get("claim_text", ""))
        for c in (claims if isinstance(claims, list) else [])
        if isinstance(c, dict)
    }
    gaps = [
        {
            "claim_id": check["claim_id"],
            "verification": check["verification"],
            "text": texts.get(str(check["claim_id"]), ""),
        }
        for check in result.get("claim_checks", [])
        if check.get("verification") in GAP_LABELS
    ]
    missing = structured.get("missing_info") if isinstance(structured, dict) else None
    suggested: list[dict[str, Any]] = []
    for item in missing if isinstance(missing, list) else []:
        if not isinstance(item, dict):
            continue
        if item.get("text"):
            gaps.append(
                {"claim_id": None, "verification": "missing_info", "text": str(item["text"])}
            )
        query = item.get("suggested_query")
        if isinstance(query, dict) and query.get("tool"):
            suggested.append(query)
    gatekeeper = state.get("gatekeeper_result") or {}
    return {
        "previous_round": state.get("round", 1),
        "previous_verdict": state.get("verdict"),
        "previous_score": state.get("groundedness_score", 0.0),
        "gaps": gaps,
        "failed_rules": list(gatekeeper.get("failed_rules", [])),
        "suggested_queries": suggested,
    }


def make_retry() -> Node:
    """Build the retry node: round 2 with ``retry_context``."""

    def retry(state: DiagnosisState, *, runtime: Runtime[Context]) -> dict[str, Any]:
        context = build_retry_context(state)
        emit("retry", round=2, previous_verdict=context["previous_verdict"])
        return {"round": 2, "retry_context": context, "route": ["retry"]}

    return retry
