"""Offline planner: the first tool calls for what the question asks (``models.offline.rules``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from models.offline.base import OfflineModel, first_json_human
from models.offline.question_kinds import plan_for
from models.offline.rules import HOP_NOTE, analysis, analysis_step, render_steps
from verification.intent import CAUSE_KINDS


class OfflinePlanner(OfflineModel):
    """Deterministic planner: the queries that answer the question's kind, per named service."""

    def respond(self, messages: list[BaseMessage], *, tools: Sequence[str] = ()) -> AIMessage:
        """Write the numbered tool plan for the task facts in the first JSON human message."""
        facts = first_json_human(messages)
        found = analysis(facts)
        note = HOP_NOTE if found["kind"] == "why" and int(facts.get("round", 1)) == 1 else ""
        return AIMessage(content=render_steps(plan_for(facts), note=note))


def draft_plan(task: Mapping[str, Any]) -> str:
    """The rules' plan for a task, as numbered steps with their arguments written out.

    Under the local model profile the planner model is given it to start from
    (``nodes.planner``): a small model keeps to a concrete plan far better than it writes one.
    A question about the cause that names a time starts the rules with the current time only
    (their next calls follow from it); the draft adds the incident analysis from the time the
    question names, which answers it, so the model does not have to find that step alone.
    """
    steps = plan_for(dict(task))
    found = analysis(dict(task))
    if found["kind"] in CAUSE_KINDS and all(tool != "analyze_incident" for tool, _ in steps):
        steps = [*steps, analysis_step(found, str(task.get("question", "")))]
    return render_steps(steps)
