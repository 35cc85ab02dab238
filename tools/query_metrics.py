"""``query_metrics``: alerts and metric series of a service, an alert name or PromQL (evidence).

Refs: ``alerts[i]`` (``<alert_name> service=<s> severity=<s> state=<s> value=<v>
threshold=<t> active_at=<t>: <summary>``), ``series[i]`` (``<metric>{<k>=<v>,...}
min=<min><unit> max=<max><unit> last=<last><unit> points=<n>``) and ``summary``
(``query_metrics <k>=<v> ... [window=<start>/<end>] alerts <a> of <ta>, series <s> of <ts>
(complete|truncated)``). A series' ``points`` are kept for charts only: no ref text names them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from typing_extensions import TypedDict

from state.records import AlertEntry, Invocation, SeriesEntry
from tools.points import bounded_points
from tools.render import format_value, with_message
from tools.schemas import WindowArgs, optional
from tools.spec import Counts, Display, EntryArray, ModelArguments, ToolSpec, Trace

NAME = "query_metrics"

ALERT_FIELDS = ("service", "severity", "state", "value", "threshold", "active_at")
"""The ``key=value`` fields of an alert's ref text, in order."""
SERIES_FIELDS = ("min", "max", "last", "points_count")
"""The summary fields of a series' ref text, in order."""
_ALERT_SUMMARY_FIELDS = ("service", "severity", "state", "value", "threshold")


class QueryMetricsArgs(WindowArgs):
    """Arguments of `query_metrics`."""

    service: str | None = optional("Only alerts and series of this service (exact name).")
    alert: str | None = optional("Only alerts whose name contains this text (case-insensitive).")
    promql: str | None = optional(
        "PromQL expression; series whose metric name appears in it are returned."
    )


class MetricsResult(TypedDict, total=False):
    """What a ``query_metrics`` invocation records (validated into this by the runner).

    ``alerts_total`` / ``series_total`` count the matches when the backend reported them or the
    runner cut entries; ``window_start`` / ``window_end``: the absolute window queried.
    """

    alerts: list[AlertEntry]
    alerts_total: int
    series: list[SeriesEntry]
    series_total: int
    window_start: str
    window_end: str
    truncated: bool


def result(output: Mapping[str, object] | None) -> MetricsResult:
    """The recorded output of a ``query_metrics`` invocation (the runner validated its shape)."""
    # A view, not a copy: no call on the hot paths of the trace summary and Gatekeeper.
    return output if output is not None else {}  # type: ignore[return-value]


def alert_text(
    entry: AlertEntry, *, fields: Collection[str] = ALERT_FIELDS, summary: bool = True
) -> str:
    """An alert on one line; absent fields are left out with their key.

    ``<alert_name> service=<s> severity=<s> state=<s> value=<v> threshold=<t> active_at=<t>:
    <summary>``.
    """
    name = entry.get("alert_name")
    head = [format_value(name)] if name is not None else []
    head += [
        f"{key}={format_value(entry.get(key))}"
        for key in ALERT_FIELDS
        if key in fields and entry.get(key) is not None
    ]
    return with_message(head, entry.get("summary") if summary else None)


def series_text(entry: SeriesEntry, *, fields: Collection[str] = SERIES_FIELDS) -> str:
    """``<metric>{<k>=<v>,...} min=<min><unit> max=<max><unit> last=<last><unit> points=<n>``.

    Labels sorted by key (``{}`` when there are none); absent fields left out with their key.
    """
    labels = entry.get("labels") or {}
    rendered = ",".join(
        f"{k}={format_value(labels[k])}" for k in sorted(labels) if labels[k] is not None
    )
    metric = entry.get("metric")
    parts = [f"{format_value(metric) if metric is not None else ''}{{{rendered}}}"]
    unit = entry.get("unit")
    suffix = format_value(unit) if unit is not None else ""
    for key in ("min", "max", "last"):
        value = entry.get(key)
        if key in fields and value is not None:
            parts.append(f"{key}={format_value(value)}{suffix}")
    points = entry.get("points_count")
    if "points_count" in fields and points is not None:
        parts.append(f"points={format_value(points)}")
    return " ".join(parts)


def _series_points(entry: object) -> object:
    """A series entry with its ``points`` bounded (``tools.points``); other entries unchanged."""
    if not isinstance(entry, Mapping) or "points" not in entry:
        return entry
    return {**entry, "points": bounded_points(entry["points"])}


def _parts(invocation: Invocation) -> Iterable[str]:
    output = result(invocation["output"])
    alerts, series = output.get("alerts", []), output.get("series", [])
    if not alerts and not series:
        yield "no alerts or series"
        return
    for alert in alerts:
        line = alert_text(alert, fields=_ALERT_SUMMARY_FIELDS, summary=False)
        yield line if alert.get("alert_name") is not None else f"alert {line}".rstrip()
    for entry in series:
        yield series_text(entry, fields=("min", "max", "last"))


SPEC = ToolSpec(
    name=NAME,
    description=(
        "Get alerts (firing or resolved) and metric series summaries (min, max, last) for a "
        "service, an alert name, or a PromQL expression."
    ),
    arguments=ModelArguments(
        QueryMetricsArgs, order=("service", "alert", "promql", "start", "end")
    ),
    role="incident",
    arrays=(
        EntryArray(
            name="alerts",
            source_type="alert",
            render=alert_text,
            display=Display("alert", ("alert_name", *ALERT_FIELDS, "summary", "runbook_url")),
        ),
        EntryArray(
            name="series",
            source_type="metric",
            render=series_text,
            bound_entry=_series_points,
            display=Display("series", ("metric", "labels", "min", "max", "last", "unit")),
        ),
    ),
    output=MetricsResult,
    counts=Counts(per_array=True, window=True),
    trace=Trace(parts=_parts),
)
