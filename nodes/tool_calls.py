"""The ``tools`` node: runs the executor's tool calls through the recorded tool runner."""

from __future__ import annotations

from langchain_core.messages import AnyMessage, ToolMessage
from langgraph.runtime import Runtime

from models.messages import INVALID_ARGUMENTS, last_reply
from nodes.common import Node, context_of, dumps, emit, thread_id
from nodes.executor import SKIPPED_PREFIX, tool_reference
from state.context import Context
from state.graph_state import DiagnosisState
from tools.runner import ToolRunner

SKIPPED = f"{SKIPPED_PREFIX} for this round is spent; give your final answer"


def make_tools(
    runner: ToolRunner,
) -> Node:
    """Build the tools node. Every call is recorded as an invocation before the model sees it."""

    def tools(state: DiagnosisState, *, runtime: Runtime[Context]) -> DiagnosisState:
        ctx = context_of(runtime)
        messages = state.get("executor_messages", [])
        last = last_reply(messages)
        calls = last.tool_calls if last is not None else []
        used = state.get("tool_calls_used", 0)
        round_no = state.get("round", 1)
        out: list[AnyMessage] = []
        for index, call in enumerate(calls):
            call_id = call.get("id") or f"call-r{round_no}-m{len(messages)}-{index}"
            if used >= ctx.max_tool_calls_per_round:
                out.append(ToolMessage(content=dumps({"error": SKIPPED}), tool_call_id=call_id))
                continue
            used += 1
            args = call.get("args") or {}
            # Arguments that were not JSON are recorded as an error the model can read.
            sent = str(args[INVALID_ARGUMENTS]) if INVALID_ARGUMENTS in args else args
            invocation = runner.run(
                {"name": call["name"], "args": sent, "id": call_id},
                diagnosis_id=state["diagnosis_id"],
                thread_id=thread_id(),
                round=round_no,
                timeout_s=ctx.tool_timeout_s,
            )
            emit(
                "tool",
                round=round_no,
                tool=invocation["tool_name"],
                invocation_id=invocation["invocation_id"],
                status=invocation["status"],
            )
            out.append(
                ToolMessage(
                    content=tool_reference(invocation),
                    tool_call_id=call_id,
                    name=invocation["tool_name"],
                    status="error" if invocation["status"] == "error" else "success",
                )
            )
        return {"executor_messages": out, "tool_calls_used": used, "route": ["tools"]}

    return tools
