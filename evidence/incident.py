"""``analyze_incident`` over any evidence backend: gather both windows' raw data, then analyze.

The windows (the tool's arguments, else the defaults):

- the incident window ends at ``end``, else at the backend's current time (but at most
  ``MAX_INCIDENT`` after a ``start`` given: the start named is kept); it starts at ``start``,
  else ``INCIDENT_MINUTES`` before its end or, when alerts fire, ``ALERT_LEAD`` before the
  first firing alert became active (so the data before the first symptom is in), whichever is
  earlier; it spans at most ``MAX_INCIDENT``;
- the baseline ends at ``baseline_end``, else where the incident window starts, and starts at
  ``baseline_start``, else ``BASELINE_MINUTES`` before its end; it spans at most
  ``MAX_BASELINE``;
- with the default baseline start, a source (logs, series, spans: each on its own) whose data
  in the baseline covers less than ``THIN_BASELINE`` of it (nothing, or only its last minutes:
  a capture that stopped, a log file that starts late) reaches back to the latest data it has
  before the baseline, at most ``MAX_BASELINE`` before the incident window, and adds the
  ``BASELINE_MINUTES`` of data up to that moment (an earlier capture of a quiet period then
  serves as the baseline); a gap says so, with the stretch taken. The other sources keep the
  default baseline.

The raw data, through the sources' own protocols, so every backend is served the same way:

- logs of every level (INFO included: changes are announced at INFO) of both windows: a source
  that can hand over a window's lines at once (``LogScan``, environment files) does; any other
  (Loki, OpenSearch, log files) is asked with ``query_logs`` window slice by window slice
  (service by service, at most ``MAX_LOG_SERVICES``, when it refuses a query naming no service,
  as Loki does), halving a slice whose lines were cut, at most ``MAX_LOG_CALLS`` calls; what
  stays cut is a gap;
- series and alerts with ``query_metrics`` over both windows (per service when the unscoped call
  returns no series, at most ``MAX_METRIC_SERVICES`` services);
- spans from a source that can hand them over (``SpanScan``); none: the call graph comes from
  the log messages;
- the reach back asks each source the way it is read: a window scan over the reach, or
  ``query_logs`` hour by hour (``BASELINE_MINUTES``), newest first, one line each, until an
  hour has lines, then that hour is read; ``query_metrics`` once over the reach;
- a source that has nothing in the baseline window even so says so as a gap (a log file that
  starts inside the window, a metrics source that keeps less history).

``analysis.incident.analyze`` does the rest; its report becomes the tool's entry arrays
(``tools.analyze_incident``), each signal with the raw items it rests on quoted verbatim.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol, runtime_checkable

from analysis import thresholds
from analysis.incident import analyze
from analysis.report import (
    EvidencePointer,
    IncidentInputs,
    IncidentReport,
    Phrase,
    Signal,
    Suspect,
)
from state.records import AlertEntry, LogEntry, SeriesEntry, SpanEntry
from tools.analyze_incident import (
    AnalysisOutput,
    ChangeRow,
    EdgeRow,
    GapRow,
    PhraseRow,
    PointerRow,
    RootCause,
    SignalRow,
    SuspectRow,
)
from tools.backend import BackendError, EvidenceBackend, MetricsOutput, parse_timestamp

INCIDENT_MINUTES: Final = thresholds.DEFAULT_INCIDENT_MINUTES
BASELINE_MINUTES: Final = thresholds.DEFAULT_BASELINE_MINUTES
ALERT_LEAD: Final = timedelta(minutes=5)
MAX_INCIDENT: Final = timedelta(hours=6)
MAX_BASELINE: Final = timedelta(hours=24)
"""The baseline spans at most this, and reaches back at most this far before the incident."""
THIN_BASELINE: Final = 0.5
"""A source's data must cover at least this share of the default baseline (from its first item
to the baseline's end), else the baseline reaches back for that source's latest earlier data."""
MAX_LOG_CALLS: Final = 120
"""``query_logs`` calls one analysis makes at most on a source that cannot hand over a window."""
MAX_METRIC_SERVICES: Final = 30
MAX_LOG_SERVICES: Final = 30
"""Services read one by one at most, from a log source that refuses a query naming none."""
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
        given = _at(start)
        self.end = _at(end) or now
        if end is None and given is not None and given < self.end - MAX_INCIDENT:
            gaps.append(
                f"the incident window was cut to its first "
                f"{MAX_INCIDENT.total_seconds() / 3600:g} h after {iso(given)}"
            )
            self.end = given + MAX_INCIDENT
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


Scope = dict[str, str]
"""The arguments that scope one ``query_logs`` call (``{}``: every service)."""


def log_scopes(backend: EvidenceBackend, windows: Windows) -> list[Scope]:
    """How a source's lines are read: at once (``[{}]``), or service by service.

    A source that refuses a query naming no service (Loki: it would read every stream) is read
    per service it knows, at most ``MAX_LOG_SERVICES`` of them.
    """
    try:
        backend.query_logs(start=iso(windows.start), end=iso(windows.end), limit=1)
        return [{}]
    except BackendError:
        names = backend.services()[:MAX_LOG_SERVICES]
        if not names:
            raise
        return [{"service": name} for name in names]


class _LogReader:
    """Reads a window's lines with ``query_logs``, slice by slice (see the module docstring)."""

    def __init__(self, backend: EvidenceBackend, scopes: Sequence[Scope]) -> None:
        self.backend = backend
        self.scopes = list(scopes) or [{}]
        self.calls = 0
        self.cut: list[str] = []

    def read(self, start: datetime, end: datetime) -> list[LogEntry]:
        seen: dict[tuple[str, str, str, str, str], LogEntry] = {}
        pending = [(scope, start, end) for scope in self.scopes]
        while pending:
            scope, low, high = pending.pop()
            if self.calls >= MAX_LOG_CALLS:
                self.cut.append(f"{iso(low)}/{iso(high)}")
                continue
            self.calls += 1
            found = self.backend.query_logs(**scope, start=iso(low), end=iso(high), limit=PAGE)
            for entry in found.get("logs", []):
                seen.setdefault(_key(entry), entry)
            total = int(found.get("total", 0) or 0)
            if total > len(found.get("logs", [])) and high - low > timedelta(seconds=2):
                middle = low + (high - low) / 2
                pending += [(scope, low, middle), (scope, middle, high)]
        return sorted(seen.values(), key=lambda entry: str(entry.get("timestamp", "")))

    def any_in(self, start: datetime, end: datetime) -> bool | None:
        """Whether any scope has a line in the window (one line asked each), None when spent."""
        for scope in self.scopes:
            if self.calls >= MAX_LOG_CALLS:
                return None
            self.calls += 1
            probe = self.backend.query_logs(**scope, start=iso(start), end=iso(end), limit=1)
            if probe.get("logs") or int(probe.get("total", 0) or 0) > 0:
                return True
        return False


