"""Helpers for graph-level tests: environments, executor answers, verifier replies, runs.

A test states an environment (what the sample backend serves), the scripted replies of each role
and the question; `run_diagnosis` drives the real graph and returns the full final state plus what
each scripted model received, so tests can assert on both the outcome and the model inputs.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from evidence.environment import Environment
from evidence.sample import SampleBackend
from graph.builder import build_graph
from graph.runner import state_of
from models.budget import GetModel
from models.messages import message_text
from models.scripted import ScriptedChatModel, ScriptExhausted, to_message
from persistence.audit import InMemoryAuditStore
from persistence.ledger import InMemoryLedger
from state.context import ComposerMode, Context, Language
from state.graph_state import DiagnosisState
from state.records import (
    AlertEntry,
    Catalog,
    DiagnosisRecord,
    DocumentEntry,
    JSONObject,
    JSONValue,
    LogEntry,
    SeriesEntry,
    VerifierEvaluation,
    VerifierResult,
)
from tests.records import alert_entry, evaluation_of, executor_output
from tests.records import log_entry as log

THREAD: RunnableConfig = {"configurable": {"thread_id": "t1"}}
Checkpointer: TypeAlias = BaseCheckpointSaver[str]
"""What the graph is compiled with (the `checkpointer` fixture gives one of each kind)."""

# --------------------------------------------------------------------------- environment

LOG_500_A = "HTTP 500 Cannot acquire connection from pool (timeout 30000ms)"
LOG_500_B = "HTTP 500 Cannot acquire connection from pool"
LOG_OK = "health check ok"


def log_ref_text(entry: LogEntry) -> str:
    """The exact ref text of a log entry (contracts section 2)."""
    return (
        f"{entry['timestamp']} {entry['level']} {entry['service']} {entry['instance']}: "
        f"{entry['message']}"
    )


def default_logs() -> list[LogEntry]:
    """Two ERROR lines and one INFO line of order-service."""
    return [
        log(LOG_500_A, timestamp="2026-03-01T10:01:00Z", instance="order-1"),
        log(LOG_500_B, timestamp="2026-03-01T10:02:00Z", instance="order-2"),
        log(LOG_OK, timestamp="2026-03-01T10:03:00Z", level="INFO"),
    ]


def environment(
    logs: list[LogEntry] | None = None,
    *,
    alerts: list[AlertEntry] | None = None,
    series: list[SeriesEntry] | None = None,
    documents: list[DocumentEntry] | None = None,
) -> Environment:
    """An environment for the sample backend; logs default to `default_logs()`."""
    firing = alert_entry(
        "OrderService5xxHigh", 0.23, 0.05, "5xx ratio above threshold", "2026-03-01T10:01:30Z"
    )
    return Environment(
        logs=default_logs() if logs is None else logs,
        alerts=[firing] if alerts is None else alerts,
        series=series or [],
        documents=documents or [],
        now="2026-03-01T10:30:00Z",
    )


# --------------------------------------------------------------------------- executor replies

ERROR_LOGS_CALL = {
    "tool_calls": [{"name": "query_logs", "args": {"service": "order-service", "level": "ERROR"}}]
}
ALERTS_CALL = {"tool_calls": [{"name": "query_metrics", "args": {"service": "order-service"}}]}


def executor_answer(
    *claims: JSONObject,
    hypotheses: list[JSONValue] | None = None,
    actions: list[JSONValue] | None = None,
    missing: list[JSONValue] | None = None,
) -> str:
    """An executor_evidence_v2 final answer, as the JSON text the executor sends."""
    answer = executor_output(
        *claims, hypotheses=hypotheses, recommended_actions=actions, missing_info=missing
    )
    return json.dumps(answer, ensure_ascii=False)


def final(text: str) -> dict[str, str]:
    """An executor step that gives the final answer."""
    return {"content": text}


# --------------------------------------------------------------------------- verifier replies


def check(
    cid: str,
    verification: str,
    *,
    trace_ref: str | None = "t1",
    inv: str = "inv-1",
    tool: str = "query_logs",
) -> JSONObject:
    """One claim check of a verifier reply (trace_ref None gives no evidence refs)."""
    refs: list[JSONValue] = (
        []
        if trace_ref is None
        else [{"trace_ref": trace_ref, "tool_name": tool, "source_invocation_ids": [inv]}]
    )
    return {
        "claim_id": cid,
        "verification": verification,
        "detail": f"{cid} checked",
        "evidence_refs": refs,
    }


def verifier_reply(verdict: str, *checks: JSONObject, score: float = 1.0) -> str:
    """A well-formed verifier reply."""
    return json.dumps(
        {
            "rationale": "checked against the verified excerpts",
            "claim_checks": list(checks),
            "critical_fact_count": len(checks),
            "groundedness_score": score,
            "verdict": verdict,
        }
    )


# --------------------------------------------------------------------------- recording models


class RecordingChatModel(ScriptedChatModel):
    """A scripted model that records the messages of every call, and the tools it offered."""

    calls: list[list[BaseMessage]] = Field(default_factory=list)
    offered: list[tuple[str, ...]] = Field(default_factory=list)

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        self.calls.append(list(messages))
        self.offered.append(tuple(kwargs.get("tools") or ()))
        return super()._generate(messages, *args, **kwargs)


def recording_models(
    replies: dict[str, list[Any]], overrides: dict[str, BaseChatModel] | None = None
) -> tuple[GetModel, dict[str, RecordingChatModel]]:
    """Like `scripted_models`, but every role's model records its inputs.

    `overrides` replaces a role's model (e.g. the offline verifier).
    """
    counter: Iterator[int] = iter(range(1, 1_000_000))
    models: dict[str, RecordingChatModel] = {}
    for role, items in replies.items():
        messages = [to_message(item, prefix="call", counter=counter) for item in items]
        models[role] = RecordingChatModel(
            messages=iter(messages), role=role, disable_streaming=True
        )
    extra = overrides or {}

    def get_model(role: str, ctx: Context) -> BaseChatModel:
        if role in extra:
            return extra[role]
        if role not in models:
            raise ScriptExhausted(f"the script has no {role} replies")
        return models[role]

    return get_model, models


# --------------------------------------------------------------------------- running


@dataclass
class Run:
    """The outcome of one diagnosis: full final state and the models' recorded inputs."""

    state: DiagnosisState
    models: dict[str, RecordingChatModel]
    ledger: InMemoryLedger
    audit: InMemoryAuditStore
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def route(self) -> list[str]:
        """Node ids in the order they ran."""
        return list(self.state["route"])

    @property
    def answer(self) -> str:
        """The user-facing answer."""
        return str(self.state["answer"])

    @property
    def verifier(self) -> VerifierResult:
        """The final verifier result."""
        return self.state["verifier_result"]

    def verifier_calls(self) -> list[list[BaseMessage]]:
        """Every message list the verifier model received."""
        return self.models["verifier"].calls if "verifier" in self.models else []

    def verifier_payloads(self) -> list[dict[str, Any]]:
        """The payload of each verifier round (first call of each round)."""
        payloads = []
        for messages in self.verifier_calls():
            data = payload_of(messages[1])
            if data not in payloads:
                payloads.append(data)
        return payloads


