"""A local incoming-webhook endpoint (the Slack / Mattermost shape) that records what it gets."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class WebhookSink:
    """Records each POSTed JSON body; answers 500 to the first ``fail_first`` requests."""

    def __init__(self, fail_first: int = 0) -> None:
        self.bodies: list[Any] = []
        self.refused = 0
        self._fail_first = fail_first
        self._lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server hook
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with sink._lock:
                    if sink.refused < sink._fail_first:
                        sink.refused += 1
                        status = 500
                    else:
                        sink.bodies.append(json.loads(body))
                        status = 200
                self.send_response(status)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hooks/alerts"

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Any]:
        """The bodies, once ``count`` have arrived (fails the test after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.bodies) >= count:
                    return list(self.bodies)
            time.sleep(0.1)
        raise AssertionError(f"the webhook got {len(self.bodies)} of {count} notifications")

    @contextmanager
    def running(self) -> Iterator[WebhookSink]:
        """Serve in a background thread for the block."""
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
