"""The offline executor's answer: claims bound to exact refs, in Chinese or English.

Every claim is an observation or a negative observation about one service, alert or series,
bound to the invocation, the ``raw_path`` and an exact excerpt of that ref; its numbers come from
the structured entry the ref renders, so they are the ref's own. A negative observation binds to
the ``summary`` of a query that matched nothing. Causal links are hypotheses, runbooks shape
recommended actions only, and what could not be looked at is missing information.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from models.offline.evidence import Result
from state.display import continued, word_prefix
from tools.registry import spec_of
from tools.render import format_value
from verification.question import facet_label
from verification.verifier_payload import BLOCK_BYTES, EXCERPT_CHARS

CLAIM_ROOM: Final = BLOCK_BYTES["executor_structured_output"] - 2_000
"""Bytes (compact JSON) the claims may fill before an optional listing stops: the Verifier sees
the claims that fit its block and counts the others unsupported, so a listing leaves this much
of the block to the claims after it (traces, a conclusion)."""
EXCERPT_ROOM: Final = BLOCK_BYTES["gatekeeper_result"] - 1_000
"""Bytes (compact JSON) the claims' verified excerpts may fill before an optional listing stops:
the Verifier reads each claim's support from the Gatekeeper's block, whose excerpts are the full
texts of the refs bound; a claim whose excerpts that block cuts counts as unsupported, so the
listing leaves this much of it to the rest (status, a conclusion's claims)."""
MESSAGE_CHARS: Final = 160
"""Longest log message quoted in a claim (a prefix is still an exact excerpt)."""

TEXT: Final[dict[str, dict[str, str]]] = {
    "zh": {
        "yes": "是：",
        "no": "否：",
        "logs": "{service} 在查询范围内有 {total} 条 {level} 日志，例如：“{message}”",
        "logs_any": "{service} 有 {level} 日志，例如：“{message}”",
        "log_more": "{service} 的另一类 {level} 日志：“{message}”",
        "log_names": "{service} 的 {level} 日志提到了 {other}：“{message}”",
        "no_logs": "{service} 在查询范围内没有 {level} 日志。",
        "no_logs_all": "查询范围内所有服务都没有 {level} 日志。",
        "series": "{service} 的{label}（{metric}）最新值为 {last}，窗口内最大值为 {max}。",
        "series_flat": "{service} 的{label}（{metric}）最新值为 {last}。",
        "alert_firing": "{service} 的告警 {name} 正在触发{values}。",
        "alert_state": "{service} 的告警 {name} 当前状态为 {state}{values}。",
        "values": "（value={value}，threshold={threshold}）",
        "value_only": "（value={value}）",
        "no_alert_named": "数据中没有名为 {name} 的告警{scope}。",
        "more_alerts": "另外正在触发的告警：{names}。",
        "alert_series": "告警 {name} 在 {service} 的多条序列上正在触发（value={values}）。",
        "no_alert_scope": "（{service} 也没有）",
        "no_alert_for": "{service} 没有名为 {name} 的告警。",
        "no_alerts": "{service} 在数据中没有任何告警。",
        "no_data": (
            "未找到 {service} 的任何日志、告警或指标数据，无法判断其状态；"
            "请检查服务名称（后端已知的服务：{known}）。"
        ),
        "did_you_mean": "是否指 {names}？",
        "unknown_dependency": "{service} 的日志提到了 {name}，但没有任何后端知道这个服务。",
        "no_series": "{service} 没有与{label}相关的指标（已有指标：{metrics}）。",
        "no_series_at_all": "{service} 没有任何指标数据。",
        "code_missing": "{service} 返回的 {level} 日志中没有提到 {code}。",
        "hypothesis_link": (
            "{service} 的症状可能与 {other} 有关：{service} 的日志提到了 {other}，"
            "而 {other} 的日志显示“{message}”。这一关联尚未由证据确认。"
        ),
        "hypothesis_self": (
            "{service} 的症状可能与其 {level} 日志所示的情况有关：“{message}”。"
            "这一关联尚未由证据确认。"
        ),
        "basis_link": "日志中提到的服务之间的调用关系",
        "basis_self": "同一服务的日志与症状同时出现",
        "action": "参考《{title}》：“{sentence}”",
        "list_sep": "、",
    },
    "en": {
        "yes": "Yes: ",
        "no": "No: ",
        "logs": (
            '{service} has {total} {level} log {entries} in the queried range, e.g. "{message}"'
        ),
        "logs_any": '{service} has {level} log entries, e.g. "{message}"',
        "log_more": '{service} also logs another kind of {level} message: "{message}"',
        "log_names": 'One {level} log entry of {service} names {other}: "{message}"',
        "no_logs": "{service} has no {level} log entries in the queried range.",
        "no_logs_all": "No service has {level} log entries in the queried range.",
        "series": (
            "The {label} of {service} ({metric}) is {last} (last value), max {max} over the window."
        ),
        "series_flat": "The {label} of {service} ({metric}) is {last} (last value).",
        "alert_firing": "Alert {name} on {service} is firing{values}.",
        "alert_state": "Alert {name} on {service} is {state}{values}.",
        "values": " (value={value}, threshold={threshold})",
        "value_only": " (value={value})",
        "no_alert_named": "No alert named {name} exists in the data{scope}.",
        "more_alerts": "Also firing: {names}.",
        "alert_series": "Alert {name} is firing on several series of {service} (value={values}).",
        "no_alert_scope": " (nor for {service})",
        "no_alert_for": "{service} has no alert named {name}.",
        "no_alerts": "{service} has no alerts in the data.",
        "no_data": (
            "No logs, alerts or metrics were found for {service}, so its state is unknown; "
            "check the service name (the backends know: {known})."
        ),
        "did_you_mean": " Did you mean {names}?",
        "unknown_dependency": "The logs of {service} name {name}, which no backend knows.",
        "no_series": "{service} has no series for its {label} (its series: {metrics}).",
        "no_series_at_all": "{service} has no metric series.",
        "code_missing": "None of the {level} log entries returned for {service} mentions {code}.",
        "hypothesis_link": (
            "The symptoms of {service} may be linked to {other}: {service}'s logs name "
            '{other}, and {other} logs "{message}". This link is not established by the '
            "evidence."
        ),
        "hypothesis_self": (
            "The symptoms of {service} may be related to what its {level} logs show: "
            '"{message}". This link is not established by the evidence.'
        ),
        "basis_link": "service names in the log messages",
        "basis_self": "the service's own log messages alongside the symptom",
        "action": 'Follow "{title}": {sentence}',
        "list_sep": ", ",
    },
}


def _size(value: object) -> int:
    """Bytes of ``value`` as compact JSON (how the Verifier's payload counts its blocks)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def quote(message: str) -> str:
    """A log message short enough to quote: a prefix ending at a word, so an exact excerpt."""
    return word_prefix(message, MESSAGE_CHARS)


def binding(result: Result, raw_path: str, excerpt: str) -> dict[str, Any]:
    """One precise binding to a ref of ``result``."""
    spec = spec_of(result.tool)
    return {
        "source_type": spec.source_type(raw_path) if spec is not None else None,
        "tool_name": result.tool,
        "source_invocation_id": result.invocation_id,
        "raw_path": raw_path,
        "evidence_excerpt": excerpt,
    }


def summary_binding(result: Result) -> dict[str, Any]:
    """A binding to the whole ``summary`` ref of ``result``."""
    return binding(result, "summary", result.refs.get("summary", ""))


def value_text(value: object, unit: object) -> str:
    """A series value with its unit, as the series ref renders it (``69.3%``, ``30040ms``)."""
    return format_value(value) + (format_value(unit) if unit else "")


class Writer:
    """Collects the answer of one round, in one language."""

    def __init__(self, language: str, results: Sequence[Result] = ()) -> None:
        self.lang = language if language in TEXT else "zh"
        self.ref_texts: dict[tuple[str, str], str] = {
            (result.invocation_id, path): text
            for result in results
            for path, text in result.refs.items()
        }
        """The full text of each ref of the results (what the Gatekeeper verifies a binding as)."""
        self.t = TEXT[self.lang]
        self.claims: list[dict[str, Any]] = []
        self.hypotheses: list[dict[str, Any]] = []
        self.actions: list[dict[str, Any]] = []
        self.missing: list[dict[str, Any]] = []
        self.quoted: set[tuple[str, str]] = set()
        self.root_cause: dict[str, Any] | None = None
        """The root cause proposed (``models.offline.root_cause``), if any."""
        self.conclusion: dict[str, Any] | None = None

    def fits(self) -> bool:
        """Whether the claims so far leave the room ``CLAIM_ROOM`` keeps for the others.

        And whether the excerpts the Gatekeeper verifies them by leave ``EXCERPT_ROOM``'s.
        """
        block = {"answer_version": "executor_evidence_v2", "claims": self.claims}
        return _size(block) <= CLAIM_ROOM and _size(self.excerpts()) <= EXCERPT_ROOM

    def excerpts(self) -> dict[str, list[dict[str, Any]]]:
        """The verified excerpts the claims would have if every binding held (their upper bound)."""
        return {
            str(claim["claim_id"]): [
                {
                    "binding": index,
                    "invocation_id": item.get("source_invocation_id"),
                    "tool_name": item.get("tool_name"),
                    "raw_path": item.get("raw_path"),
                    "text": self.ref_texts.get(
                        (str(item.get("source_invocation_id")), str(item.get("raw_path"))),
                        str(item.get("evidence_excerpt", "")),
                    )[:EXCERPT_CHARS],
                }
                for index, item in enumerate(claim["evidence_bindings"])
            ]
            for claim in self.claims
        }

    def drop_claims_from(self, count: int) -> None:
        """Take back the claims added after the first ``count`` (optional ones that did not fit)."""
        del self.claims[count:]

    @property
    def last_id(self) -> str:
        """The id of the claim added last ('' before the first)."""
        return str(self.claims[-1]["claim_id"]) if self.claims else ""

    def conclude(self, answer: str, text: str, rests_on: list[str]) -> None:
        """State the answer's conclusion and the claims it rests on (checked by code)."""
        self.conclusion = {"text": text, "answer": answer, "rests_on": list(rests_on)}

    def claim(
        self,
        claim_type: str,
        text: str,
        bindings: list[dict[str, Any]],
        *,
        support: str = "direct",
    ) -> None:
        """Add a claim bound to exact refs (an inference has ``support="indirect"``)."""
        self.claims.append(
            {
                "claim_id": f"c{len(self.claims) + 1}",
                "claim_type": claim_type,
                "claim_text": text,
                "support_level": support,
                "evidence_bindings": bindings,
            }
        )

    def gap(
        self, text: str, tool: str | None = None, arguments: dict[str, Any] | None = None
    ) -> None:
        """Add missing information (once), with the query that could close it."""
        if any(item["text"] == text for item in self.missing):
            return
        query = {"tool": tool, "arguments": arguments or {}} if tool else None
        self.missing.append({"text": text, "suggested_query": query})

    def hypothesis(self, text: str, basis: str) -> None:
        """Add a possible direction (never a claim)."""
        if all(item["text"] != text for item in self.hypotheses):
            self.hypotheses.append({"text": text, "basis": basis})

    def action(self, title: str, sentence: str, source: str) -> None:
        """Add a next step quoting a runbook's action sentence with its title."""
        text = self.t["action"].format(title=title, sentence=sentence)
        if all(item["text"] != text for item in self.actions):
            self.actions.append({"text": text, "source": source})

    def first_action(self, text: str, source: str) -> None:
        """Add a next step of the answer's own, before those from runbooks."""
        if all(item["text"] != text for item in self.actions):
            self.actions.insert(0, {"text": text, "source": source})

    def join(self, names: list[str]) -> str:
        """Names listed in the answer language."""
        return self.t["list_sep"].join(names)

    # ----------------------------------------------------------------------- logs

    def log_lines(
        self,
        result: Result,
        index: int,
        *,
        answer: str = "",
        counted: bool = True,
    ) -> None:
        """A claim about a log query: how many lines matched, with one quoted example."""
        entry = result.entries("logs")[index]
        full = str(entry.get("message", ""))
        excerpt = quote(full)
        message = continued(excerpt, full)
        service = str(entry.get("service") or result.service or "")
        level = result.level or str(entry.get("level", "")).upper()
        path = f"logs[{index}]"
        self.quoted.add((result.invocation_id, path))
        bindings = [binding(result, path, excerpt)]
        if counted and result.service:
            bindings.insert(0, summary_binding(result))
            total = result.total()
            text = self.t["logs"].format(
                service=service,
                total=total,
                level=level,
                message=message,
                entries="entry" if total == 1 else "entries",
            )
        else:
            text = self.t["logs_any"].format(service=service, level=level, message=message)
        self.claim("observation", answer + text, bindings)

    def log_example(self, result: Result, index: int, *, names: str | None = None) -> None:
        """A claim quoting one more log line (saying which other service it names, if any)."""
        path = f"logs[{index}]"
        if (result.invocation_id, path) in self.quoted:
            return
        self.quoted.add((result.invocation_id, path))
        entry = result.entries("logs")[index]
        full = str(entry.get("message", ""))
        excerpt = quote(full)
        service = str(entry.get("service") or result.service or "")
        level = result.level or str(entry.get("level", "")).upper()
        key = "log_names" if names else "log_more"
        text = self.t[key].format(
            service=service, level=level, message=continued(excerpt, full), other=names
        )
        self.claim("observation", text, [binding(result, path, excerpt)])

    def no_logs(self, result: Result, *, answer: str = "") -> None:
        """A negative observation: the service's query for that level matched nothing."""
        text = self.t["no_logs"].format(service=result.service, level=result.level or "")
        self.claim("negative_observation", answer + text, [summary_binding(result)])

    # ----------------------------------------------------------------------- metrics

    def series(self, result: Result, index: int, concept: str | None) -> None:
        """A claim stating a series' last value (and its max over the window when higher)."""
        entry = result.entries("series")[index]
        path = f"series[{index}]"
        metric = str(entry.get("metric", ""))
        labels = {
            str(k): str(v)
            for k, v in (entry.get("labels") or {}).items()
            if k != "service" and v is not None
        }
        if labels:
            metric += "{" + ",".join(f"{k}={labels[k]}" for k in sorted(labels)) + "}"
        service = str((entry.get("labels") or {}).get("service") or result.service or "")
        label = facet_label(concept, self.lang) if concept else metric
        percentile = next(
            (p for p in ("p999", "p99", "p95", "p90", "p50") if p in metric.split("_")), None
        )
        if concept == "latency" and percentile:
            label = f"{percentile} {label}"
        unit = entry.get("unit")
        last, top = entry.get("last"), entry.get("max")
        key = "series" if top is not None and last is not None and top != last else "series_flat"
        if self.lang == "zh":
            # Chinese text meets a Latin word with a space on that side only.
            label = (
                (" " if label[:1].isascii() else "") + label + (" " if label[-1:].isascii() else "")
            )
        text = self.t[key].format(
            service=service,
            label=label,
            metric=metric,
            last=value_text(last, unit),
            max=value_text(top, unit),
        )
        self.claim("observation", text, [binding(result, path, result.refs.get(path, ""))])

    def alert(self, result: Result, index: int, *, answer: str = "") -> None:
        """A claim stating an alert's state (and its value and threshold)."""
        entry = result.entries("alerts")[index]
        path = f"alerts[{index}]"
        value, threshold = entry.get("value"), entry.get("threshold")
        values = ""
        if value is not None and threshold is not None:
            values = self.t["values"].format(
                value=format_value(value), threshold=format_value(threshold)
            )
        elif value is not None:
            values = self.t["value_only"].format(value=format_value(value))
        state = str(entry.get("state", ""))
        key = "alert_firing" if state == "firing" else "alert_state"
        text = self.t[key].format(
            service=entry.get("service", ""),
            name=entry.get("alert_name", ""),
            state=state,
            values=values,
        )
        self.claim("observation", answer + text, [binding(result, path, result.refs.get(path, ""))])

    def alert_groups(self, result: Result, indexes: list[int], *, limit: int = 3) -> list[str]:
        """Alerts grouped by name, the first ``limit`` groups stated, the rest summarised.

        The same alert on several series is one claim; the groups beyond ``limit`` are one claim
        (``and 4 more firing: ...``), never dropped silently. Returns the ids of the claims.
        """
        groups: dict[str, list[int]] = {}
        for index in indexes:
            name = str(result.entries("alerts")[index].get("alert_name", ""))
            groups.setdefault(name, []).append(index)
        written: list[str] = []
        ordered = list(groups.items())
        for name, members in ordered[:limit]:
            if len(members) == 1:
                self.alert(result, members[0])
            else:
                self.alert_series(result, name, members)
            written.append(self.last_id)
        rest = ordered[limit:]
        if rest:
            bindings = [binding(result, f"alerts[{members[0]}]", name) for name, members in rest]
            text = self.t["more_alerts"].format(names=self.join([name for name, _ in rest]))
            self.claim("observation", text, bindings)
            written.append(self.last_id)
        return written

    def alert_series(
        self, result: Result, name: str, members: list[int], *, answer: str = ""
    ) -> None:
        """One claim for an alert firing on several series: its services and values."""
        entries = [result.entries("alerts")[i] for i in members]
        services = self.join(list(dict.fromkeys(str(e.get("service", "")) for e in entries)))
        values = self.join(
            [format_value(e.get("value")) for e in entries if e.get("value") is not None]
        )
        text = self.t["alert_series"].format(name=name, service=services, values=values or "-")
        bindings = [
            binding(result, f"alerts[{i}]", result.refs.get(f"alerts[{i}]", "")) for i in members
        ]
        self.claim("observation", answer + text, bindings)

    def no_alert(self, name: str, everywhere: Result, scoped: Result | None) -> None:
        """A negative observation: no alert of that name exists in the data (nor for a service)."""
        scope = ""
        bindings = [summary_binding(everywhere)]
        if scoped is not None and scoped.service:
            scope = self.t["no_alert_scope"].format(service=scoped.service)
            bindings.append(summary_binding(scoped))
        text = self.t["no"] + self.t["no_alert_named"].format(name=name, scope=scope)
        self.claim("negative_observation", text, bindings)

    def json(self) -> str:
        """The answer as one ``executor_evidence_v2`` object."""
        answer: dict[str, Any] = {
            "answer_version": "executor_evidence_v2",
            "claims": self.claims,
            "hypotheses": self.hypotheses,
            # A root cause's own next step (what would confirm it) comes before three runbooks.
            "recommended_actions": self.actions[: 4 if self.root_cause is not None else 3],
            "missing_info": self.missing,
        }
        if self.conclusion:
            answer["conclusion"] = self.conclusion
        if self.root_cause is not None:
            answer["root_cause"] = self.root_cause
        return json.dumps(answer, ensure_ascii=False)
