"""One ``query_traces`` answer from spans: the same shape and refs whatever the source.

Every trace source (environment file, OTLP files, Tempo, Jaeger) reads spans and hands them here:

- a trace **matches** when one of its spans is of the asked ``service`` and ``operation`` (when
  given), failed (``errors_only``) and lasted at least ``min_duration_ms`` (when given); with no
  filter every trace matches;
- ``operations``: ``analysis.spans.operation_stats`` over the spans of the matching traces that
  are of the asked service / operation (all their spans when none is asked);
- ``edges``: ``analysis.spans.call_edges`` over every span of the matching traces, the edges
  into and out of the asked service first (the rest of the graph follows, so a why question can
  follow a call down to the callee);
- ``traces``: the matching traces, examples first: the slowest, then up to two failed ones,
  each with its span tree (``analysis.spans.span_tree``, at most ``TREE_SPANS`` spans); then
  the others, slowest first; at most ``limit``. ``traces_total`` counts the matching traces, or
  what the source says it saw (a lower bound when it stopped reading).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Final

from analysis.spans import call_edges, is_error, operation_stats, span_tree
from evidence.logquery import iso
from state.records import SpanEntry
from tools.backend import parse_timestamp
from tools.query_traces import (
    EdgeRow,
    OperationRow,
    SpanNode,
    TraceRow,
    TracesOutput,
    TracesRequest,
)

TREE_SPANS: Final = 30
"""Spans of one example trace's tree at most."""
FAILED_EXAMPLES: Final = 2


def span_matches(span: SpanEntry, request: TracesRequest) -> bool:
    """Whether one span is of the asked service / operation, failed and slow enough as asked."""
    if request.service is not None and span.get("service") != request.service:
        return False
    if request.operation is not None and span.get("operation") != request.operation:
        return False
    if request.errors_only and not is_error(span):
        return False
    minimum = request.min_duration_ms
    return minimum is None or float(span.get("duration_ms", 0.0)) >= minimum


def _of_service(span: SpanEntry, request: TracesRequest) -> bool:
    if request.service is not None and span.get("service") != request.service:
        return False
    return request.operation is None or span.get("operation") == request.operation


def group_traces(spans: Iterable[SpanEntry]) -> dict[str, list[SpanEntry]]:
    """Spans by trace id, in first-seen order."""
    traces: dict[str, list[SpanEntry]] = defaultdict(list)
    for span in spans:
        traces[span.get("trace_id", "")].append(span)
    return dict(traces)


def _moment(text: str) -> datetime | None:
    try:
        return parse_timestamp(text)
    except ValueError:
        return None


def _trace_row(trace_id: str, spans: Sequence[SpanEntry]) -> TraceRow:
    ids = {span.get("span_id") for span in spans}
    roots = [span for span in spans if span.get("parent_span_id") not in ids]
    root = min(roots or spans, key=lambda span: span.get("start", ""))
    starts = [(span, _moment(span.get("start", ""))) for span in spans]
    known = [(span, at) for span, at in starts if at is not None]
    duration = float(root.get("duration_ms", 0.0))
    if known:
        first = min(at.timestamp() * 1000 for _, at in known)
        last = max(at.timestamp() * 1000 + float(s.get("duration_ms", 0.0)) for s, at in known)
        duration = max(duration, last - first)
    start = min((span.get("start", "") for span in spans if span.get("start")), default="")
    return TraceRow(
        trace_id=trace_id,
        root_service=root.get("service", ""),
        root_operation=root.get("operation", ""),
        start=start,
        duration_ms=round(duration, 3),
        span_count=len(spans),
        errors=sum(1 for span in spans if is_error(span)),
        services=sorted({span.get("service", "") for span in spans}),
    )


def _tree(spans: Sequence[SpanEntry]) -> tuple[list[SpanNode], int]:
    nodes, omitted = span_tree(spans, max_spans=TREE_SPANS)
    drawn: list[SpanNode] = []
    for node in nodes:
        span = node["span"]
        entry = SpanNode(depth=node["depth"])
        for key in (
            "span_id",
            "parent_span_id",
            "service",
            "operation",
            "kind",
            "start",
            "duration_ms",
            "status",
            "status_message",
            "attributes",
        ):
            if key in span:
                entry[key] = span[key]
        if span.get("status", "unset") == "unset" and is_error(span):
            entry["status"] = "error"
        drawn.append(entry)
    return drawn, omitted


def traces_answer(
    spans: Iterable[SpanEntry],
    request: TracesRequest,
    *,
    traces_seen: int | None = None,
    at_least: bool = False,
    window: tuple[datetime, datetime] | None = None,
) -> TracesOutput:
    """The answer to one call over the spans a source read (see the module docstring).

    Args:
        spans: Every span the source read for the call (whole traces where it can).
        request: The call.
        traces_seen: How many traces matched at the source, when it knows more than it read.
        at_least: Whether ``traces_seen`` is a lower bound (the source stopped reading).
        window: The absolute window the source searched, when it searched one.
    """
    traces = group_traces(spans)
    filtered = (
        request.service is not None
        or request.operation is not None
        or request.errors_only
        or request.min_duration_ms is not None
    )
    matching = {
        trace_id: members
        for trace_id, members in traces.items()
        if not filtered or any(span_matches(span, request) for span in members)
    }
    read = [span for members in matching.values() for span in members]
    operations = [
        OperationRow(**row) for row in operation_stats(s for s in read if _of_service(s, request))
    ]
    edges = [EdgeRow(**row) for row in call_edges(read)]
    if request.service is not None:
        service = request.service
        edges.sort(key=lambda edge: service not in (edge["caller"], edge["callee"]))
    rows = {trace_id: _trace_row(trace_id, members) for trace_id, members in matching.items()}
    by_duration = sorted(rows.values(), key=lambda row: (-row["duration_ms"], row["trace_id"]))
    examples: list[TraceRow] = []
    if by_duration:
        examples.append(TraceRow(**by_duration[0], example="slowest"))
    failed = [row for row in by_duration[1:] if row["errors"]][:FAILED_EXAMPLES]
    examples += [TraceRow(**row, example="failed") for row in failed]
    if examples and examples[0]["errors"] and not failed:
        examples[0]["example"] = "slowest"
    chosen = {row["trace_id"] for row in examples}
    listed = examples + [row for row in by_duration if row["trace_id"] not in chosen]
    listed = listed[: max(1, request.limit)]
    for row in listed:
        if row.get("example"):
            row["spans"], omitted = _tree(matching[row["trace_id"]])
            if omitted:
                row["spans_omitted"] = omitted
    total = max(traces_seen or 0, len(matching))
    output = TracesOutput(
        operations=operations,
        edges=edges,
        traces=listed,
        operations_total=len(operations),
        edges_total=len(edges),
        traces_total=total,
    )
    if at_least:
        output["traces_total_at_least"] = True
    if window is not None:
        output["window_start"], output["window_end"] = iso(window[0]), iso(window[1])
    return output
