"""The typed graph state. Only plain data: pydantic objects are dumped before they get here.

One thread (a chat conversation) holds many diagnoses; ``intake`` resets every per-diagnosis
field when a new user message arrives, so nothing from an earlier question leaks into the next.
"""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

RESET = "__reset__"


def extend_or_reset(left: list[Any] | None, right: list[Any] | None) -> list[Any]:
    """Append ``right`` to ``left``; a ``right`` that starts with ``RESET`` replaces ``left``."""
    if right and right[0] == RESET:
        return list(right[1:])
    return list(left or []) + list(right or [])


class InputState(TypedDict):
    """What a chat client sends: the conversation, the question being its last human message."""

    messages: Annotated[list[AnyMessage], add_messages]


class OutputState(TypedDict, total=False):
    """What a client gets back: the conversation (answer last) and the verdict fields."""

    messages: Annotated[list[AnyMessage], add_messages]
    diagnosis_id: str
    verdict: str
    groundedness_score: float


class DiagnosisState(TypedDict, total=False):
    """Full working state of one thread's current diagnosis."""

    messages: Annotated[list[AnyMessage], add_messages]
    """Chat history. Input: the user's question. ``composer`` appends the answer (add_messages)."""

    diagnosis_id: str
    """Written by ``intake``: id of the current diagnosis (stable across a resumed run)."""

    question: str
    """Written by ``intake``: the text of the last human message."""

    run_info: dict[str, Any]
    """Written by ``intake``: offline flag and the model label per role."""

    round: int
    """Written by ``intake`` (1) and ``retry`` (2)."""

    plan: str
    """Written by ``planner``: the plan text for the current round."""

    executor_messages: Annotated[list[AnyMessage], add_messages]
    """The executor's private conversation; ``planner`` clears it each round (REMOVE_ALL)."""

    tool_calls_used: int
    """Written by ``planner`` (0) and ``tools``: tool calls made in the current round."""

    parse_status: dict[str, Any]
    """Written by ``evidence``: {status: valid|missing|malformed, fence_stripped, error}."""

    structured_output: dict[str, Any] | None
    """Written by ``evidence``: the parsed executor_evidence_v2 object, or None."""

    trace_summary: list[dict[str, Any]]
    """Written by ``evidence``: the tool trace summary over both rounds (contracts section 8)."""

    gatekeeper_result: dict[str, Any]
    """Written by ``gatekeeper`` (contracts section 4)."""

    rule_evaluation: dict[str, Any]
    """Written by ``gatekeeper``: the deterministic evidence score (contracts section 7)."""

    verifier_result: dict[str, Any]
    """Written by ``verifier``: claim checks, facts, score, model/derived/effective verdicts."""

    verdict: str
    """Written by ``verifier``: the effective verdict PASS | LOW_CONFID | REJECT."""

    groundedness_score: float
    """Written by ``verifier``: computed in code from the claim checks."""

    retry_context: dict[str, Any] | None
    """Written by ``retry``: what round 1 lacked (verdict, score, gaps, failed rules, queries)."""

    composer_output: dict[str, Any]
    """Written by ``composer``: {mode, parse_status, language}."""

    answer: str
    """Written by ``composer``: the user-facing answer (also the last AI message)."""

    rounds: Annotated[list[dict[str, Any]], extend_or_reset]
    """Appended by ``verifier``: one summary per round; ``intake`` resets it."""

    route: Annotated[list[str], extend_or_reset]
    """Appended by every node: node ids in the order they ran; ``intake`` resets it."""
