"""Incident analysis: the incident window against its baseline, per service, ranked into suspects.

``analyze(inputs)`` is deterministic and bounded (the caps of ``analysis.thresholds``). It reads
logs (every level), metric series, trace spans and alerts of two windows and finds:

- **signals** per service (``analysis.report.Signal``): error and warning surges, message
  templates new in the incident window or whose rate jumped (``analysis.templates``; rates per
  request served when traces give the service's load, else per minute of log coverage), series
  that left their baseline (error ratio, latency, CPU, memory, saturation, throughput) with the
  onset of each, trace latency and error changes, firing alerts;
- **changes** (``analysis.changes``): deploys, restarts, configuration and feature-flag changes,
  migrations, batch jobs, at any log level, placed against the onsets;
- **propagation**: the call graph from traces (``analysis.spans``), else from services named in
  log messages, plus the configured dependencies. An anomalous service that calls an anomalous
  service whose anomaly began no later is explained by it (a symptom); the deepest anomalous
  callee with the earliest onset is the suspect, and a symptom ranks below its cause. Errors at
  the same rate as in the baseline are background noise and raise no signal;
- **suspects**, ranked by score, each with its mechanism, its signals and their evidence
  pointers (raw items quoted verbatim), and the root cause when one stands out.

Every threshold is documented in ``analysis.thresholds``.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Final

from analysis import thresholds
from analysis.changes import change_category
from analysis.report import (
    AnalysisSettings,
    Change,
    Edge,
    EdgeSource,
    EvidencePointer,
    IncidentInputs,
    IncidentReport,
    Phrase,
    Signal,
    SignalKind,
    Suspect,
    Windows,
)
from analysis.spans import call_edges, is_error, percentile, visit_entries
from analysis.templates import TemplateIndex
from analysis.trace_patterns import pattern_signals
from state.display import clip
from state.records import AlertEntry, LogEntry, SeriesEntry, SpanEntry

__all__ = [
    "AnalysisSettings",
    "Change",
    "Edge",
    "EvidencePointer",
    "IncidentInputs",
    "IncidentReport",
    "Phrase",
    "Signal",
    "Suspect",
    "Windows",
    "analyze",
    "default_windows",
    "parse_time",
]

_ERROR_LEVELS: Final = frozenset(
    {"ERROR", "FATAL", "CRITICAL", "PANIC", "SEVERE", "EMERG", "ALERT"}
)
_WARN_LEVELS: Final = frozenset({"WARN", "WARNING"})
_FAILURE_WORDS: Final = re.compile(
    r"exception|error|fail|timeout|timed out|refused|unavailable|denied|invalid|cannot|"
    r"could not|unable|reject|abort|panic|异常|失败|超时|拒绝|错误|不可用",
    re.IGNORECASE,
)
_SIGNAL_WEIGHT: Final[dict[SignalKind, float]] = {
    "error_surge": 1.0,
    "new_template": 0.8,
    "template_jump": 0.7,
    "latency": 0.55,
    "error_ratio": 1.0,
    "cpu": 0.8,
    "memory": 0.6,
    "saturation": 0.8,
    "throughput": 0.25,
    "change": 0.0,
    "trace_errors": 1.0,
    "trace_latency": 0.9,
    # Located already: the deepest departing visit of each request is blamed, where errors and
    # latency also show at every caller up the chain (see analysis.thresholds).
    "call_pattern": 1.5,
    "alert": 0.5,
}
_REPEAT_WEIGHT: Final = 0.3
_CLIENT_SIDE: Final = re.compile(r"client|outbound|upstream|egress", re.IGNORECASE)
_CLIENT_SIDE_FACTOR: Final = 0.3
_SERVICE_LABELS: Final = ("service", "service_name", "app", "application", "job")
_MAX_SERVICES_IN_TEXT: Final = 200
_NAMED_TEXT_CHARS: Final = 2_000


@dataclass(frozen=True)
class _Config:
    """The thresholds of one analysis (defaults from ``analysis.thresholds``)."""

    surge_ratio: float = thresholds.SURGE_RATIO
    request_surge_ratio: float = thresholds.REQUEST_SURGE_RATIO
    min_events: int = thresholds.MIN_EVENTS
    min_new_events: int = thresholds.MIN_NEW_EVENTS
    series_z: float = thresholds.SERIES_Z
    series_min_change: float = thresholds.SERIES_MIN_CHANGE
    latency_ratio: float = thresholds.LATENCY_RATIO
    latency_min_ms: float = thresholds.LATENCY_MIN_MS
    anomaly_min: float = thresholds.ANOMALY_MIN
    onset_tolerance_s: float = thresholds.ONSET_TOLERANCE_S
    symptom_factor: float = thresholds.SYMPTOM_FACTOR
    explain_bonus: float = thresholds.EXPLAIN_BONUS
    change_bonus: float = thresholds.CHANGE_BONUS
    change_lead_s: float = thresholds.CHANGE_LEAD_S
    root_min_score: float = thresholds.ROOT_MIN_SCORE
    root_margin: float = thresholds.ROOT_MARGIN
    max_logs: int = thresholds.MAX_LOGS
    max_spans: int = thresholds.MAX_SPANS
    pattern_surprise: float = thresholds.PATTERN_SURPRISE
    pattern_common_share: float = thresholds.PATTERN_COMMON_SHARE

    @classmethod
    def of(cls, settings: AnalysisSettings | None) -> _Config:
        given = dict(settings or {})
        known = {item.name for item in fields(cls)}
        return cls(**{key: value for key, value in given.items() if key in known})  # type: ignore[arg-type]


# --------------------------------------------------------------------------- time


_FRACTION: Final = re.compile(r"(\.\d{1,6})\d*")


def parse_time(text: object) -> float | None:
    """Unix seconds of an ISO-8601 time (naive times are UTC; nanoseconds are cut), or None."""
    if not isinstance(text, str) or not text.strip():
        return None
    value = _FRACTION.sub(r"\1", text.strip().replace(" ", "T", 1))
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _iso_or_none(seconds: float | None) -> str | None:
    return None if seconds is None else _iso(seconds)


def default_windows(now: datetime) -> tuple[str, str, str, str]:
    """The default windows ending at ``now``: incident, then the baseline before it.

    Returns:
        ``(baseline_start, baseline_end, incident_start, incident_end)`` as ISO-8601 UTC.
    """
    end = now.astimezone(UTC)
    start = end - timedelta(minutes=thresholds.DEFAULT_INCIDENT_MINUTES)
    base = start - timedelta(minutes=thresholds.DEFAULT_BASELINE_MINUTES)
    return (
        _iso(base.timestamp()),
        _iso(start.timestamp()),
        _iso(start.timestamp()),
        _iso(end.timestamp()),
    )


@dataclass(frozen=True)
class _Span:
    """The two windows as Unix seconds: baseline ``[b0, b1)``, incident ``[i0, i1]``."""

    b0: float
    b1: float
    i0: float
    i1: float

    def side(self, moment: float | None) -> str | None:
        if moment is None:
            return None
        if self.i0 <= moment <= self.i1:
            return "i"
        if self.b0 <= moment < self.b1:
            return "b"
        return None


def _newest(inputs: IncidentInputs) -> float | None:
    moments: list[float] = []
    for log in inputs.get("logs", []):
        value = parse_time(log.get("timestamp"))
        if value is not None:
            moments.append(value)
    for span in inputs.get("spans", []):
        value = parse_time(span.get("start"))
        if value is not None:
            moments.append(value)
    for series in inputs.get("series", []):
        moments.extend(float(point[0]) for point in series.get("points", []) if point)
    return max(moments, default=None)


def _windows(inputs: IncidentInputs) -> _Span:
    i1 = parse_time(inputs.get("incident_end"))
    if i1 is None:
        i1 = _newest(inputs) or datetime.now(UTC).timestamp()
    i0 = parse_time(inputs.get("incident_start"))
    if i0 is None:
        i0 = i1 - thresholds.DEFAULT_INCIDENT_MINUTES * 60
    b1 = parse_time(inputs.get("baseline_end"))
    if b1 is None:
        b1 = i0
    b0 = parse_time(inputs.get("baseline_start"))
    if b0 is None:
        b0 = b1 - thresholds.DEFAULT_BASELINE_MINUTES * 60
    return _Span(b0=b0, b1=b1, i0=i0, i1=i1)


# --------------------------------------------------------------------------- helpers


def _ratio_strength(ratio: float, threshold: float) -> float:
    """0.5 at the threshold, 1.0 at eight times it (log scale); 0 below the threshold."""
    if ratio < threshold:
        return 0.0
    return min(1.0, 0.5 + 0.5 * math.log(ratio / threshold) / math.log(8.0))


def _count_factor(count: float, minimum: int) -> float:
    """0.5 at the minimum count, 1.0 at three times it."""
    if count < minimum:
        return 0.0
    return min(1.0, 0.5 + 0.5 * (count - minimum) / max(1, 2 * minimum))


def _log_pointer(log: LogEntry) -> EvidencePointer:
    return EvidencePointer(
        kind="log",
        timestamp=log.get("timestamp", ""),
        service=log.get("service", ""),
        level=log.get("level", ""),
        message=log.get("message", ""),
    )


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{value:.3g}"


def _level_class(level: str) -> str:
    upper = level.upper()
    if upper in _ERROR_LEVELS:
        return "error"
    if upper in _WARN_LEVELS:
        return "warn"
    return "info"


def _clip(text: str, size: int = 120) -> str:
    return clip(text, size)


# --------------------------------------------------------------------------- logs


@dataclass
class _TemplateStats:
    service: str
    template_id: int
    level: str = "info"
    baseline: int = 0
    incident: int = 0
    first_incident: float | None = None
    samples: list[LogEntry] = field(default_factory=list)
    naming: int = 0
    """Incident lines (warnings and errors) that name another service."""


@dataclass
class _LogFacts:
    """What the logs gave: signals, template texts, coverage, the timed entries."""

    signals: list[Signal]
    templates: TemplateIndex
    template_of: list[int]
    stats: dict[tuple[str, int], _TemplateStats]
    coverage_b: float
    coverage_i: float


_LEVEL_RANK: Final = {"info": 0, "warn": 1, "error": 2}
_COVERAGE_GAP_S: Final = 60.0
"""Log coverage: the time between consecutive lines counts when it is at most this long (a
longer silence is taken as a hole in the capture, not as time observed)."""


def _coverage_minutes(moments: list[float]) -> float:
    """Minutes a window's log lines cover.

    The sum of the gaps between consecutive lines that are at most ``_COVERAGE_GAP_S`` long, and
    at least one second when there is any line.
    """
    if not moments:
        return 0.0
    ordered = sorted(moments)
    covered = sum(
        gap for a, b in zip(ordered, ordered[1:], strict=False) if (gap := b - a) <= _COVERAGE_GAP_S
    )
    return max(covered, 1.0) / 60.0


@dataclass(frozen=True)
class _Traffic:
    """Requests a service served in each window (its entry spans), when traces give them."""

    baseline: int
    incident: int


def _traffic(spans: Sequence[tuple[float, SpanEntry]], window: _Span) -> dict[str, _Traffic]:
    """Per service with at least ``MIN_SPANS`` served requests in each window, the counts.

    A served request is a span whose parent is absent or belongs to another service.
    """
    services = {span.get("span_id", ""): span.get("service", "") for _, span in spans}
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for moment, span in spans:
        side = window.side(moment)
        service = span.get("service", "")
        if side is None or services.get(span.get("parent_span_id", "")) == service:
            continue
        counts[(service, side)] += 1
    found: dict[str, _Traffic] = {}
    for (service, side), count in counts.items():
        before = counts.get((service, "b"), 0)
        if side == "i" and count >= thresholds.MIN_SPANS and before >= thresholds.MIN_SPANS:
            found[service] = _Traffic(baseline=before, incident=count)
    return found


@dataclass(frozen=True)
class _Rise:
    """A count in the incident window against the baseline: per covered minute, or per request."""

    rate_b: float
    rate_i: float
    ratio: float
    unit: str
    scope: str
    excess: float
    """Events beyond what the baseline's rate predicts for the incident window."""
    traffic: _Traffic | None = None
    """The requests served, when the rates are per request."""

    def threshold(self, cfg: _Config) -> float:
        """The ratio that makes a surge: lower per request (the load no longer moves it)."""
        return cfg.request_surge_ratio if self.unit == " per request" else cfg.surge_ratio

    def values(self) -> dict[str, str | list[str]]:
        """The rates as a phrase's values.

        ``rate_before``, ``rate_after``, ``per`` (``minute`` or ``request``) and, per request,
        ``requests_before`` and ``requests_after``.
        """
        found: dict[str, str | list[str]] = {
            "rate_before": _fmt(self.rate_b),
            "rate_after": _fmt(self.rate_i),
            "per": "request" if self.traffic is not None else "minute",
        }
        if self.traffic is not None:
            found["requests_before"] = str(self.traffic.baseline)
            found["requests_after"] = str(self.traffic.incident)
        return found