def _logs(backend: EvidenceBackend, windows: Windows, gaps: list[str]) -> list[LogEntry]:
    scanner = _part(backend, "scan_logs")
    if scanner is not None:
        scanned = scanner(windows.first, windows.end, MAX_LOG_LINES)
        if scanned is not None:
            return list(scanned)
    reader = _LogReader(backend, log_scopes(backend, windows))
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


def _series(
    backend: EvidenceBackend, low: datetime, high: datetime, gaps: list[str]
) -> tuple[list[SeriesEntry], list[AlertEntry]]:
    """Series and alerts of ``low``..``high`` (per service when the unscoped call has none)."""
    window = {"start": iso(low), "end": iso(high)}
    found = backend.query_metrics(**window)
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


def _metrics(
    backend: EvidenceBackend, windows: Windows, first: MetricsOutput | None, gaps: list[str]
) -> tuple[list[SeriesEntry], list[AlertEntry]]:
    try:
        return _series(backend, windows.first, windows.end, gaps)
    except BackendError as exc:
        gaps.append(f"metrics: {exc}")
        return [], list(first.get("alerts", [])) if first else []


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


# --------------------------------------------------------------------------- a thin baseline


def _log_moment(entry: LogEntry) -> datetime | None:
    return _moment(entry.get("timestamp"))


def _span_moment(entry: SpanEntry) -> datetime | None:
    return _moment(entry.get("start"))


def _thin(moments: Iterable[datetime | None], windows: Windows) -> str | None:
    """How much of the baseline a source's data covers, when it is below ``THIN_BASELINE``.

    None when the data covers enough, or when the source has no data at all (nothing to reach
    back for).
    """
    seen = [moment for moment in moments if moment is not None]
    if not seen:
        return None
    inside = [m for m in seen if windows.baseline_start <= m < windows.baseline_end]
    length = windows.baseline_end - windows.baseline_start
    covered = windows.baseline_end - min(inside) if inside else timedelta(0)
    if covered >= length * THIN_BASELINE:
        return None
    if not inside:
        return "no data in"
    return f"data for only the last {covered.total_seconds() / 60:.1f} min of"


