"""Each allowed tool of a configured MCP server, as a tool spec registered at run time.

A server's tools are listed when it is first offered; each allowed one becomes a ``ToolSpec``
named ``<server>_<tool>`` with the server's own input schema (``SchemaArguments``), registered in
``tools.registry`` so the executor is offered it in model mode next to the built-in tools and the
tool runner runs it like any other: validated, recorded as an invocation with its arguments and
result, bounded, idempotent on resume, and citable.

**Which tools.** ``tools`` lists them; without it, the tools whose annotations say they are
read-only. A tool whose annotations say it is destructive is refused even when listed, unless
``allow_destructive`` names it too. What was refused, and why, ``doctor`` reports.

**What is citable.** A result's content is read as lines: each text item's lines (a JSON text is
written one small object or value per line, ``path: value``), then the structured content the
same way unless a text item already said the same. Each line is an entry of the ``lines`` array,
a ref ``lines[i]`` whose text is the line (control and invisible characters removed), so a claim
quotes an MCP result exactly as it quotes a log line and the Gatekeeper checks it the same way.
At most ``max_lines`` lines are kept; the ``summary`` ref states how many there were
(``matched 100 of 2345 (truncated)``). A result the server marks as an error, a server that does
not start or answer, and a call past the timeout are errors of the invocation: an evidence gap
naming the server.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, Tool

from evidence.mcp.client import McpConnection, McpUnavailable, connection
from evidence.mcp.settings import McpServerSettings
from state.display import one_line
from state.records import JSONObject
from tools.backend import BackendError, BackendReport
from tools.registry import register, spec_of, unregister
from tools.spec import (
    Bounds,
    Call,
    Counts,
    Display,
    EntryArray,
    SchemaArguments,
    ToolSpec,
)

LINE_CHARS = 500
"""Longest line kept (longer ones are cut, marked, and the result marked truncated)."""
_COMPACT = 200
"""A JSON object or array whose compact text is at most this long is written on one line."""
_SCAN_LIMIT = 20_000
"""Lines read from one result at most (the rest are counted, not kept)."""
_DESCRIPTION = 1000
_INVALID = re.compile(r"[^A-Za-z0-9_-]")


def spec_name(server: str, tool: str) -> str:
    """``<server>_<tool>``, with characters a tool name cannot have replaced by ``_``."""
    return _INVALID.sub("_", f"{server}_{tool}")[:64]


def _json_lines(value: Any, path: str) -> Iterator[str]:
    """A JSON value as lines: ``path: <compact JSON>`` for small values, else its members."""
    compact = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    if not isinstance(value, dict | list) or len(compact) <= _COMPACT or not value:
        yield f"{path}: {compact}" if path else compact
        return
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _json_lines(item, f"{path}.{key}" if path else str(key))
    else:
        for index, item in enumerate(value):
            yield from _json_lines(item, f"{path}[{index}]")


def _text_lines(text: str) -> tuple[Iterator[str], Any]:
    """The lines of one text item, and its JSON value when it is a JSON object or array."""
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            parsed = json.loads(stripped)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict | list):
            return _json_lines(parsed, ""), parsed
    return iter(text.splitlines()), None


def result_lines(result: CallToolResult, keep: int) -> tuple[list[dict[str, Any]], int]:
    """The citable lines of a result (at most ``keep``) and how many there were in all."""
    kept: list[dict[str, Any]] = []
    total = 0
    parsed_items: list[Any] = []
    texts: list[str] = []

    def add(item: int | str, lines: Iterator[str]) -> None:
        nonlocal total
        for number, raw in enumerate(lines, 1):
            text = one_line(raw)
            if not text:
                continue
            total += 1
            if len(kept) < keep:
                kept.append({"item": item, "line": number, "text": text})
            if total >= _SCAN_LIMIT:
                return

    for index, content in enumerate(result.content):
        text = getattr(content, "text", None)
        resource = getattr(content, "resource", None)
        if text is None and resource is not None:
            text = getattr(resource, "text", None)
        if isinstance(text, str):
            texts.append(text)
            lines, parsed = _text_lines(text)
            if parsed is not None:
                parsed_items.append(parsed)
            add(index, lines)
        else:
            add(index, iter([f"[{content.type} content, not text]"]))
    structured = result.structured_content
    if structured is not None:
        # A server that returns a plain value wraps it as {"result": value} (the SDKs do).
        wrapped = structured.get("result") if list(structured) == ["result"] else None
        said = [*parsed_items, *texts]
        repeated = any(item in (structured, wrapped) for item in said)
        if not repeated:
            add("structured", _json_lines(structured, ""))
    return kept, total


def _error_text(result: CallToolResult) -> str:
    texts = [getattr(item, "text", "") for item in result.content]
    return one_line(" ".join(text for text in texts if isinstance(text, str)), 300) or "no text"


def _is_destructive(tool: Tool) -> bool:
    return bool(tool.annotations and tool.annotations.destructive_hint is True)


def _is_read_only(tool: Tool) -> bool:
    return bool(tool.annotations and tool.annotations.read_only_hint is True)


@dataclass
class McpServer:
    """One configured server in this process: its connection, what it offers, what it refused."""

    settings: McpServerSettings
    connection: McpConnection
    offered: list[str] = field(default_factory=list)
    """The names of its specs registered."""
    refused: dict[str, str] = field(default_factory=dict)
    """Its tools not offered, with the reason."""
    error: str | None = None
    """Why it did not start, when it did not."""

    def allowed(self, tool: Tool) -> str | None:
        """None when the tool may be offered, else why not."""
        settings = self.settings
        if _is_destructive(tool) and tool.name not in settings.allow_destructive:
            return "annotated destructive; name it in allow_destructive to offer it"
        if settings.tools is None:
            if not _is_read_only(tool):
                return "not annotated read-only; name it in tools to offer it"
        elif tool.name not in settings.tools:
            return "not in tools"
        return None

    def ask(self, tool: str, call: Call) -> dict[str, object]:
        """Call one tool and return its lines (see the module docstring).

        Raises:
            BackendError: When the server does not answer, refuses, or returns an error result.
        """
        arguments = {key: value for key, value in call.arguments.items() if value is not None}
        try:
            result = self.connection.call(tool, arguments)
        except MCPError as exc:
            raise BackendError(
                f"{self.connection.label} refused {tool}: {one_line(exc.message, 300)}"
            ) from None
        if result.is_error:
            raise BackendError(
                f"{self.connection.label}: {tool} returned an error: {_error_text(result)}"
            )
        lines, total = result_lines(result, self.settings.max_lines)
        return {"lines": lines, "total": total, "truncated": total > len(lines)}

    def spec(self, tool: Tool | None, name: str) -> ToolSpec:
        """The spec of one tool (``tool`` None: a stand-in while the server does not start)."""
        server = self.settings.name
        schema: JSONObject = dict(tool.input_schema) if tool is not None else {"type": "object"}
        schema.setdefault("type", "object")
        described = (tool.description or tool.title or name) if tool is not None else name
        return ToolSpec(
            name=spec_name(server, name),
            description=one_line(f"[MCP server {server}] {described}", _DESCRIPTION),
            arguments=SchemaArguments(schema),
            role="incident",
            arrays=(
                EntryArray(
                    name="lines",
                    source_type="mcp",
                    render=_line_text,
                    display=Display("table", ("item", "line", "text")),
                ),
            ),
            bounds=Bounds(entries=self.settings.max_lines, field_chars=LINE_CHARS),
            counts=Counts(total=True),
            ask=lambda call: self.ask(name, call),
            planned_offline=False,
        )

    def open(self) -> None:
        """Start the server, list its tools and register the allowed ones."""
        try:
            info = self.connection.info()
        except McpUnavailable as exc:
            self.error = str(exc)
            # Listed tools stay callable: each call tries the server again, or is a gap naming it.
            for name in self.settings.tools or ():
                self._register(None, name)
            return
        self.error = None
        for tool in info.tools:
            why = self.allowed(tool)
            if why is not None:
                self.refused[tool.name] = why
                continue
            self._register(tool, tool.name)
        for name in self.settings.tools or ():
            if name not in self.offered and name not in self.refused:
                self.refused[name] = "the server does not list it"

    def _register(self, tool: Tool | None, name: str) -> None:
        try:
            made = self.spec(tool, name)
        except (jsonschema.SchemaError, ValueError) as exc:
            self.refused[name] = f"its input schema cannot be used: {one_line(str(exc), 200)}"
            return
        if spec_of(made.name) is not None:
            self.refused[name] = f"a tool named {made.name} is registered already"
            return
        register(made)
        self.offered.append(name)

    def withdraw(self) -> None:
        """Unregister its tools and stop the server."""
        for name in self.offered:
            unregister(spec_name(self.settings.name, name))
        self.offered.clear()
        self.refused.clear()
        self.connection.close()

    def check(self) -> BackendReport:
        """``doctor``'s line: reachable, protocol version, tools offered and refused."""
        settings = self.settings
        try:
            info = self.connection.info()
        except McpUnavailable as exc:
            return BackendReport(
                backend=f"mcp:{settings.name}",
                url=settings.where if settings.url is not None else None,
                status="error",
                detail=str(exc),
                setting=f"mcp_servers.{settings.name}",
            )
        offered = ", ".join(spec_name(settings.name, name) for name in self.offered) or "none"
        refused = "; ".join(f"{name} ({why})" for name, why in sorted(self.refused.items()))
        return BackendReport(
            backend=f"mcp:{settings.name}",
            url=settings.where if settings.url is not None else None,
            status="ok",
            detail=f"protocol {info.protocol_version}, {info.name} {info.version}".rstrip()
            + f"; tools offered: {offered}"
            + (f"; refused: {refused}" if refused else ""),
        )


