"""``query_logs``: log lines of a service, level, text and time window (incident evidence).

Refs: ``logs[i]`` (``<timestamp> <level> <service> <instance>: <message>``) and ``summary``
(``query_logs <k>=<v> ... [window=<start>/<end>] matched <n> of [at least ]<total>
(complete|truncated)``). A log line's timestamp and instance never ground a count or a value.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from pydantic import Field, field_validator
from typing_extensions import TypedDict

from state.records import Invocation, LogEntry
from tools.render import format_value, with_message
from tools.schemas import WindowArgs, optional
from tools.spec import Bounds, Counts, Display, EntryArray, ModelArguments, ToolSpec, Trace

NAME = "query_logs"

LOG_FIELDS = ("timestamp", "level", "service", "instance")
"""The fields before the message, in ref order."""


class QueryLogsArgs(WindowArgs):
    """Arguments of `query_logs`."""

    service: str | None = optional("Only log lines of this service (exact name).")
    query: str | None = optional(
        "Only log lines whose message contains this text (case-insensitive)."
    )
    level: str | None = optional("Only log lines of this level, e.g. ERROR, WARN, INFO.")
    limit: int = Field(
        default=20, ge=1, le=100, description="Return at most this many lines (1-100)."
    )

    @field_validator("level")
    @classmethod
    def _level_is_a_word(cls, value: str | None) -> str | None:
        # Sources name levels differently (WARN, warning, LOG, ERR), so any word is taken; a
        # status code in its place ("500", "5xx") matches no line: it is a text of the message.
        if value is not None and value.strip()[:1].isdigit():
            raise ValueError(
                f"{value!r} is not a log level (ERROR, WARN, INFO, ...): to find a status code "
                f"in the lines, pass it as query={value.strip()!r}"
            )
        return value


class LogsResult(TypedDict, total=False):
    """What a ``query_logs`` invocation records (validated into this by the runner).

    ``total`` counts the matches before the limit (a lower bound when ``total_at_least``);
    ``window_start`` / ``window_end``: the absolute window a real source searched; ``unread``: files
    a file source could not or would not read, each with its reason.
    """

    logs: list[LogEntry]
    total: int
    total_at_least: bool
    truncated: bool
    window_start: str
    window_end: str
    unread: list[str]


def result(output: Mapping[str, object] | None) -> LogsResult:
    """The recorded output of a ``query_logs`` invocation (the runner validated its shape)."""
    # A view, not a copy: no call on the hot paths of the trace summary and Gatekeeper.
    return output if output is not None else {}  # type: ignore[return-value]


def log_text(entry: LogEntry, *, fields: Collection[str] = LOG_FIELDS) -> str:
    """``<timestamp> <level> <service> <instance>: <message>``; absent fields left out."""
    head = [
        format_value(entry.get(key))
        for key in LOG_FIELDS
        if key in fields and entry.get(key) is not None
    ]
    return with_message(head, entry.get("message"))


def _grounding(entry: LogEntry) -> str:
    """A log line without its timestamp and instance, whose digits are no count or value."""
    return log_text(entry, fields=("level", "service"))


def _parts(invocation: Invocation) -> Iterable[str]:
    output = result(invocation["output"])
    logs = output.get("logs", [])
    header = f"matched {len(logs)} of {output.get('total', len(logs))}"
    yield header + (" (truncated)" if output.get("truncated") is True else "")
    for note in output.get("unread", []):
        yield f"not read: {note}"
    groups: dict[tuple[str | None, str | None, str | None], tuple[LogEntry, int]] = {}
    for entry in logs:
        key = (entry.get("level"), entry.get("service"), entry.get("message"))
        first, count = groups.get(key, (entry, 0))
        groups[key] = (first, count + 1)
    # Most frequent first; the stable sort keeps first appearance among equals.
    for first, count in sorted(groups.values(), key=lambda group: -group[1]):
        line = log_text(first, fields=("level", "service"))
        yield f"{line} (x{count})" if count > 1 else line


def _floor(invocation: Invocation) -> str:
    output = result(invocation["output"])
    logs = len(output.get("logs", []))
    return f"matched {logs} of {output.get('total', logs)}"


SPEC = ToolSpec(
    name=NAME,
    description=(
        "Search log lines of the services. Filters combine: service (exact), level, text in the "
        "message, and a time window. Returns at most `limit` matching lines with how many "
        "matched in total; a real log source searches the last hour unless start and end say "
        "otherwise (24 h at most) and returns the newest lines first."
    ),
    arguments=ModelArguments(
        QueryLogsArgs, order=("service", "query", "level", "start", "end", "limit")
    ),
    role="incident",
    arrays=(
        EntryArray(
            name="logs",
            source_type="log",
            render=log_text,
            grounding=_grounding,
            display=Display("log", (*LOG_FIELDS, "message")),
        ),
    ),
    output=LogsResult,
    bounds=Bounds(argument="limit"),
    counts=Counts(total=True, window=True),
    trace=Trace(parts=_parts, floor=_floor),
)
