"""Aggregates of distributed-trace spans: latency by operation, the service call graph, span trees.

Pure functions over ``state.records.SpanEntry`` lists; the trace tool and the incident analysis
both read spans through them, so a figure means the same in either.

- ``operation_stats``: per service and operation, the span count, the error count and latency
  percentiles (p50, p90, p99, nearest-rank) over the spans given.
- ``call_edges``: the service call graph: an edge ``caller -> callee`` for every span whose parent
  span belongs to another service (the callee's span measures the call as the callee served it;
  a client span of the caller followed by the callee's server span counts once, by the server
  span). Calls inside one service are not edges.
- ``span_tree``: one trace as a tree, depth first, clipped to a readable size.

A span is an error when its status is ``error``, or when it has no status and its HTTP or gRPC
status attribute says so (``http.status_code`` / ``http.response.status_code`` >= 500,
``rpc.grpc.status_code`` not 0).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from typing_extensions import TypedDict

from state.records import SpanEntry

_HTTP_STATUS_KEYS: Final = ("http.status_code", "http.response.status_code")
_GRPC_STATUS_KEY: Final = "rpc.grpc.status_code"


MAX_VISIT_DEPTH: Final = 10_000
"""Spans walked up one visit at most (a guard against a parent cycle in bad data)."""


def visit_entries(spans: Iterable[tuple[float, SpanEntry]]) -> Callable[[SpanEntry], str]:
    """A function giving each span's visit entry, memoised over ``spans``.

    The entry is the id of the highest span above it (itself included) in the same service: the
    span that received the call.
    """
    by_id = {span.get("span_id", ""): span for _, span in spans}
    entry_of: dict[str, str] = {}

    def entry(span: SpanEntry) -> str:
        chain: list[str] = []
        current = span
        while True:
            span_id = current.get("span_id", "")
            if span_id in entry_of:
                found = entry_of[span_id]
                break
            chain.append(span_id)
            parent = by_id.get(current.get("parent_span_id", ""))
            if (
                parent is None
                or parent.get("service") != current.get("service")
                or len(chain) > MAX_VISIT_DEPTH
            ):
                found = span_id
                break
            current = parent
        for item in chain:
            entry_of[item] = found
        return found

    return entry


def is_error(span: SpanEntry) -> bool:
    """Whether a span records a failure (its status, else its HTTP or gRPC status code)."""
    status = span.get("status", "unset")
    if status != "unset":
        return status == "error"
    attributes = span.get("attributes") or {}
    for key in _HTTP_STATUS_KEYS:
        code = attributes.get(key)
        if isinstance(code, int | float) and not isinstance(code, bool) and code >= 500:
            return True
        if isinstance(code, str) and code.isdigit() and int(code) >= 500:
            return True
    grpc = attributes.get(_GRPC_STATUS_KEY)
    return isinstance(grpc, int) and not isinstance(grpc, bool) and grpc != 0


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (``fraction`` 0.5 for p50); 0.0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


class LatencyStats(TypedDict):
    """A span count with its errors and latency percentiles in milliseconds."""

    count: int
    errors: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float


def latency_stats(spans: Sequence[SpanEntry]) -> LatencyStats:
    """Count, errors and latency percentiles of ``spans``."""
    durations = [float(span.get("duration_ms", 0.0)) for span in spans]
    return LatencyStats(
        count=len(spans),
        errors=sum(1 for span in spans if is_error(span)),
        p50_ms=round(percentile(durations, 0.50), 3),
        p90_ms=round(percentile(durations, 0.90), 3),
        p99_ms=round(percentile(durations, 0.99), 3),
        max_ms=round(max(durations, default=0.0), 3),
    )


class OperationStats(LatencyStats):
    """``LatencyStats`` of one service's operation."""

    service: str
    operation: str


