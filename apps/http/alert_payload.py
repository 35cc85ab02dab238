"""Alertmanager's webhook payload: parsing, and the question a diagnosis of an alert group asks.

Alertmanager POSTs one notification per alert group (payload version 4): ``receiver``,
``status``, ``alerts[]`` (``status``, ``labels``, ``annotations``, ``startsAt``, ``endsAt``,
``generatorURL``, ``fingerprint``), ``groupLabels``, ``commonLabels``, ``commonAnnotations``,
``externalURL``, ``groupKey``, ``truncatedAlerts``. ``parse_notification`` validates it (pydantic,
at this untrusted edge) and says everything that is wrong; a payload of another ``version`` is
accepted when its fields parse. ``investigation_of`` turns the firing alerts into the ids and the
question of one investigation: the thread comes from the group key (the next notification of the
group continues the conversation), the diagnosis id from the set of (fingerprint, startsAt).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from nodes.intake import diagnosis_id_for
from state.display import clip, has_unstorable, one_line
from state.json_shape import json_type

KNOWN_VERSION = "4"
MAX_ALERTS_IN_QUESTION = 20
"""Alerts described one by one in the question; the rest are counted."""
MAX_QUESTION_CHARS = 4000
"""The longest question by default (as ``/api/chat``'s ``SUPERBIZ_API_MAX_QUESTION_CHARS``)."""
_ANNOTATION_CHARS = 300
_NAME_CHARS = 120
_URL_IN_LINE = 500
_NAMES_CHARS = 600


MAX_DEPTH = 32
"""Deepest nesting of arrays and objects accepted (a notification nests four levels)."""
LABEL_NAME_CHARS = 256
LABEL_VALUE_CHARS = 1024
ANNOTATION_CHARS = 16_384
URL_CHARS = 4096
NAME_CHARS = 256
"""Longest receiver, fingerprint, version (and label name)."""
MAX_LABELS = 128
"""Most labels (or annotations) one alert or one group may carry."""
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)


def _text(limit: int) -> AfterValidator:
    """A string check: storable (no NUL, no lone surrogate) and at most ``limit`` characters."""

    def check(value: str) -> str:
        if has_unstorable(value):
            raise ValueError("holds a NUL character or a lone UTF-16 surrogate")
        if len(value) > limit:
            raise ValueError(f"is {len(value)} characters long; the limit is {limit}")
        return value

    return AfterValidator(check)


def _moment(value: datetime) -> datetime:
    stamp = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if stamp < EARLIEST:
        raise ValueError(f"{value.isoformat()} is before 1970; send the time the alert started")
    return value


Name = Annotated[str, _text(NAME_CHARS)]
LabelName = Annotated[str, _text(LABEL_NAME_CHARS)]
LabelValue = Annotated[str, _text(LABEL_VALUE_CHARS)]
AnnotationValue = Annotated[str, _text(ANNOTATION_CHARS)]
Url = Annotated[str, _text(URL_CHARS)]
Labels = Annotated[dict[LabelName, LabelValue], Field(max_length=MAX_LABELS)]
Annotations = Annotated[dict[LabelName, AnnotationValue], Field(max_length=MAX_LABELS)]
Start = Annotated[datetime, AfterValidator(_moment)]


class PayloadError(ValueError):
    """The body is not an Alertmanager notification; ``problems`` lists what is wrong."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = list(problems)


class Alert(BaseModel):
    """One alert of a notification."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    status: Literal["firing", "resolved"]
    labels: Labels
    annotations: Annotations = Field(default_factory=dict)
    startsAt: Start  # noqa: N815 - Alertmanager's field name
    endsAt: datetime | None = None  # noqa: N815
    generatorURL: Url = ""  # noqa: N815
    fingerprint: Name = ""

    @property
    def name(self) -> str:
        """The alert name (``alertname`` label), or ``unnamed``."""
        return self.labels.get("alertname") or "unnamed"

    def identity(self) -> str:
        """The fingerprint; from the labels when an old Alertmanager sent none."""
        if self.fingerprint:
            return self.fingerprint
        text = json.dumps(self.labels, sort_keys=True, ensure_ascii=False)
        return "labels-" + hashlib.sha256(text.encode()).hexdigest()[:16]


