"""The interface every evidence source implements, and the timestamp rules they share.

A backend answers the four tool calls with plain data in the output shapes of the evidence tools
(contracts section 2): ``LogsOutput``, ``MetricsOutput``, ``KnowledgeOutput`` and ``TimeOutput``,
whose entries are the ``state.records`` entry records. It does not bound, cap or record anything:
the tool runner does that (and validates what it gets into a ``ToolOutput``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

from typing_extensions import TypedDict

from state.records import AlertEntry, DocumentEntry, LogEntry, SeriesEntry


class BackendError(Exception):
    """A backend could not answer a call (bad input it cannot serve, or the source failed)."""


def parse_timestamp(value: str) -> datetime:
    """Parses an ISO-8601 timestamp into an aware datetime.

    A trailing `Z` means UTC; a timestamp without an offset is taken as UTC.

    Args:
        value: The timestamp text, e.g. `2026-03-01T10:07:12Z`.

    Returns:
        The timestamp as a timezone-aware datetime.

    Raises:
        ValueError: When `value` is not an ISO-8601 timestamp.
    """
    if not isinstance(value, str):
        raise ValueError(f"expected an ISO-8601 timestamp string, got {type(value).__name__}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{value!r} is not an ISO-8601 timestamp (expected e.g. 2026-03-01T10:00:00Z)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


class LogsOutput(TypedDict):
    """What ``query_logs`` returns: ``total`` counts the matches before the limit."""

    logs: list[LogEntry]
    total: int
    truncated: bool


class MetricsOutput(TypedDict):
    """What ``query_metrics`` returns."""

    alerts: list[AlertEntry]
    series: list[SeriesEntry]


class KnowledgeOutput(TypedDict):
    """What ``lookup_knowledge`` returns, best document first."""

    documents: list[DocumentEntry]


class TimeOutput(TypedDict):
    """What ``get_current_time`` returns: an ISO-8601 timestamp."""

    now: str


@runtime_checkable
class EvidenceBackend(Protocol):
    """A source of logs, metrics and knowledge documents for the evidence tools.

    A backend may set ``needs_timeout = False`` when its calls are in-memory and bounded; the
    tool runner then calls it directly instead of on a timed worker thread.
    """

    def query_logs(
        self,
        *,
        service: str | None = None,
        query: str | None = None,
        level: str | None = None,
        start: str | None = None,
        end: str | None = None,
        limit: int = 20,
    ) -> LogsOutput:
        """Finds log lines.

        Args:
            service: Only lines of this service.
            query: Only lines whose message contains this text.
            level: Only lines of this level.
            start: Only lines at or after this ISO-8601 time.
            end: Only lines at or before this ISO-8601 time.
            limit: At most this many lines are returned.

        Returns:
            `{"logs": [{timestamp, level, service, instance, message}], "total": int,
            "truncated": bool}` where `total` counts matches before the limit.
        """
        ...

    def query_metrics(
        self,
        *,
        service: str | None = None,
        alert: str | None = None,
        promql: str | None = None,
        start: str | None = None,
        end: str | None = None,
    ) -> MetricsOutput:
        """Finds alerts and metric series.

        Args:
            service: Only alerts and series of this service.
            alert: Only alerts whose name contains this text.
            promql: A PromQL expression selecting series.
            start: Start of the time window (ISO-8601).
            end: End of the time window (ISO-8601).

        Returns:
            `{"alerts": [{alert_name, service, severity, state, value, threshold, summary,
            active_at}], "series": [{metric, labels, points_count, min, max, last, unit}]}`.
        """
        ...

    def lookup_knowledge(self, *, query: str, top_k: int = 3) -> KnowledgeOutput:
        """Searches runbooks and past incidents.

        Args:
            query: What to look for.
            top_k: At most this many documents are returned.

        Returns:
            `{"documents": [{doc_id, title, source, chunk, score, relevance}]}`, best first.
        """
        ...

    def get_current_time(self, *, timezone: str | None = None) -> TimeOutput:
        """Tells the current time of the environment.

        Args:
            timezone: An IANA timezone name to express the time in; UTC when omitted.

        Returns:
            `{"now": "<ISO-8601 timestamp>"}`.
        """
        ...

    def services(self) -> list[str]:
        """Lists every service name the backend knows, sorted."""
        ...
