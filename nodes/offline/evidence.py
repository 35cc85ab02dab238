"""What the offline executor has seen: its tool results as structured data.

Each answered tool call becomes a ``Result``: the call's arguments and the invocation's output
entries (from the tool message's ``artifact``, ``nodes.executor.tool_artifact``), and its refs
(``raw_path`` -> exact text, from the tool message the model reads) to bind claims to. Entries
are never recovered by re-reading rendered ref texts, so a log line without ``instance`` or a
message with odd characters is read as it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from nodes.executor import BUDGET_SPENT

LEVELS = ("ERROR", "WARN")
"""Log levels a diagnosis reads, most severe first."""


@dataclass(frozen=True)
class Result:
    """One answered tool call."""

    tool: str
    args: dict[str, Any]
    invocation_id: str
    status: str
    output: dict[str, Any]
    refs: dict[str, str] = field(default_factory=dict)

    @property
    def service(self) -> str | None:
        """The service the call was scoped to, if any."""
        value = self.args.get("service")
        return str(value) if value else None

    @property
    def level(self) -> str | None:
        """The log level the call asked for (upper case), if any."""
        value = self.args.get("level")
        return str(value).upper() if value else None

    def entries(self, array: str) -> list[dict[str, Any]]:
        """The output entries of one array (``logs``, ``alerts``, ``series``, ``documents``)."""
        found = self.output.get(array)
        return (
            [entry for entry in found if isinstance(entry, dict)] if isinstance(found, list) else []
        )

    def total(self) -> int:
        """How many log lines matched (before the limit); entries returned otherwise."""
        total = self.output.get("total")
        return total if isinstance(total, int) else len(self.entries("logs"))


def read_results(messages: list[BaseMessage]) -> list[Result]:
    """Every tool call that ran (recorded as an invocation), in call order."""
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    results: list[Result] = []
    for message in messages:
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                calls[str(call.get("id"))] = (call["name"], dict(call.get("args") or {}))
        elif isinstance(message, ToolMessage) and message.tool_call_id in calls:
            try:
                data = json.loads(str(message.content))
            except json.JSONDecodeError:
                continue
            if not isinstance(data, dict) or not data.get("invocation_id"):
                continue
            name, args = calls[message.tool_call_id]
            artifact = message.artifact if isinstance(message.artifact, dict) else {}
            output = artifact.get("output")
            arguments = artifact.get("arguments")
            results.append(
                Result(
                    tool=str(data.get("tool_name") or name),
                    args=dict(arguments) if isinstance(arguments, dict) else args,
                    invocation_id=str(data["invocation_id"]),
                    status=str(data.get("status")),
                    output=dict(output) if isinstance(output, dict) else {},
                    refs={
                        str(ref.get("raw_path")): str(ref.get("text"))
                        for ref in data.get("evidence_refs", [])
                        if isinstance(ref, dict)
                    },
                )
            )
    return results


def tool_turns(messages: list[BaseMessage]) -> int:
    """How many of the executor's turns asked for tool calls."""
    return sum(1 for m in messages if isinstance(m, AIMessage) and m.tool_calls)


def budget_spent(messages: list[BaseMessage]) -> bool:
    """Whether the executor was told that the tool budget of the round is spent."""
    return (
        bool(messages)
        and isinstance(messages[-1], HumanMessage)
        and (messages[-1].content == BUDGET_SPENT)
    )


def was_called(results: list[Result], tool: str, **args: Any) -> bool:
    """Whether a call of ``tool`` with (at least) these arguments ran."""
    return any(r.tool == tool and all(r.args.get(k) == v for k, v in args.items()) for r in results)
