"""A backend that serves a fixed environment (the bundled sample incident or a scenario's).

Filtering follows docs/contracts.md §9, always in environment order so a script can predict
indexes:

- `query_logs`: `service` exact; `level` case-insensitive exact; `query` case-insensitive
  substring of the message; `start`/`end` inclusive on the log timestamps (compared as parsed
  datetimes; `Z` and offsets accepted, no offset means UTC); then `limit` (clamped to 1..100).
  `total` counts matches before the limit and `truncated` is `total > len(logs)`.
- `query_metrics`: `service` exact (the alert's `service`, the series' `service` label);
  `alert` case-insensitive substring of `alert_name` (filters alerts only); `promql` keeps the
  series whose `metric` name occurs in the PromQL text (filters series only). Alerts are returned
  whatever their state. `start`/`end` filter neither alerts nor series: a series entry is already
  a summary over the environment's window, and an alert's state is its current state.
- `lookup_knowledge`: documents ranked by BM25 over their title and the Markdown headings of
  their chunk (`knowledge.rank`, the same in English and Chinese); ties keep environment
  order; documents matching no query term are left out; `top_k` is clamped to 1..10. `score` is
  the BM25 score rounded to 3 places; `relevance` is `high` when the document has at least 0.66
  of the query's distinct terms, `medium` from 0.33, else `low`.
- `query_traces`: the spans of the environment's `traces` starting inside `start`/`end` (when
  given), answered by `evidence.traces.answer` like every trace source.
- `analyze_incident`: `evidence.incident` over the environment (its log lines read at once).
- `get_current_time`: the environment's `now` when present, else the real UTC time.

Entries are returned as copies of the environment's entries. The environment is an `Environment`
record, read and checked by `evidence.environment` (whose `default_environment`, the bundled sample
incident, is importable from here too).
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from evidence.environment import Environment
from evidence.environment import default_environment as default_environment
from evidence.incident import analyze_backend
from evidence.traces.answer import traces_answer
from knowledge.rank import markdown_headings, query_terms, rank
from state.records import DocumentEntry, LogEntry, SeriesEntry, SpanEntry
from tools.analyze_incident import AnalysisOutput
from tools.backend import (
    BackendError,
    EvidenceSource,
    KnowledgeOutput,
    LogsOutput,
    LogsRequest,
    MetricsOutput,
    MetricsRequest,
    TimeOutput,
    parse_timestamp,
)
from tools.query_traces import TracesOutput, TracesRequest

_MAX_LIMIT = 100
_MAX_TOP_K = 10


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def _fold(value: str | None) -> str:
    return value.casefold() if value is not None else ""


def _bound(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        raise BackendError(f"{name}: {exc}") from None


def _relevance(score: float) -> str:
    if score >= 0.66:
        return "high"
    if score >= 0.33:
        return "medium"
    return "low"


def _format_now(moment: datetime) -> str:
    if moment.utcoffset() == UTC.utcoffset(None):
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    return moment.isoformat(timespec="seconds")


class SampleBackend(EvidenceSource):
    """Serves logs, alerts, series and documents from an in-memory environment.

    Args:
        environment: `{"logs": [...], "alerts": [...], "series": [...], "documents": [...],
            "now": "<ISO-8601>"}`; every key is optional. Entries are the records of the tool
            output shapes (docs/contracts.md §2). The environment is copied; later changes to the
            argument do not affect the backend.
    """

    needs_timeout = False
    """In-memory and bounded: the runner calls it directly instead of on a timed worker thread."""
    title = "environment file"

    def __init__(self, environment: Environment) -> None:
        env = copy.deepcopy(environment)
        self._logs = env.get("logs", [])
        self._alerts = env.get("alerts", [])
        self._series = env.get("series", [])
        self._documents = env.get("documents", [])
        self._traces = env.get("traces", [])
        self._now = env.get("now")

    def find_logs(self, request: LogsRequest) -> LogsOutput:
        """Finds log lines (see the module docstring for the exact semantics).

        Returns:
            `{"logs": [...], "total": int, "truncated": bool}`.

        Raises:
            BackendError: When `start` or `end` is not an ISO-8601 timestamp.
        """
        service, level, query = request.service, request.level, request.query
        start_at = _bound(request.start, "start")
        end_at = _bound(request.end, "end")
        needle = query.casefold() if query is not None else None
        wanted_level = level.casefold() if level is not None else None
        matches: list[LogEntry] = []
        for entry in self._logs:
            if service is not None and entry.get("service") != service:
                continue
            if wanted_level is not None and _fold(entry.get("level")) != wanted_level:
                continue
            if needle is not None and needle not in _fold(entry.get("message")):
                continue
            if (start_at is not None or end_at is not None) and not _within(
                entry.get("timestamp"), start_at, end_at
            ):
                continue
            matches.append(entry)
        returned = matches[: _clamp(request.limit, 1, _MAX_LIMIT)]
        return LogsOutput(
            logs=copy.deepcopy(returned),
            total=len(matches),
            truncated=len(matches) > len(returned),
        )

    def find_metrics(self, request: MetricsRequest) -> MetricsOutput:
        """Finds alerts and series (see the module docstring for the exact semantics).

        `start` and `end` are checked but do not filter.

        Returns:
            `{"alerts": [...], "series": [...]}`.

        Raises:
            BackendError: When `start` or `end` is not an ISO-8601 timestamp.
        """
        service, alert, promql = request.service, request.alert, request.promql
        _bound(request.start, "start")
        _bound(request.end, "end")
        alert_needle = alert.casefold() if alert is not None else None
        alerts = [
            entry
            for entry in self._alerts
            if (service is None or entry.get("service") == service)
            and (alert_needle is None or alert_needle in _fold(entry.get("alert_name")))
        ]
        series = [
            entry
            for entry in self._series
            if (service is None or _labels(entry).get("service") == service)
            and (promql is None or _metric_in(entry.get("metric"), promql))
        ]
        return MetricsOutput(alerts=copy.deepcopy(alerts), series=copy.deepcopy(series))

    def lookup_knowledge(self, *, query: str, top_k: int = 3) -> KnowledgeOutput:
        """Ranks documents by BM25 over title and headings (see the module docstring).

        Args:
            query: What is looked for (English, Chinese or both).
            top_k: At most this many documents (clamped to 1..10).

        Returns:
            `{"documents": [{doc_id, title, source, chunk, score, relevance}]}`, best first.
        """
        fields = [
            (doc.get("title", ""), markdown_headings(doc.get("chunk", "")))
            for doc in self._documents
        ]
        terms = len(query_terms(query))
        documents: list[DocumentEntry] = []
        for found in rank(query, fields, top_k=_clamp(top_k, 1, _MAX_TOP_K)):
            doc = self._documents[found.position]
            entry = DocumentEntry(
                doc_id=doc["doc_id"],
                title=doc["title"],
                chunk=doc["chunk"],
                score=round(found.score, 3),
                relevance=_relevance(found.matched / terms),
            )
            if "source" in doc:
                entry["source"] = doc["source"]
            documents.append(entry)
        return KnowledgeOutput(documents=documents)

    def find_traces(self, request: TracesRequest) -> TracesOutput:
        """Answers `query_traces` from the environment's spans (`evidence.traces.answer`).

        `start`/`end` keep the spans that start inside the inclusive window when given.

        Raises:
            BackendError: When `start` or `end` is not an ISO-8601 timestamp.
        """
        start_at = _bound(request.start, "start")
        end_at = _bound(request.end, "end")
        spans = [
            span
            for span in self._traces
            if (start_at is None and end_at is None) or _within(span.get("start"), start_at, end_at)
        ]
        return traces_answer(copy.deepcopy(spans), request)

    def evidence_kinds(self) -> frozenset[str]:
        """The kinds of evidence served: traces only when the environment has spans."""
        return frozenset({"logs", "metrics", "knowledge", *(["traces"] if self._traces else [])})

    def scan_logs(self, start: datetime, end: datetime, limit: int) -> list[LogEntry]:
        """Every log line inside the inclusive window, in environment order, at most `limit`.

        What `analyze_incident` reads (`evidence.incident.LogScan`); lines whose timestamp
        cannot be read are left out.
        """
        found = [entry for entry in self._logs if _within(entry.get("timestamp"), start, end)]
        return copy.deepcopy(found[-limit:] if limit > 0 else [])

    def scan_spans(self, start: datetime, end: datetime, limit: int) -> list[SpanEntry] | None:
        """Every span of the environment's `traces` starting inside the window, at most `limit`.

        What `analyze_incident` reads (`evidence.incident.SpanScan`); None when the environment
        has no `traces` at all.
        """
        if not self._traces:
            return None
        found = [span for span in self._traces if _within(span.get("start"), start, end)]
        return copy.deepcopy(found[-limit:] if limit > 0 else [])

    def analyze_incident(self, **arguments: Any) -> AnalysisOutput:
        """The incident analysis over this environment (`evidence.incident`)."""
        return analyze_backend(self, **arguments)

    def get_current_time(self, *, timezone: str | None = None) -> TimeOutput:
        """Returns the environment's `now` (or the real UTC time when it has none).

        Args:
            timezone: An IANA timezone to express the time in. When omitted, the environment's
                `now` is returned exactly as written.

        Returns:
            `{"now": "<ISO-8601>"}`.

        Raises:
            BackendError: When the timezone is unknown or the environment's `now` is invalid.
        """
        if self._now is not None:
            if timezone is None:
                return TimeOutput(now=self._now)
            try:
                moment = parse_timestamp(self._now)
            except ValueError as exc:
                raise BackendError(f"environment now: {exc}") from None
        else:
            moment = datetime.now(UTC).replace(microsecond=0)
        if timezone is not None:
            try:
                moment = moment.astimezone(ZoneInfo(timezone))
            except (ZoneInfoNotFoundError, ValueError):
                raise BackendError(f"unknown timezone {timezone!r}") from None
        return TimeOutput(now=_format_now(moment))

    def services(self) -> list[str]:
        """Lists every service named by a log, an alert or a series label, sorted."""
        names = {entry.get("service") for entry in self._logs}
        names |= {entry.get("service") for entry in self._alerts}
        names |= {_labels(entry).get("service") for entry in self._series}
        names |= {span.get("service") for span in self._traces}
        return sorted(name for name in names if name)


def _labels(entry: SeriesEntry) -> dict[str, str]:
    return entry.get("labels", {})


def _metric_in(metric: str | None, promql: str) -> bool:
    return bool(metric and metric in promql)


def _within(timestamp: str | None, start_at: datetime | None, end_at: datetime | None) -> bool:
    """Tells whether a log timestamp lies in the inclusive window; unparseable never does."""
    if timestamp is None:
        return False
    try:
        moment = parse_timestamp(timestamp)
    except ValueError:
        return False
    if start_at is not None and moment < start_at:
        return False
    return not (end_at is not None and moment > end_at)
