"""One writer per thread: a run holds its thread's lock while it diagnoses, or is refused.

PostgreSQL: a session advisory lock on a pooled connection, held for the run (a killed process's
connection closes, which releases it). SQLite: a ``thread_lock`` row naming the holder's process
and host; a row left by a process of this host that is no longer alive is stale and taken over.
"""

from __future__ import annotations

import os
import socket
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from persistence import dialects
from persistence.audit import utcnow
from persistence.database import Database, DatabaseError
from persistence.tables import thread_lock as _LOCK

THREAD_LOCK_KEY = 0x5B13
"""First key of the PostgreSQL advisory lock of a thread (the second is the thread's hash)."""


class ThreadBusy(DatabaseError):
    """Another run is diagnosing on the same thread right now."""


@contextmanager
def thread_lock(db: Database, thread_id: str) -> Iterator[None]:
    """Hold the thread's writer lock for the block; refuse when another run holds it.

    Raises:
        ThreadBusy: when another live run holds the thread.
    """
    lock = _postgres_lock if db.dialect == "postgres" else _sqlite_lock
    with lock(db, thread_id):
        yield


def _busy(thread_id: str, holder: str = "") -> ThreadBusy:
    who = f" ({holder})" if holder else ""
    return ThreadBusy(
        f"thread {thread_id!r} is already being diagnosed by another run{who}; wait for it to "
        "finish, or use another --thread"
    )


@contextmanager
def _postgres_lock(db: Database, thread_id: str) -> Iterator[None]:
    key = zlib.crc32(thread_id.encode("utf-8")) - 2**31
    with db.session() as conn:
        if not dialects.try_advisory_lock(conn, THREAD_LOCK_KEY, key):
            raise _busy(thread_id)
        try:
            yield
        finally:
            dialects.advisory_unlock(conn, THREAD_LOCK_KEY, key)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def _sqlite_lock(db: Database, thread_id: str) -> Iterator[None]:
    owner, host, pid = uuid.uuid4().hex, socket.gethostname(), os.getpid()
    with db.transaction() as conn:
        held = (
            conn.execute(
                sa.select(_LOCK.c.owner, _LOCK.c.pid, _LOCK.c.host, _LOCK.c.acquired_at).where(
                    _LOCK.c.thread_id == thread_id
                )
            )
            .mappings()
            .first()
        )
        if held is not None:
            stale = held["host"] == host and not _pid_alive(int(held["pid"]))
            if not stale:
                raise _busy(
                    thread_id, f"pid {held['pid']} on {held['host']} since {held['acquired_at']}"
                )
            conn.execute(sa.delete(_LOCK).where(_LOCK.c.thread_id == thread_id))
        conn.execute(
            sa.insert(_LOCK).values(
                thread_id=thread_id, owner=owner, pid=pid, host=host, acquired_at=utcnow()
            )
        )
    try:
        yield
    finally:
        with db.transaction(single=True) as conn:
            conn.execute(
                sa.delete(_LOCK).where(_LOCK.c.thread_id == thread_id, _LOCK.c.owner == owner)
            )
