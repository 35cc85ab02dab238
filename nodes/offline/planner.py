"""Offline planner: picks tools from the question and the known services."""

from __future__ import annotations

from langchain_core.messages import AIMessage, BaseMessage

from nodes.offline.base import OfflineModel, first_json_human
from nodes.offline.rules import plan_steps, render_steps


class OfflinePlanner(OfflineModel):
    """Deterministic planner: metrics and ERROR logs per named service, plus runbooks."""

    def respond(self, messages: list[BaseMessage]) -> AIMessage:
        """Write the numbered tool plan for the facts in the last JSON human message."""
        facts = first_json_human(messages)
        return AIMessage(content=render_steps(plan_steps(facts)))
