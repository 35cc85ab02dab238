"""OTLP JSON spans are read exactly (ids, times, kinds, status, masked attributes) and aggregated
into the same latency, call-graph and tree figures wherever they are used."""

from __future__ import annotations

import base64
import json

import pytest

from analysis.spans import call_edges, is_error, operation_stats, percentile, span_tree
from evidence.environment import EnvironmentFileError, parse_environment
from evidence.otlp import read_spans, to_otlp
from state.records import SpanEntry

TRACE = "5b8efff798038103d269b633813fc60c"


def _span(
    span_id: str,
    name: str,
    start_ms: int,
    duration_ms: int,
    *,
    parent: str | None = None,
    kind: object = 2,
    code: object = 0,
    attributes: list[dict[str, object]] | None = None,
) -> dict[str, object]:
    start = 1_700_000_000_000_000_000 + start_ms * 1_000_000
    raw: dict[str, object] = {
        "traceId": TRACE,
        "spanId": span_id,
        "name": name,
        "kind": kind,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + duration_ms * 1_000_000),
        "attributes": attributes or [],
        "status": {"code": code},
    }
    if parent:
        raw["parentSpanId"] = parent
    return raw


def _request(spans_by_service: dict[str, list[dict[str, object]]]) -> dict[str, object]:
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": service}}]
                },
                "scopeSpans": [{"scope": {"name": "test"}, "spans": spans}],
            }
            for service, spans in spans_by_service.items()
        ]
    }


def _checkout_trace() -> dict[str, object]:
    return _request(
        {
            "api-gateway": [_span("00000000000000a1", "POST /checkout", 0, 900)],
            "order-service": [
                _span("00000000000000b1", "createOrder", 10, 850, parent="00000000000000a1"),
                _span("00000000000000b2", "reserve", 20, 800, parent="00000000000000b1", kind=3),
            ],
            "inventory-service": [
                _span(
                    "00000000000000c1",
                    "reserveStock",
                    25,
                    780,
                    parent="00000000000000b2",
                    code=2,
                )
            ],
        }
    )


def test_otlp_read_spans_reads_ids_times_kinds_and_status() -> None:
    read = read_spans([_checkout_trace()])

    assert read.skipped == 0
    by_id = {span["span_id"]: span for span in read.spans}
    stock = by_id["00000000000000c1"]
    assert stock["trace_id"] == TRACE
    assert stock["service"] == "inventory-service"
    assert stock["parent_span_id"] == "00000000000000b2"
    assert stock["duration_ms"] == 780.0
    assert stock["status"] == "error"
    assert stock["start"] == "2023-11-14T22:13:20.025000Z"
    assert by_id["00000000000000b2"]["kind"] == "client"
    assert "parent_span_id" not in by_id["00000000000000a1"]


def test_otlp_base64_ids_and_proto_enum_names_are_read_too() -> None:
    raw = _span(
        base64.b64encode(bytes.fromhex("00000000000000d1")).decode(),
        "op",
        0,
        5,
        kind="SPAN_KIND_CLIENT",
        code="STATUS_CODE_ERROR",
    )
    raw["traceId"] = base64.b64encode(bytes.fromhex(TRACE)).decode()

    [span] = read_spans([_request({"svc": [raw]})]).spans

    assert span["trace_id"] == TRACE
    assert span["span_id"] == "00000000000000d1"
    assert span["kind"] == "client"
    assert span["status"] == "error"


def test_otlp_secret_attributes_are_masked_and_long_values_clipped() -> None:
    attributes: list[dict[str, object]] = [
        {"key": "http.request.header.authorization", "value": {"stringValue": "Bearer abc"}},
        {"key": "db.password", "value": {"stringValue": "hunter2"}},
        {"key": "session_token", "value": {"stringValue": "t0k"}},
        {"key": "db.statement", "value": {"stringValue": "x" * 1000}},
        {"key": "http.status_code", "value": {"intValue": "503"}},
    ]
    [span] = read_spans(
        [_request({"svc": [_span("00000000000000e1", "q", 0, 1, attributes=attributes)]})]
    ).spans

    values = span["attributes"]
    assert values["http.request.header.authorization"] == "****"
    assert values["db.password"] == "****"
    assert values["session_token"] == "****"
    assert "hunter2" not in json.dumps(span)
    statement = values["db.statement"]
    assert isinstance(statement, str) and len(statement) < 300
    assert values["http.status_code"] == 503


