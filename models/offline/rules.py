"""The offline planner's rules: the first tool calls for what the question asks.

The question is read by ``verification.question.analyze_question`` against the services the
evidence backend knows (``known_services`` of the task), so the rules work on any backend:

- a value question queries the metrics of each service it names;
- a confirmation question queries exactly the thing asked: the named alert (everywhere, and for
  the named service), the alerts of a service, or its ERROR logs and metrics;
- a why question queries the metrics, ERROR logs and WARN logs of each service it names, most
  telling first (WARN first for slowness); a level the question names (``FATAL``, ``PANIC``,
  ``CRITICAL``) is queried instead of ERROR; the executor then follows the services the messages
  name, and looks up runbooks for the symptoms it saw;
- an overview queries every alert and series, ERROR and WARN logs;
- a why question and an overview (alert investigations included) also ask for the incident
  analysis (``analyze_incident``, after the queries above, so a tight tool budget cuts it
  first), scoped to the services named and starting at the earliest time the question names
  (``2026-03-01T10:00:00Z``, ``2026-03-01 10:00:00 UTC``; no zone: UTC);
  not when the question names only services the backend does not know;
- a service the backend does not know is queried for logs and metrics once, to show there are
  none;
- traces of the named services for who-calls, latency, error and why questions
  (``models.offline.traces``).

Round 2 runs the queries the retry context suggests, of the registered tools the offline rules
may plan (``tools.spec.ToolSpec.planned_offline``). The plan is numbered lines
``N. tool {json args}`` that the offline executor reads back with ``parse_steps``; other lines
are notes for a reader.
"""

from __future__ import annotations

import json
import re
from typing import Any

from models.offline.traces import with_trace_steps
from state.records import QuestionFacets
from tools.registry import planned_offline
from verification.question import analyze_question

Step = tuple[str, dict[str, Any]]
"""A tool call: its name and arguments."""

_STEP = re.compile(r"^\s*\d+\.\s+(?P<tool>[A-Za-z0-9_-]+)\s+(?P<args>\{.*\})\s*$")
SLOW_SYMPTOMS = frozenset({"slow", "latency", "timeout", "lag"})
"""Symptoms explained by WARN logs (slow queries, lock waits) before ERROR logs."""
ANALYSED_KINDS = ("why", "overview")
"""Question kinds (why, "what is wrong", alert investigations) that start with the incident
analysis (``analyze_incident``)."""
_ISO = re.compile(
    r"\b(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)(Z|[+-]\d{2}:?\d{2}| ?UTC)?"
)
HOP_NOTE = (
    "then: follow the services and dependencies the error and warning messages name "
    "(up to two hops), and look up runbooks for the symptoms seen"
)


def alert_selector(name: str, service: str | None = None) -> str:
    """The PromQL selector of an alert's series (``ALERTS{alertname="A",service="S"}``)."""
    labels = [f'alertname="{name}"'] if name else []
    if service:
        labels.append(f'service="{service}"')
    return "ALERTS{" + ",".join(labels) + "}"


def scopes(services: list[str], unknown: list[str] | None = None) -> list[str | None]:
    """The services to query one by one; ``[None]`` (everything) when none is named at all.

    A question about a service the backend does not know is never answered from the others.
    """
    if services:
        return list(services)
    return [] if unknown else [None]


def analysis(facts: dict[str, Any]) -> QuestionFacets:
    """The question of the task facts, read against the services the backend knows."""
    known = [str(s) for s in facts.get("known_services", [])]
    return analyze_question(str(facts.get("question", "")), known, stems=True)


def _log_steps(service: str | None, slow: bool, level: str = "ERROR") -> list[Step]:
    scope = {"service": service} if service else {}
    error: Step = ("query_logs", {**scope, "level": level})
    warn: Step = ("query_logs", {**scope, "level": "WARN"})
    metrics: Step = ("query_metrics", dict(scope))
    return [warn, metrics, error] if slow else [error, metrics, warn]


