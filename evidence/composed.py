"""The evidence backend the configuration asks for, composed of one source per kind of evidence.

``configured_backend`` is what the command line, the HTTP API and the LangGraph server use:

- nothing configured: the sample backend over ``--env FILE`` or the bundled sample incident, as
  before;
- a real source configured (``evidence.config``): ``ComposedBackend``, one part per kind of
  evidence, each served by its configured source: metrics (and alerts) by Prometheus /
  Alertmanager, logs by Loki, OpenSearch or local log files (at most one), knowledge by the
  runbook index, traces by Tempo, Jaeger or OTLP files (at most one). A kind without a
  configured source is served by the environment file when one
  is given, else it is *unavailable* (an ``error`` invocation saying so): the bundled sample
  incident is never mixed into answers about real systems.

``services()`` joins the services every part knows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

import anyio
import anyio.to_thread

from evidence.alertmanager import AlertmanagerAlerts
from evidence.config import ConfigError, Settings, load_settings, variable_name
from evidence.environment import Environment, default_environment
from evidence.incident import analyze_backend
from evidence.logfiles import FileLogs
from evidence.loki import LokiLogs
from evidence.mcp.tools import McpServers, offer
from evidence.opensearch import OpenSearchLogs
from evidence.prometheus import PrometheusMetrics
from evidence.replay import ReplayBackend
from evidence.sample import SampleBackend
from evidence.traces.files import FileTraces
from evidence.traces.jaeger import JaegerTraces
from evidence.traces.tempo import TempoTraces
from knowledge.runbooks import Progress, RunbookIndex, stderr_progress
from state.records import LogEntry, SpanEntry
from tools.analyze_incident import AnalysisOutput
from tools.backend import (
    BackendError,
    BackendReport,
    EvidenceBackend,
    EvidenceSource,
    KnowledgeOutput,
    LogSource,
    LogsOutput,
    LogsRequest,
    MetricSource,
    MetricsOutput,
    MetricsRequest,
    TimeOutput,
)
from tools.query_traces import TracesOutput, TracesRequest


class _Part(Protocol):
    @property
    def title(self) -> str:
        """What serves the tool, in words (``config show``)."""
        ...


class _Logs(_Part, Protocol):
    def find_logs(self, request: LogsRequest) -> LogsOutput: ...


class _Metrics(_Part, Protocol):
    def find_metrics(self, request: MetricsRequest) -> MetricsOutput: ...


class _Knowledge(_Part, Protocol):
    def lookup_knowledge(self, *, query: str, top_k: int = 3) -> KnowledgeOutput: ...


class _Traces(_Part, Protocol):
    def find_traces(self, request: TracesRequest) -> TracesOutput: ...


class _Clock(_Part, Protocol):
    def get_current_time(self, *, timezone: str | None = None) -> TimeOutput: ...


class Unavailable(LogSource, MetricSource):
    """A kind of evidence no source is configured for: every call is an error saying so."""

    needs_timeout = False

    title = "none"

    def __init__(self, what: str, fix: str) -> None:
        self.what = what
        self.fix = fix

    def _refuse(self) -> BackendError:
        return BackendError(f"no {self.what} source is configured; {self.fix}")

    def find_logs(self, request: LogsRequest) -> LogsOutput:
        """Refused: no log source."""
        raise self._refuse()

    def find_metrics(self, request: MetricsRequest) -> MetricsOutput:
        """Refused: no metrics source."""
        raise self._refuse()

    def lookup_knowledge(self, *, query: str, top_k: int = 3) -> KnowledgeOutput:
        """Refused: no knowledge source."""
        raise self._refuse()

    def find_traces(self, request: TracesRequest) -> TracesOutput:
        """Refused: no trace source."""
        raise self._refuse()

    def services(self) -> list[str]:
        """Knows no service."""
        return []


def _set_sources(settings: Settings) -> list[str]:
    """The variables of the sources that are set (any one switches the bundled sample off)."""
    names = [variable_name(name, "url") for name in settings.backends]
    for value, key in (
        (settings.log_files, "log_files"),
        (settings.runbooks, "runbooks"),
        (settings.trace_files, "trace_files"),
        (settings.mcp_servers, "mcp_servers"),
    ):
        if value:
            names.append(variable_name(None, key))
    return names


_TRACES_FIX = (
    "set SUPERBIZ_TRACE_FILES, SUPERBIZ_TEMPO_URL or SUPERBIZ_JAEGER_URL, or pass --env FILE "
    "to serve an environment file's traces"
)


class RealClock:
    """The current UTC time (``get_current_time``) of a real environment."""

    needs_timeout = False
    title = "real time"

    def get_current_time(self, *, timezone: str | None = None) -> TimeOutput:
        """The real time, in ``timezone`` when given."""
        return SampleBackend({}).get_current_time(timezone=timezone)


class ComposedBackend(EvidenceSource):
    """An ``EvidenceBackend`` whose tools are served by one part each.

    Args:
        logs: Serves ``query_logs``.
        metrics: Serves ``query_metrics``.
        knowledge: Serves ``lookup_knowledge``.
        clock: Serves ``get_current_time``.
        traces: Serves ``query_traces`` (default: unavailable).
        mcp: The configured MCP servers, whose tools are registered specs of their own (only
            checked here).
    """

    def __init__(
        self,
        *,
        logs: _Logs,
        metrics: _Metrics,
        knowledge: _Knowledge,
        clock: _Clock,
        traces: _Traces | None = None,
        mcp: McpServers | None = None,
    ) -> None:
        self.logs = logs
        self.metrics = metrics
        self.knowledge = knowledge
        self.clock = clock
        self.traces: _Traces = traces or Unavailable("trace", _TRACES_FIX)
        self.mcp = mcp
        listed: list[object] = [logs, metrics, knowledge, clock, self.traces]
        self.parts: tuple[object, ...] = tuple(
            dict.fromkeys(listed + ([mcp] if mcp is not None else []), None)
        )
        self.needs_timeout = any(getattr(part, "needs_timeout", True) for part in self.parts)

    def find_logs(self, request: LogsRequest) -> LogsOutput:
        """Log lines from the log part."""
        return self.logs.find_logs(request)

    def find_metrics(self, request: MetricsRequest) -> MetricsOutput:
        """Alerts and series from the metrics part."""
        return self.metrics.find_metrics(request)

    def find_traces(self, request: TracesRequest) -> TracesOutput:
        """Traces from the trace part."""
        return self.traces.find_traces(request)

    def evidence_kinds(self) -> frozenset[str]:
        """The kinds of evidence served: traces only when a part serves them."""
        kinds = getattr(self.traces, "evidence_kinds", None)
        traced = kinds() if callable(kinds) else frozenset({"traces"})
        served = not isinstance(self.traces, Unavailable) and "traces" in traced
        return frozenset({"logs", "metrics", "knowledge", *(["traces"] if served else [])})

    @property
    def follows_runbook_urls(self) -> bool:
        """Whether the knowledge part puts the runbooks alerts point at first."""
        return bool(getattr(self.knowledge, "follows_runbook_urls", False))

    def lookup_knowledge(
        self, *, query: str, top_k: int = 3, runbook_urls: Sequence[str] = ()
    ) -> KnowledgeOutput:
        """Documents from the knowledge part (``runbook_urls`` when it follows them)."""
        if runbook_urls and isinstance(self.knowledge, RunbookIndex):
            return self.knowledge.lookup_knowledge(
                query=query, top_k=top_k, runbook_urls=runbook_urls
            )
        return self.knowledge.lookup_knowledge(query=query, top_k=top_k)

    def scan_logs(self, start: datetime, end: datetime, limit: int) -> list[LogEntry] | None:
        """A window's lines at once when the log part can hand them over, else None."""
        scan = getattr(self.logs, "scan_logs", None)
        return scan(start, end, limit) if callable(scan) else None

    def scan_spans(self, start: datetime, end: datetime, limit: int) -> list[SpanEntry] | None:
        """A window's spans at once when the trace part can hand them over, else None."""
        scan = getattr(self.traces, "scan_spans", None)
        return scan(start, end, limit) if callable(scan) else None

    def analyze_incident(self, **arguments: Any) -> AnalysisOutput:
        """The incident analysis over the composed sources (``evidence.incident``)."""
        return analyze_backend(self, **arguments)

    def get_current_time(self, *, timezone: str | None = None) -> TimeOutput:
        """The time from the clock part."""
        return self.clock.get_current_time(timezone=timezone)

    def services(self) -> list[str]:
        """Every service a part knows, sorted."""
        names: set[str] = set()
        for part in self.parts:
            listing = getattr(part, "services", None)
            if callable(listing):
                names.update(listing())
        return sorted(names)

    def checks(self) -> list[BackendReport]:
        """One report per part that can check itself (a real server), in part order."""
        reports: list[BackendReport] = []
        for part in self.parts:
            several = getattr(part, "checks", None)  # a part over more than one server
            check = getattr(part, "check", None)
            if callable(several):
                reports.extend(several())
            elif callable(check):
                reports.append(check())
        return reports


