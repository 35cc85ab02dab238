from __future__ import annotations

from collections.abc import Mapping

import pytest

from state.records import AlertEntry, DocumentEntry, JSONObject, SeriesEntry
from tests.records import alert_entry, document_entry, log_entry, series_entry
from tools.query_logs import LogsResult
from tools.query_metrics import MetricsResult
from tools.refs import build_evidence_refs
from tools.render import format_value

LOG = log_entry(
    "HikariPool-1 - Connection is not available, request timed out after 30000ms.",
    timestamp="2026-03-01T10:07:14Z",
    instance="order-service-5f7b9c-2xkqz",
)
ALERT = alert_entry(
    "OrderServiceHigh5xxRate",
    0.23,
    0.05,
    "order-service 5xx ratio is 23% over the last 5m (threshold 5%)",
    "2026-03-01T10:09:00Z",
)
SERIES = series_entry(
    "db_pool_active_connections",
    5.0,
    20,
    20,
    labels={"service": "order-service", "pool": "HikariPool-1"},
)
LATENCY = series_entry("http_request_duration_p99_ms", 162, 30210.5, 30040, unit="ms")
DOC = document_entry(
    "rb-db-pool",
    "Runbook: database connection pool exhaustion",
    source="runbook/db-connection-pool.md",
    chunk="Find what holds the connections.",
    score=1.0,
    relevance="high",
    deduped=False,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(True, "true", id="true"),
        pytest.param(False, "false", id="false"),
        pytest.param(0, "0", id="int-zero"),
        pytest.param(30000, "30000", id="int"),
        pytest.param(12.0, "12", id="integral-float"),
        pytest.param(-3.0, "-3", id="negative-integral-float"),
        pytest.param(0.23, "0.23", id="float"),
        pytest.param(0.1 + 0.2, "0.30000000000000004", id="float-repr"),
        pytest.param("order-service", "order-service", id="str"),
        pytest.param("", "", id="empty-str"),
        pytest.param(["a", 1], '["a",1]', id="list"),
        pytest.param({"k": "v", "n": 1.5}, '{"k":"v","n":1.5}', id="dict"),
        pytest.param({"服务": "订单"}, '{"服务":"订单"}', id="non-ascii"),
        pytest.param(None, "null", id="none"),
    ],
)
def test_refs_format_value(value: object, expected: str) -> None:
    assert format_value(value) == expected


def test_refs_log_text_exact() -> None:
    refs = build_evidence_refs("query_logs", {}, {"logs": [LOG], "total": 1, "truncated": False})
    assert refs[0] == {
        "raw_path": "logs[0]",
        "text": "2026-03-01T10:07:14Z ERROR order-service order-service-5f7b9c-2xkqz: "
        "HikariPool-1 - Connection is not available, request timed out after 30000ms.",
        "source_type": "log",
    }


def test_refs_log_text_leaves_out_absent_fields() -> None:
    entry = log_entry(LOG["message"], timestamp=LOG["timestamp"], instance=None)
    # A null field, as an entry that has not been validated may carry one.
    entry["level"] = None  # type: ignore[typeddict-item]
    refs = build_evidence_refs("query_logs", {}, {"logs": [entry], "total": 1})
    assert refs[0]["text"] == (
        "2026-03-01T10:07:14Z order-service: "
        "HikariPool-1 - Connection is not available, request timed out after 30000ms."
    )


def test_refs_alert_text_exact() -> None:
    refs = build_evidence_refs("query_metrics", {}, {"alerts": [ALERT], "series": []})
    assert refs[0] == {
        "raw_path": "alerts[0]",
        "text": "OrderServiceHigh5xxRate service=order-service severity=critical state=firing "
        "value=0.23 threshold=0.05 active_at=2026-03-01T10:09:00Z: "
        "order-service 5xx ratio is 23% over the last 5m (threshold 5%)",
        "source_type": "alert",
    }


def test_refs_alert_text_leaves_out_absent_fields_with_their_key() -> None:
    entry = AlertEntry(alert_name="A", service="s", state="resolved", value=20.0, threshold=None)
    refs = build_evidence_refs("query_metrics", {}, {"alerts": [entry], "series": []})
    assert refs[0]["text"] == "A service=s state=resolved value=20"


def test_refs_series_text_exact_with_sorted_labels() -> None:
    refs = build_evidence_refs("query_metrics", {}, {"alerts": [], "series": [SERIES, LATENCY]})
    assert refs[0] == {
        "raw_path": "series[0]",
        "text": "db_pool_active_connections{pool=HikariPool-1,service=order-service} "
        "min=5 max=20 last=20 points=36",
        "source_type": "metric",
    }
    assert refs[1]["text"] == (
        "http_request_duration_p99_ms{service=order-service} "
        "min=162ms max=30210.5ms last=30040ms points=36"
    )


