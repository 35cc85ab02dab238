"""``query_traces`` over the Jaeger query service's HTTP API (the API its UI uses).

**The search.** ``GET /api/traces`` with ``service`` (Jaeger searches one service: a call
without one is refused), ``operation``, ``start`` / ``end`` (Unix microseconds; the last hour by
default, 24 h at most), ``minDuration`` (``500ms``), ``tags`` (``{"error":"true"}`` for
``errors_only``) and ``limit`` = ``SEARCH_LIMIT``. Jaeger answers whole traces, ``{"data":
[{traceID, spans, processes}], "errors": ...}``; all of them feed the operations and edges, and
they are counted (``traces_total``, a lower bound when the search returned ``SEARCH_LIMIT``).
``GET /api/traces/<id>`` fetches one trace. A trace holds at most ``MAX_TRACE_SPANS`` spans.

**Spans.** Jaeger's span: ``traceID`` / ``spanID`` hex (a 64-bit trace id is padded),
the parent from the first ``CHILD_OF`` reference, ``operationName``, ``startTime`` and
``duration`` in microseconds, the service from ``processes[processID].serviceName``; the tags
``span.kind``, ``otel.status_code`` (or ``error: true``) and ``otel.status_description`` give
kind, status and message, the other tags are the attributes (clipped, secrets masked, as OTLP's).

**Services**: ``GET /api/services``; operations of one: ``GET /api/services/<s>/operations``.
Errors come as ``{"errors": [{"code", "msg"}]}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from evidence.config import BackendSettings
from evidence.http import SERVER_TEXT_CHARS, BackendClient, failed_report
from evidence.otlp import MAX_VALUE_CHARS, attributes, hex_id, iso_from_nanos
from evidence.traces.answer import traces_answer
from state.display import clip, one_line
from state.json_shape import obj, objects
from state.records import SpanEntry, SpanKind, SpanStatus
from tools.backend import BackendError, BackendReport, window_bounds
from tools.query_traces import TracesOutput, TracesRequest

SEARCH_LIMIT = 100
MAX_TRACE_SPANS = 2_000
MAX_SERVICES = 500
_KINDS: dict[str, SpanKind] = {
    "server": "server",
    "client": "client",
    "producer": "producer",
    "consumer": "consumer",
    "internal": "internal",
}


def jaeger_error(status: int, body: bytes) -> str | None:
    """Jaeger's error text: the ``msg`` of its ``errors``, else the body as one line."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return one_line(text, SERVER_TEXT_CHARS) or None
    messages = [str(e.get("msg")) for e in objects(obj(data).get("errors")) if e.get("msg")]
    return one_line("; ".join(messages) or text, SERVER_TEXT_CHARS) or None


def _otlp_value(tag: dict[str, Any]) -> dict[str, object]:
    value, kind = tag.get("value"), str(tag.get("type", "")).lower()
    if kind == "bool" or isinstance(value, bool):
        return {"boolValue": bool(value)}
    if kind == "int64" and isinstance(value, int | str):
        return {"intValue": str(value)}
    if kind == "float64" and isinstance(value, int | float):
        return {"doubleValue": float(value)}
    return {"stringValue": "" if value is None else str(value)}


def jaeger_spans(trace: object) -> list[SpanEntry]:
    """One Jaeger trace (``{traceID, spans, processes}``) as span entries."""
    data = obj(trace)
    processes = obj(data.get("processes"))
    found: list[SpanEntry] = []
    for raw in objects(data.get("spans"))[:MAX_TRACE_SPANS]:
        trace_id = hex_id(str(raw.get("traceID", "")).rjust(32, "0"), 16)
        span_id = hex_id(str(raw.get("spanID", "")).rjust(16, "0"), 8)
        start, duration = raw.get("startTime"), raw.get("duration")
        if trace_id is None or span_id is None or not isinstance(start, int):
            continue
        tags = {str(t.get("key")): t for t in objects(raw.get("tags"))}
        kind = _KINDS.get(str(obj(tags.get("span.kind")).get("value", "")).lower(), "unspecified")
        code = str(obj(tags.get("otel.status_code")).get("value", "")).upper()
        failed = code == "ERROR" or obj(tags.get("error")).get("value") in (True, "true")
        status: SpanStatus = "error" if failed else ("ok" if code == "OK" else "unset")
        own = {"span.kind", "otel.status_code", "otel.status_description", "error"}
        entry = SpanEntry(
            trace_id=trace_id,
            span_id=span_id,
            service=str(obj(processes.get(str(raw.get("processID")))).get("serviceName") or "")
            or "unknown_service",
            operation=clip(str(raw.get("operationName") or ""), MAX_VALUE_CHARS),
            kind=kind,
            start=iso_from_nanos(start * 1000),
            duration_ms=round((duration if isinstance(duration, int) else 0) / 1000, 3),
            status=status,
            attributes=attributes(
                [{"key": k, "value": _otlp_value(t)} for k, t in tags.items() if k not in own]
            ),
        )
        parent = next(
            (
                ref.get("spanID")
                for ref in objects(raw.get("references"))
                if ref.get("refType") == "CHILD_OF"
            ),
            raw.get("parentSpanID"),
        )
        parent_id = hex_id(str(parent).rjust(16, "0"), 8) if parent else None
        if parent_id is not None:
            entry["parent_span_id"] = parent_id
        message = obj(tags.get("otel.status_description")).get("value")
        if isinstance(message, str) and message:
            entry["status_message"] = clip(message, MAX_VALUE_CHARS)
        found.append(entry)
    return found


