"""The real model factory against a local fake OpenAI-compatible endpoint, and offline mode."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from graph.builder import build_graph
from graph.models import ModelConfigError, OfflineComposerUnavailable, make_model_factory
from nodes.common import model_label
from nodes.offline import (
    OFFLINE_LABEL,
    OfflineExecutor,
    OfflinePlanner,
    OfflineVerifier,
)
from state.context import Context
from verification.verifier_payload import CLOSE, OPEN

QUESTION = "order-service 为什么报 500？"
PLAN_TEXT = "PLAN-MARKER-7f3a: read the ERROR logs of order-service, then decide."
TOOL_NAMES = ["query_logs", "query_metrics", "lookup_knowledge", "get_current_time"]


@dataclass
class FakeOpenAI:
    """What the fake endpoint received, one entry per chat-completion request."""

    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def by_role(self, role: str) -> list[dict[str, Any]]:
        return [body for body in self.requests if role_of(body) == role]


def role_of(body: dict[str, Any]) -> str:
    """Tell the role from the system prompt's opening sentence."""
    system = next((m for m in body.get("messages", []) if m.get("role") == "system"), None)
    text = str((system or {}).get("content", ""))
    for role in ("planner", "executor", "verifier", "composer"):
        if text.startswith(f"You are the {role}"):
            return role
    return "unknown"


