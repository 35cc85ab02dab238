"""Leases on running diagnoses: who runs each one, renewed by a heartbeat, so orphans are found.

A run takes the lease of its diagnosis when the diagnosis starts (or resumes) and gives it back
when the run ends, whatever way it ends. While it holds leases, a process renews them every third
of their time to live (``SUPERBIZ_LEASE_TTL_S``, default 60 s) from a background thread. A process
that is killed stops renewing: once the expiry has passed, the diagnosis is an orphan, and the
sweeper (``apps/sweeper.py``) resumes it or marks it ``failed`` with the reason. A run the user
interrupted (Ctrl-C) gives its lease back, so it stays resumable and is no orphan.

Expiry times are seconds since the epoch on the holder's clock (hosts sharing a database are
assumed to keep their clocks in step, within a fraction of the time to live).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import TypeAdapter

from persistence.audit import utcnow
from persistence.database import Database, setting_value
from state import catalog

logger = logging.getLogger("superbiz.leases")


Origin = Literal["cli", "api", "langgraph", "sweeper", "test"]

_holder: tuple[int, str] | None = None
_holder_lock = threading.Lock()


def process_holder() -> str:
    """This process's holder name: host, pid and a random part (new after a fork)."""
    global _holder
    pid = os.getpid()
    with _holder_lock:
        if _holder is None or _holder[0] != pid:
            _holder = (pid, f"{socket.gethostname()}:{pid}:{uuid.uuid4().hex[:8]}")
        return _holder[1]


def lease_ttl() -> float:
    """The configured time to live of a lease, in seconds (at least 0.5).

    Raises:
        DatabaseError: when ``SUPERBIZ_LEASE_TTL_S`` is not a number.
    """
    seconds: float = setting_value(catalog.LEASE_TTL_S)
    return seconds


@dataclass(frozen=True)
class Lease:
    """One lease row."""

    diagnosis_id: str
    thread_id: str
    holder: str
    origin: str
    expires_at: float
    attempts: int

    @property
    def holder_pid(self) -> str:
        """The pid part of the holder name (for messages)."""
        parts = self.holder.split(":")
        return parts[1] if len(parts) > 2 else "?"


_COLUMNS = "diagnosis_id, thread_id, holder, origin, expires_at, attempts"


_LEASE: TypeAdapter[Lease] = TypeAdapter(Lease)


def _lease(row: dict[str, object]) -> Lease:
    """A ``diagnosis_lease`` row (validated: the database is outside the code)."""
    return _LEASE.validate_python(row)


