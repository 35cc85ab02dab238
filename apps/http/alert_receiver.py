"""The Alertmanager webhook receiver: ``POST /api/alertmanager`` and ``GET /api/alerts``.

A firing notification is answered at once (202 with the ids of the diagnosis it queued, 200
with the existing ids when its group's alerts were investigated already) and diagnosed in the
background by this process's alert workers; a resolved one starts nothing and is recorded on the
group's investigations. The queue is a table (``persistence/alert_queue.py``): a full queue is
429 with ``Retry-After`` (Alertmanager retries), and a restart loses nothing. When
``SUPERBIZ_NOTIFY_WEBHOOK_URL`` is set, each finished answer is POSTed there as ``{"text": ...}``
(Slack / Mattermost / Teams incoming webhooks), retried with backoff, never holding up a
diagnosis. Settings (read on first use): see ``AlertSettings.from_env``.

This module is wired into the API by ``apps/http/api.py`` and never imports it (the LangGraph server
loads that file by path): it is given the API's ``admit`` and the service's diagnose and resume.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

import anyio.to_thread
import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from apps.auth import Caller, ConfigError, read
from apps.http.alert_payload import PayloadError, investigation_of, parse_notification
from apps.http.guard import ApiError, read_limited
from evidence.config import DEFAULT_SERVICE_LABELS, load_settings
from graph.failures import DiagnosisFailed
from graph.saved_run import read_saved_run
from persistence.alert_queue import AlertQueue, Claimed, NewInvestigation, QueueFull
from persistence.locks import ThreadBusy
from persistence.ownership import ThreadOwners
from persistence.store import Persistence
from state import catalog
from state.configuration import Sources
from state.display import clip, one_line
from state.settings import typed_default

logger = logging.getLogger("superbiz.alerts")

Admit = Callable[[Request], Awaitable[tuple[Caller, Any]]]
Diagnose = Callable[[str, str, str, str], object]
"""``diagnose(owner, thread_id, message_id, question)``: run one diagnosis to its end."""
Resume = Callable[[str], object]
"""``resume(diagnosis_id)``: resume an interrupted diagnosis to its end (as the server)."""

RETRY_AFTER_S = 30
"""What a full queue tells Alertmanager to wait (it retries with its own backoff anyway)."""
BUSY_RETRY_S = 5.0
"""When a row whose thread is busy (another run holds it) is tried again."""
ERROR_RETRY_S = 10.0
POLL_S = 2.0
NOTIFY_TIMEOUT_S = 10.0
MAX_LIST = 500
LISTED_ALERTS = 10
"""Alerts shown per investigation by ``GET /api/alerts`` (``alerts_total`` counts them all)."""
LISTED_TEXT_CHARS = 2048
"""Longest text of a listed alert or error (rows stored before the field limits existed)."""
LIST_BUDGET_CHARS = 512 * 1024
"""About the largest ``GET /api/alerts`` answer: later rows are left out (``truncated``)."""


@dataclass(frozen=True)
class AlertSettings:
    """How alert notifications are taken and their answers delivered.

    Attributes:
        concurrency: Alert diagnoses run at once by one server process.
        queue_max: Investigations that may wait; more is 429.
        margin_s: How long before the earliest ``startsAt`` the diagnosis window starts.
        max_body_bytes: Largest notification accepted (larger: 413).
        claim_s: How long a worker's claim on a row lasts without its heartbeat.
        max_attempts: Times a row is taken before it is failed (its process kept stopping).
        notify_url: Where finished answers are POSTed, or None.
        notify_attempts: Delivery attempts before a notification is given up.
        notify_retry_s: The first retry's delay (doubling after each failure).
        public_url: The API's address in links (default: the address the notification used).
        service_labels: Labels naming an alert's service, tried in order.
        max_question_chars: The longest question (``SUPERBIZ_API_MAX_QUESTION_CHARS``, as chat).
    """

    concurrency: int = typed_default(catalog.ALERT_CONCURRENCY, int)
    queue_max: int = typed_default(catalog.ALERT_QUEUE_MAX, int)
    margin_s: float = typed_default(catalog.ALERT_WINDOW_MARGIN_S, float)
    max_body_bytes: int = typed_default(catalog.ALERT_MAX_BODY_BYTES, int)
    claim_s: float = typed_default(catalog.ALERT_CLAIM_S, float)
    max_attempts: int = typed_default(catalog.ALERT_MAX_ATTEMPTS, int)
    notify_url: str | None = None
    notify_attempts: int = typed_default(catalog.NOTIFY_ATTEMPTS, int)
    notify_retry_s: float = typed_default(catalog.NOTIFY_RETRY_S, float)
    public_url: str | None = None
    service_labels: tuple[str, ...] = DEFAULT_SERVICE_LABELS
    max_question_chars: int = typed_default(catalog.API_MAX_QUESTION_CHARS, int)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AlertSettings:
        """Read ``SUPERBIZ_ALERT_*``, ``SUPERBIZ_NOTIFY_*`` and ``SUPERBIZ_PUBLIC_URL``.

        The service labels are the backends' (``SUPERBIZ_SERVICE_LABEL``).

        Raises:
            ConfigError: naming the variable that is wrong.
        """
        try:
            labels = load_settings(environ).service_labels
        except Exception:  # a broken backend configuration is reported by the diagnosis
            labels = DEFAULT_SERVICE_LABELS
        sources = Sources(environ)
        return cls(
            concurrency=read(catalog.ALERT_CONCURRENCY, sources),
            queue_max=read(catalog.ALERT_QUEUE_MAX, sources),
            margin_s=read(catalog.ALERT_WINDOW_MARGIN_S, sources),
            max_body_bytes=read(catalog.ALERT_MAX_BODY_BYTES, sources),
            claim_s=read(catalog.ALERT_CLAIM_S, sources),
            max_attempts=read(catalog.ALERT_MAX_ATTEMPTS, sources),
            notify_url=read(catalog.NOTIFY_WEBHOOK_URL, sources),
            notify_attempts=read(catalog.NOTIFY_ATTEMPTS, sources),
            notify_retry_s=read(catalog.NOTIFY_RETRY_S, sources),
            public_url=read(catalog.PUBLIC_URL, sources),
            service_labels=labels,
            max_question_chars=read(catalog.API_MAX_QUESTION_CHARS, sources),
        )


async def _read_body(request: Request, limit: int) -> bytes:
    too_large = (
        f"the notification is larger than the limit of {limit} bytes; lower max_alerts in "
        "the receiver's webhook_configs or raise SUPERBIZ_ALERT_MAX_BODY_BYTES"
    )
    return await read_limited(request, limit, too_large)


def notification_text(
    row: Mapping[str, Any], answer: str, link: str, root_cause: Mapping[str, Any] | None = None
) -> str:
    """The ``text`` of the notify webhook: a header, the root cause, the composed answer, the link.

    Only the diagnosis states anything about the incident; the header names the alerts (as
    Alertmanager sent them), the verdict and the score; the root cause is the diagnosis's
    confirmed one (an inference, said so), when it names one.
    """
    names = ", ".join(dict.fromkeys(str(a.get("alert_name")) for a in row["alerts"])) or "alerts"
    services = ", ".join(
        dict.fromkeys(str(a["service"]) for a in row["alerts"] if a.get("service"))
    )
    score = row["score"]
    if row["status"] == "done":
        outcome = f"verdict {row['verdict'] or 'none'}, score " + (
            f"{float(score):.2f}" if score is not None else "none"
        )
    else:
        outcome = "the diagnosis failed"
    subject = f"{names} ({services})" if services else names
    cause = ""
    if root_cause and root_cause.get("service"):
        mechanism = one_line(str(root_cause.get("mechanism") or ""))
        cause = f"\nMost likely root cause (inferred): {root_cause['service']}"
        cause += f": {mechanism}" if mechanism else ""
    return f"superbiz: {subject}: {outcome}{cause}\n\n{answer.strip()}\n\nDetails: {link}"


RERUN_NOTE = "started again: the process running it stopped before it could be resumed"


def _resumable(persistence: Persistence, claimed: Claimed) -> bool:
    """Whether the thread's last checkpoint holds this diagnosis with work left to resume."""
    saved = read_saved_run(persistence.checkpointer, claimed.thread_id)
    return bool(saved.next) and saved.resumed_diagnosis_id() == claimed.diagnosis_id