def check_backends(backend: EvidenceBackend) -> list[BackendReport]:
    """A report per configured real backend; the sample backend reports itself as ``sample``."""
    checks = getattr(backend, "checks", None)
    if callable(checks):
        reports: list[BackendReport] = checks()
        return reports
    return [
        BackendReport(
            backend="sample",
            url=None,
            status="ok",
            detail="no real backend configured: the bundled sample incident or --env FILE",
        )
    ]


def configured_backend(
    settings: Settings | None = None,
    *,
    environment: Environment | None = None,
    database: str | None = None,
    progress: Progress | None = stderr_progress,
    connect_mcp: bool = True,
) -> EvidenceBackend:
    """The evidence backend the configuration names (see the module docstring).

    Args:
        settings: The configuration; None reads it (``evidence.config.load_settings``).
        environment: An environment file's content (``--env FILE``); None when not given.
        database: Where the runbook index lives (``--db``; None: the configured database).
        progress: Where the runbook index reports indexing on first use (default stderr).
        connect_mcp: Start the configured MCP servers and register their tools (``evidence/mcp``;
            once per process); False leaves them alone (``config show``).

    Raises:
        ConfigError: When the configuration cannot be used.
    """
    if environment is not None and "replay" in environment:
        # A recorded diagnosis's tool results serve every call; nothing else is mixed in.
        return ReplayBackend(environment["replay"])
    settings = settings if settings is not None else load_settings()
    if not settings.real:
        return SampleBackend(environment if environment is not None else default_environment())
    metrics = _metrics(settings)
    file_backend: SampleBackend | None = None
    if environment is not None:
        # Only the kinds no configured source serves; its `now` gives way to the real time.
        kept: Environment = Environment(
            logs=environment.get("logs", []), documents=environment.get("documents", [])
        )
        if settings.trace_source is None:
            kept["traces"] = environment.get("traces", [])
        if metrics is None:
            kept["alerts"] = environment.get("alerts", [])
            kept["series"] = environment.get("series", [])
        file_backend = SampleBackend(kept)
    fix = "set {} or pass --env FILE to serve an environment file's {}"
    if environment is None:
        fix += (
            "; the bundled sample serves only while no source is set, and "
            + ", ".join(_set_sources(settings))
            + " switched it off: unset it to keep the sample"
        )
    logs: _Logs = (
        _logs(settings)
        or file_backend
        or Unavailable(
            "log",
            fix.format("SUPERBIZ_LOKI_URL, SUPERBIZ_OPENSEARCH_URL or SUPERBIZ_LOG_FILES", "logs"),
        )
    )
    knowledge: _Knowledge
    if settings.runbooks:
        knowledge = RunbookIndex(settings.runbooks, database=database, progress=progress)
    else:
        knowledge = file_backend or Unavailable(
            "runbook", fix.format("SUPERBIZ_RUNBOOKS", "documents")
        )
    return ComposedBackend(
        logs=logs,
        metrics=metrics
        or file_backend
        or Unavailable(
            "metrics",
            fix.format(
                "SUPERBIZ_PROMETHEUS_URL (or SUPERBIZ_ALERTMANAGER_URL)", "alerts and series"
            ),
        ),
        knowledge=knowledge,
        clock=RealClock(),
        traces=_traces(settings) or file_backend,
        mcp=offer(settings.mcp_servers) if settings.mcp_servers and connect_mcp else None,
    )