def _stretch(moments: Sequence[datetime | None]) -> tuple[datetime, datetime] | None:
    """The first and last moment of the ``BASELINE_MINUTES`` of data up to the latest one."""
    seen = [moment for moment in moments if moment is not None]
    if not seen:
        return None
    last = max(seen)
    floor = last - timedelta(minutes=BASELINE_MINUTES)
    return min(m for m in seen if m >= floor), last


def _earlier_logs(
    backend: EvidenceBackend, windows: Windows, low: datetime, high: datetime, gaps: list[str]
) -> list[LogEntry]:
    """The lines before ``high`` (not before ``low``) among which the latest stretch lies."""
    scanner = _part(backend, "scan_logs")
    if scanner is not None:
        scanned = scanner(low, high, MAX_LOG_LINES)
        if scanned is not None:
            return list(scanned)
    step = timedelta(minutes=BASELINE_MINUTES)
    reader = _LogReader(backend, log_scopes(backend, windows))
    upper = high
    while upper > low:
        lower = max(low, upper - step)
        found = reader.any_in(lower, upper)
        if found is None:
            gaps.append(
                f"logs: looking back for a baseline stopped at {iso(upper)} after "
                f"{MAX_LOG_CALLS} queries"
            )
            return []
        if found:
            reader.calls = 0  # the hour found is read with a budget of its own
            return reader.read(lower, upper)
        upper = lower
    return []


def _earlier_series(
    backend: EvidenceBackend, low: datetime, high: datetime, gaps: list[str]
) -> list[SeriesEntry]:
    """The series of ``low``..``high``, each with only its points in that span."""
    found, _ = _series(backend, low, high, gaps)
    kept: list[SeriesEntry] = []
    for entry in found:
        points = [
            point
            for point in entry.get("points", [])
            if point and (m := _moment(point[0])) is not None and low <= m < high
        ]
        if points:
            kept.append(SeriesEntry(**{**entry, "points": points}))
    return kept


def _series_key(entry: SeriesEntry) -> tuple[str, tuple[tuple[str, str], ...]]:
    labels = entry.get("labels") or {}
    return str(entry.get("metric", "")), tuple(sorted((str(k), str(v)) for k, v in labels.items()))


def _merge_series(
    series: list[SeriesEntry], earlier: Sequence[SeriesEntry], since: datetime
) -> list[SeriesEntry]:
    """``series`` with the points of ``earlier`` from ``since`` on added (each point once)."""
    merged = {_series_key(entry): entry for entry in series}
    for entry in earlier:
        points = [p for p in entry.get("points", []) if (m := _moment(p[0])) and m >= since]
        key = _series_key(entry)
        known = merged.get(key)
        if known is None:
            merged[key] = SeriesEntry(**{**entry, "points": points})
            continue
        times = {point[0] for point in known.get("points", []) if point}
        added = [point for point in points if point[0] not in times]
        merged[key] = SeriesEntry(
            **{**known, "points": sorted([*added, *known.get("points", [])], key=_point_time)}
        )
    return [entry for entry in merged.values() if entry.get("points")]


def _point_time(point: Sequence[object]) -> float:
    moment = _moment(point[0]) if point else None
    return moment.timestamp() if moment is not None else 0.0


def _reached(
    source: str, covered: str, windows: Windows, stretch: tuple[datetime, datetime]
) -> str:
    return (
        f"{source}: {covered} the baseline window "
        f"{iso(windows.baseline_start)}/{iso(windows.baseline_end)}; the baseline also takes "
        f"its latest earlier data, {iso(stretch[0])} to {iso(stretch[1])} (up to "
        f"{BASELINE_MINUTES} min of it, at most {MAX_BASELINE.total_seconds() / 3600:g} h "
        "before the incident window)"
    )


