from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import TypeAdapter

from evidence.environment import (
    Environment,
    EnvironmentFileError,
    default_environment,
    load_environment,
)
from evidence.sample import SampleBackend
from state.records import DocumentEntry, LogEntry
from tests.records import alert_entry, document_entry, log_entry, series_entry
from tools.backend import BackendError, EvidenceBackend, LogsOutput


def _log(ts: str, level: str, service: str, message: str, instance: str = "i-1") -> LogEntry:
    return log_entry(message, timestamp=ts, level=level, service=service, instance=instance)


# Deliberately not in time order: results must follow environment order, not timestamps.
LOGS = [
    _log("2026-03-01T10:05:00Z", "ERROR", "order-service", "Connection is not available"),
    _log("2026-03-01T10:00:00Z", "INFO", "order-service", "POST /api/orders completed"),
    _log("2026-03-01T10:10:00Z", "error", "order-service", "POST /api/orders failed: status=500"),
    _log("2026-03-01T10:02:00Z", "WARN", "inventory-service", "Slow query on stock"),
    _log("2026-03-01T10:20:00Z", "ERROR", "order-service-canary", "connection reset"),
    _log("2026-03-01T09:50:00Z", "ERROR", "order-service", "CONNECTION refused"),
]

ALERTS = [
    alert_entry("OrderServiceHigh5xxRate", 0.23, 0.05, "5xx high", "2026-03-01T10:09:00Z"),
    alert_entry(
        "PaymentServiceLatency",
        120,
        500,
        "latency back to normal",
        "2026-03-01T08:00:00Z",
        service="payment-service",
        severity="warning",
        state="resolved",
    ),
    alert_entry("OrderServiceDBPoolSaturated", 20, 18, "pool full", "2026-03-01T10:08:00Z"),
]

SERIES = [
    series_entry("http_server_error_ratio", 0.001, 0.27, 0.23),
    series_entry(
        "cpu_usage_percent", 10.0, 20.5, 12.0, labels={"service": "payment-service"}, unit="%"
    ),
    series_entry(
        "db_pool_active_connections",
        5,
        20,
        20,
        labels={"service": "order-service", "pool": "HikariPool-1"},
    ),
    series_entry("queue_depth", 0, 1, 0, labels={"service": "checkout-worker"}, points_count=3),
]

DOCUMENTS = [
    document_entry("d-gateway", "Gateway 502", source="runbook/gw.md", chunk="upstream"),
    document_entry(
        "d-pool", "Pool exhaustion", source="runbook/pool.md", chunk="HikariPool timeout"
    ),
    document_entry(
        "d-pool2", "Postmortem", source="pm/1.md", chunk="pool exhaustion and hikaripool"
    ),
    document_entry("d-none", "Payments", source="runbook/pay.md", chunk="card provider"),
    document_entry("d-pool3", "Pool sizing", source="runbook/size.md", chunk="maximumPoolSize"),
]

ENV = Environment(
    now="2026-03-01T10:30:00Z", logs=LOGS, alerts=ALERTS, series=SERIES, documents=DOCUMENTS
)


@pytest.fixture
def backend() -> SampleBackend:
    return SampleBackend(ENV)


def _messages(result: LogsOutput) -> list[str]:
    return [entry["message"] for entry in result["logs"]]


# --- query_logs -------------------------------------------------------------------------------


def test_sample_query_logs_no_filter_returns_environment_order(backend: SampleBackend) -> None:
    result = backend.query_logs()
    assert _messages(result) == [entry["message"] for entry in LOGS]
    assert result["total"] == 6
    assert result["truncated"] is False


