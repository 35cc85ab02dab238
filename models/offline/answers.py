"""The offline executor's answer, per kind of question (see ``models.offline.executor``).

- value: the named metric's series of the named service, last value and max with its unit;
- confirm: one or two claims about exactly the thing asked, saying yes or no (no alert of that
  name, no ERROR logs for that service);
- why: observations per service along the trail, the link between services quoted from the log
  line that states it, the causal chain only as a hypothesis;
- overview: firing alerts and the services with ERROR or WARN logs.

A why or overview answer opens with the root cause the incident analysis found, its chain to the
symptom and the runner-up suspects (``models.offline.root_cause``).

An answer that no section gave a claim quotes a line of each log query of the services asked
that found some (a retry round reading them at every level): a fact rather than none.

A service the backend does not know is never answered from an empty result: the answer says no
data was found and asks to check the name. Nothing about another service is given as the answer
about the one asked.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Any, Final

from knowledge.rank import procedure_sentence, title_section_rank
from knowledge.vocabulary import concepts_in
from models.offline.evidence import (
    LEVELS,
    Result,
    examples,
    has_data,
    log_result,
    metrics_result,
    names_in,
    series_for,
)
from models.offline.question_kinds import compose_kind, question_names, timed_conclusion
from models.offline.root_cause import root_cause_section
from models.offline.rules import ANALYSED_KINDS, SLOW_SYMPTOMS, scopes
from models.offline.traces import claims as trace_claims
from models.offline.writer import Writer, binding, summary_binding
from state.records import QuestionFacets
from verification.question import facet_label
from verification.text import asserts_cause

SYMPTOM_METRICS: Final[tuple[tuple[str, str], ...]] = (
    ("slow", "latency"),
    ("latency", "latency"),
    ("timeout", "latency"),
    ("5xx", "error_rate"),
    ("error", "error_rate"),
    ("error_rate", "error_rate"),
    ("exhaustion", "pool"),
    ("pool", "pool"),
    ("connection", "pool"),
    ("disk", "disk"),
    ("full", "disk"),
    ("lag", "lag"),
    ("certificate", "certificate"),
    ("expire", "certificate"),
    ("cpu", "cpu"),
    ("memory", "memory"),
)
"""Which metric tells most about a symptom (first match wins)."""
OTHER_SECTION: Final = 9
"""``knowledge.rank.title_section_rank`` of impact, meaning and the like: no action there."""
_DEPENDENCY = re.compile(
    r"\b(?:upstream|call(?:ing|s|ed)? to|connect(?:ion|ing)? to|request(?:s)? to|dial(?:ing)?|"
    r"from)\s+(?P<name>[a-z][a-z0-9._-]*[a-z0-9])",
    re.IGNORECASE,
)


def compose(task: dict[str, Any], found: QuestionFacets, results: list[Result]) -> str:
    """The executor_evidence_v2 answer for the question and the results."""
    writer = Writer(str(task.get("language", "zh")), results)
    known = [str(s) for s in task.get("known_services", [])]
    unknown = [s for s in found["unknown_services"] if not has_data(results, s)]
    services = found["services"] + [s for s in found["unknown_services"] if s not in unknown]
    kind = found["kind"]
    if compose_kind(writer, task, found, results):
        pass
    else:
        stated = kind in ANALYSED_KINDS and root_cause_section(writer, found, results)
        if kind == "value":
            value(writer, found, results, services, str(task.get("question", "")))
        elif kind == "confirm":
            confirm(writer, found, results, services)
        elif services and not stated:
            why(writer, found, results, services, known)
        elif services:  # the root cause and its chain are stated: the symptom's own measures
            for service in services:
                why_metrics(writer, found, results, service)
        elif not found["unknown_services"]:
            overview(writer, found, results)
    trace_claims(writer, found, results)
    for service in unknown:
        no_data(writer, service, known)
    if not writer.claims:
        found_lines(writer, found, results)
    actions(writer, results, question_names(str(task.get("question", ""))))
    timed_conclusion(writer, task, results)
    return writer.json()


def found_lines(writer: Writer, found: QuestionFacets, results: list[Result]) -> None:
    """When no section stated anything: a line of each log query that found some.

    A retry round may read a service's lines at every level, which no section of a why answer
    quotes; an answer with no claim would then state no fact although the evidence holds some.
    Only the services asked about (any, when the question names none) are quoted.
    """
    asked = found["services"]
    for result in results:
        if result.tool != "query_logs" or result.status != "ok":
            continue
        if asked and result.service not in asked:
            continue
        picked = examples(result, found)
        if picked:
            writer.log_lines(result, picked[0], counted=False)


def no_data(writer: Writer, service: str, known: list[str]) -> None:
    """A service no backend knows: a gap that says so and asks to check the name."""
    t = writer.t
    text = t["no_data"].format(service=service, known=writer.join(known[:8]) or "-")
    close = difflib.get_close_matches(service, known, n=2, cutoff=0.6)
    if close:
        text += t["did_you_mean"].format(names=writer.join(close))
    writer.gap(text, "query_logs", {"service": service})


def value(
    writer: Writer,
    found: QuestionFacets,
    results: list[Result],
    services: list[str],
    question: str,
) -> None:
    """A value question: the named metric's series of each service asked."""
    for service in scopes(services, found["unknown_services"]):
        result = metrics_result(results, service)
        if result is None:
            continue
        names = sorted({str(e.get("metric")) for e in result.entries("series")})
        for concept in found["metrics"]:
            picks = series_for(result, concept, question)[: 2 if service else 4]
            for index in picks:
                writer.series(result, index, concept)
            if picks or service is None:
                continue
            label = writer.t["no_series" if names else "no_series_at_all"]
            writer.gap(
                label.format(
                    service=service,
                    label=facet_label(concept, writer.lang),
                    metrics=writer.join(names),
                ),
                "query_metrics",
                {"service": service},
            )