def test_refs_series_text_without_labels_or_unit() -> None:
    entry = SeriesEntry(metric="up", min=0, max=1, last=1, points_count=3)
    refs = build_evidence_refs("query_metrics", {}, {"alerts": [], "series": [entry]})
    assert refs[0]["text"] == "up{} min=0 max=1 last=1 points=3"
    empty = SeriesEntry(metric="up", labels={}, last=0.5, unit="%")
    refs = build_evidence_refs("query_metrics", {}, {"alerts": [], "series": [empty]})
    assert refs[0]["text"] == "up{} last=0.5%"


def test_refs_document_text_exact() -> None:
    refs = build_evidence_refs("lookup_knowledge", {"query": "pool"}, {"documents": [DOC]})
    assert refs[0] == {
        "raw_path": "documents[0]",
        "text": "Runbook: database connection pool exhaustion (runbook/db-connection-pool.md): "
        "Find what holds the connections.",
        "source_type": "knowledge",
    }
    no_source = DocumentEntry(title="T", chunk="C")
    refs = build_evidence_refs("lookup_knowledge", {"query": "x"}, {"documents": [no_source]})
    assert refs[0]["text"] == "T: C"


def test_refs_summary_matches_contract_example() -> None:
    arguments: JSONObject = {
        "service": "order-service",
        "level": "ERROR",
        "start": "2026-03-01T10:00:00Z",
        "end": "2026-03-01T10:30:00Z",
        "query": None,
    }
    refs = build_evidence_refs(
        "query_logs", arguments, {"logs": [], "total": 0, "truncated": False}
    )
    assert refs == [
        {
            "raw_path": "summary",
            "text": "query_logs end=2026-03-01T10:30:00Z level=ERROR service=order-service "
            "start=2026-03-01T10:00:00Z matched 0 of 0 (complete)",
            "source_type": "summary",
        }
    ]


def test_refs_summary_logs_truncated_by_limit() -> None:
    output = LogsResult(logs=[LOG, LOG], total=10, truncated=True)
    refs = build_evidence_refs("query_logs", {"limit": 2, "service": "order-service"}, output)
    assert [r["raw_path"] for r in refs] == ["logs[0]", "logs[1]", "summary"]
    assert (
        refs[-1]["text"] == "query_logs limit=2 service=order-service matched 2 of 10 (truncated)"
    )


def test_refs_summary_truncated_when_a_field_was_capped() -> None:
    output = LogsResult(logs=[LOG], total=1, truncated=True)
    refs = build_evidence_refs("query_logs", {}, output)
    assert refs[-1]["text"] == "query_logs matched 1 of 1 (truncated)"


def test_refs_metrics_refs_order_and_count() -> None:
    output = MetricsResult(alerts=[ALERT, ALERT], series=[SERIES])
    refs = build_evidence_refs("query_metrics", {"service": "order-service"}, output)
    assert [(r["raw_path"], r["source_type"]) for r in refs] == [
        ("alerts[0]", "alert"),
        ("alerts[1]", "alert"),
        ("series[0]", "metric"),
        ("summary", "summary"),
    ]
    assert refs[-1]["text"] == (
        "query_metrics service=order-service alerts 2 of 2, series 1 of 1 (complete)"
    )


def test_refs_metrics_summary_counts_alerts_and_series_against_their_totals() -> None:
    output = MetricsResult(alerts=[], series=[SERIES, SERIES], series_total=57)
    refs = build_evidence_refs("query_metrics", {"promql": "up"}, output)
    assert refs[-1]["text"] == "query_metrics promql=up alerts 0 of 0, series 2 of 57 (truncated)"


def test_refs_metrics_summary_of_nothing_found_says_zero_of_zero_for_both() -> None:
    refs = build_evidence_refs(
        "query_metrics", {"service": "x"}, MetricsResult(alerts=[], series=[])
    )
    assert refs == [
        {
            "raw_path": "summary",
            "text": "query_metrics service=x alerts 0 of 0, series 0 of 0 (complete)",
            "source_type": "summary",
        }
    ]


def test_refs_knowledge_summary_counts_documents() -> None:
    refs = build_evidence_refs(
        "lookup_knowledge", {"query": "db pool", "top_k": 3}, {"documents": [DOC, DOC]}
    )
    assert refs[-1]["text"] == "lookup_knowledge query=db pool top_k=3 matched 2 of 2 (complete)"


def test_refs_summary_formats_argument_values() -> None:
    refs = build_evidence_refs(
        "query_logs", {"limit": 20.0, "query": "a b"}, {"logs": [], "total": 0}
    )
    assert refs[-1]["text"] == "query_logs limit=20 query=a b matched 0 of 0 (complete)"


@pytest.mark.parametrize(
    ("tool_name", "output"),
    [
        pytest.param("get_current_time", {"now": "2026-03-01T10:30:00Z"}, id="helper"),
        pytest.param("list_services", {"services": ["a"]}, id="unknown"),
        pytest.param("query_logs", None, id="failed-call"),
    ],
)
def test_refs_non_evidence_gives_no_refs(
    tool_name: str, output: Mapping[str, object] | None
) -> None:
    assert build_evidence_refs(tool_name, {}, output) == []
