"""One connection to an MCP server, for synchronous callers (the tool runner's worker threads).

The official SDK's client is asynchronous; each connection runs it on an event loop of its own
(an anyio blocking portal in a background thread) where one task holds the session open, so a
stdio server is started once and answers every call of the process. A call that fails because
the connection broke (the server exited) marks it closed; the next call starts it again.

What a server writes to stderr goes to a temporary file whose last lines are quoted when the
server fails to start, so the evidence gap says why.
"""

from __future__ import annotations

import atexit
import tempfile
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import IO, Any, cast

import anyio
import anyio.from_thread
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, Tool

from evidence.mcp.settings import McpServerSettings
from state.display import one_line
from tools.backend import BackendError

_STDERR_TAIL = 300


class McpUnavailable(BackendError):
    """The server did not start or answer; the message names it and says why."""


@dataclass(frozen=True)
class ServerInfo:
    """What a server said when the session started."""

    protocol_version: str
    name: str
    version: str
    tools: tuple[Tool, ...]


class McpConnection:
    """A session with one MCP server, opened on first use and kept for the process.

    Args:
        settings: The server's settings.
    """

    def __init__(self, settings: McpServerSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._portal_cm: AbstractContextManager[anyio.from_thread.BlockingPortal] | None = None
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._client: Client | None = None
        self._closing: anyio.Event | None = None
        self._holder: Any = None
        self._info: ServerInfo | None = None
        self._stderr: IO[str] | None = None

    @property
    def label(self) -> str:
        """``MCP server '<name>' (<command or url>)``."""
        return f"MCP server {self.settings.name!r} ({self.settings.where})"

    def info(self) -> ServerInfo:
        """Start (or reuse) the session and return what the server said.

        Raises:
            McpUnavailable: When it does not start or answer within its timeout.
        """
        with self._lock:
            if self._client is None or self._info is None:
                self._start()
            assert self._info is not None
            return self._info

    def call(self, tool: str, arguments: dict[str, Any]) -> CallToolResult:
        """Call one tool, within the server's timeout.

        Raises:
            McpUnavailable: When the server does not start or answer in time.
            MCPError: When the server refuses the call (a protocol error).
        """
        self.info()
        portal, client = self._portal, self._client
        if portal is None or client is None:
            raise McpUnavailable(f"{self.label} is not connected")
        timeout = self.settings.timeout_s

        async def ask() -> CallToolResult:
            with anyio.fail_after(timeout):
                return await client.call_tool(tool, arguments, read_timeout_seconds=timeout)

        try:
            return portal.call(ask)
        except TimeoutError:
            raise McpUnavailable(
                f"{self.label} did not answer {tool} within {timeout:g} s"
            ) from None
        except MCPError:
            raise
        except Exception as exc:  # the connection broke: start again next time
            self.close()
            raise McpUnavailable(f"{self.label} failed during {tool}: {_reason(exc)}") from None

    def _start(self) -> None:
        """Open the portal and the session (the lock is held)."""
        self._close_locked()
        started = threading.Event()
        failure: list[BaseException] = []
        self._portal_cm = anyio.from_thread.start_blocking_portal()
        portal = self._portal = self._portal_cm.__enter__()
        self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
        timeout = self.settings.timeout_s

        async def hold() -> None:
            self._closing = anyio.Event()
            try:
                async with Client(self._transport(), read_timeout_seconds=timeout) as client:
                    listed = await client.list_tools()
                    self._info = ServerInfo(
                        protocol_version=str(client.protocol_version),
                        name=client.server_info.name if client.server_info else "",
                        version=client.server_info.version if client.server_info else "",
                        tools=tuple(listed.tools),
                    )
                    self._client = client
                    started.set()
                    try:
                        await self._closing.wait()
                    finally:
                        self._client = None
            except Exception as exc:  # reported to the caller waiting below
                failure.append(exc)
                started.set()

        self._holder = portal.start_task_soon(hold)
        if not started.wait(timeout + 5) or failure or self._client is None:
            why = _reason(failure[0]) if failure else f"no answer within {timeout:g} s"
            if isinstance(failure[0] if failure else None, TimeoutError):
                why = f"no answer within {timeout:g} s"
            said = self._stderr_tail()
            self._close_locked()
            raise McpUnavailable(
                f"{self.label} did not start: {why}" + (f"; it said: {said}" if said else "")
            )

    def _transport(self) -> Any:
        settings = self.settings
        if settings.command is not None:
            parameters = StdioServerParameters(
                command=settings.command, args=list(settings.args), env=dict(settings.env)
            )
            return stdio_client(parameters, errlog=cast(Any, self._stderr))
        timeout = httpx2.Timeout(settings.timeout_s, read=max(settings.timeout_s, 60.0))
        http = create_mcp_http_client(headers=dict(settings.headers), timeout=timeout)
        return streamable_http_client(str(settings.url), http_client=http)

    def _stderr_tail(self) -> str:
        stream = self._stderr
        if stream is None:
            return ""
        try:
            stream.flush()
            stream.seek(0)
            text = stream.read()
        except (OSError, ValueError):
            return ""
        lines = [line for line in text.splitlines() if line.strip()]
        secrets = self.settings.secrets()
        tail = one_line(" | ".join(lines[-3:]), _STDERR_TAIL)
        for secret in secrets:
            tail = tail.replace(secret, "****")
        return tail

    def close(self) -> None:
        """End the session (stopping a stdio server); a later call starts it again."""
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        portal, closing, holder = self._portal, self._closing, self._holder
        if portal is not None:
            if closing is not None and self._client is not None:
                try:
                    portal.call(closing.set)
                    holder.result(timeout=5)  # the session ends and a stdio server exits
                except Exception:  # it did not end in time: cancelled below
                    pass
            try:
                portal.call(portal.stop, True)  # cancels a start that still hangs
            except Exception:  # the loop is gone already
                pass
        if self._portal_cm is not None:
            try:
                self._portal_cm.__exit__(None, None, None)
            except BaseException:  # a portal that failed to stop leaves its thread only
                pass
        if self._stderr is not None:
            self._stderr.close()
        self._portal_cm = self._portal = self._client = self._closing = self._holder = None
        self._info = None
        self._stderr = None


def _reason(exc: BaseException) -> str:
    """One line saying what went wrong (exception groups unwrapped to their first cause)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = one_line(str(exc), 300)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


_open: list[McpConnection] = []
_open_lock = threading.Lock()


def connection(settings: McpServerSettings) -> McpConnection:
    """A new connection, closed at interpreter exit if still open."""
    made = McpConnection(settings)
    with _open_lock:
        _open.append(made)
    return made


def _close_all() -> None:
    with _open_lock:
        opened = list(_open)
    for made in opened:
        made.close()


atexit.register(_close_all)

__all__ = ["Callable", "McpConnection", "McpUnavailable", "ServerInfo", "connection"]
