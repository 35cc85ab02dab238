"""The interface every evidence source implements, and the timestamp rules they share.

A backend answers the four built-in tools with plain data in their output shapes
(docs/contracts.md §2): ``LogsOutput``, ``MetricsOutput``, ``KnowledgeOutput`` and ``TimeOutput``,
whose entries are the ``state.records`` entry records. It does not bound, cap or record anything:
the tool runner does that, as each tool's spec says (``tools.spec``), and validates what it gets
into the tool's output model. A tool whose spec asks the backend for something else declares
that source's protocol in its own module.

A log or metrics source derives from ``LogSource`` / ``MetricSource``: ``query_logs`` and
``query_metrics`` take the tool's keywords there, once, and hand the source one request record
(``LogsRequest``, ``MetricsRequest``) through its ``find_logs`` / ``find_metrics``.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, NotRequired, Protocol

from typing_extensions import TypedDict, Unpack

from state.records import AlertEntry, DocumentEntry, LogEntry, SeriesEntry

DEFAULT_WINDOW = timedelta(hours=1)
MAX_WINDOW = timedelta(hours=24)


class BackendError(Exception):
    """A backend could not answer a call (bad input it cannot serve, or the source failed)."""


class ReplayedError(BackendError):
    """A recorded tool error, raised again; ``invocation_error`` is its recorded text."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.invocation_error = text


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