def test_sample_query_logs_service_is_exact(backend: SampleBackend) -> None:
    result = backend.query_logs(service="order-service")
    assert [e["service"] for e in result["logs"]] == ["order-service"] * 4
    assert backend.query_logs(service="order")["total"] == 0
    assert backend.query_logs(service="ORDER-SERVICE")["total"] == 0


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        pytest.param(
            {"level": "error"},
            [
                "Connection is not available",
                "POST /api/orders failed: status=500",
                "connection reset",
                "CONNECTION refused",
            ],
            id="level_is_case_insensitive",
        ),
        pytest.param({"level": "ERR"}, [], id="level_is_exact"),
        pytest.param(
            {"query": "connection"},
            ["Connection is not available", "connection reset", "CONNECTION refused"],
            id="query_is_case_insensitive",
        ),
        pytest.param(
            {"query": "status=500"},
            ["POST /api/orders failed: status=500"],
            id="query_is_substring",
        ),
    ],
)
def test_sample_query_logs_level_and_query_filters(
    backend: SampleBackend, query: dict[str, Any], expected: list[str]
) -> None:
    result = backend.query_logs(**query)
    assert _messages(result) == expected
    assert result["total"] == len(expected)


@pytest.mark.parametrize(
    ("window", "positions"),
    [
        pytest.param(
            {"start": "2026-03-01T10:00:00Z", "end": "2026-03-01T10:10:00Z"},
            [0, 1, 2, 3],
            id="is_inclusive",
        ),
        # 18:05+08:00 is 10:05Z: only the 10:05, 10:10 and 10:20 lines are at or after it.
        pytest.param(
            {"start": "2026-03-01T18:05:00+08:00"},
            [0, 2, 4],
            id="compares_datetimes_across_offsets",
        ),
        pytest.param({"end": "2026-03-01T09:59:59Z"}, [5], id="end_alone"),
    ],
)
def test_sample_query_logs_window(
    backend: SampleBackend, window: dict[str, Any], positions: list[int]
) -> None:
    """The window keeps the entries (``LOGS`` positions) whose timestamps lie in it."""
    assert backend.query_logs(**window)["logs"] == [LOGS[i] for i in positions]


def test_sample_query_logs_filters_combine(backend: SampleBackend) -> None:
    result = backend.query_logs(
        service="order-service",
        level="ERROR",
        query="connection",
        start="2026-03-01T10:00:00Z",
    )
    assert _messages(result) == ["Connection is not available"]
    assert result["total"] == 1


def test_sample_query_logs_limit_sets_total_and_truncated(backend: SampleBackend) -> None:
    result = backend.query_logs(level="ERROR", limit=2)
    assert _messages(result) == [
        "Connection is not available",
        "POST /api/orders failed: status=500",
    ]
    assert result["total"] == 4
    assert result["truncated"] is True
    exact = backend.query_logs(level="ERROR", limit=4)
    assert exact["total"] == 4
    assert exact["truncated"] is False


def test_sample_query_logs_limit_is_clamped() -> None:
    many = [
        _log(f"2026-03-01T10:{i // 60:02d}:{i % 60:02d}Z", "INFO", "a", f"m{i}") for i in range(150)
    ]
    backend = SampleBackend({"logs": many})
    assert len(backend.query_logs(limit=0)["logs"]) == 1
    clamped = backend.query_logs(limit=500)
    assert len(clamped["logs"]) == 100
    assert clamped["total"] == 150
    assert clamped["truncated"] is True


def test_sample_query_logs_returns_copies(backend: SampleBackend) -> None:
    backend.query_logs()["logs"][0]["message"] = "changed"
    assert backend.query_logs()["logs"][0]["message"] == "Connection is not available"


def test_sample_query_logs_bad_timestamp_raises_backend_error(backend: SampleBackend) -> None:
    with pytest.raises(BackendError, match="start"):
        backend.query_logs(start="yesterday")


# --- query_metrics ----------------------------------------------------------------------------


def test_sample_query_metrics_service_filters_alerts_and_series_label(
    backend: SampleBackend,
) -> None:
    result = backend.query_metrics(service="order-service")
    assert [a["alert_name"] for a in result["alerts"]] == [
        "OrderServiceHigh5xxRate",
        "OrderServiceDBPoolSaturated",
    ]
    assert [s["metric"] for s in result["series"]] == [
        "http_server_error_ratio",
        "db_pool_active_connections",
    ]


