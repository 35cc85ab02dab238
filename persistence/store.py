"""Checkpointer, audit store and ledger on one configured database, plus one-writer-per-thread.

``open_persistence(url)`` gives LangGraph's PostgreSQL checkpointer (sharing a psycopg pool with
``autocommit``, ``prepare_threshold=0`` and pooled-connection health checks) or its SQLite
checkpointer, and the audit tables in the same database.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver

from persistence.audit import SqlAuditStore, utcnow
from persistence.database import SETUP_LOCK_KEY, Database, DatabaseError, open_database
from persistence.ledger import SqlLedger


class ThreadBusy(DatabaseError):
    """Another run is diagnosing on the same thread right now."""


@dataclass
class Persistence:
    """Everything a run stores, on one database."""

    db: Database
    checkpointer: BaseCheckpointSaver[str]
    audit: SqlAuditStore
    ledger: SqlLedger
    _extra: list[sqlite3.Connection] = field(default_factory=list)

    @contextmanager
    def thread_lock(self, thread_id: str) -> Iterator[None]:
        """Hold the thread's writer lock for the block; refuse when another run holds it.

        Raises:
            ThreadBusy: when another live run holds the thread.
        """
        if self.db.dialect == "postgres":
            with _postgres_lock(self.db, thread_id):
                yield
        else:
            with _sqlite_lock(self.db, thread_id):
                yield

    def close(self) -> None:
        """Release the database connections."""
        for conn in self._extra:
            conn.close()
        self.db.close()


def _busy(thread_id: str, holder: str = "") -> ThreadBusy:
    who = f" ({holder})" if holder else ""
    return ThreadBusy(
        f"thread {thread_id!r} is already being diagnosed by another run{who}; wait for it to "
        "finish, or use another --thread"
    )


@contextmanager
def _postgres_lock(db: Database, thread_id: str) -> Iterator[None]:
    key = zlib.crc32(thread_id.encode("utf-8")) - 2**31
    assert db.pool is not None
    with db.pool.connection() as conn:
        row = conn.execute(
            "SELECT pg_try_advisory_lock(%s::int4, %s::int4) AS ok", (0x5B13, key)
        ).fetchone()
        if not row or not row["ok"]:
            raise _busy(thread_id)
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s::int4, %s::int4)", (0x5B13, key))


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
    with db.transaction() as tx:
        rows = tx.execute(
            "SELECT owner, pid, host, acquired_at FROM thread_lock WHERE thread_id = %s",
            (thread_id,),
        )
        if rows:
            held = rows[0]
            stale = held["host"] == host and not _pid_alive(int(held["pid"]))
            if not stale:
                raise _busy(
                    thread_id, f"pid {held['pid']} on {held['host']} since {held['acquired_at']}"
                )
            tx.execute("DELETE FROM thread_lock WHERE thread_id = %s", (thread_id,))
        tx.execute(
            "INSERT INTO thread_lock (thread_id, owner, pid, host, acquired_at) "
            "VALUES (%s, %s, %s, %s, %s)",
            (thread_id, owner, pid, host, utcnow()),
        )
    try:
        yield
    finally:
        with db.transaction() as tx:
            tx.execute(
                "DELETE FROM thread_lock WHERE thread_id = %s AND owner = %s", (thread_id, owner)
            )


SETUP_LOCK_TIMEOUT_S = 60.0


def _setup_under_lock(db: Database, saver: PostgresSaver) -> None:
    """Create or migrate the checkpoint tables while holding the shared setup lock.

    Several processes setting up a fresh database at once collide on the tables' unique keys,
    so they take turns on the advisory lock the LangGraph server's checkpointer uses. The lock
    is polled, never waited on: the holder's ``CREATE INDEX CONCURRENTLY`` waits for other
    sessions' open transactions, which a blocking lock request would be.
    """
    assert db.pool is not None
    with db.pool.connection() as conn:
        deadline = time.monotonic() + SETUP_LOCK_TIMEOUT_S
        while True:
            row = conn.execute(
                "SELECT pg_try_advisory_lock(%s) AS ok", (SETUP_LOCK_KEY,)
            ).fetchone()
            if row and row["ok"]:
                break
            if time.monotonic() > deadline:
                raise DatabaseError(
                    f"another process has been setting up {db.target.display} for "
                    f"{SETUP_LOCK_TIMEOUT_S:.0f}s; try again when it has finished"
                )
            time.sleep(0.1)
        try:
            saver.setup()
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (SETUP_LOCK_KEY,))


def open_persistence(value: str | None = None) -> Persistence:
    """Open the configured database (``--db`` / ``SUPERBIZ_DATABASE_URL`` / embedded default).

    Raises:
        DatabaseError: when the database is unreachable, misconfigured or too new.
    """
    db = open_database(value)
    extra: list[sqlite3.Connection] = []
    try:
        checkpointer: BaseCheckpointSaver[str]
        if db.dialect == "postgres":
            assert db.pool is not None
            postgres = PostgresSaver(db.pool)
            _setup_under_lock(db, postgres)
            checkpointer = postgres
        else:
            assert db.target.path is not None
            conn = sqlite3.connect(str(db.target.path), check_same_thread=False, timeout=30)
            extra.append(conn)
            sqlite_saver = SqliteSaver(conn)
            sqlite_saver.setup()
            checkpointer = sqlite_saver
    except DatabaseError:
        db.close()
        raise
    except Exception as exc:
        db.close()
        for conn in extra:
            conn.close()
        raise DatabaseError(
            f"cannot set up checkpoints in {db.target.display}: {type(exc).__name__}: {exc}"
        ) from exc
    return Persistence(db, checkpointer, SqlAuditStore(db), SqlLedger(db), extra)
