from __future__ import annotations

import itertools
from collections.abc import Mapping

import pytest

from state.records import (
    DocumentEntry,
    Invocation,
    InvocationStatus,
    JSONObject,
    RetrievalDetails,
)
from tests.records import alert_entry, document_entry, invocation, log_entry, series_entry
from tools.lookup_knowledge import KnowledgeResult
from tools.query_logs import LogsResult
from tools.query_metrics import MetricsResult
from verification.trace_summary import TRACEABILITY_VERSION, build_trace_summary

_ids = itertools.count(1)


def make_invocation(
    tool_name: str,
    arguments: JSONObject | None = None,
    *,
    output: Mapping[str, object] | None = None,
    status: InvocationStatus = "ok",
    round_number: int = 1,
    details: RetrievalDetails | None = None,
    error: str | None = None,
) -> Invocation:
    return invocation(
        f"inv-{next(_ids)}",
        tool_name,
        arguments,
        output=output,
        status=status,
        round=round_number,
        details=RetrievalDetails(evidence_refs=[], **(details or {})),
        error=error,
    )


def logs_call(
    messages: list[str],
    arguments: JSONObject | None = None,
    *,
    total: int | None = None,
    status: InvocationStatus | None = None,
    round_number: int = 1,
) -> Invocation:
    entries = [log_entry(message, timestamp="2026-03-01T10:05:00Z") for message in messages]
    output = LogsResult(
        logs=entries, total=len(entries) if total is None else total, truncated=False
    )
    return make_invocation(
        "query_logs",
        arguments or {"service": "order-service", "level": "ERROR"},
        output=output,
        status=status or ("ok" if entries else "no_hit"),
        round_number=round_number,
    )


def knowledge_call(
    query: str, documents: list[DocumentEntry], *, details: RetrievalDetails | None = None
) -> Invocation:
    return make_invocation(
        "lookup_knowledge",
        {"query": query, "top_k": 3},
        output=KnowledgeResult(documents=documents),
        details=details,
    )


def document(doc_id: str, title: str, *, deduped: bool = False) -> DocumentEntry:
    return document_entry(
        doc_id,
        title,
        source="runbooks/db.md",
        chunk="Check the pool size and slow queries.",
        score=2.0,
        relevance="high",
        deduped=deduped,
    )


def test_trace_summary_version_is_exposed() -> None:
    assert TRACEABILITY_VERSION == "trace-summary.v1"


def test_trace_summary_excludes_helper_tools() -> None:
    invocations = [
        make_invocation("get_current_time", {}, output={"now": "2026-03-01T10:30:00Z"}),
        logs_call(["Cannot acquire connection"]),
        # A tool the runner does not know, with an output no registered tool describes.
        make_invocation("format_table", {"rows": 3}, output={"text": "..."}),
    ]

    items = build_trace_summary(invocations)

    assert [item["tool_name"] for item in items] == ["query_logs"]
    assert items[0]["trace_ref"] == "t1"
    assert items[0]["source_invocation_ids"] == [invocations[1]["invocation_id"]]


def test_trace_summary_item_has_contract_fields() -> None:
    call = logs_call(["Cannot acquire connection"], {"service": "order-service", "level": "ERROR"})

    (item,) = build_trace_summary([call])

    assert item == {
        "trace_ref": "t1",
        "tool_name": "query_logs",
        "round": 1,
        "success": True,
        "evidence_level": "direct",
        "input_summary": "level=ERROR service=order-service",
        "output_summary": "matched 1 of 1; ERROR order-service: Cannot acquire connection",
        "source_invocation_ids": [call["invocation_id"]],
    }


def test_trace_summary_refs_follow_first_call_order_across_rounds() -> None:
    first = logs_call(["a"], {"service": "order-service"})
    second = make_invocation(
        "query_metrics", {"service": "order-service"}, output={"alerts": [], "series": []}
    )
    repeat_round_two = logs_call(["b"], {"service": "order-service"}, round_number=2)
    new_round_two = logs_call(["c"], {"service": "payment-service"}, round_number=2)

    items = build_trace_summary([first, second, repeat_round_two, new_round_two])

    assert [(i["trace_ref"], i["tool_name"], i["round"]) for i in items] == [
        ("t1", "query_logs", 1),
        ("t2", "query_metrics", 1),
        ("t3", "query_logs", 2),
        ("t4", "query_logs", 2),
    ]
    assert items[2]["source_invocation_ids"] == [repeat_round_two["invocation_id"]]
    round_one_only = build_trace_summary([first, second])
    assert [i["trace_ref"] for i in round_one_only] == ["t1", "t2"]
    assert round_one_only[0]["source_invocation_ids"] == items[0]["source_invocation_ids"]


