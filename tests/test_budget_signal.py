"""The tool budget between the nodes: typed state, never message text.

The ``tools`` node lists the calls it skipped and the executor node the calls it dropped in
``calls_not_run``; once the round's budget is spent the executor calls its model without tools,
which is how the offline executor knows it must answer. Shown with a scripted model (what each
call offered) and with the offline models through the whole graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver

from evidence.environment import default_environment
from evidence.sample import SampleBackend
from graph.builder import build_graph
from graph.runner import state_of
from models.factory import make_model_factory
from models.messages import message_text, render_call, replies
from models.offline import OfflineExecutor
from nodes.prompts import load_prompt
from state.context import Context
from state.records import CallNotRun
from tests.records import binding, claim
from tests.scenario_kit import (
    ERROR_LOGS_CALL,
    THREAD,
    check,
    environment,
    executor_answer,
    final,
    run_diagnosis,
    verifier_reply,
)
from tools.registry import offered

# The tools offered over the sample environment: every tool whose evidence it serves.
TOOLS = tuple(
    convert_to_openai_tool(spec)["function"]["name"]
    for spec in offered(SampleBackend(default_environment()))
)
GOOD_ANSWER = executor_answer(
    claim(
        "c1",
        "order-service logged HTTP 500 errors",
        binding("inv-1", "logs[0]", "HTTP 500 Cannot acquire connection"),
    )
)
THREE_CALLS = {
    "tool_calls": [
        {"name": "query_logs", "args": {"service": "order-service", "level": "ERROR"}},
        {"name": "query_metrics", "args": {"service": "order-service"}},
        {"name": "query_logs", "args": {"service": "payment-service", "level": "ERROR"}},
    ]
}
SKIPPED_CALL = CallNotRun(
    tool_name="query_logs",
    arguments={"service": "payment-service", "level": "ERROR"},
    reason="budget_skipped",
)


def test_budget_signal_scripted_calls_not_run_are_typed_and_the_last_call_offers_no_tools() -> None:
    answer_and_more = {
        "content": GOOD_ANSWER,
        "tool_calls": [{"name": "lookup_knowledge", "args": {"query": "connection pool"}}],
    }
    run = run_diagnosis(
        environment(),
        {
            "planner": ["query the logs and metrics"],
            "executor": [THREE_CALLS, answer_and_more],
            "verifier": [verifier_reply("PASS", check("c1", "direct_observation"))],
        },
        max_tool_calls=2,
    )

    assert run.state["calls_not_run"] == [
        SKIPPED_CALL,
        CallNotRun(
            tool_name="lookup_knowledge",
            arguments={"query": "connection pool"},
            reason="dropped_after_budget",
        ),
    ]
    executor = run.models["executor"]
    # The tools are offered while the budget lasts; the call after it offers none ...
    assert executor.offered == [TOOLS, ()]
    assert message_text(executor.calls[-1][-1]) == load_prompt("executor_budget").text
    # ... and the reply keeps no trace of the dropped calls: the state lists them.
    final_reply = replies(run.state["executor_messages"])[-1]
    assert final_reply.tool_calls == [] and final_reply.additional_kwargs == {}
    coverage = run.verifier["question_coverage"]
    assert coverage["not_run"] == [
        "query_logs level=ERROR service=payment-service",
        "lookup_knowledge query=connection pool",
    ]
    assert "lookup_knowledge query=connection pool" in run.answer


def test_budget_signal_a_new_round_starts_with_no_calls_not_run() -> None:
    thin = executor_answer(
        claim(
            "c1", "order-service returned HTTP 500 errors", binding("inv-1", "logs[0]", "HTTP 500")
        )
    )
    run = run_diagnosis(
        environment(),
        {
            "planner": ["plan one", "plan two"],
            "executor": [THREE_CALLS, final(thin), ERROR_LOGS_CALL, final(GOOD_ANSWER)],
            "verifier": [
                verifier_reply("LOW_CONFID", check("c1", "unsupported"), score=0.0),
                verifier_reply("PASS", check("c1", "direct_observation", trace_ref="t1")),
            ],
        },
        max_tool_calls=2,
    )

    assert run.state["round"] == 2
    assert run.state["calls_not_run"] == []
    assert run.verifier["question_coverage"]["not_run"] == []


class _RecordingExecutor(OfflineExecutor):
    """The offline executor, recording the tools each call offered and what it answered."""

    offered: list[tuple[str, ...]] = []
    answered: list[AIMessage] = []

    def respond(self, messages: list[BaseMessage], *, tools: Sequence[str] = ()) -> AIMessage:
        reply = super().respond(messages, tools=tools)
        self.offered.append(tuple(tools))
        self.answered.append(reply)
        return reply


def test_budget_signal_offline_executor_answers_when_no_tools_are_offered() -> None:
    executor = _RecordingExecutor(offered=[], answered=[])
    offline = make_model_factory()

    def get_model(role: str, ctx: Context) -> BaseChatModel:
        return executor if role == "executor" else offline(role, ctx)

    graph = build_graph(get_model=get_model, backend=SampleBackend(default_environment())).compile(
        checkpointer=InMemorySaver()
    )
    context = Context(offline=True, language="en", max_tool_calls_per_round=1)
    question = HumanMessage("Why is order-service returning 500 errors?")
    graph.invoke({"messages": [question]}, config=THREAD, context=context)
    state = state_of(graph, THREAD)

    # The first turn offers the tools; the one after the budget offers none and is answered.
    assert executor.offered[0] == TOOLS and executor.offered[-1] == ()
    last = executor.answered[-1]
    assert str(last.content).startswith("{") and '"executor_evidence_v2"' in str(last.content)
    # What it still asked for is dropped and listed, after what the tools node skipped.
    dropped: list[Any] = [
        {"tool_name": call["name"], "arguments": call["args"], "reason": "dropped_after_budget"}
        for call in last.tool_calls
    ]
    assert dropped
    not_run = state["calls_not_run"]
    assert not_run[-len(dropped) :] == dropped
    assert {call["reason"] for call in not_run[: -len(dropped)]} <= {"budget_skipped"}
    rendered = [render_call(call["tool_name"], call["arguments"]) for call in not_run]
    coverage = state["verifier_result"]["question_coverage"]
    assert coverage["not_run"] == list(dict.fromkeys(rendered))
    assert coverage["status"] == "partial"
