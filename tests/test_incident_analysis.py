"""The incident analysis on small synthetic incidents: each signal, onset order, propagation with
and without traces, background noise, changes, windows, caps and ambiguity."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from analysis.changes import change_category
from analysis.incident import IncidentInputs, IncidentReport, analyze, default_windows, parse_time
from state.records import LogEntry, SeriesEntry, SpanEntry

T0 = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)
"""Baseline 09:00-10:00, incident 10:00-10:15."""


def _at(minute: float) -> str:
    return (T0 + timedelta(minutes=minute)).isoformat().replace("+00:00", "Z")


def _windows() -> IncidentInputs:
    return IncidentInputs(
        baseline_start=_at(0), baseline_end=_at(60), incident_start=_at(60), incident_end=_at(75)
    )


def _log(minute: float, service: str, message: str, level: str = "INFO") -> LogEntry:
    return LogEntry(timestamp=_at(minute), level=level, service=service, message=message)


def _traffic(service: str, start: int = 0, end: int = 75) -> list[LogEntry]:
    """One INFO line a minute: the coverage every test shares."""
    return [
        _log(m + 0.5, service, f"GET /api/items/{m} completed status=200 in 12ms")
        for m in range(start, end)
    ]


def _series(metric: str, service: str, values: list[float]) -> SeriesEntry:
    start = int(T0.timestamp())
    points = [[float(start + 60 * i), value] for i, value in enumerate(values)]
    return SeriesEntry(metric=metric, labels={"service": service}, points=points)


_WORDED: frozenset[str] = frozenset({"per"})
"""Phrase values that are worded rather than quoted (the English says ``/min``, ``per request``)."""


def _assert_phrases_state_their_texts(report: IncidentReport) -> None:
    """Each signal's, mechanism's and reason's phrase: its values as its English text writes them.

    A suspect's mechanism is its top signal's phrase.
    """
    kinds: set[str] = set()
    for suspect in report["suspects"]:
        assert suspect["mechanism_phrase"] == suspect["signals"][0]["phrase"]
        pairs = [(signal["detail"], signal["phrase"]) for signal in suspect["signals"]]
        if "why_not_first" in suspect:
            pairs.append((suspect["why_not_first"], suspect["why_not_first_phrase"]))
        for text, phrase in pairs:
            kinds.add(phrase["kind"])
            for key, value in phrase["values"].items():
                for item in [value] if isinstance(value, str) else value:
                    assert key in _WORDED or item in text, (key, item, text)
    assert kinds


def test_incident_error_surge_names_the_service_and_quotes_its_lines() -> None:
    logs = _traffic("checkout") + _traffic("catalog")
    logs += [_log(m, "checkout", "Payment gateway timeout after 3000ms", "ERROR") for m in (10, 40)]
    logs += [
        _log(60 + m, "checkout", "Payment gateway timeout after 3000ms", "ERROR") for m in range(12)
    ]
    report = analyze(IncidentInputs(**_windows(), logs=logs))
    assert report["root_cause"] is not None
    assert report["root_cause"]["service"] == "checkout"
    surge = [s for s in report["root_cause"]["signals"] if s["kind"] == "error_surge"]
    assert surge and surge[0]["baseline"] is not None and surge[0]["incident"] is not None
    assert surge[0]["incident"] > surge[0]["baseline"]
    pointer = surge[0]["evidence"][0]
    assert pointer["kind"] == "log" and pointer["service"] == "checkout"
    assert pointer["message"] == "Payment gateway timeout after 3000ms"
    assert pointer["timestamp"] == _at(60)
    assert report["root_cause"]["onset"] == _at(60)
    assert surge[0]["phrase"]["values"]["level"] == "error"
    _assert_phrases_state_their_texts(report)


def test_incident_background_noise_is_not_a_suspect() -> None:
    noisy = [
        _log(m + 0.2, "legacy-batch", "Connection reset by peer while polling queue", "ERROR")
        for m in range(75)
    ]
    logs = _traffic("legacy-batch") + _traffic("search") + noisy
    logs += [
        _log(60 + m, "search", "IndexReadException: shard 3 unavailable", "ERROR") for m in range(8)
    ]
    report = analyze(IncidentInputs(**_windows(), logs=logs))
    services = [s["service"] for s in report["suspects"]]
    assert "legacy-batch" not in services
    assert services[0] == "search"


def _served(service: str, minutes: list[float], tag: str) -> list[SpanEntry]:
    """One request ``service`` served at each minute given (a root span)."""
    return [
        SpanEntry(
            trace_id=f"{tag}{i:030x}",
            span_id=f"{tag}{i:014x}",
            service=service,
            operation="GET /seats",
            kind="server",
            start=_at(minute),
            duration_ms=20.0,
            status="unset",
        )
        for i, minute in enumerate(minutes)
    ]


def _load_tracking_warnings() -> tuple[list[LogEntry], list[SpanEntry]]:
    """``seats`` warns on one request in two, and serves five times the requests in the
    incident; ``billing`` serves the same load and logs three times its share of errors."""
    base = [m * 2.0 for m in range(30)]
    busy = [60 + m * 0.2 for m in range(75)]
    logs = _traffic("seats") + _traffic("billing")
    logs += [
        _log(minute + 0.01, "seats", "Search found nothing to offer for this query", "WARN")
        for minute in base[::2] + busy[::2]
    ]
    steady = [m * 1.0 for m in range(75)]
    logs += [
        _log(minute + 0.02, "billing", "Invoice rounding mismatch, order rejected", "ERROR")
        for minute in steady[:60:6] + steady[60::2]
    ]
    spans = _served("seats", base + busy, "a") + _served("billing", steady, "b")
    return logs, spans


def test_incident_lines_that_track_the_traffic_are_not_a_surge() -> None:
    logs, spans = _load_tracking_warnings()
    report = analyze(IncidentInputs(**_windows(), logs=logs, spans=spans))
    assert "seats" not in [s["service"] for s in report["suspects"]]
    assert report["root_cause"] is not None
    assert report["root_cause"]["service"] == "billing"
    surge = [s for s in report["root_cause"]["signals"] if s["kind"] == "error_surge"][0]
    assert "per request" in surge["detail"] and "60 -> 15 requests served" in surge["detail"]
    assert surge["baseline"] == round(10 / 60, 4) and surge["incident"] == round(8 / 15, 4)
    # The same lines without the requests served: per minute the warnings rose fivefold.
    report = analyze(IncidentInputs(**_windows(), logs=logs))
    assert "seats" in [s["service"] for s in report["suspects"]]


def test_incident_new_template_is_a_signal_with_its_template() -> None:
    logs = _traffic("ledger")
    logs += [
        _log(61 + m, "ledger", f"Duplicate key violation for entry id={1000 + m}", "ERROR")
        for m in range(4)
    ]
    report = analyze(IncidentInputs(**_windows(), logs=logs))
    suspect = report["suspects"][0]
    new = [s for s in suspect["signals"] if s["kind"] == "new_template"]
    assert new, suspect["signals"]
    assert "Duplicate key violation" in new[0]["detail"]
    assert new[0]["baseline"] == 0
    assert new[0]["evidence"][0]["message"] == "Duplicate key violation for entry id=1000"


def test_incident_series_signal_has_numbers_and_onset() -> None:
    cpu = [0.2 + 0.01 * (i % 3) for i in range(60)] + [0.21, 0.22, 0.2, 0.95, 0.96] + [0.97] * 10
    report = analyze(
        IncidentInputs(**_windows(), series=[_series("container_cpu_usage_ratio", "render", cpu)])
    )
    suspect = report["suspects"][0]
    signal = suspect["signals"][0]
    assert signal["kind"] == "cpu"
    assert signal["baseline"] == 0.21 and signal["incident"] == 0.97
    assert signal["onset"] == _at(63)
    assert signal["evidence"][0]["metric"] == "container_cpu_usage_ratio"
    assert [_at(63), 0.95] in [
        [datetime.fromtimestamp(p[0], UTC).isoformat().replace("+00:00", "Z"), p[1]]
        for p in signal["evidence"][0]["points"]
    ]


def test_incident_small_error_ratio_change_is_not_a_signal() -> None:
    ratio = [0.0] * 60 + [0.002] * 15
    report = analyze(
        IncidentInputs(**_windows(), series=[_series("http_error_ratio", "payments", ratio)])
    )
    assert report["suspects"] == []
    assert report["root_cause"] is None and report["ambiguity"]


def test_incident_propagation_from_logs_earliest_callee_is_the_cause() -> None:
    logs = _traffic("frontend") + _traffic("orders") + _traffic("stock")
    logs += [_log(62 + m, "stock", "Lock wait timeout on table stock", "ERROR") for m in range(10)]
    logs += [
        _log(64 + m, "orders", "call to stock failed: upstream timeout", "ERROR") for m in range(10)
    ]
    logs += [
        _log(65 + m, "frontend", "request to orders failed with 502", "ERROR") for m in range(10)
    ]
    report = analyze(IncidentInputs(**_windows(), logs=logs))
    assert report["root_cause"] is not None
    assert report["root_cause"]["service"] == "stock"
    assert set(report["root_cause"]["explains"]) == {"orders", "frontend"}
    edges = {(e["caller"], e["callee"], e["source"]) for e in report["edges"]}
    assert ("orders", "stock", "logs") in edges
    runner = {s["service"]: s for s in report["suspects"]}["orders"]
    assert runner["explained_by"] == ["stock"]
    assert "stock" in runner.get("why_not_first", "")


def test_incident_later_callee_does_not_explain_its_caller() -> None:
    logs = _traffic("orders") + _traffic("stock")
    logs += [
        _log(60 + m, "orders", "NullPointerException in OrderMapper", "ERROR") for m in range(12)
    ]
    logs += [
        _log(70 + m, "stock", "Deadlock found when trying to get lock", "ERROR") for m in range(5)
    ]
    report = analyze(IncidentInputs(**_windows(), logs=logs, dependencies=[["orders", "stock"]]))
    by_service = {s["service"]: s for s in report["suspects"]}
    assert by_service["orders"]["explained_by"] == []
    assert report["suspects"][0]["service"] == "orders"
    assert ("orders", "stock", "config") in {
        (e["caller"], e["callee"], e["source"]) for e in report["edges"]
    }


def _trace_spans(minute: float, index: int, slow_ms: float) -> list[SpanEntry]:
    trace = f"{index:032x}"
    start = _at(minute)
    return [
        SpanEntry(
            trace_id=trace,
            span_id=f"{index:08x}0001",
            service="gateway",
            operation="GET /",
            kind="server",
            start=start,
            duration_ms=30 + slow_ms,
            status="unset",
        ),
        SpanEntry(
            trace_id=trace,
            span_id=f"{index:08x}0002",
            parent_span_id=f"{index:08x}0001",
            service="cart",
            operation="getCart",
            kind="server",
            start=start,
            duration_ms=20 + slow_ms,
            status="unset",
        ),
        SpanEntry(
            trace_id=trace,
            span_id=f"{index:08x}0003",
            parent_span_id=f"{index:08x}0002",
            service="pricing",
            operation="price",
            kind="server",
            start=start,
            duration_ms=10 + slow_ms,
            status="unset",
        ),
    ]


def test_incident_propagation_with_traces_deepest_slow_callee_is_the_cause() -> None:
    spans: list[SpanEntry] = []
    for i in range(40):
        spans += _trace_spans(i * 1.5, i, 0.0)
    for i in range(40, 60):
        spans += _trace_spans(60 + (i - 40) * 0.5, i, 400.0)
    report = analyze(IncidentInputs(**_windows(), spans=spans))
    assert report["root_cause"] is not None
    assert report["root_cause"]["service"] == "pricing"
    latency = report["root_cause"]["signals"][0]
    assert latency["kind"] == "trace_latency"
    assert latency["evidence"][0]["kind"] == "span"
    assert {("gateway", "cart", "traces"), ("cart", "pricing", "traces")} <= {
        (e["caller"], e["callee"], e["source"]) for e in report["edges"]
    }
    _assert_phrases_state_their_texts(report)


def test_incident_trace_errors_signal() -> None:
    spans: list[SpanEntry] = []
    for i in range(40):
        spans += _trace_spans(i * 1.5, i, 0.0)
    for i in range(40, 60):
        group = _trace_spans(60 + (i - 40) * 0.5, i, 0.0)
        group[2]["status"] = "error"
        spans += group
    report = analyze(IncidentInputs(**_windows(), spans=spans))
    assert report["root_cause"] is not None
    assert report["root_cause"]["service"] == "pricing"
    assert report["root_cause"]["signals"][0]["kind"] == "trace_errors"
    _assert_phrases_state_their_texts(report)


def test_incident_change_before_onset_is_listed_and_raises_the_suspect() -> None:
    logs = _traffic("inventory") + _traffic("orders")
    logs.append(_log(58.2, "inventory", "Started stock reconciliation job run=rec-7 (full table)"))
    logs += [
        _log(61 + m, "inventory", f"Slow query on table stock took {4000 + m}ms", "WARN")
        for m in range(10)
    ]
    logs += [
        _log(61 + m, "billing", f"Slow render of invoice took {4000 + m}ms", "WARN")
        for m in range(10)
    ]
    logs += _traffic("billing")
    report = analyze(IncidentInputs(**_windows(), logs=logs))
    assert [c["service"] for c in report["changes"]] == ["inventory"]
    assert report["changes"][0]["category"] == "job"
    assert report["changes"][0]["time"] == _at(58.2)
    suspect, other = report["suspects"][:2]
    assert (suspect["service"], other["service"]) == ("inventory", "billing")
    assert suspect["score"] > other["score"]
    assert suspect["signals"][0]["kind"] == "change"
    assert suspect["mechanism"].startswith("change: job")
    assert suspect["mechanism_phrase"]["values"]["time"] == _at(58.2)
    assert other["why_not_first_phrase"]["kind"] == "weaker_evidence"
    _assert_phrases_state_their_texts(report)


def test_incident_change_vocabulary_in_english_and_chinese() -> None:
    assert change_category("Deployed version 2.3.1 to production") == "deploy"
    assert change_category("服务发布完成，版本 v2.4") == "deploy"
    assert change_category("Pod restarted after OOMKilled") == "restart"
    assert change_category("配置变更: 关闭限流开关") == "config"
    assert change_category("feature flag new-checkout enabled") == "config"
    assert change_category("Running migration 0042_add_index") == "migration"
    assert change_category("开始全量对账任务") == "job"
    assert change_category("Lock wait timeout exceeded; try restarting transaction") is None
    assert change_category("GET /api/stations?startStation=shanghai") is None


def test_incident_default_windows_are_the_last_15_minutes_and_the_hour_before() -> None:
    logs = _traffic("api")
    report = analyze(IncidentInputs(logs=logs))
    windows = report["windows"]
    newest = parse_time(logs[-1]["timestamp"])
    assert newest is not None
    assert parse_time(windows["incident_end"]) == int(newest)
    assert parse_time(windows["incident_start"]) == int(newest) - 15 * 60
    assert parse_time(windows["baseline_start"]) == int(newest) - 75 * 60
    assert default_windows(T0) == (_at(-75), _at(-15), _at(-15), _at(0))


def test_incident_no_baseline_is_a_gap() -> None:
    logs = [_log(60 + m, "api", "Timeout calling db", "ERROR") for m in range(5)]
    report = analyze(IncidentInputs(**_windows(), logs=logs, gaps=["logs: file starts at 10:00"]))
    assert report["gaps"][0] == "logs: file starts at 10:00"
    assert any("no log line in the baseline" in gap for gap in report["gaps"])


def test_incident_caps_are_stated() -> None:
    logs = _traffic("api")
    report = analyze(IncidentInputs(**_windows(), logs=logs), {"max_logs": 10})
    assert report["counts"]["logs"] == 10
    assert any("75 lines given, the newest 10" in gap for gap in report["gaps"])


def test_incident_two_equal_independent_suspects_are_ambiguous() -> None:
    logs = _traffic("alpha") + _traffic("beta")
    for service in ("alpha", "beta"):
        logs += [_log(60 + m, service, "Disk quota exceeded on /data", "ERROR") for m in range(9)]
    report = analyze(IncidentInputs(**_windows(), logs=logs))
    assert report["root_cause"] is None
    assert report["ambiguity"] is not None and "alpha" in report["ambiguity"]
    assert {s["service"] for s in report["suspects"][:2]} == {"alpha", "beta"}


def test_incident_is_deterministic() -> None:
    logs = _traffic("a") + _traffic("b")
    logs += [_log(60 + m, "a", "boom", "ERROR") for m in range(5)]
    assert analyze(IncidentInputs(**_windows(), logs=logs)) == analyze(
        IncidentInputs(**_windows(), logs=list(reversed(logs)))
    )


def test_incident_bundled_sample_names_the_reconciliation_job_as_the_cause() -> None:
    import json
    from pathlib import Path

    import evidence.data

    path = Path(evidence.data.__file__).parent / "sample_environment.json"
    sample = json.loads(path.read_text())
    report = analyze(
        IncidentInputs(
            logs=sample["logs"],
            series=sample["series"],
            alerts=sample["alerts"],
            incident_end=sample["now"],
        )
    )
    root = report["root_cause"]
    assert root is not None and root["service"] == "inventory-service"
    assert root["signals"][0]["kind"] == "change"
    assert root["mechanism"].startswith("change: job at 2026-03-01T09:58:12Z")
    assert set(root["explains"]) == {"order-service", "api-gateway"}
    order = {s["service"]: s for s in report["suspects"]}["order-service"]
    assert order["explained_by"] == ["inventory-service"]
    assert [c["category"] for c in report["changes"]] == ["job"]
    assert root["mechanism_phrase"] == {
        "kind": "change",
        "values": {
            "category": "job",
            "time": "2026-03-01T09:58:12Z",
            "text": root["mechanism"].split(": ", 2)[-1],
        },
    }
    assert order["why_not_first_phrase"] == {
        "kind": "symptom",
        "values": {"causes": ["inventory-service"]},
    }
    _assert_phrases_state_their_texts(report)


def _call(
    trace: str, ids: str, caller: str, callee: str, start: str, parent: str, delay: float
) -> list[SpanEntry]:
    """A caller's client span around the callee's server span; ``delay`` is spent between them."""
    client = SpanEntry(
        trace_id=trace,
        span_id=ids + "c",
        parent_span_id=parent,
        service=caller,
        operation=f"GET {callee}",
        kind="client",
        start=start,
        duration_ms=12 + delay,
        status="unset",
    )
    server = SpanEntry(
        trace_id=trace,
        span_id=ids + "s",
        parent_span_id=ids + "c",
        service=callee,
        operation="serve",
        kind="server",
        start=start,
        duration_ms=10,
        status="unset",
    )
    return [client, server]


def _delayed_traces(minute: float, index: int, delay: float) -> list[SpanEntry]:
    trace = f"{index:032x}"
    start = _at(minute)
    root = f"{index:08x}00"
    spans = [
        SpanEntry(
            trace_id=trace,
            span_id=root,
            service="gateway",
            operation="GET /",
            kind="server",
            start=start,
            duration_ms=60 + 2 * delay,
            status="unset",
        )
    ]
    for n, (caller, callee) in enumerate((("gateway", "orders"), ("gateway", "users"))):
        spans += _call(trace, f"{index:08x}1{n}", caller, callee, start, root, 0.0)
        spans += _call(
            trace, f"{index:08x}2{n}", callee, "db-proxy", start, f"{index:08x}1{n}s", delay
        )
    return spans


def test_incident_network_delay_is_given_to_the_service_the_slow_calls_share() -> None:
    spans: list[SpanEntry] = []
    for i in range(40):
        spans += _delayed_traces(i * 1.5, i, 0.0)
    for i in range(40, 60):
        spans += _delayed_traces(60 + (i - 40) * 0.5, i, 300.0)
    report = analyze(IncidentInputs(**_windows(), spans=spans))
    assert report["root_cause"] is not None
    assert report["root_cause"]["service"] == "db-proxy"
    signal = report["root_cause"]["signals"][0]
    assert signal["kind"] == "trace_latency"
    assert signal["detail"].startswith("time between services on calls in and out of it")
    assert {
        (p.get("caller"), p.get("callee")) for p in signal["evidence"] if p["kind"] == "edge"
    } == {
        ("orders", "db-proxy"),
        ("users", "db-proxy"),
    }
    # The callers' own time excludes the calls they make: they are not slow themselves.
    for suspect in report["suspects"]:
        if suspect["service"] in ("orders", "users"):
            assert suspect["explained_by"] == ["db-proxy"]
    assert signal["phrase"]["kind"] == "call_gap"
    _assert_phrases_state_their_texts(report)


def _ledger_traces(minute: float, index: int, delay: float) -> list[SpanEntry]:
    """gateway -> orders -> ledger, pricing and gateway -> users; ``delay`` into ledger."""
    trace = f"{index:032x}"
    start = _at(minute)
    root = f"{index:08x}00"
    spans = [
        SpanEntry(
            trace_id=trace,
            span_id=root,
            service="gateway",
            operation="GET /",
            kind="server",
            start=start,
            duration_ms=60 + delay,
            status="unset",
        )
    ]
    spans += _call(trace, f"{index:08x}10", "gateway", "orders", start, root, 0.0)
    spans += _call(trace, f"{index:08x}11", "gateway", "users", start, root, 0.0)
    spans += _call(trace, f"{index:08x}12", "orders", "ledger", start, f"{index:08x}10s", delay)
    spans += _call(trace, f"{index:08x}13", "orders", "pricing", start, f"{index:08x}10s", 0.0)
    return spans


def test_incident_a_loud_caller_explained_by_its_callee_ranks_below_it() -> None:
    spans: list[SpanEntry] = []
    for i in range(40):
        spans += _ledger_traces(i * 1.5, i, 40.0)
    for i in range(40, 60):
        spans += _ledger_traces(60 + (i - 40) * 0.5, i, 100.0)
    logs = _traffic("orders") + _traffic("gateway")
    for m in range(12):
        logs += [
            _log(
                60.5 + m, "orders", f"Timeout waiting for ledger reply, order {m} failed", "ERROR"
            ),
            _log(60.6 + m, "orders", "Retrying ledger write, attempt 2", "WARN"),
            _log(60.7 + m, "gateway", "Upstream orders answered 502 Bad Gateway", "ERROR"),
        ]
    report = analyze(IncidentInputs(**_windows(), logs=logs, spans=spans))
    by_service = {s["service"]: s for s in report["suspects"]}
    assert by_service["orders"]["explained_by"] == ["ledger"]
    assert report["suspects"][0]["service"] == "ledger"
    assert report["root_cause"] is not None and report["root_cause"]["service"] == "ledger"
    assert by_service["orders"]["why_not_first"].startswith("a symptom")
    _assert_phrases_state_their_texts(report)


def test_incident_a_line_or_two_above_the_expected_count_is_not_a_surge() -> None:
    base = [m * 60 / 16 for m in range(16)]
    busy = [60 + m * 15 / 13 for m in range(13)]
    logs = _traffic("payments")
    logs += [
        _log(minute + 0.01, "payments", "Card issuer declined the charge", "ERROR")
        for minute in base[::4] + busy[:5]
    ]
    spans = _served("payments", base + busy, "c")
    report = analyze(IncidentInputs(**_windows(), logs=logs, spans=spans))
    # 4 errors in 16 requests, then 5 in 13: 3.25 expected, under two more than that.
    assert report["suspects"] == []
    logs += [
        _log(minute + 0.02, "payments", "Card issuer declined the charge", "ERROR")
        for minute in busy[5:10]
    ]
    report = analyze(IncidentInputs(**_windows(), logs=logs, spans=spans))
    assert [s["service"] for s in report["suspects"]] == ["payments"]


def _gap_strength(spans: list[SpanEntry], service: str) -> float:
    report = analyze(IncidentInputs(**_windows(), spans=spans))
    suspect = {s["service"]: s for s in report["suspects"]}[service]
    return max(s["strength"] for s in suspect["signals"] if s["kind"] == "trace_latency")


def test_incident_one_slow_edge_counts_more_when_its_other_end_is_fast_elsewhere() -> None:
    alone: list[SpanEntry] = []
    beside: list[SpanEntry] = []
    for i in range(60):
        minute = i * 1.5 if i < 40 else 60 + (i - 40) * 0.5
        delay = 0.0 if i < 40 else 400.0
        trace, start, root = f"{i:032x}", _at(minute), f"{i:08x}00"
        alone += _call(trace, f"{i:08x}10", "orders", "ledger", start, "", delay)
        beside += _call(trace, f"{i:08x}10", "orders", "ledger", start, "", delay)
        beside += _call(trace, f"{i:08x}11", "orders", "users", start, root, 0.0)
        beside += _call(trace, f"{i:08x}12", "orders", "stock", start, root, 0.0)
    # Either end of a lone slow edge may be the slow one; beside two fast edges of the caller,
    # the callee is.
    assert _gap_strength(alone, "ledger") < _gap_strength(beside, "ledger")


def _fan_traces(i: int, minute: float, slow: dict[tuple[str, str], float]) -> list[SpanEntry]:
    """gateway -> vault, users, stock; vault -> keys, audit, cache, quota; ``slow`` delays."""
    trace, start, root = f"{i:032x}", _at(minute), f"{i:08x}00"
    calls = [("gateway", "vault"), ("gateway", "users"), ("gateway", "stock")]
    calls += [("vault", callee) for callee in ("keys", "audit", "cache", "quota")]
    spans = [
        SpanEntry(
            trace_id=trace,
            span_id=root,
            service="gateway",
            operation="GET /",
            kind="server",
            start=start,
            duration_ms=60 + sum(slow.values()),
            status="unset",
        )
    ]
    for n, (caller, callee) in enumerate(calls):
        parent = root if caller == "gateway" else f"{i:08x}10s"
        delay = slow.get((caller, callee), 0.0)
        spans += _call(trace, f"{i:08x}1{n}", caller, callee, start, parent, delay)
    return spans


def test_incident_slow_calls_into_a_service_are_its_own_when_its_callers_other_calls_are_fast() -> (
    None
):
    spans: list[SpanEntry] = []
    for i in range(60):
        minute = i * 1.5 if i < 40 else 60 + (i - 40) * 0.5
        slow = {} if i < 40 else {("gateway", "vault"): 400.0}
        spans += _fan_traces(i, minute, slow)
    report = analyze(IncidentInputs(**_windows(), spans=spans))
    # vault calls out more than gateway does, all fast; its only way in is slow.
    assert report["root_cause"] is not None and report["root_cause"]["service"] == "vault"


def test_incident_slow_calls_already_running_before_the_stated_start_are_found() -> None:
    windows = IncidentInputs(**{**_windows(), "baseline_start": _at(50)})
    usual = [50.0, 51.0, 52.0, 53.0]
    early = [56 + n * 0.5 for n in range(8)]
    incident = [60 + n * 0.5 for n in range(20)]
    spans: list[SpanEntry] = []
    for i, minute in enumerate(usual + early + incident):
        spans += _fan_traces(i, minute, {} if minute < 56 else {("gateway", "vault"): 400.0})
    report = analyze(IncidentInputs(**windows, spans=spans))
    # Most of the baseline's calls into vault are already slow: usual is what came before them.
    assert report["root_cause"] is not None and report["root_cause"]["service"] == "vault"
    signal = report["root_cause"]["signals"][0]
    assert signal["kind"] == "trace_latency" and signal["baseline"] == 2.0
    assert report["root_cause"]["onset"] == _at(56)
    # Slow through the whole baseline: that is how this call always is.
    spans = []
    for i, minute in enumerate(usual + early + incident):
        spans += _fan_traces(i, minute, {("gateway", "vault"): 400.0})
    assert analyze(IncidentInputs(**windows, spans=spans))["suspects"] == []


def test_incident_failure_lines_naming_another_service_weigh_half_on_their_writer() -> None:
    logs = _traffic("web") + _traffic("inventory-service") + _traffic("mailer")
    logs += [
        _log(60 + m, "web", f"Call to inventory-service failed: 503 for item {m}", "ERROR")
        for m in range(12)
    ]
    logs += [
        _log(60.5 + m, "mailer", f"SMTP relay refused message {m}: quota exhausted", "ERROR")
        for m in range(8)
    ]
    report = analyze(IncidentInputs(**_windows(), logs=logs))
    ranked = [s["service"] for s in report["suspects"]]
    # web's lines report inventory-service failing as web saw it; mailer's are its own.
    assert ranked[:2] == ["mailer", "web"]
    # The same lines naming no service are web's own failures, and the louder.
    logs = [
        {**log, "message": log["message"].replace("inventory-service", "the stock backend")}
        for log in logs
    ]
    report = analyze(IncidentInputs(**_windows(), logs=logs))
    assert [s["service"] for s in report["suspects"]][:2] == ["web", "mailer"]