def _rise(before: int, during: int, cov_b: float, cov_i: float, traffic: _Traffic | None) -> _Rise:
    """How much a count rose over its baseline.

    With the service's served requests known in both windows the count is taken per request:
    lines that track the traffic (the same share of requests in both windows) did not rise,
    however the load moved. Otherwise per covered minute. Either way one event in the baseline
    is the floor, so a count absent from a short baseline does not rise without bound.
    """
    if traffic is not None:
        rate_b = before / traffic.baseline
        rate_i = during / traffic.incident
        ratio = rate_i / max(rate_b, 1.0 / traffic.baseline)
        scope = f", {traffic.baseline} -> {traffic.incident} requests served"
        excess = during - max(before, 1) * traffic.incident / traffic.baseline
        return _Rise(rate_b, rate_i, ratio, " per request", scope, excess, traffic)
    rate_b = before / cov_b
    rate_i = during / cov_i
    excess = during - max(before, 1) * cov_i / cov_b
    return _Rise(rate_b, rate_i, rate_i / max(rate_b, 1.0 / cov_b), "/min", "", excess)


def _service_pattern(services: set[str]) -> re.Pattern[str] | None:
    """A pattern matching any of ``services`` as a whole word (longest names first)."""
    names = sorted((name for name in services if name), key=len, reverse=True)
    if not names:
        return None
    return re.compile(
        r"(?<![\w-])("
        + "|".join(re.escape(name) for name in names[:_MAX_SERVICES_IN_TEXT])
        + r")(?![\w-])"
    )


def _names_another(log: LogEntry, names: re.Pattern[str] | None) -> bool:
    """Whether a line names a service other than the one that wrote it."""
    if names is None:
        return False
    writer = log.get("service", "")
    message = log.get("message", "")[:_NAMED_TEXT_CHARS]
    return any(match != writer for match in names.findall(message))


def _own_share(naming: int, total: int) -> float:
    """The weight on their writer of failure lines, ``naming`` of ``total`` naming another service.

    Such a line reports a call to that service failing as the writer saw it (the dependency
    unreachable, not found, answering errors), so it weighs ``NAMED_SERVICE_FACTOR`` on the
    writer.
    """
    if total <= 0 or naming <= 0:
        return 1.0
    return 1.0 - (1.0 - thresholds.NAMED_SERVICE_FACTOR) * min(1.0, naming / total)


