"""Executor: a tool-calling loop bounded by the per-round tool budget."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from nodes.common import GetModel, Node, context_of, emit
from nodes.prompts import load_prompt
from state.context import Context
from state.graph_state import DiagnosisState
from tools.schemas import tool_specs

BUDGET_SPENT = (
    "The tool budget for this round is spent; no more tool calls will run. Give your final "
    "answer now: exactly one executor_evidence_v2 JSON object citing only the evidence above."
)


def make_executor(
    get_model: GetModel,
) -> Node:
    """Build the executor node: one model turn per visit; tools run in the ``tools`` node."""
    prompt = load_prompt("executor")
    specs = tool_specs()

    def executor(state: DiagnosisState, *, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = context_of(runtime)
        used = state.get("tool_calls_used", 0)
        emit("executor", round=state.get("round", 1), tool_calls_used=used)
        model = get_model("executor", ctx)
        history = [SystemMessage(prompt.text), *state.get("executor_messages", [])]
        if used >= ctx.max_tool_calls_per_round:
            nudge = HumanMessage(BUDGET_SPENT)
            reply = model.invoke([*history, nudge])
            if isinstance(reply, AIMessage) and reply.tool_calls:
                # The budget is a hard bound: calls asked for after it are dropped, not run.
                reply = AIMessage(content=reply.content, id=reply.id)
            return {"executor_messages": [nudge, reply], "route": ["executor"]}
        reply = model.bind_tools(specs).invoke(history)
        return {"executor_messages": [reply], "route": ["executor"]}

    return executor
