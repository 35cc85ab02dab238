"""The graph state: the conversation plus the current diagnosis's records (``state.records``).

One thread (a chat conversation) holds many diagnoses. ``intake`` starts each one: it writes the
question and the diagnosis id and resets the fields a client reads while a run is under way
(verdict, score, answer, rounds, route). Every other per-diagnosis field is written by its node
before any node of the same diagnosis reads it. Only plain data: no tool output is kept here
(the ledger holds it), so checkpoints stay small.
"""

from __future__ import annotations

import operator
from typing import Annotated

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from state.records import (
    CallNotRun,
    ComposerOutput,
    ExecutorAnswer,
    GatekeeperResult,
    JSONObject,
    ModelCallRecord,
    ModelUsage,
    ParseStatus,
    RetryContext,
    RootCause,
    RoundSummary,
    RuleEvaluation,
    RunInfo,
    SuspectBrief,
    TraceItem,
    VerifierResult,
    add_usage,
)


class InputState(TypedDict):
    """What a chat client sends: the conversation, the question being its last human message."""

    messages: Annotated[list[AnyMessage], add_messages]


class OutputState(TypedDict, total=False):
    """What a client gets back: the conversation (answer last) and the verdict fields."""

    messages: Annotated[list[AnyMessage], add_messages]
    diagnosis_id: str
    verdict: str
    groundedness_score: float
    root_cause: RootCause | None
    suspects: list[SuspectBrief]


class DiagnosisState(TypedDict, total=False):
    """Full working state of one thread's current diagnosis."""

    messages: Annotated[list[AnyMessage], add_messages]
    """Chat history. Input: the user's question. ``composer`` appends the answer (add_messages)."""

    diagnosis_id: str
    """Written by ``intake``: id of the current diagnosis (stable across a resumed run)."""

    question: str
    """Written by ``intake``: the text of the last human message."""

    run_info: RunInfo
    """Written by ``intake``: offline flag, language and the model label per role."""

    round: int
    """Written by ``intake`` (1) and ``retry`` (2)."""

    started_at: float
    """Written by ``intake``: when the diagnosis started (epoch seconds; its deadline counts
    from here, or from the resume of an interrupted run)."""

    usage: Annotated[ModelUsage, add_usage]
    """Added to by every node that calls a model (``add_usage``); ``intake`` resets it."""

    budget_note: str | None
    """Written by the node that found a budget of the diagnosis spent (``intake`` resets it):
    which budget; the round then ends with what was gathered, and no retry round follows."""

    plan: str
    """Written by ``planner``: the plan text for the current round."""

    model_calls: Annotated[list[ModelCallRecord], operator.add]
    """Appended by every node that calls a model: each call's role, round, reply and usage
    (bounded; what a replay needs); ``intake`` overwrites it with []."""

    known_services: list[str]
    """Written by ``planner``: the services the evidence backend knew (for a replay)."""

    executor_messages: Annotated[list[AnyMessage], add_messages]
    """The executor's private conversation; ``planner`` clears it each round (REMOVE_ALL)."""

    tool_calls_used: int
    """Written by ``planner`` (0) and ``tools``: tool calls made in the current round."""

    calls_not_run: Annotated[list[CallNotRun], operator.add]
    """The current round's tool calls the tool budget kept from running, in the order they were
    asked for: appended by ``tools`` (calls it skipped) and ``executor`` (calls asked for in the
    turn it was told to answer, dropped); ``planner`` empties it (``Overwrite``) at the start of
    each round when it holds anything."""

    parse_status: ParseStatus
    """Written by ``evidence``: how the executor's final message parsed as JSON."""

    structured_output: JSONObject | None
    """Written by ``evidence``: the executor's parsed object as written (audit, Verifier)."""

    executor_answer: ExecutorAnswer
    """Written by ``evidence``: that object read into records, with its schema findings."""

    trace_summary: list[TraceItem]
    """Written by ``evidence``: the tool trace summary over both rounds."""

    suspects: list[SuspectBrief]
    """Written by ``evidence`` (``intake`` resets it): the ranked suspects of the diagnosis's
    last incident analysis (``analyze_incident``); none when it did not run."""

    gatekeeper_result: GatekeeperResult
    """Written by ``gatekeeper``."""

    rule_evaluation: RuleEvaluation
    """Written by ``gatekeeper``: the deterministic evidence score."""

    verifier_result: VerifierResult
    """Written by ``verifier``: claim checks, facts, score, model/derived/effective verdicts."""

    verdict: str
    """Written by ``verifier`` (``intake`` resets it): the effective verdict."""

    groundedness_score: float
    """Written by ``verifier`` (``intake`` resets it): computed in code from the claim checks."""

    root_cause: RootCause | None
    """Written by ``verifier`` (``intake`` resets it): the executor's proposed root cause when
    every claim stating it was confirmed and the verdict allows it
    (``verification.root_cause``), else None."""

    retry_context: RetryContext | None
    """Written by ``retry`` (``intake`` resets it): what round 1 lacked."""

    composer_output: ComposerOutput
    """Written by ``composer``: how the answer was written."""

    answer: str
    """Written by ``composer`` (``intake`` resets it): the answer (also the last AI message)."""

    rounds: Annotated[list[RoundSummary], operator.add]
    """Appended by ``verifier``: one summary per round; ``intake`` overwrites it with []."""

    route: Annotated[list[str], operator.add]
    """Appended by every node: node ids in the order they ran; ``intake`` starts it anew."""