def _log_signals(
    logs: Sequence[tuple[float, LogEntry]],
    window: _Span,
    cfg: _Config,
    gaps: list[str],
    traffic: dict[str, _Traffic],
    names: re.Pattern[str] | None,
) -> _LogFacts:
    index = TemplateIndex()
    template_of: list[int] = []
    moments_b: list[float] = []
    moments_i: list[float] = []
    stats: dict[tuple[str, int], _TemplateStats] = {}
    levels: dict[str, dict[str, list[int]]] = defaultdict(lambda: {"error": [0, 0], "warn": [0, 0]})
    level_samples: dict[tuple[str, str], list[LogEntry]] = defaultdict(list)
    level_onset: dict[tuple[str, str], float] = {}
    naming: dict[tuple[str, str], int] = defaultdict(int)
    for moment, log in logs:
        template_id = index.add(log.get("message", ""))
        template_of.append(template_id)
        side = window.side(moment)
        if side is None:
            continue
        (moments_i if side == "i" else moments_b).append(moment)
        service = log.get("service", "") or "unknown"
        level = _level_class(log.get("level", ""))
        entry = stats.get((service, template_id))
        if entry is None:
            entry = stats[(service, template_id)] = _TemplateStats(service, template_id)
        if _LEVEL_RANK[level] > _LEVEL_RANK[entry.level]:
            entry.level = level
        if side == "b":
            entry.baseline += 1
        else:
            entry.incident += 1
            if entry.first_incident is None:
                entry.first_incident = moment
            if len(entry.samples) < thresholds.MAX_EVIDENCE:
                entry.samples.append(log)
        if level != "info":
            levels[service][level][0 if side == "b" else 1] += 1
            if side == "i":
                if _names_another(log, names):
                    naming[(service, level)] += 1
                    entry.naming += 1
                if len(level_samples[(service, level)]) < thresholds.MAX_EVIDENCE:
                    level_samples[(service, level)].append(log)
                level_onset.setdefault((service, level), moment)
    cov_b = _coverage_minutes(moments_b)
    cov_i = _coverage_minutes(moments_i)
    signals: list[Signal] = []
    if logs and cov_i and not cov_b:
        gaps.append("logs: no log line in the baseline window, so log rates have no baseline")
    if not cov_i:
        return _LogFacts(signals, index, template_of, stats, cov_b, cov_i)
    has_baseline = cov_b > 0
    for service in sorted(levels):
        for level in ("error", "warn"):
            before, during = levels[service][level]
            if during < cfg.min_events:
                continue
            if has_baseline:
                rise = _rise(before, during, cov_b, cov_i, traffic.get(service))
                strength = _ratio_strength(rise.ratio, rise.threshold(cfg))
            else:
                rise = _Rise(0.0, during / cov_i, 0.0, "/min", "", float(during))
                strength = 0.25
            strength *= (
                _count_factor(rise.excess, cfg.min_events)
                * (1.0 if level == "error" else 0.6)
                * _own_share(naming[(service, level)], during)
            )
            if strength <= 0:
                continue
            word = "error" if level == "error" else "warning"
            values = {
                "level": word,
                **rise.values(),
                "lines_before": str(before),
                "lines_after": str(during),
            }
            signals.append(
                Signal(
                    kind="error_surge",
                    service=service,
                    detail=f"{word} rate {_fmt(rise.rate_b)}{rise.unit} -> {_fmt(rise.rate_i)}"
                    f"{rise.unit} ({before} -> {during} lines{rise.scope})",
                    phrase=Phrase(kind="error_surge", values=values),
                    baseline=round(rise.rate_b, 4) if has_baseline else None,
                    incident=round(rise.rate_i, 4),
                    onset=_iso_or_none(level_onset.get((service, level))),
                    strength=round(strength, 4),
                    evidence=[_log_pointer(log) for log in level_samples[(service, level)]],
                )
            )
    if has_baseline:
        signals.extend(_template_signals(stats, index, cov_b, cov_i, cfg, traffic))
    return _LogFacts(signals, index, template_of, stats, cov_b, cov_i)


def _template_signals(
    stats: dict[tuple[str, int], _TemplateStats],
    index: TemplateIndex,
    cov_b: float,
    cov_i: float,
    cfg: _Config,
    traffic: dict[str, _Traffic],
) -> list[Signal]:
    per_service: dict[str, list[Signal]] = defaultdict(list)
    for (service, template_id), entry in stats.items():
        if entry.incident == 0:
            continue
        text = index.template(template_id)
        failure = entry.level != "info" or bool(_FAILURE_WORDS.search(text))
        level_weight = {"error": 1.0, "warn": 0.7}.get(entry.level, 0.5 if failure else 0.15)
        rise = _rise(entry.baseline, entry.incident, cov_b, cov_i, traffic.get(service))
        if entry.baseline == 0:
            if entry.incident < cfg.min_new_events:
                continue
            strength = (
                level_weight
                * _count_factor(entry.incident, cfg.min_new_events)
                * _own_share(entry.naming, entry.incident)
            )
            kind: SignalKind = "new_template"
            detail = f"new {entry.level.upper()} template ({entry.incident} lines): {_clip(text)}"
            phrase = Phrase(
                kind="new_template",
                values={
                    "level": entry.level.upper(),
                    "lines": str(entry.incident),
                    "template": _clip(text),
                },
            )
        else:
            if entry.incident < cfg.min_events:
                continue
            strength = (
                level_weight
                * _ratio_strength(rise.ratio, rise.threshold(cfg))
                * _count_factor(rise.excess, cfg.min_events)
                * _own_share(entry.naming, entry.incident)
            )
            kind = "template_jump"
            detail = (
                f"template rate {_fmt(rise.rate_b)}{rise.unit} -> {_fmt(rise.rate_i)}{rise.unit}"
                f" ({entry.level.upper()}{rise.scope}): {_clip(text)}"
            )
            phrase = Phrase(
                kind="template_jump",
                values={**rise.values(), "level": entry.level.upper(), "template": _clip(text)},
            )
        if strength <= 0:
            continue
        per_service[service].append(
            Signal(
                kind=kind,
                service=service,
                detail=detail,
                phrase=phrase,
                baseline=round(rise.rate_b, 4),
                incident=round(rise.rate_i, 4),
                onset=_iso_or_none(entry.first_incident),
                strength=round(strength, 4),
                evidence=[_log_pointer(log) for log in entry.samples],
            )
        )
    signals: list[Signal] = []
    for service in sorted(per_service):
        ranked = sorted(per_service[service], key=lambda s: (-s["strength"], s["detail"]))
        signals.extend(ranked[: thresholds.MAX_SIGNALS])
    return signals


# --------------------------------------------------------------------------- series

_SERIES_KINDS: Final[tuple[tuple[SignalKind, str, re.Pattern[str]], ...]] = (
    ("error_ratio", "down", re.compile(r"success|availability|goodput|ok_ratio", re.IGNORECASE)),
    ("error_ratio", "up", re.compile(r"error|5xx|fail|exception", re.IGNORECASE)),
    ("cpu", "up", re.compile(r"cpu", re.IGNORECASE)),
    ("memory", "up", re.compile(r"mem|heap|rss|oom", re.IGNORECASE)),
    ("latency", "up", re.compile(r"latency|duration|response_time|_ms\b|p9\d|p50", re.IGNORECASE)),
    (
        "saturation",
        "up",
        re.compile(
            r"pool|queue|saturat|utili[sz]|lock|wait|connections|threads|disk|inode|lag|"
            r"pending|backlog",
            re.IGNORECASE,
        ),
    ),
    (
        "throughput",
        "both",
        re.compile(
            r"rps|qps|request|throughput|workload|ops|rate|network|bytes|syscall", re.IGNORECASE
        ),
    ),
)


