"""Bounded everywhere: a backend's huge result costs what the bounded output costs.

The tool runner cuts entry counts and strings before it copies a result into JSON, so a 10 MB
log message or 10,000 entries never travel further than the backend's own objects.
"""

from __future__ import annotations

import tracemalloc
from typing import Any

from evidence.environment import Environment
from evidence.sample import SampleBackend
from persistence.ledger import InMemoryLedger
from state.records import LogEntry
from tests.serving_kit import one_call
from tools.backend import LogsOutput
from tools.runner import TRUNCATION_MARKER, ToolRunner

TEN_MB = 10 * 1024 * 1024


def _peak_of_one_call(backend: SampleBackend, args: dict[str, object]) -> tuple[int, dict]:
    """One ``query_logs`` call: the peak of memory it took, and its output."""
    runner = ToolRunner(backend, InMemoryLedger())
    tracemalloc.start()
    try:
        row = one_call(runner, "query_logs", args)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, dict(row["output"] or {})


def test_runner_a_10_mb_message_is_cut_before_any_copy() -> None:
    entry = LogEntry(
        timestamp="2026-03-01T10:00:00Z",
        level="ERROR",
        service="order-service",
        message="x" * TEN_MB,
    )
    peak, output = _peak_of_one_call(
        SampleBackend(Environment(logs=[entry])), {"service": "order-service"}
    )

    message = output["logs"][0]["message"]
    assert message == "x" * 1000 + TRUNCATION_MARKER
    assert output["truncated"] is True
    assert peak < 1024 * 1024, f"peak {peak} bytes for a 10 MB message"


class _Unbounded(SampleBackend):
    """A backend that returns every entry it has, whatever the limit (the runner must cut)."""

    def query_logs(self, **query: Any) -> LogsOutput:
        return LogsOutput(logs=list(self._logs), total=len(self._logs), truncated=False)


def test_runner_ten_thousand_entries_are_cut_to_the_limit_before_any_copy() -> None:
    logs = [
        LogEntry(
            timestamp="2026-03-01T10:00:00Z",
            level="ERROR",
            service="order-service",
            message=f"line {i} " + "y" * 2000,
        )
        for i in range(10_000)
    ]
    peak, output = _peak_of_one_call(_Unbounded(Environment(logs=logs)), {"limit": 5})

    assert len(output["logs"]) == 5 and output["total"] == 10_000 and output["truncated"]
    assert peak < 2 * 1024 * 1024, f"peak {peak} bytes for 10,000 entries of 2 KB"
