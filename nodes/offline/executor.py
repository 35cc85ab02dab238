"""Offline executor: runs the plan's tool calls, then states only what the refs show.

Claims are observations and negative observations bound to exact refs (invocation id, raw_path,
an excerpt copied from the ref text). Runbooks only shape recommended actions.
"""

from __future__ import annotations

import json
import re
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from nodes.offline.base import OfflineModel, first_json_human
from nodes.offline.rules import parse_steps, plan_steps

_ALERT = re.compile(
    r"^(?P<name>\S+) service=(?P<service>\S+)(?: severity=\S+)? state=(?P<state>\S+)"
    r"(?: value=(?P<value>\S+))?(?: threshold=(?P<threshold>\S+))?"
)
_MATCHED = re.compile(r"matched (?P<n>\d+) of (?P<total>\d+)")
_LOG = re.compile(r"^\S+ (?P<level>\S+) (?P<service>\S+) \S+: (?P<message>.*)$", re.DOTALL)
_DOC = re.compile(r"^(?P<title>.*?) \((?P<source>[^()]*)\): (?P<chunk>.*)$", re.DOTALL)
MESSAGE_CHARS = 160

_TEXT = {
    "zh": {
        "alert": (
            "{service} 的告警 {name} 处于 {state} 状态（value={value}，threshold={threshold}）。"
        ),
        "logs": "{service} 在查询范围内有 {total} 条{level}日志，例如：“{message}”",
        "logs_any": "{service} 有{level}日志，例如：“{message}”",
        "log_more": "{service} 还出现了另一类{level}日志：“{message}”",
        "no_logs": "在查询范围内未发现 {service} 的{level}日志。",
        "series": "{service} 的指标：{text}",
        "no_data": "未找到 {service} 的任何日志、告警或指标数据，无法判断其状态。",
        "all": "所有服务",
        "hypothesis": "{service} 的异常可能与《{title}》描述的情形相符，需要进一步证据确认。",
        "basis": "运行手册与已观察到的告警或日志相关，但手册不是本次事故的证据。",
        "action": "参考《{title}》：{advice}",
    },
    "en": {
        "alert": "Alert {name} on {service} is {state} (value={value}, threshold={threshold}).",
        "logs": '{service} has {total} {level}log entries in the queried range, e.g. "{message}"',
        "logs_any": '{service} has {level}log entries, e.g. "{message}"',
        "log_more": '{service} also shows another {level}log message: "{message}"',
        "no_logs": "No {level}logs for {service} in the queried range.",
        "series": "Metric for {service}: {text}",
        "no_data": "No logs, alerts or metrics were found for {service}; its state is unknown.",
        "all": "all services",
        "hypothesis": 'The {service} symptoms may match the situation described in "{title}"; '
        "this needs confirming evidence.",
        "basis": (
            "A runbook matches the observed alerts or logs; runbooks are not incident evidence."
        ),
        "action": 'Follow "{title}": {advice}',
    },
}


def _level_word(level: str | None, lang: str) -> str:
    if not level:
        return ""
    return f" {level.upper()} " if lang == "zh" else f"{level.upper()} "


def _clip(text: str) -> str:
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS]


_ADVICE = re.compile(
    r"\b(check|confirm|restart|increase|reduce|scale|roll ?back|kill|limit|raise|drain|"
    r"pause|disable|throttle|compare|look)\b",
    re.IGNORECASE,
)


def _advice(text: str) -> str:
    """The first sentence of a runbook chunk that tells what to do (else its first sentence)."""
    sentences = [s.strip() for s in re.split(r"(?<=[.。!?！？])\s+", text.strip()) if s.strip()]
    if not sentences:
        return ""
    chosen = next((s for s in sentences if _ADVICE.search(s)), sentences[0])
    return chosen[:240]


