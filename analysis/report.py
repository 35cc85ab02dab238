"""The plain-data records of an incident analysis: what goes in and what comes out.

Everything is a ``TypedDict`` (JSON as it is), so a report can sit in a tool result, a checkpoint
or a JSON column unchanged. ``analysis.incident.analyze`` turns ``IncidentInputs`` into an
``IncidentReport``.
"""

from __future__ import annotations

from typing import Literal, NotRequired

from typing_extensions import TypedDict

from state.records import AlertEntry, LogEntry, SeriesEntry, SpanEntry

SignalKind = Literal[
    "error_surge",
    "new_template",
    "template_jump",
    "latency",
    "error_ratio",
    "cpu",
    "memory",
    "saturation",
    "throughput",
    "change",
    "trace_errors",
    "trace_latency",
    "call_pattern",
    "alert",
]
EdgeSource = Literal["traces", "logs", "config"]
PhraseKind = Literal[
    # signals (a suspect's mechanism is its top signal's phrase)
    "error_surge",
    "new_template",
    "template_jump",
    "series",
    "trace_latency",
    "call_gap",
    "trace_errors",
    "call_pattern",
    "alert",
    "change",
    # why a suspect ranks lower
    "symptom",
    "weaker_evidence",
]


class Phrase(TypedDict):
    """What a signal's detail, a suspect's mechanism or its ranks-lower reason says, as data.

    ``kind`` names the sentence and ``values`` hold what it states, each written exactly as the
    English text beside it writes it (numbers formatted, quoted lines clipped), a list for names
    the text joins with commas. A reader can then word the same facts in another language and
    still quote the evidence verbatim. Which values each kind has is listed where it is made
    (``analysis.incident``, ``analysis.trace_patterns``).
    """

    kind: PhraseKind
    values: dict[str, str | list[str]]


class IncidentInputs(TypedDict, total=False):
    """What the analysis reads: two windows and the raw data of both.

    Times are ISO-8601 UTC; an empty or missing window takes the defaults of
    ``analysis.thresholds``. ``logs`` hold every level (INFO included: changes are announced at
    INFO). ``dependencies`` are configured ``[caller, callee]`` pairs. ``gaps`` name what a source
    could not give (e.g. no baseline), and are carried into the report.
    """

    incident_start: str
    incident_end: str
    baseline_start: str
    baseline_end: str
    logs: list[LogEntry]
    series: list[SeriesEntry]
    spans: list[SpanEntry]
    alerts: list[AlertEntry]
    dependencies: list[list[str]]
    gaps: list[str]


class EvidencePointer(TypedDict, total=False):
    """One raw item a signal rests on, quoted so a reader can find it verbatim.

    ``kind`` ``log``: ``timestamp``, ``service``, ``message`` exactly as in the log entry (and
    ``level``). ``series``: ``metric``, ``labels``, ``points`` (``[[unix_seconds, value], ...]``).
    ``span``: ``trace_id``, ``span_id``, ``service``, ``operation``, ``duration_ms``, ``start``.
    ``edge``: ``caller``, ``callee``. ``alert``: ``alert_name``, ``service``, ``active_at``.
    """

    kind: Literal["log", "series", "span", "edge", "alert"]
    timestamp: str
    service: str
    level: str
    message: str
    metric: str
    labels: dict[str, str]
    points: list[list[float]]
    trace_id: str
    span_id: str
    operation: str
    duration_ms: float
    start: str
    caller: str
    callee: str
    alert_name: str
    active_at: str


class Signal(TypedDict):
    """One deviation of the incident window from the baseline, on one service.

    ``baseline`` / ``incident`` are the compared figures (a rate per minute, a series value, a
    latency in ms, ...; None where a side has none); ``strength`` in 0..1 is how strongly it
    marks the service as anomalous. ``phrase`` is what ``detail`` says, as data.
    """

    kind: SignalKind
    service: str
    detail: str
    phrase: Phrase
    baseline: float | None
    incident: float | None
    onset: str | None
    strength: float
    evidence: list[EvidencePointer]


class Change(TypedDict):
    """A change event (deploy, restart, configuration, migration, batch job, ...)."""

    time: str
    service: str
    text: str
    category: str
    evidence: EvidencePointer


class Edge(TypedDict):
    """One edge of the call graph the analysis used."""

    caller: str
    callee: str
    source: EdgeSource
    calls: int


class Suspect(TypedDict):
    """A service that may be the cause, with what makes it one.

    ``mechanism`` and ``why_not_first`` are in English; ``mechanism_phrase`` and
    ``why_not_first_phrase`` say the same as data (``Phrase``).
    """

    service: str
    score: float
    mechanism: str
    mechanism_phrase: Phrase
    onset: str | None
    signals: list[Signal]
    explains: list[str]
    explained_by: list[str]
    why_not_first: NotRequired[str]
    why_not_first_phrase: NotRequired[Phrase]


class Windows(TypedDict):
    """The windows compared, and the log coverage (minutes with any log line) of each."""

    incident_start: str
    incident_end: str
    baseline_start: str
    baseline_end: str
    incident_log_minutes: float
    baseline_log_minutes: float


class IncidentReport(TypedDict):
    """The analysis: ranked suspects, the root cause when one stands out, and what it used."""

    suspects: list[Suspect]
    root_cause: Suspect | None
    ambiguity: str | None
    changes: list[Change]
    edges: list[Edge]
    gaps: list[str]
    windows: Windows
    counts: dict[str, int]


class AnalysisSettings(TypedDict, total=False):
    """Overrides of ``analysis.thresholds`` for one analysis (same names, lower case)."""

    surge_ratio: float
    min_events: int
    min_new_events: int
    series_z: float
    series_min_change: float
    latency_ratio: float
    latency_min_ms: float
    anomaly_min: float
    onset_tolerance_s: float
    symptom_factor: float
    explain_bonus: float
    change_bonus: float
    change_lead_s: float
    root_min_score: float
    root_margin: float
    max_logs: int
    max_spans: int
    pattern_surprise: float
    pattern_common_share: float
