"""The offline rules for traces: when to query them, how to follow the call graph, what to say.

- **When**: a question about a named service that asks who calls it (``who calls X``,
  ``callers``, ``upstream``, ``谁调用``, ``调用方``, ``上游``), about its latency (slow, latency,
  timeout) or its errors, or why something is wrong with it, queries its traces
  (``query_traces {"service": X}``): first for a who-calls question, after the logs and metrics
  otherwise. The executor runs the steps of tools the backend serves only (a backend without
  traces is never asked).
- **Following the call graph**: for a why question, the callee of the asked service whose
  calls fail most (else the slowest, when its p99 is at least ``SLOW_CALLEE_MS``) is queried
  next, its traces and its ERROR logs, up to ``MAX_HOPS`` hops: the cause is looked for where
  the calls go, not in the service names log text happens to mention.
- **What is said**: per traced service, who calls it (each caller edge: calls, failures, p99),
  its busiest operation's latency (p50, p99) and failures, and for a why question the callee
  edges that fail or are slow; each claim bound to the edge or operation row it quotes. That
  the callee causes the symptom is a hypothesis, never a claim.
"""

from __future__ import annotations

import re
from typing import Any, Final

from models.offline.evidence import Result
from models.offline.writer import Writer, binding, summary_binding
from state.records import QuestionFacets
from tools.render import format_value

Step = tuple[str, dict[str, Any]]

TOOL: Final = "query_traces"
MAX_HOPS: Final = 2
SLOW_CALLEE_MS: Final = 500.0
"""A callee whose p99 is at least this is followed when none of the calls failed."""
MAX_CALLERS: Final = 3
_CALLERS = re.compile(
    r"\bwho\s+(?:calls?|is\s+calling|invokes?|uses)\b|\bcallers?\b|\bupstream\b|\bcalled\s+by\b"
    r"|谁(?:在)?调用|调用方|上游",
    re.IGNORECASE,
)
_TRACED_SYMPTOMS: Final = frozenset({"slow", "latency", "timeout", "error", "5xx", "error_rate"})

TEXT: Final[dict[str, dict[str, str]]] = {
    "zh": {
        "caller": "{caller} 调用 {callee}：{count} 次调用，{errors} 次失败，p99 {p99}",
        "operation": (
            "{service} 的 {operation}：{count} 个 span，{errors} 个失败，p50 {p50}，p99 {p99}"
        ),
        "callee": "{service} 调用 {callee}：{count} 次调用，{errors} 次失败，p99 {p99}",
        "no_traces": "查询时间范围内没有 {service} 的调用链数据。",
        "no_callers": "调用链中没有其他服务调用 {service}。",
        "hypothesis": (
            "{service} 的问题可能来自它调用的 {callee}（调用链中 {errors} 次失败，p99 {p99}）。"
            "这一因果关系未被证据确立。"
        ),
        "basis": "调用链中的服务调用关系与各调用的失败和延迟",
    },
    "en": {
        "caller": "{caller} calls {callee}: {count} calls, {errors} failed, p99 {p99}",
        "operation": "{service} {operation}: {count} spans, {errors} failed, p50 {p50}, p99 {p99}",
        "callee": "{service} calls {callee}: {count} calls, {errors} failed, p99 {p99}",
        "no_traces": "There are no traces of {service} in the queried window.",
        "no_callers": "No other service calls {service} in the traces.",
        "hypothesis": (
            "The symptoms of {service} may come from {callee}, which it calls ({errors} failed "
            "calls, p99 {p99} in the traces). This link is not established by the evidence."
        ),
        "basis": "the call graph of the traces, with each call's failures and latency",
    },
}


def asks_callers(question: str) -> bool:
    """Whether a question asks who calls a service."""
    return _CALLERS.search(question) is not None


def wanted(found: QuestionFacets, question: str) -> bool:
    """Whether the question's named services should have their traces queried."""
    if not found["services"]:
        return False
    symptoms = set(found["symptoms"] + found["metrics"])
    return (
        asks_callers(question)
        or bool(_TRACED_SYMPTOMS & symptoms)
        or found["about_errors"]
        or found["kind"] == "why"
    )


def with_trace_steps(steps: list[Step], found: QuestionFacets, question: str) -> list[Step]:
    """The plan with a ``query_traces`` step per named service where the question wants one."""
    if not wanted(found, question):
        return steps
    traced = [(TOOL, {"service": service}) for service in found["services"]]
    fresh = [step for step in traced if step not in steps]
    return fresh + steps if asks_callers(question) else steps + fresh


def trace_results(results: list[Result]) -> list[Result]:
    """The trace queries answered, in call order."""
    return [result for result in results if result.tool == TOOL]