def test_sample_query_metrics_alert_is_case_insensitive_substring(backend: SampleBackend) -> None:
    result = backend.query_metrics(alert="dbpool")
    assert [a["alert_name"] for a in result["alerts"]] == ["OrderServiceDBPoolSaturated"]


def test_sample_query_metrics_returns_alerts_whatever_their_state(backend: SampleBackend) -> None:
    result = backend.query_metrics(service="payment-service")
    assert [(a["alert_name"], a["state"]) for a in result["alerts"]] == [
        ("PaymentServiceLatency", "resolved")
    ]


def test_sample_query_metrics_promql_selects_series_by_metric_name(backend: SampleBackend) -> None:
    result = backend.query_metrics(promql='max_over_time(cpu_usage_percent{service="x"}[5m])')
    assert [s["metric"] for s in result["series"]] == ["cpu_usage_percent"]
    # Alerts are not filtered by promql.
    assert len(result["alerts"]) == 3


def test_sample_query_metrics_promql_and_service_combine(backend: SampleBackend) -> None:
    result = backend.query_metrics(
        service="order-service", promql="http_server_error_ratio or cpu_usage_percent"
    )
    assert [s["metric"] for s in result["series"]] == ["http_server_error_ratio"]
    assert [a["service"] for a in result["alerts"]] == ["order-service", "order-service"]


def test_sample_query_metrics_window_filters_nothing(backend: SampleBackend) -> None:
    result = backend.query_metrics(start="2026-03-01T10:29:00Z", end="2026-03-01T10:30:00Z")
    assert len(result["alerts"]) == 3
    assert len(result["series"]) == 4


# --- lookup_knowledge -------------------------------------------------------------------------


def test_sample_lookup_knowledge_ranks_titles_by_bm25(backend: SampleBackend) -> None:
    result = backend.lookup_knowledge(query="pool exhaustion", top_k=10)
    docs = result["documents"]
    # "Postmortem" says "pool exhaustion" only in its body, which is not ranked.
    assert [d["doc_id"] for d in docs] == ["d-pool", "d-pool3"]
    assert docs[0]["score"] > docs[1]["score"] > 0
    assert [d["relevance"] for d in docs] == ["high", "medium"]
    assert set(docs[0]) == {"doc_id", "title", "source", "chunk", "score", "relevance"}


def test_sample_lookup_knowledge_does_not_rank_body_text(backend: SampleBackend) -> None:
    assert backend.lookup_knowledge(query="card provider")["documents"] == []
    assert [d["doc_id"] for d in backend.lookup_knowledge(query="payments")["documents"]] == [
        "d-none"
    ]


def test_sample_lookup_knowledge_ranks_markdown_headings_of_the_chunk() -> None:
    docs = [
        DocumentEntry(doc_id="d1", title="Database runbook", chunk="# Intro\nnothing"),
        DocumentEntry(doc_id="d2", title="Storage runbook", chunk="## Disk full\nFree space."),
    ]
    found = SampleBackend({"documents": docs}).lookup_knowledge(query="disk full")["documents"]
    assert [d["doc_id"] for d in found] == ["d2"]


def test_sample_lookup_knowledge_is_the_same_in_chinese_and_english(
    backend: SampleBackend,
) -> None:
    chinese = backend.lookup_knowledge(query="连接池耗尽", top_k=10)["documents"]
    english = backend.lookup_knowledge(query="connection pool exhaustion", top_k=10)["documents"]
    assert [d["doc_id"] for d in chinese] == [d["doc_id"] for d in english] == ["d-pool", "d-pool3"]
    assert [d["score"] for d in chinese] == [d["score"] for d in english]


