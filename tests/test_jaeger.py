"""``query_traces`` over Jaeger's query API, against a local stand-in (no Jaeger binary here).

The stand-in is not Jaeger. It implements the documented answers of the query service's HTTP
API (the one its UI calls; https://www.jaegertracing.io/docs/latest/apis/) over spans the
OpenTelemetry SDK made (``tests.traces_kit``), in Jaeger's own span model:

- ``GET /api/services``: ``{"data": [names], "total", "limit", "offset", "errors": null}``;
- ``GET /api/services/<service>/operations``: ``{"data": [names], ...}``;
- ``GET /api/traces`` with ``service`` (required: 400 ``{"errors": [{"code": 400, "msg":
  "parameter 'service' is required"}]}`` without it), ``operation``, ``start`` / ``end``
  (Unix microseconds), ``minDuration`` (``500ms``), ``tags`` (JSON), ``limit``: ``{"data":
  [{traceID, spans: [{traceID, spanID, operationName, references: [{refType: "CHILD_OF",
  traceID, spanID}], startTime, duration, tags: [{key, type, value}], logs, processID}],
  processes: {p1: {serviceName, tags}}, warnings}]}``; errors as the ``otel.status_code`` /
  ``error`` tags the OpenTelemetry-to-Jaeger translation writes;
- ``GET /api/traces/<id>``: ``{"data": [trace]}``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from evidence.otlp import read_spans
from evidence.traces.jaeger import jaeger_spans
from state.records import SpanEntry
from tests.backend_kit import QuietHandler, evidence_refs, run_doctor, run_tool, serve_handler
from tests.traces_kit import shop_request
from tools.backend import parse_timestamp

WINDOW = {"start": "2026-03-01T09:55:00Z", "end": "2026-03-01T10:30:00Z"}


def _tag(key: str, value: object) -> dict[str, object]:
    if isinstance(value, bool):
        return {"key": key, "type": "bool", "value": value}
    if isinstance(value, int):
        return {"key": key, "type": "int64", "value": value}
    return {"key": key, "type": "string", "value": str(value)}


def jaeger_trace(spans: list[SpanEntry]) -> dict[str, Any]:
    """Spans of one trace in Jaeger's model (one process per service)."""
    processes: dict[str, str] = {}
    rows = []
    for span in spans:
        pid = processes.setdefault(span["service"], f"p{len(processes) + 1}")
        tags = [_tag("span.kind", span["kind"])]
        tags += [_tag(k, v) for k, v in span.get("attributes", {}).items()]
        if span["status"] == "error":
            tags += [_tag("otel.status_code", "ERROR"), _tag("error", True)]
        if span.get("status_message"):
            tags.append(_tag("otel.status_description", span["status_message"]))
        micros = int(parse_timestamp(span["start"]).timestamp() * 1_000_000)
        references = []
        if span.get("parent_span_id"):
            references.append(
                {
                    "refType": "CHILD_OF",
                    "traceID": span["trace_id"],
                    "spanID": span["parent_span_id"],
                }
            )
        rows.append(
            {
                "traceID": span["trace_id"],
                "spanID": span["span_id"],
                "operationName": span["operation"],
                "references": references,
                "startTime": micros,
                "duration": int(span["duration_ms"] * 1000),
                "tags": tags,
                "logs": [],
                "processID": pid,
                "warnings": None,
            }
        )
    return {
        "traceID": spans[0]["trace_id"],
        "spans": rows,
        "processes": {pid: {"serviceName": name, "tags": []} for name, pid in processes.items()},
        "warnings": None,
    }


@dataclass
class FakeJaeger:
    """What the stand-in serves."""

    spans: list[SpanEntry]
    requests: list[dict[str, str]] = field(default_factory=list)

    def traces(self) -> dict[str, list[SpanEntry]]:
        found: dict[str, list[SpanEntry]] = {}
        for span in self.spans:
            found.setdefault(span["trace_id"], []).append(span)
        return found


def _envelope(data: object, status: int = 200) -> tuple[int, bytes]:
    body = {"data": data, "total": len(data) if isinstance(data, list) else 0, "limit": 0}
    return status, json.dumps({**body, "offset": 0, "errors": None}).encode()