class Notification(BaseModel):
    """One webhook notification (one alert group)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    version: Name = KNOWN_VERSION
    groupKey: Annotated[str, Field(min_length=1), _text(4096)]  # noqa: N815
    truncatedAlerts: int = Field(default=0, ge=0)  # noqa: N815
    status: Literal["firing", "resolved"]
    receiver: Name
    groupLabels: Labels = Field(default_factory=dict)  # noqa: N815
    commonLabels: Labels = Field(default_factory=dict)  # noqa: N815
    commonAnnotations: Annotations = Field(default_factory=dict)  # noqa: N815
    externalURL: Url = ""  # noqa: N815
    alerts: list[Alert] = Field(min_length=1)

    @property
    def firing(self) -> list[Alert]:
        """The alerts still firing, earliest first."""
        return sorted(
            (a for a in self.alerts if a.status == "firing"), key=lambda a: (a.startsAt, a.name)
        )


def _shown(part: str) -> str:
    """A field name from the body as it can be shown (escaped, clipped)."""
    escaped = part.encode("unicode_escape", "backslashreplace").decode("ascii")
    return clip(escaped, 64)


def _where(loc: Sequence[int | str]) -> str:
    text = ""
    for part in loc:
        if part == "[key]":
            text += " (a name)"
        elif isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{_shown(part)}" if text else _shown(part)
    return text or "body"


_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}:]')


def _too_deep(body: bytes, limit: int) -> str | None:
    """Where ``body`` nests arrays and objects deeper than ``limit`` (a field path), or None."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return None
    path: list[str] = []
    key: str | None = None
    for match in _TOKEN.finditer(body):
        token = match.group()
        if token in (b"[", b"{"):
            path.append(key or "[]")
            key = None
            if len(path) > limit:
                return ".".join(p for p in path[1:] if p != "[]") or "body"
        elif token in (b"]", b"}"):
            if path:
                path.pop()
            key = None
        elif token == b":":
            continue
        else:
            end = match.end()
            rest = body[end : end + 64].lstrip()
            key = _shown(token[1:-1].decode("utf-8", "replace")) if rest[:1] == b":" else None
    return None


def parse_notification(body: bytes) -> Notification:
    """Validate a webhook body.

    Raises:
        PayloadError: listing every problem (field path and what is wrong); for an unknown
            ``version`` it says which version was sent.
    """
    deep = _too_deep(body, MAX_DEPTH)
    if deep is not None:
        raise PayloadError([f"{deep}: nests arrays and objects more than {MAX_DEPTH} levels deep"])
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise PayloadError([f"the body is not valid JSON: {exc}"]) from exc
    if not isinstance(data, dict):
        raise PayloadError([f"the body must be a JSON object, got {json_type(data)}"])
    version = data.get("version", KNOWN_VERSION)
    try:
        return Notification.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"{_where(e['loc'])}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors(include_url=False)
        ]
        if version != KNOWN_VERSION:
            problems.insert(
                0,
                f"payload version {version!r} is not the Alertmanager webhook version "
                f"{KNOWN_VERSION} this receiver knows, and its fields do not parse",
            )
        raise PayloadError(problems) from exc


@dataclass(frozen=True)
class Investigation:
    """What one firing notification asks for."""

    thread_id: str
    message_id: str
    diagnosis_id: str
    alert_set: str
    question: str
    alerts: list[dict[str, Any]]


def thread_id_for(owner: str, group_key: str) -> str:
    """The thread of an identity's alert group (stable across notifications)."""
    digest = hashlib.sha256(f"{owner}\0{group_key}".encode()).hexdigest()[:24]
    return f"alert-{digest}"


def alert_set_of(alerts: Sequence[Alert]) -> str:
    """The hash of a set of (fingerprint, startsAt) pairs (order does not matter)."""
    pairs = sorted(f"{a.identity()}@{_stamp(a.startsAt)}" for a in alerts)
    return hashlib.sha256("\n".join(pairs).encode()).hexdigest()[:32]


def _stamp(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _service(alert: Alert, labels: Sequence[str]) -> str | None:
    for label in labels:
        if alert.labels.get(label):
            return alert.labels[label]
    return None


MASK = "****"
_SECRET_KEY = re.compile(
    r"(?i)\b([\w.-]*?(?:token|secret|passw(?:or)?d|pwd|api[_-]?key|apikey|access[_-]?key|"
    r"private[_-]?key|credentials?|authorization|cookie))(\s*[:=]\s*)([\"']?)(?!(?:bearer|basic)\s)([^\s\"'&,;]+)"
)
_SECRET_SCHEME = re.compile(r"(?i)\b(bearer|basic)(\s+)([A-Za-z0-9._~+/=-]{6,})")
_URL_PASSWORD = re.compile(r"(://[^/\s:@]+:)([^/\s@]+)(@)")
_SECRET_SHAPES = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|glpat-[\w-]{20,}|xox[abprs]-[\w-]{10,}"
    r"|AKIA[0-9A-Z]{16}|sk-[\w-]{20,}|eyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]{8,})"
)


def masked(text: str) -> str:
    """``text`` with what looks like a secret replaced by ``****``.

    Alert annotations are written by whoever writes the alerting rules and sometimes carry a
    token: a ``key=value`` or ``key: value`` whose key names a secret (token, password, API
    key, ...), a ``Bearer``/``Basic`` credential, the password of a URL, and tokens of
    well-known shapes (GitHub, GitLab, Slack, AWS access keys, ``sk-`` keys, JWTs).
    """
    text = _SECRET_SCHEME.sub(lambda m: f"{m[1]}{m[2]}{MASK}", text)
    text = _SECRET_KEY.sub(lambda m: f"{m[1]}{m[2]}{m[3]}{MASK}", text)
    text = _URL_PASSWORD.sub(lambda m: f"{m[1]}{MASK}{m[3]}", text)
    return _SECRET_SHAPES.sub(MASK, text)


