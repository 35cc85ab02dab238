"""Offline executor: runs the plan, follows the evidence, then answers what was asked.

Turns: first the plan's tool calls (of the tools offered: those the backend serves); then, for a
why question, the callee the traces' call graph points at (``models.offline.traces``); then
the services the ERROR and WARN messages name (``upstream X``, ``call to Y``, ``connection to
Z``) are queried next, up to two hops, but never the root cause the incident analysis singled
out (its evidence is in the analysis: the hops only bring the lines that link the services in
between); then runbooks are looked up for the symptoms of the question and of the messages seen;
then the answer. The tool budget bounds all of it: a call that offers no tools means the budget
is spent (``models.offline.base``); it answers then, and asks once more for what it still wanted,
which the executor node records as not run (the answer lists those calls as a gap).

The answer is built from the structured tool results (``models.offline.evidence``), per kind of
question, by ``models.offline.answers``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.tool import ToolCall

from knowledge.runbook_text import URL
from knowledge.vocabulary import concepts_in
from models.offline.answers import compose
from models.offline.base import OfflineModel, first_json_human
from models.offline.evidence import (
    LEVELS,
    Result,
    examples,
    names_in,
    read_results,
    tool_turns,
)
from models.offline.question_kinds import current_time, intent_of, plan_for, windowed_steps
from models.offline.rules import Step, analysis, parse_steps
from models.offline.traces import follow_ups as trace_follow_ups
from state.records import QuestionFacets

MAX_HOPS: Final = 2
"""How many times a why question follows the services its messages name."""
HOP_SERVICES: Final = 2
"""At most this many new services per hop."""
KNOWLEDGE_TERMS: Final = 8
"""At most this many concepts in a runbook query."""
_QUIET_CONCEPTS: Final = frozenset({"alert"})
"""Concepts too general to choose a runbook by."""
ROOT_LINES: Final = 2
"""Log lines of the analysis's root cause whose concepts join a runbook query."""
# --------------------------------------------------------------------------- the executor


def root_cause_terms(result: Result) -> list[str]:
    """Concepts of the log lines the analysis's root cause rests on (its strongest first).

    The root cause is not followed with queries of its own (the analysis quoted it), so its
    lines stand in for them when runbooks are chosen.
    """
    signals = result.entries("signals")
    for suspect in result.entries("suspects"):
        if suspect.get("root_cause") is not True:
            continue
        terms: list[str] = []
        lines = 0
        indexes = suspect.get("signals")
        for index in indexes if isinstance(indexes, list) else []:
            if not isinstance(index, int) or not 0 <= index < len(signals):
                continue
            evidence = signals[index].get("evidence")
            for item in evidence if isinstance(evidence, list) else []:
                if isinstance(item, dict) and item.get("kind") == "log" and lines < ROOT_LINES:
                    terms += concepts_in(str(item.get("message", "")))
                    lines += 1
        return terms
    return []


def was_run(results: list[Result], step: Step) -> bool:
    """Whether a call of that tool with those arguments was answered already."""
    tool, args = step
    return any(result.tool == tool and result.args == args for result in results)


def _calls(steps: list[Step], round_no: int, turn: int) -> list[ToolCall]:
    return [
        ToolCall(name=tool, args=args, id=f"offline-r{round_no}-t{turn}-{i}", type="tool_call")
        for i, (tool, args) in enumerate(steps)
    ]


