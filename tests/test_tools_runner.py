from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from langchain_core.utils.function_calling import convert_to_openai_tool
from typing_extensions import Unpack

from evidence.environment import Environment
from evidence.sample import SampleBackend
from persistence.ledger import InMemoryLedger, InvocationLedger
from state.records import (
    AlertEntry,
    Invocation,
    InvocationDraft,
    SeriesEntry,
)
from tests.records import (
    alert_entry,
    document_entry,
    invocation_draft,
    json_object,
    log_entry,
    series_entry,
)
from tools.backend import LogsOutput, LogsQuery, MetricsOutput, MetricsQuery
from tools.registry import names as registered
from tools.registry import tool_specs
from tools.runner import MAX_ENTRIES, TRUNCATION_MARKER, ToolRunner, tool_message_content

POOL_TIMEOUT = "HikariPool-1 - Connection is not available, request timed out after 30000ms."

ALERT = alert_entry("OrderServiceHigh5xxRate", 0.23, 0.05, "5xx ratio high", "2026-03-01T10:09:00Z")
SERIES = series_entry("http_server_error_ratio", 0.001, 0.27, 0.23)
ENV = Environment(
    now="2026-03-01T10:30:00Z",
    logs=[
        log_entry(POOL_TIMEOUT, timestamp="2026-03-01T10:07:14Z"),
        log_entry(
            "POST /api/orders failed: status=500 error=CannotAcquireConnectionException",
            timestamp="2026-03-01T10:08:00Z",
            instance="order-2",
        ),
        log_entry(
            "POST /api/payments/authorize completed: status=200",
            timestamp="2026-03-01T10:09:00Z",
            level="INFO",
            service="payment-service",
            instance="pay-1",
        ),
    ],
    alerts=[ALERT],
    series=[SERIES],
    documents=[
        document_entry(
            "rb-pool", "Pool runbook", source="runbook/pool.md", chunk="pool exhaustion"
        ),
        document_entry("rb-5xx", "5xx runbook", source="runbook/5xx.md", chunk="http 5xx triage"),
        document_entry(
            "pm-1", "Postmortem: pool and 5xx", source="postmortem/1.md", chunk="pool and 5xx"
        ),
    ],
)


