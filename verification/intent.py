"""What kind of answer a question wants, and the time window it names, in Chinese and English.

``verification.question`` reads what a question names (services, alerts, metrics, symptoms) and
its broad kind; this module reads the answer it wants:

- ``health``: "is X healthy / OK / working normally", "X 正常吗", "X 健康吗": yes only when its
  logs, alerts and key series are all clean, no with the reasons;
- ``metric_check``: a yes/no question about a measured thing ("is X's CPU saturated", "is the
  pool full", "X 的内存是否过高"): answered from the series against the alert rule's threshold
  or the documented default (``verification.conclusion.DEFAULT_THRESHOLDS``), never from logs;
- ``compare``: "which is higher, A or B", "A 和 B 哪个更高";
- ``changes``: "what changed (at 09:40)", "was anything deployed", "09:40 有什么变更": the
  deploys, restarts, migrations, config changes and job starts logged around the time asked,
  at every level, INFO included;
- ``action``: "what should I do", "how do I handle it", "what does alert A mean", "怎么处理":
  the runbook's mitigation or procedure steps;
- ``listing``: "what (FATAL) errors did X log", "which errors / exceptions", "list the FATAL
  lines", "X 有什么错误", "有哪些报错", "报了哪些错", "列出 X 的 FATAL 日志": the log lines at the
  level asked (``verification.question.error_level``), each quoted with its time; a question
  asking for a cause as well ("why", "what caused", "为什么", "根因", "导致") is a ``why``;
- ``errors``: "does X have errors / 500s" (yes when it logged them);
- ``alert_state``: "is alert A firing";
- otherwise the broad kind of ``verification.question`` (``value``, ``why``, ``overview``).

``polarity`` says what a "yes" means: ``ok`` (health: yes is clean) or ``problem`` (errors,
saturation, a firing alert: yes is a problem found); ``None`` for kinds that are not yes/no.

A time window is read as written ("at 09:40", "in the last 30 minutes", "since 09:00",
"yesterday 16:00-17:00", "过去 30 分钟", "09:00 以来", "昨天 16:00-17:00") and resolved against
the current time (``TimeSpec.resolve``) into absolute UTC timestamps; "at 09:40" is the quarter
of an hour either side of it. Times in a question are read as UTC.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, Literal

from state.records import QuestionFacets
from verification.question import analyze_question, asks_why, question_words

IntentKind = Literal[
    "health",
    "metric_check",
    "compare",
    "changes",
    "action",
    "listing",
    "errors",
    "alert_state",
    "value",
    "why",
    "overview",
]
Polarity = Literal["ok", "problem"]

YES_NO_KINDS: Final[frozenset[str]] = frozenset({"health", "metric_check", "errors", "alert_state"})
"""Kinds whose answer is a yes or a no: the conclusion states which, and code checks it."""
CONCLUDED_KINDS: Final[frozenset[str]] = YES_NO_KINDS | {"compare"}
CAUSE_KINDS: Final[frozenset[str]] = frozenset({"why", "overview"})
"""Questions whose answer leads with the root cause: why, what is the cause, what is wrong."""
"""Kinds whose answer is a conclusion drawn from the claims (checked by code)."""

AROUND: Final = timedelta(minutes=15)
"""How far either side of a point in time ("at 09:40") the window reaches."""

_HEALTH = re.compile(
    r"\bhealthy\b|\bhealth\b|\bin good shape\b|\bok(?:ay)?\b|\bfine\b|\ball right\b|"
    r"\bworking (?:normally|properly|fine|correctly)\b|\brunning (?:normally|fine|ok)\b|"
    r"\bnormal(?:ly)?\b|正常|健康|没问题|有没有问题|有问题吗|好吗|还好"
)
_CHECK = re.compile(
    r"\bsaturat\w*|\bfull\b|\bexhaust\w*|\btoo high\b|\bhigh\b|\babove\b|\bover\b|\bexceed\w*|"
    r"\bnear(?:ly)? (?:full|the limit)|\bat (?:the )?limit\b|\bmaxed\b|\bspik\w*|\belevated\b|"
    r"过高|太高|偏高|很高|高吗|高不高|超过|超标|打满|满了|已满|写满|耗尽|饱和|吃紧|告急|"
    r"快满|到上限|异常吗"
)
_COMPARE = re.compile(
    r"\bwhich\b.*\b(?:higher|lower|more|less|larger|bigger|smaller|worse|better|busier|"
    r"slower|faster|greater)\b|\bcompare\w*\b|\b(?:higher|lower|more|less) than\b|"
    r"\bversus\b|\bvs\.?\b|哪个更|哪一个更|谁更|哪个服务更|比较|对比|更高|更低|更多|更少|更慢|更快"
)
_CHANGES = re.compile(
    r"\bwhat (?:has |was |got )?chang\w*|\bany(?:thing)? chang\w*|\bchanges?\b|"
    r"\bwhat (?:was |got )?(?:deployed|released|rolled out|migrated|restarted)\b|"
    r"\b(?:was|were|did) (?:there )?(?:a |any )?(?:deploy\w*|release|rollout|migration|"
    r"restart|config\w* change)|\bwhat happened at\b|"
    r"变更|改动|变化|改了什么|动了什么|上线了什么|发布了什么|部署了什么|有没有发布|有没有部署|"
    r"有没有上线|有没有重启|有没有迁移"
)
_ACTION = re.compile(
    r"\bwhat (?:should|shall|can|do) (?:i|we) do\b|\bwhat to do\b|\bhow (?:do|should|can) "
    r"(?:i|we) (?:handle|fix|mitigate|resolve|deal with|respond|recover|remediate)\b|"
    r"\bhow to (?:handle|fix|mitigate|resolve|deal with|respond|recover|remediate)\b|"
    r"\bnext steps?\b|\bmitigat\w*|\bremediat\w*|\bwhat does (?:the )?(?:alert )?\S+ mean\b|"
    r"\bmeaning of\b|怎么办|怎么处理|如何处理|怎么解决|如何解决|该怎么做|应该怎么做|应该做什么|"
    r"怎么做|处理步骤|处置|如何应对|怎么应对|什么意思|是什么意思|含义"
)
_LISTED = (
    r"(?:errors?|exceptions?|failures?|(?:error|fatal|panic|critical)\s+(?:lines?|logs?|"
    r"log\s+lines|entries|messages))(?![\w-]|\s*(?:rates?|ratios?|budgets?|percent\w*)\b)"
)
_LISTING = re.compile(
    rf"\b(?:what|which)(?:\s+[\w.-]+){{0,3}}?\s+{_LISTED}|"
    rf"\b(?:list|show|print|give)\b(?:\s+[\w.-]+){{0,4}}?\s+(?:{_LISTED}|(?:fatal|panic|"
    r"critical)\b)|"
    r"(?:什么|哪些|啥|哪几种|哪几类|哪类|哪种)\s*(?:[a-z]+\s*)?(?:错误|报错|错(?!误)|error)(?!率)|"
    r"(?:列出|列一下|列举|罗列|给我看).*(?:错误|报错|日志|fatal|error|panic|critical)"
)
"""A question asking which error lines were logged (``listing``)."""
_CAUSED = re.compile(r"\bcaus\w*|导致|引起|造成")
"""Words asking for a cause besides those of a why question."""

CHANGE = re.compile(
    r"\b(?:deploy\w*|rolled out|rollout|rolling out|releas\w*|restart\w*|migrat\w*|"
    r"config\w*|chang\w*|upgrad\w*|downgrad\w*|rollback|rolled back|roll back|scal\w+ "
    r"(?:up|down|to|from)|feature flag\w*|flag \w+ (?:enabled|disabled)|cron\w*|"
    r"job \S+ start\w*|start\w* job|version \S+|reload\w*)\b|"
    r"变更|发布|上线|部署|重启|迁移|配置|升级|回滚|扩容|缩容|任务启动|启动任务|版本|重新加载"
)
"""Words a log line or a claim about a change uses (deploys, restarts, migrations, config changes,
job starts)."""

_CLOCK = r"([01]?\d|2[0-3])[:：]([0-5]\d)"
_LAST = re.compile(
    r"\b(?:in |during |over |within )?(?:the )?(?:last|past) (\d+)\s*"
    r"(minutes?|mins?|m|hours?|hrs?|h)\b|(?:过去|最近|近)\s*(\d+)\s*(分钟|小时|个小时)"
)
_RANGE = re.compile(
    rf"(?:\b(yesterday|today)\b|(昨天|今天))?\s*(?:from |between |在|从)?\s*{_CLOCK}\s*"
    rf"(?:-|–|—|~|to|and|至|到)\s*{_CLOCK}"
)
_STAMP = r"\d{4}-\d{2}-\d{2}[t ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:z|[+-]\d{2}:\d{2}| ?utc)?"
_ISO_FROM = re.compile(
    rf"\b(?:from|(?<!firing )since|after)\s+({_STAMP})"
    rf"|(?:自|从)?\s*({_STAMP})\s*(?:起|以来|之后|以后|开始)"
)
"""An absolute start: "from 2026-05-12T09:25:00Z", "since 2026-05-12 09:25 UTC",
"2026-05-12 09:25:00 UTC 起" (no zone: UTC)."""
_SINCE = re.compile(rf"\bsince\s+{_CLOCK}|(?:自|从)?\s*{_CLOCK}\s*(?:以来|之后|以后|开始)")
_AT = re.compile(rf"(?:\b(yesterday|today)\b|(昨天|今天))?\s*(?:\bat\s+|\baround\s+|在)?{_CLOCK}")


@dataclass(frozen=True)
class TimeSpec:
    """A window as the question names it, before it is anchored to the current time."""

    form: Literal["last", "range", "since", "at", "from"]
    minutes: int = 0
    """``last``: how far back."""
    start: tuple[int, int] | None = None
    """``range``/``since``/``at``: hour and minute."""
    end: tuple[int, int] | None = None
    """``range``: hour and minute."""
    days_back: int = 0
    """``yesterday``: 1."""
    absolute: datetime | None = None
    """``from``: an absolute start ("from 2026-05-12T09:25:00Z until now")."""

    def resolve(self, now: datetime) -> tuple[datetime, datetime]:
        """The absolute window (UTC), anchored to ``now``."""
        now = now.astimezone(UTC)
        if self.form == "from" and self.absolute is not None:
            return self.absolute, max(now, self.absolute)
        if self.form == "last":
            return now - timedelta(minutes=self.minutes), now
        day = (now - timedelta(days=self.days_back)).replace(second=0, microsecond=0)
        hour, minute = self.start or (0, 0)
        first = day.replace(hour=hour, minute=minute)
        if self.form == "since":
            return first, now
        if self.form == "at":
            return first - AROUND, first + AROUND
        end_hour, end_minute = self.end or (23, 59)
        last = day.replace(hour=end_hour, minute=end_minute)
        return first, last if last > first else last + timedelta(days=1)


def iso(moment: datetime) -> str:
    """An absolute UTC time as the tools take it: ``2026-04-07T09:40:00Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fold(question: str) -> str:
    return unicodedata.normalize("NFKC", question).casefold()


