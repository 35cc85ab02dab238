"""Retention: old checkpoints of finished diagnoses are pruned; the audit rows are kept.

Every step of a run leaves a checkpoint (about 100 kB per diagnosis); only a thread's newest one
is needed to continue its conversation or resume it. ``prune_finished`` keeps that newest
checkpoint of every thread whose diagnoses are all finished (``done``, ``failed``, ``abandoned``;
none ``running``, none leased) and whose last diagnosis changed more than ``keep_days`` ago, and
deletes the others with their writes and unreferenced blobs (``checkpoint_ops.prune``,
``keep_latest``). Audit rows (``diagnosis_session``, ``tool_invocation``) are never touched, so
``sessions show`` and ``reverify`` work on a pruned diagnosis as before. Each thread is pruned
while holding its writer lock; a thread busy with a run is skipped.

``superbiz db prune --keep-days N`` runs it once; servers run it hourly when
``SUPERBIZ_RETENTION_DAYS`` is set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from persistence.checkpoint_ops import Removed, prune
from persistence.database import Database, setting_value
from persistence.locks import ThreadBusy, thread_lock
from state import catalog


def retention_days() -> float | None:
    """The configured retention in days, or None when it is not set.

    Raises:
        DatabaseError: when ``SUPERBIZ_RETENTION_DAYS`` is not a number of at least 0.
    """
    days: float | None = setting_value(catalog.RETENTION_DAYS)
    return days


@dataclass
class PruneReport:
    """What a prune did."""

    threads: int = 0
    removed: Removed = field(default_factory=Removed)
    busy: list[str] = field(default_factory=list)


def prunable_threads(db: Database, *, keep_days: float, now: datetime | None = None) -> list[str]:
    """Threads whose diagnoses are all finished and older than ``keep_days``, oldest first."""
    cutoff = (now or datetime.now(UTC)) - timedelta(days=keep_days)
    with db.transaction() as tx:
        rows = tx.execute(
            "SELECT s.thread_id, MAX(s.updated_at) AS last FROM diagnosis_session s "
            "WHERE NOT EXISTS (SELECT 1 FROM diagnosis_lease l WHERE l.thread_id = s.thread_id) "
            "GROUP BY s.thread_id "
            "HAVING SUM(CASE WHEN s.status = 'running' THEN 1 ELSE 0 END) = 0 "
            "AND MAX(s.updated_at) < %s ORDER BY last, s.thread_id",
            (cutoff.isoformat(timespec="milliseconds"),),
        )
    return [str(r["thread_id"]) for r in rows]


def prune_finished(db: Database, *, keep_days: float, now: datetime | None = None) -> PruneReport:
    """Prune the checkpoints of finished threads older than ``keep_days`` (see the module).

    Raises:
        DatabaseError: when the database cannot be used.
    """
    report = PruneReport()
    for thread_id in prunable_threads(db, keep_days=keep_days, now=now):
        try:
            with thread_lock(db, thread_id):
                report.removed.add(prune(db.target, [thread_id], "keep_latest"))
        except ThreadBusy:
            report.busy.append(thread_id)
            continue
        report.threads += 1
    return report
