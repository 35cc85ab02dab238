"""Shared set-up for the backend tests: a tool runner over settings, one tool call, its refs, and
a loopback HTTP server for the local stand-ins (each stand-in says what it is where it is made).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from apps.cli.doctor import doctor_command
from apps.http.api import create_app
from evidence.composed import configured_backend
from evidence.config import load_settings
from persistence.ledger import InMemoryLedger
from state.records import Invocation
from tools.runner import ToolRunner


def tool_runner(env: Mapping[str, str], tmp_path: Path) -> ToolRunner:
    """A runner over the backend these settings configure (an in-memory ledger).

    Args:
        env: The ``SUPERBIZ_*`` variables.
        tmp_path: The working directory (no ``superbiz.toml`` in it unless a test writes one).

    Returns:
        The runner.
    """
    return ToolRunner(configured_backend(load_settings(dict(env), cwd=tmp_path)), InMemoryLedger())


def call_tool(
    runner: ToolRunner, tool: str, args: Mapping[str, object], call_id: str = "e1"
) -> Invocation:
    """Run one tool call in round 1 of diagnosis ``d1`` on thread ``t1``.

    Args:
        runner: The runner.
        tool: The tool's name, e.g. ``query_logs``.
        args: The call's arguments.
        call_id: The call's id.

    Returns:
        The recorded invocation.
    """
    return runner.run(
        {"name": tool, "args": dict(args), "id": call_id},
        diagnosis_id="d1",
        thread_id="t1",
        round=1,
    )


def run_tool(
    env: Mapping[str, str],
    tmp_path: Path,
    tool: str,
    args: Mapping[str, object],
    call_id: str = "e1",
) -> Invocation:
    """One tool call on a fresh runner over these settings (``tool_runner`` then ``call_tool``).

    Args:
        env: The ``SUPERBIZ_*`` variables.
        tmp_path: The working directory.
        tool: The tool's name.
        args: The call's arguments.
        call_id: The call's id.

    Returns:
        The recorded invocation.
    """
    return call_tool(tool_runner(env, tmp_path), tool, args, call_id)


def evidence_refs(row: Invocation) -> dict[str, str]:
    """An invocation's evidence refs, text by raw path (``logs[0]``, ``summary``, ...)."""
    return {r["raw_path"]: r["text"] for r in row["retrieval_details"]["evidence_refs"]}


def run_doctor(
    monkeypatch: pytest.MonkeyPatch, env: Mapping[str, str], as_json: bool = False
) -> tuple[int, str, str]:
    """``superbiz doctor`` with these variables set in the environment.

    Args:
        monkeypatch: Sets the variables for the test only.
        env: The ``SUPERBIZ_*`` variables.
        as_json: The ``--json`` report.

    Returns:
        The exit code, what was written to standard output, and to standard error.
    """
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out, err = io.StringIO(), io.StringIO()
    code = doctor_command(as_json, out, err)
    return code, out.getvalue(), err.getvalue()


def get_healthz(tmp_path: Path) -> tuple[int, dict[str, Any]]:
    """``GET /healthz`` of the HTTP API over a fresh SQLite database in ``tmp_path``.

    Returns:
        The status code and the JSON body.
    """
    app = create_app(f"sqlite:///{tmp_path / 'api.sqlite'}", api_keys={})
    with TestClient(app, base_url="http://127.0.0.1") as client:
        health = client.get("/healthz")
    return health.status_code, health.json()


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing and answers in one call."""

    def reply(
        self,
        status: int,
        body: bytes,
        kind: str | None = "application/json",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Send a whole answer.

        Args:
            status: The HTTP status.
            body: The body.
            kind: The ``Content-Type``; None sends none.
            headers: Further headers, sent first.
        """
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if kind is not None:
            self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Nothing is logged."""
        return


def serve_http(server: ThreadingHTTPServer, scheme: str = "http") -> Iterator[str]:
    """Serve ``server`` from a daemon thread for the duration of a fixture.

    Args:
        server: A server bound to a loopback port.
        scheme: ``http``, or ``https`` for a server that wraps its connections in TLS.

    Yields:
        The server's URL.
    """
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def serve_handler(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on a free loopback port (``serve_http`` over a new server).

    Args:
        handler: The request handler class.

    Yields:
        The server's URL.
    """
    yield from serve_http(ThreadingHTTPServer(("127.0.0.1", 0), handler))