def time_spec(question: str) -> TimeSpec | None:
    """The time window a question names, or None (see the module docstring)."""
    text = _fold(question)
    stamp = _ISO_FROM.search(text)
    if stamp:
        written = (stamp.group(1) or stamp.group(2)).upper().replace(" UTC", "+00:00")
        try:
            moment = datetime.fromisoformat(written.replace("UTC", "+00:00").replace("Z", "+00:00"))
        except ValueError:
            moment = None
        if moment is not None:
            when = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
            return TimeSpec("from", absolute=when.astimezone(UTC))
    last = _LAST.search(text)
    if last:
        amount = int(last.group(1) or last.group(3))
        unit = last.group(2) or last.group(4) or ""
        hours = unit.startswith("h") or "小时" in unit
        return TimeSpec("last", minutes=amount * (60 if hours else 1))
    ranged = _RANGE.search(text)
    if ranged:
        back = 1 if ranged.group(1) == "yesterday" or ranged.group(2) == "昨天" else 0
        return TimeSpec(
            "range",
            start=(int(ranged.group(3)), int(ranged.group(4))),
            end=(int(ranged.group(5)), int(ranged.group(6))),
            days_back=back,
        )
    since = _SINCE.search(text)
    if since:
        hour = since.group(1) or since.group(3)
        minute = since.group(2) or since.group(4)
        return TimeSpec("since", start=(int(hour), int(minute)))
    at = _AT.search(text)
    if at:
        back = 1 if at.group(1) == "yesterday" or at.group(2) == "昨天" else 0
        return TimeSpec("at", start=(int(at.group(3)), int(at.group(4))), days_back=back)
    return None


