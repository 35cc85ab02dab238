"""The replay backend: a recorded diagnosis's tool results, served again without the real systems.

A replay environment (``environment.replay`` of a scenario, docs/contracts.md §9) holds the
services the backend knew and every tool call of the recorded diagnosis with its arguments and
its recorded result: the output, or the error text. ``ReplayBackend`` answers a call with the
first recorded call of the same tool and the same arguments it has not served yet (so a query
asked twice gets its two recorded answers in call order); a recorded error is raised again with
its recorded text, word for word. A call the recording does not have is an error naming the call
and what the recording holds, so the invocation (and the answer) says what is missing.

Arguments are compared as the tool runner passes them: validated by the tool's spec (the
registry, ``tools.registry``), with defaults filled and null values left out, so
``{"service": "x"}`` and ``{"service": "x", "limit": 20}`` are one call. The runner asks a replay
for every tool by name (``answer_tool_call``), so a replay serves any registered tool.
"""

from __future__ import annotations

import copy
import json
import threading
from typing import Any, cast

from typing_extensions import TypedDict, Unpack

from state.records import InvocationStatus, JSONObject
from tools.backend import (
    BackendError,
    KnowledgeOutput,
    LogsOutput,
    LogsQuery,
    MetricsOutput,
    MetricsQuery,
    ReplayedError,
    TimeOutput,
)
from tools.registry import spec_of
from tools.render import format_value
from tools.spec import ArgumentError


class ReplayCall(TypedDict):
    """One recorded tool call: its arguments as recorded, and its result."""

    tool: str
    arguments: JSONObject
    status: InvocationStatus
    output: JSONObject | None
    error: str | None


class ReplayEnvironment(TypedDict):
    """What a replay serves: the recorded services and tool calls, in call order."""

    services: list[str]
    calls: list[ReplayCall]


class NotRecorded(BackendError):
    """A replay asked for a tool call the recording does not have."""


_IGNORED = frozenset({"runbook_urls"})
"""Keywords the runner may add that are not the call's arguments."""


def _normal(tool: str, arguments: dict[str, Any]) -> str | None:
    """The call's arguments as the runner passes them, as comparable text (None: not valid)."""
    spec = spec_of(tool)
    if spec is None:
        return None
    given = {k: v for k, v in arguments.items() if k not in _IGNORED}
    try:
        dumped = spec.arguments.validate(tool, given).full
    except ArgumentError:
        return None
    kept = {key: value for key, value in dumped.items() if value is not None}
    return json.dumps(kept, sort_keys=True, ensure_ascii=False, default=str)


def render(tool: str, arguments: dict[str, Any]) -> str:
    """A call on one line: ``query_logs level=ERROR service=order-service``."""
    items = sorted((k, v) for k, v in arguments.items() if v is not None and k not in _IGNORED)
    return " ".join([tool, *(f"{key}={format_value(value)}" for key, value in items)])


class ReplayBackend:
    """``EvidenceBackend`` over a replay environment (see the module docstring)."""

    needs_timeout = False
    follows_runbook_urls = True
    """The runner hands on the runbook URLs as the recorded run's backend got them (ignored)."""

    def __init__(self, environment: ReplayEnvironment) -> None:
        self._calls = list(environment.get("calls", []))
        self._services = sorted(environment.get("services", []))
        self._keys = [_normal(call["tool"], dict(call["arguments"])) for call in self._calls]
        self._served: set[int] = set()
        self._lock = threading.Lock()

    def evidence_kinds(self) -> frozenset[str]:
        """The kinds of evidence served: those of every recording, and what its calls needed.

        A tool that needs another kind (``ToolSpec.needs``) and was never called in the
        recording is not offered.
        """
        needed = {spec.needs for call in self._calls if (spec := spec_of(call["tool"]))}
        return frozenset({"logs", "metrics", "knowledge", *(n for n in needed if n)})

    def answer_tool_call(self, tool: str, keywords: dict[str, Any]) -> dict[str, Any]:
        """The next recorded result of this call (``tools.spec.AnswersEveryTool``).

        Raises:
            NotRecorded: When the recording has no such call left to serve.
            ReplayedError: When the recorded call failed (its error text, as recorded).
        """
        return self._serve(tool, keywords)

    def _serve(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        key = _normal(tool, arguments)
        with self._lock:
            same = [
                index
                for index, call in enumerate(self._calls)
                if call["tool"] == tool and self._keys[index] == key
            ]
            left = [index for index in same if index not in self._served]
            if not left:
                raise NotRecorded(self._missing(tool, arguments, len(same)))
            index = left[0]
            self._served.add(index)
        call = self._calls[index]
        if call["status"] == "error" or call["output"] is None:
            raise ReplayedError(call["error"] or "the recorded call failed")
        return cast(dict[str, Any], copy.deepcopy(call["output"]))

    def _missing(self, tool: str, arguments: dict[str, Any], served: int) -> str:
        asked = render(tool, arguments)
        if served:
            return (
                f"the replay asked for {asked} {served + 1} times, the recording has it "
                f"{served} time{'s' if served > 1 else ''}; add the call to "
                "environment.replay.calls or export the diagnosis again"
            )
        recorded = [
            render(call["tool"], dict(call["arguments"]))
            for call in self._calls
            if call["tool"] == tool
        ]
        held = "; ".join(recorded[:5]) + ("; ..." if len(recorded) > 5 else "")
        return (
            f"the recording has no call {asked} (its {tool} calls: {held or 'none'}); a replay "
            "serves only the calls the recorded diagnosis made: add it to "
            "environment.replay.calls or export the diagnosis again"
        )

    def query_logs(self, **query: Unpack[LogsQuery]) -> LogsOutput:
        """The recorded logs of this call."""
        return cast(LogsOutput, self._serve("query_logs", dict(query)))

    def query_metrics(self, **query: Unpack[MetricsQuery]) -> MetricsOutput:
        """The recorded alerts and series of this call."""
        return cast(MetricsOutput, self._serve("query_metrics", dict(query)))

    def lookup_knowledge(
        self, *, query: str, top_k: int = 3, runbook_urls: list[str] | None = None
    ) -> KnowledgeOutput:
        """The recorded documents of this call (``runbook_urls`` are not part of it)."""
        asked = {"query": query, "top_k": top_k}
        return cast(KnowledgeOutput, self._serve("lookup_knowledge", asked))

    def get_current_time(self, *, timezone: str | None = None) -> TimeOutput:
        """The recorded time of this call."""
        return cast(TimeOutput, self._serve("get_current_time", {"timezone": timezone}))

    def services(self) -> list[str]:
        """The services the recorded diagnosis's backend knew."""
        return list(self._services)
