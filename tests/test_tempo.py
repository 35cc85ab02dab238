"""``query_traces`` over Grafana Tempo, against a local stand-in (no Tempo binary installs here).

The stand-in is not Tempo. It implements the documented answers of the endpoints the Tempo
source calls (https://grafana.com/docs/tempo/latest/api_docs/), over spans the OpenTelemetry
SDK made (``tests.traces_kit``):

- ``GET /api/search`` with ``q`` (the TraceQL spanset filters the source writes: ``resource.
  service.name``, ``name``, ``status = error``, ``duration >=``), ``start`` / ``end`` (Unix
  seconds), ``limit``: ``{"traces": [{traceID, rootServiceName, rootTraceName,
  startTimeUnixNano, durationMs, spanSet: {spans, matched}}], "metrics": {...}}``, trace ids
  without their leading zeros as Tempo writes them;
- ``GET /api/traces/<traceID>``: the trace as OTLP JSON under ``batches``, ids in base64 (protobuf's
  JSON printer, as Tempo answers);
- ``GET /api/v2/search/tag/resource.service.name/values``: ``{"tagValues": [{"type", "value"}]}``;
- ``X-Scope-OrgID`` required when a tenant is set (401 ``no org id`` otherwise), and a 400 with
  plain text for a query it cannot parse.

``SEARCH_SAMPLE`` is a search answer written here in the shape the documentation shows (not
copied from it); the source must read it as it reads the stand-in's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from evidence.config import BackendSettings
from evidence.otlp import read_spans
from evidence.traces.tempo import TempoTraces, traceql
from tests.backend_kit import QuietHandler, evidence_refs, run_doctor, run_tool, serve_handler
from tests.traces_kit import START, otlp_request, shop_spans
from tools.backend import parse_timestamp
from tools.query_traces import TracesRequest

NOW = "2026-03-01T10:30:00Z"
WINDOW = {"start": "2026-03-01T09:55:00Z", "end": NOW}

SEARCH_SAMPLE: dict[str, Any] = {
    "traces": [
        {
            "traceID": "5b8efff798038103d269b633813fc6",  # leading zeros dropped, as Tempo does
            "rootServiceName": "frontend",
            "rootTraceName": "GET /checkout",
            "startTimeUnixNano": "1772359200000000000",
            "durationMs": 940,
            "spanSet": {
                "spans": [
                    {
                        "spanID": "a1b2c3d4e5f60718",
                        "startTimeUnixNano": "1772359200020000000",
                        "durationNanos": "900000000",
                    }
                ],
                "matched": 1,
            },
        }
    ],
    "metrics": {"inspectedBytes": "2048", "completedJobs": 1, "totalJobs": 1},
}


@dataclass
class FakeTempo:
    """What the stand-in serves: one OTLP request per trace id (base64 ids inside)."""

    request: dict[str, Any]
    tenant: str | None = None
    requests: list[dict[str, str]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)

    def spans(self) -> list[dict[str, Any]]:
        return [dict(s) for s in read_spans([self.request]).spans]


_CONDITION = re.compile(
    r'resource\.service\.name = "(?P<service>[^"]*)"|name = "(?P<name>[^"]*)"'
    r"|(?P<error>status = error)|duration >= (?P<ms>[0-9.]+)ms"
)


def _spanset(query: str) -> list[re.Match[str]] | None:
    body = query.strip()
    if not (body.startswith("{") and body.endswith("}")):
        return None
    inner = body[1:-1].strip()
    if not inner:
        return []
    found = []
    for part in inner.split("&&"):
        match = _CONDITION.fullmatch(part.strip())
        if match is None:
            return None
        found.append(match)
    return found


def _matches(span: dict[str, Any], conditions: list[re.Match[str]]) -> bool:
    for cond in conditions:
        if cond["service"] is not None and span["service"] != cond["service"]:
            return False
        if cond["name"] is not None and span["operation"] != cond["name"]:
            return False
        if cond["error"] is not None and span["status"] != "error":
            return False
        if cond["ms"] is not None and span["duration_ms"] < float(cond["ms"]):
            return False
    return True


def _trace_request(fake: FakeTempo, trace_id: str) -> dict[str, Any]:
    """The stand-in's ``batches`` of one trace: the request's spans of that trace only."""
    hex_of = read_spans([fake.request]).spans
    wanted = {s["span_id"] for s in hex_of if s["trace_id"] == trace_id}
    batches = []
    for resource_spans in fake.request["resourceSpans"]:
        scopes = []
        for scope in resource_spans["scopeSpans"]:
            kept = [
                span
                for span in scope["spans"]
                if read_spans([{"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}]).spans[0][
                    "span_id"
                ]
                in wanted
            ]
            if kept:
                scopes.append({**scope, "spans": kept})
        if scopes:
            batches.append({**resource_spans, "scopeSpans": scopes})
    return {"batches": batches}


def _answer(fake: FakeTempo, path: str, query: dict[str, str]) -> tuple[int, str, bytes]:
    spans = fake.spans()
    if path == "/api/search":
        conditions = _spanset(query.get("q", "{ }"))
        if conditions is None:
            return 400, "text/plain", b"invalid TraceQL query: parse error at line 1"
        start, end = int(query["start"]), int(query["end"])
        limit = int(query.get("limit", "20"))
        traces: dict[str, list[dict[str, Any]]] = {}
        for span in spans:
            traces.setdefault(span["trace_id"], []).append(span)
        listed = []
        for trace_id, members in traces.items():
            hits = [s for s in members if _matches(s, conditions)]
            root = next(s for s in members if "parent_span_id" not in s)
            at = parse_timestamp(root["start"]).timestamp()
            if not hits or not start <= at <= end:
                continue
            listed.append(
                {
                    "traceID": trace_id.lstrip("0"),
                    "rootServiceName": root["service"],
                    "rootTraceName": root["operation"],
                    "startTimeUnixNano": str(int(at) * 1_000_000_000),
                    "durationMs": int(root["duration_ms"]),
                    "spanSet": {
                        "spans": [{"spanID": s["span_id"]} for s in hits[:3]],
                        "matched": len(hits),
                    },
                }
            )
        body = {"traces": listed[:limit], "metrics": {"completedJobs": 1, "totalJobs": 1}}
        return 200, "application/json", json.dumps(body).encode()
    if path.startswith("/api/traces/"):
        trace_id = path.rsplit("/", 1)[1].rjust(32, "0")
        if not any(s["trace_id"] == trace_id for s in spans):
            return 404, "text/plain", b"trace not found"
        return 200, "application/json", json.dumps(_trace_request(fake, trace_id)).encode()
    if path == "/api/v2/search/tag/resource.service.name/values":
        values = [{"type": "string", "value": v} for v in sorted({s["service"] for s in spans})]
        return 200, "application/json", json.dumps({"tagValues": values}).encode()
    return 404, "text/plain", b"404 page not found"


def _handler(fake: FakeTempo) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            fake.requests.append({"path": parts.path, **query})
            fake.headers.append({k.lower(): v for k, v in self.headers.items()})
            if fake.tenant is not None and self.headers.get("X-Scope-OrgID") != fake.tenant:
                self.reply(401, b"no org id\n", "text/plain")
                return
            status, kind, body = _answer(fake, parts.path, query)
            self.reply(status, body, kind)

    return Handler


@pytest.fixture
def fake() -> FakeTempo:
    return FakeTempo(request=otlp_request(shop_spans()), tenant="team-a")


@pytest.fixture
def tempo(fake: FakeTempo) -> Iterator[str]:
    yield from serve_handler(_handler(fake))


def _env(url: str) -> dict[str, str]:
    return {"SUPERBIZ_TEMPO_URL": url, "SUPERBIZ_TEMPO_TENANT": "team-a"}


def test_tempo_traceql_of_the_arguments() -> None:
    request = TracesRequest(
        service='pay"ment', operation="charge", errors_only=True, min_duration_ms=500
    )

    assert traceql(TracesRequest()) == "{ }"
    assert traceql(request) == (
        '{ resource.service.name = "pay\\"ment" && name = "charge" && status = error '
        "&& duration >= 500ms }"
    )


def test_tempo_answers_query_traces_like_every_source(
    fake: FakeTempo, tempo: str, tmp_path: Path
) -> None:
    row = run_tool(_env(tempo), tmp_path, "query_traces", {"service": "payment-service", **WINDOW})

    assert row["status"] == "ok", row["error"]
    refs = evidence_refs(row)
    assert refs["edges[0]"] == (
        "checkout -> payment-service calls=10 errors=2 p50=28ms p90=900ms p99=900ms max=900ms"
    )
    assert refs["summary"] == (
        "query_traces end=2026-03-01T10:30:00Z service=payment-service "
        "start=2026-03-01T09:55:00Z window=2026-03-01T09:55:00Z/2026-03-01T10:30:00Z "
        "operations 1 of 1, edges 3 of 3, traces 10 of 10 (complete)"
    )
    search = next(r for r in fake.requests if r["path"] == "/api/search")
    assert search["q"] == '{ resource.service.name = "payment-service" }'
    assert all(h.get("x-scope-orgid") == "team-a" for h in fake.headers)
    assert "hunter2" not in json.dumps(row["output"])


def test_tempo_fetches_at_most_limit_traces(fake: FakeTempo, tempo: str, tmp_path: Path) -> None:
    row = run_tool(_env(tempo), tmp_path, "query_traces", {"limit": 3, **WINDOW})

    fetched = [r for r in fake.requests if r["path"].startswith("/api/traces/")]
    assert len(fetched) == 3
    assert evidence_refs(row)["summary"].endswith("traces 3 of 10 (truncated)")


def test_tempo_search_limit_makes_the_count_a_lower_bound(
    fake: FakeTempo, tempo: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("evidence.traces.tempo.SEARCH_LIMIT", 6)

    row = run_tool(_env(tempo), tmp_path, "query_traces", {"limit": 2, **WINDOW})

    assert evidence_refs(row)["summary"].endswith("traces 2 of at least 6 (truncated)")


def test_tempo_reads_the_documented_search_shape() -> None:
    class Sample(TempoTraces):
        def __init__(self) -> None:
            super().__init__(BackendSettings(name="tempo", url="http://127.0.0.1:1"))
            self.http.get_json = lambda path, params=None, **_: SEARCH_SAMPLE  # type: ignore[method-assign]

    ids = Sample().search(TracesRequest(), START, START)

    assert ids == ["005b8efff798038103d269b633813fc6"]


def test_tempo_without_the_tenant_names_the_setting(tempo: str, tmp_path: Path) -> None:
    row = run_tool({"SUPERBIZ_TEMPO_URL": tempo}, tmp_path, "query_traces", {})

    assert row["status"] == "error"
    assert "HTTP 401" in (row["error"] or "") and "SUPERBIZ_TEMPO_TOKEN" in (row["error"] or "")


def test_tempo_doctor_and_services(
    tempo: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_doctor(monkeypatch, _env(tempo), as_json=True)

    report = json.loads(out)
    tempo_report = next(r for r in report["backends"] if r["backend"] == "tempo")
    assert tempo_report["status"] == "ok", tempo_report
    assert tempo_report["detail"].startswith(
        "4 services (checkout, frontend, payment-service, payments-db); search ok"
    )
