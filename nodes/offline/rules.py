"""Question analysis shared by the offline planner and executor."""

from __future__ import annotations

import json
import re
from typing import Any

TOOLS = ("query_logs", "query_metrics", "lookup_knowledge", "get_current_time")

_SERVICE_TOKEN = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*-service")
_WORD = re.compile(r"[a-z0-9][a-z0-9_.-]*")
_STEP = re.compile(r"^\s*\d+\.\s+(?P<tool>[a-z_]+)\s+(?P<args>\{.*\})\s*$")

_STOPWORDS = {
    "the",
    "and",
    "are",
    "any",
    "for",
    "from",
    "has",
    "have",
    "how",
    "is",
    "its",
    "now",
    "what",
    "why",
    "with",
    "was",
    "were",
    "there",
    "this",
    "that",
    "does",
    "did",
    "can",
    "which",
    "when",
    "who",
    "you",
    "our",
    "service",
    "services",
    "throwing",
    "show",
    "tell",
}
_ZH_TERMS = {
    "错误": "error",
    "报错": "error",
    "异常": "error",
    "失败": "failed",
    "超时": "timeout",
    "延迟": "latency",
    "连接池": "connection pool",
    "数据库": "database",
    "告警": "alert",
    "慢": "slow",
    "内存": "memory",
    "重试": "retry",
    "网关": "gateway",
}
_ALERT_WORDS = ("告警", "alert", "alerting", "firing", "报警")
_WHY_WORDS = ("为什么", "原因", "根因", "why", "cause", "root", "怎么", "how")


def mentioned_services(question: str, known: list[str]) -> list[str]:
    """Services named in the question: known ones and unknown ``*-service`` tokens, in order."""
    text = question.lower()
    found: list[tuple[int, str]] = []
    for name in known:
        pos = text.find(name.lower())
        if pos >= 0:
            found.append((pos, name))
    for match in _SERVICE_TOKEN.finditer(text):
        if not any(match.group(0) == n.lower() for _, n in found):
            found.append((match.start(), match.group(0)))
    seen: list[str] = []
    for _, name in sorted(found):
        if name not in seen:
            seen.append(name)
    return seen


def knowledge_query(question: str, services: list[str]) -> str:
    """Search terms for the runbook lookup, from the question's words."""
    text = question.lower()
    words = [re.sub(r"^(\d+)s$", r"\1", w) for w in _WORD.findall(text)]
    terms = [w for w in words if len(w) >= 3 and w not in _STOPWORDS]
    terms += [en for zh, en in _ZH_TERMS.items() if zh in question]
    terms = [t for t in terms if t not in {s.lower() for s in services}] + services
    unique = list(dict.fromkeys(terms))
    return " ".join(unique) if unique else "error"


def is_narrow(question: str) -> bool:
    """A confirmation question about alerts (``is X alerting?``) without a ``why``."""
    text = question.lower()
    return any(w in text for w in _ALERT_WORDS) and not any(w in text for w in _WHY_WORDS)


def plan_steps(facts: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls the offline planner proposes for one round."""
    question = str(facts.get("question", ""))
    known = [str(s) for s in facts.get("known_services", [])]
    targets = mentioned_services(question, known)
    steps: list[tuple[str, dict[str, Any]]] = []
    if int(facts.get("round", 1)) > 1:
        retry = facts.get("retry_context") or {}
        for query in retry.get("suggested_queries", []):
            tool, args = query.get("tool"), query.get("arguments") or {}
            if tool in TOOLS and isinstance(args, dict):
                steps.append((str(tool), dict(args)))
        for service in targets:
            if not any(t == "query_logs" and a.get("service") == service for t, a in steps):
                steps.append(("query_logs", {"service": service, "limit": 50}))
        if not steps:
            steps.append(("query_logs", {"limit": 50}))
        return steps
    if is_narrow(question):
        return [("query_metrics", {"service": s}) for s in targets] or [("query_metrics", {})]
    for service in targets:
        steps.append(("query_metrics", {"service": service}))
        steps.append(("query_logs", {"service": service, "level": "ERROR"}))
    if not targets:
        steps += [("query_metrics", {}), ("query_logs", {"level": "ERROR"})]
    steps.append(("lookup_knowledge", {"query": knowledge_query(question, targets), "top_k": 3}))
    return steps


def render_steps(steps: list[tuple[str, dict[str, Any]]]) -> str:
    """A numbered plan, one tool call per line (``N. tool {json args}``)."""
    return "\n".join(
        f"{i}. {tool} {json.dumps(args, ensure_ascii=False, sort_keys=True)}"
        for i, (tool, args) in enumerate(steps, start=1)
    )


def parse_steps(plan: str) -> list[tuple[str, dict[str, Any]]]:
    """Read back the tool calls of a plan written by ``render_steps``."""
    steps: list[tuple[str, dict[str, Any]]] = []
    for line in plan.splitlines():
        match = _STEP.match(line)
        if not match or match.group("tool") not in TOOLS:
            continue
        try:
            args = json.loads(match.group("args"))
        except json.JSONDecodeError:
            continue
        if isinstance(args, dict):
            steps.append((match.group("tool"), args))
    return steps
