"""The alert investigation queue (``alert_investigation``), for PostgreSQL and SQLite.

One row per Alertmanager alert group and set of alerts (``alert_set``: the group's
(fingerprint, startsAt) pairs, hashed). A row is ``queued`` when the notification is accepted,
``running`` while a worker holds it (its claim renewed by a heartbeat), then ``done`` or
``failed``. The queue is the table: a process that stops loses nothing; rows it left queued are
run by the next worker, rows it left running are queued again once their claim expires (failed
after too many attempts). The finished answer's webhook delivery is tracked on the same row
(``notify_status`` ``pending`` -> ``sent`` | ``failed``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import TypeAdapter
from typing_extensions import TypedDict

from persistence.audit import utcnow
from persistence.database import Database, Transaction, load_json

QueueStatus = Literal["queued", "running", "done", "failed"]
NotifyStatus = Literal["pending", "sent", "failed"]


class QueueFull(RuntimeError):
    """Accepting the notification would make the queue longer than its capacity."""

    def __init__(self, waiting: int, capacity: int) -> None:
        super().__init__(f"{waiting} alert investigations are waiting; the limit is {capacity}")
        self.waiting = waiting
        self.capacity = capacity


@dataclass(frozen=True)
class NewInvestigation:
    """An alert group's investigation to queue."""

    diagnosis_id: str
    thread_id: str
    owner: str
    group_key: str
    alert_set: str
    receiver: str
    message_id: str
    question: str
    alerts: list[dict[str, Any]]
    link_base: str = ""


@dataclass(frozen=True)
class Enqueued:
    """The row a notification's group maps to, and whether this call created it."""

    diagnosis_id: str
    thread_id: str
    group_key: str
    created: bool


class AlertInvestigation(TypedDict):
    """One ``alert_investigation`` row as the API lists it (see docs/contracts.md section 11)."""

    diagnosis_id: str
    thread_id: str
    group_key: str
    receiver: str
    alerts: list[dict[str, Any]]
    status: QueueStatus
    attempts: int
    received_at: str
    started_at: str | None
    finished_at: str | None
    resolved_at: str | None
    verdict: str | None
    score: float | None
    error: str | None
    notify_status: NotifyStatus | None
    notify_attempts: int
    notify_error: str | None


@dataclass(frozen=True)
class Claimed:
    """A row a worker holds: what it needs to run the diagnosis."""

    diagnosis_id: str
    thread_id: str
    owner: str
    message_id: str
    question: str
    attempts: int
    link_base: str
    alerts: list[dict[str, Any]]


_CLAIMED: TypeAdapter[Claimed] = TypeAdapter(Claimed)
"""A claimed row as read (validated: the database is outside the code)."""

_LISTED = (
    "diagnosis_id, thread_id, group_key, receiver, alerts, status, attempts, received_at, "
    "started_at, finished_at, resolved_at, verdict, score, error, notify_status, "
    "notify_attempts, notify_error"
)


def _pairs(alerts: object) -> set[tuple[str, str]]:
    """The (fingerprint, starts_at) pairs of an investigation's alerts."""
    if not isinstance(alerts, list):
        return set()
    return {
        (str(a.get("fingerprint")), str(a.get("starts_at"))) for a in alerts if isinstance(a, dict)
    }


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _listed(row: dict[str, Any]) -> AlertInvestigation:
    return AlertInvestigation(
        diagnosis_id=str(row["diagnosis_id"]),
        thread_id=str(row["thread_id"]),
        group_key=str(row["group_key"]),
        receiver=str(row["receiver"]),
        alerts=list(load_json(row["alerts"]) or []),
        status=row["status"],
        attempts=int(row["attempts"]),
        received_at=str(row["received_at"]),
        started_at=_text(row["started_at"]),
        finished_at=_text(row["finished_at"]),
        resolved_at=_text(row["resolved_at"]),
        verdict=_text(row["verdict"]),
        score=None if row["score"] is None else float(row["score"]),
        error=_text(row["error"]),
        notify_status=row["notify_status"],
        notify_attempts=int(row["notify_attempts"]),
        notify_error=_text(row["notify_error"]),
    )