def _confirm_steps(found: QuestionFacets) -> list[Step]:
    services = found["services"]
    unknown = found["unknown_services"]
    steps: list[Step] = []
    if found["alerts"]:
        for name in found["alerts"]:
            steps.append(("query_metrics", {"alert": name, "promql": alert_selector(name)}))
            for service in services:
                steps.append(
                    (
                        "query_metrics",
                        {
                            "service": service,
                            "alert": name,
                            "promql": alert_selector(name, service),
                        },
                    )
                )
        return steps
    if found["about_alerts"] and not found["about_errors"]:
        for target in scopes(services, unknown):
            scope = {"service": target} if target else {}
            steps.append(("query_metrics", {**scope, "promql": alert_selector("", target)}))
        return steps
    for target in scopes(services, unknown):
        scope = {"service": target} if target else {}
        steps.append(("query_logs", {**scope, "level": found["error_level"]}))
        steps.append(("query_metrics", dict(scope)))
    return steps


def plan_steps(facts: dict[str, Any]) -> list[Step]:
    """The tool calls the offline planner proposes for one round (see the module docstring)."""
    found = analysis(facts)
    services = found["services"]
    steps: list[Step] = []
    if int(facts.get("round", 1)) > 1:
        retry = facts.get("retry_context") or {}
        for query in retry.get("suggested_queries", []):
            tool, args = query.get("tool"), query.get("arguments") or {}
            plannable = isinstance(tool, str) and planned_offline(tool)
            if plannable and isinstance(args, dict) and (tool, args) not in steps:
                steps.append((str(tool), dict(args)))
        for service in services:
            if not any(t == "query_logs" and a.get("service") == service for t, a in steps):
                steps.append(("query_logs", {"service": service, "limit": 50}))
        return steps or [("query_logs", {"limit": 50})]
    kind = found["kind"]
    slow = bool(SLOW_SYMPTOMS & set(found["symptoms"] + found["metrics"]))
    unknown = found["unknown_services"]
    if kind == "value":
        steps = [("query_metrics", {"service": s} if s else {}) for s in scopes(services, unknown)]
    elif kind == "confirm":
        steps = _confirm_steps(found)
    else:
        for target in scopes(services, unknown):
            steps += _log_steps(target, slow, found["error_level"])
        if services or not unknown:  # never about other services than the unknown one asked
            steps.append(analysis_step(found, str(facts.get("question", ""))))
    for service in unknown:
        steps.append(("query_logs", {"service": service}))
        steps.append(("query_metrics", {"service": service}))
    return with_trace_steps(steps, found, str(facts.get("question", "")))


def analysis_step(found: QuestionFacets, question: str) -> Step:
    """The incident analysis of a why or overview question.

    The services it names, and the earliest time it names as the start of the incident window
    (an alert investigation names the time before the first alert started).
    """
    args: dict[str, Any] = {}
    if found["services"]:
        args["services"] = list(found["services"])
    times = sorted(
        f"{day}T{clock}{'Z' if not zone or zone.strip() == 'UTC' else zone}"
        for day, clock, zone in _ISO.findall(question)
    )
    if times:
        args["start"] = times[0]
    return ("analyze_incident", args)


def render_steps(steps: list[Step], *, note: str = "") -> str:
    """A numbered plan, one tool call per line (``N. tool {json args}``), and a closing note."""
    lines = [
        f"{i}. {tool} {json.dumps(args, ensure_ascii=False, sort_keys=True)}"
        for i, (tool, args) in enumerate(steps, start=1)
    ]
    return "\n".join([*lines, note] if note else lines)


def parse_steps(plan: str) -> list[Step]:
    """Read back the tool calls of a plan written by ``render_steps``."""
    steps: list[Step] = []
    for line in plan.splitlines():
        match = _STEP.match(line)
        if not match or not planned_offline(match.group("tool")):
            continue
        try:
            args = json.loads(match.group("args"))
        except json.JSONDecodeError:
            continue
        if isinstance(args, dict):
            steps.append((match.group("tool"), args))
    return steps
