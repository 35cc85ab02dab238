"""Evidence: parse the executor's final message (contracts 3) and build the trace summary."""

from __future__ import annotations

import json
import re
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime

from nodes.common import Node, emit, message_text
from persistence.ledger import InvocationLedger
from state.context import Context
from state.graph_state import DiagnosisState
from tools.trace_summary import build_trace_summary

_FENCE = re.compile(r"^```[A-Za-z0-9_-]*[ \t]*\n(?P<body>.*)\n```$", re.DOTALL)


def parse_executor_output(text: str | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Parse the executor's final text.

    Returns:
        ``(parse_status, structured_output)``. Status ``valid`` means one JSON object (after
        stripping one surrounding Markdown fence, recorded as ``fence_stripped``); ``missing``
        means no final message; anything else is ``malformed`` with the reason in ``error``.
    """
    if text is None or not text.strip():
        return {"status": "missing", "fence_stripped": False, "error": "no final message"}, None
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group("body").strip()
    status: dict[str, Any] = {"status": "malformed", "fence_stripped": bool(fenced), "error": None}
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        status["error"] = f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        return status, None
    if not isinstance(data, dict):
        status["error"] = f"expected one JSON object, got {type(data).__name__}"
        return status, None
    status.update(status="valid")
    return status, data


def final_executor_message(state: DiagnosisState) -> AIMessage | None:
    """The executor's final message: its last reply without tool calls, if it gave one."""
    messages = state.get("executor_messages", [])
    last = messages[-1] if messages else None
    if isinstance(last, AIMessage) and not last.tool_calls:
        return last
    return None


def executor_final_text(state: DiagnosisState) -> str:
    """The executor's final message text (raw, kept for the Verifier and the audit)."""
    final = final_executor_message(state)
    return message_text(final) if final is not None else ""


def make_evidence(
    ledger: InvocationLedger,
) -> Node:
    """Build the evidence node (parse + trace summary over both rounds' invocations)."""

    def evidence(state: DiagnosisState, *, runtime: Runtime[Context]) -> dict[str, Any]:
        emit("evidence", round=state.get("round", 1))
        final = final_executor_message(state)
        text = message_text(final) if final is not None else None
        parse_status, structured = parse_executor_output(text)
        invocations = ledger.list(state["diagnosis_id"])
        return {
            "parse_status": parse_status,
            "structured_output": structured,
            "trace_summary": build_trace_summary(invocations),
            "route": ["evidence"],
        }

    return evidence