class OfflineExecutor(OfflineModel):
    """Deterministic executor for the offline mode (see the module docstring)."""

    def respond(self, messages: list[BaseMessage], *, tools: Sequence[str] = ()) -> AIMessage:
        """The plan's calls first; then the follow-ups; then the executor_evidence_v2 answer.

        Without ``tools`` offered (the round's tool budget is spent) it answers at once.
        """
        task = first_json_human(messages)
        round_no = int(task.get("round", 1))
        turns = tool_turns(messages)
        if turns == 0:
            steps = parse_steps(str(task.get("plan", ""))) or plan_for(task)
            # A step of a tool the backend does not serve (traces without a trace source) is
            # left out.
            steps = [step for step in steps if not tools or step[0] in tools]
            return AIMessage(content="", tool_calls=_calls(steps, round_no, turns))
        found = analysis(task)
        results = read_results(messages)
        spent = not tools
        wanted = self.follow_ups(task, found, results, turns, everything=spent)
        if tools:
            wanted = [step for step in wanted if step[0] in tools]
        if wanted and not spent:
            return AIMessage(content="", tool_calls=_calls(wanted, round_no, turns))
        answer = compose(task, found, results)
        # Asked after the budget: the executor node drops these and records them as not run.
        return AIMessage(content=answer, tool_calls=_calls(wanted, round_no, turns))

    # ----------------------------------------------------------------------- follow-ups

    @staticmethod
    def hops(found: QuestionFacets, results: list[Result], known: list[str]) -> list[str]:
        """Known services named by the ERROR and WARN messages seen, not investigated yet."""
        investigated = [r.service for r in results if r.tool == "query_logs" and r.service]
        new: list[str] = []
        for result in results:
            if result.tool != "query_logs" or result.level not in (found["error_level"], *LEVELS):
                continue
            for entry in result.entries("logs"):
                for name in names_in(str(entry.get("message", "")), known, result.service):
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
        intent = intent_of(task)
        if intent.time is not None and int(task.get("round", 1)) == 1:
            asked = any(r.args.get("start") for r in results)
            now = current_time(results)
            if not asked and now is not None:
                return windowed_steps(task, intent, now)
        steps = [
            step for step in trace_follow_ups(found, results, turns) if not was_run(results, step)
        ]
        if steps and not everything:
            return steps
        roots = [
            root.get("service")
            for r in results
            if r.tool == "analyze_incident"
            and r.status == "ok"
            and isinstance(root := r.output.get("root_cause"), dict)
        ]
        # A listing ("which errors did X log") is answered from X's own lines: no hops.
        hopping = found["kind"] == "why" and intent.kind != "listing"
        if hopping and found["services"] and turns <= MAX_HOPS:
            for service in self.hops(found, results, known):
                if service in roots:
                    continue
                steps.append(("query_logs", {"service": service, "level": found["error_level"]}))
                steps.append(("query_logs", {"service": service, "level": "WARN"}))
            if steps and not everything:
                return steps
        query = self.knowledge_query(found, results)
        # Runbooks the question names (an alert's runbook_url): in the query, the index reads
        # them first.
        urls = URL.findall(str(task.get("question", ""))) if query else []
        query = " ".join([query, *dict.fromkeys(urls)])
        if query and not any(r.tool == "lookup_knowledge" for r in results):
            steps.append(("lookup_knowledge", {"query": query, "top_k": 3}))
        return steps

    @staticmethod
    def knowledge_query(found: QuestionFacets, results: list[Result]) -> str:
        """Runbook query terms: the question's symptoms, then those of the evidence seen.

        Concept ids only (``knowledge.vocabulary``), so the query is the same whatever the language
        of the question; confirmation questions stay narrow and look nothing up.
        """
        if found["kind"] == "confirm":
            return ""
        terms = [c for c in found["metrics"] + found["symptoms"] if c not in _QUIET_CONCEPTS]
        if found["kind"] in ("why", "overview"):
            for result in results:
                if result.tool == "query_logs" and result.level in (found["error_level"], *LEVELS):
                    for index in examples(result, found)[:2]:
                        entry = result.entries("logs")[index]
                        terms += concepts_in(str(entry.get("message", "")))
                elif result.tool == "query_metrics":
                    for entry in result.entries("alerts"):
                        if entry.get("state") == "firing":
                            terms += concepts_in(str(entry.get("alert_name", "")))
                elif result.tool == "analyze_incident" and result.status == "ok":
                    terms += root_cause_terms(result)
        unique = [t for t in dict.fromkeys(terms) if t not in _QUIET_CONCEPTS]
        return " ".join(unique[:KNOWLEDGE_TERMS])