class _Answer:
    def __init__(self, lang: str) -> None:
        self.lang = lang if lang in _TEXT else "zh"
        self.t = _TEXT[self.lang]
        self.claims: list[dict[str, Any]] = []
        self.hypotheses: list[dict[str, Any]] = []
        self.actions: list[dict[str, Any]] = []
        self.missing: list[dict[str, Any]] = []

    def claim(self, claim_type: str, text: str, bindings: list[dict[str, Any]]) -> None:
        self.claims.append(
            {
                "claim_id": f"c{len(self.claims) + 1}",
                "claim_type": claim_type,
                "claim_text": text,
                "support_level": "direct",
                "evidence_bindings": bindings,
            }
        )

    def as_json(self) -> str:
        return json.dumps(
            {
                "answer_version": "executor_evidence_v2",
                "claims": self.claims,
                "hypotheses": self.hypotheses,
                "recommended_actions": self.actions,
                "missing_info": self.missing,
            },
            ensure_ascii=False,
        )


def _binding(source_type: str, tool: str, inv: str, raw_path: str, excerpt: str) -> dict[str, Any]:
    return {
        "source_type": source_type,
        "tool_name": tool,
        "source_invocation_id": inv,
        "raw_path": raw_path,
        "evidence_excerpt": excerpt,
    }