def user_texts(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content", "")) for m in body["messages"] if m.get("role") == "user"]


def _completion(model: str, message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }


def _executor_reply(body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    tool_results = [m for m in body["messages"] if m.get("role") == "tool"]
    if not tool_results:
        call = {
            "id": "call_fake_1",
            "type": "function",
            "function": {
                "name": "query_logs",
                "arguments": json.dumps({"service": "order-service", "level": "ERROR"}),
            },
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    # Cite what the tool result really says, so the binding is exact.
    result = json.loads(tool_results[0]["content"])
    ref = next(r for r in result["evidence_refs"] if r["raw_path"] == "logs[0]")
    message = ref["text"].split(": ", 1)[1]
    answer = {
        "answer_version": "executor_evidence_v2",
        "claims": [
            {
                "claim_id": "c1",
                "claim_type": "observation",
                "claim_text": f"order-service logged an ERROR: {message}",
                "support_level": "direct",
                "evidence_bindings": [
                    {
                        "source_type": "log",
                        "tool_name": "query_logs",
                        "source_invocation_id": result["invocation_id"],
                        "raw_path": "logs[0]",
                        "evidence_excerpt": message,
                    }
                ],
            }
        ],
        "hypotheses": [],
        "recommended_actions": [],
        "missing_info": [],
    }
    return {"role": "assistant", "content": json.dumps(answer)}, "stop"


def _verifier_reply(body: dict[str, Any]) -> dict[str, Any]:
    text = user_texts(body)[0]
    payload = json.loads(text[text.index(OPEN) + len(OPEN) : text.rindex(CLOSE)])
    trace = payload["tool_trace_summary"][0]
    verdict = {
        "verdict": "PASS",
        "groundedness_score": 1.0,
        "critical_fact_count": 1,
        "claim_checks": [
            {
                "claim_id": "c1",
                "verification": "direct_observation",
                "detail": "the log line is quoted verbatim",
                "evidence_refs": [
                    {
                        "trace_ref": trace["trace_ref"],
                        "tool_name": trace["tool_name"],
                        "source_invocation_ids": trace["source_invocation_ids"],
                    }
                ],
            }
        ],
        "rationale": "the only claim is stated in the cited log entry",
    }
    return {"role": "assistant", "content": json.dumps(verdict)}


def _reply(body: dict[str, Any]) -> dict[str, Any]:
    role, model = role_of(body), str(body.get("model"))
    if role == "planner":
        return _completion(model, {"role": "assistant", "content": PLAN_TEXT}, "stop")
    if role == "executor":
        message, finish = _executor_reply(body)
        return _completion(model, message, finish)
    if role == "verifier":
        return _completion(model, _verifier_reply(body), "stop")
    raise ValueError(f"unexpected request for role {role}")


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A chat-completions endpoint on 127.0.0.1 answering each role with a scripted reply."""
    state = FakeOpenAI(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            with state.lock:
                state.requests.append(body)
                state.headers.append({k.lower(): v for k, v in self.headers.items()})
            if self.path != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                self._send(200, _reply(body))
            except Exception as exc:  # report script errors to the client, do not hang
                self._send(500, {"error": {"message": f"{type(exc).__name__}: {exc}"}})

        def _send(self, status: int, data: dict[str, Any]) -> None:
            raw = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def model_env(monkeypatch: pytest.MonkeyPatch, fake_openai: FakeOpenAI) -> FakeOpenAI:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.url)
    monkeypatch.setenv("SUPERBIZ_MODEL", "fake-model")
    monkeypatch.setenv("SUPERBIZ_VERIFIER_MODEL", "fake-verifier")
    for name in (
        "SUPERBIZ_PLANNER_MODEL",
        "SUPERBIZ_EXECUTOR_MODEL",
        "SUPERBIZ_COMPOSER_MODEL",
        "SUPERBIZ_COMPOSER_MODE",
        "SUPERBIZ_OFFLINE",
        "SUPERBIZ_LANGUAGE",
        "OPENAI_API_BASE",
        "OPENAI_ORGANIZATION",
    ):
        monkeypatch.delenv(name, raising=False)
    return fake_openai


def _run_diagnosis() -> dict[str, Any]:
    graph = build_graph(get_model=make_model_factory()).compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "thread-http"}}
    graph.invoke({"messages": [HumanMessage(QUESTION)]}, config, context=Context(offline=False))
    return dict(graph.get_state(config).values)


def test_models_http_graph_reaches_pass_with_claims_citing_recorded_invocations(
    model_env: FakeOpenAI,
) -> None:
    state = _run_diagnosis()

    assert state["verdict"] == "PASS"
    assert state["round"] == 1
    assert state["groundedness_score"] == pytest.approx(1.0)
    assert state["gatekeeper_result"]["status"] == "pass"
    claims = state["structured_output"]["claims"]
    cited = {b["source_invocation_id"] for c in claims for b in c["evidence_bindings"]}
    assert cited == {"inv-1"}
    assert state["gatekeeper_result"]["verified_excerpts"]["c1"]
    assert state["verifier_result"]["model_verdict"] == "PASS"
    assert state["run_info"]["offline"] is False
    assert state["run_info"]["models"]["verifier"] == "fake-verifier"
    assert state["run_info"]["models"]["planner"] == "fake-model"
    assert "HikariPool-1" in state["answer"]
    assert "[inv-1]" in state["answer"]
    assert state["route"][-2:] == ["composer", "audit"]


def test_models_http_uses_per_role_model_names_and_the_api_key(model_env: FakeOpenAI) -> None:
    _run_diagnosis()

    roles = [role_of(body) for body in model_env.requests]
    assert roles == ["planner", "executor", "executor", "verifier"]
    assert [body["model"] for body in model_env.by_role("verifier")] == ["fake-verifier"]
    assert {body["model"] for body in model_env.requests if role_of(body) != "verifier"} == {
        "fake-model"
    }
    assert {h.get("authorization") for h in model_env.headers} == {"Bearer test-key"}


def test_models_http_executor_request_carries_the_four_tools(model_env: FakeOpenAI) -> None:
    _run_diagnosis()

    for body in model_env.by_role("executor"):
        names = [tool["function"]["name"] for tool in body["tools"]]
        assert names == TOOL_NAMES
        assert all(tool["type"] == "function" for tool in body["tools"])
    # The second executor turn sees the recorded tool result with its invocation id.
    second = model_env.by_role("executor")[1]
    tool_messages = [m for m in second["messages"] if m.get("role") == "tool"]
    assert tool_messages[0]["tool_call_id"] == "call_fake_1"
    assert json.loads(tool_messages[0]["content"])["invocation_id"] == "inv-1"


def test_models_http_verifier_sees_quoted_payload_but_not_planner_reply(
    model_env: FakeOpenAI,
) -> None:
    _run_diagnosis()

    # The plan text does travel to the executor, so its absence below is meaningful.
    executor_first = model_env.by_role("executor")[0]
    assert any(PLAN_TEXT in text for text in user_texts(executor_first))

    (verifier,) = model_env.by_role("verifier")
    (user,) = user_texts(verifier)
    assert OPEN in user and CLOSE in user
    assert user.index(OPEN) < user.rindex(CLOSE)
    payload = json.loads(user[user.index(OPEN) + len(OPEN) : user.rindex(CLOSE)])
    assert payload["original_query"] == QUESTION
    assert payload["executor_output_parse_status"]["status"] == "valid"
    assert payload["executor_structured_output"]["claims"][0]["claim_id"] == "c1"
    assert payload["tool_trace_summary"][0]["source_invocation_ids"] == ["inv-1"]
    assert "retry_context" not in payload
    whole_request = json.dumps(verifier, ensure_ascii=False)
    assert PLAN_TEXT not in whole_request
    assert "PLAN-MARKER" not in whole_request


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        pytest.param("planner", OfflinePlanner, id="planner"),
        pytest.param("executor", OfflineExecutor, id="executor"),
        pytest.param("verifier", OfflineVerifier, id="verifier"),
    ],
)
def test_make_model_factory_offline_returns_offline_rules_models(
    monkeypatch: pytest.MonkeyPatch, role: str, expected: type
) -> None:
    # Even with a key configured, an offline run never builds a provider client.
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    model = make_model_factory()(role, Context(offline=True))

    assert isinstance(model, expected)
    assert model_label(model) == OFFLINE_LABEL == "offline-rules"
    assert model._llm_type == "offline-rules"
    assert "gpt" not in model_label(model)


def test_make_model_factory_offline_has_no_composer_model() -> None:
    with pytest.raises(OfflineComposerUnavailable):
        make_model_factory()("composer", Context(offline=True))


def test_make_model_factory_builds_each_model_once_per_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    get_model = make_model_factory()
    ctx = Context(offline=False, model="fake-model", verifier_model="fake-verifier")

    planner = get_model("planner", ctx)
    assert get_model("planner", ctx) is planner
    assert model_label(planner) == "fake-model"
    assert model_label(get_model("verifier", ctx)) == "fake-verifier"


def test_make_model_factory_model_mode_without_key_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    with pytest.raises(ModelConfigError, match="OPENAI_API_KEY"):
        make_model_factory()("planner", Context(offline=False))
