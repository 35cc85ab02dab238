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
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nodes.intake import diagnosis_id_for
from state.display import one_line
from state.json_shape import json_type

KNOWN_VERSION = "4"
MAX_ALERTS_IN_QUESTION = 20
"""Alerts described one by one in the question; the rest are counted."""
_ANNOTATION_CHARS = 300


class PayloadError(ValueError):
    """The body is not an Alertmanager notification; ``problems`` lists what is wrong."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = list(problems)


class Alert(BaseModel):
    """One alert of a notification."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: datetime  # noqa: N815 - Alertmanager's field name
    endsAt: datetime | None = None  # noqa: N815
    generatorURL: str = ""  # noqa: N815
    fingerprint: str = ""

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

    version: str = KNOWN_VERSION
    groupKey: str = Field(min_length=1, max_length=4096)  # noqa: N815
    truncatedAlerts: int = Field(default=0, ge=0)  # noqa: N815
    status: Literal["firing", "resolved"]
    receiver: str
    groupLabels: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    commonLabels: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    commonAnnotations: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    externalURL: str = ""  # noqa: N815
    alerts: list[Alert] = Field(min_length=1)

    @property
    def firing(self) -> list[Alert]:
        """The alerts still firing, earliest first."""
        return sorted(
            (a for a in self.alerts if a.status == "firing"), key=lambda a: (a.startsAt, a.name)
        )


def _where(loc: Sequence[int | str]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "body"


def parse_notification(body: bytes) -> Notification:
    """Validate a webhook body.

    Raises:
        PayloadError: listing every problem (field path and what is wrong); for an unknown
            ``version`` it says which version was sent.
    """
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise PayloadError([f"the body is not valid JSON: {exc}"]) from exc
    if not isinstance(data, dict):
        raise PayloadError([f"the body must be a JSON object, got {json_type(data)}"])
    version = data.get("version", KNOWN_VERSION)
    try:
        return Notification.model_validate(data)
    except ValidationError as exc:
        problems = [f"{_where(e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)]
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


def _clip(text: str) -> str:
    return one_line(text, _ANNOTATION_CHARS)


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
        entry["runbook_url"] = alert.annotations["runbook_url"].strip()
    if alert.generatorURL:
        entry["generator_url"] = alert.generatorURL
    return entry


def build_question(
    notification: Notification, service_labels: Sequence[str], margin: timedelta
) -> str:
    """The question a diagnosis of the group's firing alerts asks.

    Alert names, services (the first configured service label an alert has), severity, the
    summary and description annotations and ``startsAt``; the window starts ``margin`` before
    the earliest ``startsAt``; each ``runbook_url`` is named so its runbook is read first.
    """
    firing = notification.firing
    shown = firing[:MAX_ALERTS_IN_QUESTION]
    lines = [f"Alertmanager reports {len(firing)} firing alert(s):"]
    for alert in shown:
        service = _service(alert, service_labels)
        severity = alert.labels.get("severity")
        line = f"- {alert.name}"
        if service:
            line += f" for {service}"
        if severity:
            line += f" (severity {severity})"
        line += f", firing since {_stamp(alert.startsAt)}"
        for key in ("summary", "description"):
            text = _clip(alert.annotations.get(key, ""))
            if text:
                line += f"; {key}: {text}"
        if alert.annotations.get("runbook_url"):
            line += f"; runbook: {alert.annotations['runbook_url'].strip()}"
        lines.append(line)
    hidden = len(firing) - len(shown) + notification.truncatedAlerts
    if hidden:
        lines.append(f"- and {hidden} more alert(s) of the same group not listed here")
    names = ", ".join(dict.fromkeys(a.name for a in shown))
    start = min(a.startsAt for a in firing) - margin
    lines.append(
        f"Why is {names} firing and what is the cause? Look at the evidence from "
        f"{_stamp(start)} (before the first alert started) until now; read each alert's "
        "runbook first."
    )
    return "\n".join(lines)


def investigation_of(
    notification: Notification,
    owner: str,
    service_labels: Sequence[str],
    margin: timedelta,
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
        question=build_question(notification, service_labels, margin),
        alerts=[alert_summary(a, service_labels) for a in firing],
    )
