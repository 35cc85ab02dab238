"""Routers: the conditional edges of contracts section 1."""

from __future__ import annotations

from typing import Literal

from langchain_core.messages import AIMessage

from state.graph_state import DiagnosisState

RETRY_SCORE = 0.5
MAX_ROUNDS = 2


def after_executor(state: DiagnosisState) -> Literal["tools", "evidence"]:
    """Run the requested tools, or go on to evidence once the executor has answered."""
    messages = state.get("executor_messages", [])
    last = messages[-1] if messages else None
    if isinstance(last, AIMessage) and last.tool_calls:
        return "tools"
    return "evidence"


def after_verifier(state: DiagnosisState) -> Literal["composer", "retry"]:
    """PASS, REJECT, LOW_CONFID >= 0.5 or round 2 -> composer; thin round 1 -> one retry."""
    if (
        state.get("verdict") == "LOW_CONFID"
        and state.get("groundedness_score", 0.0) < RETRY_SCORE
        and state.get("round", 1) < MAX_ROUNDS
    ):
        return "retry"
    return "composer"


def composer_mode(verdict: str | None) -> Literal["pass", "uncertain", "degraded"]:
    """The composer's mode for an effective verdict."""
    if verdict == "PASS":
        return "pass"
    if verdict == "LOW_CONFID":
        return "uncertain"
    return "degraded"