class _Gathered:
    """The raw data of both windows, per source, and where each source's baseline starts."""

    def __init__(
        self, logs: list[LogEntry], series: list[SeriesEntry], spans: list[SpanEntry]
    ) -> None:
        self.logs = logs
        self.series = series
        self.spans = spans
        self.starts: dict[str, datetime] = {}
        """Where a source's baseline starts, when it reached back."""

    def trim(self, default: datetime) -> None:
        """Drop each source's items from before its own baseline start.

        That is the default one unless the source reached back: a source that hands over more
        than asked (an environment file's series) is compared over its own stretch.
        """

        def kept(moment: datetime | None, source: str) -> bool:
            return moment is None or moment >= self.starts.get(source, default)

        self.logs = [e for e in self.logs if kept(_log_moment(e), "logs")]
        self.spans = [s for s in self.spans if kept(_span_moment(s), "traces")]
        trimmed: list[SeriesEntry] = []
        for entry in self.series:
            points = [p for p in entry.get("points", []) if p and kept(_moment(p[0]), "series")]
            if points or not entry.get("points"):
                trimmed.append(SeriesEntry(**{**entry, "points": points}))
        self.series = trimmed

    def reach_back(self, backend: EvidenceBackend, windows: Windows, gaps: list[str]) -> None:
        """Extend the baseline of each source whose data covers too little of it."""
        low, high = windows.baseline_end - MAX_BASELINE, windows.baseline_start
        if high <= low:
            return
        covered = _thin(map(_log_moment, self.logs), windows)
        if covered is not None:
            try:
                earlier = _earlier_logs(backend, windows, low, high, gaps)
            except BackendError as exc:
                gaps.append(f"logs: reaching back for a baseline: {exc}")
                earlier = []
            earlier = [e for e in earlier if (m := _log_moment(e)) is not None and m < high]
            stretch = _stretch([_log_moment(e) for e in earlier])
            if stretch is not None:
                known = {_key(entry) for entry in self.logs}
                taken = [
                    e
                    for e in earlier
                    if (m := _log_moment(e)) is not None
                    and m >= stretch[0]
                    and _key(e) not in known
                ]
                self.logs = sorted(
                    [*taken, *self.logs], key=lambda entry: str(entry.get("timestamp", ""))
                )
                self.starts["logs"] = stretch[0]
                gaps.append(_reached("logs", covered, windows, stretch))
        covered = _thin(map(_span_moment, self.spans), windows)
        scanner = _part(backend, "scan_spans")
        if covered is not None and scanner is not None:
            try:
                found = scanner(low, high, MAX_LOG_LINES) or []
            except BackendError as exc:
                gaps.append(f"traces: reaching back for a baseline: {exc}")
                found = []
            earlier_spans = [s for s in found if (m := _span_moment(s)) is not None and m < high]
            stretch = _stretch([_span_moment(s) for s in earlier_spans])
            if stretch is not None:
                ids = {(s.get("trace_id"), s.get("span_id")) for s in self.spans}
                taken_spans = [
                    s
                    for s in earlier_spans
                    if (m := _span_moment(s)) is not None
                    and m >= stretch[0]
                    and (s.get("trace_id"), s.get("span_id")) not in ids
                ]
                self.spans = [*taken_spans, *self.spans]
                self.starts["traces"] = stretch[0]
                gaps.append(_reached("traces", covered, windows, stretch))
        points = (
            _moment(point[0]) for entry in self.series for point in entry.get("points", []) if point
        )
        covered = _thin(points, windows)
        if covered is not None:
            try:
                earlier_series = _earlier_series(backend, low, high, gaps)
            except BackendError as exc:
                gaps.append(f"series: reaching back for a baseline: {exc}")
                earlier_series = []
            moments = [_moment(point[0]) for entry in earlier_series for point in entry["points"]]
            stretch = _stretch(moments)
            if stretch is not None:
                self.series = _merge_series(self.series, earlier_series, stretch[0])
                self.starts["series"] = stretch[0]
                gaps.append(_reached("series", covered, windows, stretch))


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
    except BackendError as exc:
        gaps.append(f"logs: {exc}")
        logs = []
    series, alerts = _metrics(backend, windows, first, gaps)
    spans = _spans(backend, windows, gaps)
    if baseline_start is None:
        data = _Gathered(logs, series, spans)
        data.reach_back(backend, windows, gaps)
        if data.starts:
            data.trim(windows.baseline_start)
        logs, series, spans = data.logs, data.series, data.spans
        windows.baseline_start = min([windows.baseline_start, *data.starts.values()])
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


def _phrase_row(phrase: Phrase) -> PhraseRow:
    values = {key: list(v) if isinstance(v, list) else v for key, v in phrase["values"].items()}
    return PhraseRow(kind=phrase["kind"], values=values)


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
        mechanism_phrase=_phrase_row(suspect["mechanism_phrase"]),
        onset=suspect["onset"],
        root_cause=root,
        explains=list(suspect["explains"]),
        explained_by=list(suspect["explained_by"]),
        signals=indexes,
    )
    why = suspect.get("why_not_first")
    if why and not root:
        row["why_not_first"] = why
        phrase = suspect.get("why_not_first_phrase")
        if phrase is not None:
            row["why_not_first_phrase"] = _phrase_row(phrase)
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
