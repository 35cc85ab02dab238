"""Evidence: parse and read the executor's final message, and build the trace summary."""

from __future__ import annotations

from langchain_core.messages import ToolMessage
from langgraph.runtime import Runtime

from models.messages import final_reply, message_text
from nodes.common import Node, context_of, emit
from persistence.ledger import InvocationLedger
from state.catalog import local_profile
from state.context import Context
from state.graph_state import DiagnosisState
from state.records import MissingInfo
from verification.catalog import SchemaSettings
from verification.citation_repair import repair_citations
from verification.executor_output import parse_executor_output, read_answer
from verification.root_cause import analysis_suspects
from verification.trace_summary import build_trace_summary

_NO_TOOL_CALL = {
    "en": (
        "The executor model made no tool call, so nothing it wrote could be checked against "
        "data: this model most likely does not call tools (superbiz doctor checks it)"
    ),
    "zh": (
        "执行模型没有调用任何工具，它写的内容都无法用数据核实："
        "该模型很可能不会调用工具（可用 superbiz doctor 检查）"
    ),
}
_CUT = {
    "en": (
        "a {role} reply reached its limit of {limit} output tokens and was cut "
        "(raise SUPERBIZ_{ROLE}_MAX_TOKENS)"
    ),
    "zh": (
        "{role} 的一次回复达到了 {limit} 个输出 token 的上限，被截断"
        "（可调大 SUPERBIZ_{ROLE}_MAX_TOKENS）"
    ),
}


def model_notes(state: DiagnosisState, language: str) -> list[MissingInfo]:
    """Gaps about the model in this round: it made no tool call, a reply reached its limit."""
    if state.get("run_info", {}).get("offline", True):
        return []
    key = "zh" if language == "zh" else "en"
    notes: list[MissingInfo] = []
    messages = state.get("executor_messages", [])
    if not any(isinstance(message, ToolMessage) for message in messages):
        notes.append(MissingInfo(text=_NO_TOOL_CALL[key], suggested_query=None, about_model=True))
    cut = {  # any round's: a cut reply shaped what this answer could say
        (call["role"], call.get("max_tokens"))
        for call in state.get("model_calls") or []
        if call.get("finish_reason") == "length"
    }
    for role, limit in sorted(cut, key=str):
        text = _CUT[key].format(role=role, limit=limit or "?", ROLE=role.upper())
        notes.append(MissingInfo(text=text, suggested_query=None, about_model=True))
    return notes


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
        notes = model_notes(state, context_of(runtime).language)
        if notes:
            answer = {**answer, "missing_info": [*answer["missing_info"], *notes]}
        invocations = ledger.list(state["diagnosis_id"])
        if local_profile() and not state.get("run_info", {}).get("offline", True):
            # A small model's claim states a value another ref of a result it cites holds: that
            # ref is bound too, marked as added (the Gatekeeper checks it like any binding).
            answer = repair_citations(answer, invocations)
        return {
            "parse_status": parse_status,
            "structured_output": structured,
            "executor_answer": answer,
            "trace_summary": build_trace_summary(invocations),
            "suspects": analysis_suspects(invocations),
            "route": ["evidence"],
        }

    return evidence
