"""The offline rules for the question kinds of ``verification.intent``: plan and answer.

- **health** ("is X healthy", "X 正常吗"): its ERROR logs, its alerts and its key series (CPU,
  memory, error rate, latency, pool, disk) against their thresholds; the conclusion is yes only
  when all are clean, no with the reasons;
- **metric_check** ("is X's CPU saturated", "is the pool full"): the series of that metric against
  the threshold of the alert measuring it, else the documented default
  (``verification.conclusion.DEFAULT_THRESHOLDS``); never logs;
- **compare** ("which is higher"): the series of each service named, the conclusion names the
  higher (or lower) first;
- **changes** ("what changed at 09:40"): every log line of the window at every level, INFO
  included, that records a deploy, restart, migration, config change or job start;
- **listing** ("what FATAL errors did X log", "X 有哪些报错"): the log lines of each service
  asked at the level asked; the answer opens with them, each quoted with its time and bound to
  its entry (one line of each kind of message first, then the newest others, at most
  ``MAX_LISTED``), after how many matched; no incident analysis (a why question asks for that);
- **action** ("what should I do", "what does alert A mean and how do I handle it"): the runbooks
  looked up by the question's words and names, their mitigation or procedure steps as next steps;
  the service's ERROR logs when it names one;
- a **time window** the question names: the current time is asked first (``get_current_time``),
  then every query carries the absolute window, which the conclusion states.

The conclusion is written by code from the claims it rests on; ``verification.conclusion`` checks
it again, the same way, from the refs those claims cite.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final

from models.offline.evidence import Result, examples, log_result, metrics_result, series_for
from models.offline.rules import Step, alert_selector, analysis, plan_steps, scopes
from models.offline.writer import Writer, binding, quote, summary_binding, value_text
from state.display import continued, one_line, word_prefix
from state.records import QuestionFacets
from tools.backend import parse_timestamp
from tools.render import format_value
from verification.conclusion import SeriesReading, alert_measures, series_reading, stated_answer
from verification.intent import CHANGE, Intent, iso, read_intent
from verification.question import facet_label

KEY_CONCEPTS: Final[tuple[str, ...]] = ("cpu", "memory", "error_rate", "latency", "pool", "disk")
"""The key series a health question reads, in this order."""
MAX_CHANGES: Final = 6
"""Change lines quoted at most (the rest are counted)."""
CHANGE_LIMIT: Final = 100
"""Log lines a change query reads."""
MAX_LISTED: Final = 8
"""Log lines a listing quotes at most (the rest are counted)."""
_IDENTIFIER = re.compile(
    r"(?<![A-Za-z0-9_])[A-Za-z][a-z0-9]*(?:[A-Z][A-Za-z0-9]*)+(?![A-Za-z0-9_])"
)

TEXT: Final[dict[str, dict[str, str]]] = {
    "en": {
        "healthy": "Yes: {service} looks healthy: {reasons}.",
        "unhealthy": "No: {service} is not healthy: {reasons}.",
        "no_errors": "no {level} log entries",
        "errors": "{count} {level} log entries",
        "no_firing": "no firing alert",
        "firing": "alert {name} is firing",
        "below": "{label} {value} is below the {threshold} threshold ({source})",
        "above": "{label} {value} is at or above the {threshold} threshold ({source})",
        "from_alert": "of alert {name}",
        "default": "documented default",
        "check_yes": "Yes: {items}.",
        "check_no": "No: {items}.",
        "compare": "{first} has the {direction} {label}: {value} (last value), against {others}.",
        "higher": "higher",
        "lower": "lower",
        "versus": "{value} for {service}",
        "changes": "Changes logged {window}: {items}.",
        "no_changes": (
            "No deploy, restart, migration, config change or job start was logged {window} "
            "({count} log lines read at every level)."
        ),
        "window": "between {start} and {end} UTC",
        "whole": "in the queried range",
        "change_line": '{service} logged at {time} UTC ({level}): "{message}"',
        "no_change_claim": (
            "None of the {count} log lines of {scope} in the window records a deploy, restart, "
            "migration, config change or job start."
        ),
        "all_services": "any service",
        "more_changes": "{count} more change lines in the window are not quoted.",
        "no_alerts_any": "{service} has no alerts in the data.",
        "time_unknown": "The current time could not be read, so the window {spec} is unresolved.",
        "sep": "; ",
        "meaning": 'What "{title}" means: {sentence}',
        "timed": "{window}: {text}",
        "listed": "{scope} logged {total} {level} {lines} {window}: {items}.",
        "listed_none": "{scope} logged no {level} lines {window}.",
        "list_count": "{scope} has {total} {level} log {lines} in the queried range.",
        "at_least": "at least {count}",
        "line": "line",
        "lines": "lines",
        "more_lines": "{count} more of the {level} lines read are not quoted.",
        "unread_lines": (
            "Only the newest {read} of the {total} matching {level} lines were read "
            "(query_logs limit)."
        ),
    },
    "zh": {
        "healthy": "是：{service} 状态正常：{reasons}。",
        "unhealthy": "否：{service} 不正常：{reasons}。",
        "no_errors": "没有 {level} 日志",
        "errors": "有 {count} 条 {level} 日志",
        "no_firing": "没有正在触发的告警",
        "firing": "告警 {name} 正在触发",
        "below": "{label} {value} 低于阈值 {threshold}（{source}）",
        "above": "{label} {value} 达到或超过阈值 {threshold}（{source}）",
        "from_alert": "告警 {name} 的阈值",
        "default": "文档默认阈值",
        "check_yes": "是：{items}。",
        "check_no": "否：{items}。",
        "compare": "{first} 的{label}更{direction}：{value}（最新值），而{others}。",
        "higher": "高",
        "lower": "低",
        "versus": "{service} 为 {value}",
        "changes": "{window}记录到的变更：{items}。",
        "no_changes": (
            "{window}没有记录到发布、重启、迁移、配置变更或任务启动"
            "（已读取各级别日志 {count} 条）。"
        ),
        "window": "{start} 至 {end}（UTC）",
        "whole": "查询范围内",
        "change_line": "{service} 在 {time}（UTC）记录了（{level}）：“{message}”",
        "no_change_claim": (
            "窗口内 {scope} 的 {count} 条日志都没有记录发布、重启、迁移、配置变更或任务启动。"
        ),
        "all_services": "所有服务",
        "more_changes": "窗口内还有 {count} 条变更日志未引用。",
        "no_alerts_any": "{service} 在数据中没有任何告警。",
        "time_unknown": "无法读取当前时间，时间窗口 {spec} 无法确定。",
        "sep": "；",
        "meaning": "《{title}》的含义：{sentence}",
        "timed": "{window}：{text}",
        "listed": "{scope} 在{window}共有 {total} 条 {level} 日志：{items}。",
        "listed_none": "{scope} 在{window}没有 {level} 日志。",
        "list_count": "{scope} 在查询范围内有 {total} 条 {level} 日志。",
        "at_least": "至少 {count}",
        "line": "",
        "lines": "",
        "more_lines": "已读取的 {level} 日志中还有 {count} 条未逐条引用。",
        "unread_lines": (
            "匹配的 {total} 条 {level} 日志只读取了最新的 {read} 条（query_logs 的 limit）。"
        ),
    },
}


def intent_of(facts: dict[str, Any]) -> Intent:
    """The task's question read for the answer it wants (services the backend knows)."""
    known = [str(s) for s in facts.get("known_services", [])]
    return read_intent(str(facts.get("question", "")), known, stems=True)