def payload_of(message: BaseMessage) -> dict[str, Any]:
    """Read the JSON payload quoted between the untrusted-data markers."""
    text = message_text(message)
    start = text.index("<<<UNTRUSTED_DATA") + len("<<<UNTRUSTED_DATA")
    end = text.rindex("UNTRUSTED_DATA>>>")
    data: dict[str, Any] = json.loads(text[start:end])
    return data


def json_objects(value: object) -> list[dict[str, Any]]:
    """A JSON value that must be a list of objects, typed as such."""
    assert isinstance(value, list), value
    assert all(isinstance(item, dict) for item in value), value
    return [dict(item) for item in value]


NodeWrapper = Callable[[str, Runnable[Any, Any]], Runnable[Any, Any]]
"""Takes a node's id and runnable, returns the runnable the graph runs in its place."""


def run_diagnosis(
    env: Environment,
    replies: dict[str, list[Any]],
    *,
    question: str = "Is order-service returning HTTP 500 errors?",
    language: Language = "en",
    composer_mode: ComposerMode = "template",
    overrides: dict[str, BaseChatModel] | None = None,
    checkpointer: Checkpointer | None = None,
    wrap_nodes: NodeWrapper | None = None,
    max_tool_calls: int | None = None,
    gatekeeper_catalog: Catalog | None = None,
) -> Run:
    """Run one diagnosis through the real graph with scripted (recording) models.

    `checkpointer` defaults to a fresh `InMemorySaver`; `wrap_nodes(name, node)` gives the
    runnable the graph runs in place of each node; `max_tool_calls` sets the round's tool
    budget; `gatekeeper_catalog` the Gatekeeper's rule catalog (default: the bundled one).
    """
    get_model, models = recording_models(replies, overrides)
    ledger = InMemoryLedger()
    audit = InMemoryAuditStore()
    backend = SampleBackend(env)
    builder = build_graph(
        get_model=get_model,
        backend=backend,
        ledger=ledger,
        audit=audit,
        gatekeeper_catalog=gatekeeper_catalog,
    )
    if wrap_nodes is not None:
        for name, spec in builder.nodes.items():
            assert isinstance(spec.runnable, Runnable)
            spec.runnable = wrap_nodes(name, spec.runnable)
    graph = builder.compile(checkpointer=InMemorySaver() if checkpointer is None else checkpointer)
    context = Context(offline=False, language=language, composer_mode=composer_mode)
    if max_tool_calls is not None:
        context = dataclasses.replace(context, max_tool_calls_per_round=max_tool_calls)
    graph.invoke({"messages": [HumanMessage(question)]}, config=THREAD, context=context)
    state = state_of(graph, THREAD)
    return Run(state=state, models=models, ledger=ledger, audit=audit)