def _clip(text: str) -> str:
    return one_line(masked(text), _ANNOTATION_CHARS)


def alert_summary(alert: Alert, service_labels: Sequence[str]) -> dict[str, Any]:
    """The plain record of one alert kept with its investigation (and listed by the API)."""
    entry: dict[str, Any] = {
        "alert_name": alert.name,
        "service": _service(alert, service_labels),
        "severity": alert.labels.get("severity"),
        "fingerprint": alert.identity(),
        "starts_at": _stamp(alert.startsAt),
        "summary": _clip(alert.annotations.get("summary", "")) or None,
    }
    if alert.annotations.get("runbook_url"):
        entry["runbook_url"] = masked(alert.annotations["runbook_url"].strip())
    if alert.generatorURL:
        entry["generator_url"] = masked(alert.generatorURL)
    return entry


def _alert_line(alert: Alert, service_labels: Sequence[str]) -> str:
    service = _service(alert, service_labels)
    severity = alert.labels.get("severity")
    line = f"- {one_line(alert.name, _NAME_CHARS)}"
    if service:
        line += f" for {one_line(service, _NAME_CHARS)}"
    if severity:
        line += f" (severity {one_line(severity, _NAME_CHARS)})"
    line += f", firing since {_stamp(alert.startsAt)}"
    for key in ("summary", "description"):
        text = _clip(alert.annotations.get(key, ""))
        if text:
            line += f"; {key}: {text}"
    if alert.annotations.get("runbook_url"):
        line += f"; runbook: {one_line(masked(alert.annotations['runbook_url']), _URL_IN_LINE)}"
    return line


def build_question(
    notification: Notification,
    service_labels: Sequence[str],
    margin: timedelta,
    limit: int = MAX_QUESTION_CHARS,
) -> str:
    """The question a diagnosis of the group's firing alerts asks, at most ``limit`` characters.

    Alert names, services (the first configured service label an alert has), severity, the
    summary and description annotations and ``startsAt``; the window starts ``margin`` before
    the earliest ``startsAt``; each ``runbook_url`` is named so its runbook is read first.
    Every part is clipped, secrets in annotations are masked (``masked``), and the alerts that
    do not fit in ``limit`` are counted instead of listed.
    """
    firing = notification.firing
    start = min(a.startsAt for a in firing) - margin
    header = f"Alertmanager reports {len(firing)} firing alert(s):"
    lines: list[str] = []
    shown: list[Alert] = []
    names_chars = min(_NAMES_CHARS, limit // 5)
    for alert in firing[:MAX_ALERTS_IN_QUESTION]:
        line = _alert_line(alert, service_labels)
        more_shown = [*shown, alert]
        hidden = len(firing) - len(more_shown) + notification.truncatedAlerts
        rest = _assemble(header, lines, more_shown, hidden, start, names_chars)
        room = limit - len(rest) - 1
        if len(line) > room:
            if shown:
                break
            line = clip(line, max(room, 1))  # the first alert is always described
        shown, lines = more_shown, [*lines, line]
    hidden = len(firing) - len(shown) + notification.truncatedAlerts
    return clip(_assemble(header, lines, shown, hidden, start, names_chars), limit)


def _assemble(
    header: str,
    lines: Sequence[str],
    shown: Sequence[Alert],
    hidden: int,
    start: datetime,
    names_chars: int,
) -> str:
    names = clip(", ".join(dict.fromkeys(one_line(a.name) for a in shown)), names_chars)
    body = [header, *lines]
    if hidden:
        body.append(f"- and {hidden} more alert(s) of the same group not listed here")
    body.append(
        f"Why is {names} firing and what is the cause? Look at the evidence from "
        f"{_stamp(start)} (before the first alert started) until now; read each alert's "
        "runbook first."
    )
    return "\n".join(body)


def investigation_of(
    notification: Notification,
    owner: str,
    service_labels: Sequence[str],
    margin: timedelta,
    max_question_chars: int = MAX_QUESTION_CHARS,
) -> Investigation | None:
    """The investigation a notification asks for; None when no alert in it is firing."""
    firing = notification.firing
    if not firing:
        return None
    thread_id = thread_id_for(owner, notification.groupKey)
    alert_set = alert_set_of(firing)
    message_id = f"alertmanager-{alert_set}"
    return Investigation(
        thread_id=thread_id,
        message_id=message_id,
        diagnosis_id=diagnosis_id_for(thread_id, message_id),
        alert_set=alert_set,
        question=build_question(notification, service_labels, margin, max_question_chars),
        alerts=[alert_summary(a, service_labels) for a in firing],
    )
