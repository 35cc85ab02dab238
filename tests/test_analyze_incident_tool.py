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

from evidence.composed import ComposedBackend, Unavailable
from evidence.environment import Environment, default_environment
from evidence.incident import ALERT_LEAD, Windows, gather
from evidence.logfiles import FileLogs
from evidence.sample import SampleBackend
from persistence.ledger import InMemoryLedger
from state.records import AlertEntry, LogEntry
from tools.analyze_incident import AnalyzeIncidentArgs, pointer_text
from tools.backend import LogsOutput, LogsRequest, TimeOutput
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
    assert NOW - windows.start == timedelta(hours=6)
    assert windows.baseline_end - windows.baseline_start == timedelta(hours=24)
    assert len(gaps) == 2


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
