"""The offline demo on the bundled sample incident: no model, no API key, a full diagnosis."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from graph.compile import RunStores, compile_graph
from persistence.audit import InMemoryAuditStore
from persistence.ledger import InMemoryLedger
from state.context import Context
from state.graph_state import DiagnosisState, InputState, OutputState
from tests.scenario_kit import Checkpointer, self_evaluation, stored_evaluation, stored_record


@dataclass
class Demo:
    """The default (offline) graph on the bundled sample incident, and its stores."""

    app: CompiledStateGraph[DiagnosisState, Context, InputState, OutputState]
    audit: InMemoryAuditStore
    ledger: InMemoryLedger


@pytest.fixture
def demo(monkeypatch: pytest.MonkeyPatch, checkpointer: Checkpointer) -> Demo:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    audit = InMemoryAuditStore()
    ledger = InMemoryLedger()
    app = compile_graph(RunStores(checkpointer, audit=audit, ledger=ledger))
    return Demo(app=app, audit=audit, ledger=ledger)


def ask(demo: Demo, question: str, thread: str = "demo", **ctx: Any) -> dict[str, Any]:
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    demo.app.invoke({"messages": [HumanMessage(question)]}, config, context=Context(**ctx))
    return dict(demo.app.get_state(config).values)


def test_offline_demo_passes_a_question_the_sample_data_answers(demo: Demo) -> None:
    state = ask(demo, "order-service 为什么报 500 错误？")

    assert state["verdict"] == "PASS"
    assert state["round"] == 1
    assert state["gatekeeper_result"]["status"] == "pass"
    assert state["verifier_result"]["verifier_mode"] == "offline"
    answer = state["answer"]
    assert "【结论（已确认的事实）】" in answer
    assert "inv-" in answer
    assert "离线模式" in answer
    assert "answer_version" not in answer
    assert isinstance(state["messages"][-1], AIMessage)
    assert state["messages"][-1].content == answer
    claims = state["structured_output"]["claims"]
    assert claims and all(c["evidence_bindings"][0]["raw_path"] for c in claims)


def test_offline_demo_does_not_pass_a_service_without_data(demo: Demo) -> None:
    state = ask(demo, "notification-service 有错误吗？")

    assert state["verdict"] != "PASS"
    assert state["round"] == 2
    assert state["route"].count("planner") == 2
    assert state["retry_context"]["previous_verdict"] == "LOW_CONFID"
    assert "notification-service" in state["answer"]
    assert "【证据缺口】" in state["answer"]


def test_offline_demo_speaks_english_on_request(demo: Demo) -> None:
    state = ask(demo, "Why is order-service returning 500s?", language="en")

    assert state["verdict"] == "PASS"
    assert "## Conclusion (confirmed facts)" in state["answer"]
    assert "Offline mode" in state["answer"]
    assert state["composer_output"]["language"] == "en"


def test_offline_demo_is_labelled_offline_in_the_audit(demo: Demo) -> None:
    state = ask(demo, "order-service 为什么报 500 错误？")

    record = stored_record(demo.audit, state["diagnosis_id"])
    assert record["status"] == "done"
    assert record["verdict"] == "PASS"
    verifier = stored_evaluation(demo.audit, state["diagnosis_id"])
    assert verifier["offline"] is True
    assert set(verifier["models"].values()) == {"offline-rules"}
    assert verifier["prompt_audit"]["prompts"]["verifier"]["version"] == "v2"
    assert "rule_evaluation" in self_evaluation(demo.audit, state["diagnosis_id"])


def test_offline_demo_second_question_starts_a_fresh_diagnosis(demo: Demo) -> None:
    first = ask(demo, "order-service 为什么报 500 错误？", thread="shared")
    second = ask(demo, "notification-service 有错误吗？", thread="shared")

    assert first["diagnosis_id"] != second["diagnosis_id"]
    assert second["route"][0] == "intake"
    assert second["route"].count("intake") == 1
    assert len(second["rounds"]) == 2
    first_ids = {i["invocation_id"] for i in demo.ledger.list(first["diagnosis_id"])}
    second_ids = {i["invocation_id"] for i in demo.ledger.list(second["diagnosis_id"])}
    assert "inv-1" in first_ids and "inv-1" in second_ids
    cited = {
        b["source_invocation_id"]
        for c in (second["structured_output"] or {}).get("claims", [])
        for b in c["evidence_bindings"]
    }
    assert cited <= second_ids
    humans = [m for m in second["messages"] if isinstance(m, HumanMessage)]
    assert len(humans) == 2
    assert len(demo.audit.list("shared")) == 2


def test_offline_demo_checkpoints_tool_references_not_ref_texts(demo: Demo) -> None:
    import json

    from langchain_core.messages import ToolMessage

    state = ask(demo, "order-service 为什么报 500 错误？")

    tool_messages = [m for m in state["executor_messages"] if isinstance(m, ToolMessage)]
    assert tool_messages
    for message in tool_messages:
        assert isinstance(message.content, str)
        stored = json.loads(message.content)
        assert set(stored) == {"invocation_id", "tool_name", "status"}
    # The executor still cited exact ref texts: it read them, expanded from the ledger.
    assert state["gatekeeper_result"]["status"] == "pass"
    assert state["verdict"] == "PASS"


def test_offline_demo_new_question_abandons_a_dead_diagnosis_of_the_thread(
    demo: Demo,
) -> None:
    demo.audit.start_diagnosis("diag-dead", thread_id="graph-only", question="q")

    state = ask(demo, "order-service 为什么报 500 错误？", thread="graph-only")

    assert stored_record(demo.audit, "diag-dead")["status"] == "abandoned"
    assert stored_record(demo.audit, state["diagnosis_id"])["status"] == "done"
