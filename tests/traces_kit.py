"""Spans made by the real OpenTelemetry SDK, exported as OTLP JSON, for the trace tests.

``shop_spans`` runs a small made-up shop through the SDK: ``frontend`` serves ``GET /checkout``
and calls ``checkout`` (``POST /orders``), which calls ``payment-service`` (``charge``), which
queries ``payments-db`` (``SELECT payments``). Each service has its own ``TracerProvider``
(resource ``service.name``); the spans of one request form one trace through the SDK's context
propagation. Timestamps are given explicitly, so durations are exact. Calls ``3`` and ``7`` of
``payment-service`` fail (status ERROR, ``http.status_code`` 503) and its charges take 900 ms
and more from call 5 on (the database is slow), so the tests know every figure.

``otlp_request`` turns the SDK's finished spans into one ``ExportTraceServiceRequest`` built with
``opentelemetry-proto``'s messages and printed by protobuf's JSON printer (ids in base64, as plain
proto3 JSON writes them); ``hex_ids`` rewrites the ids as the Collector's file exporter writes
them (lowercase hex).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource as ProtoResource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

START = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
START_NS = int(START.timestamp()) * 1_000_000_000
MS = 1_000_000
SERVICES = ("frontend", "checkout", "payment-service", "payments-db")
FAILED_CALLS = (3, 7)
SLOW_FROM = 5


class Shop:
    """One tracer provider per service, all exporting into one in-memory exporter."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracers: dict[str, trace.Tracer] = {}
        for service in SERVICES:
            provider = TracerProvider(resource=Resource.create({"service.name": service}))
            provider.add_span_processor(SimpleSpanProcessor(self.exporter))
            self.tracers[service] = provider.get_tracer("shop-test")

    def spans(self) -> tuple[ReadableSpan, ...]:
        """Every finished span so far."""
        return self.exporter.get_finished_spans()


def _timed(
    shop: Shop,
    service: str,
    name: str,
    kind: SpanKind,
    start_ms: int,
    duration_ms: int,
    attributes: dict[str, Any],
    *,
    failed: bool = False,
    inner: Any = None,
) -> None:
    tracer = shop.tracers[service]
    span = tracer.start_span(
        name, kind=kind, start_time=START_NS + start_ms * MS, attributes=attributes
    )
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        if inner is not None:
            inner()
    finally:
        otel_context.detach(token)
    if failed:
        span.set_status(StatusCode.ERROR, "payment provider unavailable")
        span.set_attribute("http.status_code", 503)
    span.end(end_time=START_NS + (start_ms + duration_ms) * MS)


def shop_spans(requests: int = 10) -> tuple[ReadableSpan, ...]:
    """The spans of ``requests`` checkout requests, one second apart (see the module docstring)."""
    shop = Shop()
    for call in range(requests):
        at = call * 1000
        slow = call >= SLOW_FROM
        db_ms = 880 if slow else 8
        charge_ms = db_ms + 20
        failed = call in FAILED_CALLS

        def db(at: int = at, db_ms: int = db_ms) -> None:
            _timed(
                shop,
                "payments-db",
                "SELECT payments",
                SpanKind.SERVER,
                at + 30,
                db_ms,
                {"db.system": "postgresql", "db.password": "hunter2"},
            )

        def charge(at: int = at, ms: int = charge_ms, failed: bool = failed, db: Any = db) -> None:
            _timed(
                shop,
                "payment-service",
                "charge",
                SpanKind.SERVER,
                at + 20,
                ms,
                {"http.method": "POST", "http.request.header.authorization": "Bearer abc"},
                failed=failed,
                inner=db,
            )

        def orders(at: int = at, ms: int = charge_ms + 20, charge: Any = charge) -> None:
            _timed(shop, "checkout", "POST /orders", SpanKind.SERVER, at + 10, ms, {}, inner=charge)

        _timed(
            shop,
            "frontend",
            "GET /checkout",
            SpanKind.SERVER,
            at,
            charge_ms + 40,
            {"http.route": "/checkout"},
            inner=orders,
        )
    return shop.spans()


def _value(value: object) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=str(value))


def otlp_request(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """One ``ExportTraceServiceRequest`` as protobuf's JSON printer writes it (base64 ids)."""
    by_service: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        service = str((span.resource.attributes or {}).get("service.name"))
        by_service.setdefault(service, []).append(span)
    request = ExportTraceServiceRequest()
    for service, members in by_service.items():
        resource_spans = ResourceSpans(
            resource=ProtoResource(attributes=[KeyValue(key="service.name", value=_value(service))])
        )
        scope = ScopeSpans(scope=InstrumentationScope(name="shop-test"))
        for span in members:
            context = span.get_span_context()
            assert context is not None
            proto = Span(
                trace_id=context.trace_id.to_bytes(16, "big"),
                span_id=context.span_id.to_bytes(8, "big"),
                name=span.name,
                kind=cast(
                    Any, span.kind.value + 1
                ),  # the SDK counts from INTERNAL = 0, OTLP from 1
                start_time_unix_nano=span.start_time or 0,
                end_time_unix_nano=span.end_time or 0,
                attributes=[
                    KeyValue(key=key, value=_value(value))
                    for key, value in (span.attributes or {}).items()
                ],
                status=Status(
                    code=cast(Any, span.status.status_code.value),
                    message=span.status.description or "",
                ),
            )
            if span.parent is not None:
                proto.parent_span_id = span.parent.span_id.to_bytes(8, "big")
            scope.spans.append(proto)
        resource_spans.scope_spans.append(scope)
        request.resource_spans.append(resource_spans)
    printed: dict[str, Any] = MessageToDict(request)
    return printed


def hex_ids(request: dict[str, Any]) -> dict[str, Any]:
    """The request with its base64 ids as lowercase hex (the Collector's file exporter)."""
    copy: dict[str, Any] = json.loads(json.dumps(request))
    for resource_spans in copy.get("resourceSpans", []):
        for scope in resource_spans.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return copy


def shop_request(requests: int = 10) -> dict[str, Any]:
    """The shop's spans as one OTLP JSON request, hex ids (what an environment file holds)."""
    return hex_ids(otlp_request(shop_spans(requests)))
