"""A local fake OpenAI-compatible endpoint whose executor calls one MCP tool and cites its result.

The planner answers a fixed plan; the executor first calls ``tool`` with ``arguments``, then
states one claim bound to the first ref whose text contains ``marker``, quoting it from
``marker`` to its end (or, with ``cite_wrong``, quoting text that is not in it); the verifier
answers as in ``tests/test_models_http.py``. Served on 127.0.0.1 from a thread.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.serving_kit import serve_on_loopback
from tests.test_models_http import _completion, _tool_call, _verifier_reply, role_of


@dataclass
class ScriptedMcpModel:
    """The endpoint's script and what it received."""

    tool: str
    arguments: dict[str, Any]
    marker: str
    cite_wrong: bool = False
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def env(self) -> dict[str, str]:
        """The variables that point model mode at this endpoint."""
        return {"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": self.url}


def _executor(body: dict[str, Any], script: ScriptedMcpModel) -> tuple[dict[str, Any], str]:
    results = [json.loads(m["content"]) for m in body["messages"] if m.get("role") == "tool"]
    done = [r for r in results if r.get("status") == "ok" and r.get("evidence_refs")]
    if not done:
        call = _tool_call(len(results) + 1, script.tool, json.dumps(script.arguments))
        return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    result = done[0]
    ref = next(r for r in result["evidence_refs"] if script.marker in r["text"])
    text = ref["text"]
    quoted = text[text.index(script.marker) :] if not script.cite_wrong else "999 of 999 pending"
    answer = {
        "answer_version": "executor_evidence_v2",
        "claims": [
            {
                "claim_id": "c1",
                "claim_type": "observation",
                "claim_text": f"The MCP result says {quoted}",
                "support_level": "direct",
                "evidence_bindings": [
                    {
                        "source_type": "mcp",
                        "tool_name": script.tool,
                        "source_invocation_id": result["invocation_id"],
                        "raw_path": ref["raw_path"],
                        "evidence_excerpt": quoted,
                    }
                ],
            }
        ],
        "hypotheses": [],
        "recommended_actions": [],
        "missing_info": [],
    }
    return {"role": "assistant", "content": json.dumps(answer)}, "stop"


@contextmanager
def scripted_mcp_model(
    tool: str, arguments: dict[str, Any], marker: str, *, cite_wrong: bool = False
) -> Iterator[ScriptedMcpModel]:
    """Serve the endpoint for the block."""
    script = ScriptedMcpModel(tool, arguments, marker, cite_wrong)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            with script.lock:
                script.requests.append(body)
            role, model = role_of(body), str(body.get("model"))
            try:
                if role == "planner":
                    reply = _completion(model, {"role": "assistant", "content": "Query."}, "stop")
                elif role == "executor":
                    message, finish = _executor(body, script)
                    reply = _completion(model, message, finish)
                else:
                    reply = _completion(model, _verifier_reply(body), "stop")
                self._send(200, reply)
            except Exception as exc:  # a script error reaches the client, never a hang
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

    with serve_on_loopback(Handler, daemon_threads=True) as port:
        script.url = f"http://127.0.0.1:{port}/v1"
        yield script