_LOG_WORDS = re.compile(r"\blogs?\b|\blogged\b|日志")
_LOGGED_SYMPTOMS: Final = frozenset({"error", "5xx", "timeout", "crash"})


def _about_logs(found: QuestionFacets, text: str) -> bool:
    """Whether a yes/no question asks about logged errors ("pool errors in the logs")."""
    return (
        bool(found["status_codes"])
        or bool(_LOGGED_SYMPTOMS & set(found["symptoms"]))
        or bool(_LOG_WORDS.search(text))
    )


@dataclass(frozen=True)
class Intent:
    """What answer a question wants (see the module docstring)."""

    kind: IntentKind
    facets: QuestionFacets
    polarity: Polarity | None = None
    time: TimeSpec | None = None
    question: str = ""

    @property
    def concluded(self) -> bool:
        """Whether the answer is a conclusion code checks (yes/no or a comparison)."""
        return self.kind in CONCLUDED_KINDS


def read_intent(
    question: str, known_services: Sequence[str] = (), *, stems: bool = False
) -> Intent:
    """Read what answer a question wants (see the module docstring)."""
    found = analyze_question(question, known_services, stems=stems)
    text = _fold(question)
    time = time_spec(question)
    text = question_words(text)
    for name in [*found["services"], *found["unknown_services"], *found["alerts"]]:
        text = text.replace(name.casefold(), " ")
    kind: IntentKind
    polarity: Polarity | None = None
    if _ACTION.search(text):
        kind = "action"
    elif _CHANGES.search(text):
        kind = "changes"
    elif (
        _LISTING.search(text)
        and not asks_why(text)
        and not _CAUSED.search(text)
        and not (found["kind"] == "confirm" and not found["alerts"])
    ):
        kind = "listing"
    elif found["kind"] == "why" or (found["kind"] == "overview" and time is None):
        kind = found["kind"]
    elif found["alerts"]:
        kind, polarity = "alert_state", "problem"
    elif _COMPARE.search(text) and (len(found["services"]) >= 2 or found["metrics"]):
        kind = "compare"
    elif found["kind"] == "overview":
        kind = "overview"
    elif _HEALTH.search(text) and found["kind"] == "confirm" and not found["about_errors"]:
        kind, polarity = "health", "ok"
    elif (
        found["metrics"]
        and not _about_logs(found, text)
        and (found["kind"] == "confirm" or _CHECK.search(text))
    ):
        kind, polarity = "metric_check", "problem"
    elif found["kind"] == "confirm" and found["about_alerts"] and not found["about_errors"]:
        kind, polarity = "alert_state", "problem"
    elif found["kind"] == "confirm":
        kind, polarity = "errors", "problem"
    else:
        kind = found["kind"]
    return Intent(kind=kind, facets=found, polarity=polarity, time=time, question=question)


WINDOW_ARGUMENTS = ("start", "end", "baseline_start", "baseline_end")
"""The tools' arguments that bound a time window (``tools.backend.window_bounds``)."""


def unasked_window(question: str, arguments: Mapping[str, object]) -> list[str]:
    """The window arguments of a tool call that a question naming no time did not ask for.

    A question that names no time (``time_spec`` finds none) asks about the latest data, which
    is the tools' default window. A small model tends to write a window of its own invention
    (a date it has seen in training, years from the data), so under the local model profile
    these arguments are dropped before the call runs (``nodes.tool_calls``); the model's reply,
    with the arguments it wrote, stays on record.
    """
    if time_spec(question) is not None:
        return []
    return [name for name in WINDOW_ARGUMENTS if arguments.get(name) not in (None, "")]