def confirm(
    writer: Writer, found: QuestionFacets, results: list[Result], services: list[str]
) -> None:
    """A yes/no question: one or two claims about exactly the alert or service asked."""
    t = writer.t
    if found["alerts"]:
        for name in found["alerts"]:
            confirm_alert(writer, name, results, services)
        return
    if found["about_alerts"] and not found["about_errors"]:
        for service in scopes(services, found["unknown_services"]):
            scoped = [
                r
                for r in results
                if r.tool == "query_metrics" and r.service == service and r.args.get("promql")
            ]
            if not scoped:
                continue
            result = scoped[-1]
            alerts = result.entries("alerts")
            firing = [i for i, e in enumerate(alerts) if e.get("state") == "firing"]
            if firing:
                for index in firing[:2]:
                    writer.alert(result, index, answer=t["yes"] if index == firing[0] else "")
            elif alerts:
                for index in range(min(2, len(alerts))):
                    writer.alert(result, index, answer=t["no"] if index == 0 else "")
            elif result.status == "no_hit" and service:
                text = t["no"] + t["no_alerts"].format(service=service)
                writer.claim("negative_observation", text, [summary_binding(result)])
        return
    for service in scopes(services, found["unknown_services"]):
        level = found["error_level"]
        logs = log_result(results, service, level)
        if logs is not None and logs.status == "ok":
            index = examples(logs, found)[0]
            writer.log_lines(logs, index, answer=t["yes"], counted=bool(service))
            messages = [str(e.get("message", "")) for e in logs.entries("logs")]
            for code in found["status_codes"]:
                if service and not any(code in m for m in messages):
                    writer.gap(t["code_missing"].format(service=service, level=level, code=code))
        elif logs is not None and logs.status == "no_hit" and service:
            writer.no_logs(logs, answer=t["no"])
        metrics = metrics_result(results, service)
        if metrics is not None and service:
            for index in series_for(metrics, "error_rate", "")[:1]:
                writer.series(metrics, index, "error_rate")


