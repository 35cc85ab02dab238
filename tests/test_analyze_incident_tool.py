"""``analyze_incident``: the tool over environment files and real sources, its refs and windows.

The analysis itself is ``analysis.incident`` (tested in ``tests/test_incident_*``); here: the
windows the tool asks for, the data it gathers through the sources' protocols (a window read
at once, or slice by slice with ``query_logs``), gaps for a source without a baseline, and refs
that quote the raw items verbatim so claims can cite them.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from analysis.incident import analyze
from evidence.composed import ComposedBackend, Unavailable
from evidence.environment import Environment, default_environment
from evidence.incident import ALERT_LEAD, Windows, gather
from evidence.logfiles import FileLogs
from evidence.sample import SampleBackend
from persistence.ledger import InMemoryLedger
from state.records import AlertEntry, LogEntry, SeriesEntry, SpanEntry
from tests.backend_kit import call_tool, tool_runner
from tests.loki_kit import FakeLoki, Stream, serve_loki
from tools.analyze_incident import AnalyzeIncidentArgs, pointer_text
from tools.analyze_incident import result as analyze_result
from tools.backend import (
    LogsOutput,
    LogsRequest,
    MetricsOutput,
    MetricsRequest,
    TimeOutput,
    parse_timestamp,
)
from tools.query_logs import log_text
from tools.registry import spec_of
from tools.runner import ToolRunner
from tools.spec import ArgumentError

NOW = datetime(2026, 3, 1, 10, 30, tzinfo=UTC)


def _run(backend: Any, args: dict[str, Any] | None = None) -> dict[str, Any]:
    runner = ToolRunner(backend, InMemoryLedger())
    invocation = runner.run(
        {"name": "analyze_incident", "args": args or {}, "id": "a1"},
        diagnosis_id="d1",
        thread_id="t1",
        round=1,
    )
    assert invocation["status"] in ("ok", "no_hit"), invocation.get("error")
    return dict(invocation)


def _logs_named(env: Environment) -> dict[tuple[str, str, str], LogEntry]:
    return {
        (str(e["timestamp"]), str(e["service"]), str(e["message"])): e for e in env.get("logs", [])
    }


def test_analyze_incident_on_the_sample_quotes_raw_log_lines_verbatim() -> None:
    env = default_environment()
    invocation = _run(SampleBackend(env))
    output = invocation["output"]
    refs = {
        ref["raw_path"]: ref["text"] for ref in invocation["retrieval_details"]["evidence_refs"]
    }
    assert output["suspects"][0]["service"] == "inventory-service"
    assert refs["suspects[0]"].startswith("#1 inventory-service score=")
    messages = _logs_named(env)
    quoted = 0
    for index, signal in enumerate(output["signals"]):
        for inner, pointer in enumerate(signal["evidence"]):
            text = refs[f"signals[{index}].evidence[{inner}]"]
            assert text == pointer_text(pointer)
            if pointer["kind"] == "log":
                raw = messages[(pointer["timestamp"], pointer["service"], pointer["message"])]
                assert text == log_text(raw, fields=("timestamp", "level", "service"))
                quoted += 1
    assert quoted >= 3
    change = next(c for c in output["changes"] if c["service"] == "inventory-service")
    assert "Started stock reconciliation job" in change["message"]
    assert refs["summary"].startswith("analyze_incident window=2026-03-01T09:58:00Z/")


def test_analyze_incident_windows_start_before_the_first_firing_alert() -> None:
    alerts = [
        AlertEntry(alert_name="A", state="firing", active_at="2026-03-01T10:03:00Z"),
        AlertEntry(alert_name="B", state="resolved", active_at="2026-03-01T09:00:00Z"),
    ]
    gaps: list[str] = []
    windows = Windows(
        now=NOW,
        alerts=alerts,
        start=None,
        end=None,
        baseline_start=None,
        baseline_end=None,
        gaps=gaps,
    )
    assert windows.start == datetime(2026, 3, 1, 10, 3, tzinfo=UTC) - ALERT_LEAD
    assert windows.baseline_end == windows.start
    assert windows.baseline_start == windows.start - timedelta(minutes=60)
    quiet = Windows(
        now=NOW,
        alerts=[],
        start=None,
        end=None,
        baseline_start=None,
        baseline_end=None,
        gaps=gaps,
    )
    assert quiet.start == NOW - timedelta(minutes=15)
    assert not gaps


def test_analyze_incident_windows_are_bounded() -> None:
    gaps: list[str] = []
    windows = Windows(
        now=NOW,
        alerts=[],
        start="2026-02-20T00:00:00Z",
        end=None,
        baseline_start="2026-02-01T00:00:00Z",
        baseline_end=None,
        gaps=gaps,
    )
    # The start the question named is kept: the first 6 h after it, not the last 6 h to now.
    assert windows.start == datetime(2026, 2, 20, tzinfo=UTC)
    assert windows.end - windows.start == timedelta(hours=6)
    assert windows.baseline_end - windows.baseline_start == timedelta(hours=24)
    assert len(gaps) == 2
    assert gaps[0].startswith("the incident window was cut to its first 6 h")
    both: list[str] = []
    given = Windows(
        now=NOW,
        alerts=[],
        start="2026-02-20T00:00:00Z",
        end="2026-02-21T00:00:00Z",
        baseline_start=None,
        baseline_end=None,
        gaps=both,
    )
    assert given.end == datetime(2026, 2, 21, tzinfo=UTC)
    assert given.end - given.start == timedelta(hours=6)
    assert both == ["the incident window was cut to its last 6 h"]
    recent: list[str] = []
    since = Windows(
        now=NOW,
        alerts=[],
        start="2026-03-01T09:00:00Z",
        end=None,
        baseline_start=None,
        baseline_end=None,
        gaps=recent,
    )
    assert (since.start, since.end, recent) == (datetime(2026, 3, 1, 9, tzinfo=UTC), NOW, [])


def test_analyze_incident_arguments_refuse_a_reversed_baseline() -> None:
    spec = spec_of("analyze_incident")
    assert spec is not None
    with pytest.raises(ArgumentError, match="baseline_start"):
        spec.arguments.validate(
            "analyze_incident",
            {"baseline_start": "2026-03-01T10:00:00Z", "baseline_end": "2026-03-01T09:00:00Z"},
        )
    assert AnalyzeIncidentArgs(services=["order-service"]).services == ["order-service"]


class _SlicedOnly(SampleBackend):
    """The sample without a window scan and with a small page: read slice by slice."""

    scan_logs = None  # type: ignore[assignment]

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.calls = 0

    def find_logs(self, request: LogsRequest) -> LogsOutput:
        self.calls += 1
        found = super().find_logs(request)
        return LogsOutput(
            logs=found["logs"][:5], total=found["total"], truncated=found["total"] > 5
        )


def test_analyze_incident_reads_a_source_slice_by_slice_like_a_window_at_once() -> None:
    env = default_environment()
    at_once = gather(SampleBackend(env))
    sliced_backend = _SlicedOnly(env)
    sliced = gather(sliced_backend)
    assert sliced_backend.calls > 2
    key = lambda e: (e.get("timestamp"), e.get("service"), e.get("message"))  # noqa: E731
    assert sorted(map(key, sliced["logs"])) == sorted(map(key, at_once["logs"]))


class _Clock:
    title = "fixed"
    needs_timeout = False

    def get_current_time(self, *, timezone: str | None = None) -> TimeOutput:
        return TimeOutput(now="2026-03-01T10:30:00Z")


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_analyze_incident_on_a_log_file_that_starts_inside_the_window_says_so(
    tmp_path: Path,
) -> None:
    lines = [f"{_iso(NOW - timedelta(minutes=10 - i))} ERROR payment failed {i}" for i in range(8)]
    path = tmp_path / "app.log"
    path.write_text("\n".join(lines) + "\n")
    backend = ComposedBackend(
        logs=FileLogs([("billing", str(path))], now=lambda: NOW),
        metrics=Unavailable("metrics", "set a metrics source"),
        knowledge=Unavailable("runbook", "-"),
        clock=_Clock(),
    )
    invocation = _run(backend, {"services": ["billing"]})
    gaps = [gap["text"] for gap in invocation["output"]["gaps"]]
    assert any("no line in the baseline window" in gap for gap in gaps), gaps
    assert any(gap.startswith("alerts: no metrics source") for gap in gaps), gaps


def test_analyze_incident_does_not_change_the_environment() -> None:
    env = default_environment()
    before = copy.deepcopy(env)
    _run(SampleBackend(env))
    assert env == before


# A capture of a quiet period two hours before the incident (09:00-09:05), then nothing until
# the incident: the question names 12:00, and only the 30 s before it are in the default
# baseline (the hour before). "noisy" logs the same errors at the same rate in the capture and
# in the incident (background noise); "db" starts failing at 12:00.
INCIDENT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CAPTURE = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def _line(moment: datetime, service: str, level: str, message: str) -> LogEntry:
    return LogEntry(timestamp=_iso(moment), service=service, level=level, message=message)


def _thin_baseline_environment() -> Environment:
    logs: list[LogEntry] = []
    for second in range(0, 300, 10):
        moment = CAPTURE + timedelta(seconds=second)
        logs.append(_line(moment, "api", "INFO", f"request served in {20 + second % 7} ms"))
        logs.append(_line(moment, "noisy", "ERROR", "cache refresh failed: upstream busy"))
    for second in range(-30, 0, 10):
        moment = INCIDENT + timedelta(seconds=second)
        logs.append(_line(moment, "api", "INFO", f"request served in {20 + second % 7} ms"))
    for second in range(0, 300, 10):
        moment = INCIDENT + timedelta(seconds=second)
        logs.append(_line(moment, "api", "INFO", f"request served in {20 + second % 7} ms"))
        logs.append(_line(moment, "noisy", "ERROR", "cache refresh failed: upstream busy"))
        logs.append(_line(moment, "db", "ERROR", "deadlock detected on table orders"))
    series = [
        SeriesEntry(
            metric="cpu_usage_percent",
            labels={"service": "db"},
            points=[
                [(moment + timedelta(minutes=minute)).timestamp(), 20.0]
                for moment in (CAPTURE, INCIDENT - timedelta(minutes=1))
                for minute in range(5)
            ],
        )
    ]
    spans = [
        SpanEntry(
            trace_id=f"{index:032x}",
            span_id=f"{index:016x}",
            service="api",
            operation="GET /orders",
            kind="server",
            start=(moment + timedelta(seconds=index % 60)).isoformat().replace("+00:00", "Z"),
            duration_ms=20.0,
        )
        for index, moment in enumerate([CAPTURE] * 30 + [INCIDENT] * 30)
    ]
    return Environment(
        now=_iso(INCIDENT + timedelta(minutes=5)), logs=logs, series=series, traces=spans
    )


class _WindowedMetrics(SampleBackend):
    """The thin-baseline environment with series cut to the window asked, as Prometheus does."""

    def find_metrics(self, request: MetricsRequest) -> MetricsOutput:
        found = super().find_metrics(request)
        low = parse_timestamp(request.start) if request.start else None
        high = parse_timestamp(request.end) if request.end else None
        cut = []
        for entry in found["series"]:
            points = [
                p
                for p in entry.get("points", [])
                if (low is None or p[0] >= low.timestamp())
                and (high is None or p[0] <= high.timestamp())
            ]
            if points:
                cut.append({**entry, "points": points})
        return MetricsOutput(alerts=found["alerts"], series=cut)  # type: ignore[typeddict-item]


@pytest.mark.parametrize("source", [SampleBackend, _SlicedOnly, _WindowedMetrics])
def test_analyze_incident_thin_baseline_reaches_back_to_the_latest_earlier_data(
    source: type[SampleBackend],
) -> None:
    env = _thin_baseline_environment()
    inputs = gather(source(env), start=_iso(INCIDENT))
    assert inputs["incident_start"] == "2026-03-01T12:00:00Z"
    assert inputs["baseline_end"] == "2026-03-01T12:00:00Z"
    assert inputs["baseline_start"] == "2026-03-01T09:00:00Z"
    captured = [e for e in inputs["logs"] if str(e["timestamp"]) < "2026-03-01T10"]
    assert len(captured) == 60
    gaps = inputs["gaps"]
    logs_gap = next(gap for gap in gaps if gap.startswith("logs: "))
    assert "data for only the last 0.5 min of the baseline window" in logs_gap
    assert "2026-03-01T09:00:00Z to 2026-03-01T09:04:50Z" in logs_gap
    assert any(gap.startswith("traces: ") and "09:00:00Z to " in gap for gap in gaps), gaps
    assert {s["span_id"] for s in inputs["spans"]} == {s["span_id"] for s in env["traces"]}
    points = [p for s in inputs["series"] for p in s["points"]]
    assert len(points) == 10
    if source is _WindowedMetrics:  # its series are cut to the window: they reach back too
        assert any(gap.startswith("series: ") for gap in gaps), gaps
    report = analyze(inputs)
    named = [suspect["service"] for suspect in report["suspects"]]
    assert named[0] == "db"
    assert "noisy" not in named  # the same errors at the same rate in the capture: noise


def test_analyze_incident_given_baseline_never_reaches_back() -> None:
    env = _thin_baseline_environment()
    inputs = gather(
        SampleBackend(env),
        start=_iso(INCIDENT),
        baseline_start=_iso(INCIDENT - timedelta(minutes=60)),
    )
    assert inputs["baseline_start"] == "2026-03-01T11:00:00Z"
    assert not [e for e in inputs["logs"] if str(e["timestamp"]) < "2026-03-01T10"]
    assert not any("latest earlier data" in gap for gap in inputs["gaps"])


def test_analyze_incident_covered_baseline_keeps_the_default() -> None:
    env = default_environment()
    quiet = copy.deepcopy(env)
    quiet["logs"] = [
        _line(NOW - timedelta(minutes=minute), "order-service", "INFO", "request served")
        for minute in range(90, 0, -1)
    ]
    inputs = gather(SampleBackend(quiet))
    assert inputs["baseline_start"] == "2026-03-01T08:58:00Z"  # 60 min before 09:58
    assert not any("latest earlier data" in gap for gap in inputs["gaps"])


def test_analyze_incident_reaches_back_only_for_the_thin_source() -> None:
    env = _thin_baseline_environment()
    minutes = [CAPTURE + timedelta(minutes=m) for m in range(5)] + [
        INCIDENT - timedelta(minutes=m) for m in range(-5, 61)
    ]
    env["series"] = [
        SeriesEntry(
            metric="cpu_usage_percent",
            labels={"service": "db"},
            points=[[moment.timestamp(), 20.0] for moment in sorted(minutes)],
        )
    ]
    inputs = gather(SampleBackend(env), start=_iso(INCIDENT))
    assert inputs["baseline_start"] == "2026-03-01T09:00:00Z"  # the logs' reach
    # The series cover their default baseline: their capture points are not compared.
    earliest = min(p[0] for s in inputs["series"] for p in s["points"])
    assert earliest == (INCIDENT - timedelta(minutes=60)).timestamp()
    assert not any(gap.startswith("series: ") for gap in inputs["gaps"])
    assert any(gap.startswith("logs: ") for gap in inputs["gaps"])


def test_analyze_incident_records_its_root_cause_and_baseline() -> None:
    invocation = _run(SampleBackend(default_environment()), {"services": ["api-gateway"]})
    output = invocation["output"]
    assert output["root_cause"]["service"] == "inventory-service"
    assert output["root_cause"]["service"] == output["suspects"][0]["service"]
    assert output["ambiguity"] is None
    assert (output["baseline_start"], output["baseline_end"]) == (
        "2026-03-01T08:58:00Z",
        "2026-03-01T09:58:00Z",
    )


def test_analyze_incident_log_file_with_an_earlier_capture_reaches_back(tmp_path: Path) -> None:
    env = _thin_baseline_environment()
    path = tmp_path / "app.log"
    path.write_text(
        "".join(
            f"{entry['timestamp']} {entry['level']} {entry['message']}\n"
            for entry in env["logs"]
            if entry["service"] == "noisy"
        )
    )
    end = INCIDENT + timedelta(minutes=5)
    backend = ComposedBackend(
        logs=FileLogs([("noisy", str(path))], now=lambda: end),
        metrics=Unavailable("metrics", "set a metrics source"),
        knowledge=Unavailable("runbook", "-"),
        clock=_Clock(),
    )
    inputs = gather(backend, start=_iso(INCIDENT), end=_iso(end))
    assert inputs["baseline_start"] == "2026-03-01T09:00:00Z"
    assert len([e for e in inputs["logs"] if str(e["timestamp"]) < "2026-03-01T10"]) == 30
    assert any(gap.startswith("logs: no data in the baseline window") for gap in inputs["gaps"])
    report = analyze(inputs)
    assert "noisy" not in [suspect["service"] for suspect in report["suspects"]]


def test_analyze_incident_loki_with_an_earlier_capture_reaches_back(tmp_path: Path) -> None:
    """The same through Loki (``tests/loki_kit.py``, a stand-in that implements Loki's
    documented answers): probed hour by hour with ``query_logs``, newest first."""
    env = _thin_baseline_environment()
    streams: dict[tuple[str, str], list[tuple[datetime, str]]] = {}
    for entry in env["logs"]:
        moment = parse_timestamp(str(entry["timestamp"]))
        key = (str(entry["service"]), str(entry["level"]).lower())
        streams.setdefault(key, []).append((moment, str(entry["message"])))
    fake = FakeLoki(
        streams=[
            Stream({"service": service, "level": level}, entries)
            for (service, level), entries in streams.items()
        ]
    )
    for url in serve_loki(fake):
        runner = tool_runner({"SUPERBIZ_LOKI_URL": url}, tmp_path)
        end = INCIDENT + timedelta(minutes=5)
        invocation = call_tool(
            runner, "analyze_incident", {"start": _iso(INCIDENT), "end": _iso(end)}
        )
    assert invocation["status"] == "ok", invocation["error"]
    output = analyze_result(invocation["output"])
    assert output["baseline_start"] == "2026-03-01T09:00:00Z"
    assert any(g["text"].startswith("logs: data for only the last 0.5 min") for g in output["gaps"])
    named = [suspect["service"] for suspect in output["suspects"]]
    assert named[0] == "db" and "noisy" not in named