def _micros(moment: datetime) -> str:
    return str(int(moment.timestamp()) * 1_000_000 + moment.microsecond)


class JaegerTraces:
    """The trace part of the evidence backend over Jaeger's query service.

    Args:
        settings: Jaeger's URL, auth and TLS.
        timeout_s: Seconds one request may take.
        now: The clock (for tests).
    """

    needs_timeout = True
    title = "jaeger"

    def __init__(
        self,
        settings: BackendSettings,
        *,
        timeout_s: float = 20.0,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.http = BackendClient(
            settings, timeout_s=timeout_s, title="Jaeger", error_reader=jaeger_error
        )
        self._now = now or (lambda: datetime.now(UTC))

    def _data(self, path: str, params: dict[str, str] | None = None) -> object:
        answer = obj(self.http.get_json(path, params))
        errors = objects(answer.get("errors"))
        if errors:
            said = "; ".join(str(e.get("msg")) for e in errors)
            raise BackendError(f"Jaeger at {self.http.url} answered: {one_line(said, 300)}")
        return answer.get("data")

    def trace(self, trace_id: str) -> list[SpanEntry]:
        """One trace's spans (``GET /api/traces/<id>``)."""
        data = self._data(f"api/traces/{quote(trace_id)}")
        return [span for trace in objects(data) for span in jaeger_spans(trace)]

    def find_traces(self, request: TracesRequest) -> TracesOutput:
        """Search one service's traces and answer from their spans.

        Raises:
            BackendError: Without a service, or when Jaeger fails (its message quoted).
        """
        if request.service is None:
            raise BackendError(
                "query_traces over Jaeger needs a service: Jaeger searches one service's "
                "traces (the services it knows: GET /api/services)"
            )
        start, end = window_bounds(request.start, request.end, self._now())
        params = {
            "service": request.service,
            "start": _micros(start),
            "end": _micros(end),
            "limit": str(SEARCH_LIMIT),
        }
        if request.operation is not None:
            params["operation"] = request.operation
        if request.min_duration_ms is not None:
            params["minDuration"] = f"{request.min_duration_ms:g}ms"
        if request.errors_only:
            params["tags"] = json.dumps({"error": "true"})
        traces = objects(self._data("api/traces", params))
        spans = [span for trace in traces for span in jaeger_spans(trace)]
        return traces_answer(
            spans,
            request,
            traces_seen=len(traces),
            at_least=len(traces) >= SEARCH_LIMIT,
            window=(start, end),
        )

    def _service_names(self) -> list[str]:
        data = self._data("api/services")
        values = data if isinstance(data, list) else []
        return sorted({v for v in values if isinstance(v, str) and v})[:MAX_SERVICES]

    def operations(self, service: str) -> list[str]:
        """The operations Jaeger knows of one service."""
        data = self._data(f"api/services/{quote(service, safe='')}/operations")
        values = data if isinstance(data, list) else []
        return sorted({v for v in values if isinstance(v, str)})

    def services(self) -> list[str]:
        """The services Jaeger knows; none when it fails."""
        try:
            return self._service_names()
        except BackendError:
            return []

    def check(self) -> BackendReport:
        """Whether Jaeger answers: the services it knows and the operations of the first."""
        url = self.http.url
        try:
            names = self._service_names()
            operations = self.operations(names[0]) if names else []
        except BackendError as exc:
            return failed_report("jaeger", url, exc)
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        first = f"; {names[0]}: {len(operations)} operations" if names else ""
        return BackendReport(
            backend="jaeger",
            url=url,
            status="ok",
            detail=f"{len(names)} services ({shown or 'none'}){first}",
        )