def _traces(settings: Settings) -> _Traces | None:
    source = settings.trace_source
    if source == "trace_files":
        return FileTraces(settings.trace_files)
    tempo = settings.backend("tempo")
    if source == "tempo" and tempo is not None:
        return TempoTraces(tempo, timeout_s=settings.query_timeout_s)
    jaeger = settings.backend("jaeger")
    if source == "jaeger" and jaeger is not None:
        return JaegerTraces(jaeger, timeout_s=settings.query_timeout_s)
    return None


def _metrics(settings: Settings) -> PrometheusMetrics | None:
    prometheus = settings.backend("prometheus")
    alertmanager_settings = settings.backend("alertmanager")
    if prometheus is None and alertmanager_settings is None:
        return None
    alertmanager = (
        AlertmanagerAlerts(alertmanager_settings, timeout_s=settings.query_timeout_s)
        if alertmanager_settings is not None
        else None
    )
    return PrometheusMetrics(
        prometheus,
        alertmanager=alertmanager,
        service_labels=settings.service_labels,
        timeout_s=settings.query_timeout_s,
    )


def _logs(settings: Settings) -> _Logs | None:
    source = settings.log_source
    if source == "log_files":
        return FileLogs(settings.log_files)
    loki = settings.backend("loki")
    if source == "loki" and loki is not None:
        return LokiLogs(
            loki, service_labels=settings.service_labels, timeout_s=settings.query_timeout_s
        )
    opensearch = settings.backend("opensearch")
    if source == "opensearch" and opensearch is not None:
        return OpenSearchLogs(opensearch, timeout_s=settings.query_timeout_s)
    return None