def _line_text(entry: Any) -> str:
    return str(entry.get("text", "")) if isinstance(entry, Mapping) else ""


class McpServers:
    """The configured MCP servers, as one part of the composed backend (``doctor`` checks it)."""

    title = "MCP servers"

    def __init__(self, servers: Sequence[McpServer]) -> None:
        self.servers = tuple(servers)

    def checks(self) -> list[BackendReport]:
        """One report per server."""
        return [server.check() for server in self.servers]


_lock = threading.Lock()
_active: dict[str, McpServer] = {}


def offer(configured: Sequence[McpServerSettings]) -> McpServers:
    """Start each configured server once per process and register its allowed tools.

    A server already offered with the same settings is reused; one whose settings changed is
    withdrawn and offered again.
    """
    chosen: list[McpServer] = []
    with _lock:
        for settings in configured:
            known = _active.get(settings.name)
            if known is not None and known.settings == settings:
                chosen.append(known)
                continue
            if known is not None:
                known.withdraw()
            server = McpServer(settings, connection(settings))
            server.open()
            _active[settings.name] = server
            chosen.append(server)
    return McpServers(chosen)


def withdraw_all() -> None:
    """Unregister every MCP tool and stop every server (tests; a process that reconfigures)."""
    with _lock:
        for server in _active.values():
            server.withdraw()
        _active.clear()
