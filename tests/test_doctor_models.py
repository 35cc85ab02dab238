"""``superbiz doctor`` probes each role's model on a local fake OpenAI-compatible endpoint.

The endpoint answers the probe like a model with native tool calls, like one that writes its
calls as fenced JSON in the text (the recorded local model's way), or like one that never calls a
tool; it takes or refuses a ``response_format`` schema.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from apps.cli.doctor import doctor_command
from models.probe import ModelProbe, expectations
from tests.serving_kit import serve_on_loopback

FENCED_CALL = '```json\n{"name": "get_current_time", "arguments": {"timezone": "UTC"}}\n```'


@dataclass
class ProbeEndpoint:
    """How the fake endpoint behaves, and the bodies it received."""

    url: str = ""
    mode: str = "native"
    """native, text (a fenced JSON call in the content) or none (prose, no call)."""
    schema_refused: bool = False
    models: list[str] = field(default_factory=lambda: ["local-1.5b"])
    bodies: list[dict[str, Any]] = field(default_factory=list)


def _completion(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-probe",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "local-1.5b",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 20, "total_tokens": 60},
    }


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[ProbeEndpoint]:
    state = ProbeEndpoint()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            data = {"object": "list", "data": [{"id": m, "object": "model"} for m in state.models]}
            self._send(200, data)

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            state.bodies.append(body)
            if "response_format" in body:
                if state.schema_refused:
                    refused = "Unrecognized request argument supplied: response_format"
                    self._send(400, {"error": {"message": refused}})
                    return
                self._send(200, _completion({"role": "assistant", "content": '{"status": "ok"}'}))
                return
            message: dict[str, Any]
            if state.mode == "native":
                call = {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_current_time", "arguments": '{"timezone": "UTC"}'},
                }
                message = {"role": "assistant", "content": None, "tool_calls": [call]}
            elif state.mode == "text":
                message = {"role": "assistant", "content": FENCED_CALL}
            else:
                message = {"role": "assistant", "content": "It is probably around noon in UTC."}
            self._send(200, _completion(message))

        def _send(self, status: int, data: dict[str, Any]) -> None:
            raw = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            return

    with serve_on_loopback(Handler) as port:
        state.url = f"http://127.0.0.1:{port}/v1"
        monkeypatch.setenv("OPENAI_API_KEY", "probe-key")
        monkeypatch.setenv("OPENAI_BASE_URL", state.url)
        monkeypatch.setenv("SUPERBIZ_MODEL", "local-1.5b")
        for name in (
            "SUPERBIZ_OFFLINE",
            "SUPERBIZ_PLANNER_MODEL",
            "SUPERBIZ_EXECUTOR_MODEL",
            "SUPERBIZ_VERIFIER_MODEL",
            "SUPERBIZ_COMPOSER_MODEL",
        ):
            monkeypatch.delenv(name, raising=False)
        yield state


def _doctor(as_json: bool = False) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = doctor_command(as_json, out, err)
    return code, out.getvalue()


def _model_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("model ")]


def test_doctor_model_with_native_tool_calls_and_schema_is_ok(endpoint: ProbeEndpoint) -> None:
    _, text = _doctor()

    (line,) = _model_lines(text)
    assert "ok" in line.split()[1]
    assert "local-1.5b (planner, executor, verifier, composer)" in line
    assert "tool calls native" in line and "JSON schema accepted" in line
    assert "tokens/s" in line
    # One probe per model name, each request bounded.
    tool_requests = [b for b in endpoint.bodies if "tools" in b]
    assert len(tool_requests) == 1 and tool_requests[0]["max_tokens"] <= 128


def test_doctor_model_writing_calls_as_text_is_ok_and_says_so(endpoint: ProbeEndpoint) -> None:
    endpoint.mode = "text"
    endpoint.schema_refused = True

    _, text = _doctor()

    (line,) = _model_lines(text)
    assert line.split()[1] == "ok"
    assert "tool calls text" in line and "JSON schema refused" in line
    assert "written in the reply text, not as tool calls; they are read and run" in text
    assert "replies are parsed as text" in text


def test_doctor_names_a_model_that_does_not_call_tools(endpoint: ProbeEndpoint) -> None:
    endpoint.mode = "none"

    code, text = _doctor()

    (line,) = _model_lines(text)
    assert line.split()[1] == "FAIL"
    assert "model 'local-1.5b' does not call tools" in line
    assert "use a model that calls tools" in text
    assert code == 1


def test_doctor_json_reports_each_model_and_an_unknown_name(endpoint: ProbeEndpoint) -> None:
    endpoint.models = ["another-model"]
    endpoint.mode = "text"

    code, text = _doctor(as_json=True)

    data = json.loads(text)
    (model,) = data["models"]
    assert model["listed"] is False and model["tool_calls"] == "text"
    assert "does not list model 'local-1.5b'" in model["problems"][0]
    assert code == 1 and data["ok"] is False


def test_doctor_offline_probes_no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    _, text = _doctor()

    assert _model_lines(text) == []


@pytest.mark.parametrize("profile", ["hosted", "local"])
def test_doctor_advises_the_local_profile_only_where_it_is_not_set(
    monkeypatch: pytest.MonkeyPatch, profile: str
) -> None:
    monkeypatch.setenv("SUPERBIZ_MODEL_PROFILE", profile)
    slow = ModelProbe(model="m", roles=["executor"], reachable=True, tokens_per_s=2.0)

    speed = next(line for line in expectations(slow) if line.startswith("speed:"))

    assert "a diagnosis takes about" in speed
    assert ("set SUPERBIZ_MODEL_PROFILE=local" in speed) == (profile == "hosted")
