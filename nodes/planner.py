"""Planner: turns the question (and, in round 2, the retry context) into an evidence plan."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.messages import HumanMessage, RemoveMessage, SystemMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime

from nodes.common import GetModel, Node, context_of, dumps, emit, message_text
from nodes.prompts import load_prompt
from state.context import Context
from state.graph_state import DiagnosisState


def planner_input(state: DiagnosisState, services: list[str], language: str) -> dict[str, Any]:
    """The facts the planner (and then the executor) work from."""
    data: dict[str, Any] = {
        "question": state.get("question", ""),
        "round": state.get("round", 1),
        "language": language,
        "known_services": services,
    }
    if state.get("round", 1) > 1 and state.get("retry_context"):
        data["retry_context"] = state.get("retry_context")
    return data


def make_planner(get_model: GetModel, services: Callable[[], list[str]]) -> Node:
    """Build the planner node; ``services`` lists the services the evidence backend knows."""
    prompt = load_prompt("planner")

    def planner(state: DiagnosisState, *, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = context_of(runtime)
        emit("planner", round=state.get("round", 1))
        facts = planner_input(state, services(), ctx.language)
        reply = get_model("planner", ctx).invoke(
            [SystemMessage(prompt.text), HumanMessage(dumps(facts))]
        )
        plan = message_text(reply).strip()
        task = {**facts, "plan": plan}
        return {
            "plan": plan,
            "tool_calls_used": 0,
            "executor_messages": [
                RemoveMessage(id=REMOVE_ALL_MESSAGES),
                HumanMessage(dumps(task)),
            ],
            "route": ["planner"],
        }

    return planner
