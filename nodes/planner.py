"""Planner: turns the question (and, in round 2, the retry context) into an evidence plan."""

from __future__ import annotations

import re
from collections.abc import Callable

from langchain_core.messages import HumanMessage, RemoveMessage, SystemMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime
from langgraph.types import Overwrite

from models.budget import GetModel, Spend
from models.messages import message_text
from models.offline.planner import draft_plan
from models.structured import with_schema
from nodes.common import Node, context_of, dumps, emit
from nodes.prompts import load_prompt
from state.catalog import local_profile
from state.context import Context
from state.display import one_line
from state.graph_state import DiagnosisState
from state.json_shape import obj
from state.records import JSONObject, Task
from tools.registry import tool_specs
from verification.executor_output import parse_json
from verification.output_schemas import MAX_PLAN_STEPS, MAX_STEP_CHARS
from verification.text import strip_fence


def planner_task(state: DiagnosisState, services: list[str], language: str) -> Task:
    """The facts the planner (and then the executor) work from."""
    task = Task(
        question=state.get("question", ""),
        round=state.get("round", 1),
        language=language,
        known_services=services,
    )
    retry_context = state.get("retry_context")
    if task["round"] > 1 and retry_context:
        task["retry_context"] = retry_context
    return task


TOOL_LINE_CHARS = 240
"""Longest line of the planner's tool list (a tool's name, arguments and what it does)."""
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\[(`])")


def tool_lines(offered: list[JSONObject]) -> str:
    """The planner's list of the tools offered: ``- name (arguments): first sentence``.

    Built from the offered specs (``tools.registry``), so a tool registered at run time (an MCP
    server's) is listed like a built-in one and the list never goes stale.
    """
    lines: list[str] = []
    for tool in offered:
        function = obj(tool.get("function"))
        name = str(function.get("name", ""))
        if not name:
            continue
        properties = obj(obj(function.get("parameters")).get("properties"))
        described = one_line(str(function.get("description") or ""))
        first = _SENTENCE_END.split(described, maxsplit=1)[0]
        line = f"- {name} ({', '.join(properties)})" + (f": {first}" if first else "")
        lines.append(one_line(line, TOOL_LINE_CHARS))
    return "\n".join(lines) or "- (none)"


def bounded_plan(text: str) -> str:
    """The plan the executor reads: at most ``MAX_PLAN_STEPS`` steps, each bounded.

    A reply shaped by the planner's schema (``{"steps": [...]}``) gives its steps; any other
    reply (an endpoint without schemas, a model that rambles) keeps its first non-empty lines.
    """
    data, error = parse_json(strip_fence(text)[0])
    steps_value = obj(data).get("steps") if error is None else None
    if isinstance(steps_value, list):
        steps = [one_line(str(step), MAX_STEP_CHARS) for step in steps_value if str(step).strip()]
    else:
        steps = [one_line(line, MAX_STEP_CHARS) for line in text.splitlines() if line.strip()]
    steps = steps[:MAX_PLAN_STEPS]
    if isinstance(steps_value, list):
        return "\n".join(f"{index}. {step}" for index, step in enumerate(steps, start=1))
    return "\n".join(steps)


def make_planner(
    get_model: GetModel,
    services: Callable[[], list[str]],
    offered: Callable[[], list[JSONObject]] = tool_specs,
) -> Node:
    """Build the planner node; ``services`` lists the services the evidence backend knows.

    ``offered`` lists the tools the executor will be offered (default every registered tool;
    the graph passes those the evidence backend serves); the prompt names each of them.
    """
    prompt = load_prompt("planner")

    def planner(state: DiagnosisState, *, runtime: Runtime[Context]) -> dict[str, object]:
        ctx = context_of(runtime)
        emit("planner", round=state.get("round", 1))
        task = planner_task(state, services(), ctx.language)
        if local_profile():
            # A small model keeps to a concrete plan far better than it writes one: it starts
            # from the rules' plan for the question's kind (its own plan is still what runs).
            task["draft_plan"] = draft_plan(task)
        spend = Spend(state, ctx)
        stopped = spend.stop()
        plan = ""
        if stopped is None:
            reply = spend.invoke(
                with_schema(get_model("planner", ctx), "planner_plan"),
                [
                    SystemMessage(prompt.text.replace("{tools}", tool_lines(offered()))),
                    HumanMessage(dumps(task)),
                ],
            )
            plan = bounded_plan(message_text(reply).strip())
        return {
            "usage": spend.added,
            "model_calls": spend.calls,
            "known_services": list(task["known_services"]),
            **({"budget_note": stopped} if stopped else {}),
            "plan": plan,
            "tool_calls_used": 0,
            # Emptied only when it holds something: an empty channel is not written at all.
            **({"calls_not_run": Overwrite([])} if state.get("calls_not_run") else {}),
            "executor_messages": [
                RemoveMessage(id=REMOVE_ALL_MESSAGES),
                HumanMessage(dumps({**task, "plan": plan})),
            ],
            "route": ["planner"],
        }

    return planner
