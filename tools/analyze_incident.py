"""``analyze_incident``: the incident window against a baseline, per service: suspects ranked.

A deterministic analysis (``analysis.incident``) of the raw data of the configured sources over
two windows: the incident window (``start`` / ``end``) and a baseline before it
(``baseline_start`` / ``baseline_end``). With no time given the incident window is the last
15 minutes (or, when alerts fire, from 5 minutes before the first one started to now) and the
baseline the 60 minutes before it; a source whose data covers less than half of that baseline
reaches back for its latest earlier data (``evidence.incident`` gathers the data and says so).

Output arrays, each entry a citable ref:

- ``suspects[i]``: ranked, ``#<rank> <service> score=<s> onset=<t>[ root cause]: <mechanism>[;
  explains <a>, <b>][; ranks lower: <why>]``;
- ``signals[i]``: one deviation of a service from its baseline, ``<service> <kind> onset=<t>
  baseline=<b> incident=<i>: <detail>``, with the raw items it rests on quoted verbatim as
  ``signals[i].evidence[j]``: a log line ``<timestamp> <level> <service>: <message>``, a series
  ``series <metric>{<k>=<v>,...} <time>=<value> ...``, a span ``span <trace>/<span> <service>
  <operation> start=<t> duration=<ms>ms``, an alert or a call edge;
- ``changes[i]``: a change event (deploy, restart, configuration, migration, batch job, ...)
  quoted from its log line, ``<time> <service> <category>: <message>``;
- ``edges[i]``: the call graph used, ``<caller> -> <callee> source=<traces|logs|config>
  calls=<n>``;
- ``gaps[i]``: what the analysis could not use (a source without a baseline, a cut input, no
  single root cause).

The ``summary`` states the incident window and the arrays' counts. The source protocol is
declared here (``IncidentAnalyzer``): a backend that serves the tool has ``analyze_incident``
with the tool's arguments as keywords (``evidence.incident`` implements it over any source).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal, NotRequired, Protocol, runtime_checkable

from pydantic import Field, model_validator
from typing_extensions import TypedDict

from state.display import continued, word_prefix
from state.records import Invocation
from tools.backend import parse_timestamp
from tools.render import format_value, with_message
from tools.schemas import WindowArgs, optional
from tools.spec import Bounds, Counts, Display, EntryArray, ModelArguments, ToolSpec, Trace

NAME = "analyze_incident"
MAX_SERVICES = 10
"""At most this many question services in one call."""
MAX_SHOWN_POINTS = 4
"""A series pointer's ref text quotes at most this many of its points."""
TEXT_CHARS = 160
"""A suspect's mechanism and reason, and a signal's detail, are quoted up to this many
characters in ref texts (a prefix ending at a word); the entry keeps them whole."""


class AnalyzeIncidentArgs(WindowArgs):
    """Arguments of `analyze_incident` (``start`` / ``end``: the incident window)."""

    services: list[str] | None = Field(
        default=None,
        max_length=MAX_SERVICES,
        description=(
            "The services the question is about (exact names). Every service is analysed "
            "anyway: the cause is often elsewhere."
        ),
    )
    baseline_start: str | None = optional(
        "Start of the baseline window, ISO-8601 (default: 60 min before the incident window, "
        "reaching back to a source's latest earlier data when it covers less than half of it)."
    )
    baseline_end: str | None = optional(
        "End of the baseline window, ISO-8601 (default: the start of the incident window)."
    )

    @model_validator(mode="after")
    def _baseline(self) -> AnalyzeIncidentArgs:
        for value in (self.baseline_start, self.baseline_end):
            if value is not None:
                parse_timestamp(value)
        if self.baseline_start is not None and self.baseline_end is not None:
            if parse_timestamp(self.baseline_start) > parse_timestamp(self.baseline_end):
                raise ValueError(
                    f"baseline_start {self.baseline_start} is after baseline_end "
                    f"{self.baseline_end}"
                )
        return self


PointerKind = Literal["log", "series", "span", "edge", "alert"]


