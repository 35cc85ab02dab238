"""The ``tools`` node: runs the executor's tool calls through the recorded tool runner."""

from __future__ import annotations

from langchain_core.messages import AnyMessage, ToolMessage
from langgraph.runtime import Runtime

from models.messages import INVALID_ARGUMENTS, last_reply
from nodes.common import Node, context_of, dumps, emit, thread_id
from nodes.executor_context import tool_reference
from state.catalog import local_profile
from state.context import Context
from state.graph_state import DiagnosisState
from state.records import CallNotRun
from tools.runner import ToolRunner
from verification.intent import unasked_window

SKIPPED = "not executed: the tool budget for this round is spent; give your final answer"
"""The error the executor reads for a call skipped for the budget (the call is listed in
``calls_not_run``; this text is for the model only)."""


def make_tools(
    runner: ToolRunner,
) -> Node:
    """Build the tools node. Every call is recorded as an invocation before the model sees it.

    Calls past the round's tool budget are not run: the model reads an error for each, and
    each is listed in ``calls_not_run`` (``budget_skipped``). Under the local model profile a
    time window the question does not name is dropped from a call (``unasked_window``): it runs
    over the tool's default window, the latest data.
    """

    def tools(state: DiagnosisState, *, runtime: Runtime[Context]) -> DiagnosisState:
        ctx = context_of(runtime)
        messages = state.get("executor_messages", [])
        last = last_reply(messages)
        calls = last.tool_calls if last is not None else []
        used = state.get("tool_calls_used", 0)
        round_no = state.get("round", 1)
        out: list[AnyMessage] = []
        skipped: list[CallNotRun] = []
        guard_window = local_profile()
        for index, call in enumerate(calls):
            call_id = call.get("id") or f"call-r{round_no}-m{len(messages)}-{index}"
            if used >= ctx.max_tool_calls_per_round:
                out.append(ToolMessage(content=dumps({"error": SKIPPED}), tool_call_id=call_id))
                skipped.append(
                    CallNotRun(
                        tool_name=call["name"],
                        arguments=dict(call.get("args") or {}),
                        reason="budget_skipped",
                    )
                )
                continue
            used += 1
            args = call.get("args") or {}
            if guard_window and INVALID_ARGUMENTS not in args:
                dropped = unasked_window(state.get("question", ""), args)
                if dropped:
                    args = {key: value for key, value in args.items() if key not in dropped}
                    emit("tool_window_dropped", round=round_no, tool=call["name"], dropped=dropped)
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
        return {
            "executor_messages": out,
            "tool_calls_used": used,
            **({"calls_not_run": skipped} if skipped else {}),
            "route": ["tools"],
        }

    return tools
