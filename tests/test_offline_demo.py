"""The offline demo on the bundled sample incident: no model, no API key, a full diagnosis."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from graph.builder import build_graph
from persistence.audit import InMemoryAuditStore
from persistence.ledger import InMemoryLedger
from state.context import Context


@pytest.fixture
def demo(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    audit = InMemoryAuditStore()
    ledger = InMemoryLedger()
    app = build_graph(audit=audit, ledger=ledger).compile(checkpointer=InMemorySaver())
    return {"app": app, "audit": audit, "ledger": ledger}


def ask(demo: dict[str, Any], question: str, thread: str = "demo", **ctx: Any) -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread}}
    demo["app"].invoke({"messages": [HumanMessage(question)]}, config, context=Context(**ctx))
    values: dict[str, Any] = demo["app"].get_state(config).values
    return values


def test_offline_demo_passes_a_question_the_sample_data_answers(demo: dict[str, Any]) -> None:
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


def test_offline_demo_does_not_pass_a_service_without_data(demo: dict[str, Any]) -> None:
    state = ask(demo, "notification-service 有错误吗？")

    assert state["verdict"] != "PASS"
    assert state["round"] == 2
    assert state["route"].count("planner") == 2
    assert state["retry_context"]["previous_verdict"] == "LOW_CONFID"
    assert "notification-service" in state["answer"]
    assert "【证据缺口】" in state["answer"]


def test_offline_demo_speaks_english_on_request(demo: dict[str, Any]) -> None:
    state = ask(demo, "Why is order-service returning 500s?", language="en")

    assert state["verdict"] == "PASS"
    assert "## Conclusion (confirmed facts)" in state["answer"]
    assert "Offline mode" in state["answer"]
    assert state["composer_output"]["language"] == "en"


def test_offline_demo_is_labelled_offline_in_the_audit(demo: dict[str, Any]) -> None:
    state = ask(demo, "order-service 为什么报 500 错误？")

    record = demo["audit"].get(state["diagnosis_id"])
    assert record["status"] == "done"
    assert record["verdict"] == "PASS"
    evaluation = record["self_evaluation"]["verifier_evaluation"]
    assert evaluation["offline"] is True
    assert set(evaluation["models"].values()) == {"offline-rules"}
    assert evaluation["prompt_audit"]["prompts"]["verifier"]["version"] == "v1"
    assert "rule_evaluation" in record["self_evaluation"]


def test_offline_demo_second_question_starts_a_fresh_diagnosis(demo: dict[str, Any]) -> None:
    first = ask(demo, "order-service 为什么报 500 错误？", thread="shared")
    second = ask(demo, "notification-service 有错误吗？", thread="shared")

    assert first["diagnosis_id"] != second["diagnosis_id"]
    assert second["route"][0] == "intake"
    assert second["route"].count("intake") == 1
    assert len(second["rounds"]) == 2
    first_ids = {i["invocation_id"] for i in demo["ledger"].list(first["diagnosis_id"])}
    second_ids = {i["invocation_id"] for i in demo["ledger"].list(second["diagnosis_id"])}
    assert "inv-1" in first_ids and "inv-1" in second_ids
    cited = {
        b["source_invocation_id"]
        for c in (second["structured_output"] or {}).get("claims", [])
        for b in c["evidence_bindings"]
    }
    assert cited <= second_ids
    humans = [m for m in second["messages"] if isinstance(m, HumanMessage)]
    assert len(humans) == 2
    assert len(demo["audit"].list("shared")) == 2


def test_offline_demo_checkpoints_tool_references_not_ref_texts(demo: dict[str, Any]) -> None:
    import json

    from langchain_core.messages import ToolMessage

    state = ask(demo, "order-service 为什么报 500 错误？")

    tool_messages = [m for m in state["executor_messages"] if isinstance(m, ToolMessage)]
    assert tool_messages
    for message in tool_messages:
        stored = json.loads(message.content)
        assert set(stored) == {"invocation_id", "tool_name", "status"}
    # The executor still cited exact ref texts: it read them, expanded from the ledger.
    assert state["gatekeeper_result"]["status"] == "pass"
    assert state["verdict"] == "PASS"


def test_offline_demo_new_question_abandons_a_dead_diagnosis_of_the_thread(
    demo: dict[str, Any],
) -> None:
    demo["audit"].start_diagnosis("diag-dead", thread_id="graph-only", question="q")

    state = ask(demo, "order-service 为什么报 500 错误？", thread="graph-only")

    assert demo["audit"].get("diag-dead")["status"] == "abandoned"
    assert demo["audit"].get(state["diagnosis_id"])["status"] == "done"