def test_trace_summary_merges_calls_differing_only_in_limit_start_end() -> None:
    base: JSONObject = {"service": "order-service", "level": "ERROR"}
    calls = [
        logs_call(["a"], {**base, "limit": 20}),
        logs_call(["a"], {**base, "limit": 100, "start": "2026-03-01T09:00:00Z"}),
        logs_call(["a"], {**base, "end": "2026-03-01T11:00:00Z"}),
        logs_call(["a"], {**base, "service": "payment-service"}),
    ]

    items = build_trace_summary(calls)

    assert len(items) == 2
    assert items[0]["source_invocation_ids"] == [c["invocation_id"] for c in calls[:3]]
    assert items[0]["input_summary"] == "level=ERROR limit=20 service=order-service"
    assert items[1]["source_invocation_ids"] == [calls[3]["invocation_id"]]
    assert "repeat_count" not in items[1]


def test_trace_summary_does_not_merge_different_query() -> None:
    calls = [logs_call(["a"], {"query": "timeout"}), logs_call(["a"], {"query": "pool"})]

    assert len(build_trace_summary(calls)) == 2


def test_trace_summary_merged_item_counts_repeats_failures_and_no_hits() -> None:
    args: JSONObject = {"service": "order-service", "level": "ERROR"}
    calls = [
        make_invocation("query_logs", args, status="error", error="backend timeout"),
        logs_call([], {**args, "limit": 5}),
        logs_call(["Cannot acquire connection from pool"], {**args, "limit": 50}),
        logs_call(["Connection reset by peer"], {**args, "limit": 80}),
    ]

    (item,) = build_trace_summary(calls)

    assert item["repeat_count"] == 4
    assert item["failed_count"] == 1
    assert item["no_hit_count"] == 1
    assert item["success"] is True
    assert item["evidence_level"] == "direct"
    assert "Cannot acquire connection from pool" in item["output_summary"]
    assert "Connection reset by peer" not in item["output_summary"]
    assert item["source_invocation_ids"] == [c["invocation_id"] for c in calls]


def test_trace_summary_keeps_failed_and_no_hit_calls_as_gaps() -> None:
    failed = make_invocation(
        "query_metrics", {"service": "order-service"}, status="error", error="prometheus 503"
    )
    empty = logs_call([], {"service": "order-service", "query": "deadlock"})

    items = build_trace_summary([failed, empty])

    assert [(i["success"], i["evidence_level"]) for i in items] == [
        (False, "none"),
        (False, "none"),
    ]
    assert items[0]["output_summary"] == "error: prometheus 503"
    assert items[1]["output_summary"] == "no match"


def test_trace_summary_orders_log_messages_by_frequency() -> None:
    call = logs_call(
        ["rare failure", "pool exhausted", "pool exhausted", "pool exhausted"], total=57
    )

    (item,) = build_trace_summary([call])

    assert item["output_summary"] == (
        "matched 4 of 57; ERROR order-service: pool exhausted (x3); "
        "ERROR order-service: rare failure"
    )


def test_trace_summary_deduped_knowledge_is_no_evidence() -> None:
    call = knowledge_call(
        "connection pool",
        [document("kb-1", "DB pool runbook", deduped=True)],
        details={"deduped": ["kb-1"], "layers": ["runbook"], "relevance": ["high"]},
    )

    (item,) = build_trace_summary([call])

    assert item["success"] is True
    assert item["evidence_level"] == "none"
    assert "deduped" in item["output_summary"]


def test_trace_summary_knowledge_items_carry_retrieval_extras() -> None:
    first = knowledge_call(
        "connection pool",
        [document("kb-1", "DB pool runbook"), document("kb-2", "Past case 2025-11")],
        details={
            "layers": ["runbook", "past_case"],
            "relevance": ["high", "medium"],
            "source_docs": ["runbooks/db.md", "cases/2025-11.md"],
            "deduped": [],
        },
    )

    (item,) = build_trace_summary([first])

    assert item["evidence_level"] == "direct"
    assert item["query_samples"] == ["connection pool"]
    assert item["retrieval_layers"] == ["runbook", "past_case"]
    assert item["relevance_levels"] == ["high", "medium"]
    assert item["source_docs"] == ["runbooks/db.md", "cases/2025-11.md"]
    assert item["output_summary"].startswith("DB pool runbook (runbooks/db.md) relevance=high")