def one_round(
    answer: str,
    *verifier: str,
    env: Environment | None = None,
    planner: str = "check order-service error logs",
    composer: list[Any] | None = None,
    language: Language = "en",
    overrides: dict[str, BaseChatModel] | None = None,
    checkpointer: Checkpointer | None = None,
) -> Run:
    """One diagnosis whose executor queries the ERROR logs once, then gives `answer`.

    `verifier` are the verifier's replies; `composer` replies switch the composer to model mode.
    """
    replies: dict[str, list[Any]] = {
        "planner": [planner],
        "executor": [ERROR_LOGS_CALL, final(answer)],
        "verifier": list(verifier),
    }
    if composer is not None:
        replies["composer"] = composer
    return run_diagnosis(
        env or environment(),
        replies,
        language=language,
        composer_mode="model" if composer is not None else "template",
        overrides=overrides,
        checkpointer=checkpointer,
    )


def same_answer_twice(
    answer: str, verifier: str, *, checkpointer: Checkpointer | None = None
) -> Run:
    """Two rounds that each query the ERROR logs, give `answer` and get the `verifier` reply."""
    return run_diagnosis(
        environment(),
        {
            "planner": ["plan one", "plan two"],
            "executor": [ERROR_LOGS_CALL, final(answer), ERROR_LOGS_CALL, final(answer)],
            "verifier": [verifier, verifier],
        },
        checkpointer=checkpointer,
    )


def stored_record(audit: InMemoryAuditStore, diagnosis_id: str) -> DiagnosisRecord:
    """The audit row of a diagnosis, which must exist."""
    record = audit.get(diagnosis_id)
    assert record is not None, f"no audit row for {diagnosis_id}"
    return record


def self_evaluation(audit: InMemoryAuditStore, diagnosis_id: str) -> JSONObject:
    """The `self_evaluation` object of a diagnosis's audit row."""
    evaluation = stored_record(audit, diagnosis_id)["self_evaluation"]
    assert evaluation is not None
    return evaluation


def stored_evaluation(audit: InMemoryAuditStore, diagnosis_id: str) -> VerifierEvaluation:
    """The stored verifier evaluation of a diagnosis, read into its record."""
    return evaluation_of(stored_record(audit, diagnosis_id))


# --------------------------------------------------------------------------- answer reading

_HEADING = {"zh": re.compile(r"^【(.+)】$"), "en": re.compile(r"^## (.+)$")}


def sections(answer: str, language: Language = "en") -> dict[str, str]:
    """Split a rendered answer into `{heading title: body}` (text before any heading: "")."""
    found: dict[str, list[str]] = {"": []}
    current = ""
    for line in answer.splitlines():
        match = _HEADING[language].match(line.strip())
        if match:
            current = match.group(1)
            found.setdefault(current, [])
        else:
            found[current].append(line)
    return {title: "\n".join(lines) for title, lines in found.items()}


ROUND_STEPS = ["planner", "executor", "tools", "executor", "evidence", "gatekeeper", "verifier"]
"""The nodes of one round with one tool-call turn, from the planner to the verifier."""
ONE_ROUND_ROUTE = ["intake", *ROUND_STEPS]
"""The route of round one, up to the verifier."""
ROUND_TWO_ROUTE = ["retry", *ROUND_STEPS]
"""The route of round two, from the retry node to the verifier."""