# --------------------------------------------------------------------------- plans


def plan_for(facts: dict[str, Any]) -> list[Step]:
    """The first tool calls: a kind of this module's, else ``models.offline.rules``.

    A question naming a time asks the current time first; the queries follow with the window
    (``windowed_steps``).
    """
    intent = intent_of(facts)
    if int(facts.get("round", 1)) > 1:
        # What to do is read from the runbooks again: a retry never loses the steps.
        again = kind_steps(facts, intent, None) if intent.kind == "action" else None
        return again or plan_steps(facts)
    if intent.time is not None and intent.kind not in ("action", "compare"):
        return [("get_current_time", {})]
    return kind_steps(facts, intent, None) or plan_steps(facts)


def kind_steps(
    facts: dict[str, Any], intent: Intent, window: tuple[str, str] | None
) -> list[Step] | None:
    """The calls for a kind of this module (None for the others), within ``window``."""
    found = analysis(facts)
    targets = scopes(found["services"], found["unknown_services"])
    span = {"start": window[0], "end": window[1]} if window else {}

    def scoped(target: str | None) -> dict[str, Any]:
        return {"service": target} if target else {}

    steps: list[Step] = []
    if intent.kind == "health":
        for target in targets:
            steps.append(("query_logs", {**scoped(target), "level": found["error_level"], **span}))
            steps.append(("query_metrics", {**scoped(target), **span}))
    elif intent.kind in ("metric_check", "compare"):
        steps = [("query_metrics", {**scoped(t), **span}) for t in targets]
    elif intent.kind == "changes":
        steps = [("query_logs", {**scoped(t), **span, "limit": CHANGE_LIMIT}) for t in targets]
    elif intent.kind == "listing":
        steps = [
            ("query_logs", {**scoped(t), "level": found["error_level"], **span}) for t in targets
        ]
    elif intent.kind == "action":
        for name in found["alerts"]:
            steps.append(("query_metrics", {"alert": name, "promql": alert_selector(name)}))
        for target in targets:
            if target:
                steps.append(("query_logs", {"service": target, "level": found["error_level"]}))
        steps.append(("lookup_knowledge", {"query": knowledge_terms(intent), "top_k": 8}))
    else:
        return None
    for service in found["unknown_services"]:
        steps.append(("query_logs", {"service": service}))
        steps.append(("query_metrics", {"service": service}))
    return steps