def _results(messages: list[BaseMessage]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(tool name, arguments, parsed tool message) for every answered tool call."""
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    out: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    for message in messages:
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                calls[str(call.get("id"))] = (call["name"], dict(call.get("args") or {}))
        elif isinstance(message, ToolMessage) and message.tool_call_id in calls:
            try:
                data = json.loads(str(message.content))
            except json.JSONDecodeError:
                continue
            if isinstance(data, dict) and data.get("invocation_id"):
                name, args = calls[message.tool_call_id]
                out.append((name, args, data))
    return out


class OfflineExecutor(OfflineModel):
    """Deterministic executor for the offline mode."""

    def respond(self, messages: list[BaseMessage]) -> AIMessage:
        """First turn: the plan's tool calls. Later turns: the executor_evidence_v2 answer."""
        task = first_json_human(messages)
        round_no = int(task.get("round", 1))
        if not any(isinstance(m, ToolMessage) for m in messages):
            steps = parse_steps(str(task.get("plan", ""))) or plan_steps(task)
            return AIMessage(
                content="",
                tool_calls=[
                    {
                        "name": tool,
                        "args": args,
                        "id": f"offline-r{round_no}-{i}",
                        "type": "tool_call",
                    }
                    for i, (tool, args) in enumerate(steps)
                ],
            )
        return AIMessage(content=self._answer(task, _results(messages)))

    def _answer(
        self, task: dict[str, Any], results: list[tuple[str, dict[str, Any], dict[str, Any]]]
    ) -> str:
        ans = _Answer(str(task.get("language", "zh")))
        t = ans.t
        has_data = {
            str(args.get("service"))
            for _, args, res in results
            if res.get("status") == "ok" and args.get("service")
        }
        troubled: list[str] = []
        seen_titles: set[str] = set()
        for tool, args, res in results:
            inv, status = str(res["invocation_id"]), res.get("status")
            refs = {r["raw_path"]: r["text"] for r in res.get("evidence_refs", [])}
            service = str(args.get("service") or t["all"])
            if tool == "query_metrics" and status == "ok":
                firing = False
                for path, text in refs.items():
                    match = _ALERT.match(text) if path.startswith("alerts[") else None
                    if not match or match.group("state") != "firing":
                        continue
                    firing = True
                    troubled.append(match.group("service"))
                    excerpt = text.split(" active_at=")[0].split(": ")[0]
                    ans.claim(
                        "observation",
                        t["alert"].format(
                            service=match.group("service"),
                            name=match.group("name"),
                            state=match.group("state"),
                            value=match.group("value") or "-",
                            threshold=match.group("threshold") or "-",
                        ),
                        [_binding("alert", tool, inv, path, excerpt)],
                    )
                if not firing and args.get("service"):
                    for path in [p for p in refs if p.startswith("series[")][:2]:
                        ans.claim(
                            "observation",
                            t["series"].format(service=service, text=refs[path]),
                            [_binding("metric", tool, inv, path, refs[path])],
                        )
            elif tool == "query_logs" and status == "ok":
                self._log_claims(ans, tool, inv, args, refs, troubled)
            elif tool == "query_logs" and status == "no_hit":
                if args.get("service") and str(args["service"]) in has_data:
                    matched = _MATCHED.search(refs.get("summary", ""))
                    excerpt = matched.group(0) if matched else "matched 0"
                    ans.claim(
                        "negative_observation",
                        t["no_logs"]
                        .format(service=service, level=_level_word(args.get("level"), ans.lang))
                        .replace("  ", " "),
                        [_binding("summary", tool, inv, "summary", excerpt)],
                    )
            elif tool == "lookup_knowledge" and status == "ok":
                for path, text in refs.items():
                    doc = _DOC.match(text) if path.startswith("documents[") else None
                    if doc is None or doc.group("title") in seen_titles:
                        continue
                    seen_titles.add(doc.group("title"))
                    ans.actions.append(
                        {
                            "text": t["action"].format(
                                title=doc.group("title"), advice=_advice(doc.group("chunk"))
                            ),
                            "source": doc.group("source"),
                        }
                    )
                    if troubled and len(ans.hypotheses) < 1:
                        ans.hypotheses.append(
                            {
                                "text": t["hypothesis"].format(
                                    service=troubled[0], title=doc.group("title")
                                ),
                                "basis": t["basis"],
                            }
                        )
        for _, args, _res in results:
            if args.get("service") and str(args["service"]) not in has_data:
                service = str(args["service"])
                text = t["no_data"].format(service=service)
                if all(m["text"] != text for m in ans.missing):
                    ans.missing.append(
                        {
                            "text": text,
                            "suggested_query": {
                                "tool": "query_logs",
                                "arguments": {"service": service},
                            },
                        }
                    )
        return ans.as_json()

    @staticmethod
    def _log_claims(
        ans: _Answer,
        tool: str,
        inv: str,
        args: dict[str, Any],
        refs: dict[str, str],
        troubled: list[str],
    ) -> None:
        t = ans.t
        level = _level_word(args.get("level"), ans.lang)
        logs = [(p, _LOG.match(refs[p])) for p in refs if p.startswith("logs[")]
        parsed = [(p, m) for p, m in logs if m is not None]
        if not parsed:
            return
        if args.get("service"):
            service = str(args["service"])
            troubled.append(service)
            first_path, first = parsed[0]
            message = _clip(first.group("message"))
            matched = _MATCHED.search(refs.get("summary", ""))
            bindings = [_binding("log", tool, inv, first_path, message)]
            if matched:
                bindings.insert(0, _binding("summary", tool, inv, "summary", matched.group(0)))
                text = t["logs"].format(
                    service=service, total=matched.group("total"), level=level, message=message
                )
            else:
                text = t["logs_any"].format(service=service, level=level, message=message)
            ans.claim("observation", text, bindings)
            other = next(
                ((p, m) for p, m in parsed if m.group("message") != first.group("message")), None
            )
            if other is not None:
                message = _clip(other[1].group("message"))
                ans.claim(
                    "observation",
                    t["log_more"].format(service=service, level=level, message=message),
                    [_binding("log", tool, inv, other[0], message)],
                )
            return
        by_service: dict[str, tuple[str, str]] = {}
        for path, match in parsed:
            by_service.setdefault(match.group("service"), (path, match.group("message")))
        for service, (path, message) in by_service.items():
            troubled.append(service)
            message = _clip(message)
            ans.claim(
                "observation",
                t["logs_any"].format(service=service, level=level, message=message),
                [_binding("log", tool, inv, path, message)],
            )
