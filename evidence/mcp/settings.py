"""The MCP servers whose tools become evidence tools: their settings, checked.

Declared as one setting (``SUPERBIZ_MCP_SERVERS``, a JSON object, or the ``[mcp_servers.<name>]``
tables of ``superbiz.toml``; ``evidence/config.py`` declares it). Each server is either a command
started over stdio or a streamable HTTP URL:

.. code-block:: toml

    [mcp_servers.prometheus]
    command = "prometheus-mcp-server"   # started with args and env, spoken to over stdio
    args = []
    env = { PROMETHEUS_URL = "http://prometheus:9090" }
    tools = ["execute_query", "execute_range_query"]   # default: its tools annotated read-only
    allow_destructive = []   # tools annotated destructive that may still be offered
    timeout_s = 30
    max_lines = 100

    [mcp_servers.alertmanager]
    url = "http://alertmanager-mcp:8000/mcp"
    headers = { Authorization = "Bearer ..." }

Values of ``env`` and ``headers`` are secrets: never shown (``config show`` prints their names
with ``****``), never in a message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from state.settings import MASK

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")
_KEYS = (
    "command",
    "args",
    "env",
    "url",
    "headers",
    "tools",
    "allow_destructive",
    "timeout_s",
    "max_lines",
)
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_LINES = 100


class McpSettingsError(ValueError):
    """An MCP server's settings cannot be used; the message names the server, key and fix."""


@dataclass(frozen=True)
class McpServerSettings:
    """How to reach one MCP server and which of its tools to offer.

    Attributes:
        name: The server's name (its tools are offered as ``<name>_<tool>``).
        command: The program started over stdio (with ``args`` and ``env``); None for HTTP.
        url: The streamable HTTP endpoint; None for stdio.
        tools: The tools offered; None: every tool its annotations call read-only.
        allow_destructive: Tools annotated destructive that may still be offered.
        timeout_s: Seconds one call (or the start) may take.
        max_lines: Citable lines kept per result (at most 100).
    """

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    tools: tuple[str, ...] | None = None
    allow_destructive: tuple[str, ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_lines: int = DEFAULT_MAX_LINES

    @property
    def where(self) -> str:
        """What the server is, for messages: its command or URL (never a secret)."""
        if self.command is not None:
            return " ".join([self.command, *self.args])
        return str(self.url)

    def secrets(self) -> list[str]:
        """The secret values (environment and header values), for redaction."""
        return [value for value in (*self.env.values(), *self.headers.values()) if value]

    def shown(self) -> dict[str, Any]:
        """The settings as ``config show`` prints them, secrets masked."""
        shown: dict[str, Any] = {}
        if self.command is not None:
            shown["command"] = self.command
            if self.args:
                shown["args"] = list(self.args)
            if self.env:
                shown["env"] = {name: MASK for name in self.env}
        else:
            shown["url"] = self.url
            if self.headers:
                shown["headers"] = {name: MASK for name in self.headers}
        shown["tools"] = list(self.tools) if self.tools is not None else "read-only"
        if self.allow_destructive:
            shown["allow_destructive"] = list(self.allow_destructive)
        shown["timeout_s"] = self.timeout_s
        shown["max_lines"] = self.max_lines
        return shown


def _strings(value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise McpSettingsError(f"{what} must be a list of strings")
    return tuple(value)


def _string_table(value: object, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise McpSettingsError(f"{what} must be a table of strings (values are not shown)")
    return dict(value)


def _server(name: str, table: object) -> McpServerSettings:
    where = f"mcp_servers.{name}"
    if not _NAME.fullmatch(name):
        raise McpSettingsError(
            f"{where}: a server name is 1-32 letters, digits, _ or -, starting with a letter"
        )
    if not isinstance(table, dict):
        raise McpSettingsError(f"{where} must be a table")
    unknown = [key for key in table if key not in _KEYS]
    if unknown:
        raise McpSettingsError(
            f"unknown key {where}.{unknown[0]}; a server takes " + ", ".join(_KEYS)
        )
    command, url = table.get("command"), table.get("url")
    if (command is None) == (url is None):
        raise McpSettingsError(f"{where}: set either command (stdio) or url (streamable HTTP)")
    if command is not None and (not isinstance(command, str) or not command.strip()):
        raise McpSettingsError(f"{where}.command must be a program name or path")
    if url is not None:
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise McpSettingsError(f"{where}.url must be an http:// or https:// URL")
        if parts.username or parts.password:
            raise McpSettingsError(
                f"{where}.url carries credentials; send them in {where}.headers instead"
            )
    if command is not None and "headers" in table:
        raise McpSettingsError(f"{where}: headers are for a url; a command takes env")
    if url is not None and ("args" in table or "env" in table):
        raise McpSettingsError(f"{where}: args and env are for a command; a url takes headers")
    timeout = table.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 600:
        raise McpSettingsError(
            f"{where}.timeout_s must be a number of seconds above 0, at most 600"
        )
    lines = table.get("max_lines", DEFAULT_MAX_LINES)
    if isinstance(lines, bool) or not isinstance(lines, int) or not 1 <= lines <= 100:
        raise McpSettingsError(f"{where}.max_lines must be a whole number from 1 to 100")
    tools = table.get("tools")
    return McpServerSettings(
        name=name,
        command=command.strip() if isinstance(command, str) else None,
        args=_strings(table.get("args", []), f"{where}.args"),
        env=_string_table(table.get("env", {}), f"{where}.env"),
        url=url if isinstance(url, str) else None,
        headers=_string_table(table.get("headers", {}), f"{where}.headers"),
        tools=_strings(tools, f"{where}.tools") if tools is not None else None,
        allow_destructive=_strings(
            table.get("allow_destructive", []), f"{where}.allow_destructive"
        ),
        timeout_s=float(timeout),
        max_lines=lines,
    )


def parse_servers(value: object) -> tuple[McpServerSettings, ...]:
    """The servers of the setting's value (a JSON object's text, or a TOML table).

    Raises:
        McpSettingsError: Naming the server and key that cannot be used, and the fix.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise McpSettingsError(f"is not a JSON object ({exc.msg})") from None
    if not isinstance(value, Mapping):
        raise McpSettingsError("must be a table of servers, [mcp_servers.<name>]")
    return tuple(_server(str(name), table) for name, table in value.items())


def shown_servers(servers: tuple[McpServerSettings, ...]) -> str:
    """The servers as ``config show`` prints them (JSON, secrets masked)."""
    return json.dumps({s.name: s.shown() for s in servers}, ensure_ascii=False)
