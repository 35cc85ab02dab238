"""``query_traces``: distributed traces of a service: latency, errors, who calls whom (evidence).

Arguments: ``service``, ``operation`` (exact names), ``start`` / ``end`` (ISO-8601; a real
source searches the last hour by default and 24 h at most), ``errors_only`` (only traces with a
failed span of the service / operation) and ``min_duration_ms`` (only traces where such a span
took at least that long), ``limit`` (traces returned, at most 20).

Output arrays, each entry a citable ref:

- ``operations[i]``: per service and operation, over the spans read, ``<service> <operation>
  spans=<n> errors=<e> p50=<ms>ms p90=<ms>ms p99=<ms>ms max=<ms>ms``;
- ``edges[i]``: the service call graph, ``<caller> -> <callee> calls=<n> errors=<e>
  p50=<ms>ms p90=<ms>ms p99=<ms>ms max=<ms>ms`` (the callee's latency as it served the calls);
- ``traces[i]``: the traces found, examples first (the slowest, then the failed), ``trace
  <trace_id> <root service> <root operation> start=<start> duration=<ms>ms spans=<n>
  errors=<e>[ example=slowest|failed]``; an example carries its span tree, clipped, each span a
  ref ``traces[i].spans[j]``: ``span <span_id> [parent=<parent_span_id>] <service> <operation>
  kind=<kind> duration=<ms>ms status=<status>[ <key>=<value> ...]: <status message>``.

Ids and a trace's start ground names (a claim may name a trace id), never a count or a value:
hex ids are full of digits.

The ``summary`` counts the arrays apart and states the window and a lower bound where the source
stopped reading: ``query_traces service=payment-service window=<start>/<end> operations 2 of 2,
edges 3 of 3, traces 20 of at least 140 (truncated)``.

The source protocol is declared here (``TraceSource``): a backend that serves traces has
``find_traces(TracesRequest) -> TracesOutput``; ``evidence.traces`` builds every source's
answer from spans the same way, so each source gives the same shape and refs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NotRequired, Protocol, runtime_checkable

from pydantic import Field
from typing_extensions import TypedDict

from state.records import Invocation, JSONScalar, SpanKind, SpanStatus
from tools.render import format_value, with_message
from tools.schemas import WindowArgs, optional
from tools.spec import (
    Bounds,
    Call,
    Counts,
    Display,
    EntryArray,
    ModelArguments,
    NotServed,
    ToolSpec,
    Trace,
)

NAME = "query_traces"
MAX_TRACES = 20
"""Traces one call returns at most (``limit``)."""
MAX_SHOWN_ATTRIBUTES = 6
"""A span's ref text names at most this many of its attributes (the entry keeps them all)."""
NO_SOURCE = (
    "no trace source is configured; set SUPERBIZ_TRACE_FILES, SUPERBIZ_TEMPO_URL or "
    "SUPERBIZ_JAEGER_URL, or pass --env FILE with a 'traces' key"
)


class QueryTracesArgs(WindowArgs):
    """Arguments of `query_traces`."""

    service: str | None = optional("Only traces with a span of this service (exact name).")
    operation: str | None = optional("Only traces with a span of this operation (exact name).")
    errors_only: bool = Field(
        default=False, description="Only traces where a span of the service/operation failed."
    )
    min_duration_ms: float | None = Field(
        default=None,
        ge=0,
        description="Only traces where a span of the service/operation took at least this long.",
    )
    limit: int = Field(
        default=MAX_TRACES,
        ge=1,
        le=MAX_TRACES,
        description=f"Return at most this many traces (1-{MAX_TRACES}).",
    )


@dataclass(frozen=True, kw_only=True)
class TracesRequest:
    """One ``query_traces`` call: its arguments (``QueryTracesArgs``), defaults filled."""

    service: str | None = None
    operation: str | None = None
    start: str | None = None
    end: str | None = None
    errors_only: bool = False
    min_duration_ms: float | None = None
    limit: int = MAX_TRACES


class OperationRow(TypedDict):
    """``operations[i]``: spans of one service's operation, errors and latency (ms)."""

    service: str
    operation: str
    count: int
    errors: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float


class EdgeRow(TypedDict):
    """``edges[i]``: calls from ``caller`` served by ``callee``, errors and latency (ms)."""

    caller: str
    callee: str
    count: int
    errors: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float


class SpanNode(TypedDict, total=False):
    """``traces[i].spans[j]``: one span of an example trace, with its depth in the tree."""

    depth: int
    span_id: str
    parent_span_id: str
    service: str
    operation: str
    kind: SpanKind
    start: str
    duration_ms: float
    status: SpanStatus
    status_message: str
    attributes: dict[str, JSONScalar]