def part_names(backend: EvidenceBackend) -> Sequence[str]:
    """Which source serves each tool (for ``config show``)."""
    if not isinstance(backend, ComposedBackend):
        return ["sample: logs, metrics, knowledge, time"]

    return [
        f"logs: {backend.logs.title}",
        f"metrics: {backend.metrics.title}",
        f"knowledge: {backend.knowledge.title}",
        f"traces: {backend.traces.title}",
        f"time: {backend.clock.title}",
    ]


async def backend_health(
    backend: Callable[[], EvidenceBackend], timeout_s: float
) -> dict[str, object]:
    """``{"backends": {name: report}}`` for ``/healthz``, within ``timeout_s`` (never raises).

    A backend that does not answer in time, or a configuration that cannot be used, is reported
    as an error; the database check is separate.
    """

    def run() -> list[BackendReport]:
        return check_backends(backend())

    try:
        with anyio.fail_after(timeout_s):
            reports = await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
    except TimeoutError:
        return {
            "backends": {"all": {"status": "error", "detail": f"no answer within {timeout_s:g} s"}}
        }
    except ConfigError as exc:
        return {"backends": {"config": {"status": "error", "detail": str(exc)}}}
    return {
        "backends": {
            report["backend"]: {k: v for k, v in report.items() if k != "backend"}
            for report in reports
        }
    }
