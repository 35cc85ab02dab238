"""Retention: old checkpoints of finished diagnoses are pruned; the audit rows are kept.

Every step of a run leaves a checkpoint (about 100 kB per diagnosis); only a thread's newest one
is needed to continue its conversation or resume it. ``prune_finished`` keeps that newest
checkpoint of every thread whose diagnoses are all finished (``done``, ``failed``, ``abandoned``;
none ``running``, none leased) and whose last diagnosis changed more than ``keep_days`` ago, and
deletes the others with their writes and unreferenced blobs, through the checkpointer's
``prune(..., strategy="keep_latest")`` (LangGraph's own in PostgreSQL; SQLite's saver has none,
``persistence/checkpoint_tables.py`` fills it in). Audit rows (``diagnosis_session``,
``tool_invocation``) are never touched, so ``sessions show`` and ``reverify`` work on a pruned
diagnosis as before. Each thread is pruned
while holding its writer lock; a thread busy with a run is skipped.

``superbiz db prune --keep-days N`` runs it once; servers run it hourly when
``SUPERBIZ_RETENTION_DAYS`` is set. Deleted rows leave free pages in an SQLite file;
``reclaim_space`` (run by ``db prune`` after pruning) gives them back to the file system with
``VACUUM`` and truncates the write-ahead log. PostgreSQL's autovacuum reuses the space itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import sqlalchemy as sa

from persistence import tables
from persistence.database import Database, setting_value
from persistence.locks import ThreadBusy, thread_lock
from state import catalog

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver


def retention_days() -> float | None:
    """The configured retention in days, or None when it is not set.

    Raises:
        DatabaseError: when ``SUPERBIZ_RETENTION_DAYS`` is not a number of at least 0.
    """
    days: float | None = setting_value(catalog.RETENTION_DAYS)
    return days


def _sqlite_bytes(db: Database) -> int:
    path = db.target.path
    assert path is not None
    return sum(
        file.stat().st_size for file in (path, path.with_name(path.name + "-wal")) if file.exists()
    )


def reclaim_space(db: Database) -> tuple[int, int] | None:
    """Give an SQLite file's free pages back (``VACUUM``); None for PostgreSQL.

    Waits for other writers like any write (the busy timeout). The write-ahead log is
    checkpointed and truncated too, so the sizes count the file and its log.

    Returns:
        The bytes of the file and its log before and after, or None for PostgreSQL.

    Raises:
        DatabaseError: when the database cannot be used.
    """
    if db.dialect != "sqlite":
        return None
    db.open()
    before = _sqlite_bytes(db)
    with db.transaction(single=True) as conn:
        conn.exec_driver_sql("VACUUM")
    with db.transaction(single=True) as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    return before, _sqlite_bytes(db)


@dataclass
class PruneReport:
    """What a prune did."""

    threads: int = 0
    busy: list[str] = field(default_factory=list)


def prunable_threads(db: Database, *, keep_days: float, now: datetime | None = None) -> list[str]:
    """Threads whose diagnoses are all finished and older than ``keep_days``, oldest first."""
    cutoff = (now or datetime.now(UTC)) - timedelta(days=keep_days)
    session, lease = tables.diagnosis_session, tables.diagnosis_lease
    last = sa.func.max(session.c.updated_at)
    running = sa.func.sum(sa.case((session.c.status == "running", 1), else_=0))
    with db.transaction(single=True) as conn:
        rows = conn.execute(
            sa.select(session.c.thread_id, last.label("last"))
            .where(~sa.exists().where(lease.c.thread_id == session.c.thread_id))
            .group_by(session.c.thread_id)
            .having(sa.and_(running == 0, last < cutoff.isoformat(timespec="milliseconds")))
            .order_by(sa.literal_column("last"), session.c.thread_id)
        ).all()
    return [str(r.thread_id) for r in rows]


def prune_finished(
    db: Database,
    checkpointer: BaseCheckpointSaver[str],
    *,
    keep_days: float,
    now: datetime | None = None,
) -> PruneReport:
    """Prune the checkpoints of finished threads older than ``keep_days`` (see the module).

    Args:
        db: The database of the audit tables.
        checkpointer: The checkpointer on the same database (``Persistence.checkpointer``).
        keep_days: How many days a finished thread keeps all its checkpoints.
        now: The present (tests).

    Raises:
        DatabaseError: when the database cannot be used.
    """
    report = PruneReport()
    for thread_id in prunable_threads(db, keep_days=keep_days, now=now):
        try:
            with thread_lock(db, thread_id):
                checkpointer.prune([thread_id], strategy="keep_latest")
        except ThreadBusy:
            report.busy.append(thread_id)
            continue
        report.threads += 1
    return report