def windowed_steps(facts: dict[str, Any], intent: Intent, now: datetime) -> list[Step]:
    """The calls of a question naming a time, each with the absolute window."""
    start, end = intent.time.resolve(now) if intent.time else (now, now)
    window = (iso(start), iso(end))
    steps = kind_steps(facts, intent, window)
    if steps is not None:
        return steps
    timed: list[Step] = []
    for tool, args in plan_steps(facts):
        if tool in ("query_logs", "query_metrics") and not args.get("promql"):
            args = {**args, "start": window[0], "end": window[1]}
        timed.append((tool, args))
    return timed


def question_names(question: str) -> list[str]:
    """Identifiers a question gives (alert names such as ``etcdHighFsyncDurations``)."""
    return list(dict.fromkeys(_IDENTIFIER.findall(question)))


def knowledge_terms(intent: Intent) -> str:
    """A runbook query: the names the question gives (alerts, identifiers) and its concepts."""
    names = [*intent.facets["alerts"], *_IDENTIFIER.findall(intent.question)]
    concepts = [*intent.facets["metrics"], *intent.facets["symptoms"]]
    terms = [*dict.fromkeys(names), *dict.fromkeys(c for c in concepts if c != "alert")]
    return " ".join(terms) or intent.question


def current_time(results: list[Result]) -> datetime | None:
    """The time ``get_current_time`` answered, if it ran and answered."""
    for result in results:
        if result.tool == "get_current_time" and result.status == "ok":
            try:
                return parse_timestamp(str(result.output.get("now", "")))
            except ValueError:
                return None
    return None


def window_of(results: list[Result]) -> tuple[str, str] | None:
    """The absolute window the queries ran with, if any."""
    for result in results:
        start, end = result.args.get("start"), result.args.get("end")
        if start and end:
            return str(start), str(end)
    return None


# --------------------------------------------------------------------------- answers


_FRACTION = re.compile(r"T?\d{2}:\d{2}:\d{2}(\.\d+)")


def _short_time(stamp: str) -> str:
    """``2026-04-07T09:40:12Z`` -> ``2026-04-07 09:40:12``; as written when unreadable.

    Fractions of a second are kept as written (``09:40:12.261``): the log line's ref shows them,
    and a time cut short of them is not the time the line states.
    """
    try:
        moment = parse_timestamp(stamp)
    except ValueError:
        return stamp
    fraction = _FRACTION.search(stamp)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + (fraction.group(1) if fraction else "")


def window_text(t: dict[str, str], window: tuple[str, str] | None) -> str:
    """The window as the answer states it: absolute UTC times."""
    if window is None:
        return t["whole"]
    start, end = (_short_time(stamp)[:16] for stamp in window)
    return t["window"].format(start=start, end=end)