def api_time(value: object) -> datetime | None:
    """A server's RFC 3339 timestamp (Go writes nanoseconds; seconds suffice), else None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_timestamp(re.sub(r"\.\d+", "", value, count=1))
    except ValueError:
        return None


def window_bounds(start: str | None, end: str | None, now: datetime) -> tuple[datetime, datetime]:
    """The absolute window a real source searches, as ``(start, end)``.

    ``end`` defaults to ``now``, ``start`` to 1 h before ``end``; a window longer than 24 h keeps
    its end and starts 24 h before it.

    Args:
        start: The requested start (ISO-8601), or None.
        end: The requested end (ISO-8601), or None.
        now: The current time.

    Returns:
        The window's start and end, aware datetimes.

    Raises:
        BackendError: When a bound is not an ISO-8601 timestamp or ``start`` is after ``end``.
    """
    try:
        end_at = parse_timestamp(end) if end else now
        start_at = parse_timestamp(start) if start else end_at - DEFAULT_WINDOW
    except ValueError as exc:
        raise BackendError(str(exc)) from None
    if start_at > end_at:
        raise BackendError(f"start {start} is after end {end}")
    return max(start_at, end_at - MAX_WINDOW), end_at


class LogsOutput(TypedDict):
    """What ``query_logs`` returns: ``total`` counts the matches before the limit.

    A real source reports the absolute window it searched (``window_start``, ``window_end``) and,
    when it knows only a lower bound of the matches, ``total_at_least: true``.
    """

    logs: list[LogEntry]
    total: int
    truncated: bool
    total_at_least: NotRequired[bool]
    window_start: NotRequired[str]
    window_end: NotRequired[str]
    unread: NotRequired[list[str]]
    """Files a file source could not or would not read, each with its reason (an evidence gap)."""


class MetricsOutput(TypedDict):
    """What ``query_metrics`` returns.

    A backend that bounds its own results (a series cap) reports how many matched in
    ``alerts_total`` / ``series_total``; without them the returned entries are all that matched.
    A backend that queries a time window reports it (``window_start``, ``window_end``, ISO-8601),
    so the summary ref states the absolute window that was asked.
    """

    alerts: list[AlertEntry]
    series: list[SeriesEntry]
    alerts_total: NotRequired[int]
    series_total: NotRequired[int]
    window_start: NotRequired[str]
    window_end: NotRequired[str]


class BackendReport(TypedDict):
    """Whether one evidence source answers (``superbiz doctor``, ``GET /healthz``).

    ``detail`` is one line: what answered (version, a trivial query, the services found) or what
    failed; ``setting`` names the variable to check when it failed. Never a secret.
    """

    backend: str
    url: str | None
    status: Literal["ok", "error"]
    detail: str
    setting: NotRequired[str]


class KnowledgeOutput(TypedDict):
    """What ``lookup_knowledge`` returns, best document first."""

    documents: list[DocumentEntry]


class TimeOutput(TypedDict):
    """What ``get_current_time`` returns: an ISO-8601 timestamp."""

    now: str


class LogsQuery(TypedDict, total=False):
    """The arguments of ``query_logs`` (their rules: ``tools.query_logs.QueryLogsArgs``)."""

    service: str | None
    query: str | None
    level: str | None
    start: str | None
    end: str | None
    limit: int


class MetricsQuery(TypedDict, total=False):
    """The arguments of ``query_metrics`` (rules: ``tools.query_metrics.QueryMetricsArgs``)."""

    service: str | None
    alert: str | None
    promql: str | None
    start: str | None
    end: str | None


@dataclass(frozen=True, kw_only=True)
class _WindowRequest:
    service: str | None = None
    start: str | None = None
    end: str | None = None


@dataclass(frozen=True, kw_only=True)
class LogsRequest(_WindowRequest):
    """One ``query_logs`` call: its arguments (``LogsQuery``), defaults filled."""

    query: str | None = None
    level: str | None = None
    limit: int = 20


@dataclass(frozen=True, kw_only=True)
class MetricsRequest(_WindowRequest):
    """One ``query_metrics`` call: its arguments (``MetricsQuery``), defaults filled."""

    alert: str | None = None
    promql: str | None = None


class LogSource(ABC):
    """A source of log lines: ``query_logs`` takes the keywords, ``find_logs`` answers."""

    def query_logs(self, **query: Unpack[LogsQuery]) -> LogsOutput:
        """Log lines of a service, level, text and time window, at most ``limit``.

        Args:
            **query: The arguments of ``query_logs`` (``LogsQuery``): ``service`` (exact name),
                ``query`` (text in the message, case-insensitive), ``level``, ``start`` and
                ``end`` (ISO-8601), ``limit`` (at most this many lines, clamped to 1..100).

        Returns:
            The matching lines and how many matched (``LogsOutput``).

        Raises:
            BackendError: When the source cannot answer the call (its ``find_logs`` says when).
        """
        return self.find_logs(LogsRequest(**query))

    @abstractmethod
    def find_logs(self, request: LogsRequest) -> LogsOutput:
        """Answers one ``query_logs`` call."""


class MetricSource(ABC):
    """A source of alerts and series: ``query_metrics`` takes keywords, ``find_metrics`` answers."""

    def query_metrics(self, **query: Unpack[MetricsQuery]) -> MetricsOutput:
        """Alerts and metric series of a service, an alert name or a PromQL expression.

        Args:
            **query: The arguments of ``query_metrics`` (``MetricsQuery``): ``service`` (exact
                name), ``alert`` (text in the alert name), ``promql``, ``start`` and ``end``
                (ISO-8601).

        Returns:
            The matching alerts and series (``MetricsOutput``).

        Raises:
            BackendError: When the source cannot answer the call (its ``find_metrics`` says
                when).
        """
        return self.find_metrics(MetricsRequest(**query))

    @abstractmethod
    def find_metrics(self, request: MetricsRequest) -> MetricsOutput:
        """Answers one ``query_metrics`` call."""


class EvidenceSource(LogSource, MetricSource):
    """A whole backend: logs and metrics (``find_logs``, ``find_metrics``), knowledge and time.

    It serves ``lookup_knowledge`` and ``get_current_time`` by its own methods too.
    """


class EvidenceBackend(Protocol):
    """A source of logs, metrics and knowledge documents for the evidence tools.

    The tool runner calls each method with the validated arguments of the tool of the same name
    as keywords (the tool's module, e.g. ``tools.query_logs``, documents them). A backend may
    set ``needs_timeout = False`` when its calls are in-memory and bounded; the runner then calls
    it directly instead of on a timed worker thread.
    """

    def query_logs(self, **query: Unpack[LogsQuery]) -> LogsOutput:
        """Log lines of a service, level, text and time window, at most ``limit``."""
        ...

    def query_metrics(self, **query: Unpack[MetricsQuery]) -> MetricsOutput:
        """Alerts and metric series of a service, an alert name or a PromQL expression."""
        ...

    def lookup_knowledge(self, *, query: str, top_k: int = 3) -> KnowledgeOutput:
        """Runbooks and past incidents matching ``query``, at most ``top_k``, best first."""
        ...

    def get_current_time(self, *, timezone: str | None = None) -> TimeOutput:
        """The environment's current time, in ``timezone`` (IANA; UTC when omitted)."""
        ...

    def services(self) -> list[str]:
        """Every service name the backend knows, sorted."""
        ...