def _series_kind(metric: str) -> tuple[SignalKind, str] | None:
    for kind, direction, pattern in _SERIES_KINDS:
        if pattern.search(metric):
            return kind, direction
    return None


def _series_service(series: SeriesEntry) -> str:
    labels = series.get("labels") or {}
    for key in _SERVICE_LABELS:
        value = labels.get(key)
        if value:
            return value
    return ""


def _series_signals(
    series_list: Sequence[SeriesEntry],
    window: _Span,
    cfg: _Config,
    gaps: list[str],
    traced: set[str],
) -> list[Signal]:
    """Series signals, one per deviating series.

    Latency series of services whose spans are compared are left out: the spans measure the same
    latency request by request.
    """
    signals: list[Signal] = []
    thin: list[str] = []
    for series in series_list[: thresholds.MAX_SERIES]:
        metric = series.get("metric", "")
        service = _series_service(series)
        classified = _series_kind(metric)
        if not service or classified is None:
            continue
        kind, direction = classified
        if kind == "latency" and service in traced:
            continue
        points = [
            (float(point[0]), float(point[1]))
            for point in (series.get("points") or [])[-thresholds.MAX_POINTS :]
            if len(point) >= 2 and math.isfinite(float(point[1]))
        ]
        base = [value for moment, value in points if window.side(moment) == "b"]
        during = [(moment, value) for moment, value in points if window.side(moment) == "i"]
        if not during:
            continue
        if len(base) < thresholds.SERIES_MIN_BASELINE_POINTS:
            thin.append(f"{metric}{{{service}}}")
            continue
        signal = _series_signal(series, service, kind, direction, base, during, points, cfg)
        if signal is not None and kind == "latency" and _CLIENT_SIDE.search(metric):
            # The latency of the calls a service makes measures its dependencies first.
            signal["strength"] = round(signal["strength"] * _CLIENT_SIDE_FACTOR, 4)
            signal["detail"] += " (calls it makes)"
        if signal is not None:
            signals.append(signal)
    if thin:
        shown = ", ".join(sorted(thin)[:5]) + (" ..." if len(thin) > 5 else "")
        gaps.append(
            f"series: {len(thin)} series have fewer than {thresholds.SERIES_MIN_BASELINE_POINTS}"
            f" baseline points and were not compared ({shown})"
        )
    return signals


def _absolute_floor(kind: SignalKind, series: SeriesEntry, median: float, peak: float) -> float:
    """The smallest change of a series worth a signal, from its kind and unit.

    Ratios (error, CPU, memory) by ``ERROR_RATIO_MIN_DELTA`` / ``USAGE_MIN_DELTA`` of a fraction
    or of a percentage (a value above 1, or a name or unit saying percent); latencies by
    ``LATENCY_MIN_MS`` in seconds or milliseconds (from the name or unit); others by nothing.
    """
    name = series.get("metric", "").lower()
    unit = (series.get("unit") or "").lower()
    percent = "percent" in name or unit in {"%", "percent"} or max(abs(median), abs(peak)) > 1.0
    if kind == "error_ratio":
        return thresholds.ERROR_RATIO_MIN_DELTA * (100.0 if percent else 1.0)
    if kind in ("cpu", "memory"):
        if "core" in name or "bytes" in name or unit in {"bytes", "b", "cores"}:
            return 0.0
        return thresholds.USAGE_MIN_DELTA * (100.0 if percent else 1.0)
    if kind == "latency":
        if unit in {"s", "seconds"} or "second" in name or name.endswith("_s"):
            return thresholds.LATENCY_MIN_MS / 1000.0
        if unit in {"ms", "milliseconds"} or "_ms" in name or "millisecond" in name:
            return thresholds.LATENCY_MIN_MS
    return 0.0