def compose_kind(
    writer: Writer, task: dict[str, Any], found: QuestionFacets, results: list[Result]
) -> bool:
    """Answer a kind of this module; False for the others (``models.offline.answers``)."""
    intent = read_intent(
        str(task.get("question", "")), [str(s) for s in task.get("known_services", [])], stems=True
    )
    services = scopes(found["services"], found["unknown_services"])
    if intent.time is not None and window_of(results) is None and current_time(results) is None:
        unknown = TEXT[writer.lang]["time_unknown"].format(spec=intent.question)
        writer.gap(unknown, "get_current_time", {})
    if intent.kind == "health":
        health(writer, found, results, services)
    elif intent.kind == "metric_check":
        metric_check(writer, found, results, services)
    elif intent.kind == "compare":
        compare(writer, intent, found, results, services)
    elif intent.kind == "changes":
        changes(writer, results, services)
    elif intent.kind == "listing":
        listing(writer, found, results, services)
    elif intent.kind == "action":
        action(writer, found, results, services, intent.question)
    else:
        return False
    return True


def action(
    writer: Writer,
    found: QuestionFacets,
    results: list[Result],
    services: list[str | None],
    intent_question: str,
) -> None:
    """What to do: the alerts named, the service's errors, what an alert means.

    The runbooks' mitigation steps follow (``models.offline.answers.actions``).
    """
    for name in found["alerts"]:
        named = next(
            (r for r in results if r.tool == "query_metrics" and r.args.get("alert") == name),
            None,
        )
        if named is None:
            continue
        same = [
            i
            for i, e in enumerate(named.entries("alerts"))
            if str(e.get("alert_name", "")).casefold() == name.casefold()
        ]
        if same:
            writer.alert_groups(named, same, limit=1)
        else:
            writer.no_alert(name, named, None)
    for service in services:
        logs = log_result(results, service, found["error_level"]) if service else None
        if logs is not None and logs.status == "ok":
            writer.log_lines(logs, examples(logs, found)[0])
        elif logs is not None and logs.status == "no_hit":
            writer.no_logs(logs)
    t = TEXT[writer.lang]
    for result in results:
        if result.tool != "lookup_knowledge":
            continue
        for entry in result.entries("documents"):
            title = str(entry.get("title", ""))
            meaning = meaning_sentence(str(entry.get("chunk", "")), title)
            names = [*found["alerts"], *question_names(intent_question)]
            if meaning and any(n.casefold() in title.casefold() for n in names):
                source = str(entry.get("source") or entry.get("doc_id") or "")
                writer.actions.append(
                    {"text": t["meaning"].format(title=title, sentence=meaning), "source": source}
                )


_MEANING = re.compile(r"^#+\s*(?:meaning|含义|说明)\s*$", re.IGNORECASE | re.MULTILINE)


def meaning_sentence(chunk: str, title: str = "") -> str | None:
    """The first sentence under a runbook's ``Meaning`` heading (or of its Meaning chunk)."""
    heading = _MEANING.search(chunk)
    if heading is not None:
        body = chunk[heading.end() :].strip()
    elif title.rsplit(" > ", 1)[-1].strip().casefold() in ("meaning", "含义", "说明"):
        body = chunk.strip()
    else:
        return None
    body = re.split(r"\n#+\s", "\n" + body, maxsplit=2)[1 if body.startswith("#") else 0]
    text = one_line(body)
    sentence = re.split(r"(?<=[.!?。！？])\s", text, maxsplit=1)[0]
    return sentence[:240] or None


def timed_conclusion(writer: Writer, task: dict[str, Any], results: list[Result]) -> None:
    """A question naming a time, answered by the other rules: the window stated absolutely.

    The conclusion is the first claim's answer (its yes or no, else the claim itself) within the
    window the queries ran with, resting on that claim.
    """
    window = window_of(results)
    if window is None or writer.conclusion is not None or not writer.claims:
        return
    intent = intent_of(task)
    if intent.time is None:
        return
    t = TEXT[writer.lang]
    first = str(writer.claims[0]["claim_text"])
    said = stated_answer(first)
    text = t["timed"].format(window=window_text(t, window), text=first)
    writer.conclude(said or "value", text, [str(writer.claims[0]["claim_id"])])


def _alert_texts(result: Result) -> list[str]:
    return [result.refs.get(f"alerts[{i}]", "") for i in range(len(result.entries("alerts")))]


def _reading(result: Result, index: int) -> SeriesReading | None:
    return series_reading(result.refs.get(f"series[{index}]", ""), _alert_texts(result))