def _bounded(value: object) -> object:
    return clip(value, LISTED_TEXT_CHARS) if isinstance(value, str) else value


def listed_page(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``GET /api/alerts``'s answer: bounded whatever the rows hold.

    Each row shows its first ``LISTED_ALERTS`` alerts (``alerts_total`` counts them), texts
    clipped to ``LISTED_TEXT_CHARS``; rows stop once the answer would pass
    ``LIST_BUDGET_CHARS`` (``truncated`` true: ask for fewer with ``limit``).
    """
    page: list[dict[str, Any]] = []
    size = 0
    for row in rows:
        alerts = list(row["alerts"])
        entry = {key: _bounded(value) for key, value in row.items() if key != "alerts"}
        entry["alerts"] = [
            {key: _bounded(value) for key, value in alert.items()}
            for alert in alerts[:LISTED_ALERTS]
        ]
        entry["alerts_total"] = len(alerts)
        cost = len(json.dumps(entry, ensure_ascii=False))
        if page and size + cost > LIST_BUDGET_CHARS:
            return {"alerts": page, "truncated": True}
        page.append(entry)
        size += cost
    return {"alerts": page}


class AlertReceiver:
    """The receiver's handlers and its background workers (one set per server process)."""

    def __init__(
        self,
        *,
        open_persistence: Callable[[], Persistence],
        admit: Admit,
        diagnose: Diagnose,
        resume: Resume,
        settings: AlertSettings | None = None,
    ) -> None:
        self._open = open_persistence
        self._admit = admit
        self._diagnose = diagnose
        self._resume = resume
        self._settings = settings
        self._settings_lock = threading.Lock()
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._held: set[str] = set()
        self._held_lock = threading.Lock()

    def settings(self) -> AlertSettings:
        """The settings (from the environment on first use unless given).

        Raises:
            ConfigError: when a variable is wrong.
        """
        with self._settings_lock:
            if self._settings is None:
                self._settings = AlertSettings.from_env()
            return self._settings

    def _queue(self) -> AlertQueue:
        return AlertQueue(self._open().db, self.holder)

    # --- HTTP --------------------------------------------------------------------------------

    async def receive(self, request: Request) -> Response:
        """``POST /api/alertmanager``: queue a diagnosis per firing group (see the module)."""
        caller, _ = await self._admit(request)
        try:
            settings = await anyio.to_thread.run_sync(self.settings)
            body = await _read_body(request, settings.max_body_bytes)
            try:
                notification = parse_notification(body)
            except PayloadError as exc:
                raise ApiError(
                    422, "not an Alertmanager webhook notification: " + "; ".join(exc.problems)
                ) from exc
            if notification.version != "4":
                logger.warning(
                    "accepted an Alertmanager notification of version %r (fields parse)",
                    notification.version,
                )
            base = settings.public_url or str(request.base_url).rstrip("/")
            status, payload = await anyio.to_thread.run_sync(
                partial(self._accept, caller.identity, notification, base, settings)
            )
        except ApiError as exc:
            return exc.response()
        if status == 202:
            self._wake.set()
        return JSONResponse(payload, status)

    def _accept(
        self, owner: str, notification: Any, base: str, settings: AlertSettings
    ) -> tuple[int, dict[str, Any]]:
        queue = self._queue()
        investigation = investigation_of(
            notification,
            owner,
            settings.service_labels,
            timedelta(seconds=settings.margin_s),
            settings.max_question_chars,
        )
        if investigation is None:
            resolved = queue.record_resolved(owner, notification.groupKey)
            return 200, {"accepted": [], "resolved": resolved}
        if not ThreadOwners(self._open().db).claim(investigation.thread_id, owner):
            raise ApiError(409, f"thread {investigation.thread_id!r} belongs to someone else")
        item = NewInvestigation(
            diagnosis_id=investigation.diagnosis_id,
            thread_id=investigation.thread_id,
            owner=owner,
            group_key=notification.groupKey,
            alert_set=investigation.alert_set,
            receiver=notification.receiver,
            message_id=investigation.message_id,
            question=investigation.question,
            alerts=investigation.alerts,
            link_base=base,
        )
        try:
            (entry,) = queue.enqueue([item], settings.queue_max)
        except QueueFull as exc:
            raise ApiError(
                429,
                f"the alert queue is full ({exc}); Alertmanager retries the notification",
                {"Retry-After": str(RETRY_AFTER_S)},
            ) from exc
        row = queue.get(entry.diagnosis_id)
        accepted = {
            "group_key": entry.group_key,
            "thread_id": entry.thread_id,
            "diagnosis_id": entry.diagnosis_id,
            "status": row["status"] if row is not None else "queued",
        }
        return (202 if entry.created else 200), {"accepted": [accepted]}

    async def list(self, request: Request) -> Response:
        """``GET /api/alerts?limit=N``: the caller's alert investigations, newest first."""
        caller, _ = await self._admit(request)
        raw = request.query_params.get("limit", "50")
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIST:
            return JSONResponse(
                {"error": f"limit must be a whole number from 1 to {MAX_LIST}, got {raw!r}"}, 422
            )
        rows = await anyio.to_thread.run_sync(lambda: self._queue().list(caller.identity, int(raw)))
        return JSONResponse(listed_page(rows))

    # --- workers -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the workers, the heartbeat and the notifier (background threads)."""
        try:
            settings = self.settings()
        except ConfigError as exc:  # requests report it; nothing runs until it is fixed
            logger.error("alert receiver misconfigured: %s", exc)
            return
        self._stop.clear()
        targets: list[tuple[str, Callable[[], None]]] = [
            (f"superbiz-alert-worker-{n}", self._work_loop) for n in range(settings.concurrency)
        ]
        targets.append(("superbiz-alert-heartbeat", self._heartbeat_loop))
        targets.append(("superbiz-alert-notifier", self._notify_loop))
        for name, target in targets:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stop taking work; rows still running here go back to the queue for the next start."""
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout=2)
        self._threads.clear()
        with self._held_lock:
            held = sorted(self._held)
        if held:
            try:
                self._queue().release(held)
                logger.info("gave %d unfinished alert investigation(s) back", len(held))
            except Exception as exc:  # their claims expire; the next start takes them
                logger.warning("could not give unfinished alert investigations back: %s", exc)

    def _work_loop(self) -> None:
        settings = self.settings()
        while not self._stop.is_set():
            try:
                claimed = self._queue().claim(settings.claim_s)
            except Exception as exc:  # the database may be down: try again shortly
                logger.warning("alert queue unavailable: %s", exc)
                claimed = None
            if claimed is None:
                self._wake.wait(POLL_S)
                self._wake.clear()
                continue
            with self._held_lock:
                self._held.add(claimed.diagnosis_id)
            try:
                self.run_one(claimed, settings)
            except Exception as exc:
                logger.warning("alert investigation %s: %s", claimed.diagnosis_id, exc)
            finally:
                with self._held_lock:
                    self._held.discard(claimed.diagnosis_id)

    def run_one(self, claimed: Claimed, settings: AlertSettings) -> None:
        """Run (or resume) one claimed row's diagnosis and record how it ended (blocking)."""
        persistence = self._open()
        queue = AlertQueue(persistence.db, self.holder)
        record = persistence.audit.get(claimed.diagnosis_id)
        error: str | None = None
        try:
            if record is not None and record["status"] in ("running", "abandoned"):
                # Left by a process that stopped: resumed from its checkpoint when one holds
                # it, else (killed before its first checkpoint, or set aside as abandoned by a
                # later run of the thread) asked again with the same message, so the same id.
                if _resumable(persistence, claimed):
                    self._resume(claimed.diagnosis_id)
                else:
                    persistence.audit.mark(claimed.diagnosis_id, status="running", note=RERUN_NOTE)
                    record = None
            if record is None:
                self._diagnose(
                    claimed.owner, claimed.thread_id, claimed.message_id, claimed.question
                )
        except DiagnosisFailed as exc:
            error = exc.reason
        except Exception as exc:
            # Another run holds the thread: the lock itself, or the API's 409 made from it. The
            # row was not tried, so the claim does not count towards its attempts.
            if isinstance(exc, ThreadBusy) or isinstance(exc.__cause__, ThreadBusy):
                queue.requeue(claimed.diagnosis_id, delay_s=BUSY_RETRY_S, error=None, counted=False)
                return
            message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            if getattr(exc, "status", None) == 409:
                error = message  # e.g. a resume refused: it will not get better by waiting
            elif claimed.attempts < settings.max_attempts:
                logger.warning("alert investigation %s: %s", claimed.diagnosis_id, message)
                queue.requeue(claimed.diagnosis_id, delay_s=ERROR_RETRY_S, error=message)
                return
            else:
                error = message
        record = persistence.audit.get(claimed.diagnosis_id)
        if record is not None and record["status"] == "done":
            queue.finish(
                claimed.diagnosis_id,
                status="done",
                verdict=record["verdict"],
                score=record["score"],
                error=None,
                notify=settings.notify_url is not None,
            )
        elif record is not None and record["status"] == "running" and error is None:
            queue.requeue(claimed.diagnosis_id, delay_s=ERROR_RETRY_S, error=None)
        else:
            queue.finish(
                claimed.diagnosis_id,
                status="failed",
                verdict=record["verdict"] if record is not None else None,
                score=record["score"] if record is not None else None,
                error=error or (record["note"] if record is not None else "no diagnosis ran"),
                notify=settings.notify_url is not None,
            )

    def _heartbeat_loop(self) -> None:
        settings = self.settings()
        while not self._stop.is_set():
            try:
                queue = self._queue()
                with self._held_lock:
                    held = sorted(self._held)
                queue.renew(held, settings.claim_s)
                queued, failed = queue.recover(settings.max_attempts)
                if queued:
                    logger.info("alert investigations queued again: %s", ", ".join(queued))
                    self._wake.set()
                if failed:
                    logger.warning("alert investigations failed: %s", ", ".join(failed))
            except Exception as exc:
                logger.warning("alert queue heartbeat failed: %s", exc)
            self._stop.wait(max(0.5, settings.claim_s / 3))

    # --- notify webhook ----------------------------------------------------------------------

    def _notify_loop(self) -> None:
        settings = self.settings()
        if settings.notify_url is None:
            return
        with httpx.Client(timeout=NOTIFY_TIMEOUT_S) as client:
            while not self._stop.is_set():
                try:
                    sent = self.deliver_one(client, settings)
                except Exception as exc:
                    logger.warning("alert notification delivery failed: %s", exc)
                    sent = False
                if not sent:
                    self._stop.wait(1.0)

    def deliver_one(self, client: httpx.Client, settings: AlertSettings) -> bool:
        """Attempt one due delivery; False when none was due (blocking)."""
        assert settings.notify_url is not None
        persistence = self._open()
        queue = AlertQueue(persistence.db, self.holder)
        row = queue.claim_notification(hold_s=NOTIFY_TIMEOUT_S * 3)
        if row is None:
            return False
        diagnosis_id = str(row["diagnosis_id"])
        record = persistence.audit.get(diagnosis_id)
        answer = (record["final_answer"] if record is not None else None) or (
            f"No answer was recorded: {row['error']}"
        )
        link = f"{row['link_base']}/api/diagnoses/{diagnosis_id}"
        listed = queue.get(diagnosis_id)
        assert listed is not None
        channels = (record["self_evaluation"] if record is not None else None) or {}
        root = channels.get("root_cause")
        text = notification_text(
            listed, str(answer), link, root if isinstance(root, dict) else None
        )
        problem: str | None = None
        try:
            reply = client.post(settings.notify_url, json={"text": text})
            if not 200 <= reply.status_code < 300:
                problem = f"the webhook answered {reply.status_code}: {reply.text[:200]}"
        except httpx.HTTPError as exc:
            problem = f"{type(exc).__name__}: {exc}"
        attempts = int(row["notify_attempts"])
        if problem is None:
            queue.notified(diagnosis_id, status="sent", error=None, next_at=None)
        elif attempts >= settings.notify_attempts:
            logger.warning("notification of %s given up: %s", diagnosis_id, problem)
            queue.notified(diagnosis_id, status="failed", error=problem, next_at=None)
        else:
            delay = settings.notify_retry_s * 2 ** (attempts - 1)
            queue.notified(
                diagnosis_id, status="pending", error=problem, next_at=time.time() + delay
            )
        return True
