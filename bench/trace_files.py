"""query_traces over a day of OTLP JSON files: what one trace query costs, in time and memory.

A day of files as the OpenTelemetry Collector's file exporter writes them, one file per hour
(rotated, the older ones gzip-compressed), each line one ``ExportTraceServiceRequest`` of 50
traces; every trace is ``frontend -> checkout -> payment-service -> payments-db`` (four spans),
``--traces`` per hour (one in twenty failed). Two calls through ``FileTraces.find_traces``:
``service=payment-service`` over the default window (the last hour), and over the whole 24 h
window. Targets: the last hour within 1 s and 64 MB of Python heap (``tracemalloc`` peak); the
whole day within 30 s and 512 MB (it reads every file, up to the span cap).

    .venv/bin/python bench/trace_files.py [--runs N] [--quick]
"""

from __future__ import annotations

import gzip
import json
import os
import random
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _common import fmt, fmt_bytes, machine, median, run_count, table, verdict_line

HOUR_TARGET_MS = 1000.0
HOUR_HEAP_TARGET = 64 * 1024 * 1024
DAY_TARGET_MS = 30_000.0
DAY_HEAP_TARGET = 512 * 1024 * 1024
PER_LINE = 50
CALLS = (
    ("frontend", "GET /checkout", 2),
    ("checkout", "POST /orders", 2),
    ("payment-service", "charge", 2),
    ("payments-db", "SELECT payments", 2),
)


def _trace(rng: random.Random, at_ns: int, failed: bool) -> list[tuple[str, dict[str, object]]]:
    trace_id = f"{rng.getrandbits(128):032x}"
    parent = None
    spans = []
    duration = 900_000_000 if failed else 40_000_000
    for depth, (service, name, kind) in enumerate(CALLS):
        span_id = f"{rng.getrandbits(64):016x}"
        start = at_ns + depth * 1_000_000
        span: dict[str, object] = {
            "traceId": trace_id,
            "spanId": span_id,
            "name": name,
            "kind": kind,
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(start + duration - depth * 2_000_000),
            "attributes": [{"key": "http.method", "value": {"stringValue": "POST"}}],
            "status": {"code": 2 if failed and service == "payment-service" else 0},
        }
        if parent:
            span["parentSpanId"] = parent
        parent = span_id
        spans.append((service, span))
    return spans


def _line(spans: list[tuple[str, dict[str, object]]]) -> str:
    by_service: dict[str, list[dict[str, object]]] = {}
    for service, span in spans:
        by_service.setdefault(service, []).append(span)
    request = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": service}}]
                },
                "scopeSpans": [{"scope": {"name": "bench"}, "spans": members}],
            }
            for service, members in by_service.items()
        ]
    }
    return json.dumps(request, separators=(",", ":")) + "\n"


def write_day(folder: Path, now: datetime, per_hour: int) -> tuple[int, int]:
    """24 hourly files ending at ``now``; returns (bytes on disk, spans written)."""
    rng = random.Random(7)
    size = spans_written = 0
    for hour in range(24):
        end = now - timedelta(hours=hour)
        start = end - timedelta(hours=1)
        step_ns = int(3600 * 1_000_000_000 / per_hour)
        start_ns = int(start.timestamp()) * 1_000_000_000
        lines = []
        batch: list[tuple[str, dict[str, object]]] = []
        for number in range(per_hour):
            batch += _trace(rng, start_ns + number * step_ns, number % 20 == 0)
            if len(batch) >= PER_LINE * len(CALLS):
                lines.append(_line(batch))
                batch = []
        if batch:
            lines.append(_line(batch))
        spans_written += per_hour * len(CALLS)
        text = "".join(lines).encode()
        path = folder / ("traces.json" if hour == 0 else f"traces-{hour:02d}.json.gz")
        path.write_bytes(text if hour == 0 else gzip.compress(text, compresslevel=1))
        os.utime(path, (end.timestamp(), end.timestamp()))
        size += path.stat().st_size
    return size, spans_written


def main(argv: list[str] | None = None) -> int:
    runs, quick = run_count(__doc__ or "", 3, 1, "250 traces per hour, one run", argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from evidence.traces.files import FileTraces
    from tools.query_traces import TracesRequest

    per_hour = 250 if quick else 2000
    now = datetime.now(UTC).replace(microsecond=0)
    print(f"trace file benchmark ({machine()})")
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        started = time.perf_counter()
        size, spans = write_day(folder, now, per_hour)
        written = time.perf_counter() - started
        print(
            f"a day of OTLP files: 24 files, {fmt_bytes(size)} on disk, {spans:,} spans, "
            f"written in {written:.1f} s"
        )
        source = FileTraces([str(folder / "traces*.json*")], now=lambda: now)
        cases = (
            ("last hour", TracesRequest(service="payment-service")),
            (
                "24 h window",
                TracesRequest(
                    service="payment-service",
                    start=(now - timedelta(hours=24)).isoformat(),
                    end=now.isoformat(),
                ),
            ),
        )
        rows = []
        figures: dict[str, tuple[float, int]] = {}
        for name, request in cases:
            times: list[float] = []
            answer = source.find_traces(request)
            for _ in range(runs):
                started = time.perf_counter()
                answer = source.find_traces(request)
                times.append((time.perf_counter() - started) * 1000)
            tracemalloc.start()
            source.find_traces(request)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            of = "at least " if answer.get("traces_total_at_least") else ""
            figures[name] = (median(times), peak)
            rows.append(
                [
                    name,
                    f"{of}{answer.get('traces_total', 0):,}",
                    f"{answer['operations'][0]['p99_ms']:g}" if answer["operations"] else "-",
                    fmt(median(times), 1),
                    fmt(max(times), 1),
                    fmt_bytes(peak),
                ]
            )
    headers = ["window", "traces matched", "charge p99 ms", "call ms p50", "max", "heap peak"]
    print(table(headers, rows))
    print()
    hour_ms, hour_peak = figures["last hour"]
    day_ms, day_peak = figures["24 h window"]
    print(
        verdict_line(
            hour_ms <= HOUR_TARGET_MS and hour_peak <= HOUR_HEAP_TARGET,
            f"last hour: {hour_ms:.0f} ms, {fmt_bytes(hour_peak)} heap (target <= "
            f"{HOUR_TARGET_MS:.0f} ms, <= {fmt_bytes(HOUR_HEAP_TARGET)})",
        )
    )
    print(
        verdict_line(
            day_ms <= DAY_TARGET_MS and day_peak <= DAY_HEAP_TARGET,
            f"24 h window: {day_ms:.0f} ms, {fmt_bytes(day_peak)} heap (target <= "
            f"{DAY_TARGET_MS:.0f} ms, <= {fmt_bytes(DAY_HEAP_TARGET)})",
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