def test_trace_summary_merged_knowledge_unions_extras() -> None:
    first = knowledge_call(
        "pool", [document("kb-1", "A")], details={"layers": ["runbook"], "source_docs": ["a.md"]}
    )
    first["arguments"]["limit"] = 1
    second = knowledge_call(
        "pool", [document("kb-2", "B")], details={"layers": ["past_case"], "source_docs": ["b.md"]}
    )

    (item,) = build_trace_summary([first, second])

    assert item["query_samples"] == ["pool"]
    assert item["retrieval_layers"] == ["runbook", "past_case"]
    assert item["source_docs"] == ["a.md", "b.md"]
    assert item["repeat_count"] == 2


def test_trace_summary_metrics_names_only_alerts_in_output() -> None:
    alert = alert_entry("HighErrorRate", 0.12, 0.05, "error rate above 5%", "2026-03-01T10:04:00Z")
    pool = {"service": "order-service", "pool": "main"}
    series = series_entry("db_pool_usage", 40, 100, 98, labels=pool, points_count=30, unit="%")
    output = MetricsResult(alerts=[alert], series=[series])
    call = make_invocation("query_metrics", {"service": "order-service"}, output=output)

    (item,) = build_trace_summary([call])

    summary = item["output_summary"]
    assert summary.startswith(
        "HighErrorRate service=order-service severity=critical state=firing value=0.12 "
        "threshold=0.05"
    )
    assert "db_pool_usage{pool=main,service=order-service} min=40% max=100% last=98%" in summary
    assert summary.index("HighErrorRate") < summary.index("db_pool_usage")
    assert len(summary.split("; ")) == 2
    assert "Latency" not in summary


def test_trace_summary_bounds_huge_log_message() -> None:
    start = "OutOfMemoryError while building order report "
    message = start + "x" * (5 * 1024 * 1024)

    (item,) = build_trace_summary([logs_call([message])], item_chars=700)

    assert len(item["output_summary"]) <= 700
    assert start in item["output_summary"]
    assert item["output_summary"].endswith("…")


def test_trace_summary_bounds_each_item_on_a_boundary() -> None:
    messages = [f"failure number {n} " + "detail " * 20 for n in range(30)]

    (item,) = build_trace_summary([logs_call(messages)], item_chars=300)

    summary = item["output_summary"]
    assert len(summary) <= 300
    assert summary.endswith("…")
    assert summary.startswith("matched 30 of 30; ERROR order-service: failure number 0 ")
    assert not summary[:-1].endswith(" ")


def test_trace_summary_enforces_total_by_shortening_later_items() -> None:
    calls = [
        logs_call([f"message {n} " + "word " * 100], {"service": f"svc-{n}"}) for n in range(10)
    ]

    items = build_trace_summary(calls, item_chars=400, total_chars=1000)

    assert len(items) == 10
    assert sum(len(item["output_summary"]) for item in items) <= 1000
    unbounded = build_trace_summary(calls, item_chars=400)
    assert items[0]["output_summary"] == unbounded[0]["output_summary"]
    assert len(items[-1]["output_summary"]) < len(unbounded[-1]["output_summary"])
    assert items[-1]["output_summary"].startswith("matched 1 of 1")
    assert all(item["output_summary"] for item in items)


def test_trace_summary_total_bound_never_drops_items() -> None:
    calls = [logs_call([f"message {n}"], {"service": f"svc-{n}"}) for n in range(50)]

    items = build_trace_summary(calls, total_chars=10)

    assert len(items) == 50
    assert all(item["output_summary"].startswith("matched 1 of 1") for item in items)


@pytest.mark.parametrize("count", [1000])
def test_trace_summary_compacts_many_invocations(count: int) -> None:
    calls = []
    for n in range(count):
        if n % 3 == 0:
            calls.append(logs_call([f"error {n}"] * 5, {"service": f"svc-{n % 40}", "limit": n}))
        elif n % 3 == 1:
            calls.append(
                make_invocation(
                    "query_metrics",
                    {"alert": f"a{n % 25}"},
                    output={"alerts": [], "series": []},
                    status="no_hit",
                )
            )
        else:
            calls.append(make_invocation("get_current_time", {}, output={"now": "x"}))

    items = build_trace_summary(calls)

    assert len(items) == 40 + 25
    assert sum(item.get("repeat_count", 1) for item in items) == 667