class TraceRow(TypedDict, total=False):
    """``traces[i]``: one trace; an example (``slowest`` / ``failed``) has its span tree."""

    trace_id: str
    root_service: str
    root_operation: str
    start: str
    duration_ms: float
    span_count: int
    errors: int
    services: list[str]
    example: str
    spans: list[SpanNode]
    spans_omitted: int


class TracesOutput(TypedDict):
    """What a trace source answers (and a ``query_traces`` invocation records).

    ``traces_total`` counts the traces that matched (a lower bound when
    ``traces_total_at_least``: the source stopped reading); ``window_start`` / ``window_end``:
    the absolute window a real source searched.
    """

    operations: list[OperationRow]
    edges: list[EdgeRow]
    traces: list[TraceRow]
    operations_total: NotRequired[int]
    edges_total: NotRequired[int]
    traces_total: NotRequired[int]
    traces_total_at_least: NotRequired[bool]
    window_start: NotRequired[str]
    window_end: NotRequired[str]
    truncated: NotRequired[bool]


@runtime_checkable
class TraceSource(Protocol):
    """A backend that serves ``query_traces``."""

    def find_traces(self, request: TracesRequest) -> TracesOutput:
        """Answers one ``query_traces`` call."""
        ...


def result(output: Mapping[str, object] | None) -> TracesOutput:
    """The recorded output of a ``query_traces`` invocation (the runner validated its shape)."""
    # A view, not a copy: no call on the hot paths of the trace summary and Gatekeeper.
    return output if output is not None else {}  # type: ignore[return-value,typeddict-item]


_PERCENTILES = (("p50", "p50_ms"), ("p90", "p90_ms"), ("p99", "p99_ms"), ("max", "max_ms"))


def _ms(value: object) -> str:
    return f"{format_value(value)}ms"


def _latency(entry: Mapping[str, Any]) -> list[str]:
    return [
        f"{label}={_ms(entry.get(key))}"
        for label, key in (
            ("p50", "p50_ms"),
            ("p90", "p90_ms"),
            ("p99", "p99_ms"),
            ("max", "max_ms"),
        )
        if entry.get(key) is not None
    ]


def operation_text(entry: Mapping[str, Any]) -> str:
    """``<service> <operation> spans=<n> errors=<e> p50=..ms p90=..ms p99=..ms max=..ms``."""
    head = [format_value(entry.get("service")), format_value(entry.get("operation"))]
    counts = [f"spans={format_value(entry.get('count'))}"]
    counts.append(f"errors={format_value(entry.get('errors'))}")
    return " ".join([*head, *counts, *_latency(entry)])


def edge_text(entry: Mapping[str, Any]) -> str:
    """``<caller> -> <callee> calls=<n> errors=<e> p50=..ms p90=..ms p99=..ms max=..ms``."""
    head = f"{format_value(entry.get('caller'))} -> {format_value(entry.get('callee'))}"
    counts = [f"calls={format_value(entry.get('count'))}"]
    counts.append(f"errors={format_value(entry.get('errors'))}")
    return " ".join([head, *counts, *_latency(entry)])


def trace_text(entry: Mapping[str, Any], *, ids: bool = True) -> str:
    """``trace <id> <root service> <root operation> start=.. duration=..ms spans=.. errors=..``.

    ``ids=False``: without the trace id and start, whose digits are no count or value (the
    text that grounds a claim's quantities).
    """
    parts = [f"trace {format_value(entry.get('trace_id'))}" if ids else "trace"]
    parts += [
        format_value(entry.get(key))
        for key in ("root_service", "root_operation")
        if entry.get(key) is not None
    ]
    if ids and entry.get("start") is not None:
        parts.append(f"start={format_value(entry.get('start'))}")
    if entry.get("duration_ms") is not None:
        parts.append(f"duration={_ms(entry.get('duration_ms'))}")
    for label, key in (("spans", "span_count"), ("errors", "errors")):
        if entry.get(key) is not None:
            parts.append(f"{label}={format_value(entry.get(key))}")
    if entry.get("example"):
        parts.append(f"example={format_value(entry.get('example'))}")
    return " ".join(parts)


