"""Executor: a tool-calling loop bounded by the per-round tool budget.

The checkpointed conversation keeps each tool result as a small reference (its invocation id);
before every model turn the references are expanded from the invocation ledger into what the
model must read and cite (ids, raw paths, ref texts). The ref texts are thus stored once, in the
ledger, instead of in every checkpoint. What a chat model reads per turn is bounded
(``nodes.executor_context``): results it has seen are compacted to their id, raw paths and
summary line. A rule-based stand-in (offline) has no context window and reads every result.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.runtime import Runtime

from models.budget import BUDGET_SPENT, GetModel, Spend
from models.messages import content_chars, json_content, readable_calls
from nodes.common import Node, context_of, emit
from nodes.executor_context import bounded_history, expand_tool_messages
from nodes.prompts import load_prompt
from persistence.ledger import InvocationLedger
from state.context import Context
from state.graph_state import DiagnosisState
from state.json_shape import obj, objects
from state.records import Invocation
from tools.registry import tool_specs
from tools.render import format_value

DROPPED_CALLS = "dropped_tool_calls"
"""Where a reply keeps the tool calls the executor asked for after the budget was spent."""

SKIPPED_PREFIX = "not executed: the tool budget"
"""How the tool message of a call the ``tools`` node skipped for the budget begins."""

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


def readable_tool_calls(reply: AIMessage) -> AIMessage:
    """The executor's reply with each malformed tool call made into one the tools node answers.

    langchain keeps a call whose arguments are not valid JSON apart (``invalid_tool_calls``);
    dropped, it would end the round. Instead the tools node answers it with a readable error
    (``models.messages.readable_calls``).
    """
    if not reply.invalid_tool_calls:
        return reply
    return AIMessage(content=reply.content, tool_calls=readable_calls(reply), id=reply.id)


def render_call(name: str, args: object) -> str:
    """A tool call on one line: ``query_logs level=ERROR service=order-service``."""
    items = sorted(obj(args).items())
    return " ".join([name, *(f"{key}={format_value(value)}" for key, value in items)])


def calls_not_run(messages: Sequence[AnyMessage]) -> list[str]:
    """The tool calls the executor asked for that the tool budget cut, rendered, in order.

    Calls the ``tools`` node skipped (their tool message says so) and calls asked for after the
    budget was spent (kept on the reply under ``dropped_tool_calls``).
    """
    asked: dict[str, str] = {}
    not_run: list[str] = []
    for message in messages:
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                asked[str(call.get("id"))] = render_call(call["name"], call.get("args"))
            for dropped in objects(message.additional_kwargs.get(DROPPED_CALLS)):
                not_run.append(render_call(str(dropped.get("name")), dropped.get("args")))
        elif isinstance(message, ToolMessage) and _skipped(message):
            text = asked.get(str(message.tool_call_id))
            if text is not None:
                not_run.append(text)
    return list(dict.fromkeys(not_run))


def _skipped(message: ToolMessage) -> bool:
    return str(obj(json_content(message)).get("error", "")).startswith(SKIPPED_PREFIX)


def make_executor(get_model: GetModel, ledger: InvocationLedger) -> Node:
    """Build the executor node: one model turn per visit; tools run in the ``tools`` node."""
    prompt = load_prompt("executor")

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
        spent = used >= ctx.max_tool_calls_per_round
        nudge = HumanMessage(BUDGET_SPENT)
        if any(isinstance(m, ToolMessage) for m in messages):
            rows = ledger.list(state["diagnosis_id"])
            if getattr(model, "offline", False):
                messages = expand_tool_messages(messages, rows)
            else:
                fixed = content_chars([SystemMessage(prompt.text), *([nudge] if spent else [])])
                messages = bounded_history(
                    messages, rows, limit_chars=ctx.executor_context_chars, fixed_chars=fixed
                )
        history = [SystemMessage(prompt.text), *messages]
        if spent:
            reply = readable_tool_calls(spend.invoke(model, [*history, nudge]))
            if reply.tool_calls:
                # The budget is a hard bound: calls asked for after it are dropped, not run,
                # and kept on the reply so the answer can say which queries were not run.
                dropped = [
                    {"name": c["name"], "args": c.get("args") or {}} for c in reply.tool_calls
                ]
                reply = AIMessage(
                    content=reply.content, id=reply.id, additional_kwargs={DROPPED_CALLS: dropped}
                )
            return {
                "executor_messages": [nudge, reply],
                "usage": spend.added,
                "model_calls": spend.calls,
                "route": ["executor"],
            }
        # The registered tools, read per turn: a tool registered at run time is offered too.
        reply = readable_tool_calls(spend.invoke(model.bind_tools(tool_specs()), history))
        return {
            "executor_messages": [reply],
            "usage": spend.added,
            "model_calls": spend.calls,
            "route": ["executor"],
        }

    return executor
