"""The real model factory against a local fake OpenAI-compatible endpoint, and offline mode."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, cast

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from graph.compile import RunStores, compile_graph
from graph.runner import DiagnosisFailed, run_diagnosis
from models.budget import model_label
from models.calls import ModelCallFailed, RetryPolicy
from models.factory import ModelConfigError, OfflineComposerUnavailable, make_model_factory
from models.offline import (
    OFFLINE_LABEL,
    OfflineExecutor,
    OfflinePlanner,
    OfflineVerifier,
)
from persistence.audit import InMemoryAuditStore
from state.context import Context
from tests.serving_kit import serve_on_loopback
from tools import registry
from verification.verifier_payload import CLOSE, OPEN

QUESTION = "order-service 为什么报 500？"
PLAN_TEXT = "PLAN-MARKER-7f3a: read the ERROR logs of order-service, then decide."
TOOL_NAMES = [name for name in registry.names() if name != "query_traces"]
"""Every registered tool in registration order but the trace tool: what the executor is offered
here, where no trace source is configured."""


@dataclass
class Fault:
    """How the fake endpoint answers one request instead of its scripted reply.

    kind: ``status`` (HTTP ``status`` with an OpenAI error body and ``headers``), ``sleep``
    (wait ``seconds``, then reply), ``truncated_json`` (a 200 whose body is cut, Content-Length
    matching), ``cut`` (the connection closes mid-body), ``content`` (the reply's text is
    ``text``), ``malformed_args`` (a tool call whose arguments are not valid JSON),
    ``unknown_tool`` (a call of a tool that does not exist).
    """

    kind: str
    status: int = 200
    message: str = "scripted failure"
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    text: str = ""
    finish: str = "stop"
    """The ``finish_reason`` of a ``content`` reply (``length``: cut at max_tokens)."""


@dataclass
class FakeOpenAI:
    """What the fake endpoint received, one entry per chat-completion request."""

    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    faults: dict[str, list[Fault]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def by_role(self, role: str) -> list[dict[str, Any]]:
        return [body for body in self.requests if role_of(body) == role]

    def fail(self, role: str, *faults: Fault) -> None:
        """Answer the next requests of ``role`` with ``faults``, in order, then normally."""
        with self.lock:
            self.faults.setdefault(role, []).extend(faults)

    def next_fault(self, role: str) -> Fault | None:
        with self.lock:
            queue = self.faults.get(role) or []
            return queue.pop(0) if queue else None


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


def _tool_call(index: int, name: str, arguments: str) -> dict[str, Any]:
    return {
        "id": f"call_fake_{index}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def _executor_reply(body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    tool_results = [m for m in body["messages"] if m.get("role") == "tool"]
    readable = [json.loads(m["content"]) for m in tool_results if m["content"].startswith("{")]
    with_logs = [r for r in readable if r.get("status") == "ok" and r.get("evidence_refs")]
    if not with_logs:  # first turn, or only tool errors so far: ask for the logs
        arguments = json.dumps({"service": "order-service", "level": "ERROR"})
        call = _tool_call(len(tool_results) + 1, "query_logs", arguments)
        return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    # Cite what the tool result really says, so the binding is exact.
    result = with_logs[0]
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


def _faulty_reply(body: dict[str, Any], fault: Fault) -> dict[str, Any]:
    """A 200 reply that is wrong in the way ``fault`` says."""
    model = str(body.get("model"))
    if fault.kind == "content":
        return _completion(model, {"role": "assistant", "content": fault.text}, fault.finish)
    index = len([m for m in body["messages"] if m.get("role") == "tool"]) + 1
    if fault.kind == "malformed_args":
        call = _tool_call(index, "query_logs", '{"service": "order-serv')
    elif fault.kind == "unknown_tool":
        call = _tool_call(index, "query_everything", "{}")
    else:
        raise ValueError(f"unknown fault {fault.kind}")
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return _completion(model, message, "tool_calls")


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
                state.times.append(time.monotonic())
            if self.path != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            fault = state.next_fault(role_of(body))
            try:
                if fault is None or fault.kind == "sleep":
                    time.sleep(fault.seconds if fault else 0)
                    self._send(200, _reply(body))
                elif fault.kind == "status":
                    error = {"message": fault.message, "type": "error", "code": fault.code}
                    self._send(fault.status, {"error": error}, fault.headers)
                elif fault.kind == "truncated_json":
                    self._send_raw(200, json.dumps(_reply(body)).encode()[:40])
                elif fault.kind == "cut":
                    raw = json.dumps(_reply(body)).encode()
                    self._send_raw(200, raw[:40], length=len(raw))
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                else:
                    self._send(200, _faulty_reply(body, fault))
            except Exception as exc:  # report script errors to the client, do not hang
                self._send(500, {"error": {"message": f"{type(exc).__name__}: {exc}"}})

        def _send(
            self, status: int, data: dict[str, Any], headers: dict[str, str] | None = None
        ) -> None:
            self._send_raw(status, json.dumps(data).encode(), headers=headers)

        def _send_raw(
            self,
            status: int,
            raw: bytes,
            *,
            length: int | None = None,
            headers: dict[str, str] | None = None,
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw) if length is None else length))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(raw)
            self.wfile.flush()

        def log_message(self, format: str, *args: Any) -> None:
            return

    with serve_on_loopback(Handler) as port:
        state.url = f"http://127.0.0.1:{port}/v1"
        yield state


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
    graph = compile_graph(RunStores(InMemorySaver()), get_model=make_model_factory())
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


def test_models_http_executor_request_carries_every_registered_tool(model_env: FakeOpenAI) -> None:
    _run_diagnosis()

    for body in model_env.by_role("executor"):
        names = [tool["function"]["name"] for tool in body["tools"]]
        assert names == TOOL_NAMES
        assert {"query_logs", "query_metrics", "lookup_knowledge"} <= set(names)
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


# --- model failures: one retry layer, budgets, failed diagnoses -------------------------------


@dataclass
class Waits:
    """The waits of the retry layer, recorded (and really slept when ``real``)."""

    real: bool = False
    seconds: list[float] = field(default_factory=list)

    def __call__(self, delay: float) -> None:
        self.seconds.append(delay)
        if self.real:
            time.sleep(delay)


def _fast_policy(waits: Waits) -> RetryPolicy:
    return RetryPolicy(base_delay_s=0.001, max_delay_s=0.01, sleep=waits, jitter=lambda: 0.5)


def _diagnose(
    waits: Waits | None = None, thread: str = "thread-fault", **settings: Any
) -> tuple[dict[str, Any], InMemoryAuditStore]:
    """Run one diagnosis through ``run_diagnosis`` (as the CLI and the API do)."""
    audit = InMemoryAuditStore()
    get_model = make_model_factory(_fast_policy(waits or Waits()))
    graph = compile_graph(RunStores(InMemorySaver(), audit=audit), get_model=get_model)
    values = run_diagnosis(
        graph,
        thread_id=thread,
        context=Context(offline=False, **settings),
        audit=audit,
        question=QUESTION,
    )
    return dict(values), audit


def _failure(**settings: Any) -> tuple[DiagnosisFailed, InMemoryAuditStore]:
    audit = InMemoryAuditStore()
    graph = compile_graph(
        RunStores(InMemorySaver(), audit=audit),
        get_model=make_model_factory(_fast_policy(Waits())),
    )
    with pytest.raises(DiagnosisFailed) as info:
        run_diagnosis(
            graph,
            thread_id="thread-failed",
            context=Context(offline=False, **settings),
            audit=audit,
            question=QUESTION,
        )
    return info.value, audit


def test_models_http_429_is_retried_after_the_retry_after_it_asks(model_env: FakeOpenAI) -> None:
    model_env.fail("planner", Fault("status", status=429, headers={"Retry-After": "1"}))
    waits = Waits(real=True)

    values, _ = _diagnose(waits)

    assert values["verdict"] == "PASS"
    assert waits.seconds == [1.0]
    pairs = zip(model_env.times, model_env.requests, strict=True)
    first, second = [t for t, body in pairs if role_of(body) == "planner"]
    assert second - first >= 0.95


def test_models_http_5xx_twice_then_success_backs_off(model_env: FakeOpenAI) -> None:
    model_env.fail("verifier", Fault("status", status=500), Fault("status", status=503))
    waits = Waits()

    values, _ = _diagnose(waits)

    assert values["verdict"] == "PASS"
    assert len(model_env.by_role("verifier")) == 3
    assert len(waits.seconds) == 2 and waits.seconds[1] > waits.seconds[0]  # exponential


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param(Fault("sleep", seconds=1.5), id="timeout"),
        pytest.param(Fault("truncated_json"), id="truncated-json-body"),
        pytest.param(Fault("cut"), id="stream-cut-mid-reply"),
    ],
)
def test_models_http_transient_failures_are_retried(model_env: FakeOpenAI, fault: Fault) -> None:
    model_env.fail("executor", fault)
    waits = Waits()

    values, _ = _diagnose(waits, model_timeout_s=0.5)

    assert values["verdict"] == "PASS"
    assert len(waits.seconds) == 1
    assert len(model_env.by_role("executor")) == 3  # the failed turn, its retry, the answer


def test_models_http_client_library_retries_nothing_itself(model_env: FakeOpenAI) -> None:
    model = make_model_factory()("planner", Context(offline=False))

    assert getattr(model, "max_retries", None) == 0


def test_models_http_400_context_length_is_not_retried_and_says_what_to_fix(
    model_env: FakeOpenAI,
) -> None:
    model_env.fail(
        "executor",
        Fault(
            "status",
            status=400,
            code="context_length_exceeded",
            message="This model's maximum context length is 8192 tokens",
        ),
    )

    failed, audit = _failure()

    assert len(model_env.by_role("executor")) == 1  # never retried
    assert "context length" in failed.reason and "larger context window" in failed.reason
    assert "\n" not in failed.reason
    assert isinstance(failed.cause, ModelCallFailed) and not failed.cause.unavailable
    (record,) = audit.list()
    assert record["status"] == "failed"
    assert record["note"] == f"failed: {failed.reason}"
    assert record["final_answer"] == failed.answer
    assert failed.answer.startswith("抱歉，本次诊断未能完成")
    channels: Any = record["self_evaluation"]
    assert channels["failure"]["route"] == ["intake", "planner"]
    assert channels["usage"]["calls"] == 1  # the planner's; the partial audit is kept


@pytest.mark.parametrize(
    ("status", "fragment"),
    [
        pytest.param(401, "refused the API key (401", id="401"),
        pytest.param(403, "denied access to model 'fake-model' (403", id="403"),
        pytest.param(404, "does not know model 'fake-model' (404", id="404"),
        pytest.param(422, "rejected the request for model 'fake-model' (422", id="422"),
    ],
)
def test_models_http_client_errors_end_the_diagnosis_without_retry(
    model_env: FakeOpenAI, status: int, fragment: str
) -> None:
    model_env.fail("planner", Fault("status", status=status))

    failed, _ = _failure()

    assert fragment in failed.reason
    assert len(model_env.requests) == 1


def test_models_http_retries_stop_at_the_bound_and_say_the_endpoint_is_unavailable(
    model_env: FakeOpenAI,
) -> None:
    model_env.fail("planner", *[Fault("status", status=503)] * 5)

    failed, _ = _failure(model_retries=2)

    assert len(model_env.requests) == 3
    assert "still after 3 attempts" in failed.reason
    assert isinstance(failed.cause, ModelCallFailed) and failed.cause.unavailable


def test_models_http_no_retry_waits_past_the_diagnosis_deadline(model_env: FakeOpenAI) -> None:
    model_env.fail("planner", Fault("status", status=429, headers={"Retry-After": "120"}))

    failed, _ = _failure(diagnosis_deadline_s=30)

    assert len(model_env.requests) == 1
    assert "SUPERBIZ_DIAGNOSIS_DEADLINE_S" in failed.reason


def test_models_http_usage_fields_are_summed_and_recorded(model_env: FakeOpenAI) -> None:
    values, audit = _diagnose()

    # planner, executor twice, verifier: 10 prompt and 10 completion tokens each.
    sent = sum(
        len(message["content"])
        for body in model_env.requests
        for message in body["messages"]
        if isinstance(message.get("content"), str)
    )
    assert values["usage"] == {
        "calls": 4,
        "input_tokens": 40,
        "output_tokens": 40,
        "input_chars": values["usage"]["input_chars"],
    }
    # The characters counted are the message texts the endpoint received (plus tool-call
    # arguments, which these requests carry in the assistant messages).
    assert sent <= values["usage"]["input_chars"] <= sent + 1000
    (record,) = audit.list()
    usage: Any = cast(Any, record["self_evaluation"])["usage"]
    assert (usage["calls"], usage["input_tokens"], usage["output_tokens"]) == (4, 40, 40)
    assert usage["input_chars"] == values["usage"]["input_chars"]
    assert usage["budgets"]["max_model_calls"] == 40
    assert usage["stopped"] is None


def test_models_http_malformed_tool_arguments_become_a_readable_tool_error(
    model_env: FakeOpenAI,
) -> None:
    model_env.fail("executor", Fault("malformed_args"))

    values, _ = _diagnose()

    assert values["verdict"] == "PASS"
    second = model_env.by_role("executor")[1]
    (tool_message,) = [m for m in second["messages"] if m.get("role") == "tool"]
    error = json.loads(tool_message["content"])
    assert error["status"] == "error"
    assert "not valid JSON" in error["error"]
    assert tool_message["tool_call_id"] == "call_fake_1"


def test_models_http_unknown_tool_is_an_error_the_executor_reads(model_env: FakeOpenAI) -> None:
    model_env.fail("executor", Fault("unknown_tool"))

    values, _ = _diagnose()

    assert values["verdict"] == "PASS"
    second = model_env.by_role("executor")[1]
    (tool_message,) = [m for m in second["messages"] if m.get("role") == "tool"]
    assert "unknown tool 'query_everything'" in json.loads(tool_message["content"])["error"]


def test_models_http_truncated_executor_json_is_read_as_malformed(model_env: FakeOpenAI) -> None:
    answer = '{"answer_version": "executor_evidence_v2", "claims": [{"claim_id": "c1", "cl'
    cut = Fault("content", text=answer)
    model_env.fail("executor", Fault("sleep"), cut, cut)

    values, _ = _diagnose()

    # Round 1 reads the cut answer as malformed (never a crash) and earns the retry round.
    assert values["rounds"][0]["executor_output_parse_status"] == "malformed"
    assert values["rounds"][0]["verdict"] == "LOW_CONFID"
    assert values["round"] == 2
    assert values["route"][-1] == "audit"
    # The cut answer was asked for once more, shaped by its schema and quoting the parse error.
    repair = model_env.by_role("executor")[2]
    assert repair["response_format"]["json_schema"]["name"] == "executor_evidence_v2"
    assert "not JSON" in user_texts(repair)[-1]
    assert "tools" not in repair


def test_models_http_every_request_carries_its_roles_max_tokens(
    model_env: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPERBIZ_PLANNER_MAX_TOKENS", "123")

    _run_diagnosis()

    limits = {"planner": 123, "executor": 2000, "verifier": 2000}
    assert model_env.requests
    for body in model_env.requests:
        assert body["max_tokens"] == limits[role_of(body)], role_of(body)
        assert "max_completion_tokens" not in body


def test_models_http_planner_verifier_ask_for_their_json_schema(model_env: FakeOpenAI) -> None:
    _run_diagnosis()

    (planner,) = model_env.by_role("planner")
    (verifier,) = model_env.by_role("verifier")
    assert planner["response_format"]["type"] == "json_schema"
    assert planner["response_format"]["json_schema"]["name"] == "planner_plan"
    assert verifier["response_format"]["json_schema"]["name"] == "verifier_claim_checks"
    # Executor turns that offer tools are not constrained.
    assert all("response_format" not in body for body in model_env.by_role("executor"))


def test_models_http_an_endpoint_refusing_the_schema_gets_the_request_without_it(
    model_env: FakeOpenAI,
) -> None:
    refused = "Unrecognized request argument supplied: response_format"
    model_env.fail("planner", Fault("status", status=400, message=refused))

    state = _run_diagnosis()

    first, second = model_env.by_role("planner")
    assert "response_format" in first and "response_format" not in second
    assert state["verdict"] == "PASS"


@pytest.mark.parametrize("text", ["", "not json at all"], ids=["empty", "garbage"])
def test_models_http_unreadable_verifier_replies_fall_back_to_the_claim_checker(
    model_env: FakeOpenAI, text: str
) -> None:
    model_env.fail("verifier", *[Fault("content", text=text)] * 3)

    values, _ = _diagnose()

    result = values["verifier_result"]
    assert result["verifier_mode"] == "fallback"
    assert result["reply_parse"]["repair_attempts"] == 2
    assert values["verdict"] == "LOW_CONFID"


def test_models_http_empty_composer_reply_keeps_the_template(model_env: FakeOpenAI) -> None:
    model_env.fail("composer", Fault("content", text=""))
    model_env.fail("composer", Fault("content", text=""))

    values, _ = _diagnose(composer_mode="model")

    assert values["composer_output"]["mode"] == "fallback"
    assert values["verdict"] == "PASS"
    assert "HikariPool-1" in values["answer"]


def test_models_http_model_call_budget_ends_the_round_as_an_evidence_gap(
    model_env: FakeOpenAI,
) -> None:
    values, audit = _diagnose(max_model_calls=2)

    # planner and one executor turn; then no more model calls, no retry round.
    assert [role_of(b) for b in model_env.requests] == ["planner", "executor"]
    assert values["round"] == 1
    assert "model calls" in values["budget_note"]
    gaps = [g["text"] for g in values["executor_answer"]["missing_info"]]
    assert any("stopped early" in gap and "SUPERBIZ_MAX_MODEL_CALLS" in gap for gap in gaps)
    assert values["verifier_result"]["verifier_mode"] == "fallback"
    assert values["verdict"] != "PASS"
    assert "stopped early" in values["answer"]
    (record,) = audit.list()
    assert record["status"] == "done"
    assert "model calls" in cast(Any, record["self_evaluation"])["usage"]["stopped"]


def test_models_http_token_budget_stops_before_the_next_call(model_env: FakeOpenAI) -> None:
    values, _ = _diagnose(max_output_tokens=15)

    # 10 completion tokens after the planner, 20 after the first executor turn.
    assert [role_of(b) for b in model_env.requests] == ["planner", "executor"]
    assert "output tokens" in values["budget_note"]
    assert values["usage"]["output_tokens"] == 20


def test_models_http_cli_exits_1_with_the_reason_and_3_when_unavailable(
    model_env: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    import apps.cli.main as cli

    fast = _fast_policy(Waits())
    monkeypatch.setattr("models.factory.make_model_factory", lambda: make_model_factory(fast))
    monkeypatch.setattr("graph.builder.make_model_factory", lambda: make_model_factory(fast))
    db = f"sqlite:///{tmp_path / 'cli.sqlite'}"

    model_env.fail("planner", Fault("status", status=401, message="Incorrect API key"))
    code = cli.main(["diagnose", QUESTION, "--db", db])
    out, err = capsys.readouterr()
    assert code == 1
    last = err.splitlines()[-1]
    assert last.startswith("superbiz: error: diagnosis failed: the model endpoint")
    assert "refused the API key (401: Incorrect API key); check OPENAI_API_KEY" in last
    assert "Traceback" not in err
    assert out.startswith("抱歉，本次诊断未能完成")

    model_env.fail("planner", *[Fault("status", status=502)] * 10)
    monkeypatch.setenv("SUPERBIZ_MODEL_RETRIES", "1")
    code = cli.main(["diagnose", QUESTION, "--db", db, "--json"])
    out, err = capsys.readouterr()
    assert code == 3
    result = json.loads(out)
    assert result["status"] == "failed" and "still after 2 attempts" in result["error"]

    code = cli.main(["sessions", "show", result["diagnosis_id"], "--db", db])
    shown = capsys.readouterr().out
    assert code == 0
    assert "status     failed" in shown
    assert "failed     the model endpoint failed (502" in shown
    assert "model use  0 calls (budget 40), tokens in 0 / out 0" in shown


def test_models_http_api_answers_502_and_the_stream_ends_with_an_error_event(
    model_env: FakeOpenAI, tmp_path: Path
) -> None:
    from starlette.testclient import TestClient

    from apps.http.api import create_app

    app = create_app(
        f"sqlite:///{tmp_path / 'api.sqlite'}",
        api_keys={"k": "alice"},
        get_model=make_model_factory(_fast_policy(Waits())),
    )
    headers = {"Authorization": "Bearer k"}
    with TestClient(app) as client:
        model_env.fail("planner", Fault("status", status=404, message="no such model"))
        response = client.post("/api/chat", json={"question": QUESTION}, headers=headers)
        assert response.status_code == 502
        error = response.json()["error"]
        assert error.startswith("the diagnosis could not finish: the model endpoint")
        assert "does not know model 'fake-model' (404: no such model)" in error

        model_env.fail("planner", Fault("status", status=401))
        stream = client.post("/api/chat_stream", json={"question": QUESTION}, headers=headers)
        events = [
            line[len("event: ") :]
            for line in stream.text.splitlines()
            if line.startswith("event: ")
        ]
        assert events[-1] == "error"
        last = stream.text.strip().splitlines()[-1]
        assert '"status":502' in last and "refused the API key" in last


def test_models_http_a_spent_deadline_ends_the_round_without_model_calls(
    model_env: FakeOpenAI,
) -> None:
    # One microsecond: spent before the planner checks it, however fast the steps before it run
    # (a millisecond was sometimes not yet spent there).
    values, audit = _diagnose(diagnosis_deadline_s=0.000001)

    assert model_env.requests == []
    assert "SUPERBIZ_DIAGNOSIS_DEADLINE_S" in values["budget_note"]
    assert values["verdict"] != "PASS"
    assert values["route"][-1] == "audit"
    (record,) = audit.list()
    assert record["status"] == "done"


def test_models_http_the_diagnosis_deadline_is_300_s_when_nothing_sets_it(
    model_env: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SUPERBIZ_DIAGNOSIS_DEADLINE_S", raising=False)
    assert Context().diagnosis_deadline_s == 300.0

    # A Retry-After that ends inside the 300 s is waited (the sleep is recorded, not slept) ...
    model_env.fail("planner", Fault("status", status=429, headers={"Retry-After": "280"}))
    waits = Waits()
    values, audit = _diagnose(waits)

    assert waits.seconds == [280.0]
    assert values["verdict"] == "PASS"
    (record,) = audit.list()
    usage: Any = cast(Any, record["self_evaluation"])["usage"]
    assert usage["budgets"]["diagnosis_deadline_s"] == 300.0
    assert cast(Any, record["run_settings"])["context"]["diagnosis_deadline_s"] == 300.0

    # ... one that ends after it fails the diagnosis at once, naming the variable.
    model_env.fail("planner", Fault("status", status=429, headers={"Retry-After": "320"}))
    before = len(model_env.requests)
    failed, _ = _failure()

    assert len(model_env.requests) == before + 1
    assert "SUPERBIZ_DIAGNOSIS_DEADLINE_S" in failed.reason
