"""Alerts from Alertmanager's v2 API, silenced and inhibited ones marked as such.

``GET /api/v2/alerts`` (active, silenced, inhibited and unprocessed alike) answers a bare array;
each alert becomes an ``AlertEntry`` whose ``state`` is ``firing``, ``silenced`` (a silence
mutes it), ``inhibited`` (another alert inhibits it) or ``resolved`` (its ``endsAt`` has passed).
``active_at`` is ``startsAt``. Alertmanager has no value and no rule expression: the metrics
backend adds them from Prometheus when it is configured, else they are absent. Errors are a JSON
string, quoted as the server's message.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

from evidence.config import BackendSettings
from evidence.http import SERVER_TEXT_CHARS, BackendClient, BackendRequestError, failed_report
from state.display import one_line
from state.json_shape import at, obj, objects, text
from state.records import AlertEntry
from tools.backend import BackendError, BackendReport, api_time


def alertmanager_error(status: int, body: bytes) -> str | None:
    """The server's message from an Alertmanager error body (a JSON string, or text)."""
    try:
        data = json.loads(body)
    except ValueError:
        return one_line(body.decode("utf-8", errors="replace"), SERVER_TEXT_CHARS) or None
    if isinstance(data, str):
        return one_line(data, SERVER_TEXT_CHARS) or None
    if at(data, "message"):
        return one_line(str(at(data, "message")), SERVER_TEXT_CHARS)
    return one_line(json.dumps(data), SERVER_TEXT_CHARS) or None


class AlertmanagerAlerts:
    """Reads alerts from one Alertmanager.

    Args:
        settings: Its URL, auth and TLS settings.
        timeout_s: Seconds one request may take.
        now: The clock (for tests).
    """

    def __init__(
        self,
        settings: BackendSettings,
        *,
        timeout_s: float,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.http = BackendClient(
            settings, timeout_s=timeout_s, title="Alertmanager", error_reader=alertmanager_error
        )
        self._now = now or (lambda: datetime.now(UTC))

    def alerts(self, service_labels: tuple[str, ...]) -> list[tuple[AlertEntry, dict[str, str]]]:
        """Every alert Alertmanager holds, with its labels.

        Raises:
            BackendError: When Alertmanager fails or answers something else than an array.
        """
        answer = self.http.get_json(
            "api/v2/alerts",
            {"active": "true", "silenced": "true", "inhibited": "true", "unprocessed": "true"},
        )
        if not isinstance(answer, list):
            raise BackendRequestError(
                f"Alertmanager at {self.http.url}: /api/v2/alerts did not answer an array "
                "(is this Alertmanager's base URL?)",
                kind="invalid",
                setting=self.http.settings.variable("url"),
            )
        now = self._now()
        found: list[tuple[AlertEntry, dict[str, str]]] = []
        for raw in objects(answer):
            labels = {str(k): str(v) for k, v in obj(raw.get("labels")).items()}
            found.append((self._entry(raw, labels, service_labels, now), labels))
        return found

    @staticmethod
    def _entry(
        raw: dict[str, object],
        labels: dict[str, str],
        service_labels: tuple[str, ...],
        now: datetime,
    ) -> AlertEntry:
        entry = AlertEntry(alert_name=labels.get("alertname", ""))
        service = next((labels[n] for n in service_labels if labels.get(n)), None)
        if service is not None:
            entry["service"] = service
        if labels.get("severity"):
            entry["severity"] = labels["severity"]
        status = obj(raw.get("status"))
        ends_at = api_time(raw.get("endsAt"))
        if ends_at is not None and ends_at < now:
            state = "resolved"
        elif status.get("silencedBy"):
            state = "silenced"
        elif status.get("inhibitedBy"):
            state = "inhibited"
        else:
            state = "firing"
        entry["state"] = state
        annotations = obj(raw.get("annotations"))
        said = text(annotations.get("summary")) or text(annotations.get("description"))
        if said is not None:
            entry["summary"] = one_line(said, 500)
        url = text(annotations.get("runbook_url"))
        if url is not None:
            entry["runbook_url"] = one_line(url, 500)
        starts_at = api_time(raw.get("startsAt"))
        if starts_at is not None:
            entry["active_at"] = starts_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return entry

    def check(self) -> BackendReport:
        """Whether Alertmanager answers: its version, cluster status and alert count."""
        url = self.http.url
        try:
            status = self.http.get_json("api/v2/status")
            if not isinstance(status, dict):
                raise BackendError(f"Alertmanager at {url}: /api/v2/status is not an object")
            version = at(status, "versionInfo", "version") or "unknown"
            cluster = at(status, "cluster", "status") or "unknown"
            count = len(self.alerts(()))
        except BackendError as exc:
            return failed_report("alertmanager", url, exc)
        return BackendReport(
            backend="alertmanager",
            url=url,
            status="ok",
            detail=f"version {version}; cluster {cluster}; {count} alerts",
        )