def test_sample_lookup_knowledge_ties_keep_environment_order() -> None:
    docs = [DocumentEntry(doc_id=f"d{i}", title="Pool runbook", chunk="x") for i in range(3)]
    found = SampleBackend({"documents": docs}).lookup_knowledge(query="POOL", top_k=10)
    assert [d["doc_id"] for d in found["documents"]] == ["d0", "d1", "d2"]


def test_sample_lookup_knowledge_leaves_out_unmatched_and_respects_top_k(
    backend: SampleBackend,
) -> None:
    docs = backend.lookup_knowledge(query="upstream gateway pool", top_k=2)["documents"]
    # "Gateway 502" has the rarer term; the two pool titles tie and keep environment order.
    assert [d["doc_id"] for d in docs] == ["d-gateway", "d-pool"]
    assert backend.lookup_knowledge(query="kafka")["documents"] == []
    assert backend.lookup_knowledge(query="   ")["documents"] == []


def test_sample_lookup_knowledge_low_relevance_and_clamps() -> None:
    docs = [DocumentEntry(doc_id=f"d{i}", title=f"alpha t{i}", chunk="x") for i in range(12)]
    backend = SampleBackend({"documents": docs})
    result = backend.lookup_knowledge(query="alpha beta gamma delta", top_k=50)["documents"]
    assert len(result) == 10
    assert result[0]["relevance"] == "low"
    assert len(backend.lookup_knowledge(query="alpha", top_k=0)["documents"]) == 1


def test_sample_lookup_knowledge_counts_repeated_terms_once(backend: SampleBackend) -> None:
    once = backend.lookup_knowledge(query="pool payments")["documents"]
    twice = backend.lookup_knowledge(query="pool POOL payments")["documents"]
    assert once == twice
    assert once[0]["relevance"] == "medium"


# --- get_current_time and services ------------------------------------------------------------


def test_sample_get_current_time_returns_environment_now(backend: SampleBackend) -> None:
    assert backend.get_current_time() == {"now": "2026-03-01T10:30:00Z"}
    assert backend.get_current_time(timezone="Asia/Shanghai") == {
        "now": "2026-03-01T18:30:00+08:00"
    }
    assert backend.get_current_time(timezone="UTC") == {"now": "2026-03-01T10:30:00Z"}


def test_sample_get_current_time_without_now_is_real_utc_time() -> None:
    now = SampleBackend({}).get_current_time()["now"]
    parsed = datetime.fromisoformat(now.replace("Z", "+00:00"))
    assert abs(datetime.now(UTC) - parsed) < timedelta(minutes=1)


def test_sample_get_current_time_unknown_timezone_raises(backend: SampleBackend) -> None:
    with pytest.raises(BackendError, match="Mars/Olympus"):
        backend.get_current_time(timezone="Mars/Olympus")


def test_sample_services_lists_every_known_service_sorted(backend: SampleBackend) -> None:
    assert backend.services() == [
        "checkout-worker",
        "inventory-service",
        "order-service",
        "order-service-canary",
        "payment-service",
    ]


def test_sample_backend_satisfies_protocol(backend: SampleBackend) -> None:
    typed: EvidenceBackend = backend  # checked by mypy
    assert typed.services() == backend.services()


# --- bundled environment ----------------------------------------------------------------------