class CountingBackend(SampleBackend):
    """A sample backend that counts backend calls."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.calls = 0

    def query_logs(self, **query: Unpack[LogsQuery]) -> LogsOutput:
        self.calls += 1
        return super().query_logs(**query)


class RaisingBackend(SampleBackend):
    def query_metrics(self, **query: Unpack[MetricsQuery]) -> MetricsOutput:
        raise ConnectionError("prometheus unreachable")


class BlockingBackend(SampleBackend):
    needs_timeout = True  # it blocks, unlike the in-memory sample backend

    def __init__(self, environment: Environment, release: threading.Event) -> None:
        super().__init__(environment)
        self._release = release

    def query_logs(self, **query: Unpack[LogsQuery]) -> LogsOutput:
        self._release.wait(5)
        return super().query_logs(**query)


class FloodingBackend(SampleBackend):
    """Ignores the limit and returns huge entries."""

    def query_logs(self, **query: Unpack[LogsQuery]) -> LogsOutput:
        huge = "x" * (5 * 1024 * 1024)
        entry = log_entry(huge, timestamp="2026-03-01T10:00:00Z")
        return LogsOutput(logs=[entry.copy() for _ in range(3)], total=3, truncated=False)

    def query_metrics(self, **query: Unpack[MetricsQuery]) -> MetricsOutput:
        alert: AlertEntry = {**ALERT, "summary": "s" * 5000}
        series: SeriesEntry = {**SERIES, "labels": {"service": "order-service", "path": "p" * 5000}}
        return MetricsOutput(alerts=[alert], series=[series])


@pytest.fixture
def ledger() -> InMemoryLedger:
    return InMemoryLedger()


@pytest.fixture
def runner(ledger: InMemoryLedger) -> ToolRunner:
    return ToolRunner(SampleBackend(ENV), ledger)


def _call(name: str, args: object, call_id: str) -> dict[str, object]:
    """A tool call as the model sends it (``args`` may be anything, as from a model)."""
    return {"name": name, "args": args, "id": call_id}


def _run(
    runner: ToolRunner, call: dict[str, object], *, round: int = 1, diagnosis_id: str = "d1"
) -> Invocation:
    return runner.run(call, diagnosis_id=diagnosis_id, thread_id="t1", round=round)


def _output(row: Invocation) -> dict[str, Any]:
    """The output of an invocation that succeeded (a plain JSON object, read as it is)."""
    assert row["output"] is not None, row["error"]
    return row["output"]


# --- ledger -----------------------------------------------------------------------------------


def _row(diagnosis_id: str, key: str) -> InvocationDraft:
    return invocation_draft(
        "query_logs", details={}, diagnosis_id=diagnosis_id, idempotency_key=key
    )


def test_ledger_assigns_ids_in_call_order_per_diagnosis(ledger: InMemoryLedger) -> None:
    assert ledger.record(_row("a", "a:1"))["invocation_id"] == "inv-1"
    assert ledger.record(_row("b", "b:1"))["invocation_id"] == "inv-1"
    assert ledger.record(_row("a", "a:2"))["invocation_id"] == "inv-2"
    assert ledger.record(_row("a", "a:3"))["invocation_id"] == "inv-3"
    assert [r["idempotency_key"] for r in ledger.list("a")] == ["a:1", "a:2", "a:3"]
    assert [r["invocation_id"] for r in ledger.list("b")] == ["inv-1"]
    assert ledger.list("unknown") == []


def test_ledger_same_key_twice_keeps_one_row(ledger: InMemoryLedger) -> None:
    first = ledger.record(_row("a", "a:1"))
    second = ledger.record({**_row("a", "a:1"), "status": "error"})
    assert second == first
    assert second["status"] == "ok"
    assert len(ledger.list("a")) == 1
    assert ledger.find("a:1") == first
    assert ledger.find("a:404") is None


def test_ledger_rows_are_copies(ledger: InMemoryLedger) -> None:
    invocation = _row("a", "a:1")
    invocation["arguments"] = {"service": "x"}
    stored = ledger.record(invocation)
    invocation["tool_name"] = "changed"
    stored["tool_name"] = "changed too"
    found = ledger.find("a:1")
    assert found is not None
    assert found["arguments"] == {"service": "x"}
    assert found["tool_name"] == "query_logs"
    assert "invocation_id" not in invocation


def test_ledger_is_thread_safe(ledger: InMemoryLedger) -> None:
    def work(worker: int) -> None:
        for i in range(50):
            ledger.record(_row("a", f"a:{worker}:{i}"))
            ledger.record(_row("a", f"a:{worker}:{i}"))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [r["invocation_id"] for r in ledger.list("a")]
    assert ids == [f"inv-{n}" for n in range(1, 401)]


def test_ledger_in_memory_satisfies_protocol(ledger: InMemoryLedger) -> None:
    typed: InvocationLedger = ledger  # checked by mypy
    assert typed.list("nobody") == []


# --- runner: successful calls -----------------------------------------------------------------


def test_runner_records_query_logs_invocation(runner: ToolRunner, ledger: InMemoryLedger) -> None:
    args = {"service": "order-service", "level": "ERROR", "query": None}
    row = _run(runner, _call("query_logs", args, "call_a"))
    assert set(row) == {
        "invocation_id",
        "diagnosis_id",
        "thread_id",
        "round",
        "tool_name",
        "arguments",
        "status",
        "output",
        "retrieval_details",
        "idempotency_key",
        "started_at",
        "duration_ms",
        "error",
    }
    assert row["invocation_id"] == "inv-1"
    assert (row["diagnosis_id"], row["thread_id"], row["round"]) == ("d1", "t1", 1)
    assert row["idempotency_key"] == "d1:r1:call_a"
    assert row["arguments"] == {"service": "order-service", "level": "ERROR"}
    assert row["status"] == "ok"
    assert row["error"] is None
    assert _output(row)["total"] == 2
    assert _output(row)["truncated"] is False
    assert isinstance(row["duration_ms"], float)
    assert row["started_at"].endswith("Z")
    assert row["retrieval_details"]["evidence_refs"][-1] == {
        "raw_path": "summary",
        "text": "query_logs level=ERROR service=order-service matched 2 of 2 (complete)",
        "source_type": "summary",
    }
    assert row["retrieval_details"]["evidence_refs"][0]["text"] == (
        "2026-03-01T10:07:14Z ERROR order-service order-1: "
        "HikariPool-1 - Connection is not available, request timed out after 30000ms."
    )
    assert ledger.list("d1") == [row]


def test_runner_invocation_ids_follow_call_order(runner: ToolRunner) -> None:
    ids = [
        _run(runner, _call("get_current_time", {}, "c1"))["invocation_id"],
        _run(runner, _call("query_metrics", {"service": "order-service"}, "c2"))["invocation_id"],
        _run(runner, _call("query_logs", {"level": "ERROR"}, "c1"), round=2)["invocation_id"],
        _run(runner, _call("query_logs", {}, "c9"), diagnosis_id="d2")["invocation_id"],
    ]
    assert ids == ["inv-1", "inv-2", "inv-3", "inv-1"]


def test_runner_same_call_twice_runs_backend_once(ledger: InMemoryLedger) -> None:
    backend = CountingBackend(ENV)
    runner = ToolRunner(backend, ledger)
    call = _call("query_logs", {"service": "order-service"}, "call_1")
    first = _run(runner, call)
    second = _run(runner, call)
    assert second == first
    assert backend.calls == 1
    assert len(ledger.list("d1")) == 1


def test_runner_metrics_status_and_refs(runner: ToolRunner) -> None:
    row = _run(runner, _call("query_metrics", {"service": "order-service"}, "m1"))
    assert row["status"] == "ok"
    assert [r["raw_path"] for r in row["retrieval_details"]["evidence_refs"]] == [
        "alerts[0]",
        "series[0]",
        "summary",
    ]
    assert "truncated" not in _output(row)


def test_runner_no_hit_keeps_summary_ref(runner: ToolRunner) -> None:
    row = _run(runner, _call("query_logs", {"service": "payment-service", "level": "ERROR"}, "n1"))
    assert row["status"] == "no_hit"
    assert row["output"] == {"logs": [], "total": 0, "truncated": False}
    assert row["retrieval_details"]["evidence_refs"] == [
        {
            "raw_path": "summary",
            "text": "query_logs level=ERROR service=payment-service matched 0 of 0 (complete)",
            "source_type": "summary",
        }
    ]


def test_runner_helper_tool_is_ok_without_refs(runner: ToolRunner) -> None:
    row = _run(runner, _call("get_current_time", {}, "t1"))
    assert row["status"] == "ok"
    assert row["output"] == {"now": "2026-03-01T10:30:00Z"}
    assert row["retrieval_details"] == {"evidence_refs": []}
    message = json.loads(tool_message_content(row))
    assert message["output"] == {"now": "2026-03-01T10:30:00Z"}


# --- runner: errors never raise ---------------------------------------------------------------


def _assert_error(row: Invocation, *fragments: str) -> None:
    assert row["status"] == "error"
    assert row["output"] is None
    assert row["retrieval_details"] == {"evidence_refs": []}
    error = row["error"]
    assert error is not None
    for fragment in fragments:
        assert fragment in error
    message = json.loads(tool_message_content(row))
    assert message["error"] == row["error"]
    assert message["evidence_refs"] == []


def test_runner_unknown_tool_is_error(runner: ToolRunner) -> None:
    row = _run(runner, _call("delete_database", {"really": True}, "x1"))
    _assert_error(row, "unknown tool 'delete_database'", "query_logs")
    assert row["invocation_id"] == "inv-1"
    assert row["arguments"] == {"really": True}


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        pytest.param(
            {"limit": 500}, ["invalid arguments for query_logs", "limit"], id="limit-too-big"
        ),
        pytest.param({"limit": "many"}, ["limit"], id="limit-not-int"),
        pytest.param({"instance": "order-1"}, ["instance", "Extra inputs"], id="unknown-arg"),
        pytest.param({"start": "an hour ago"}, ["start", "ISO-8601"], id="bad-start"),
        pytest.param(
            {"start": "2026-03-01T10:30:00Z", "end": "2026-03-01T10:00:00Z"},
            ["is after end"],
            id="reversed-window",
        ),
        pytest.param(["order-service"], ["must be a JSON object"], id="args-not-object"),
        # A status code written as the level matches no line; it is a text in the message.
        pytest.param({"level": "500"}, ["level", "not a log level", "query"], id="level-code"),
        pytest.param({"level": "5xx"}, ["level", "not a log level"], id="level-code-class"),
    ],
)
def test_runner_bad_args_are_errors(runner: ToolRunner, args: object, fragments: list[str]) -> None:
    _assert_error(_run(runner, _call("query_logs", args, "b1")), *fragments)


@pytest.mark.parametrize("level", ["ERROR", "warn", "LOG", "FATAL", "Warning", "ERR"])
def test_runner_takes_any_level_word(runner: ToolRunner, level: str) -> None:
    assert _run(runner, _call("query_logs", {"level": level}, f"lv-{level}"))["status"] != "error"


def test_runner_knowledge_requires_query(runner: ToolRunner) -> None:
    _assert_error(_run(runner, _call("lookup_knowledge", {}, "k0")), "query", "Field required")


def test_runner_backend_exception_is_error(ledger: InMemoryLedger) -> None:
    runner = ToolRunner(RaisingBackend(ENV), ledger)
    row = _run(runner, _call("query_metrics", {"service": "order-service"}, "e1"))
    _assert_error(row, "ConnectionError: prometheus unreachable")
    assert row["arguments"] == {"service": "order-service"}
    assert ledger.list("d1") == [row]


def test_runner_timeout_is_error(ledger: InMemoryLedger) -> None:
    release = threading.Event()
    runner = ToolRunner(BlockingBackend(ENV, release), ledger, timeout_s=0.05)
    try:
        row = _run(runner, _call("query_logs", {}, "slow"))
    finally:
        release.set()
    _assert_error(row, "timed out after 0.05s")
    assert row["duration_ms"] < 4000


def test_runner_timeout_not_hit_returns_result(ledger: InMemoryLedger) -> None:
    released = threading.Event()
    released.set()
    runner = ToolRunner(BlockingBackend(ENV, released), ledger, timeout_s=5)
    assert _run(runner, _call("query_logs", {}, "fast"))["status"] == "ok"


def test_runner_calls_an_in_memory_backend_without_a_worker_thread(
    ledger: InMemoryLedger,
) -> None:
    seen: list[str] = []

    class Recording(SampleBackend):
        def query_logs(self, **query: Unpack[LogsQuery]) -> LogsOutput:
            seen.append(threading.current_thread().name)
            return super().query_logs(**query)

    _run(ToolRunner(Recording(ENV), ledger, timeout_s=5), _call("query_logs", {}, "direct"))
    assert seen == [threading.current_thread().name]


# --- runner: knowledge dedupe -----------------------------------------------------------------


def test_runner_marks_documents_seen_earlier_in_the_diagnosis(runner: ToolRunner) -> None:
    first = _run(runner, _call("lookup_knowledge", {"query": "pool"}, "k1"))
    assert [(d["doc_id"], d["deduped"]) for d in _output(first)["documents"]] == [
        ("rb-pool", False),
        ("pm-1", False),
    ]
    assert first["retrieval_details"]["deduped"] == []
    assert first["retrieval_details"]["layers"] == ["keyword"]

    second = _run(runner, _call("lookup_knowledge", {"query": "5xx", "top_k": 5}, "k1"), round=2)
    assert [(d["doc_id"], d["deduped"]) for d in _output(second)["documents"]] == [
        ("rb-5xx", False),
        ("pm-1", True),
    ]
    details = second["retrieval_details"]
    assert details["deduped"] == ["pm-1"]
    assert details["relevance"] == ["high", "high"]
    assert details["source_docs"] == ["runbook/5xx.md", "postmortem/1.md"]
    assert json.loads(tool_message_content(second))["deduped"] == ["pm-1"]

    other = _run(runner, _call("lookup_knowledge", {"query": "5xx"}, "k1"), diagnosis_id="d2")
    assert [d["deduped"] for d in _output(other)["documents"]] == [False, False]


# --- runner: bounding -------------------------------------------------------------------------


def test_runner_caps_huge_fields(ledger: InMemoryLedger) -> None:
    runner = ToolRunner(FloodingBackend(ENV), ledger, field_cap=200)
    row = _run(runner, _call("query_logs", {"limit": 2}, "big"))
    logs = _output(row)["logs"]
    assert len(logs) == 2
    assert _output(row)["total"] == 3
    assert _output(row)["truncated"] is True
    for entry in logs:
        assert entry["message"] == "x" * 200 + TRUNCATION_MARKER
    assert len(json.dumps(row)) < 10_000
    refs = row["retrieval_details"]["evidence_refs"]
    assert refs[-1]["text"] == "query_logs limit=2 matched 2 of 3 (truncated)"
    assert len(tool_message_content(row)) < 5_000


def test_runner_caps_metric_strings_and_flags_truncated(ledger: InMemoryLedger) -> None:
    runner = ToolRunner(FloodingBackend(ENV), ledger, field_cap=100)
    row = _run(runner, _call("query_metrics", {}, "bigm"))
    assert _output(row)["truncated"] is True
    assert _output(row)["alerts"][0]["summary"] == "s" * 100 + TRUNCATION_MARKER
    assert _output(row)["series"][0]["labels"]["path"].endswith(TRUNCATION_MARKER)
    assert row["retrieval_details"]["evidence_refs"][-1]["text"].endswith("(truncated)")


class ManyAlertsBackend(SampleBackend):
    """Returns 150 alerts and 3 of 57 series (as a backend that caps series itself does)."""

    def query_metrics(self, **query: Unpack[MetricsQuery]) -> MetricsOutput:
        output = MetricsOutput(
            alerts=[AlertEntry(**ALERT) for _ in range(150)], series=[SERIES] * 3
        )
        output["series_total"] = 57
        return output


def test_runner_keeps_metric_totals_and_counts_what_it_cut(ledger: InMemoryLedger) -> None:
    row = _run(ToolRunner(ManyAlertsBackend(ENV), ledger), _call("query_metrics", {}, "many"))
    output = _output(row)
    assert (len(output["alerts"]), output["alerts_total"]) == (MAX_ENTRIES, 150)
    assert (len(output["series"]), output["series_total"]) == (3, 57)
    assert row["retrieval_details"]["evidence_refs"][-1]["text"] == (
        "query_metrics alerts 100 of 150, series 3 of 57 (truncated)"
    )


def test_runner_adds_no_metric_totals_when_nothing_was_cut(runner: ToolRunner) -> None:
    output = _output(_run(runner, _call("query_metrics", {"service": "order-service"}, "m1")))
    assert "alerts_total" not in output and "series_total" not in output


def test_runner_default_cap_bounds_five_megabyte_message(ledger: InMemoryLedger) -> None:
    runner = ToolRunner(FloodingBackend(ENV), ledger)
    row = _run(runner, _call("query_logs", {}, "big5"))
    assert all(len(e["message"]) == 1000 + len(TRUNCATION_MARKER) for e in _output(row)["logs"])
    assert _output(row)["truncated"] is True


# --- tool message -----------------------------------------------------------------------------


def test_runner_tool_message_carries_id_and_every_ref(runner: ToolRunner) -> None:
    _run(runner, _call("query_metrics", {"service": "order-service"}, "m1"))
    row = _run(runner, _call("query_logs", {"level": "ERROR"}, "l1"))
    content = tool_message_content(row)
    message = json.loads(content)
    assert message["invocation_id"] == "inv-2"
    assert message["tool_name"] == "query_logs"
    assert message["status"] == "ok"
    assert "error" not in message
    refs = row["retrieval_details"]["evidence_refs"]
    assert message["evidence_refs"] == [
        {"raw_path": r["raw_path"], "text": r["text"]} for r in refs
    ]
    assert len(refs) == 3
    assert "output" not in message
    assert "\n" not in content


# --- schemas ----------------------------------------------------------------------------------


def test_schemas_tool_specs_cover_every_tool() -> None:
    specs = tool_specs()
    functions = [json_object(spec["function"]) for spec in specs]
    names = [function["name"] for function in functions]
    assert names == list(registered())
    for spec, function in zip(specs, functions, strict=True):
        assert spec["type"] == "function"
        assert function["description"]
        assert convert_to_openai_tool(spec) == spec
    params = {str(f["name"]): json_object(f["parameters"]) for f in functions}
    properties = {name: json_object(p["properties"]) for name, p in params.items()}
    limit = json_object(properties["query_logs"]["limit"])
    assert (limit["default"], limit["minimum"], limit["maximum"]) == (20, 1, 100)
    top_k = json_object(properties["lookup_knowledge"]["top_k"])
    assert (top_k["default"], top_k["minimum"], top_k["maximum"]) == (3, 1, 10)
    assert params["lookup_knowledge"]["required"] == ["query"]
    assert json_object(properties["query_logs"]["service"])["type"] == "string"
    assert all(
        json_object(prop).get("description")
        for props in properties.values()
        for prop in props.values()
    )