def span_text(entry: Mapping[str, Any], *, ids: bool = True) -> str:
    """``span <id> [parent=<id>] <service> <operation> kind=.. duration=..ms status=..: msg``.

    ``ids=False``: without the span ids (the text that grounds a claim's quantities).
    """
    parts = [f"span {format_value(entry.get('span_id'))}" if ids else "span"]
    if ids and entry.get("parent_span_id"):
        parts.append(f"parent={format_value(entry.get('parent_span_id'))}")
    parts += [
        format_value(entry.get(key))
        for key in ("service", "operation")
        if entry.get(key) is not None
    ]
    if entry.get("kind") is not None:
        parts.append(f"kind={format_value(entry.get('kind'))}")
    if entry.get("duration_ms") is not None:
        parts.append(f"duration={_ms(entry.get('duration_ms'))}")
    if entry.get("status") is not None:
        parts.append(f"status={format_value(entry.get('status'))}")
    attributes = entry.get("attributes")
    if isinstance(attributes, Mapping):
        shown = sorted(attributes)[:MAX_SHOWN_ATTRIBUTES]
        parts += [f"{key}={format_value(attributes[key])}" for key in shown]
    return with_message(parts, entry.get("status_message"))


def _trace_grounding(entry: Mapping[str, Any]) -> str:
    return trace_text(entry, ids=False)


def _span_grounding(entry: Mapping[str, Any]) -> str:
    return span_text(entry, ids=False)


def _ask(call: Call) -> object:
    backend = call.backend
    if not isinstance(backend, TraceSource):
        raise NotServed(NO_SOURCE)
    return backend.find_traces(TracesRequest(**call.arguments))


def _parts(invocation: Invocation) -> Iterable[str]:
    output = result(invocation["output"])
    edges, operations = output.get("edges", []), output.get("operations", [])
    traces = output.get("traces", [])
    if not edges and not operations and not traces:
        yield "no traces"
        return
    of = "at least " if output.get("traces_total_at_least") else ""
    yield f"traces {len(traces)} of {of}{output.get('traces_total', len(traces))}"
    yield from (edge_text(edge) for edge in edges)
    yield from (operation_text(row) for row in operations)
    yield from (trace_text(trace) for trace in traces if trace.get("example"))


def _floor(invocation: Invocation) -> str:
    output = invocation["output"] or {}
    counts: list[str] = []
    for name in ("operations", "edges", "traces"):
        listed = output.get(name)
        counts.append(f"{len(listed) if isinstance(listed, list) else 0} {name}")
    return ", ".join(counts)


_LATENCY_FIELDS = ("count", "errors", "p50_ms", "p90_ms", "p99_ms", "max_ms")

SPEC = ToolSpec(
    name=NAME,
    description=(
        "Search distributed traces (spans) of the services. Filters combine: service and "
        "operation (exact), a time window, errors_only, min_duration_ms. Returns per service "
        "and operation the span count, errors and latency p50/p90/p99; the service call graph "
        "(caller -> callee with calls, errors and the callee's latency), to tell who calls a "
        "service and where time and errors arise; and the traces found, the slowest and failed "
        "ones with their span trees. A real source searches the last hour unless start and "
        "end say otherwise (24 h at most)."
    ),
    arguments=ModelArguments(
        QueryTracesArgs,
        order=(
            "service",
            "operation",
            "start",
            "end",
            "errors_only",
            "min_duration_ms",
            "limit",
        ),
    ),
    role="incident",
    arrays=(
        EntryArray(
            name="operations",
            source_type="trace_operation",
            render=operation_text,
            display=Display("table", ("service", "operation", *_LATENCY_FIELDS)),
        ),
        EntryArray(
            name="edges",
            source_type="trace_edge",
            render=edge_text,
            display=Display("callgraph", ("caller", "callee", *_LATENCY_FIELDS)),
        ),
        EntryArray(
            name="traces",
            source_type="trace",
            render=trace_text,
            grounding=_trace_grounding,
            display=Display(
                "spantree",
                (
                    "trace_id",
                    "root_service",
                    "root_operation",
                    "start",
                    "duration_ms",
                    "span_count",
                    "errors",
                    "example",
                ),
            ),
            within=(
                EntryArray(
                    name="spans",
                    source_type="span",
                    render=span_text,
                    grounding=_span_grounding,
                    display=Display(
                        "table",
                        (
                            "depth",
                            "span_id",
                            "service",
                            "operation",
                            "kind",
                            "duration_ms",
                            "status",
                            "status_message",
                        ),
                    ),
                ),
            ),
        ),
    ),
    output=TracesOutput,
    bounds=Bounds(entries=50),
    counts=Counts(per_array=True, window=True),
    ask=_ask,
    trace=Trace(parts=_parts, floor=_floor),
    needs="traces",
)