def test_sample_default_environment_has_the_incident() -> None:
    env = default_environment()
    backend = SampleBackend(env)
    assert env["now"] == "2026-03-01T10:30:00Z"
    assert backend.services() == [
        "api-gateway",
        "inventory-service",
        "order-service",
        "payment-service",
    ]

    logs = env["logs"]
    assert len(logs) >= 40
    stamps = [datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")) for e in logs]
    assert min(stamps) >= datetime(2026, 3, 1, 9, 55, tzinfo=UTC)
    assert max(stamps) <= datetime(2026, 3, 1, 10, 30, tzinfo=UTC)
    assert {e["level"] for e in logs} >= {"INFO", "WARN", "ERROR"}
    assert len({e["instance"] for e in logs}) >= 6

    errors = backend.query_logs(service="order-service", level="ERROR", limit=100)
    assert errors["total"] >= 5
    assert (
        backend.query_logs(query="Connection is not available, request timed out after 30000ms")[
            "total"
        ]
        >= 1
    )
    assert backend.query_logs(query="status=500", service="order-service")["total"] >= 1
    assert backend.query_logs(query="CannotAcquireConnectionException")["total"] >= 1
    assert (
        backend.query_logs(service="inventory-service", level="WARN", query="stock")["total"] >= 2
    )
    first_error = errors["logs"][0]["timestamp"]
    assert first_error.startswith("2026-03-01T10:07")
    gateway = backend.query_logs(service="api-gateway", level="ERROR", limit=100)["logs"]
    assert any("502" in e["message"] for e in gateway)
    assert any("504" in e["message"] for e in gateway)


def test_sample_default_environment_payment_service_is_healthy() -> None:
    backend = SampleBackend(default_environment())
    payment_logs = backend.query_logs(service="payment-service", limit=100)["logs"]
    assert payment_logs
    assert {e["level"] for e in payment_logs} == {"INFO"}
    metrics = backend.query_metrics(service="payment-service")
    assert [a for a in metrics["alerts"] if a["state"] == "firing"] == []
    assert metrics["series"]


ENTRY_FIELDS: dict[Literal["alerts", "series"], str] = {
    "alerts": "alert_name service severity state value threshold summary active_at",
    "series": "metric labels points_count min max last unit points",
}
"""The fields every entry of a table of the bundled environment has, and no other."""


def test_sample_default_environment_alerts_and_documents() -> None:
    env = default_environment()
    alerts = {a["alert_name"]: a for a in env["alerts"]}
    high = alerts["OrderServiceHigh5xxRate"]
    assert (high["service"], high["state"], high["value"], high["threshold"]) == (
        "order-service",
        "firing",
        0.23,
        0.05,
    )
    assert alerts["OrderServiceDBPoolSaturated"]["state"] == "firing"
    resolved = [a for a in env["alerts"] if a["state"] == "resolved"]
    assert resolved and all(a["service"] != "order-service" for a in resolved)
    for table, fields in ENTRY_FIELDS.items():
        for entry in env[table]:
            assert set(entry) == set(fields.split()), (table, entry)
    for series in env["series"]:
        assert series["labels"]["service"]
    docs = env["documents"]
    assert len(docs) >= 5
    assert sum(d["source"].startswith("runbook/") for d in docs) >= 4
    assert any(d["source"].startswith("postmortem/") for d in docs)
    assert "runbook/db-connection-pool.md" in {d["source"] for d in docs}
    best = SampleBackend(env).lookup_knowledge(query="HikariPool connection pool exhaustion")
    assert best["documents"][0]["source"] == "runbook/db-connection-pool.md"


# --- load_environment -------------------------------------------------------------------------


def _write(tmp_path: Path, name: str, content: object) -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def test_sample_load_environment_accepts_bare_environment(tmp_path: Path) -> None:
    path = _write(tmp_path, "env.json", {"logs": LOGS[:1], "now": "2026-03-01T10:30:00Z"})
    assert load_environment(path) == {"logs": LOGS[:1], "now": "2026-03-01T10:30:00Z"}


def test_sample_load_environment_accepts_scenario(tmp_path: Path) -> None:
    scenario = {"id": "s", "question": "q", "environment": {"alerts": ALERTS}, "expect": {}}
    assert load_environment(str(_write(tmp_path, "s.json", scenario))) == {"alerts": ALERTS}


def test_sample_load_environment_missing_file(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentFileError, match="does not exist") as info:
        load_environment(tmp_path / "nope.json")
    assert "\n" not in str(info.value)


def test_sample_load_environment_bad_json_reports_position(tmp_path: Path) -> None:
    path = _write(tmp_path, "bad.json", '{\n  "logs": [,]\n}')
    with pytest.raises(EnvironmentFileError, match=r"not valid JSON.*line 2 column 12") as info:
        load_environment(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param([1, 2], "must contain a JSON object", id="array"),
        pytest.param({"question": "q"}, "neither a scenario", id="unknown-shape"),
        pytest.param({"logs": [], "extra": 1}, "neither a scenario", id="unknown-key"),
        pytest.param({"environment": []}, "must be a JSON object", id="env-not-object"),
        pytest.param({"environment": {"metrics": []}}, "unknown key", id="env-unknown-key"),
        pytest.param({"logs": {"a": 1}}, "logs must be a list", id="logs-not-list"),
        pytest.param({"logs": ["x"]}, r"logs\[0\] must be an object", id="log-not-object"),
        pytest.param(
            {"logs": [{"timestamp": "2026-03-01T10:00:00Z", "level": "INFO", "service": "a"}]},
            r"logs\[0\] is missing required field 'message'",
            id="log-without-message",
        ),
        pytest.param(
            {"logs": [_log("ten past ten", "INFO", "a", "m")]},
            r"logs\[0\]\.timestamp",
            id="log-bad-timestamp",
        ),
        pytest.param(
            {"alerts": [{"alert_name": "A", "service": "s"}]}, "'state'", id="alert-no-state"
        ),
        pytest.param({"series": [{"labels": {}}]}, "'metric'", id="series-no-metric"),
        pytest.param(
            {"series": [{"metric": "m", "labels": ["a"]}]}, "labels must be an object", id="labels"
        ),
        pytest.param({"documents": [{"doc_id": "d", "title": "t"}]}, "'chunk'", id="doc-no-chunk"),
        pytest.param({"now": "soon"}, r"now", id="bad-now"),
    ],
)
def test_sample_load_environment_rejects_bad_content(
    tmp_path: Path, content: object, expected: str
) -> None:
    path = _write(tmp_path, "bad.json", content)
    with pytest.raises(EnvironmentFileError, match=expected) as info:
        load_environment(path)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_sample_load_environment_names_scenario_entries(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "s.json", {"environment": {"logs": [{"timestamp": "2026-03-01T10:00:00Z"}]}}
    )
    with pytest.raises(
        EnvironmentFileError, match=r"environment\.logs\[0\] is missing required field 'level'"
    ):
        load_environment(path)