class PointerRow(TypedDict, total=False):
    """``signals[i].evidence[j]``: one raw item a signal rests on, as the source gave it."""

    kind: PointerKind
    timestamp: str
    level: str
    service: str
    message: str
    metric: str
    labels: dict[str, str]
    points: list[list[float]]
    trace_id: str
    span_id: str
    operation: str
    start: str
    duration_ms: float
    caller: str
    callee: str
    alert_name: str
    active_at: str


class SignalRow(TypedDict, total=False):
    """``signals[i]``: one deviation of a service's incident window from its baseline."""

    service: str
    kind: str
    detail: str
    baseline: float | None
    incident: float | None
    onset: str | None
    strength: float
    evidence: list[PointerRow]


class PhraseRow(TypedDict):
    """A mechanism or ranks-lower reason as data (``analysis.report.Phrase``).

    Its ``kind`` and the ``values`` it states, each as the English text writes it, so an answer
    can word it in its own language and still quote the evidence verbatim.
    """

    kind: str
    values: dict[str, str | list[str]]


class SuspectRow(TypedDict, total=False):
    """``suspects[i]``: a service that may be the cause, ranked (``rank`` 1 first).

    ``mechanism`` and ``why_not_first`` are English (the ref text quotes them);
    ``mechanism_phrase`` and ``why_not_first_phrase`` say the same as data.
    """

    rank: int
    service: str
    score: float
    mechanism: str
    mechanism_phrase: PhraseRow
    onset: str | None
    root_cause: bool
    explains: list[str]
    explained_by: list[str]
    why_not_first: str
    why_not_first_phrase: PhraseRow
    signals: list[int]
    """Indexes into ``signals`` of the signals this suspect rests on."""


class ChangeRow(TypedDict, total=False):
    """``changes[i]``: a change event, quoted from the log line that announces it."""

    time: str
    service: str
    category: str
    level: str
    message: str


class EdgeRow(TypedDict, total=False):
    """``edges[i]``: one edge of the call graph the analysis used."""

    caller: str
    callee: str
    source: str
    calls: int


class GapRow(TypedDict):
    """``gaps[i]``: something the analysis could not use, in words."""

    text: str


class RootCause(TypedDict):
    """The analysis's root cause: the top suspect when it stands out."""

    service: str
    mechanism: str
    score: float


class AnalysisOutput(TypedDict):
    """What a backend's ``analyze_incident`` returns (and the runner validates it into)."""

    suspects: list[SuspectRow]
    signals: list[SignalRow]
    changes: list[ChangeRow]
    edges: list[EdgeRow]
    gaps: list[GapRow]
    root_cause: RootCause | None
    ambiguity: str | None
    window_start: str
    window_end: str
    baseline_start: str
    baseline_end: str
    suspects_total: NotRequired[int]
    signals_total: NotRequired[int]
    changes_total: NotRequired[int]
    edges_total: NotRequired[int]
    gaps_total: NotRequired[int]
    truncated: NotRequired[bool]


class AnalysisResult(TypedDict, total=False):
    """What an ``analyze_incident`` invocation records (validated into this by the runner)."""

    suspects: list[SuspectRow]
    signals: list[SignalRow]
    changes: list[ChangeRow]
    edges: list[EdgeRow]
    gaps: list[GapRow]
    root_cause: RootCause | None
    ambiguity: str | None
    window_start: str
    window_end: str
    baseline_start: str
    baseline_end: str
    suspects_total: int
    signals_total: int
    changes_total: int
    edges_total: int
    gaps_total: int
    truncated: bool


@runtime_checkable
class IncidentAnalyzer(Protocol):
    """A backend that serves ``analyze_incident`` (``evidence.incident`` over any source)."""

    def analyze_incident(
        self,
        *,
        services: list[str] | None = None,
        start: str | None = None,
        end: str | None = None,
        baseline_start: str | None = None,
        baseline_end: str | None = None,
    ) -> AnalysisOutput:
        """The analysis of the incident window against the baseline (``AnalysisOutput``)."""
        ...