class Leases:
    """The ``diagnosis_lease`` table, as seen by one process.

    Args:
        db: The database.
        origin: Which entry point runs the diagnoses this object leases (recorded on the row).
        ttl: Time to live of a lease; None reads ``SUPERBIZ_LEASE_TTL_S`` when first needed.
    """

    def __init__(self, db: Database, *, origin: Origin, ttl: float | None = None) -> None:
        self._db = db
        self.origin = origin
        self._ttl = ttl
        self._held: set[str] = set()
        self._lock = threading.Lock()
        self._heartbeat: threading.Thread | None = None
        self._wake = threading.Event()

    @property
    def ttl(self) -> float:
        """The time to live of this object's leases."""
        if self._ttl is None:
            self._ttl = lease_ttl()
        return self._ttl

    def take(self, diagnosis_id: str, thread_id: str) -> None:
        """Hold the lease of a diagnosis (new, or taken over from its previous holder)."""
        expires = time.time() + self.ttl
        with self._db.transaction() as tx:
            tx.execute(
                f"INSERT INTO diagnosis_lease ({_COLUMNS}, acquired_at) "
                "VALUES (%s, %s, %s, %s, %s, 0, %s) "
                "ON CONFLICT (diagnosis_id) DO UPDATE SET thread_id = excluded.thread_id, "
                "holder = excluded.holder, origin = excluded.origin, "
                "expires_at = excluded.expires_at, acquired_at = excluded.acquired_at",
                (diagnosis_id, thread_id, process_holder(), self.origin, expires, utcnow()),
            )
        with self._lock:
            self._held.add(diagnosis_id)
        self._start_heartbeat()

    def release_thread(self, thread_id: str) -> list[str]:
        """Give back every lease this process holds on a thread's diagnoses; their ids."""
        with self._db.transaction() as tx:
            rows = tx.execute(
                "SELECT diagnosis_id FROM diagnosis_lease WHERE holder = %s AND thread_id = %s",
                (process_holder(), thread_id),
            )
            tx.execute(
                "DELETE FROM diagnosis_lease WHERE holder = %s AND thread_id = %s",
                (process_holder(), thread_id),
            )
        ids = [str(r["diagnosis_id"]) for r in rows]
        with self._lock:
            self._held.difference_update(ids)
        return ids

    def give_back(self, diagnosis_id: str) -> None:
        """Undo a ``take_over``: expired again, the attempt not counted (the next sweep retries)."""
        self._let_go(
            diagnosis_id,
            "UPDATE diagnosis_lease SET expires_at = 0, attempts = CASE WHEN attempts > 0 "
            "THEN attempts - 1 ELSE 0 END WHERE diagnosis_id = %s AND holder = %s",
            (diagnosis_id, process_holder()),
        )

    def release(self, diagnosis_id: str) -> None:
        """Give back one lease if this process holds it."""
        self._let_go(
            diagnosis_id,
            "DELETE FROM diagnosis_lease WHERE diagnosis_id = %s AND holder = %s",
            (diagnosis_id, process_holder()),
        )

    def forget(self, diagnosis_id: str) -> None:
        """Drop a diagnosis's lease, whoever holds it (the sweeper, once it has dealt with it)."""
        self._let_go(
            diagnosis_id, "DELETE FROM diagnosis_lease WHERE diagnosis_id = %s", (diagnosis_id,)
        )

    def _let_go(self, diagnosis_id: str, sql: str, params: Sequence[object]) -> None:
        """Run one statement that gives up a diagnosis's lease, then stop renewing it."""
        with self._db.transaction() as tx:
            tx.execute(sql, params)
        with self._lock:
            self._held.discard(diagnosis_id)

    def get(self, diagnosis_id: str) -> Lease | None:
        """A diagnosis's lease row, if any."""
        with self._db.transaction() as tx:
            rows = tx.execute(
                f"SELECT {_COLUMNS} FROM diagnosis_lease WHERE diagnosis_id = %s", (diagnosis_id,)
            )
        return _lease(rows[0]) if rows else None

    def expired(self, now: float | None = None) -> list[Lease]:
        """Leases whose holder stopped renewing them, oldest expiry first."""
        moment = time.time() if now is None else now
        with self._db.transaction() as tx:
            rows = tx.execute(
                f"SELECT {_COLUMNS} FROM diagnosis_lease WHERE expires_at < %s "
                "ORDER BY expires_at, diagnosis_id",
                (moment,),
            )
        return [_lease(r) for r in rows]

    def take_over(self, lease: Lease) -> bool:
        """Take an expired lease for this process (one more attempt); False if another did."""
        now = time.time()
        with self._db.transaction() as tx:
            rows = tx.execute(
                "UPDATE diagnosis_lease SET holder = %s, origin = %s, expires_at = %s, "
                "attempts = attempts + 1, acquired_at = %s "
                "WHERE diagnosis_id = %s AND holder = %s AND expires_at < %s "
                "RETURNING diagnosis_id",
                (
                    process_holder(),
                    self.origin,
                    now + self.ttl,
                    utcnow(),
                    lease.diagnosis_id,
                    lease.holder,
                    now,
                ),
            )
        if not rows:
            return False
        with self._lock:
            self._held.add(lease.diagnosis_id)
        self._start_heartbeat()
        return True

    def renew(self) -> None:
        """Push back the expiry of every lease this process holds."""
        with self._lock:
            if not self._held:
                return
        with self._db.transaction() as tx:
            tx.execute(
                "UPDATE diagnosis_lease SET expires_at = %s WHERE holder = %s",
                (time.time() + self.ttl, process_holder()),
            )

    def _start_heartbeat(self) -> None:
        with self._lock:
            if self._heartbeat is not None and self._heartbeat.is_alive():
                return
            self._heartbeat = threading.Thread(
                target=self._beat, name="superbiz-lease-heartbeat", daemon=True
            )
            self._heartbeat.start()

    def _beat(self) -> None:
        while not self._wake.wait(self.ttl / 3):
            try:
                self.renew()
            except Exception as exc:  # the next beat tries again; expiry is the safety net
                logger.warning("lease heartbeat failed: %s", exc)

    def stop(self) -> None:
        """Stop the heartbeat (leases still held then expire)."""
        self._wake.set()