class AlertQueue:
    """The queue rows; ``holder`` names this process in the claims it takes."""

    def __init__(self, db: Database, holder: str) -> None:
        self._db = db
        self.holder = holder

    # --- accepting ---------------------------------------------------------------------------

    def enqueue(self, items: Sequence[NewInvestigation], capacity: int) -> list[Enqueued]:
        """Queue the investigations that are new; return every item's row (in order).

        An item whose (owner, group key, alert set) already has a row is not queued again: its
        row is returned with ``created`` False; nor is one whose alerts were all part of the
        group's earlier investigations (an alert of the group resolved, none new): the group's
        latest row is returned. All or nothing: nothing is queued when the new
        ones would make more than ``capacity`` rows wait.

        Raises:
            QueueFull: when the new rows do not fit.
        """
        with self._db.transaction() as tx:
            found: dict[int, dict[str, Any]] = {}
            for index, item in enumerate(items):
                rows = tx.execute(
                    "SELECT diagnosis_id, thread_id, alert_set, alerts FROM alert_investigation "
                    "WHERE owner = %s AND group_key = %s ORDER BY received_at DESC",
                    (item.owner, item.group_key),
                )
                same = [r for r in rows if r["alert_set"] == item.alert_set]
                covered = {pair for r in rows for pair in _pairs(load_json(r["alerts"]))}
                if same:
                    found[index] = same[0]
                elif rows and _pairs(item.alerts) <= covered:
                    found[index] = rows[0]  # every alert firing now was investigated already
            new = [item for index, item in enumerate(items) if index not in found]
            if new:
                waiting = self._waiting(tx)
                if waiting + len(new) > capacity:
                    raise QueueFull(waiting, capacity)
            now = utcnow()
            created: set[str] = set()
            for item in new:
                inserted = tx.execute(
                    "INSERT INTO alert_investigation (diagnosis_id, thread_id, owner, group_key, "
                    "alert_set, receiver, message_id, question, alerts, status, received_at, "
                    "link_base) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 'queued', %s, %s) "
                    "ON CONFLICT DO NOTHING RETURNING diagnosis_id",
                    (
                        item.diagnosis_id,
                        item.thread_id,
                        item.owner,
                        item.group_key,
                        item.alert_set,
                        item.receiver,
                        item.message_id,
                        item.question,
                        tx.json(item.alerts),
                        now,
                        item.link_base,
                    ),
                )
                if inserted:
                    created.add(item.diagnosis_id)
        result: list[Enqueued] = []
        for i, item in enumerate(items):
            first = i not in found and item.diagnosis_id in created
            created.discard(item.diagnosis_id)  # a repeat within the call is not new
            result.append(
                Enqueued(
                    diagnosis_id=str(found[i]["diagnosis_id"]) if i in found else item.diagnosis_id,
                    thread_id=str(found[i]["thread_id"]) if i in found else item.thread_id,
                    group_key=item.group_key,
                    created=first,
                )
            )
        return result

    def record_resolved(self, owner: str, group_key: str) -> list[str]:
        """Mark the group's investigations resolved (once); return their diagnosis ids."""
        with self._db.transaction() as tx:
            rows = tx.execute(
                "UPDATE alert_investigation SET resolved_at = %s "
                "WHERE owner = %s AND group_key = %s AND resolved_at IS NULL "
                "RETURNING diagnosis_id",
                (utcnow(), owner, group_key),
            )
        return sorted(str(r["diagnosis_id"]) for r in rows)

    def waiting(self) -> int:
        """How many rows are queued (not yet taken by a worker)."""
        with self._db.transaction() as tx:
            return self._waiting(tx)

    @staticmethod
    def _waiting(tx: Transaction) -> int:
        rows = tx.execute("SELECT count(*) AS n FROM alert_investigation WHERE status = 'queued'")
        return int(rows[0]["n"])

    # --- working -----------------------------------------------------------------------------

    def claim(self, lease_s: float) -> Claimed | None:
        """Take the oldest queued row that is due; None when there is none.

        Two processes never take the same row: the update only succeeds while it is queued.
        """
        now = time.time()
        row = self._take_first(
            "SELECT diagnosis_id FROM alert_investigation "
            "WHERE status = 'queued' AND not_before <= %s "
            "ORDER BY received_at, diagnosis_id LIMIT 1",
            (now,),
            lambda tx, candidate: tx.execute(
                "UPDATE alert_investigation SET status = 'running', holder = %s, "
                "claim_expires = %s, attempts = attempts + 1, "
                "started_at = COALESCE(started_at, %s) "
                "WHERE diagnosis_id = %s AND status = 'queued' "
                "RETURNING diagnosis_id, thread_id, owner, message_id, question, attempts, "
                "link_base, alerts",
                (self.holder, now + lease_s, utcnow(), candidate["diagnosis_id"]),
            ),
        )
        if row is None:
            return None
        return _CLAIMED.validate_python({**row, "alerts": list(load_json(row["alerts"]) or [])})

    def _take_first(
        self,
        pick: str,
        params: Sequence[Any],
        take: Callable[[Transaction, dict[str, Any]], list[dict[str, Any]]],
    ) -> dict[str, Any] | None:
        """The row ``take`` updates (and returns) from the first row ``pick`` selects.

        Both run in one transaction; when ``take`` updates nothing (another process took the row
        first), the next row is picked. None when ``pick`` finds none.
        """
        while True:
            with self._db.transaction() as tx:
                candidates = tx.execute(pick, params)
                if not candidates:
                    return None
                rows = take(tx, candidates[0])
            if rows:
                return rows[0]

    def renew(self, diagnosis_ids: Sequence[str], lease_s: float) -> None:
        """Extend this process's claims on the rows its workers are running (its heartbeat).

        A row this process took but no worker runs any more (its worker failed to record the
        end) is not renewed: it expires and is taken again.
        """
        with self._db.transaction() as tx:
            for diagnosis_id in diagnosis_ids:
                tx.execute(
                    "UPDATE alert_investigation SET claim_expires = %s "
                    "WHERE diagnosis_id = %s AND holder = %s AND status = 'running'",
                    (time.time() + lease_s, diagnosis_id, self.holder),
                )

    def finish(
        self,
        diagnosis_id: str,
        *,
        status: Literal["done", "failed"],
        verdict: str | None,
        score: float | None,
        error: str | None,
        notify: bool,
    ) -> None:
        """Record how the row's diagnosis ended; with ``notify`` its delivery becomes due."""
        with self._db.transaction() as tx:
            tx.execute(
                "UPDATE alert_investigation SET status = %s, verdict = %s, score = %s, "
                "error = %s, finished_at = %s, holder = NULL, claim_expires = NULL, "
                "notify_status = %s, notify_next_at = %s WHERE diagnosis_id = %s",
                (
                    status,
                    verdict,
                    score,
                    error,
                    utcnow(),
                    "pending" if notify else None,
                    time.time() if notify else None,
                    diagnosis_id,
                ),
            )

    def requeue(self, diagnosis_id: str, *, delay_s: float, error: str | None) -> None:
        """Give a held row back to the queue, due in ``delay_s`` seconds."""
        with self._db.transaction() as tx:
            tx.execute(
                "UPDATE alert_investigation SET status = 'queued', holder = NULL, "
                "claim_expires = NULL, not_before = %s, error = %s "
                "WHERE diagnosis_id = %s AND status = 'running'",
                (time.time() + delay_s, error, diagnosis_id),
            )

    def recover(self, max_attempts: int) -> tuple[list[str], list[str]]:
        """Queue again (or fail) the rows whose claim expired; return (queued, failed) ids.

        A row is failed once it has been taken ``max_attempts`` times: a diagnosis that keeps
        stopping its process is not retried for ever.
        """
        now = time.time()
        with self._db.transaction() as tx:
            failed = tx.execute(
                "UPDATE alert_investigation SET status = 'failed', holder = NULL, "
                "claim_expires = NULL, finished_at = %s, error = %s "
                "WHERE status = 'running' AND claim_expires < %s AND attempts >= %s "
                "RETURNING diagnosis_id",
                (
                    utcnow(),
                    f"the process running it stopped {max_attempts} times without finishing it",
                    now,
                    max_attempts,
                ),
            )
            queued = tx.execute(
                "UPDATE alert_investigation SET status = 'queued', holder = NULL, "
                "claim_expires = NULL WHERE status = 'running' AND claim_expires < %s "
                "RETURNING diagnosis_id",
                (now,),
            )
        return sorted(str(r["diagnosis_id"]) for r in queued), sorted(
            str(r["diagnosis_id"]) for r in failed
        )

    def release(self, diagnosis_ids: Sequence[str]) -> None:
        """Give rows this process still holds back to the queue at once (it is stopping)."""
        if not diagnosis_ids:
            return
        with self._db.transaction() as tx:
            for diagnosis_id in diagnosis_ids:
                tx.execute(
                    "UPDATE alert_investigation SET status = 'queued', holder = NULL, "
                    "claim_expires = NULL WHERE diagnosis_id = %s AND holder = %s "
                    "AND status = 'running'",
                    (diagnosis_id, self.holder),
                )

    # --- notifying ---------------------------------------------------------------------------

    def claim_notification(self, hold_s: float) -> dict[str, Any] | None:
        """Take one due delivery (it is not due again for ``hold_s`` seconds); None if none."""
        now = time.time()
        return self._take_first(
            "SELECT diagnosis_id, notify_next_at FROM alert_investigation "
            "WHERE notify_status = 'pending' AND notify_next_at <= %s "
            "ORDER BY notify_next_at LIMIT 1",
            (now,),
            lambda tx, candidate: tx.execute(
                "UPDATE alert_investigation SET notify_next_at = %s, "
                "notify_attempts = notify_attempts + 1 "
                "WHERE diagnosis_id = %s AND notify_status = 'pending' "
                "AND notify_next_at = %s RETURNING " + _LISTED + ", link_base",
                (now + hold_s, candidate["diagnosis_id"], candidate["notify_next_at"]),
            ),
        )

    def notified(
        self, diagnosis_id: str, *, status: NotifyStatus, error: str | None, next_at: float | None
    ) -> None:
        """Record a delivery attempt: sent, failed for good, or due again at ``next_at``."""
        with self._db.transaction() as tx:
            tx.execute(
                "UPDATE alert_investigation SET notify_status = %s, notify_error = %s, "
                "notify_next_at = %s WHERE diagnosis_id = %s",
                (status, error, next_at, diagnosis_id),
            )

    # --- reading -----------------------------------------------------------------------------

    def get(self, diagnosis_id: str) -> AlertInvestigation | None:
        """One row, or None."""
        with self._db.transaction() as tx:
            rows = tx.execute(
                f"SELECT {_LISTED} FROM alert_investigation WHERE diagnosis_id = %s",
                (diagnosis_id,),
            )
        return _listed(rows[0]) if rows else None

    def list(self, owner: str, limit: int) -> list[AlertInvestigation]:
        """An identity's investigations, newest first."""
        with self._db.transaction() as tx:
            rows = tx.execute(
                f"SELECT {_LISTED} FROM alert_investigation WHERE owner = %s "
                "ORDER BY received_at DESC, diagnosis_id LIMIT %s",
                (owner, limit),
            )
        return [_listed(r) for r in rows]