def _answer(fake: FakeJaeger, path: str, query: dict[str, str]) -> tuple[int, bytes]:
    if path == "/api/services":
        return _envelope(sorted({s["service"] for s in fake.spans}))
    if path.startswith("/api/services/") and path.endswith("/operations"):
        service = unquote(path.split("/")[3])
        return _envelope(sorted({s["operation"] for s in fake.spans if s["service"] == service}))
    if path == "/api/traces":
        if not query.get("service"):
            error = {"code": 400, "msg": "parameter 'service' is required"}
            return 400, json.dumps({"data": None, "errors": [error]}).encode()
        start, end = int(query["start"]), int(query["end"])
        min_ms = float(query.get("minDuration", "0ms").removesuffix("ms"))
        wants_error = json.loads(query.get("tags", "{}")).get("error") == "true"
        listed = []
        for members in fake.traces().values():
            hits = [
                s
                for s in members
                if s["service"] == query["service"]
                and query.get("operation") in (None, s["operation"])
                and s["duration_ms"] >= min_ms
                and (not wants_error or s["status"] == "error")
                and start <= parse_timestamp(s["start"]).timestamp() * 1_000_000 <= end
            ]
            if hits:
                listed.append(jaeger_trace(members))
        return _envelope(listed[: int(query.get("limit", "20"))])
    if path.startswith("/api/traces/"):
        found = fake.traces().get(path.rsplit("/", 1)[1])
        if found is None:
            error = {"code": 404, "msg": "trace not found"}
            return 404, json.dumps({"data": None, "errors": [error]}).encode()
        return _envelope([jaeger_trace(found)])
    return 404, b"404 page not found"


def _handler(fake: FakeJaeger) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            fake.requests.append({"path": parts.path, **query})
            status, body = _answer(fake, parts.path, query)
            self.reply(status, body)

    return Handler


@pytest.fixture
def fake() -> FakeJaeger:
    return FakeJaeger(spans=read_spans([shop_request()]).spans)


@pytest.fixture
def jaeger(fake: FakeJaeger) -> Iterator[str]:
    yield from serve_handler(_handler(fake))


def test_jaeger_spans_read_back_as_the_source_wrote_them(fake: FakeJaeger) -> None:
    members = next(iter(fake.traces().values()))

    read = jaeger_spans(jaeger_trace(members))

    strip = {"attributes"}
    assert [{k: v for k, v in s.items() if k not in strip} for s in read] == [
        {k: v for k, v in s.items() if k not in strip} for s in members
    ]


def test_jaeger_answers_query_traces_like_every_source(
    fake: FakeJaeger, jaeger: str, tmp_path: Path
) -> None:
    env = {"SUPERBIZ_JAEGER_URL": jaeger}
    args = {"service": "payment-service", "errors_only": True, **WINDOW}

    row = run_tool(env, tmp_path, "query_traces", args)

    assert row["status"] == "ok", row["error"]
    refs = evidence_refs(row)
    assert refs["edges[0]"].startswith("checkout -> payment-service calls=2 errors=2 ")
    assert refs["summary"].endswith("operations 1 of 1, edges 3 of 3, traces 2 of 2 (complete)")
    search = next(r for r in fake.requests if r["path"] == "/api/traces")
    assert (search["service"], search["tags"]) == ("payment-service", '{"error": "true"}')
    assert "hunter2" not in json.dumps(row["output"])


def test_jaeger_needs_a_service(jaeger: str, tmp_path: Path) -> None:
    row = run_tool({"SUPERBIZ_JAEGER_URL": jaeger}, tmp_path, "query_traces", {})

    assert row["status"] == "error"
    assert "query_traces over Jaeger needs a service" in (row["error"] or "")


def test_jaeger_doctor_reports_services(
    jaeger: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_doctor(monkeypatch, {"SUPERBIZ_JAEGER_URL": jaeger}, as_json=True)

    report = next(r for r in json.loads(out)["backends"] if r["backend"] == "jaeger")
    assert report["status"] == "ok", report
    assert report["detail"] == (
        "4 services (checkout, frontend, payment-service, payments-db); checkout: 1 operations"
    )