def test_environment_load_gives_records(tmp_path: Path) -> None:
    log = dict(LOGS[0], instance=None, trace_id="abc")
    series = dict(SERIES[2], labels=None)
    path = _write(tmp_path, "env.json", {"logs": [log], "series": [series], "alerts": None})

    env = load_environment(path)

    assert env == {
        "logs": [{k: v for k, v in LOGS[0].items() if k != "instance"}],
        "series": [{k: v for k, v in SERIES[2].items() if k != "labels"}],
    }
    assert isinstance(env["series"][0]["min"], float)
    assert TypeAdapter(Environment).validate_python(env, strict=True) == env
    assert TypeAdapter(Environment).validate_python(default_environment(), strict=True)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param(
            {"logs": [dict(LOGS[0], level=3)]},
            "logs[0].level must be a string, got a number",
            id="level-number",
        ),
        pytest.param(
            {"alerts": [dict(ALERTS[0], state=True)]},
            "alerts[0].state must be a string, got a boolean",
            id="state-boolean",
        ),
        pytest.param(
            {"series": [dict(SERIES[0], points_count="36")]},
            "series[0].points_count must be an integer, got a string",
            id="count-string",
        ),
        pytest.param(
            {"environment": {"documents": [dict(DOCUMENTS[0], chunk=["a"])]}},
            "environment.documents[0].chunk must be a string, got an array",
            id="chunk-array",
        ),
    ],
)
def test_environment_values_are_not_coerced(tmp_path: Path, content: object, expected: str) -> None:
    path = _write(tmp_path, "bad.json", content)

    with pytest.raises(EnvironmentFileError) as info:
        load_environment(path)

    assert str(info.value) == f"{path}: {expected}"
