"""Audit: the final node; records the diagnosis outcome and its verifier evaluation."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from nodes.common import Node, emit
from nodes.evidence import executor_final_text
from nodes.prompts import prompt_audit
from persistence.audit import AuditStore
from state.context import Context
from state.graph_state import DiagnosisState
from tools.trace_summary import TRACEABILITY_VERSION

FINAL_ANSWER_CHARS = 8000
"""How much of the executor's raw final message the audit keeps."""


def verifier_evaluation(state: DiagnosisState) -> dict[str, Any]:
    """The ``verifier_evaluation`` channel of ``self_evaluation`` (contracts section 7)."""
    result = state.get("verifier_result") or {}
    run_info = state.get("run_info") or {}
    return {
        "verdict": state.get("verdict") or result.get("verdict"),
        "model_verdict": result.get("model_verdict"),
        "derived_verdict": result.get("derived_verdict"),
        "groundedness_score": result.get("groundedness_score", 0.0),
        "critical_fact_count": result.get("critical_fact_count", 0),
        "claim_checks": result.get("claim_checks", []),
        "facts_checked": result.get("facts_checked", []),
        "rationale": result.get("rationale", ""),
        "verifier_mode": result.get("verifier_mode"),
        "executor_output_parse_status": state.get("parse_status") or {},
        "executor_structured_output": state.get("structured_output"),
        "executor_final_answer": executor_final_text(state)[:FINAL_ANSWER_CHARS],
        "retry_context": state.get("retry_context"),
        "tool_trace_summary": state.get("trace_summary") or [],
        "traceability_version": TRACEABILITY_VERSION,
        "gatekeeper_result": state.get("gatekeeper_result") or {},
        "composer_output": state.get("composer_output") or {},
        "prompt_audit": prompt_audit(),
        "offline": bool(run_info.get("offline")),
        "models": run_info.get("models", {}),
        "rounds": state.get("rounds") or [],
    }


def make_audit(audit: AuditStore) -> Node:
    """Build the audit node."""

    def record(state: DiagnosisState, *, runtime: Runtime[Context]) -> dict[str, Any]:
        diagnosis_id = state["diagnosis_id"]
        audit.update_channel(diagnosis_id, "verifier_evaluation", verifier_evaluation(state))
        audit.finish_diagnosis(
            diagnosis_id,
            status="done",
            rounds=state.get("round", 1),
            verdict=state.get("verdict"),
            score=state.get("groundedness_score"),
            answer=state.get("answer"),
        )
        emit("done", round=state.get("round", 1), verdict=state.get("verdict"))
        return {"route": ["audit"]}

    return record