def operation_stats(spans: Iterable[SpanEntry]) -> list[OperationStats]:
    """Per service and operation: count, errors, latency percentiles; most spans first."""
    groups: dict[tuple[str, str], list[SpanEntry]] = defaultdict(list)
    for span in spans:
        groups[(span.get("service", ""), span.get("operation", ""))].append(span)
    rows = [
        OperationStats(service=service, operation=operation, **latency_stats(group))
        for (service, operation), group in groups.items()
    ]
    rows.sort(key=lambda row: (-row["count"], row["service"], row["operation"]))
    return rows


class CallEdge(LatencyStats):
    """One edge of the service call graph: calls from ``caller`` served by ``callee``."""

    caller: str
    callee: str


def _serving_spans(spans: Sequence[SpanEntry]) -> list[tuple[str, SpanEntry]]:
    """``(caller service, callee span)`` for each cross-service call, counted once.

    A client span of the caller whose only child is the callee's server span is one call: the
    server span is kept (it is what the callee did). A client span with no child in the data
    (the callee is not traced) stands for the call to whatever it names in ``peer.service`` /
    ``server.address``, when it names anything.
    """
    by_id = {span.get("span_id", ""): span for span in spans}
    has_child: set[str] = set()
    calls: list[tuple[str, SpanEntry]] = []
    for span in spans:
        parent = by_id.get(span.get("parent_span_id", ""))
        if parent is None:
            continue
        has_child.add(parent.get("span_id", ""))
        caller, callee = parent.get("service", ""), span.get("service", "")
        if caller and callee and caller != callee:
            calls.append((caller, span))
    for span in spans:
        if span.get("kind") != "client" or span.get("span_id", "") in has_child:
            continue
        attributes = span.get("attributes") or {}
        peer = attributes.get("peer.service") or attributes.get("server.address")
        if isinstance(peer, str) and peer and peer != span.get("service"):
            calls.append((span.get("service", ""), {**span, "service": peer}))
    return calls


def call_edges(spans: Iterable[SpanEntry]) -> list[CallEdge]:
    """The service call graph of ``spans``: one row per ``caller -> callee``, most calls first."""
    groups: dict[tuple[str, str], list[SpanEntry]] = defaultdict(list)
    for caller, span in _serving_spans(list(spans)):
        groups[(caller, span.get("service", ""))].append(span)
    rows = [
        CallEdge(caller=caller, callee=callee, **latency_stats(group))
        for (caller, callee), group in groups.items()
    ]
    rows.sort(key=lambda row: (-row["count"], row["caller"], row["callee"]))
    return rows


class TreeNode(TypedDict):
    """One span of a trace drawn as a tree: its depth and the span."""

    depth: int
    span: SpanEntry


def span_tree(
    spans: Iterable[SpanEntry], *, max_spans: int = 30, max_depth: int = 12
) -> tuple[list[TreeNode], int]:
    """One trace's spans as a depth-first tree (children by start time), clipped.

    Spans whose parent is missing are roots. At most ``max_spans`` nodes and ``max_depth``
    levels are kept.

    Returns:
        The nodes in drawing order, and how many spans were left out.
    """
    listed = list(spans)
    ids = {span.get("span_id", "") for span in listed}
    children: dict[str, list[SpanEntry]] = defaultdict(list)
    roots: list[SpanEntry] = []
    for span in listed:
        parent = span.get("parent_span_id", "")
        if parent and parent in ids and parent != span.get("span_id"):
            children[parent].append(span)
        else:
            roots.append(span)
    for group in children.values():
        group.sort(key=lambda span: span.get("start", ""))
    roots.sort(key=lambda span: span.get("start", ""))
    nodes: list[TreeNode] = []
    seen: set[str] = set()
    stack: list[tuple[int, SpanEntry]] = [(0, root) for root in reversed(roots)]
    while stack and len(nodes) < max_spans:
        depth, span = stack.pop()
        span_id = span.get("span_id", "")
        if span_id in seen:
            continue
        seen.add(span_id)
        nodes.append(TreeNode(depth=depth, span=span))
        if depth + 1 < max_depth:
            stack.extend((depth + 1, child) for child in reversed(children.get(span_id, [])))
    return nodes, len(listed) - len(nodes)