def result(output: Mapping[str, object] | None) -> AnalysisResult:
    """The recorded output of an ``analyze_incident`` invocation (the runner validated it)."""
    return output if output is not None else {}  # type: ignore[return-value]


# --------------------------------------------------------------------------- ref texts


def _number(value: object) -> str:
    if isinstance(value, float):
        return format_value(round(value, 3))
    return format_value(value)


def suspect_text(entry: SuspectRow) -> str:
    """``#<rank> <service> score=<s> onset=<t>[ root cause]: <mechanism>[; explains ...]``."""
    head = [f"#{format_value(entry.get('rank'))}", format_value(entry.get("service"))]
    if entry.get("score") is not None:
        head.append(f"score={_number(entry.get('score'))}")
    if entry.get("onset"):
        head.append(f"onset={format_value(entry.get('onset'))}")
    if entry.get("root_cause"):
        head.append("root cause")
    text = with_message(head, _clipped(entry.get("mechanism")))
    explains = entry.get("explains") or []
    if explains:
        text += "; explains " + ", ".join(explains)
    if entry.get("why_not_first"):
        text += f"; ranks lower: {_clipped(entry.get('why_not_first'))}"
    return text


def _clipped(value: object) -> str | None:
    """A text field as ref texts quote it: at most ``TEXT_CHARS``, ending at a word."""
    if value is None:
        return None
    return continued(word_prefix(format_value(value), TEXT_CHARS), format_value(value))


def signal_text(entry: SignalRow) -> str:
    """``<service> <kind> onset=<t> baseline=<b> incident=<i>: <detail>``."""
    head = [format_value(entry.get("service")), format_value(entry.get("kind"))]
    if entry.get("onset"):
        head.append(f"onset={format_value(entry.get('onset'))}")
    for key in ("baseline", "incident"):
        value = entry.get(key)
        if value is not None:
            head.append(f"{key}={_number(value)}")
    return with_message(head, _clipped(entry.get("detail")))


def _points_text(points: Iterable[object]) -> str:
    shown: list[str] = []
    for point in points:
        if isinstance(point, list | tuple) and len(point) == 2:
            when, value = point
            moment = _iso_seconds(when)
            shown.append(f"{moment}={format_value(value)}")
        if len(shown) >= MAX_SHOWN_POINTS:
            break
    return " ".join(shown)