def _threshold_words(t: dict[str, str], result: Result, reading: SeriesReading) -> str:
    if reading.from_alert:
        name = next(
            (
                str(e.get("alert_name"))
                for e in result.entries("alerts")
                if alert_measures(str(e.get("alert_name")), reading.concept)
            ),
            "",
        )
        return t["from_alert"].format(name=name)
    return t["default"]


def _series_words(
    t: dict[str, str], lang: str, result: Result, index: int, reading: SeriesReading
) -> str:
    entry = result.entries("series")[index]
    unit = entry.get("unit")
    label = facet_label(reading.concept or str(entry.get("metric")), lang)
    key = "above" if reading.signal == "problem" else "below"
    return t[key].format(
        label=label,
        value=value_text(entry.get("last"), unit),
        threshold=format_value(reading.threshold) + (format_value(unit) if unit else ""),
        source=_threshold_words(t, result, reading),
    )


def _bind_threshold_alert(writer: Writer, result: Result, reading: SeriesReading) -> str | None:
    """Bind the alert whose threshold a series was read against (once); its claim id."""
    if not reading.from_alert:
        return None
    for index, entry in enumerate(result.entries("alerts")):
        if alert_measures(str(entry.get("alert_name")), reading.concept):
            return alert_claim(writer, result, index)
    return None


def alert_claim(writer: Writer, result: Result, index: int) -> str:
    """The id of the claim stating an alert: the one already written, or a new one."""
    for claim in writer.claims:
        for bound in claim["evidence_bindings"]:
            same = bound["source_invocation_id"] == result.invocation_id
            if same and bound["raw_path"] == f"alerts[{index}]":
                return str(claim["claim_id"])
    writer.alert(result, index)
    return writer.last_id


def health(
    writer: Writer, found: QuestionFacets, results: list[Result], services: list[str | None]
) -> None:
    """Logs, alerts and key series of each service; yes only when all are clean."""
    t = TEXT[writer.lang]
    level = found["error_level"]
    verdicts: list[tuple[bool, str]] = []
    rests: list[str] = []
    for service in services:
        if service is None:
            continue
        problems: list[str] = []
        clean: list[str] = []
        logs = log_result(results, service, level)
        if logs is not None and logs.status == "ok":
            writer.log_lines(logs, examples(logs, found)[0])
            problems.append(t["errors"].format(count=logs.total(), level=level))
            rests.append(writer.last_id)
        elif logs is not None and logs.status == "no_hit":
            writer.no_logs(logs)
            clean.append(t["no_errors"].format(level=level))
            rests.append(writer.last_id)
        metrics = metrics_result(results, service)
        if metrics is not None and metrics.status in ("ok", "no_hit"):
            alerts = metrics.entries("alerts")
            firing = [i for i, e in enumerate(alerts) if e.get("state") == "firing"]
            for group in _alert_groups(metrics, firing):
                rests.append(alert_claim(writer, metrics, group[0]))
                problems.append(t["firing"].format(name=alerts[group[0]].get("alert_name")))
            if not firing:
                if alerts:
                    writer.alert(metrics, 0)
                else:
                    text = t["no_alerts_any"].format(service=service)
                    writer.claim("negative_observation", text, [summary_binding(metrics)])
                rests.append(writer.last_id)
                clean.append(t["no_firing"])
            for concept in KEY_CONCEPTS:
                picks = series_for(metrics, concept, "")
                reading = _reading(metrics, picks[0]) if picks else None
                if reading is None or reading.signal is None:
                    continue
                writer.series(metrics, picks[0], concept)
                rests.append(writer.last_id)
                alert_id = _bind_threshold_alert(writer, metrics, reading)
                if alert_id and alert_id not in rests:
                    rests.append(alert_id)
                words = _series_words(t, writer.lang, metrics, picks[0], reading)
                (problems if reading.signal == "problem" else clean).append(words)
        if problems:
            verdicts.append(
                (False, t["unhealthy"].format(service=service, reasons=t["sep"].join(problems)))
            )
        elif clean:
            verdicts.append(
                (True, t["healthy"].format(service=service, reasons=t["sep"].join(clean)))
            )
    if verdicts and rests:
        healthy = all(ok for ok, _ in verdicts)
        writer.conclude("yes" if healthy else "no", " ".join(text for _, text in verdicts), rests)


