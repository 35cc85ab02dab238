"""Routers: the conditional edges of the flow (docs/contracts.md, "Flow")."""

from __future__ import annotations

from typing import Literal

from models.messages import last_reply
from state.graph_state import DiagnosisState
from state.records import MAX_ROUNDS

RETRY_SCORE = 0.5
"""A LOW_CONFID round 1 below this score gets the one extra evidence round."""


def after_executor(state: DiagnosisState) -> Literal["tools", "evidence"]:
    """Run the requested tools, or go on to evidence once the executor has answered."""
    last = last_reply(state.get("executor_messages", []))
    if last is not None and last.tool_calls:
        return "tools"
    return "evidence"


def after_verifier(state: DiagnosisState) -> Literal["composer", "retry"]:
    """Thin round 1 -> one retry; PASS, REJECT, LOW_CONFID >= 0.5, round 2 -> composer.

    A spent model budget (``budget_note``) also goes to the composer: no retry round follows.
    """
    if (
        not state.get("budget_note")  # a spent budget ends the diagnosis with what it has
        and state.get("verdict") == "LOW_CONFID"
        and state.get("groundedness_score", 0.0) < RETRY_SCORE
        and state.get("round", 1) < MAX_ROUNDS
    ):
        return "retry"
    return "composer"
