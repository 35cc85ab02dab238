"""The root-cause section of an offline answer, from the incident analysis (``analyze_incident``).

It opens the answer of a why, "what is wrong" or alert question when the analysis ran:

1. the most likely root cause, a ``causal`` claim (an inference, support ``indirect``) bound to
   the analysis's suspect entry and to the raw items the suspect's strongest signals rest on;
2. the chain from it to the symptom asked about, along the call graph the analysis used (the
   asked service calls ... calls the root cause), each link an observation bound to its
   evidence: the root's change events and signals, then per service up the chain the log line
   that names the service below it and its strongest signals (those naming the question's
   status codes and symptoms first), then the other services the root cause explains;
3. the runner-up suspects and why they rank lower (bound to their suspect entries): those on a
   call path with the root cause (it calls them or they call it, directly or not);
4. what would confirm it, as a recommended action.

A suspect's mechanism and why it ranks lower are the analysis's English texts in an English
answer, and its phrases worded in Chinese in a Chinese one (``models.offline.phrases``: the
evidence they quote stays verbatim, and the refs the claims cite stay English).

Only suspects that can explain the services asked about are named: those services and the
services they call, directly or not, by the call graph the analysis used (every suspect when
the question names no service). When the analysis singles out no such root cause, a why question
(or "what is wrong", named services or not) is told so with the candidates listed in one claim
bound to their suspect entries (those no other suspect explains), and no root cause is proposed;
the rest of the answer then follows as without the analysis. The proposal
(``root_cause``: service, mechanism, the ids of the claims stating it) is kept by the diagnosis
only when those claims are confirmed (``verification.root_cause``).
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any, Final

from knowledge.vocabulary import concepts_in
from models.offline.evidence import Result, names_in
from models.offline.phrases import worded
from models.offline.writer import Writer, binding, quote
from state.display import continued, word_prefix
from state.records import QuestionFacets

TOOL: Final = "analyze_incident"
ROOT_SIGNALS: Final = 2
"""Signals of the root cause quoted in the chain (after its change events)."""
LINK_SIGNALS: Final = 2
"""Signals quoted per service up the chain."""
RUNNERS_UP: Final = 2
MAX_CHANGES: Final = 2
_DIGITS: Final = re.compile(r"\d+")
_LOG_KINDS: Final = ("new_template", "template_jump", "error_surge")
_QUIET_KINDS: Final = ("change", "alert")

TEXT: Final[dict[str, dict[str, str]]] = {
    "zh": {
        "root": "最可能的根因（推断）：{service}，机制：{mechanism}",
        "onset": "（异常始于 {onset}）",
        "change": "{service} 在 {time} 有变更（{category}）：“{message}”",
        "signal_log": "{service} 的日志中{label}：“{message}”",
        "signal": "{service} 的指标偏离基线：{detail}",
        "link": "{service} 的日志把它与 {other} 联系起来：“{message}”",
        "edge": "调用关系：{service} 调用 {other}（{edge}）",
        "runner_up": "次要嫌疑 {service}（{mechanism}），排名较低：{why}",
        "ambiguous": "证据未能确定单一根因，候选：{candidates}",
        "candidate": "{service}（{mechanism}）",
        "confirm": (
            "确认方法：核对 {service} 在 {onset} 前后的变更与日志（{mechanism}）；"
            "若问题出在它，停止或回退它之后 {symptoms} 的异常应当消失。"
        ),
        "confirm_ambiguous": "确认方法：分别核对候选服务 {candidates} 在异常开始前后的变更与日志。",
        "sep": "、",
        "new_template": "出现了基线窗口中没有的新消息",
        "template_jump": "某类消息的频率比基线窗口突增",
        "error_surge": "错误比基线窗口突增",
    },
    "en": {
        "root": "Most likely root cause (inferred): {service}, mechanism: {mechanism}",
        "onset": " (onset {onset})",
        "change": '{service} changed at {time} ({category}): "{message}"',
        "signal_log": '{service} {label}: "{message}"',
        "signal": "{service} deviates from its baseline: {detail}",
        "link": '{service} logs name {other}: "{message}"',
        "edge": "{service} calls {other} ({edge})",
        "runner_up": "Runner-up suspect {service} ({mechanism}) ranks lower: {why}",
        "ambiguous": "The evidence does not single out one root cause; candidates: {candidates}",
        "candidate": "{service} ({mechanism})",
        "confirm": (
            "To confirm: check {service}'s changes and logs around {onset} ({mechanism}); if "
            "it is the cause, the symptoms of {symptoms} should clear once it is stopped or "
            "rolled back."
        ),
        "confirm_ambiguous": (
            "To confirm: check the changes and logs of each candidate ({candidates}) around "
            "the onset."
        ),
        "sep": ", ",
        "new_template": "logs a message the baseline window never had",
        "template_jump": "logs a message far more often than in the baseline window",
        "error_surge": "logs errors far more often than in the baseline window",
    },
}


def analysis_result(results: list[Result]) -> Result | None:
    """The last ``analyze_incident`` call that answered with suspects."""
    found = [r for r in results if r.tool == TOOL and r.status == "ok"]
    return found[-1] if found else None


def _ref_binding(result: Result, path: str) -> dict[str, Any]:
    return binding(result, path, quote(result.refs.get(path, "")))


def _kind(item: dict[str, Any]) -> str:
    """A log line's service and message with its numbers blanked: lines of one kind."""
    return f"{item.get('service')}: {_DIGITS.sub('#', str(item.get('message', '')))}"