def _alert_groups(result: Result, indexes: list[int]) -> list[list[int]]:
    """Alert indexes grouped by alert name (the same alert on several series is one)."""
    groups: dict[str, list[int]] = {}
    for index in indexes:
        name = str(result.entries("alerts")[index].get("alert_name"))
        groups.setdefault(name, []).append(index)
    return list(groups.values())


def metric_check(
    writer: Writer, found: QuestionFacets, results: list[Result], services: list[str | None]
) -> None:
    """The metric's series against its threshold; yes when one is at or above it."""
    t = TEXT[writer.lang]
    rests: list[str] = []
    above: list[str] = []
    below: list[str] = []
    for service in services:
        metrics = metrics_result(results, service)
        if metrics is None or metrics.status != "ok":
            continue
        for concept in found["metrics"]:
            picks = series_for(metrics, concept, "")
            owners: set[str] = set()
            for index in picks:
                reading = _reading(metrics, index)
                if reading is None or reading.signal is None or reading.service in owners:
                    continue
                owners.add(reading.service)
                writer.series(metrics, index, concept)
                rests.append(writer.last_id)
                alert_id = _bind_threshold_alert(writer, metrics, reading)
                if alert_id and alert_id not in rests:
                    rests.append(alert_id)
                owner = reading.service or service or ""
                words = owner + " " + _series_words(t, writer.lang, metrics, index, reading)
                (above if reading.signal == "problem" else below).append(words.strip())
            if not picks and service:
                names = sorted({str(e.get("metric")) for e in metrics.entries("series")})
                writer.gap(
                    writer.t["no_series"].format(
                        service=service,
                        label=facet_label(concept, writer.lang),
                        metrics=writer.join(names),
                    ),
                    "query_metrics",
                    {"service": service},
                )
    if not rests:
        return
    if above:
        writer.conclude("yes", t["check_yes"].format(items=t["sep"].join(above)), rests)
    else:
        writer.conclude("no", t["check_no"].format(items=t["sep"].join(below)), rests)


def compare(
    writer: Writer,
    intent: Intent,
    found: QuestionFacets,
    results: list[Result],
    services: list[str | None],
) -> None:
    """Each service's series of the metric; the conclusion names the higher (or lower) first."""
    t = TEXT[writer.lang]
    concept = (found["metrics"] or ["cpu"])[0]
    seen: list[tuple[float, str, str]] = []
    rests: list[str] = []
    for service in services:
        metrics = metrics_result(results, service)
        if metrics is None or metrics.status != "ok" or service is None:
            continue
        picks = series_for(metrics, concept, intent.question)
        if not picks:
            continue
        entry = metrics.entries("series")[picks[0]]
        last = entry.get("last")
        if not isinstance(last, (int, float)):
            continue
        writer.series(metrics, picks[0], concept)
        rests.append(writer.last_id)
        seen.append((float(last), service, value_text(last, entry.get("unit"))))
    if len(seen) < 2:
        return
    lower = bool(
        re.search(
            r"\b(?:lower|less|smaller|fewer|faster|better)\b|更低|更少|更小|更快",
            intent.question.casefold(),
        )
    )
    ordered = sorted(seen, key=lambda item: item[0], reverse=not lower)
    first = ordered[0]
    others = t["sep"].join(t["versus"].format(value=v, service=s) for _, s, v in ordered[1:])
    text = t["compare"].format(
        first=first[1],
        direction=t["lower" if lower else "higher"],
        label=facet_label(concept, writer.lang),
        value=first[2],
        others=others,
    )
    writer.conclude("value", text, rests)


