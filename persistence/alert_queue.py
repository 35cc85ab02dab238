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

import sqlalchemy as sa
from pydantic import TypeAdapter
from sqlalchemy.engine import Connection
from typing_extensions import TypedDict

from persistence import dialects, tables
from persistence.audit import utcnow
from persistence.database import Database
from persistence.sqltypes import Timestamp

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

_A = tables.alert_investigation
_LISTED = [
    _A.c[name]
    for name in (
        "diagnosis_id",
        "thread_id",
        "group_key",
        "receiver",
        "alerts",
        "status",
        "attempts",
        "received_at",
        "started_at",
        "finished_at",
        "resolved_at",
        "verdict",
        "score",
        "error",
        "notify_status",
        "notify_attempts",
        "notify_error",
    )
]


def _pairs(alerts: object) -> set[tuple[str, str]]:
    """The (fingerprint, starts_at) pairs of an investigation's alerts."""
    if not isinstance(alerts, list):
        return set()
    return {
        (str(a.get("fingerprint")), str(a.get("starts_at"))) for a in alerts if isinstance(a, dict)
    }


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _listed(row: sa.RowMapping) -> AlertInvestigation:
    return AlertInvestigation(
        diagnosis_id=str(row["diagnosis_id"]),
        thread_id=str(row["thread_id"]),
        group_key=str(row["group_key"]),
        receiver=str(row["receiver"]),
        alerts=list(row["alerts"] or []),
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
        with self._db.transaction() as conn:
            found: dict[int, sa.RowMapping] = {}
            for index, item in enumerate(items):
                rows = (
                    conn.execute(
                        sa.select(_A.c.diagnosis_id, _A.c.thread_id, _A.c.alert_set, _A.c.alerts)
                        .where(_A.c.owner == item.owner, _A.c.group_key == item.group_key)
                        .order_by(_A.c.received_at.desc())
                    )
                    .mappings()
                    .all()
                )
                same = [r for r in rows if r["alert_set"] == item.alert_set]
                covered = {pair for r in rows for pair in _pairs(r["alerts"])}
                if same:
                    found[index] = same[0]
                elif rows and _pairs(item.alerts) <= covered:
                    found[index] = rows[0]  # every alert firing now was investigated already
            new = [item for index, item in enumerate(items) if index not in found]
            if new:
                waiting = self._waiting(conn)
                if waiting + len(new) > capacity:
                    raise QueueFull(waiting, capacity)
            now = utcnow()
            created: set[str] = set()
            for item in new:
                inserted = conn.execute(
                    dialects.insert(conn, _A)
                    .values(
                        diagnosis_id=item.diagnosis_id,
                        thread_id=item.thread_id,
                        owner=item.owner,
                        group_key=item.group_key,
                        alert_set=item.alert_set,
                        receiver=item.receiver,
                        message_id=item.message_id,
                        question=item.question,
                        alerts=item.alerts,
                        status="queued",
                        received_at=now,
                        link_base=item.link_base,
                    )
                    .on_conflict_do_nothing()
                    .returning(_A.c.diagnosis_id)
                ).first()
                if inserted is not None:
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
        with self._db.transaction(single=True) as conn:
            rows = conn.execute(
                sa.update(_A)
                .where(_A.c.owner == owner, _A.c.group_key == group_key, _A.c.resolved_at.is_(None))
                .values(resolved_at=utcnow())
                .returning(_A.c.diagnosis_id)
            ).all()
        return sorted(str(r.diagnosis_id) for r in rows)

    def waiting(self) -> int:
        """How many rows are queued (not yet taken by a worker)."""
        with self._db.transaction(single=True) as conn:
            return self._waiting(conn)

    @staticmethod
    def _waiting(conn: Connection) -> int:
        return int(
            conn.execute(
                sa.select(sa.func.count()).select_from(_A).where(_A.c.status == "queued")
            ).scalar_one()
        )

    # --- working -----------------------------------------------------------------------------

    def claim(self, lease_s: float) -> Claimed | None:
        """Take the oldest queued row that is due; None when there is none.

        Two processes never take the same row: the update only succeeds while it is queued. A
        row whose thread has another row running waits for it (a group's investigations run in
        the order they came; one left running by a stopped process is queued again first).
        """
        now = time.time()
        other = _A.alias("other")
        thread_running = (
            sa.select(other.c.diagnosis_id)
            .where(other.c.thread_id == _A.c.thread_id, other.c.status == "running")
            .exists()
        )
        row = self._take_first(
            sa.select(_A.c.diagnosis_id)
            .where(_A.c.status == "queued", _A.c.not_before <= now, ~thread_running)
            .order_by(_A.c.received_at, _A.c.diagnosis_id)
            .limit(1),
            lambda conn, candidate: (
                conn.execute(
                    sa.update(_A)
                    .where(_A.c.diagnosis_id == candidate["diagnosis_id"], _A.c.status == "queued")
                    .values(
                        status="running",
                        holder=self.holder,
                        claim_expires=now + lease_s,
                        attempts=_A.c.attempts + 1,
                        started_at=sa.func.coalesce(
                            _A.c.started_at, sa.literal(utcnow(), Timestamp())
                        ),
                    )
                    .returning(
                        _A.c.diagnosis_id,
                        _A.c.thread_id,
                        _A.c.owner,
                        _A.c.message_id,
                        _A.c.question,
                        _A.c.attempts,
                        _A.c.link_base,
                        _A.c.alerts,
                    )
                )
                .mappings()
                .all()
            ),
        )
        if row is None:
            return None
        return _CLAIMED.validate_python({**row, "alerts": list(row["alerts"] or [])})

    def _take_first(
        self,
        pick: sa.Select[Any],
        take: Callable[[Connection, sa.RowMapping], Sequence[sa.RowMapping]],
    ) -> dict[str, Any] | None:
        """The row ``take`` updates (and returns) from the first row ``pick`` selects.

        Both run in one transaction; when ``take`` updates nothing (another process took the row
        first), the next row is picked. None when ``pick`` finds none.
        """
        while True:
            with self._db.transaction() as conn:
                candidate = conn.execute(pick).mappings().first()
                if candidate is None:
                    return None
                rows = take(conn, candidate)
            if rows:
                return dict(rows[0])

    def renew(self, diagnosis_ids: Sequence[str], lease_s: float) -> None:
        """Extend this process's claims on the rows its workers are running (its heartbeat).

        A row this process took but no worker runs any more (its worker failed to record the
        end) is not renewed: it expires and is taken again.
        """
        if not diagnosis_ids:
            return
        with self._db.transaction(single=True) as conn:
            conn.execute(
                sa.update(_A)
                .where(
                    _A.c.diagnosis_id.in_(list(diagnosis_ids)),
                    _A.c.holder == self.holder,
                    _A.c.status == "running",
                )
                .values(claim_expires=time.time() + lease_s)
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
        with self._db.transaction(single=True) as conn:
            conn.execute(
                sa.update(_A)
                .where(_A.c.diagnosis_id == diagnosis_id)
                .values(
                    status=status,
                    verdict=verdict,
                    score=score,
                    error=error,
                    finished_at=utcnow(),
                    holder=None,
                    claim_expires=None,
                    notify_status="pending" if notify else None,
                    notify_next_at=time.time() if notify else None,
                )
            )

    def requeue(
        self, diagnosis_id: str, *, delay_s: float, error: str | None, counted: bool = True
    ) -> None:
        """Give a held row back to the queue, due in ``delay_s`` seconds.

        ``counted`` False takes the claim back from the row's attempts: the row was not tried
        (its thread was busy with another run), so it does not count towards failing it.
        """
        attempts = (
            _A.c.attempts if counted else sa.case((_A.c.attempts > 0, _A.c.attempts - 1), else_=0)
        )
        with self._db.transaction(single=True) as conn:
            conn.execute(
                sa.update(_A)
                .where(_A.c.diagnosis_id == diagnosis_id, _A.c.status == "running")
                .values(
                    status="queued",
                    holder=None,
                    claim_expires=None,
                    not_before=time.time() + delay_s,
                    error=error,
                    attempts=attempts,
                )
            )

    def unfinished(self, diagnosis_id: str) -> bool:
        """Whether a row of this diagnosis is still queued or running (the queue will run it)."""
        with self._db.transaction(single=True) as conn:
            found = conn.execute(
                sa.select(_A.c.diagnosis_id).where(
                    _A.c.diagnosis_id == diagnosis_id, _A.c.status.in_(("queued", "running"))
                )
            ).first()
        return found is not None

    def recover(self, max_attempts: int) -> tuple[list[str], list[str]]:
        """Queue again (or fail) the rows whose claim expired; return (queued, failed) ids.

        A row is failed once it has been taken ``max_attempts`` times: a diagnosis that keeps
        stopping its process is not retried for ever.
        """
        now = time.time()
        expired = (_A.c.status == "running", _A.c.claim_expires < now)
        with self._db.transaction() as conn:
            failed = conn.execute(
                sa.update(_A)
                .where(*expired, _A.c.attempts >= max_attempts)
                .values(
                    status="failed",
                    holder=None,
                    claim_expires=None,
                    finished_at=utcnow(),
                    error=f"the process running it stopped {max_attempts} times without "
                    "finishing it",
                )
                .returning(_A.c.diagnosis_id)
            ).all()
            queued = conn.execute(
                sa.update(_A)
                .where(*expired)
                .values(status="queued", holder=None, claim_expires=None)
                .returning(_A.c.diagnosis_id)
            ).all()
        return sorted(str(r.diagnosis_id) for r in queued), sorted(
            str(r.diagnosis_id) for r in failed
        )

    def release(self, diagnosis_ids: Sequence[str]) -> None:
        """Give rows this process still holds back to the queue at once (it is stopping)."""
        if not diagnosis_ids:
            return
        with self._db.transaction(single=True) as conn:
            conn.execute(
                sa.update(_A)
                .where(
                    _A.c.diagnosis_id.in_(list(diagnosis_ids)),
                    _A.c.holder == self.holder,
                    _A.c.status == "running",
                )
                .values(status="queued", holder=None, claim_expires=None)
            )

    # --- notifying ---------------------------------------------------------------------------

    def claim_notification(self, hold_s: float) -> dict[str, Any] | None:
        """Take one due delivery (it is not due again for ``hold_s`` seconds); None if none."""
        now = time.time()
        return self._take_first(
            sa.select(_A.c.diagnosis_id, _A.c.notify_next_at)
            .where(_A.c.notify_status == "pending", _A.c.notify_next_at <= now)
            .order_by(_A.c.notify_next_at)
            .limit(1),
            lambda conn, candidate: (
                conn.execute(
                    sa.update(_A)
                    .where(
                        _A.c.diagnosis_id == candidate["diagnosis_id"],
                        _A.c.notify_status == "pending",
                        _A.c.notify_next_at == candidate["notify_next_at"],
                    )
                    .values(notify_next_at=now + hold_s, notify_attempts=_A.c.notify_attempts + 1)
                    .returning(*_LISTED, _A.c.link_base)
                )
                .mappings()
                .all()
            ),
        )

    def notified(
        self, diagnosis_id: str, *, status: NotifyStatus, error: str | None, next_at: float | None
    ) -> None:
        """Record a delivery attempt: sent, failed for good, or due again at ``next_at``."""
        with self._db.transaction(single=True) as conn:
            conn.execute(
                sa.update(_A)
                .where(_A.c.diagnosis_id == diagnosis_id)
                .values(notify_status=status, notify_error=error, notify_next_at=next_at)
            )

    # --- reading -----------------------------------------------------------------------------

    def get(self, diagnosis_id: str) -> AlertInvestigation | None:
        """One row, or None."""
        with self._db.transaction(single=True) as conn:
            row = (
                conn.execute(sa.select(*_LISTED).where(_A.c.diagnosis_id == diagnosis_id))
                .mappings()
                .first()
            )
        return _listed(row) if row is not None else None

    def list(self, owner: str, limit: int) -> list[AlertInvestigation]:
        """An identity's investigations, newest first."""
        with self._db.transaction(single=True) as conn:
            rows = (
                conn.execute(
                    sa.select(*_LISTED)
                    .where(_A.c.owner == owner)
                    .order_by(_A.c.received_at.desc(), _A.c.diagnosis_id)
                    .limit(limit)
                )
                .mappings()
                .all()
            )
        return [_listed(r) for r in rows]
