"""Offline executor: runs the plan, follows the evidence, then answers what was asked.

Turns: first the plan's tool calls; then, for a why question, the services the ERROR and WARN
messages name (``upstream X``, ``call to Y``, ``connection to Z``) are queried next, up to two
hops; then runbooks are looked up for the symptoms of the question and of the messages seen;
then the answer. The tool budget bounds all of it: when the executor is told the budget is
spent, it answers and asks once more for what it still wanted, which the executor node records
as not run (the answer lists those calls as a gap).

The answer is built from the structured tool results (``nodes.offline.evidence``), per kind of
question (``verification.question``):

- value: the named metric's series of the named service, last value and max with its unit;
- confirm: one or two claims about exactly the thing asked, saying yes or no (no alert of that
  name, no ERROR logs for that service);
- why: observations per service along the trail, the link between services quoted from the log
  line that states it, the causal chain only as a hypothesis;
- overview: firing alerts and the services with ERROR or WARN logs.

A service the backend does not know is never answered from an empty result: the answer says no
data was found and asks to check the name. Nothing about another service is given as the answer
about the one asked.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Final

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.tool import ToolCall

from nodes.offline.base import OfflineModel, first_json_human
from nodes.offline.evidence import LEVELS, Result, budget_spent, read_results, tool_turns
from nodes.offline.rules import SLOW_SYMPTOMS, Step, analysis, parse_steps, plan_steps, scopes
from nodes.offline.writer import Writer, summary_binding
from state.records import QuestionFacets
from tools.knowledge_rank import procedure_sentence
from tools.vocabulary import concepts_in
from verification.question import facet_label
from verification.text import asserts_cause

MAX_HOPS: Final = 2
"""How many times a why question follows the services its messages name."""
HOP_SERVICES: Final = 2
"""At most this many new services per hop."""
KNOWLEDGE_TERMS: Final = 8
"""At most this many concepts in a runbook query."""
_QUIET_CONCEPTS: Final = frozenset({"alert"})
"""Concepts too general to choose a runbook by."""
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
_DEPENDENCY = re.compile(
    r"\b(?:upstream|call(?:ing|s|ed)? to|connect(?:ion|ing)? to|request(?:s)? to|dial(?:ing)?|"
    r"from)\s+(?P<name>[a-z][a-z0-9._-]*[a-z0-9])",
    re.IGNORECASE,
)
_DIGITS = re.compile(r"\d+")
SAME_KIND: Final = 0.75
"""How alike two messages (numbers blanked) must be to count as one kind."""


# --------------------------------------------------------------------------- reading results


def _logs(results: list[Result], service: str | None, level: str) -> Result | None:
    """The last log query of a service (or of all services) at a level."""
    found = [
        r
        for r in results
        if r.tool == "query_logs"
        and r.service == service
        and r.level == level
        and not r.args.get("query")
    ]
    return found[-1] if found else None


def _metrics(results: list[Result], service: str | None) -> Result | None:
    """The last unfiltered metrics query of a service (or of everything)."""
    found = [
        r
        for r in results
        if r.tool == "query_metrics"
        and r.service == service
        and not r.args.get("alert")
        and not r.args.get("promql")
    ]
    return found[-1] if found else None


def _has_data(results: list[Result], service: str) -> bool:
    return any(r.service == service and r.status == "ok" for r in results)


def _names_in(message: str, known: list[str], exclude: str | None) -> list[str]:
    """The known services a message names as whole names (in order), other than ``exclude``."""
    text = message.casefold()
    found: list[tuple[int, str]] = []
    for name in known:
        if name == exclude:
            continue
        match = re.search(
            r"(?<![a-z0-9_.-])" + re.escape(name.casefold()) + r"(?![a-z0-9_-])", text
        )
        if match:
            found.append((match.start(), name))
    return [name for _, name in sorted(found)]


def _kind_of(message: str) -> str:
    """A message with its numbers and ids blanked out."""
    return _DIGITS.sub("#", message)[:120]


def _same_kind(kind: str, seen: list[str]) -> bool:
    """Messages that differ only in numbers, ids or a path are one kind."""
    return any(difflib.SequenceMatcher(None, kind, other).ratio() >= SAME_KIND for other in seen)


def _examples(
    result: Result, found: QuestionFacets, seen_concepts: frozenset[str] = frozenset()
) -> list[int]:
    """Indexes of distinct kinds of log messages, the most telling first.

    A message naming the question's symptoms or status codes comes first, then one naming what
    the errors seen so far name (``seen_concepts``), then the rest in order.
    """
    wanted = set(found["symptoms"] + found["metrics"])
    scored: list[tuple[int, int]] = []
    seen: list[str] = []
    for index, entry in enumerate(result.entries("logs")):
        message = str(entry.get("message", ""))
        kind = _kind_of(message)
        if _same_kind(kind, seen):
            continue
        seen.append(kind)
        named = set(concepts_in(message))
        score = 2 * len(wanted & named) + len(seen_concepts & named)
        score += sum(4 for code in found["status_codes"] if code in message)
        scored.append((-score, index))
    return [index for _, index in sorted(scored)]


def _series_for(result: Result, concept: str, question: str) -> list[int]:
    """Indexes of the series that measure a concept, the most direct first."""
    asked = set(re.findall(r"p\d{2,3}", question.casefold()))
    picks: list[tuple[int, int, int]] = []
    for index, entry in enumerate(result.entries("series")):
        metric = str(entry.get("metric", ""))
        names = concepts_in(metric)
        if concept not in names:
            continue
        parts = set(metric.casefold().split("_"))
        miss = 0 if not asked or asked & parts else 1
        indirect = 1 if {"database", "query"} & set(names) and concept == "latency" else 0
        picks.append((miss, indirect, index))
    return [index for *_, index in sorted(picks)]


# --------------------------------------------------------------------------- the executor


def _calls(steps: list[Step], round_no: int, turn: int) -> list[ToolCall]:
    return [
        ToolCall(name=tool, args=args, id=f"offline-r{round_no}-t{turn}-{i}", type="tool_call")
        for i, (tool, args) in enumerate(steps)
    ]


class OfflineExecutor(OfflineModel):
    """Deterministic executor for the offline mode (see the module docstring)."""

    def respond(self, messages: list[BaseMessage]) -> AIMessage:
        """The plan's calls first; then the follow-ups; then the executor_evidence_v2 answer."""
        task = first_json_human(messages)
        round_no = int(task.get("round", 1))
        turns = tool_turns(messages)
        if turns == 0:
            steps = parse_steps(str(task.get("plan", ""))) or plan_steps(task)
            return AIMessage(content="", tool_calls=_calls(steps, round_no, turns))
        found = analysis(task)
        results = read_results(messages)
        spent = budget_spent(messages)
        wanted = self.follow_ups(task, found, results, turns, everything=spent)
        if wanted and not spent:
            return AIMessage(content="", tool_calls=_calls(wanted, round_no, turns))
        answer = self.answer(task, found, results)
        # Asked after the budget: the executor node drops these and records them as not run.
        return AIMessage(content=answer, tool_calls=_calls(wanted, round_no, turns))

    # ----------------------------------------------------------------------- follow-ups

    @staticmethod
    def hops(found: QuestionFacets, results: list[Result], known: list[str]) -> list[str]:
        """Known services named by the ERROR and WARN messages seen, not investigated yet."""
        investigated = [r.service for r in results if r.tool == "query_logs" and r.service]
        new: list[str] = []
        for result in results:
            if result.tool != "query_logs" or result.level not in LEVELS:
                continue
            for entry in result.entries("logs"):
                for name in _names_in(str(entry.get("message", "")), known, result.service):
                    if name not in investigated and name not in new:
                        new.append(name)
        return new[:HOP_SERVICES]

    def follow_ups(
        self,
        task: dict[str, Any],
        found: QuestionFacets,
        results: list[Result],
        turns: int,
        *,
        everything: bool = False,
    ) -> list[Step]:
        """What to query next: hop services (why questions), then runbooks; [] when done.

        With ``everything`` (the budget is spent) both at once: what was still wanted.
        """
        known = [str(s) for s in task.get("known_services", [])]
        steps: list[Step] = []
        if found["kind"] == "why" and found["services"] and turns <= MAX_HOPS:
            for service in self.hops(found, results, known):
                steps.append(("query_logs", {"service": service, "level": "ERROR"}))
                steps.append(("query_logs", {"service": service, "level": "WARN"}))
            if steps and not everything:
                return steps
        query = self.knowledge_query(found, results)
        if query and not any(r.tool == "lookup_knowledge" for r in results):
            steps.append(("lookup_knowledge", {"query": query, "top_k": 3}))
        return steps

    @staticmethod
    def knowledge_query(found: QuestionFacets, results: list[Result]) -> str:
        """Runbook query terms: the question's symptoms, then those of the evidence seen.

        Concept ids only (``tools.vocabulary``), so the query is the same whatever the language
        of the question; confirmation questions stay narrow and look nothing up.
        """
        if found["kind"] == "confirm":
            return ""
        terms = [c for c in found["metrics"] + found["symptoms"] if c not in _QUIET_CONCEPTS]
        if found["kind"] in ("why", "overview"):
            for result in results:
                if result.tool == "query_logs" and result.level in LEVELS:
                    for index in _examples(result, found)[:2]:
                        entry = result.entries("logs")[index]
                        terms += concepts_in(str(entry.get("message", "")))
                elif result.tool == "query_metrics":
                    for entry in result.entries("alerts"):
                        if entry.get("state") == "firing":
                            terms += concepts_in(str(entry.get("alert_name", "")))
        unique = [t for t in dict.fromkeys(terms) if t not in _QUIET_CONCEPTS]
        return " ".join(unique[:KNOWLEDGE_TERMS])

    # ----------------------------------------------------------------------- the answer

    def answer(self, task: dict[str, Any], found: QuestionFacets, results: list[Result]) -> str:
        """The executor_evidence_v2 answer for the question and the results."""
        writer = Writer(str(task.get("language", "zh")))
        known = [str(s) for s in task.get("known_services", [])]
        unknown = [s for s in found["unknown_services"] if not _has_data(results, s)]
        services = found["services"] + [s for s in found["unknown_services"] if s not in unknown]
        kind = found["kind"]
        if kind == "value":
            self._value(writer, found, results, services, str(task.get("question", "")))
        elif kind == "confirm":
            self._confirm(writer, found, results, services)
        elif services:
            self._why(writer, found, results, services, known)
        elif not found["unknown_services"]:
            self._overview(writer, found, results)
        for service in unknown:
            self._no_data(writer, service, known)
        self._actions(writer, results)
        return writer.json()

    @staticmethod
    def _no_data(writer: Writer, service: str, known: list[str]) -> None:
        t = writer.t
        text = t["no_data"].format(service=service, known=writer.join(known[:8]) or "-")
        close = difflib.get_close_matches(service, known, n=2, cutoff=0.6)
        if close:
            text += t["did_you_mean"].format(names=writer.join(close))
        writer.gap(text, "query_logs", {"service": service})

    def _value(
        self,
        writer: Writer,
        found: QuestionFacets,
        results: list[Result],
        services: list[str],
        question: str,
    ) -> None:
        for service in scopes(services, found["unknown_services"]):
            result = _metrics(results, service)
            if result is None:
                continue
            names = sorted({str(e.get("metric")) for e in result.entries("series")})
            for concept in found["metrics"]:
                picks = _series_for(result, concept, question)[: 2 if service else 4]
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

    def _confirm(
        self, writer: Writer, found: QuestionFacets, results: list[Result], services: list[str]
    ) -> None:
        t = writer.t
        if found["alerts"]:
            for name in found["alerts"]:
                self._confirm_alert(writer, name, results, services)
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
            logs = _logs(results, service, "ERROR")
            if logs is not None and logs.status == "ok":
                index = _examples(logs, found)[0]
                writer.log_lines(logs, index, answer=t["yes"], counted=bool(service))
                messages = [str(e.get("message", "")) for e in logs.entries("logs")]
                for code in found["status_codes"]:
                    if service and not any(code in m for m in messages):
                        writer.gap(
                            t["code_missing"].format(service=service, level="ERROR", code=code)
                        )
            elif logs is not None and logs.status == "no_hit" and service:
                writer.no_logs(logs, answer=t["no"])
            metrics = _metrics(results, service)
            if metrics is not None and service:
                for index in _series_for(metrics, "error_rate", "")[:1]:
                    writer.series(metrics, index, "error_rate")

    @staticmethod
    def _confirm_alert(
        writer: Writer, name: str, results: list[Result], services: list[str]
    ) -> None:
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
            for index in anywhere[:2]:
                state = everywhere.entries("alerts")[index].get("state")
                writer.alert(everywhere, index, answer=t["yes"] if state == "firing" else t["no"])
            if not anywhere:
                writer.no_alert(name, everywhere, None)
            return
        for service in services:
            scoped = next((r for r in named if r.service == service), None)
            mine = exact(scoped) if scoped is not None else []
            if scoped is not None and mine:
                for index in mine[:2]:
                    state = scoped.entries("alerts")[index].get("state")
                    writer.alert(scoped, index, answer=t["yes"] if state == "firing" else t["no"])
            elif anywhere or scoped is None:
                if scoped is not None:
                    text = t["no"] + t["no_alert_for"].format(service=service, name=name)
                    writer.claim("negative_observation", text, [summary_binding(scoped)])
            else:
                writer.no_alert(name, everywhere, scoped)

    def _why(
        self,
        writer: Writer,
        found: QuestionFacets,
        results: list[Result],
        services: list[str],
        known: list[str],
    ) -> None:
        slow = bool(SLOW_SYMPTOMS & set(found["symptoms"] + found["metrics"]))
        levels = ("WARN", "ERROR") if slow else LEVELS
        order = list(services)
        for result in results:
            if result.tool == "query_logs" and result.service and result.service not in order:
                order.append(result.service)
        links: list[tuple[str, str]] = []
        seen = frozenset(
            concept
            for result in results
            if result.tool == "query_logs" and result.level == "ERROR"
            for entry in result.entries("logs")
            for concept in concepts_in(str(entry.get("message", "")))
        )
        for service in order:
            primary = service in services
            for level in levels:
                logs = _logs(results, service, level)
                if logs is None:
                    continue
                if logs.status == "no_hit":
                    writer.no_logs(logs)
                    continue
                if logs.status != "ok":
                    continue
                examples = _examples(logs, found, seen)
                writer.log_lines(logs, examples[0])
                naming = [
                    (index, names[0])
                    for index, entry in enumerate(logs.entries("logs"))
                    if (names := _names_in(str(entry.get("message", "")), order, service))
                    and names[0] in order
                    and order.index(names[0]) > order.index(service)
                ]
                if naming:
                    index, other = naming[0]
                    writer.log_example(logs, index, names=other)
                    links.append((service, other))
                elif primary and len(examples) > 1:
                    writer.log_example(logs, examples[1])
                self._dependencies(writer, logs, service, known)
            if primary:
                self._why_metrics(writer, found, results, service)
        self._why_hypotheses(writer, found, results, services, links, levels)

    @staticmethod
    def _dependencies(writer: Writer, logs: Result, service: str, known: list[str]) -> None:
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
                    text = (
                        f"{service} 的日志提到了 {name}，但没有任何后端知道这个服务。"
                        if writer.lang == "zh"
                        else f"The logs of {service} name {name}, which no backend knows."
                    )
                    writer.gap(text)

    @staticmethod
    def _why_metrics(
        writer: Writer, found: QuestionFacets, results: list[Result], service: str
    ) -> None:
        metrics = _metrics(results, service)
        if metrics is None or metrics.status != "ok":
            return
        asked = found["metrics"] + found["symptoms"]
        concepts = [c for symptom in asked for s, c in SYMPTOM_METRICS if s == symptom]
        for concept in dict.fromkeys([*concepts, "error_rate", "latency"]):
            picks = _series_for(metrics, concept, "")
            if picks:
                writer.series(metrics, picks[0], concept)
                break
        firing = [i for i, e in enumerate(metrics.entries("alerts")) if e.get("state") == "firing"]
        for index in firing[:1]:
            writer.alert(metrics, index)

    @staticmethod
    def _why_hypotheses(
        writer: Writer,
        found: QuestionFacets,
        results: list[Result],
        services: list[str],
        links: list[tuple[str, str]],
        levels: tuple[str, ...],
    ) -> None:
        t = writer.t
        linked = False
        for service, other in links:
            for level in levels:
                logs = _logs(results, other, level)
                if logs is None or logs.status != "ok":
                    continue
                entry = logs.entries("logs")[_examples(logs, found)[0]]
                writer.hypothesis(
                    t["hypothesis_link"].format(
                        service=service, other=other, message=str(entry.get("message", ""))[:160]
                    ),
                    t["basis_link"],
                )
                linked = True
                break
        if linked:
            return
        for service in services:
            for level in levels:
                logs = _logs(results, service, level)
                if logs is None or logs.status != "ok":
                    continue
                entry = logs.entries("logs")[_examples(logs, found)[0]]
                writer.hypothesis(
                    t["hypothesis_self"].format(
                        service=service, level=level, message=str(entry.get("message", ""))[:160]
                    ),
                    t["basis_self"],
                )
                return

    @staticmethod
    def _overview(writer: Writer, found: QuestionFacets, results: list[Result]) -> None:
        t = writer.t
        metrics = _metrics(results, None)
        if metrics is not None:
            firing = [
                i for i, e in enumerate(metrics.entries("alerts")) if e.get("state") == "firing"
            ]
            for index in firing[:3]:
                writer.alert(metrics, index)
        covered: set[str] = set()
        for level, limit in (("ERROR", 3), ("WARN", 2)):
            logs = _logs(results, None, level)
            if logs is None:
                continue
            if logs.status == "no_hit":
                text = t["no_logs_all"].format(level=level)
                writer.claim("negative_observation", text, [summary_binding(logs)])
                continue
            shown = 0
            for index in _examples(logs, found):
                service = str(logs.entries("logs")[index].get("service", ""))
                if service in covered or shown >= limit:
                    continue
                covered.add(service)
                shown += 1
                writer.log_lines(logs, index, counted=False)

    @staticmethod
    def _actions(writer: Writer, results: list[Result]) -> None:
        """Next steps: each runbook found, by its action sentence, with its title and source."""
        for result in results:
            if result.tool != "lookup_knowledge":
                continue
            for entry in result.entries("documents"):
                sentence = procedure_sentence(str(entry.get("chunk", "")))
                if sentence is None or asserts_cause(sentence):
                    continue
                source = str(entry.get("source") or entry.get("doc_id") or "")
                writer.action(str(entry.get("title", "")), sentence, source)
