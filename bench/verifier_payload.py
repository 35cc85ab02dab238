"""Verifier payload size against the size of the raw evidence a diagnosis gathered.

Each case is the bundled sample incident with extra evidence injected, then one diagnosis's
tool calls (query_logs for ERROR lines of order-service, query_metrics for its alerts and
series, lookup_knowledge for the pool runbook) run through the real ToolRunner. The Gatekeeper
checks a realistic executor answer, ``build_trace_summary`` summarises the calls, and
``build_payload`` + ``render_payload`` produce the Verifier's message. Shapes:

- ``giant messages``: five ERROR lines whose messages carry the bulk (stack traces, dumps);
- ``many lines``: the bulk as many ~300-byte ERROR lines (the tool returns at most 100);
- ``big runbooks``: three runbook chunks that rank first for the knowledge query;
- ``two rounds``: all three, 16 distinct tool calls (two rounds at the default budget of 8);
- ``stress``: as ``two rounds``, with 100 claims of about 700 characters each.

Raw bytes are the compact JSON of everything the calls matched in the environment (what an
unbounded tool would have returned). Tokens are estimated as characters / 4.

    .venv/bin/python bench/verifier_payload.py [--runs N] [--quick]
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from _common import (
    VALID_PARSE,
    fmt,
    fmt_bytes,
    machine,
    median,
    run_count,
    table,
    verdict_line,
    verifier_input,
)

from evidence.environment import default_environment
from evidence.sample import SampleBackend
from persistence.ledger import InMemoryLedger
from tools.runner import ToolRunner, tool_message_content
from verification.gatekeeper import run_gatekeeper
from verification.trace_summary import build_trace_summary
from verification.verifier_payload import build_payload, render_payload

TARGET_BYTES = 32 * 1024
SIZES = (10 * 1024, 100 * 1024, 1024 * 1024, 5 * 1024 * 1024)
SHAPES = ("giant messages", "many lines", "big runbooks", "two rounds", "stress")
QUESTION = "Why is order-service returning HTTP 500 errors?"

LOG_CALL = {
    "name": "query_logs",
    "args": {"service": "order-service", "level": "ERROR", "limit": 100},
}
METRICS_CALL = {"name": "query_metrics", "args": {"service": "order-service"}}
KNOWLEDGE_CALL = {
    "name": "lookup_knowledge",
    "args": {"query": "connection pool exhaustion", "top_k": 3},
}

TRACE_LINE = (
    "\tat com.zaxxer.hikari.pool.HikariPool.createTimeoutException(HikariPool.java:696)\n"
    "\tat com.zaxxer.hikari.pool.HikariPool.getConnection(HikariPool.java:181)\n"
    "\tat org.springframework.jdbc.datasource.DataSourceUtils.fetchConnection(DataSourceUtils"
    ".java:159)\n"
)
RUNBOOK_TEXT = (
    "Symptoms: connection pool exhaustion shows as HikariPool 'Connection is not available, "
    "request timed out after 30000ms'. Check active, idle and waiting connections, find the slow "
    "queries holding connections, and raise maximumPoolSize only when the database has headroom. "
)


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _error_line(index: int, message: str) -> dict[str, Any]:
    return {
        "timestamp": f"2026-03-01T10:{10 + index // 60 % 20:02d}:{index % 60:02d}Z",
        "level": "ERROR",
        "service": "order-service",
        "instance": f"order-service-5f7b9c-{index % 7}x{index % 13}",
        "message": message,
    }


def environment(shape: str, filler: int) -> dict[str, Any]:
    """The sample incident with about ``filler`` extra bytes of matching evidence."""
    env = default_environment()
    mixed = shape in ("two rounds", "stress")
    if shape == "giant messages" or mixed:
        share = filler // 3 if mixed else filler
        per_line = max(share // 5, 200)
        head = "HikariPool-1 - Connection is not available, request timed out after 30000ms.\n"
        body = (TRACE_LINE * (per_line // len(TRACE_LINE) + 1))[: per_line - len(head)]
        env["logs"] = [_error_line(i, head + body) for i in range(5)] + env["logs"]
    if shape == "many lines" or mixed:
        share = filler // 3 if mixed else filler
        count = max(share // 300, 1)
        env["logs"] = env["logs"] + [
            _error_line(
                i,
                f"POST /api/orders failed: status=500 error=CannotAcquireConnectionException "
                f"requestId=req-{i:08d} waited 30000ms for a connection from HikariPool-1 "
                f"(total=20, active=20, idle=0, waiting={i % 90})",
            )
            for i in range(count)
        ]
    if shape == "big runbooks" or mixed:
        share = filler // 3 if mixed else filler
        per_doc = max(share // 3, 200)
        chunk = (RUNBOOK_TEXT * (per_doc // len(RUNBOOK_TEXT) + 1))[:per_doc]
        env["documents"] = [
            {
                "doc_id": f"rb-big-{i}",
                "title": f"Runbook: connection pool exhaustion, part {i + 1}",
                "source": f"runbook/pool-{i + 1}.md",
                "chunk": chunk,
            }
            for i in range(3)
        ] + env["documents"]
    return env


def calls(shape: str) -> list[dict[str, Any]]:
    """The tool calls of the diagnosis (16 distinct ones for two rounds and stress)."""
    base = [LOG_CALL, METRICS_CALL, KNOWLEDGE_CALL]
    if shape not in ("two rounds", "stress"):
        return [dict(call, id=f"call-{i}") for i, call in enumerate(base)]
    extra = (
        [
            {
                "name": "query_logs",
                "args": {"service": "order-service", "query": word, "limit": 100},
            }
            for word in ("HikariPool", "status=500", "Connection", "requestId", "waited", "POST")
        ]
        + [
            {"name": "query_metrics", "args": {"service": name}}
            for name in ("api-gateway", "payment-service", "inventory-service")
        ]
        + [
            {"name": "lookup_knowledge", "args": {"query": query, "top_k": 3}}
            for query in (
                "HikariPool timeout",
                "maximumPoolSize",
                "slow queries",
                "rolling restart",
            )
        ]
    )
    return [dict(call, id=f"call-{i}") for i, call in enumerate(base + extra)]


def raw_bytes(env: dict[str, Any], backend: SampleBackend, shape: str) -> int:
    """Bytes of everything the calls matched (logs before the tool's limit)."""
    total = 0
    for call in calls(shape):
        args = call["args"]
        if call["name"] == "query_logs":
            needle = str(args.get("query", "")).casefold()
            matched = [
                entry
                for entry in env["logs"]
                if entry["service"] == args["service"]
                and (args.get("level") is None or entry["level"] == args["level"])
                and needle in entry["message"].casefold()
            ]
            total += _json_size({"logs": matched, "total": len(matched)})
        else:
            total += _json_size(getattr(backend, call["name"])(**args))
    return total


def executor_answer(rows: list[dict[str, Any]], claims: int) -> dict[str, Any]:
    """An executor_evidence_v2 answer citing the log and alert refs with exact excerpts."""
    logs = next(row for row in rows if row["tool_name"] == "query_logs")
    metrics = next(row for row in rows if row["tool_name"] == "query_metrics")

    def ref(row: dict[str, Any], path: str) -> str:
        return next(
            r["text"] for r in row["retrieval_details"]["evidence_refs"] if r["raw_path"] == path
        )

    log_text = ref(logs, "logs[0]")
    message = log_text.split(": ", 1)[1]
    alert_text = ref(metrics, "alerts[0]")
    templates = [
        (
            "observation",
            "order-service ERROR logs show HikariPool-1 connection timeouts.",
            "query_logs",
            logs,
            "logs[0]",
            "log",
            message[:70],
        ),
        (
            "observation",
            "OrderServiceHigh5xxRate is firing for order-service.",
            "query_metrics",
            metrics,
            "alerts[0]",
            "alert",
            alert_text.split(" active_at=")[0],
        ),
        (
            "state",
            "The order-service connection pool is saturated.",
            "query_metrics",
            metrics,
            "alerts[1]",
            "alert",
            "HikariPool-1 has 20 of 20 connections",
        ),
    ]
    out = []
    for index in range(claims):
        claim_type, text, tool, row, path, source, excerpt = templates[index % len(templates)]
        if claims > len(templates):
            text = f"{text} Seen again in a later check; " + "details follow. " * 40
        out.append(
            {
                "claim_id": f"c{index + 1}",
                "claim_type": claim_type,
                "claim_text": text,
                "support_level": "direct",
                "evidence_bindings": [
                    {
                        "source_type": source,
                        "tool_name": tool,
                        "source_invocation_id": row["invocation_id"],
                        "raw_path": path,
                        "evidence_excerpt": excerpt,
                    }
                ],
            }
        )
    return {
        "answer_version": "executor_evidence_v2",
        "claims": out,
        "hypotheses": [
            {"text": "The pool is exhausted by slow queries.", "basis": "timeouts and saturation"}
        ],
        "recommended_actions": [
            {"text": "Follow the connection pool exhaustion runbook.", "source": "runbook"}
        ],
        "missing_info": [
            {
                "text": "Slow query log of the orders database.",
                "suggested_query": {"tool": "query_logs", "arguments": {"query": "slow query"}},
            }
        ],
    }


def measure(shape: str, size: int, runs: int) -> list[str]:
    """One row of the table."""
    probe = environment(shape, 0)
    baseline = raw_bytes(probe, SampleBackend(probe), shape)
    env = environment(shape, max(size - baseline, 0))
    backend = SampleBackend(env)
    raw = raw_bytes(env, backend, shape)
    runner = ToolRunner(backend, InMemoryLedger())
    # At the default budget of 8 calls per round, calls 9-16 belong to round 2.
    rows = [
        runner.run(call, diagnosis_id="diag-bench", thread_id="bench", round=1 + index // 8)
        for index, call in enumerate(calls(shape))
    ]
    tool_output = sum(_json_size(row["output"]) for row in rows if row["output"] is not None)
    tool_messages = sum(len(tool_message_content(row).encode("utf-8")) for row in rows)
    answer = executor_answer(rows, 100 if shape == "stress" else 3)
    final_answer = json.dumps(answer, ensure_ascii=False)
    trace = build_trace_summary(rows)
    gate = run_gatekeeper(VALID_PARSE, answer, rows)
    samples = []
    text = ""
    payload: dict[str, Any] = {}
    for _ in range(runs):
        start = time.perf_counter()
        inputs = verifier_input(
            question=QUESTION,
            final_answer=final_answer,
            structured_output=answer,
            trace_summary=trace,
            gatekeeper_result=gate,
        )
        payload = build_payload(inputs)
        text = render_payload(payload)
        samples.append((time.perf_counter() - start) * 1000.0)
    payload_bytes = len(text.encode("utf-8"))
    shown_items = len(payload.get("tool_trace_summary") or [])
    shown_claims = len((payload.get("executor_structured_output") or {}).get("claims") or [])
    return [
        shape,
        fmt_bytes(size),
        fmt_bytes(raw),
        fmt_bytes(tool_output),
        fmt_bytes(tool_messages),
        fmt_bytes(_json_size(trace)),
        f"{shown_items}/{len(trace)}",
        f"{shown_claims}/{len(answer['claims'])}",
        gate.get("status", "?"),
        fmt_bytes(payload_bytes),
        f"{len(text) // 4:,}",
        fmt(median(samples)),
        "met" if payload_bytes < TARGET_BYTES else "MISSED",
        str(payload_bytes),
    ]


def main(argv: list[str] | None = None) -> int:
    """Measure every shape and size and print the table."""
    runs, quick = run_count(__doc__, 5, 1, "one repetition, sizes up to 1 MB", argv)
    sizes = SIZES[:3] if quick else SIZES

    print(f"Verifier payload size vs raw evidence ({machine()})")
    rows = []
    for shape in SHAPES:
        for size in sizes:
            try:
                rows.append(measure(shape, size, runs))
            except Exception as exc:  # report the case, keep measuring the others
                rows.append([shape, fmt_bytes(size), f"failed: {type(exc).__name__}: {exc}"])
    width = max(len(row) for row in rows)
    print()
    print(
        table(
            [
                "shape",
                "case",
                "raw",
                "tool outputs",
                "tool msgs",
                "trace",
                "items",
                "claims",
                "gate",
                "payload",
                "~tokens",
                "payload ms",
                "< 32 KB",
            ],
            [row[: width - 1] if len(row) == width else row for row in rows],
        )
    )
    print(
        "(raw: what the calls matched; tool outputs: the bounded outputs recorded; tool msgs: what "
        "the executor reads;\n items, claims: in the payload / produced; payload ms: build_payload "
        "+ render_payload)"
    )
    measured = [row for row in rows if len(row) == width]
    worst = max((int(row[-1]) for row in measured), default=0)
    failures = len(rows) - len(measured)
    print()
    print(
        verdict_line(
            failures == 0 and worst < TARGET_BYTES,
            f"largest payload {fmt_bytes(worst)} ({worst:,} bytes, ~{worst // 4:,} tokens) "
            f"against {fmt_bytes(TARGET_BYTES)} for any raw size"
            + (f"; {failures} case(s) failed" if failures else ""),
        )
    )
    dropped = [row for row in measured if row[6].split("/")[0] != row[6].split("/")[1]]
    if dropped:
        print(
            "Note: the payload leaves trace items out when the tool_trace_summary block is full: "
            + ", ".join(f"{row[0]} at {row[1]} shows {row[6]}" for row in dropped)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