def _iso_seconds(when: object) -> str:
    if isinstance(when, int | float) and not isinstance(when, bool):
        return datetime.fromtimestamp(float(when), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return format_value(when)


def pointer_text(entry: PointerRow) -> str:
    """One raw item quoted verbatim (see the module docstring for each kind's shape)."""
    kind = entry.get("kind")
    if kind == "log":
        head = [
            format_value(entry.get(key))
            for key in ("timestamp", "level", "service")
            if entry.get(key) is not None
        ]
        return with_message(head, entry.get("message"))
    if kind == "series":
        labels = entry.get("labels") or {}
        rendered = ",".join(f"{k}={format_value(labels[k])}" for k in sorted(labels))
        text = f"series {format_value(entry.get('metric'))}{{{rendered}}}"
        points = _points_text(entry.get("points") or [])
        return f"{text} {points}".rstrip()
    if kind == "span":
        parts = [
            f"span {format_value(entry.get('trace_id'))}/{format_value(entry.get('span_id'))}",
            format_value(entry.get("service")),
            format_value(entry.get("operation")),
        ]
        if entry.get("start"):
            parts.append(f"start={format_value(entry.get('start'))}")
        if entry.get("duration_ms") is not None:
            parts.append(f"duration={_number(entry.get('duration_ms'))}ms")
        return " ".join(parts)
    if kind == "edge":
        return f"{format_value(entry.get('caller'))} -> {format_value(entry.get('callee'))}"
    if kind == "alert":
        parts = [f"alert {format_value(entry.get('alert_name'))}"]
        if entry.get("service"):
            parts.append(f"service={format_value(entry.get('service'))}")
        if entry.get("active_at"):
            parts.append(f"active_at={format_value(entry.get('active_at'))}")
        return " ".join(parts)
    return format_value(entry.get("message") or "")


def change_text(entry: ChangeRow) -> str:
    """``<time> <service> <category>: <message>`` (the message as logged)."""
    head = [
        format_value(entry.get(key))
        for key in ("time", "service", "category")
        if entry.get(key) is not None
    ]
    return with_message(head, entry.get("message"))


def edge_text(entry: EdgeRow) -> str:
    """``<caller> -> <callee> source=<source> calls=<n>``."""
    text = f"{format_value(entry.get('caller'))} -> {format_value(entry.get('callee'))}"
    if entry.get("source"):
        text += f" source={format_value(entry.get('source'))}"
    if entry.get("calls") is not None:
        text += f" calls={format_value(entry.get('calls'))}"
    return text


def gap_text(entry: GapRow) -> str:
    """The gap, in words."""
    return format_value(entry.get("text"))


def _parts(invocation: Invocation) -> Iterable[str]:
    output = result(invocation["output"])
    suspects = output.get("suspects", [])
    if not suspects:
        yield "no suspect: no service deviates from its baseline"
    for entry in suspects[:3]:
        yield suspect_text(entry)
    for change in output.get("changes", [])[:2]:
        yield change_text(change)
    for gap in output.get("gaps", [])[:2]:
        yield gap_text(gap)


def _floor(invocation: Invocation) -> str:
    output = result(invocation["output"])
    root = output.get("root_cause")
    head = f"root cause {root['service']}" if root else "no single root cause"
    return f"{head}, {len(output.get('suspects', []))} suspects"


SPEC = ToolSpec(
    name=NAME,
    description=(
        "Find the likely root cause of an incident: compares every service's logs (all "
        "levels, message templates), key metric series, traces and alerts in the incident "
        "window with a baseline window before it, finds change events (deploys, restarts, "
        "configuration changes, batch jobs) and the call graph, and ranks suspect services "
        "(the deepest anomalous callee with the earliest onset first; background noise is "
        "ignored). Returns suspects with their mechanism, the signals with the raw log "
        "lines / points / spans they rest on, changes, call edges and gaps. Defaults: the "
        "last 15 min (or from just before the first firing alert; from `start` to now when "
        "given, at most 6 h) against the 60 min before; a source with less than half of that "
        "hour covered also takes its latest earlier data (up to 60 min of it, at most 24 h "
        "back), said in gaps."
    ),
    arguments=ModelArguments(
        AnalyzeIncidentArgs,
        order=("services", "start", "end", "baseline_start", "baseline_end"),
    ),
    role="incident",
    arrays=(
        EntryArray(
            name="suspects",
            source_type="analysis",
            render=suspect_text,
            display=Display("table", ("rank", "service", "score", "onset", "mechanism")),
        ),
        EntryArray(
            name="signals",
            source_type="analysis",
            render=signal_text,
            display=Display(
                "table", ("service", "kind", "onset", "baseline", "incident", "detail")
            ),
            within=(
                EntryArray(
                    name="evidence",
                    source_type="analysis",
                    render=pointer_text,
                    display=Display("table", ("kind", "timestamp", "service", "message")),
                ),
            ),
        ),
        EntryArray(
            name="changes",
            source_type="log",
            render=change_text,
            display=Display("table", ("time", "service", "category", "message")),
        ),
        EntryArray(
            name="edges",
            source_type="analysis",
            render=edge_text,
            display=Display("table", ("caller", "callee", "source", "calls")),
        ),
        EntryArray(
            name="gaps",
            source_type="analysis",
            render=gap_text,
            display=Display("table", ("text",)),
        ),
    ),
    output=AnalysisResult,
    bounds=Bounds(entries=40, fields=("root_cause", "ambiguity", "baseline_start", "baseline_end")),
    counts=Counts(per_array=True, window=True),
    trace=Trace(parts=_parts, floor=_floor),
)


def suspects_of(output: Mapping[str, Any] | None) -> list[SuspectRow]:
    """The ranked suspects of a recorded output (none when it has none)."""
    return list(result(output).get("suspects", []))
