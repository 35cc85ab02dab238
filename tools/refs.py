"""Evidence refs: the citable units of one tool invocation, and the one renderer of entries.

Each entry of an evidence tool's output becomes one ref whose ``raw_path`` names it (``logs[0]``,
``alerts[1]``, ``series[0]``, ``documents[2]``) and whose ``text`` renders it on one line; every
evidence invocation ends with one ``summary`` ref stating what was asked and how much matched. A
claim cites a ref by invocation id + ``raw_path``, and its excerpt must occur in the ref's text, so
these texts are a contract (docs/contracts.md, "Evidence tools"). The trace summary renders
entries with the same functions, leaving fields out (``fields=``).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping

from state.records import (
    EVIDENCE_TOOLS,
    AlertEntry,
    DocumentEntry,
    EvidenceRef,
    Invocation,
    LogEntry,
    SeriesEntry,
    SourceType,
    ToolOutput,
)

LOG_FIELDS = ("timestamp", "level", "service", "instance")
ALERT_FIELDS = ("service", "severity", "state", "value", "threshold", "active_at")
SERIES_FIELDS = ("min", "max", "last", "points_count")


def format_value(value: object) -> str:
    """Render one value the way every ref text shows it.

    ``None`` -> ``null``; bool -> ``true``/``false``; int -> digits; an integral float -> its int
    form (``12.0`` -> ``12``); any other float -> ``repr`` (``0.23``); str as is; list/dict ->
    compact JSON (no spaces, non-ASCII kept); anything else -> ``str()``.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return str(value)


def _with_message(head: list[str], message: object) -> str:
    """Join the head parts with spaces and append ``: <message>`` when there is one."""
    text = " ".join(head)
    if message is None:
        return text
    return f"{text}: {format_value(message)}" if text else format_value(message)


def log_text(entry: LogEntry, *, fields: Collection[str] = LOG_FIELDS) -> str:
    """``<timestamp> <level> <service> <instance>: <message>``; absent fields left out."""
    head = [
        format_value(entry.get(key))
        for key in LOG_FIELDS
        if key in fields and entry.get(key) is not None
    ]
    return _with_message(head, entry.get("message"))


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
    return _with_message(head, entry.get("summary") if summary else None)


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


def document_text(entry: DocumentEntry) -> str:
    """``<title> (<source>): <chunk>``; absent fields left out."""
    title, source = entry.get("title"), entry.get("source")
    head = [format_value(title)] if title is not None else []
    if source is not None:
        head.append(f"({format_value(source)})")
    return _with_message(head, entry.get("chunk"))


def summary_text(tool_name: str, arguments: Mapping[str, object], output: ToolOutput) -> str:
    """The ``summary`` ref of an evidence invocation.

    ``<tool_name> <k>=<v> ... matched <n> of <total> (complete|truncated)``, arguments sorted by
    key with ``None`` values left out. For ``query_logs``, ``n`` is the number of lines returned
    and ``total`` the output's ``total``; for ``lookup_knowledge`` both count documents.
    ``query_metrics`` counts alerts and series separately, ``... alerts <a> of <ta>, series <s>
    of <ts> (complete|truncated)``, each total the output's ``alerts_total`` / ``series_total``
    when it has one (never less than what was returned), after ``window=<start>/<end>`` when the
    backend reports the absolute window it queried (``query_logs`` too). ``truncated`` when fewer
    entries were returned than matched or the output says ``truncated`` (a field was capped). A
    log total the source knows only as a lower bound reads ``matched <n> of at least <total>``.
    """
    parts = [tool_name]
    parts += [
        f"{key}={format_value(arguments[key])}"
        for key in sorted(arguments)
        if arguments[key] is not None
    ]
    if tool_name == "query_metrics":
        alerts = len(output.get("alerts", []))
        series = len(output.get("series", []))
        alerts_total = max(alerts, output.get("alerts_total", alerts))
        series_total = max(series, output.get("series_total", series))
        incomplete = (
            alerts < alerts_total or series < series_total or output.get("truncated") is True
        )
        window = (output.get("window_start"), output.get("window_end"))
        if window[0] and window[1]:
            parts.append(f"window={window[0]}/{window[1]}")
        parts.append(f"alerts {alerts} of {alerts_total}, series {series} of {series_total}")
        parts[-1] += f" ({'truncated' if incomplete else 'complete'})"
        return " ".join(parts)
    of = ""
    if tool_name == "query_logs":
        returned = len(output.get("logs", []))
        total = output.get("total", returned)
        window = (output.get("window_start"), output.get("window_end"))
        if window[0] and window[1]:
            parts.append(f"window={window[0]}/{window[1]}")
        if output.get("total_at_least") is True:
            of = "at least "
    else:
        returned = total = len(output.get("documents", []))
    incomplete = returned < total or output.get("truncated") is True
    state = "truncated" if incomplete else "complete"
    parts.append(f"matched {returned} of {of}{total} ({state})")
    return " ".join(parts)


ENTRY_ARRAYS: dict[str, tuple[str, ...]] = {
    "query_logs": ("logs",),
    "query_metrics": ("alerts", "series"),
    "lookup_knowledge": ("documents",),
}
"""The output arrays of each evidence tool, in ref order."""


def _entry_refs(array: str, output: ToolOutput) -> list[EvidenceRef]:
    if array == "logs":
        logs = output.get("logs", [])
        return [_ref(f"logs[{i}]", log_text(e), "log") for i, e in enumerate(logs)]
    if array == "alerts":
        alerts = output.get("alerts", [])
        return [_ref(f"alerts[{i}]", alert_text(e), "alert") for i, e in enumerate(alerts)]
    if array == "series":
        series = output.get("series", [])
        return [_ref(f"series[{i}]", series_text(e), "metric") for i, e in enumerate(series)]
    documents = output.get("documents", [])
    return [_ref(f"documents[{i}]", document_text(e), "knowledge") for i, e in enumerate(documents)]


def _ref(raw_path: str, text: str, source_type: SourceType) -> EvidenceRef:
    return EvidenceRef(raw_path=raw_path, text=text, source_type=source_type)


def build_evidence_refs(
    tool_name: str, arguments: Mapping[str, object], output: ToolOutput | None
) -> list[EvidenceRef]:
    """The evidence refs of one invocation.

    Returns:
        One ref per output entry in output order, then exactly one ``summary`` ref. Helper
        tools, unknown tools and failed calls (no output) give ``[]``.
    """
    if tool_name not in EVIDENCE_TOOLS or output is None:
        return []
    refs = [ref for array in ENTRY_ARRAYS[tool_name] for ref in _entry_refs(array, output)]
    refs.append(_ref("summary", summary_text(tool_name, arguments, output), "summary"))
    return refs


def grounding_text(invocation: Invocation, raw_path: str) -> str:
    """The text of a ref that may ground a claim's counts and values.

    The ref text itself, except for a log line: without its timestamp and instance, whose
    digits are no count or value of the incident.
    """
    refs = invocation["retrieval_details"].get("evidence_refs", [])
    text = next((ref["text"] for ref in refs if ref["raw_path"] == raw_path), "")
    logs = (invocation["output"] or {}).get("logs", [])
    if raw_path.startswith("logs[") and raw_path.endswith("]") and raw_path[5:-1].isdigit():
        index = int(raw_path[5:-1])
        if index < len(logs):
            return log_text(logs[index], fields=("level", "service"))
    return text
