"""Checkpointer, audit store and ledger on one configured database, plus one-writer-per-thread.

``open_persistence(url)`` gives LangGraph's PostgreSQL checkpointer (sharing the database's
psycopg pool, with ``autocommit``, ``prepare_threshold=None`` and pooled-connection health checks)
or its SQLite checkpointer, and the audit tables in the same database. ``thread_lock`` is the
writer lock of ``persistence/locks.py`` on that database.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from persistence.audit import SqlAuditStore
from persistence.database import Database, DatabaseError, open_database
from persistence.leases import Origin
from persistence.ledger import SqlLedger
from persistence.locks import thread_lock
from persistence.runs import SqlRunLocks

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver


@dataclass
class Persistence:
    """Everything a run stores, on one database."""

    db: Database
    checkpointer: BaseCheckpointSaver[str]
    audit: SqlAuditStore
    ledger: SqlLedger
    locks: SqlRunLocks
    """The thread locks and diagnosis leases the graph takes for each run."""
    _resources: ExitStack = field(default_factory=ExitStack)

    def thread_lock(self, thread_id: str) -> AbstractContextManager[None]:
        """Hold the thread's writer lock for the block; refuse when another run holds it.

        Raises:
            ThreadBusy: when another live run holds the thread.
        """
        return thread_lock(self.db, thread_id)

    def close(self) -> None:
        """Release the database connections."""
        self._resources.close()


def open_persistence(value: str | None = None, *, origin: Origin = "cli") -> Persistence:
    """Open the configured database (``--db`` / ``SUPERBIZ_DATABASE_URL`` / embedded default).

    ``origin`` names the entry point whose runs lease their diagnoses through it.

    Raises:
        DatabaseError: when the database is unreachable, misconfigured or too new.
    """
    # LangGraph's checkpointers load here, not with the module: reading records needs none.
    from persistence.checkpoints import checkpoint_saver, setup_checkpoints

    db = open_database(value)
    db.add_setup(setup_checkpoints)
    resources = ExitStack()
    resources.callback(db.close)
    try:
        checkpointer = resources.enter_context(checkpoint_saver(db))
    except DatabaseError:
        resources.close()
        raise
    except Exception as exc:
        resources.close()
        raise DatabaseError(
            f"cannot set up checkpoints in {db.target.display}: {type(exc).__name__}: {exc}"
        ) from exc
    locks = SqlRunLocks(db, origin=origin)
    resources.callback(locks.leases.stop)
    return Persistence(db, checkpointer, SqlAuditStore(db), SqlLedger(db), locks, resources)


@dataclass
class Records:
    """The audit records of a database, opened for reading only (``sessions``, ``reverify``)."""

    db: Database
    audit: SqlAuditStore
    ledger: SqlLedger

    def close(self) -> None:
        """Release the database connection."""
        self.db.close()


def open_records(value: str | None = None) -> Records:
    """Open an existing database for reading: nothing is created, migrated or written.

    Raises:
        NoDatabase: when there is no database (or no superbiz table) there yet.
        DatabaseError: when the database is unreachable, misconfigured or of another version.
    """
    db = open_database(value, read_only=True)
    return Records(db, SqlAuditStore(db), SqlLedger(db))