def confirm_alert(writer: Writer, name: str, results: list[Result], services: list[str]) -> None:
    """Whether a named alert fires: for the service asked, or anywhere; or that none exists."""
    t = writer.t
    named = [
        r for r in results if r.tool == "query_metrics" and str(r.args.get("alert", "")) == name
    ]
    everywhere = next((r for r in named if not r.service), None)
    if everywhere is None:
        return

    def exact(result: Result) -> list[int]:
        alerts = result.entries("alerts")
        same = [
            i
            for i, e in enumerate(alerts)
            if str(e.get("alert_name")).casefold() == name.casefold()
        ]
        return same or list(range(len(alerts)))

    anywhere = exact(everywhere)
    if not services:
        stated_alerts(writer, everywhere, anywhere)
        if not anywhere:
            writer.no_alert(name, everywhere, None)
        return
    for service in services:
        scoped = next((r for r in named if r.service == service), None)
        mine = exact(scoped) if scoped is not None else []
        if scoped is not None and mine:
            stated_alerts(writer, scoped, mine)
        elif anywhere or scoped is None:
            if scoped is not None:
                text = t["no"] + t["no_alert_for"].format(service=service, name=name)
                bindings = [summary_binding(scoped)]
                if anywhere:
                    # Where the alert does exist: the evidence that it is a real alert.
                    path = f"alerts[{anywhere[0]}]"
                    bindings.append(binding(everywhere, path, everywhere.refs.get(path, "")))
                writer.claim("negative_observation", text, bindings)
        else:
            writer.no_alert(name, everywhere, scoped)


def stated_alerts(writer: Writer, result: Result, indexes: list[int]) -> None:
    """Yes or no per alert asked: one claim per alert name, its series together."""
    t = writer.t
    groups: dict[tuple[str, str], list[int]] = {}
    for index in indexes:
        entry = result.entries("alerts")[index]
        key = (str(entry.get("alert_name")), str(entry.get("state")))
        groups.setdefault(key, []).append(index)
    for (name, state), members in list(groups.items())[:2]:
        answer = t["yes"] if state == "firing" else t["no"]
        if len(members) > 1 and state == "firing":
            writer.alert_series(result, name, members, answer=answer)
        else:
            writer.alert(result, members[0], answer=answer)


def why(
    writer: Writer,
    found: QuestionFacets,
    results: list[Result],
    services: list[str],
    known: list[str],
) -> None:
    """A why question: observations per service along the trail the messages name."""
    slow = bool(SLOW_SYMPTOMS & set(found["symptoms"] + found["metrics"]))
    error = found["error_level"]
    levels = ("WARN", error) if slow else (error, *LEVELS[1:])
    order = list(services)
    for result in results:
        if result.tool == "query_logs" and result.service and result.service not in order:
            order.append(result.service)
    links: list[tuple[str, str]] = []
    seen = frozenset(
        concept
        for result in results
        if result.tool == "query_logs" and result.level == error
        for entry in result.entries("logs")
        for concept in concepts_in(str(entry.get("message", "")))
    )
    for service in order:
        primary = service in services
        for level in levels:
            logs = log_result(results, service, level)
            if logs is None:
                continue
            if logs.status == "no_hit":
                writer.no_logs(logs)
                continue
            if logs.status != "ok":
                continue
            picked = examples(logs, found, seen)
            writer.log_lines(logs, picked[0])
            naming = [
                (index, names[0])
                for index, entry in enumerate(logs.entries("logs"))
                if (names := names_in(str(entry.get("message", "")), order, service))
                and names[0] in order
                and order.index(names[0]) > order.index(service)
            ]
            if naming:
                index, other = naming[0]
                writer.log_example(logs, index, names=other)
                links.append((service, other))
            elif primary and len(picked) > 1:
                writer.log_example(logs, picked[1])
            dependencies(writer, logs, service, known)
        if primary:
            why_metrics(writer, found, results, service)
    why_hypotheses(writer, found, results, services, links, levels)


def dependencies(writer: Writer, logs: Result, service: str, known: list[str]) -> None:
    """Dependencies the messages name that no backend knows: a gap, never a query."""
    lowered = {name.casefold() for name in known}
    for entry in logs.entries("logs")[:20]:
        for match in _DEPENDENCY.finditer(str(entry.get("message", ""))):
            name = match.group("name").split(":")[0].rstrip(".")
            if (
                "-" in name
                and name.casefold() not in lowered
                and name.casefold() != service.casefold()
            ):
                writer.gap(writer.t["unknown_dependency"].format(service=service, name=name))