def changes(writer: Writer, results: list[Result], services: list[str | None]) -> None:
    """The log lines of the window that record a change, at every level; or that none does."""
    t = TEXT[writer.lang]
    window = window_of(results)
    where = window_text(t, window)
    rests: list[str] = []
    items: list[str] = []
    read = 0
    for service in services:
        logs = next(
            (
                r
                for r in reversed(results)
                if r.tool == "query_logs"
                and r.service == service
                and not r.level
                and not r.args.get("query")
            ),
            None,
        )
        if logs is None:
            continue
        entries = logs.entries("logs")
        read += len(entries)
        found = [
            i for i, e in enumerate(entries) if CHANGE.search(str(e.get("message", "")).casefold())
        ]
        found.sort(key=lambda i: str(entries[i].get("timestamp", "")))
        for index in found[:MAX_CHANGES]:
            entry = entries[index]
            full = str(entry.get("message", ""))
            excerpt = quote(full)
            text = t["change_line"].format(
                service=entry.get("service") or service or "",
                time=_short_time(str(entry.get("timestamp", ""))),
                level=str(entry.get("level", "")).upper(),
                message=continued(excerpt, full),
            )
            writer.claim("observation", text, [binding(logs, f"logs[{index}]", excerpt)])
            rests.append(writer.last_id)
            at = _short_time(str(entry.get("timestamp", "")))[11:16]
            items.append(f"{entry.get('service') or service} {at} {word_prefix(full, 60)}")
        if len(found) > MAX_CHANGES:
            writer.gap(t["more_changes"].format(count=len(found) - MAX_CHANGES))
        if not found and logs.status in ("ok", "no_hit"):
            if entries:
                # What the window did hold, quoted: the absence is read from these lines.
                writer.log_lines(logs, 0, counted=bool(service))
                rests.append(writer.last_id)
            scope = service or t["all_services"]
            text = t["no_change_claim"].format(count=len(entries), scope=scope)
            writer.claim("negative_observation", text, [summary_binding(logs)])
            rests.append(writer.last_id)
    if not rests:
        return
    if items:
        writer.conclude(
            "value", t["changes"].format(window=where, items=t["sep"].join(items)), rests
        )
    else:
        writer.conclude("value", t["no_changes"].format(window=where, count=read), rests)


def listing(
    writer: Writer, found: QuestionFacets, results: list[Result], services: list[str | None]
) -> None:
    """The log lines at the level asked, each quoted with its time; or that none was logged.

    Per service: how many matched (bound to the query's summary), then the lines: one of each
    kind of message first (``examples``), then the newest others, at most ``MAX_LISTED``,
    newest first.
    """
    t = TEXT[writer.lang]
    level = found["error_level"]
    where = window_text(t, window_of(results))
    rests: list[str] = []
    texts: list[str] = []
    for service in services:
        logs = log_result(results, service, level)
        if logs is None or logs.status not in ("ok", "no_hit"):
            continue
        scope = service or t["all_services"]
        entries = logs.entries("logs")
        if not entries:
            if service:
                writer.no_logs(logs)
            else:
                text = writer.t["no_logs_all"].format(level=level)
                writer.claim("negative_observation", text, [summary_binding(logs)])
            rests.append(writer.last_id)
            texts.append(t["listed_none"].format(scope=scope, level=level, window=where))
            continue
        total = logs.total()
        counted = str(total)
        if logs.output.get("total_at_least") is True:
            counted = t["at_least"].format(count=total)
        lines = t["line" if total == 1 else "lines"]
        count = t["list_count"].format(scope=scope, total=counted, level=level, lines=lines)
        writer.claim("observation", one_line(count), [summary_binding(logs)])
        rests.append(writer.last_id)
        picks = examples(logs, found)[:MAX_LISTED]
        picks += [i for i in range(len(entries)) if i not in picks][: MAX_LISTED - len(picks)]
        picks.sort(key=lambda i: (str(entries[i].get("timestamp", "")), -i), reverse=True)
        items: list[str] = []
        for index in picks:
            entry = entries[index]
            full = str(entry.get("message", ""))
            excerpt = quote(full)
            stamp = _short_time(str(entry.get("timestamp", "")))
            text = t["change_line"].format(
                service=entry.get("service") or service or "",
                time=stamp,
                level=str(entry.get("level") or level).upper(),
                message=continued(excerpt, full),
            )
            writer.quoted.add((logs.invocation_id, f"logs[{index}]"))
            writer.claim("observation", text, [binding(logs, f"logs[{index}]", excerpt)])
            rests.append(writer.last_id)
            who = f"{entry.get('service')} " if not service and entry.get("service") else ""
            items.append(f"{who}{stamp[11:]} {word_prefix(full, 60)}")
        if len(entries) > len(picks):
            writer.gap(t["more_lines"].format(count=len(entries) - len(picks), level=level))
        if total > len(entries):
            writer.gap(
                t["unread_lines"].format(read=len(entries), total=counted, level=level),
                "query_logs",
                {**logs.args, "limit": 100},
            )
        listed = t["listed"].format(
            scope=scope,
            total=counted,
            level=level,
            lines=lines,
            window=where,
            items=t["sep"].join(items),
        )
        texts.append(one_line(listed))
    if rests:
        writer.conclude("value", " ".join(texts), rests)
