"""Executor: a tool-calling loop bounded by the per-round tool budget.

The checkpointed conversation keeps each tool result as a small reference (its invocation id);
before every model turn the references are expanded from the invocation ledger into what the
model must read and cite (ids, raw paths, ref texts). The ref texts are thus stored once, in the
ledger, instead of in every checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
)
from langgraph.runtime import Runtime

from nodes.common import GetModel, Node, Spend, context_of, emit
from nodes.prompts import load_prompt
from persistence.ledger import InvocationLedger
from state.context import Context
from state.graph_state import DiagnosisState
from state.records import Invocation
from tools.runner import tool_message_content
from tools.schemas import tool_specs

BUDGET_SPENT = (
    "The tool budget for this round is spent; no more tool calls will run. Give your final "
    "answer now: exactly one executor_evidence_v2 JSON object citing only the evidence above."
)


def tool_reference(invocation: Invocation) -> str:
    """What the checkpointed tool message holds: the invocation's id, tool and status."""
    return json.dumps(
        {
            "invocation_id": invocation["invocation_id"],
            "tool_name": invocation["tool_name"],
            "status": invocation["status"],
        },
        ensure_ascii=False,
    )


def expand_tool_messages(
    messages: Sequence[AnyMessage], invocations: Sequence[Invocation]
) -> list[AnyMessage]:
    """Replace tool-result references by the full tool message content from the ledger."""
    by_id = {row["invocation_id"]: row for row in invocations}
    out: list[AnyMessage] = []
    for message in messages:
        if isinstance(message, ToolMessage) and isinstance(message.content, str):
            try:
                ref = json.loads(message.content)
            except json.JSONDecodeError:
                ref = None
            row = by_id.get(str(ref.get("invocation_id"))) if isinstance(ref, dict) else None
            if row is not None:
                message = message.model_copy(update={"content": tool_message_content(row)})
        out.append(message)
    return out


INVALID_ARGUMENTS = "__invalid_arguments__"
"""Argument key of a tool call whose arguments were not a JSON object (the raw text is its
value); the tools node records it as an ``error`` invocation the executor can read."""


def readable_tool_calls(reply: BaseMessage) -> AIMessage:
    """The executor's reply with each malformed tool call made into one the tools node answers.

    langchain keeps a call whose arguments are not valid JSON apart (``invalid_tool_calls``);
    dropped, it would end the round. Instead the tools node answers it with a readable error.
    A call whose arguments are not valid JSON keeps its id and name; its arguments become
    ``{INVALID_ARGUMENTS: <the raw text>}``.
    """
    if not isinstance(reply, AIMessage):
        return AIMessage(content=reply.content, id=reply.id)
    if not reply.invalid_tool_calls:
        return reply
    calls = list(reply.tool_calls)
    for index, bad in enumerate(reply.invalid_tool_calls):
        calls.append(
            ToolCall(
                name=str(bad.get("name") or "unnamed"),
                args={INVALID_ARGUMENTS: str(bad.get("args") or "")[:2000]},
                id=str(bad.get("id") or f"invalid-{index}"),
                type="tool_call",
            )
        )
    return AIMessage(content=reply.content, tool_calls=calls, id=reply.id)


def make_executor(get_model: GetModel, ledger: InvocationLedger) -> Node:
    """Build the executor node: one model turn per visit; tools run in the ``tools`` node."""
    prompt = load_prompt("executor")
    specs = tool_specs()

    def executor(state: DiagnosisState, *, runtime: Runtime[Context]) -> DiagnosisState:
        ctx = context_of(runtime)
        used = state.get("tool_calls_used", 0)
        emit("executor", round=state.get("round", 1), tool_calls_used=used)
        spend = Spend(state, ctx)
        stopped = spend.stop()
        if stopped is not None:
            # A spent model budget ends the round with what was gathered: no final answer.
            return {
                "executor_messages": [AIMessage(content="")],
                "budget_note": stopped,
                "route": ["executor"],
            }
        model = get_model("executor", ctx)
        messages = state.get("executor_messages", [])
        if any(isinstance(m, ToolMessage) for m in messages):
            messages = expand_tool_messages(messages, ledger.list(state["diagnosis_id"]))
        history = [SystemMessage(prompt.text), *messages]
        if used >= ctx.max_tool_calls_per_round:
            nudge = HumanMessage(BUDGET_SPENT)
            reply = readable_tool_calls(spend.invoke(model, [*history, nudge]))
            if reply.tool_calls:
                # The budget is a hard bound: calls asked for after it are dropped, not run.
                reply = AIMessage(content=reply.content, id=reply.id)
            return {
                "executor_messages": [nudge, reply],
                "usage": spend.added,
                "route": ["executor"],
            }
        reply = readable_tool_calls(spend.invoke(model.bind_tools(specs), history))
        return {"executor_messages": [reply], "usage": spend.added, "route": ["executor"]}

    return executor
