"""A suspect's mechanism and ranks-lower reason, worded in the answer's language.

The incident analysis writes both in English and gives each as a phrase too: its ``kind`` and
the ``values`` it states, each as the English text writes it (``analysis.report.Phrase``). An
English answer quotes the English text, cut at a word; a Chinese one words the phrase and quotes
its values verbatim (names, numbers, times, log lines), so the claim states only what the ref it
cites states. A value is used only where the English text, cut to the same length, shows it (the
ref quotes at least that much), and a quoted line the cut reaches is cut at the same place. A
phrase of a kind not worded here, one with a value the cut text does not show, or none at all
leaves the English text.
"""

from __future__ import annotations

from collections.abc import Mapping
from string import Formatter
from typing import Final

from state.display import continued, word_prefix

ZH: Final[dict[str, str]] = {
    "change": "变更（{category}，{time}）：“{text}”",
    "new_template": "新出现的消息：“{template}”",
    "template_jump": "某类消息突增：“{template}”",
    "error_surge": (
        "{level}日志突增，{per} {rate_before} -> {rate_after} 条"
        "（共 {lines_before} -> {lines_after} 条{served}）"
    ),
    "series": "{metric} {baseline} -> {peak}（{direction}）{also}",
    "trace_latency": "{measure} p90 {baseline} ms -> {incident} ms",
    "call_gap": (
        "进出它的调用在服务之间耗费的时间：p50 {baseline} ms -> {incident} ms，"
        "{measured} 条调用边中有 {slow} 条如此（{edges}）"
    ),
    "trace_errors": "span 错误率 {baseline} -> {incident}",
    "alert": "告警 {name} 正在触发",
    "call_pattern": (
        "{visitor}{operation}：{incident_visits} 次访问中有 {incident} 次{event}"
        "（基线 {baseline_visits} 次中有 {baseline} 次）{departing}{cut}{early}"
    ),
    "symptom": "是症状：它调用 {causes}，而后者的异常开始得不晚于它自己",
    "weaker_evidence": "证据弱于 {leader}（得分 {score}，对方 {leader_score}）",
}
"""The Chinese sentence of each kind; a field is a value, a term or an optional part."""
ZH_TERMS: Final[dict[str, dict[str, str]]] = {
    "level": {"error": "错误", "warning": "警告"},
    "per": {"minute": "每分钟", "request": "每个请求"},
    "direction": {"rise": "上升", "drop": "下降"},
    "measure": {"own": "自身耗时", "served": "所服务请求的延迟"},
    "event": {
        "log": "写出日志“{name}”{times}",
        "op": "执行操作 {name}{times}",
        "call": "调用 {name} {extra}{times}",
    },
}
"""Values that name one of a few cases (English words), each case's wording."""
ZH_OPTIONAL: Final[dict[str, tuple[str, str]]] = {
    "served": ("requests_before", "，所服务的请求 {requests_before} -> {requests_after} 个"),
    "also": ("shared", "（另有 {shared} 个服务同样如此）"),
    "times": ("repeat", " {repeat} 次"),
    "cut": ("cut_after", "，在调用 {cut_after} 后中断"),
    "early": ("since", "；自 {since} 起已如此，早于所述的开始时间"),
    "departing": ("requests", "；{requests} 个请求偏离了基线的调用模式"),
    "visitor": ("service", "{service} "),
}
"""Optional parts: each said only when the phrase has the value named first."""
DROPPABLE: Final = frozenset({"early", "departing"})
"""Optional parts left out, not the whole wording, when the cut English does not show them."""
QUOTED: Final = frozenset({"text", "template", "name"})
"""Values that are free text (a log line, an operation): cut where the English cut cuts them."""
SEPARATOR: Final = "、"


class _Unworded(Exception):
    """The phrase cannot be worded within what the English text shows."""


def worded(text: str, phrase: object, language: str, limit: int) -> str:
    """``text`` (English) as the answer says it in ``language``, at most about ``limit`` long.

    Args:
        text: The English mechanism or reason, as the analysis wrote it.
        phrase: Its phrase (``{"kind": ..., "values": {...}}``), or None.
        language: The answer's language (``zh`` or ``en``).
        limit: The characters of ``text`` the answer may quote (a prefix ending at a word).
    """
    shown = word_prefix(text, limit)
    if language == "zh" and isinstance(phrase, Mapping):
        kind, values = phrase.get("kind"), phrase.get("values")
        if isinstance(kind, str) and kind in ZH and isinstance(values, Mapping):
            try:
                return _zh(ZH[kind], text, shown, values)
            except _Unworded:
                pass
    return continued(shown, text)


def _fields(template: str) -> list[str]:
    return [name for _, name, _, _ in Formatter().parse(template) if name]


def _zh(template: str, text: str, shown: str, values: Mapping[str, object]) -> str:
    # Terms and optional parts first (their wording has fields of its own), then the values.
    for _ in range(2):
        parts: dict[str, str] = {}
        for name in _fields(template):
            if name in ZH_TERMS:
                parts[name] = ZH_TERMS[name].get(str(values.get(name)), "")
                if not parts[name]:
                    raise _Unworded(name)
            elif name in ZH_OPTIONAL:
                needed, part = ZH_OPTIONAL[name]
                hidden = name in DROPPABLE and str(values.get(needed, "")) not in shown
                parts[name] = part if needed in values and not hidden else ""
            else:
                parts[name] = "{" + name + "}"
        template = template.format_map(parts)
    return template.format_map(
        {name: _value(name, values, text, shown) for name in _fields(template)}
    )


def _value(name: str, values: Mapping[str, object], text: str, shown: str) -> str:
    value = values.get(name)
    if isinstance(value, list):
        items = [str(item) for item in value]
        if not items or not all(item and item in shown for item in items):
            raise _Unworded(name)
        return SEPARATOR.join(items)
    if not isinstance(value, str) or not value:
        raise _Unworded(name)
    if value in shown:
        return value
    start = text.find(value)
    if name not in QUOTED or not 0 <= start < len(shown):
        raise _Unworded(name)
    part = shown[start:].rstrip()
    if not part:
        raise _Unworded(name)
    return continued(part, value)
