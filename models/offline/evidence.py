"""What the offline executor has seen: its tool results as structured data.

Each answered tool call becomes a ``Result``: the call's arguments and the invocation's output
entries (from the tool message's ``artifact``, ``nodes.executor_context.tool_artifact``), and
its refs (``raw_path`` -> exact text, from the tool message the model reads) to bind claims to.
Entries are never recovered by re-reading rendered ref texts, so a log line without ``instance``
or a message with odd characters is read as it is.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any, Final

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from knowledge.vocabulary import concepts_in
from models.messages import json_content, replies
from state.json_shape import is_number, obj, objects
from state.records import QuestionFacets

LEVELS = ("ERROR", "WARN")
"""Log levels a diagnosis reads, most severe first."""
SAME_KIND: Final = 0.75
"""How alike two messages (numbers blanked) must be to count as one kind."""
_DIGITS = re.compile(r"\d+")


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
        return objects(self.output.get(array))

    def total(self) -> int:
        """How many log lines matched (before the limit); entries returned otherwise."""
        total = self.output.get("total")
        return int(total) if is_number(total) else len(self.entries("logs"))


def read_results(messages: list[BaseMessage]) -> list[Result]:
    """Every tool call that ran (recorded as an invocation), in call order."""
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    results: list[Result] = []
    for message in messages:
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                calls[str(call.get("id"))] = (call["name"], dict(call.get("args") or {}))
        elif isinstance(message, ToolMessage) and message.tool_call_id in calls:
            data = obj(json_content(message))
            if not data.get("invocation_id"):
                continue
            name, args = calls[message.tool_call_id]
            artifact = obj(message.artifact)
            results.append(
                Result(
                    tool=str(data.get("tool_name") or name),
                    args=dict(obj(artifact.get("arguments")) or args),
                    invocation_id=str(data["invocation_id"]),
                    status=str(data.get("status")),
                    output=dict(obj(artifact.get("output"))),
                    refs={
                        str(ref.get("raw_path")): str(ref.get("text"))
                        for ref in objects(data.get("evidence_refs"))
                    },
                )
            )
    return results


def tool_turns(messages: list[BaseMessage]) -> int:
    """How many of the executor's turns asked for tool calls."""
    return sum(1 for reply in replies(messages) if reply.tool_calls)


def was_called(results: list[Result], tool: str, **args: Any) -> bool:
    """Whether a call of ``tool`` with (at least) these arguments ran."""
    return any(r.tool == tool and all(r.args.get(k) == v for k, v in args.items()) for r in results)


# --------------------------------------------------------------------------- reading results


def log_result(results: list[Result], service: str | None, level: str) -> Result | None:
    """The last log query of a service (or of all services) at a level."""
    found = [
        r
        for r in results
        if r.tool == "query_logs"
        and r.service == service
        and r.level == level
        and not r.args.get("query")
    ]
    return found[-1] if found else None


def metrics_result(results: list[Result], service: str | None) -> Result | None:
    """The last unfiltered metrics query of a service (or of everything)."""
    found = [
        r
        for r in results
        if r.tool == "query_metrics"
        and r.service == service
        and not r.args.get("alert")
        and not r.args.get("promql")
    ]
    return found[-1] if found else None


def has_data(results: list[Result], service: str) -> bool:
    """Whether any call scoped to the service returned entries."""
    return any(r.service == service and r.status == "ok" for r in results)


def names_in(message: str, known: list[str], exclude: str | None) -> list[str]:
    """The known services a message names as whole names (in order), other than ``exclude``."""
    text = message.casefold()
    found: list[tuple[int, str]] = []
    for name in known:
        if name == exclude:
            continue
        match = re.search(
            r"(?<![a-z0-9_.-])" + re.escape(name.casefold()) + r"(?![a-z0-9_-])", text
        )
        if match:
            found.append((match.start(), name))
    return [name for _, name in sorted(found)]


def _kind_of(message: str) -> str:
    """A message with its numbers and ids blanked out."""
    return _DIGITS.sub("#", message)[:120]


def _same_kind(kind: str, seen: list[str]) -> bool:
    """Messages that differ only in numbers, ids or a path are one kind.

    ``real_quick_ratio`` and ``quick_ratio`` are upper bounds of ``ratio``: a pair they already
    put below the threshold is not compared in full (the answer is the same, far cheaper).
    """
    for other in seen:
        if kind == other:
            return True
        matcher = difflib.SequenceMatcher(None, kind, other)
        if matcher.real_quick_ratio() < SAME_KIND or matcher.quick_ratio() < SAME_KIND:
            continue
        if matcher.ratio() >= SAME_KIND:
            return True
    return False


def examples(
    result: Result, found: QuestionFacets, seen_concepts: frozenset[str] = frozenset()
) -> list[int]:
    """Indexes of distinct kinds of log messages, the most telling first.

    A message naming the question's symptoms or status codes comes first, then one naming what
    the errors seen so far name (``seen_concepts``), then the rest in order.
    """
    wanted = set(found["symptoms"] + found["metrics"])
    scored: list[tuple[int, int]] = []
    seen: list[str] = []
    for index, entry in enumerate(result.entries("logs")):
        message = str(entry.get("message", ""))
        kind = _kind_of(message)
        if _same_kind(kind, seen):
            continue
        seen.append(kind)
        named = set(concepts_in(message))
        score = 2 * len(wanted & named) + len(seen_concepts & named)
        score += sum(4 for code in found["status_codes"] if code in message)
        scored.append((-score, index))
    return [index for _, index in sorted(scored)]


def series_for(result: Result, concept: str, question: str) -> list[int]:
    """Indexes of the series that measure a concept, the most direct first."""
    asked = set(re.findall(r"p\d{2,3}", question.casefold()))
    picks: list[tuple[int, int, int]] = []
    for index, entry in enumerate(result.entries("series")):
        metric = str(entry.get("metric", ""))
        names = concepts_in(metric)
        if concept not in names:
            continue
        parts = set(metric.casefold().split("_"))
        miss = 0 if not asked or asked & parts else 1
        indirect = 1 if {"database", "query"} & set(names) and concept == "latency" else 0
        picks.append((miss, indirect, index))
    return [index for *_, index in sorted(picks)]
