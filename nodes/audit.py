"""Audit: the final node; records the diagnosis outcome and its verifier evaluation."""

from __future__ import annotations

from langgraph.runtime import Runtime

from models.messages import final_text
from models.recording import replay_record
from nodes.common import Node, context_of, emit
from nodes.prompts import prompt_audit
from persistence.audit import AuditStore
from state.context import Context
from state.graph_state import DiagnosisState
from state.records import (
    Catalog,
    DiagnosisOutcome,
    DiagnosisStatus,
    ModelUsage,
    UsageRecord,
    Verdict,
    VerifierEvaluation,
)
from verification.trace_summary import TRACEABILITY_VERSION

FINAL_ANSWER_CHARS = 8000
"""How much of the executor's raw final message the audit keeps."""


def verifier_evaluation(state: DiagnosisState, catalog: Catalog) -> VerifierEvaluation:
    """The ``verifier_evaluation`` channel of ``self_evaluation``.

    ``catalog`` is the Gatekeeper's rule catalog, kept so that a re-check uses the same rules.
    """
    result = state["verifier_result"]
    final = final_text(state.get("executor_messages", []))
    run_info = state["run_info"]
    evaluation: VerifierEvaluation = {
        "verdict": result["verdict"],
        "model_verdict": result["model_verdict"],
        "derived_verdict": result["derived_verdict"],
        "groundedness_score": result["groundedness_score"],
        "critical_fact_count": result["critical_fact_count"],
        "claim_checks": result["claim_checks"],
        "facts_checked": result["facts_checked"],
        "rationale": result["rationale"],
        "verifier_mode": result["verifier_mode"],
        "executor_output_parse_status": state["parse_status"],
        "executor_structured_output": state.get("structured_output"),
        "executor_final_answer": final[:FINAL_ANSWER_CHARS],
        "retry_context": state.get("retry_context"),
        "tool_trace_summary": state["trace_summary"],
        "traceability_version": TRACEABILITY_VERSION,
        "gatekeeper_result": state["gatekeeper_result"],
        "composer_output": state["composer_output"],
        "prompt_audit": prompt_audit(),
        "offline": run_info["offline"],
        "models": run_info["models"],
        "rounds": state.get("rounds", []),
        "question_coverage": result["question_coverage"],
        "gatekeeper_catalog": catalog,
    }
    if "conclusion" in result:  # absent from a decision checkpointed before it existed
        evaluation["conclusion"] = result["conclusion"]
    return evaluation


def usage_record(state: DiagnosisState, ctx: Context) -> UsageRecord:
    """The ``usage`` channel: model calls and tokens of the diagnosis, its budgets, any stop."""
    usage = state.get("usage") or ModelUsage(calls=0, input_tokens=0, output_tokens=0)
    return UsageRecord(
        calls=usage["calls"],
        input_tokens=usage["input_tokens"],
        output_tokens=usage["output_tokens"],
        input_chars=usage.get("input_chars", 0),
        budgets={
            "max_model_calls": ctx.max_model_calls,
            "max_input_tokens": ctx.max_input_tokens,
            "max_output_tokens": ctx.max_output_tokens,
            "diagnosis_deadline_s": ctx.diagnosis_deadline_s,
            "max_tool_calls_per_round": ctx.max_tool_calls_per_round,
            "executor_context_chars": ctx.executor_context_chars,
        },
        stopped=state.get("budget_note"),
    )


def finish(
    audit: AuditStore,
    diagnosis_id: str,
    state: DiagnosisState,
    status: DiagnosisStatus,
    *,
    verdict: Verdict | None,
    score: float | None,
    answer: str | None,
) -> None:
    """Record how a diagnosis ended on its row: status, rounds (from ``state``), verdict, answer."""
    outcome = DiagnosisOutcome(
        status=status, rounds=state.get("round", 1), verdict=verdict, score=score, answer=answer
    )
    audit.finish_diagnosis(diagnosis_id, outcome)


def make_audit(audit: AuditStore, catalog: Catalog) -> Node:
    """Build the audit node (``catalog``: the Gatekeeper's rule catalog, kept for re-checks)."""

    def record(state: DiagnosisState, *, runtime: Runtime[Context]) -> DiagnosisState:
        diagnosis_id = state["diagnosis_id"]
        verdict: Verdict = state["verifier_result"]["verdict"]
        audit.update_channel(
            diagnosis_id, "verifier_evaluation", verifier_evaluation(state, catalog)
        )
        ctx = context_of(runtime)
        audit.update_channel(diagnosis_id, "usage", usage_record(state, ctx))
        audit.update_channel(diagnosis_id, "replay", replay_record(state, ctx))
        root = state.get("root_cause")
        if root is not None:  # the confirmed root cause, as outputs show it
            audit.update_channel(diagnosis_id, "root_cause", root)
        suspects = state.get("suspects") or []
        if suspects:  # the incident analysis's ranked suspects
            audit.update_channel(diagnosis_id, "suspects", {"suspects": suspects})
        finish(
            audit,
            diagnosis_id,
            state,
            "done",
            verdict=verdict,
            score=state.get("groundedness_score"),
            answer=state.get("answer"),
        )
        emit("done", round=state.get("round", 1), verdict=verdict)
        return {"route": ["audit"]}

    return record