def _short(text: str, limit: int = 160) -> str:
    """A prefix of ``text`` ending at a word (an exact excerpt), marked when cut."""
    return continued(word_prefix(text, limit), text)


class _Section:
    """Writes the section for one analysis result."""

    def __init__(self, writer: Writer, found: QuestionFacets, results: list[Result]) -> None:
        self.writer = writer
        self.t = TEXT[writer.lang]
        self.found = found
        self.results = results
        self.analysis = analysis_result(results) or results[-1]
        out = self.analysis
        self.suspects = out.entries("suspects")
        self.signals = out.entries("signals")
        self.changes = out.entries("changes")
        self.edges = out.entries("edges")
        self.gaps = out.entries("gaps")
        self.ids: list[str] = []
        self.quoted: set[str] = set()
        self.kinds: set[str] = set()
        self.relevant = self.relevant_suspects()

    def worded(self, suspect: dict[str, Any], field: str, limit: int = 160) -> str:
        """A suspect's ``mechanism`` or ``why_not_first`` in the answer's language.

        Its phrase's values are quoted verbatim (``models.offline.phrases``); in English, or
        without a phrase, the analysis's own text is (a prefix ending at a word).
        """
        text = str(suspect.get(field) or "")
        return worded(text, suspect.get(f"{field}_phrase"), self.writer.lang, limit)

    def reach(self, service: str) -> set[str]:
        """The services ``service`` calls, directly or not, by the analysis's call graph."""
        callees: dict[str, set[str]] = {}
        for edge in self.edges:
            callees.setdefault(str(edge.get("caller")), set()).add(str(edge.get("callee")))
        found: set[str] = set()
        queue = deque([service])
        while queue:
            for callee in callees.get(queue.popleft(), set()):
                if callee not in found:
                    found.add(callee)
                    queue.append(callee)
        return found

    def relevant_suspects(self) -> list[int]:
        """Indexes of the suspects that can explain the services asked about.

        Those services themselves and the services they call, directly or not; every suspect
        when the question names no service.
        """
        asked = self.found["services"]
        if not asked:
            return list(range(len(self.suspects)))
        callees: dict[str, set[str]] = {}
        for edge in self.edges:
            callees.setdefault(str(edge.get("caller")), set()).add(str(edge.get("callee")))
        reach = set(asked)
        queue = deque(asked)
        while queue:
            for callee in callees.get(queue.popleft(), set()):
                if callee not in reach:
                    reach.add(callee)
                    queue.append(callee)
        return [i for i, s in enumerate(self.suspects) if str(s.get("service")) in reach]

    # ----------------------------------------------------------------------- claims

    def claim(
        self, claim_type: str, text: str, bindings: list[dict[str, Any]], support: str
    ) -> str:
        bindings = [b for b in bindings if b["evidence_excerpt"]]
        self.writer.claim(claim_type, text, bindings, support=support)
        claim_id = str(self.writer.claims[-1]["claim_id"])
        self.ids.append(claim_id)
        return claim_id

    def pointer(self, index: int) -> tuple[str, dict[str, Any]] | None:
        """The first raw item of ``signals[index]`` not quoted yet: its path and entry.

        A log line of a kind already quoted (the same message but for its numbers) counts as
        quoted: two signals resting on one line quote it once.
        """
        evidence = self.signals[index].get("evidence")
        items = evidence if isinstance(evidence, list) else []
        for inner, item in enumerate(items):
            path = f"signals[{index}].evidence[{inner}]"
            if not isinstance(item, dict) or path in self.quoted:
                continue
            if item.get("kind") == "log" and _kind(item) in self.kinds:
                continue
            return path, item
        return None

    def mark(self, path: str, item: dict[str, Any]) -> None:
        """Note a raw item as quoted (and, for a log line, its kind)."""
        self.quoted.add(path)
        if item.get("kind") == "log":
            self.kinds.add(_kind(item))

    def signal_claim(self, index: int) -> None:
        signal = self.signals[index]
        service = str(signal.get("service", ""))
        detail = _short(str(signal.get("detail", "")))
        found = self.pointer(index)
        kind = str(signal.get("kind", ""))
        if kind in _LOG_KINDS and found is None:
            return  # its lines are quoted already
        if kind in _LOG_KINDS and found is not None:
            path, item = found
            self.mark(path, item)
            message = str(item.get("message", ""))
            excerpt = quote(message)
            text = self.t["signal_log"].format(
                service=service, label=self.t[kind], message=continued(excerpt, message)
            )
            self.claim("observation", text, [binding(self.analysis, path, excerpt)], "direct")
            return
        text = self.t["signal"].format(service=service, detail=detail)
        bindings = [_ref_binding(self.analysis, f"signals[{index}]")]
        self.claim("observation", text, bindings, "direct")

    def change_claims(self, service: str) -> None:
        shown = 0
        for index, change in enumerate(self.changes):
            if change.get("service") != service or shown >= MAX_CHANGES:
                continue
            shown += 1
            message = str(change.get("message", ""))
            excerpt = quote(self.analysis.refs.get(f"changes[{index}]", ""))
            text = self.t["change"].format(
                service=service,
                time=change.get("time", ""),
                category=change.get("category", ""),
                message=continued(quote(message), message),
            )
            self.claim(
                "observation",
                text,
                [binding(self.analysis, f"changes[{index}]", excerpt)],
                "direct",
            )

    # ----------------------------------------------------------------------- choosing

    def ranked_signals(self, service: str, root: bool) -> list[int]:
        """The service's signals, most telling first (log signals first for the root cause)."""
        wanted = set(self.found["symptoms"] + self.found["metrics"])
        codes = self.found["status_codes"]
        scored: list[tuple[int, float, int]] = []
        for index, signal in enumerate(self.signals):
            if signal.get("service") != service or signal.get("kind") in _QUIET_KINDS:
                continue
            text = str(signal.get("detail", ""))
            found = self.pointer(index)
            if found is not None:
                text += " " + str(found[1].get("message", ""))
            named = 2 * len(wanted & set(concepts_in(text)))
            named += sum(4 for code in codes if code in text)
            log_first = 1 if root and signal.get("kind") in _LOG_KINDS else 0
            strength = float(signal.get("strength") or 0.0)
            scored.append((-(named + log_first), -strength, index))
        return [index for *_, index in sorted(scored)]

    def chain(self, root: str) -> list[str]:
        """The services from the root cause up to the first service asked about."""
        callees: dict[str, list[str]] = {}
        for edge in self.edges:
            callees.setdefault(str(edge.get("caller")), []).append(str(edge.get("callee")))
        for target in self.found["services"]:
            if target == root:
                return [root]
            came: dict[str, str | None] = {target: None}
            queue = deque([target])
            while queue:
                here = queue.popleft()
                if here == root:
                    path = [here]
                    while (back := came[path[-1]]) is not None:
                        path.append(back)
                    return path
                for callee in callees.get(here, []):
                    if callee not in came:
                        came[callee] = here
                        queue.append(callee)
            return [root, target]
        return [root]

    def link_claim(self, service: str, other: str) -> bool:
        """The log line of ``service`` that names ``other``, else the call edge between them."""
        for index, signal in enumerate(self.signals):
            if signal.get("service") != service:
                continue
            evidence = signal.get("evidence")
            for inner, item in enumerate(evidence if isinstance(evidence, list) else []):
                message = str(item.get("message", "")) if isinstance(item, dict) else ""
                if message and names_in(message, [other], service):
                    path = f"signals[{index}].evidence[{inner}]"
                    self.mark(path, item)
                    self._link(self.analysis, path, service, other, message)
                    return True
        for result in self.results:
            if result.tool != "query_logs" or result.service != service:
                continue
            for index, entry in enumerate(result.entries("logs")):
                message = str(entry.get("message", ""))
                if names_in(message, [other], service):
                    self._link(result, f"logs[{index}]", service, other, message)
                    return True
        for index, edge in enumerate(self.edges):
            if edge.get("caller") == service and edge.get("callee") == other:
                path = f"edges[{index}]"
                text = self.t["edge"].format(
                    service=service, other=other, edge=self.analysis.refs.get(path, "")
                )
                self.claim("observation", text, [_ref_binding(self.analysis, path)], "direct")
                return True
        return False

    def _link(self, result: Result, path: str, service: str, other: str, message: str) -> None:
        excerpt = quote(message)
        text = self.t["link"].format(
            service=service, other=other, message=continued(excerpt, message)
        )
        self.claim("observation", text, [binding(result, path, excerpt)], "direct")

    # ----------------------------------------------------------------------- sections

    def root_cause(self, index: int) -> None:
        suspect = self.suspects[index]
        service = str(suspect.get("service", ""))
        mechanism = str(suspect.get("mechanism", ""))
        bindings = [_ref_binding(self.analysis, f"suspects[{index}]")]
        text = self.t["root"].format(service=service, mechanism=self.worded(suspect, "mechanism"))
        if suspect.get("onset"):  # the suspect's ref states it
            text += self.t["onset"].format(onset=suspect["onset"])
        self.claim("causal", text, bindings, "indirect")
        self.change_claims(service)
        for signal in self.ranked_signals(service, root=True)[:ROOT_SIGNALS]:
            self.signal_claim(signal)
        path = self.chain(service)
        for below, above in zip(path, path[1:], strict=False):
            self.link_claim(above, below)
            picked = self.ranked_signals(above, root=False)[:LINK_SIGNALS]
            # The symptom asked about ends the chain: its most telling signal comes last.
            for signal in reversed(picked) if above == path[-1] else picked:
                self.signal_claim(signal)
        explained = [str(s) for s in suspect.get("explains") or [] if str(s) not in path]
        callers = {str(e.get("caller")): str(e.get("callee")) for e in self.edges}
        for other in explained:
            callee = callers.get(other)
            linked = callee is not None and callee in path and self.link_claim(other, callee)
            for signal in self.ranked_signals(other, root=False)[: 0 if linked else 1]:
                self.signal_claim(signal)
        claim_ids = list(self.ids)
        connected = self.reach(service) | {
            str(self.suspects[i].get("service"))
            for i in self.relevant
            if service in self.reach(str(self.suspects[i].get("service")))
        }
        runners = [i for i in self.relevant if i != index]
        runners = [i for i in runners if str(self.suspects[i].get("service")) in connected]
        # An overview already lists every symptom: one runner-up there, two for a why question.
        for rank in runners[: RUNNERS_UP if self.found["services"] else 1]:
            runner = self.suspects[rank]
            if not runner.get("why_not_first"):
                continue
            text = self.t["runner_up"].format(
                service=runner.get("service", ""),
                mechanism=self.worded(runner, "mechanism"),
                why=self.worded(runner, "why_not_first"),
            )
            self.claim(
                "correlation", text, [_ref_binding(self.analysis, f"suspects[{rank}]")], "indirect"
            )
        symptoms = self.writer.join(self.found["services"] or path[-1:])
        self.writer.first_action(
            self.t["confirm"].format(
                service=service,
                onset=suspect.get("onset") or "-",
                mechanism=self.worded(suspect, "mechanism", 80),
                symptoms=symptoms,
            ),
            "incident analysis",
        )
        self.writer.root_cause = {
            "service": service,
            "mechanism": mechanism,
            "claim_ids": claim_ids,
        }

    def ambiguous(self) -> None:
        # A suspect the analysis found explained by another (a symptom) is no candidate, unless
        # fewer than two would be left.
        causes = [i for i in self.relevant if not self.suspects[i].get("explained_by")]
        picked = (causes if len(causes) > 1 else self.relevant)[: RUNNERS_UP + 1]
        shown = [self.suspects[i] for i in picked]
        candidates = self.writer.join(
            [
                self.t["candidate"].format(
                    service=s.get("service", ""), mechanism=self.worded(s, "mechanism", 80)
                )
                for s in shown
            ]
        )
        bindings = [_ref_binding(self.analysis, f"suspects[{i}]") for i in picked]
        self.claim("state", self.t["ambiguous"].format(candidates=candidates), bindings, "indirect")
        names = self.writer.join([str(s.get("service", "")) for s in shown])
        self.writer.first_action(
            self.t["confirm_ambiguous"].format(candidates=names), "incident analysis"
        )


def root_cause_section(writer: Writer, found: QuestionFacets, results: list[Result]) -> bool:
    """Write the root-cause section (see the module docstring); whether it states a root cause.

    Nothing is written when the analysis did not run or found no suspect.
    """
    analysis = analysis_result(results)
    if analysis is None or not analysis.entries("suspects"):
        return False
    section = _Section(writer, found, results)
    root = next((i for i, s in enumerate(section.suspects) if s.get("root_cause") is True), None)
    if root is not None and root not in section.relevant:
        root = None
    if root is None:
        if section.relevant:
            section.ambiguous()
        return False
    section.root_cause(root)
    return True