def test_otlp_malformed_spans_are_skipped_and_counted() -> None:
    bad = _span("00000000000000f1", "bad", 0, 1)
    bad["traceId"] = "not-an-id"
    backwards = _span("00000000000000f2", "backwards", 10, 1)
    backwards["endTimeUnixNano"] = "1"

    read = read_spans([_request({"svc": [bad, backwards, _span("00000000000000f3", "ok", 0, 1)]})])

    assert read.skipped == 2
    assert [span["operation"] for span in read.spans] == ["ok"]


def test_otlp_to_otlp_round_trips_what_a_span_entry_keeps() -> None:
    spans = read_spans([_checkout_trace()]).spans

    again = read_spans([json.loads(json.dumps(to_otlp(spans)))]).spans

    assert sorted(again, key=lambda s: s["span_id"]) == sorted(spans, key=lambda s: s["span_id"])


def test_spans_call_edges_count_each_cross_service_call_once_by_its_server_span() -> None:
    edges = call_edges(read_spans([_checkout_trace()]).spans)

    pairs = {(edge["caller"], edge["callee"]): edge for edge in edges}
    assert set(pairs) == {("api-gateway", "order-service"), ("order-service", "inventory-service")}
    inventory = pairs[("order-service", "inventory-service")]
    assert (inventory["count"], inventory["errors"], inventory["p99_ms"]) == (1, 1, 780.0)


def test_spans_client_span_without_a_traced_callee_is_an_edge_to_its_peer() -> None:
    client = _span(
        "0000000000000011",
        "SELECT",
        0,
        40,
        kind=3,
        attributes=[{"key": "peer.service", "value": {"stringValue": "postgres"}}],
    )

    [edge] = call_edges(read_spans([_request({"order-service": [client]})]).spans)

    assert (edge["caller"], edge["callee"], edge["count"]) == ("order-service", "postgres", 1)


def test_spans_operation_stats_percentiles_are_nearest_rank() -> None:
    spans = [
        SpanEntry(service="a", operation="get", duration_ms=float(ms), status="unset")
        for ms in range(1, 101)
    ]

    [row] = operation_stats(spans)

    assert (row["count"], row["p50_ms"], row["p90_ms"], row["p99_ms"]) == (100, 50.0, 90.0, 99.0)
    assert percentile([], 0.5) == 0.0


@pytest.mark.parametrize(
    ("status", "attributes", "expected"),
    [
        ("error", {}, True),
        ("ok", {"http.status_code": 500}, False),
        ("unset", {"http.status_code": 503}, True),
        ("unset", {"http.response.status_code": "502"}, True),
        ("unset", {"http.status_code": 404}, False),
        ("unset", {"rpc.grpc.status_code": 14}, True),
        ("unset", {}, False),
    ],
)
def test_spans_is_error_reads_status_then_status_codes(
    status: str, attributes: dict[str, object], expected: bool
) -> None:
    span = SpanEntry(status=status, attributes=attributes)  # type: ignore[typeddict-item]

    assert is_error(span) is expected


def test_spans_span_tree_is_depth_first_and_clipped() -> None:
    spans = read_spans([_checkout_trace()]).spans

    nodes, left_out = span_tree(spans)
    assert [(node["depth"], node["span"]["operation"]) for node in nodes] == [
        (0, "POST /checkout"),
        (1, "createOrder"),
        (2, "reserve"),
        (3, "reserveStock"),
    ]
    assert left_out == 0
    clipped, left = span_tree(spans, max_spans=2)
    assert len(clipped) == 2 and left == 2


def test_environment_traces_key_holds_otlp_json_and_refuses_other_shapes() -> None:
    env = parse_environment(json.dumps({"traces": [_checkout_trace()]}), origin="env.json")
    assert len(env["traces"]) == 4

    with pytest.raises(EnvironmentFileError, match=r"env.json: traces .*resourceSpans"):
        parse_environment(json.dumps({"traces": [{"spans": []}]}), origin="env.json")
    bad = _request({"svc": [{**_span("0000000000000021", "x", 0, 1), "spanId": ""}]})
    with pytest.raises(EnvironmentFileError, match="1 span"):
        parse_environment(json.dumps({"traces": bad}), origin="env.json")
