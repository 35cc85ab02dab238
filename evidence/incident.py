"""``analyze_incident`` over any evidence backend: gather both windows' raw data, then analyze.

The windows (the tool's arguments, else the defaults):

- the incident window ends at ``end``, else at the backend's current time; it starts at
  ``start``, else ``INCIDENT_MINUTES`` before its end or, when alerts fire, ``ALERT_LEAD``
  before the first firing alert became active (so the data before the first symptom is in),
  whichever is earlier; it spans at most ``MAX_INCIDENT``;
- the baseline ends at ``baseline_end``, else where the incident window starts, and starts at
  ``baseline_start``, else ``BASELINE_MINUTES`` before its end; it spans at most
  ``MAX_BASELINE``.

The raw data, through the sources' own protocols, so every backend is served the same way:

- logs of every level (INFO included: changes are announced at INFO) of both windows: a source
  that can hand over a window's lines at once (``LogScan``, environment files) does; any other
  (Loki, OpenSearch, log files) is asked with ``query_logs`` window slice by window slice,
  halving a slice whose lines were cut, at most ``MAX_LOG_CALLS`` calls; what stays cut is a gap;
- series and alerts with ``query_metrics`` over both windows (per service when the unscoped call
  returns no series, at most ``MAX_METRIC_SERVICES`` services);
- spans from a source that can hand them over (``SpanScan``); none: the call graph comes from
  the log messages;
- when nothing was logged in the default baseline (the hour before), the baseline reaches back
  ``MAX_BASELINE`` (a capture of an earlier, quiet period serves), and a gap says so;
- a source that has nothing in the baseline window says so as a gap (a log file that starts
  inside the window, a metrics source that keeps less history).

``analysis.incident.analyze`` does the rest; its report becomes the tool's entry arrays
(``tools.analyze_incident``), each signal with the raw items it rests on quoted verbatim.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol, runtime_checkable

from analysis.incident import analyze
from analysis.report import EvidencePointer, IncidentInputs, IncidentReport, Signal, Suspect
from state.records import AlertEntry, LogEntry, SeriesEntry, SpanEntry
from tools.analyze_incident import (
    AnalysisOutput,
    ChangeRow,
    EdgeRow,
    GapRow,
    PointerRow,
    RootCause,
    SignalRow,
    SuspectRow,
)
from tools.backend import BackendError, EvidenceBackend, MetricsOutput, parse_timestamp

INCIDENT_MINUTES: Final = 15
BASELINE_MINUTES: Final = 60
ALERT_LEAD: Final = timedelta(minutes=5)
MAX_INCIDENT: Final = timedelta(hours=6)
MAX_BASELINE: Final = timedelta(hours=24)
MAX_LOG_CALLS: Final = 120
"""``query_logs`` calls one analysis makes at most on a source that cannot hand over a window."""
MAX_METRIC_SERVICES: Final = 30
MAX_LOG_LINES: Final = 400_000
"""Log lines read at most (the analysis's own cap)."""
PAGE: Final = 100
"""Lines one ``query_logs`` call returns at most."""
MAX_SUSPECTS: Final = 8
MAX_SIGNALS_PER_SUSPECT: Final = 8
MAX_POINTERS: Final = 3


@runtime_checkable
class LogScan(Protocol):
    """A log source that hands over every line of a window at once (oldest first)."""

    def scan_logs(self, start: datetime, end: datetime, limit: int) -> list[LogEntry] | None:
        """The window's lines (at most ``limit``), or None when it cannot."""
        ...


@runtime_checkable
class SpanScan(Protocol):
    """A trace source that hands over every span starting in a window."""

    def scan_spans(self, start: datetime, end: datetime, limit: int) -> list[SpanEntry] | None:
        """The window's spans (at most ``limit``), or None when it has none to give."""
        ...


def iso(moment: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now(backend: EvidenceBackend) -> datetime:
    try:
        return parse_timestamp(str(backend.get_current_time()["now"]))
    except (BackendError, KeyError, TypeError, ValueError):
        return datetime.now(UTC).replace(microsecond=0)


def _at(value: str | None) -> datetime | None:
    return parse_timestamp(value) if value else None


def _first_firing(alerts: Iterable[AlertEntry]) -> datetime | None:
    moments: list[datetime] = []
    for alert in alerts:
        if alert.get("state") != "firing" or not alert.get("active_at"):
            continue
        try:
            moments.append(parse_timestamp(str(alert["active_at"])))
        except ValueError:
            continue
    return min(moments, default=None)


class Windows:
    """The incident window and its baseline, bounded (see the module docstring)."""

    def __init__(
        self,
        *,
        now: datetime,
        alerts: Sequence[AlertEntry],
        start: str | None,
        end: str | None,
        baseline_start: str | None,
        baseline_end: str | None,
        gaps: list[str],
    ) -> None:
        """Windows from the arguments, the current time and the firing alerts."""
        self.end = _at(end) or now
        given = _at(start)
        if given is None:
            given = self.end - timedelta(minutes=INCIDENT_MINUTES)
            fired = _first_firing(alerts)
            if fired is not None and fired - ALERT_LEAD < given and fired <= self.end:
                given = fired - ALERT_LEAD
        if given >= self.end:
            gaps.append(f"the incident window cannot start at {iso(given)}, after its end")
            given = self.end - timedelta(minutes=INCIDENT_MINUTES)
        if self.end - given > MAX_INCIDENT:
            gaps.append(
                f"the incident window was cut to its last {MAX_INCIDENT.total_seconds() / 3600:g} h"
            )
            given = self.end - MAX_INCIDENT
        self.start = given
        self.baseline_end = _at(baseline_end) or self.start
        self.baseline_start = _at(baseline_start) or self.baseline_end - timedelta(
            minutes=BASELINE_MINUTES
        )
        if self.baseline_end - self.baseline_start > MAX_BASELINE:
            gaps.append("the baseline window was cut to its last 24 h")
            self.baseline_start = self.baseline_end - MAX_BASELINE

    @property
    def first(self) -> datetime:
        """The earliest moment either window covers."""
        return min(self.start, self.baseline_start)

    def pairs(self) -> list[tuple[datetime, datetime]]:
        """The baseline, then the incident window."""
        return [(self.baseline_start, self.baseline_end), (self.start, self.end)]


# --------------------------------------------------------------------------- gathering


def _key(entry: LogEntry) -> tuple[str, str, str, str, str]:
    return (
        str(entry.get("timestamp", "")),
        str(entry.get("service", "")),
        str(entry.get("instance", "")),
        str(entry.get("level", "")),
        str(entry.get("message", "")),
    )


class _LogReader:
    """Reads a window's lines with ``query_logs``, slice by slice (see the module docstring)."""

    def __init__(self, backend: EvidenceBackend) -> None:
        self.backend = backend
        self.calls = 0
        self.cut: list[str] = []

    def read(self, start: datetime, end: datetime) -> list[LogEntry]:
        seen: dict[tuple[str, str, str, str, str], LogEntry] = {}
        pending = [(start, end)]
        while pending:
            low, high = pending.pop()
            if self.calls >= MAX_LOG_CALLS:
                self.cut.append(f"{iso(low)}/{iso(high)}")
                continue
            self.calls += 1
            found = self.backend.query_logs(start=iso(low), end=iso(high), limit=PAGE)
            for entry in found.get("logs", []):
                seen.setdefault(_key(entry), entry)
            total = int(found.get("total", 0) or 0)
            if total > len(found.get("logs", [])) and high - low > timedelta(seconds=2):
                middle = low + (high - low) / 2
                pending += [(low, middle), (middle, high)]
        return sorted(seen.values(), key=lambda entry: str(entry.get("timestamp", "")))


def _logs(backend: EvidenceBackend, windows: Windows, gaps: list[str]) -> list[LogEntry]:
    scanner = _part(backend, "scan_logs")
    if scanner is not None:
        scanned = scanner(windows.first, windows.end, MAX_LOG_LINES)
        if scanned is not None:
            return list(scanned)
    reader = _LogReader(backend)
    lines: list[LogEntry] = []
    for low, high in windows.pairs():
        if high > low:
            lines += reader.read(low, high)
    if reader.cut:
        gaps.append(
            f"logs: the source returned only part of {len(reader.cut)} window slice(s) after "
            f"{MAX_LOG_CALLS} queries; their lines are sampled, e.g. {reader.cut[0]}"
        )
    return lines


def _part(backend: object, method: str) -> Callable[..., Any] | None:
    found = getattr(backend, method, None)
    return found if callable(found) else None


def _metrics(
    backend: EvidenceBackend, windows: Windows, first: MetricsOutput | None, gaps: list[str]
) -> tuple[list[SeriesEntry], list[AlertEntry]]:
    window = {"start": iso(windows.first), "end": iso(windows.end)}
    try:
        found = backend.query_metrics(**window)
    except BackendError as exc:
        gaps.append(f"metrics: {exc}")
        return [], list(first.get("alerts", [])) if first else []
    series = list(found.get("series", []))
    alerts = list(found.get("alerts", []))
    if not series:
        try:
            names = backend.services()[:MAX_METRIC_SERVICES]
        except BackendError:
            names = []
        for service in names:
            try:
                scoped = backend.query_metrics(service=service, **window)
            except BackendError as exc:
                gaps.append(f"metrics of {service}: {exc}")
                continue
            series += scoped.get("series", [])
    return series, alerts


def _spans(backend: object, windows: Windows, gaps: list[str]) -> list[SpanEntry]:
    scanner = _part(backend, "scan_spans")
    if scanner is None:
        gaps.append("traces: no trace source hands over spans; the call graph comes from logs")
        return []
    try:
        found = scanner(windows.first, windows.end, MAX_LOG_LINES)
    except BackendError as exc:
        gaps.append(f"traces: {exc}")
        return []
    if found is None:
        gaps.append("traces: no trace source hands over spans; the call graph comes from logs")
        return []
    return list(found)


def _moment(value: object) -> datetime | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(float(value), UTC)
    if isinstance(value, str) and value:
        try:
            return parse_timestamp(value)
        except ValueError:
            return None
    return None


def _any_in_baseline(logs: Sequence[LogEntry], windows: Windows) -> bool:
    for entry in logs:
        moment = _moment(entry.get("timestamp"))
        if moment is not None and windows.baseline_start <= moment < windows.baseline_end:
            return True
    return False


def _baseline_gaps(
    logs: Sequence[LogEntry],
    series: Sequence[SeriesEntry],
    windows: Windows,
    gaps: list[str],
) -> None:
    def in_baseline(moment: datetime | None) -> bool:
        return moment is not None and windows.baseline_start <= moment < windows.baseline_end

    span = f"{iso(windows.baseline_start)}/{iso(windows.baseline_end)}"
    if logs and not any(in_baseline(_moment(entry.get("timestamp"))) for entry in logs):
        gaps.append(
            f"logs: no line in the baseline window {span}; the source may not reach back that "
            "far, so every message reads as new"
        )
    points = [point for entry in series for point in entry.get("points", []) if point]
    if series and not any(in_baseline(_moment(point[0])) for point in points):
        gaps.append(f"series: no point in the baseline window {span}")


def gather(
    backend: EvidenceBackend,
    *,
    start: str | None = None,
    end: str | None = None,
    baseline_start: str | None = None,
    baseline_end: str | None = None,
) -> IncidentInputs:
    """The analysis's inputs: both windows and their raw data from ``backend``."""
    gaps: list[str] = []
    now = _now(backend)
    first: MetricsOutput | None = None
    try:
        first = backend.query_metrics(start=iso(now - timedelta(hours=1)), end=iso(now))
    except BackendError as exc:
        gaps.append(f"alerts: {exc}")
    windows = Windows(
        now=now,
        alerts=first.get("alerts", []) if first else [],
        start=start,
        end=end,
        baseline_start=baseline_start,
        baseline_end=baseline_end,
        gaps=gaps,
    )
    try:
        logs = _logs(backend, windows, gaps)
        if baseline_start is None and logs and not _any_in_baseline(logs, windows):
            # Nothing logged in the hour before: look back further for a baseline.
            widened = windows.baseline_end - MAX_BASELINE
            gaps.append(
                f"logs: no line in the {BASELINE_MINUTES} min before the incident window; the "
                f"baseline reaches back to {iso(widened)}"
            )
            windows.baseline_start = widened
            logs = _logs(backend, windows, gaps)
    except BackendError as exc:
        gaps.append(f"logs: {exc}")
        logs = []
    series, alerts = _metrics(backend, windows, first, gaps)
    spans = _spans(backend, windows, gaps)
    _baseline_gaps(logs, series, windows, gaps)
    return IncidentInputs(
        incident_start=iso(windows.start),
        incident_end=iso(windows.end),
        baseline_start=iso(windows.baseline_start),
        baseline_end=iso(windows.baseline_end),
        logs=logs,
        series=series,
        spans=spans,
        alerts=alerts,
        dependencies=[],
        gaps=gaps,
    )


# --------------------------------------------------------------------------- the output


def _pointer(pointer: EvidencePointer) -> PointerRow:
    row: PointerRow = {}
    row.update(pointer)
    if row.get("kind") == "series":
        row["points"] = list(row.get("points", []))[:MAX_POINTERS]
    return row


def _signal_row(signal: Signal) -> SignalRow:
    return SignalRow(
        service=signal["service"],
        kind=signal["kind"],
        detail=signal["detail"],
        baseline=signal["baseline"],
        incident=signal["incident"],
        onset=signal["onset"],
        strength=round(signal["strength"], 3),
        evidence=[_pointer(p) for p in signal["evidence"][:MAX_POINTERS]],
    )


def _suspect_row(rank: int, suspect: Suspect, root: bool, signals: list[SignalRow]) -> SuspectRow:
    indexes: list[int] = []
    for signal in suspect["signals"][:MAX_SIGNALS_PER_SUSPECT]:
        indexes.append(len(signals))
        signals.append(_signal_row(signal))
    row = SuspectRow(
        rank=rank,
        service=suspect["service"],
        score=round(suspect["score"], 3),
        mechanism=suspect["mechanism"],
        onset=suspect["onset"],
        root_cause=root,
        explains=list(suspect["explains"]),
        explained_by=list(suspect["explained_by"]),
        signals=indexes,
    )
    why = suspect.get("why_not_first")
    if why and not root:
        row["why_not_first"] = why
    return row


def report_output(report: IncidentReport) -> AnalysisOutput:
    """The analysis report as the tool's output (``tools.analyze_incident.AnalysisOutput``)."""
    root = report["root_cause"]
    signals: list[SignalRow] = []
    suspects = [
        _suspect_row(
            rank,
            suspect,
            root is not None and suspect["service"] == root["service"],
            signals,
        )
        for rank, suspect in enumerate(report["suspects"][:MAX_SUSPECTS], start=1)
    ]
    changes = [
        ChangeRow(
            time=change["time"],
            service=change["service"],
            category=change["category"],
            level=str(change["evidence"].get("level", "")),
            message=str(change["evidence"].get("message", change["text"])),
        )
        for change in report["changes"]
    ]
    edges = [
        EdgeRow(caller=e["caller"], callee=e["callee"], source=e["source"], calls=e["calls"])
        for e in report["edges"]
    ]
    gaps = [GapRow(text=text) for text in report["gaps"]]
    if report["ambiguity"]:
        gaps.insert(0, GapRow(text=f"no single root cause: {report['ambiguity']}"))
    windows = report["windows"]
    return AnalysisOutput(
        suspects=suspects,
        signals=signals,
        changes=changes,
        edges=edges,
        gaps=gaps,
        root_cause=(
            RootCause(
                service=root["service"],
                mechanism=root["mechanism"],
                score=round(root["score"], 3),
            )
            if root is not None
            else None
        ),
        ambiguity=report["ambiguity"],
        window_start=windows["incident_start"],
        window_end=windows["incident_end"],
        baseline_start=windows["baseline_start"],
        baseline_end=windows["baseline_end"],
        suspects_total=len(report["suspects"]),
    )


def analyze_backend(
    backend: EvidenceBackend,
    *,
    services: list[str] | None = None,
    start: str | None = None,
    end: str | None = None,
    baseline_start: str | None = None,
    baseline_end: str | None = None,
) -> AnalysisOutput:
    """``analyze_incident`` on ``backend`` (``services`` only name what the question asks)."""
    del services  # every service is analysed: the cause is often elsewhere
    inputs = gather(
        backend, start=start, end=end, baseline_start=baseline_start, baseline_end=baseline_end
    )
    return report_output(analyze(inputs))