def why_metrics(writer: Writer, found: QuestionFacets, results: list[Result], service: str) -> None:
    """The series that tells most about the question's symptom, and its firing alerts.

    One firing alert supports a why about a symptom; a why about the alerts themselves ("why is
    X alerting?") is answered by every firing alert of the service (at most three).
    """
    metrics = metrics_result(results, service)
    if metrics is None or metrics.status != "ok":
        return
    asked = found["metrics"] + found["symptoms"]
    concepts = [c for symptom in asked for s, c in SYMPTOM_METRICS if s == symptom]
    for concept in dict.fromkeys([*concepts, "error_rate", "latency"]):
        picks = series_for(metrics, concept, "")
        if picks:
            writer.series(metrics, picks[0], concept)
            break
    firing = [i for i, e in enumerate(metrics.entries("alerts")) if e.get("state") == "firing"]
    writer.alert_groups(metrics, firing, limit=3 if found["about_alerts"] else 1)


def why_hypotheses(
    writer: Writer,
    found: QuestionFacets,
    results: list[Result],
    services: list[str],
    links: list[tuple[str, str]],
    levels: tuple[str, ...],
) -> None:
    """The link between services (or within one) as a possible direction, never a claim."""
    t = writer.t
    linked = False
    for service, other in links:
        example = _example_message(results, found, other, levels)
        if example is not None:
            writer.hypothesis(
                t["hypothesis_link"].format(service=service, other=other, message=example[1]),
                t["basis_link"],
            )
            linked = True
    if linked:
        return
    for service in services:
        example = _example_message(results, found, service, levels)
        if example is not None:
            level, message = example
            writer.hypothesis(
                t["hypothesis_self"].format(service=service, level=level, message=message),
                t["basis_self"],
            )
            return


def _example_message(
    results: list[Result], found: QuestionFacets, service: str, levels: tuple[str, ...]
) -> tuple[str, str] | None:
    """The first level with logs of ``service`` and its most telling message (160 characters)."""
    for level in levels:
        logs = log_result(results, service, level)
        if logs is not None and logs.status == "ok":
            entry = logs.entries("logs")[examples(logs, found)[0]]
            return level, str(entry.get("message", ""))[:160]
    return None


def overview(writer: Writer, found: QuestionFacets, results: list[Result]) -> None:
    """What is wrong: firing alerts and the services with ERROR or WARN logs.

    The services' lines are listed while the claims fit the Verifier's block
    (``Writer.fits``): one it would not see would count as unsupported.
    """
    t = writer.t
    metrics = metrics_result(results, None)
    if metrics is not None:
        firing = [i for i, e in enumerate(metrics.entries("alerts")) if e.get("state") == "firing"]
        writer.alert_groups(metrics, firing, limit=3)
    covered: set[str] = set()
    for level, limit in ((found["error_level"], 3), ("WARN", 2)):
        logs = log_result(results, None, level)
        if logs is None:
            continue
        if logs.status == "no_hit":
            text = t["no_logs_all"].format(level=level)
            writer.claim("negative_observation", text, [summary_binding(logs)])
            continue
        shown = 0
        for index in examples(logs, found):
            service = str(logs.entries("logs")[index].get("service", ""))
            if service in covered or shown >= limit:
                continue
            covered.add(service)
            shown += 1
            before = len(writer.claims)
            writer.log_lines(logs, index, counted=False)
            if not writer.fits():  # long lines: the Verifier would not see the rest
                writer.drop_claims_from(before)
                return


def actions(writer: Writer, results: list[Result], prefer: Sequence[str] = ()) -> None:
    """Next steps: each runbook found, by its action sentence, with its title and source."""
    for result in results:
        if result.tool != "lookup_knowledge":
            continue
        # A chunk of a runbook's mitigation or procedure section first; never one of its
        # impact or meaning section.
        # The runbook of a name the question gives (an alert) before the others.
        named = [name.casefold() for name in prefer]
        ranked = sorted(
            result.entries("documents"),
            key=lambda entry: (
                not any(n in str(entry.get("title", "")).casefold() for n in named),
                title_section_rank(str(entry.get("title", ""))),
            ),
        )
        for entry in ranked:
            if title_section_rank(str(entry.get("title", ""))) >= OTHER_SECTION:
                continue
            sentence = procedure_sentence(str(entry.get("chunk", "")))
            if sentence is None or asserts_cause(sentence):
                continue
            source = str(entry.get("source") or entry.get("doc_id") or "")
            writer.action(str(entry.get("title", "")), sentence, source)