def _callee(result: Result) -> tuple[int, dict[str, Any]] | None:
    """The callee edge of the queried service to follow: most failures, else slow enough."""
    service = result.service
    outgoing = [
        (index, edge)
        for index, edge in enumerate(result.entries("edges"))
        if edge.get("caller") == service and edge.get("callee") != service
    ]
    failing = [item for item in outgoing if int(item[1].get("errors") or 0) > 0]
    if failing:
        return max(failing, key=lambda item: int(item[1].get("errors") or 0))
    slow = [item for item in outgoing if float(item[1].get("p99_ms") or 0.0) >= SLOW_CALLEE_MS]
    return max(slow, key=lambda item: float(item[1].get("p99_ms") or 0.0)) if slow else None


def follow_ups(found: QuestionFacets, results: list[Result], turns: int) -> list[Step]:
    """For a why question: the callee the call graph points at, its traces and ERROR logs."""
    if found["kind"] != "why" or turns > MAX_HOPS:
        return []
    traced = {result.service for result in trace_results(results)}
    steps: list[Step] = []
    for result in trace_results(results):
        picked = _callee(result)
        if picked is None:
            continue
        callee = str(picked[1].get("callee"))
        if callee in traced or any(args.get("service") == callee for _, args in steps):
            continue
        steps.append((TOOL, {"service": callee}))
        steps.append(("query_logs", {"service": callee, "level": found["error_level"]}))
    return steps


def _ms(value: object) -> str:
    return f"{format_value(value)} ms"


def _edge_text(writer: Writer, key: str, edge: dict[str, Any], service: str) -> str:
    return writer_text(writer)[key].format(
        caller=edge.get("caller"),
        callee=edge.get("callee"),
        service=service,
        count=format_value(edge.get("count")),
        errors=format_value(edge.get("errors")),
        p99=_ms(edge.get("p99_ms")),
    )


def writer_text(writer: Writer) -> dict[str, str]:
    """The texts in the writer's language."""
    return TEXT.get(writer.lang, TEXT["en"])


def claims(writer: Writer, found: QuestionFacets, results: list[Result]) -> None:
    """Claims and a hypothesis from the trace queries (see the module docstring).

    They come after the rest of the answer and are listed while the Verifier would see them
    (``Writer.fits``): the first that would not fit ends them (it would count as unsupported).
    """
    text = writer_text(writer)

    def fitted(claim_type: str, claim: str, bindings: list[dict[str, Any]]) -> bool:
        before = len(writer.claims)
        writer.claim(claim_type, claim, bindings)
        if writer.fits():
            return True
        writer.drop_claims_from(before)
        return False

    done: set[str] = set()
    said: set[tuple[object, object]] = set()
    for result in trace_results(results):
        service = result.service
        if service is None or service in done:
            continue
        done.add(service)
        if result.status == "no_hit":
            message = text["no_traces"].format(service=service)
            if not fitted("negative_observation", message, [summary_binding(result)]):
                return
            continue
        if result.status != "ok":
            continue
        edges = result.entries("edges")
        callers = [(i, e) for i, e in enumerate(edges) if e.get("callee") == service]
        for index, edge in callers[:MAX_CALLERS]:
            if (edge.get("caller"), edge.get("callee")) in said:
                continue
            said.add((edge.get("caller"), edge.get("callee")))
            path = f"edges[{index}]"
            if not fitted(
                "observation",
                _edge_text(writer, "caller", edge, service),
                [binding(result, path, result.refs.get(path, ""))],
            ):
                return
        operations = result.entries("operations")
        own = [(i, row) for i, row in enumerate(operations) if row.get("service") == service]
        if own:
            index, row = own[0]
            path = f"operations[{index}]"
            if not fitted(
                "observation",
                text["operation"].format(
                    service=service,
                    operation=row.get("operation"),
                    count=format_value(row.get("count")),
                    errors=format_value(row.get("errors")),
                    p50=_ms(row.get("p50_ms")),
                    p99=_ms(row.get("p99_ms")),
                ),
                [binding(result, path, result.refs.get(path, ""))],
            ):
                return
        if found["kind"] != "why":
            continue
        picked = _callee(result)
        if picked is None:
            continue
        index, edge = picked
        path = f"edges[{index}]"
        if (edge.get("caller"), edge.get("callee")) in said:
            continue
        said.add((edge.get("caller"), edge.get("callee")))
        if not fitted(
            "observation",
            _edge_text(writer, "callee", edge, service),
            [binding(result, path, result.refs.get(path, ""))],
        ):
            return
        writer.hypothesis(
            text["hypothesis"].format(
                service=service,
                callee=edge.get("callee"),
                errors=format_value(edge.get("errors")),
                p99=_ms(edge.get("p99_ms")),
            ),
            text["basis"],
        )
