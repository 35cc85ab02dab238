"""Spans from OTLP JSON, as the OpenTelemetry Collector's file exporter writes them.

One ``ExportTraceServiceRequest`` object holds ``resourceSpans`` -> ``scopeSpans`` (or the older
``instrumentationLibrarySpans``) -> ``spans``; the service is the resource attribute
``service.name``. Ids are lowercase hex in OTLP JSON; some exporters still write the base64 of
plain proto3 JSON, which is read too. 64-bit integers (``startTimeUnixNano``) are decimal
strings, or numbers; enums are integers (``kind`` 1 internal, 2 server, 3 client; ``status.code``
0 unset, 1 ok, 2 error), or their proto names.

What is read is bounded: attributes at most ``MAX_ATTRIBUTES`` per span, each value at most
``MAX_VALUE_CHARS`` characters; a value whose key looks like a secret (``authorization``,
``password``, ``token``, ``cookie``, ``secret``, ``api-key``) is replaced by ``****`` before
anything stores or shows it. A malformed span (no ids, no times) is skipped and counted.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from state.display import clip
from state.json_shape import items, obj, objects
from state.records import JSONScalar, SpanEntry, SpanKind, SpanStatus

MAX_ATTRIBUTES: Final = 32
MAX_VALUE_CHARS: Final = 256
MASK: Final = "****"

_SECRET_KEY = re.compile(
    r"authori[sz]ation|passw(or)?d|passwd|secret|token|cookie|api[-_.]?key|credential",
    re.IGNORECASE,
)
_KINDS: Final[dict[object, SpanKind]] = {
    0: "unspecified",
    1: "internal",
    2: "server",
    3: "client",
    4: "producer",
    5: "consumer",
}
_STATUS: Final[dict[object, SpanStatus]] = {0: "unset", 1: "ok", 2: "error"}
_HEX = re.compile(r"^[0-9a-fA-F]+$")


def is_secret_key(key: str) -> bool:
    """Whether an attribute key names a secret whose value must never be shown."""
    return _SECRET_KEY.search(key) is not None


def _enum(value: object, names: dict[object, str], prefix: str) -> str | None:
    """An OTLP enum given as its number or its proto name (``SPAN_KIND_SERVER``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return names.get(value)
    if isinstance(value, str):
        text = value.strip().upper()
        if text.isdigit():
            return names.get(int(text))
        short = text.removeprefix(prefix).lower()
        return short if short in names.values() else None
    return None


_KIND_NAMES: Final[dict[object, str]] = dict(_KINDS)
_STATUS_NAMES: Final[dict[object, str]] = dict(_STATUS)


def _kind(value: object) -> SpanKind:
    if type(value) is int and value in _KINDS:  # the usual case, without a lookup by name
        return _KINDS[value]
    name = _enum(value, _KIND_NAMES, "SPAN_KIND_")
    return next((kind for kind in _KINDS.values() if kind == name), "unspecified")


def _status(value: object) -> SpanStatus:
    if type(value) is int and value in _STATUS:
        return _STATUS[value]
    name = _enum(value, _STATUS_NAMES, "STATUS_CODE_")
    return next((status for status in _STATUS.values() if status == name), "unset")


def hex_id(value: object, size: int) -> str | None:
    """A trace id (16 bytes) or span id (8 bytes) as lowercase hex, from hex or base64."""
    if not isinstance(value, str) or not value:
        return None
    if len(value) == size * 2 and _HEX.match(value):
        return value.lower()
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(raw) != size:
        return None
    text = raw.hex()
    return None if set(text) == {"0"} else text


def _nanos(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str) and value.isdigit():
        number = int(value)
        return number if number > 0 else None
    return None


def iso_from_nanos(nanos: int) -> str:
    """Epoch nanoseconds as ISO-8601 UTC with microseconds (``2026-04-02T08:12:00.123456Z``)."""
    moment = datetime.fromtimestamp(nanos // 1000 / 1_000_000, tz=UTC)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _clip(text: str) -> str:
    return clip(text, MAX_VALUE_CHARS)


def any_value(value: object) -> JSONScalar:
    """An OTLP ``AnyValue`` as one scalar (arrays and maps as their compact text), clipped."""
    data = obj(value)
    if "stringValue" in data:
        raw = data["stringValue"]
        return _clip(raw) if isinstance(raw, str) else None
    if "boolValue" in data:
        flag = data["boolValue"]
        return flag if isinstance(flag, bool) else None
    if "intValue" in data:
        number = data["intValue"]
        if isinstance(number, int) and not isinstance(number, bool):
            return number
        if isinstance(number, str) and re.fullmatch(r"-?\d+", number):
            return int(number)
        return None
    if "doubleValue" in data:
        real = data["doubleValue"]
        return float(real) if isinstance(real, int | float) and not isinstance(real, bool) else None
    if "arrayValue" in data:
        values = [any_value(item) for item in items(obj(data["arrayValue"]).get("values"))]
        return _clip("[" + ", ".join("null" if v is None else str(v) for v in values) + "]")
    if "kvlistValue" in data:
        pairs = attributes(obj(data["kvlistValue"]).get("values"))
        return _clip("{" + ", ".join(f"{k}={v}" for k, v in pairs.items()) + "}")
    if "bytesValue" in data:
        return "<bytes>"
    return None


def attributes(value: object) -> dict[str, JSONScalar]:
    """OTLP ``KeyValue`` pairs as a dict: at most ``MAX_ATTRIBUTES``, secrets masked."""
    found: dict[str, JSONScalar] = {}
    for pair in objects(value):
        key = pair.get("key")
        if not isinstance(key, str) or not key:
            continue
        if len(found) >= MAX_ATTRIBUTES:
            break
        found[_clip(key)] = MASK if is_secret_key(key) else any_value(pair.get("value"))
    return found


@dataclass
class SpanRead:
    """The spans read from some OTLP JSON, and how many malformed ones were skipped."""

    spans: list[SpanEntry]
    skipped: int = 0


def _span(raw: dict[str, object], service: str) -> SpanEntry | None:
    trace_id = hex_id(raw.get("traceId"), 16)
    span_id = hex_id(raw.get("spanId"), 8)
    start = _nanos(raw.get("startTimeUnixNano"))
    end = _nanos(raw.get("endTimeUnixNano"))
    if trace_id is None or span_id is None or start is None or end is None or end < start:
        return None
    status = obj(raw.get("status"))
    entry = SpanEntry(
        trace_id=trace_id,
        span_id=span_id,
        service=service,
        operation=_clip(str(raw.get("name") or "")),
        kind=_kind(raw.get("kind")),
        start=iso_from_nanos(start),
        duration_ms=round((end - start) / 1_000_000, 3),
        status=_status(status.get("code")),
        attributes=attributes(raw.get("attributes")),
    )
    parent = hex_id(raw.get("parentSpanId"), 8)
    if parent is not None:
        entry["parent_span_id"] = parent
    message = status.get("message")
    if isinstance(message, str) and message:
        entry["status_message"] = _clip(message)
    return entry


def _resource_spans(request: object) -> Iterator[tuple[str, dict[str, object]]]:
    for resource_spans in objects(obj(request).get("resourceSpans")):
        resource = attributes(obj(resource_spans.get("resource")).get("attributes"))
        service = resource.get("service.name")
        name = service if isinstance(service, str) and service else "unknown_service"
        scopes = objects(resource_spans.get("scopeSpans")) or objects(
            resource_spans.get("instrumentationLibrarySpans")
        )
        for scope in scopes:
            for raw in objects(scope.get("spans")):
                yield name, raw


def read_spans(requests: Iterable[object]) -> SpanRead:
    """The spans of OTLP JSON ``ExportTraceServiceRequest`` objects, in file order.

    Args:
        requests: Decoded JSON objects (anything else is skipped).

    Returns:
        The spans, and how many spans were skipped as malformed.
    """
    read = SpanRead(spans=[])
    for request in requests:
        for service, raw in _resource_spans(request):
            entry = _span(raw, service)
            if entry is None:
                read.skipped += 1
            else:
                read.spans.append(entry)
    return read


def to_otlp(spans: Iterable[SpanEntry]) -> dict[str, object]:
    """Spans as one OTLP JSON ``ExportTraceServiceRequest`` (one resource per service).

    The inverse of ``read_spans`` for what a ``SpanEntry`` keeps: used to write environment
    files and replays.
    """
    by_service: dict[str, list[dict[str, object]]] = {}
    for span in spans:
        start = _parse_iso_nanos(span.get("start", ""))
        end = start + round(float(span.get("duration_ms", 0.0)) * 1_000_000)
        raw: dict[str, object] = {
            "traceId": span.get("trace_id", ""),
            "spanId": span.get("span_id", ""),
            "name": span.get("operation", ""),
            "kind": next((k for k, v in _KINDS.items() if v == span.get("kind")), 0),
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(end),
            "attributes": [
                {"key": key, "value": _otlp_value(value)}
                for key, value in (span.get("attributes") or {}).items()
            ],
            "status": {"code": next((k for k, v in _STATUS.items() if v == span.get("status")), 0)},
        }
        if span.get("parent_span_id"):
            raw["parentSpanId"] = span["parent_span_id"]
        if span.get("status_message"):
            raw["status"] = {**obj(raw["status"]), "message": span["status_message"]}
        by_service.setdefault(span.get("service", "unknown_service"), []).append(raw)
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": service}}]
                },
                "scopeSpans": [{"scope": {"name": "superbiz"}, "spans": raws}],
            }
            for service, raws in by_service.items()
        ]
    }


def _otlp_value(value: JSONScalar) -> dict[str, object]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": "" if value is None else str(value)}


def _parse_iso_nanos(text: str) -> int:
    cleaned = text[:-1] + "+00:00" if text.endswith("Z") else text
    try:
        moment = datetime.fromisoformat(cleaned)
    except ValueError:
        return 0
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    seconds = int(moment.timestamp())
    return seconds * 1_000_000_000 + moment.microsecond * 1000
