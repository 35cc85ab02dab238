"""Evidence: parse and read the executor's final message, and build the trace summary."""

from __future__ import annotations

from langgraph.runtime import Runtime

from models.messages import final_reply, message_text
from nodes.common import Node, emit
from persistence.ledger import InvocationLedger
from state.context import Context
from state.graph_state import DiagnosisState
from state.records import MissingInfo
from verification.catalog import SchemaSettings
from verification.executor_output import parse_executor_output, read_answer
from verification.root_cause import analysis_suspects
from verification.trace_summary import build_trace_summary


def make_evidence(ledger: InvocationLedger, schema: SchemaSettings) -> Node:
    """Build the evidence node: the executor's output becomes records here, once."""

    def evidence(state: DiagnosisState, *, runtime: Runtime[Context]) -> DiagnosisState:
        emit("evidence", round=state.get("round", 1))
        final = final_reply(state.get("executor_messages", []))
        parse_status, structured = parse_executor_output(
            message_text(final) if final is not None else None
        )
        answer = read_answer(parse_status, structured, schema)
        note = state.get("budget_note")
        if note:  # the round ended early: what could not be gathered is a gap
            gap = MissingInfo(text=f"the diagnosis stopped early: {note}", suggested_query=None)
            answer = {**answer, "missing_info": [*answer["missing_info"], gap]}
        invocations = ledger.list(state["diagnosis_id"])
        return {
            "parse_status": parse_status,
            "structured_output": structured,
            "executor_answer": answer,
            "trace_summary": build_trace_summary(invocations),
            "suspects": analysis_suspects(invocations),
            "route": ["evidence"],
        }

    return evidence