def _series_signal(
    series: SeriesEntry,
    service: str,
    kind: SignalKind,
    direction: str,
    base: list[float],
    during: list[tuple[float, float]],
    points: list[tuple[float, float]],
    cfg: _Config,
) -> Signal | None:
    ordered = sorted(base)
    median = (
        ordered[len(ordered) // 2]
        if len(ordered) % 2
        else ((ordered[len(ordered) // 2 - 1] + ordered[len(ordered) // 2]) / 2)
    )
    deviations = sorted(abs(value - median) for value in base)
    mad = deviations[len(deviations) // 2]
    scale = max(1.4826 * mad, thresholds.SERIES_REL_FLOOR * abs(median), 1e-9)
    signs = {"up": (1.0,), "down": (-1.0,), "both": (1.0, -1.0)}[direction]
    best: tuple[float, float, float, float] | None = None  # z, sign, peak, onset
    for sign in signs:
        zs = [(sign * (value - median) / scale, moment, value) for moment, value in during]
        peak_z, _, peak_value = max(zs, key=lambda item: (item[0], -item[1]))
        change = sign * (peak_value - median) / max(abs(median), 1e-9)
        if peak_z < cfg.series_z or change < cfg.series_min_change:
            continue
        floor = _absolute_floor(kind, series, median, peak_value)
        if abs(peak_value - median) < floor:
            continue
        if kind == "throughput" and median <= 0:
            continue
        onset = min(moment for z, moment, _ in zs if z >= cfg.series_z)
        strength = min(
            _ratio_strength(peak_z, cfg.series_z),
            _ratio_strength(1.0 + change, 1.0 + cfg.series_min_change),
        )
        if best is None or strength > best[0]:
            best = (strength, sign, peak_value, onset)
    if best is None:
        return None
    strength, sign, peak_value, onset = best
    if kind == "throughput" and sign < 0:
        detail_kind = "drop"
    else:
        detail_kind = "rise"
    metric = series.get("metric", "")
    shown = [[moment, value] for moment, value in points if moment >= onset - 180][:12]
    values: dict[str, str | list[str]] = {
        "metric": metric,
        "baseline": _fmt(median),
        "peak": _fmt(peak_value),
        "direction": detail_kind,
    }
    return Signal(
        kind=kind,
        service=service,
        detail=f"{metric} {_fmt(median)} -> {_fmt(peak_value)} ({detail_kind})",
        phrase=Phrase(kind="series", values=values),
        baseline=round(median, 6),
        incident=round(peak_value, 6),
        onset=_iso(onset),
        strength=round(strength, 4),
        evidence=[
            EvidencePointer(
                kind="series",
                metric=metric,
                labels=dict(series.get("labels") or {}),
                points=shown,
            )
        ],
    )


# --------------------------------------------------------------------------- spans


def _span_pointer(span: SpanEntry) -> EvidencePointer:
    return EvidencePointer(
        kind="span",
        trace_id=span.get("trace_id", ""),
        span_id=span.get("span_id", ""),
        service=span.get("service", ""),
        operation=span.get("operation", ""),
        duration_ms=float(span.get("duration_ms", 0.0)),
        start=span.get("start", ""),
    )


@dataclass(frozen=True)
class _Served:
    """A span a service served: its latency, its own time (calls out excluded), its status."""

    total: float
    own: float
    error: bool
    span: SpanEntry

    def value(self, own_time: bool) -> float:
        return self.own if own_time else self.total


def _span_signals(
    spans: Sequence[tuple[float, SpanEntry]], window: _Span, cfg: _Config, gaps: list[str]
) -> list[Signal]:
    """Per service: latency of the spans it served (and of its own time), and error ratio."""
    by_id = {span.get("span_id", ""): span for _, span in spans}
    entry = visit_entries(spans)

    # A service's own time excludes its calls out as the caller timed them (its client span,
    # when the call has one: network and queues are not the service's own work).
    child_count: dict[str, int] = defaultdict(int)
    for _, span in spans:
        child_count[span.get("parent_span_id", "")] += 1
    outgoing: dict[str, float] = defaultdict(float)
    for _, span in spans:
        parent = by_id.get(span.get("parent_span_id", ""))
        if parent is not None and parent.get("service") != span.get("service"):
            parent_id = parent.get("span_id", "")
            root = entry(parent)
            if root != parent_id and child_count[parent_id] == 1:
                outgoing[root] += float(parent.get("duration_ms", 0.0))
            else:
                outgoing[root] += float(span.get("duration_ms", 0.0))
    served: dict[tuple[str, str], list[_Served]] = defaultdict(list)
    for moment, span in spans:
        side = window.side(moment)
        if side is None:
            continue
        span_id = span.get("span_id", "")
        if entry(span) != span_id:
            continue
        total = float(span.get("duration_ms", 0.0))
        own = max(0.0, total - outgoing.get(span_id, 0.0))
        served[(span.get("service", ""), side)].append(_Served(total, own, is_error(span), span))
    signals: list[Signal] = []
    services = sorted({service for service, _ in served})
    for service in services:
        base = served.get((service, "b"), [])
        during = served.get((service, "i"), [])
        if len(during) < thresholds.MIN_SPANS:
            continue
        if len(base) < thresholds.MIN_SPANS:
            continue
        for own_time, label in ((True, "own time"), (False, "served latency")):
            measure = "own" if own_time else "served"
            p_b = percentile([row.value(own_time) for row in base], 0.9)
            p_i = percentile([row.value(own_time) for row in during], 0.9)
            if p_i - p_b < cfg.latency_min_ms:
                continue
            ratio = p_i / max(p_b, 1.0)
            strength = _ratio_strength(ratio, cfg.latency_ratio) * (1.0 if own_time else 0.6)
            if strength <= 0:
                continue
            slow = sorted(during, key=lambda row: -row.value(own_time))[: thresholds.MAX_EVIDENCE]
            limit = p_b + cfg.latency_min_ms
            late = [row.span.get("start", "") for row in during if row.value(own_time) > limit]
            onset = min((parse_time(moment) or window.i0 for moment in late), default=None)
            signals.append(
                Signal(
                    kind="trace_latency",
                    service=service,
                    detail=f"{label} p90 {_fmt(p_b)} ms -> {_fmt(p_i)} ms",
                    phrase=Phrase(
                        kind="trace_latency",
                        values={"measure": measure, "baseline": _fmt(p_b), "incident": _fmt(p_i)},
                    ),
                    baseline=round(p_b, 3),
                    incident=round(p_i, 3),
                    onset=_iso_or_none(onset),
                    strength=round(strength, 4),
                    evidence=[_span_pointer(row.span) for row in slow],
                )
            )
            break
        err_b = sum(1 for row in base if row.error) / len(base)
        err_i = sum(1 for row in during if row.error) / len(during)
        if err_i - err_b >= thresholds.ERROR_RATIO_DELTA:
            failed = [row.span for row in during if row.error]
            signals.append(
                Signal(
                    kind="trace_errors",
                    service=service,
                    detail=f"span error ratio {err_b:.0%} -> {err_i:.0%}",
                    phrase=Phrase(
                        kind="trace_errors",
                        values={"baseline": f"{err_b:.0%}", "incident": f"{err_i:.0%}"},
                    ),
                    baseline=round(err_b, 4),
                    incident=round(err_i, 4),
                    onset=failed[0].get("start") if failed else None,
                    strength=round(min(1.0, 0.5 + (err_i - err_b)), 4),
                    evidence=[_span_pointer(span) for span in failed[: thresholds.MAX_EVIDENCE]],
                )
            )
    if spans and not any(side == "b" for _, side in served):
        gaps.append("traces: no span in the baseline window, so trace latency has no baseline")
    signals.extend(_call_gap_signals(spans, by_id, window, cfg))
    return signals


def _traced_services(spans: Sequence[tuple[float, SpanEntry]], window: _Span) -> set[str]:
    """Services with at least ``MIN_SPANS`` spans in each window."""
    counts: dict[tuple[str, str | None], int] = defaultdict(int)
    for moment, span in spans:
        counts[(span.get("service", ""), window.side(moment))] += 1
    return {
        service
        for (service, side), count in counts.items()
        if side == "i"
        and count >= thresholds.MIN_SPANS
        and counts.get((service, "b"), 0) >= thresholds.MIN_SPANS
    }


def _attribution(
    service: str,
    edges: list[tuple[str, str, float, float, SpanEntry, SpanEntry]],
    share: dict[str, dict[str, float]],
) -> float:
    """How surely slow calls belong to ``service`` rather than to the other end of them.

    Several slow edges that share it: surely (1.0). A single slow edge: 0.6 when the other end
    has no other call of the same direction that is fast (either end may be slow), rising to 1.0
    as they all are (a caller whose other calls out are fast, a callee others call fast).
    """
    if len(edges) > 1:
        return 1.0
    caller, callee = edges[0][0], edges[0][1]
    other_share = (
        share["callee"].get(callee, 1.0) if caller == service else share["caller"].get(caller, 1.0)
    )
    return 0.6 + 0.4 * (1.0 - other_share)


def _before_early_onset(
    before: list[tuple[float, SpanEntry, SpanEntry, float]],
    incident_median: float,
    window: _Span,
    cfg: _Config,
) -> tuple[list[float], list[float]]:
    """The baseline times of an edge, without a run of calls that already look like the incident.

    A stated incident start is often late (a person notices, an alert waits its ``for``): the
    calls of the last ``EARLY_ONSET_S`` of the baseline that all took at least the incident's
    median divided by ``LATENCY_RATIO`` belong to the incident, when at least
    ``EARLY_ONSET_MIN_USUAL`` calls before them remain to say what usual was.

    Returns:
        The baseline's times to compare with, and the moments of the calls moved out of it.
    """
    ordered = sorted(before, key=lambda row: row[3])
    like = incident_median / cfg.latency_ratio
    cut = len(ordered)
    while (
        cut > 0
        and ordered[cut - 1][0] >= like
        and ordered[cut - 1][3] >= window.i0 - thresholds.EARLY_ONSET_S
    ):
        cut -= 1
    if cut == len(ordered) or cut < thresholds.EARLY_ONSET_MIN_USUAL:
        return [row[0] for row in ordered], []
    return [row[0] for row in ordered[:cut]], [row[3] for row in ordered[cut:]]


def _call_gap_signals(
    spans: Sequence[tuple[float, SpanEntry]],
    by_id: dict[str, SpanEntry],
    window: _Span,
    cfg: _Config,
) -> list[Signal]:
    """The time a call spends between two services, per edge, attributed to a shared service.

    For a caller span whose only child is the callee's span, the call's time outside the callee
    (the network, queues, the caller's own client) is the caller's duration minus the callee's.
    An edge whose median of that time rose ``LATENCY_RATIO`` times and by ``LATENCY_MIN_MS`` is
    slow. A slow network or a starved process at one service slows every call into and out of
    it, so a slow edge goes to the end that touches more slow edges; between equals, to the end
    whose calls of the same direction are slower: the caller's other calls out, the callee's
    other calls in (a caller whose other calls are fast is not what slows this one). A single
    slow edge counts less when its other end has no fast call to tell the two apart
    (``_attribution``).
    """
    children: dict[str, int] = defaultdict(int)
    for _, span in spans:
        children[span.get("parent_span_id", "")] += 1
    gaps_by_edge: dict[tuple[str, str, str], list[tuple[float, SpanEntry, SpanEntry, float]]] = (
        defaultdict(list)
    )
    for moment, span in spans:
        parent = by_id.get(span.get("parent_span_id", ""))
        if parent is None or parent.get("service") == span.get("service"):
            continue
        if children[parent.get("span_id", "")] != 1:
            continue
        side = window.side(moment)
        if side is None:
            continue
        gap = float(parent.get("duration_ms", 0.0)) - float(span.get("duration_ms", 0.0))
        key = (parent.get("service", ""), span.get("service", ""), side)
        gaps_by_edge[key].append((max(0.0, gap), parent, span, moment))
    measured: dict[str, int] = defaultdict(int)
    calls_out: dict[str, int] = defaultdict(int)
    calls_in: dict[str, int] = defaultdict(int)
    first_slow: dict[tuple[str, str], float] = {}
    slow_edges: list[tuple[str, str, float, float, SpanEntry, SpanEntry]] = []
    for (caller, callee, side), rows in sorted(gaps_by_edge.items()):
        if side != "i" or len(rows) < thresholds.MIN_SPANS:
            continue
        before = gaps_by_edge.get((caller, callee, "b"), [])
        if len(before) < thresholds.MIN_SPANS:
            continue
        p_i = percentile([row[0] for row in rows], 0.5)
        usual, early = _before_early_onset(before, p_i, window, cfg)
        p_b = percentile(usual, 0.5)
        measured[caller] += 1
        measured[callee] += 1
        calls_out[caller] += 1
        calls_in[callee] += 1
        if p_i - p_b < cfg.latency_min_ms or p_i / max(p_b, 1.0) < cfg.latency_ratio:
            continue
        sample = max(rows, key=lambda row: row[0])
        late = [row[3] for row in rows if row[0] > p_b + cfg.latency_min_ms]
        first_slow[(caller, callee)] = min([*late, *early], default=window.i0)
        slow_edges.append((caller, callee, p_b, p_i, sample[1], sample[2]))
    touching: dict[str, int] = defaultdict(int)
    slow_out: dict[str, int] = defaultdict(int)
    slow_in: dict[str, int] = defaultdict(int)
    for caller, callee, *_ in slow_edges:
        touching[caller] += 1
        touching[callee] += 1
        slow_out[caller] += 1
        slow_in[callee] += 1
    # The share of a caller's calls out that are slow, and of a callee's calls in: a caller
    # whose other calls are fast is not what slows this one, nor a callee served fast by others.
    share = {
        "caller": {name: slow_out[name] / max(1, calls_out[name]) for name in calls_out},
        "callee": {name: slow_in[name] / max(1, calls_in[name]) for name in calls_in},
    }

    def weight(service: str, role: str) -> float:
        return touching[service] + share[role].get(service, 0.0)

    slow: dict[str, list[tuple[str, str, float, float, SpanEntry, SpanEntry]]] = defaultdict(list)
    for edge in slow_edges:
        caller, callee = edge[0], edge[1]
        slow[caller if weight(caller, "caller") > weight(callee, "callee") else callee].append(edge)
    signals: list[Signal] = []
    for service in sorted(slow):
        edges = slow[service]
        worst = max(edges, key=lambda edge: edge[3] / max(edge[2], 1.0))
        strength = _attribution(service, edges, share) * _ratio_strength(
            worst[3] / max(worst[2], 1.0), cfg.latency_ratio
        )
        if strength <= 0:
            continue
        pairs = [f"{caller} -> {callee}" for caller, callee, *_ in edges[:4]]
        names = ", ".join(pairs)
        onset = min(first_slow[(edge[0], edge[1])] for edge in edges)
        signals.append(
            Signal(
                kind="trace_latency",
                service=service,
                detail=(
                    f"time between services on calls in and out of it: p50 {_fmt(worst[2])} ms"
                    f" -> {_fmt(worst[3])} ms on {len(edges)} of {measured[service]}"
                    f" edges ({names})"
                ),
                phrase=Phrase(
                    kind="call_gap",
                    values={
                        "baseline": _fmt(worst[2]),
                        "incident": _fmt(worst[3]),
                        "slow": str(len(edges)),
                        "measured": str(measured[service]),
                        "edges": pairs,
                    },
                ),
                baseline=round(worst[2], 3),
                incident=round(worst[3], 3),
                onset=_iso(onset),
                strength=round(strength, 4),
                evidence=[
                    EvidencePointer(kind="edge", caller=edge[0], callee=edge[1])
                    for edge in edges[: thresholds.MAX_EVIDENCE]
                ]
                + [_span_pointer(worst[4]), _span_pointer(worst[5])],
            )
        )
    return signals


# --------------------------------------------------------------------------- alerts and changes


def _alert_signals(alerts: Sequence[AlertEntry], window: _Span) -> list[Signal]:
    signals: list[Signal] = []
    for alert in alerts[: thresholds.MAX_ALERTS]:
        if alert.get("state", "") != "firing" or not alert.get("service"):
            continue
        active = parse_time(alert.get("active_at"))
        if active is not None and active > window.i1:
            continue
        signals.append(
            Signal(
                kind="alert",
                service=alert.get("service", ""),
                detail=f"alert {alert.get('alert_name', '')} firing",
                phrase=Phrase(kind="alert", values={"name": alert.get("alert_name", "")}),
                baseline=None,
                incident=None,
                onset=alert.get("active_at") or None,
                strength=0.6,
                evidence=[
                    EvidencePointer(
                        kind="alert",
                        alert_name=alert.get("alert_name", ""),
                        service=alert.get("service", ""),
                        active_at=alert.get("active_at", ""),
                    )
                ],
            )
        )
    return signals


_MAX_CHANGE_REPEATS: Final = 3
"""A change is a rare line: its template appears at most this often in the data read."""
_CHANGE_TEXT_CHARS: Final = 500


def _changes(
    logs: Sequence[tuple[float, LogEntry]], facts: _LogFacts, window: _Span, cfg: _Config
) -> list[Change]:
    totals: dict[int, int] = defaultdict(int)
    for template_id in facts.template_of:
        totals[template_id] += 1
    found: list[Change] = []
    for (moment, log), template_id in zip(logs, facts.template_of, strict=True):
        if not window.i0 - cfg.change_lead_s <= moment <= window.i1:
            continue
        if totals[template_id] > _MAX_CHANGE_REPEATS:
            continue
        category = change_category(log.get("message", "")[:_CHANGE_TEXT_CHARS])
        if category is None:
            continue
        found.append(
            Change(
                time=log.get("timestamp", ""),
                service=log.get("service", ""),
                text=log.get("message", ""),
                category=category,
                evidence=_log_pointer(log),
            )
        )
        if len(found) >= thresholds.MAX_CHANGES:
            break
    return found


# --------------------------------------------------------------------------- call graph


def _edges(
    spans: Sequence[SpanEntry],
    logs: Sequence[tuple[float, LogEntry]],
    dependencies: Iterable[Sequence[str]],
    services: set[str],
) -> list[Edge]:
    edges: dict[tuple[str, str], Edge] = {}
    for row in call_edges(spans):
        edges[(row["caller"], row["callee"])] = Edge(
            caller=row["caller"], callee=row["callee"], source="traces", calls=row["count"]
        )
    pattern = _service_pattern(services)
    if not edges and pattern is not None:
        counts: dict[tuple[str, str], int] = defaultdict(int)
        for _, log in logs:
            writer = log.get("service", "")
            for match in set(pattern.findall(log.get("message", ""))):
                if match != writer and writer:
                    counts[(writer, match)] += 1
        for (caller, callee), count in counts.items():
            edges[(caller, callee)] = Edge(caller=caller, callee=callee, source="logs", calls=count)
    for pair in dependencies:
        if len(pair) != 2 or not pair[0] or not pair[1] or pair[0] == pair[1]:
            continue
        key = (pair[0], pair[1])
        if key not in edges:
            configured: EdgeSource = "config"
            edges[key] = Edge(caller=pair[0], callee=pair[1], source=configured, calls=0)
    return sorted(edges.values(), key=lambda e: (-e["calls"], e["caller"], e["callee"]))


# --------------------------------------------------------------------------- ranking


def _evidence(signals: Sequence[Signal]) -> float:
    """The weight of a service's signals: the sum of the strongest, each times its kind's weight.

    A second signal of a family already counted (p90 and p99 of one latency) counts
    ``_REPEAT_WEIGHT`` of its value: they are mostly one observation.
    """
    ranked = sorted(signals, key=lambda s: -s["strength"] * _SIGNAL_WEIGHT[s["kind"]])
    seen: set[str] = set()
    total = 0.0
    for signal in ranked[: thresholds.MAX_SIGNALS]:
        family = _family(signal)
        repeat = _REPEAT_WEIGHT if family in seen else 1.0
        seen.add(family)
        total += signal["strength"] * _SIGNAL_WEIGHT[signal["kind"]] * repeat
    return total


def _score(evidence: float) -> float:
    """Evidence (0 and up) as a score in 0..1."""
    return 1.0 - math.exp(-max(0.0, evidence))


def _discount_shared(signals: list[Signal]) -> list[Signal]:
    """Discount series deviations that many services share: they point at none of them.

    Each is divided by the square root of the number of services whose same metric moved the
    same way.
    """
    families: dict[tuple[str, str, bool], set[str]] = defaultdict(set)
    keyed: list[tuple[Signal, tuple[str, str, bool] | None]] = []
    for signal in signals:
        pointer = signal["evidence"][0] if signal["evidence"] else None
        if pointer is None or pointer.get("kind") != "series":
            keyed.append((signal, None))
            continue
        rise = (signal["incident"] or 0.0) >= (signal["baseline"] or 0.0)
        key: tuple[str, str, bool] = (signal["kind"], pointer.get("metric", ""), rise)
        families[key].add(signal["service"])
        keyed.append((signal, key))
    result: list[Signal] = []
    for signal, family in keyed:
        shared = len(families[family]) if family is not None else 1
        if shared > 1:
            phrase = Phrase(
                kind=signal["phrase"]["kind"],
                values={**signal["phrase"]["values"], "shared": str(shared - 1)},
            )
            signal = Signal(
                **{
                    **signal,
                    "strength": round(signal["strength"] / math.sqrt(shared), 4),
                    "phrase": phrase,
                }
            )
            signal["detail"] += f" (also on {shared - 1} other services)"
        result.append(signal)
    return result


def _onset(signals: Sequence[Signal]) -> float | None:
    moments = [parse_time(signal["onset"]) for signal in signals if signal["kind"] != "change"]
    return min((moment for moment in moments if moment is not None), default=None)


def _onset_is_coarse(signals: Sequence[Signal]) -> bool:
    """Whether a service's onset comes from a series (points a minute or so apart)."""
    timed = [
        (moment, signal)
        for signal in signals
        if signal["kind"] != "change" and (moment := parse_time(signal["onset"])) is not None
    ]
    if not timed:
        return True
    first = min(timed, key=lambda item: item[0])[1]
    return any(pointer.get("kind") == "series" for pointer in first["evidence"])


def _family(signal: Signal) -> str:
    """What a signal measures: its kind, and for trace latency which latency."""
    if signal["kind"] == "trace_latency":
        return "trace_latency:" + " ".join(signal["detail"].split()[:2])
    return signal["kind"]


def _mechanism(signal: Signal) -> str:
    """A suspect's mechanism from its top signal, in English (its phrase is the signal's)."""
    kind = signal["kind"]
    detail = signal["detail"]
    if kind == "new_template":
        return "new " + detail.split(": ", 1)[-1] if ": " in detail else detail
    if kind == "template_jump":
        return "surge of " + detail.split(": ", 1)[-1]
    if kind == "error_surge":
        return detail.replace(" rate", " surge,", 1)
    if kind == "change":
        return "change: " + detail
    return detail


def _reach(start: str, graph: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    stack = list(graph.get(start, ()))
    while stack:
        node = stack.pop()
        if node in seen or node == start:
            continue
        seen.add(node)
        stack.extend(graph.get(node, ()))
    return seen


def _prior_changes(
    changes: list[Change], onset: dict[str, float | None], cfg: _Config
) -> dict[str, Change]:
    """Per anomalous service, the first change on it shortly before (or at) its onset."""
    found: dict[str, Change] = {}
    for change in changes:
        service = change["service"]
        moment = parse_time(change["time"])
        if service not in onset or service in found or moment is None:
            continue
        start = onset[service]
        if start is None or start - cfg.change_lead_s <= moment <= start + cfg.onset_tolerance_s:
            found[service] = change
    return found


def _change_signal(service: str, change: Change) -> Signal:
    return Signal(
        kind="change",
        service=service,
        detail=f"{change['category']} at {change['time']}: {_clip(change['text'])}",
        phrase=Phrase(
            kind="change",
            values={
                "category": change["category"],
                "time": change["time"],
                "text": _clip(change["text"]),
            },
        ),
        baseline=None,
        incident=None,
        onset=change["time"],
        strength=1.0,
        evidence=[change["evidence"]],
    )


def _rank(
    signals: list[Signal], changes: list[Change], edges: list[Edge], cfg: _Config
) -> list[Suspect]:
    by_service: dict[str, list[Signal]] = defaultdict(list)
    for signal in signals:
        by_service[signal["service"]].append(signal)
    evidence = {service: _evidence(items) for service, items in by_service.items()}
    strength = {service: _score(value) for service, value in evidence.items()}
    anomalous = {service for service, value in strength.items() if value >= cfg.anomaly_min}
    onset = {service: _onset(by_service[service]) for service in anomalous}
    prior_change = _prior_changes(changes, onset, cfg)
    comparable_evidence = {
        service: evidence[service] + (cfg.change_bonus if service in prior_change else 0.0)
        for service in anomalous
    }
    graph: dict[str, set[str]] = defaultdict(set)
    for edge in edges:
        graph[edge["caller"]].add(edge["callee"])

    coarse = {service for service in anomalous if _onset_is_coarse(by_service[service])}
    slow_calls = {
        (pointer.get("caller", ""), pointer.get("callee", ""))
        for signal in signals
        if signal["kind"] == "trace_latency"
        for pointer in signal["evidence"]
        if pointer.get("kind") == "edge"
    }

    def earlier_or_same(cause: str, effect: str) -> bool:
        a, b = onset.get(cause), onset.get(effect)
        precise = cause not in coarse and effect not in coarse
        tolerance = thresholds.ONSET_TOLERANCE_PRECISE_S if precise else cfg.onset_tolerance_s
        return a is None or b is None or a <= b + tolerance

    explained_by: dict[str, set[str]] = defaultdict(set)
    for service in anomalous:
        for callee in _reach(service, graph) & anomalous:
            comparable = (
                comparable_evidence[callee]
                >= thresholds.EXPLAIN_MIN_SHARE * comparable_evidence[service]
            )
            if (comparable or (service, callee) in slow_calls) and earlier_or_same(callee, service):
                explained_by[service].add(callee)
    # Two services that explain each other: the earlier onset (then the stronger) is the cause.
    for service in sorted(anomalous):
        for other in sorted(explained_by[service]):
            if service in explained_by[other]:
                a, b = onset.get(service), onset.get(other)
                service_first = (a is not None and b is not None and a < b) or (
                    (a == b or a is None or b is None) and strength[service] > strength[other]
                )
                if service_first:
                    explained_by[service].discard(other)
                else:
                    explained_by[other].discard(service)
    explains: dict[str, set[str]] = defaultdict(set)
    for service, causes in explained_by.items():
        for cause in causes:
            explains[cause].add(service)
    weight: dict[str, float] = {}
    for service in anomalous:
        score = evidence[service]
        if explained_by[service]:
            score *= cfg.symptom_factor
        score += cfg.explain_bonus * sum(
            evidence[symptom] / len(explained_by[symptom]) for symptom in explains[service]
        )
        if service in prior_change:
            score += cfg.change_bonus
        weight[service] = score
    weight = _below_causes(weight, explained_by, cfg.symptom_factor)
    suspects: list[Suspect] = []
    for service in anomalous:
        service_signals = sorted(by_service[service], key=lambda s: (-s["strength"], s["kind"]))
        start = onset.get(service)
        change = prior_change.get(service)
        if change is not None:
            service_signals.insert(0, _change_signal(service, change))
        top = service_signals[0]
        suspects.append(
            Suspect(
                service=service,
                score=round(_score(weight[service]), 4),
                mechanism=_mechanism(top),
                mechanism_phrase=top["phrase"],
                onset=_iso_or_none(start),
                signals=service_signals[: thresholds.MAX_SIGNALS],
                explains=sorted(explains[service]),
                explained_by=sorted(explained_by[service]),
            )
        )
    suspects.sort(key=lambda s: (-s["score"], s["onset"] or "", s["service"]))
    suspects = suspects[: thresholds.MAX_SUSPECTS]
    if suspects:
        leader = suspects[0]
        for suspect in suspects[1:]:
            if suspect["explained_by"]:
                suspect["why_not_first"] = (
                    "a symptom: it calls "
                    + ", ".join(suspect["explained_by"])
                    + ", whose anomaly began no later than its own"
                )
                suspect["why_not_first_phrase"] = Phrase(
                    kind="symptom", values={"causes": list(suspect["explained_by"])}
                )
            else:
                suspect["why_not_first"] = (
                    f"weaker evidence than {leader['service']}"
                    f" (score {suspect['score']:.2f} against {leader['score']:.2f})"
                )
                suspect["why_not_first_phrase"] = Phrase(
                    kind="weaker_evidence",
                    values={
                        "leader": leader["service"],
                        "score": f"{suspect['score']:.2f}",
                        "leader_score": f"{leader['score']:.2f}",
                    },
                )
    return suspects


def _below_causes(
    weight: dict[str, float], explained_by: dict[str, set[str]], factor: float
) -> dict[str, float]:
    """Each symptom's weight held to at most ``factor`` of its strongest cause's.

    A service whose anomaly a service it calls explains is not the root cause, however loud its
    own signals (a caller often logs more than the callee that fails it). Causes are settled
    first; a symptom whose causes explain one another in a loop keeps its own weight.
    """
    settled = {service: value for service, value in weight.items() if not explained_by[service]}
    pending = [service for service in sorted(weight) if service not in settled]
    while pending:
        progressed = False
        for service in list(pending):
            causes = explained_by[service]
            if not causes <= settled.keys():
                continue
            ceiling = max(settled[cause] for cause in causes) * factor
            settled[service] = min(weight[service], ceiling)
            pending.remove(service)
            progressed = True
        if not progressed:
            settled.update({service: weight[service] for service in pending})
            break
    return settled


def _evidence_of(score: float) -> float:
    """The evidence behind a score (the inverse of ``_score``)."""
    return -math.log(max(1e-12, 1.0 - score))


def _root(suspects: list[Suspect], cfg: _Config) -> tuple[Suspect | None, str | None]:
    if not suspects:
        return None, "no service deviates from its baseline"
    top = suspects[0]
    if top["score"] < cfg.root_min_score:
        return None, f"the strongest suspect ({top['service']}) scores only {top['score']:.2f}"
    lead = _evidence_of(top["score"]) * (1.0 - cfg.root_margin)
    if len(suspects) > 1 and _evidence_of(suspects[1]["score"]) > lead:
        tied = [s["service"] for s in suspects if _evidence_of(s["score"]) > lead]
        return None, "the evidence does not single out one service: " + ", ".join(tied)
    return top, None


# --------------------------------------------------------------------------- entry point


def _timed_logs(
    logs: Sequence[LogEntry], cap: int, gaps: list[str]
) -> list[tuple[float, LogEntry]]:
    timed = [
        (moment, log) for log in logs if (moment := parse_time(log.get("timestamp"))) is not None
    ]
    timed.sort(key=lambda item: (item[0], item[1].get("service", ""), item[1].get("message", "")))
    if len(timed) > cap:
        gaps.append(f"logs: {len(timed)} lines given, the newest {cap} analysed")
        timed = timed[-cap:]
    return timed


def _timed_spans(
    spans: Sequence[SpanEntry], cap: int, gaps: list[str]
) -> list[tuple[float, SpanEntry]]:
    timed = [
        (moment, span) for span in spans if (moment := parse_time(span.get("start"))) is not None
    ]
    timed.sort(key=lambda item: (item[0], item[1].get("span_id", "")))
    if len(timed) > cap:
        gaps.append(f"traces: {len(timed)} spans given, the newest {cap} analysed")
        timed = timed[-cap:]
    return timed


def analyze(inputs: IncidentInputs, settings: AnalysisSettings | None = None) -> IncidentReport:
    """Compare the incident window with its baseline and rank the services that may be the cause.

    Args:
        inputs: the windows and the raw data of both (see ``IncidentInputs``).
        settings: overrides of ``analysis.thresholds`` for this analysis.

    Returns:
        The ranked suspects, the root cause when one stands out (else None and why), the changes
        seen, the call graph used, the gaps, and the windows compared.
    """
    cfg = _Config.of(settings)
    gaps = list(inputs.get("gaps", []))
    window = _windows(inputs)
    logs = _timed_logs(inputs.get("logs", []), cfg.max_logs, gaps)
    spans = _timed_spans(inputs.get("spans", []), cfg.max_spans, gaps)
    series = list(inputs.get("series", []))
    if len(series) > thresholds.MAX_SERIES:
        gaps.append(f"series: {len(series)} given, the first {thresholds.MAX_SERIES} analysed")
    alerts = list(inputs.get("alerts", []))
    services = {log.get("service", "") for _, log in logs}
    services |= {span.get("service", "") for _, span in spans}
    services |= {_series_service(item) for item in series}
    services.discard("")
    names = _service_pattern(services)
    facts = _log_signals(logs, window, cfg, gaps, _traffic(spans, window), names)
    signals = list(facts.signals)
    traced = _traced_services(spans, window)
    signals += _series_signals(series, window, cfg, gaps, traced)
    signals += _span_signals(spans, window, cfg, gaps)
    signals += pattern_signals(
        spans,
        logs,
        facts.template_of,
        facts.templates.template,
        window.side,
        min_surprise=cfg.pattern_surprise,
        common_share=cfg.pattern_common_share,
        gaps=gaps,
        start=window.i0,
    )
    signals += _alert_signals(alerts, window)
    signals = _discount_shared(signals)
    changes = _changes(logs, facts, window, cfg)
    edges = _edges([span for _, span in spans], logs, inputs.get("dependencies", []), services)
    suspects = _rank(signals, changes, edges, cfg)
    root, ambiguity = _root(suspects, cfg)
    return IncidentReport(
        suspects=suspects,
        root_cause=root,
        ambiguity=ambiguity,
        changes=changes,
        edges=edges,
        gaps=gaps,
        windows=Windows(
            incident_start=_iso(window.i0),
            incident_end=_iso(window.i1),
            baseline_start=_iso(window.b0),
            baseline_end=_iso(window.b1),
            incident_log_minutes=round(facts.coverage_i, 2),
            baseline_log_minutes=round(facts.coverage_b, 2),
        ),
        counts={
            "logs": len(logs),
            "spans": len(spans),
            "series": len(series),
            "alerts": len(alerts),
            "signals": len(signals),
            "services": len(services),
        },
    )
