"""A local OpenAI-compatible endpoint whose answers wait behind a gate the test opens.

While the gate is closed, every chat-completion request waits (so a diagnosis in model mode stops
in its planner, holding its thread, as long as the test needs); once it is open, each role gets
the scripted reply of ``tests/test_models_http.py`` and the diagnosis ends with PASS. While
``refuse`` is set, every request gets 401 at once (the run fails). Served on 127.0.0.1 from a thread
of the test process.
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
from tests.test_models_http import _reply

WAIT_S = 120.0


@dataclass
class GatedOpenAI:
    """The endpoint: its base URL, the gate, and a count of requests received."""

    url: str = ""
    gate: threading.Event = field(default_factory=threading.Event)
    received: threading.Event = field(default_factory=threading.Event)
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    refuse: bool = False
    """While set, every request is refused at once with 401 (a wrong API key)."""

    def env(self) -> dict[str, str]:
        """The variables that point model mode at this endpoint."""
        return {"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": self.url}


@contextmanager
def gated_openai() -> Iterator[GatedOpenAI]:
    """Serve a gated endpoint for the block."""
    state = GatedOpenAI()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            with state.lock:
                state.requests += 1
            state.received.set()
            if state.refuse:
                self._send(401, {"error": {"message": "Incorrect API key provided"}})
                return
            if not state.gate.wait(WAIT_S):
                self._send(503, {"error": {"message": "the test never opened the gate"}})
                return
            try:
                self._send(200, _reply(body))
            except Exception as exc:  # a script error reaches the client, never a hang
                self._send(500, {"error": {"message": f"{type(exc).__name__}: {exc}"}})

        def _send(self, status: int, data: dict[str, Any]) -> None:
            raw = json.dumps(data).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
            except OSError:  # the client was killed meanwhile
                return

        def log_message(self, format: str, *args: Any) -> None:
            return

    with serve_on_loopback(Handler, daemon_threads=True) as port:
        state.url = f"http://127.0.0.1:{port}/v1"
        try:
            yield state
        finally:
            state.gate.set()
