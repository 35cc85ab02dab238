"""The compiled, checkpointer-free graph that ``langgraph.json`` serves.

The LangGraph server supplies the checkpointer (``checkpointer`` below, from
``graph/checkpointers.py``); this graph
records its audit rows and tool invocations in the same configured database
(``SUPERBIZ_DATABASE_URL``: PostgreSQL, or an SQLite file; unset, the embedded SQLite file the CLI
uses). The database is opened on first use, not on import, so drawing the graph needs none. A
database that cannot be opened fails the run that needed it with the reason; nothing falls back
to memory. The stores are synchronous: the graph's nodes are sync functions, which the server
runs in worker threads, off its event loop.
"""

from __future__ import annotations

import atexit
import builtins
import threading
from collections.abc import Mapping

from graph.builder import build_graph
from graph.checkpointers import checkpointer
from persistence.audit import SqlAuditStore
from persistence.database import Database, open_database
from persistence.ledger import SqlLedger
from state.records import (
    DiagnosisOutcome,
    DiagnosisRecord,
    DiagnosisStatus,
    Invocation,
    InvocationDraft,
)


class ConfiguredDatabase:
    """The configured database and its stores, opened on first use (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._db: Database | None = None
        self._audit: SqlAuditStore | None = None
        self._ledger: SqlLedger | None = None

    def _open(self) -> tuple[SqlAuditStore, SqlLedger]:
        with self._lock:
            if self._audit is None or self._ledger is None:
                # Raises DatabaseError with the reason; a later run tries again.
                db = open_database()
                self._db, self._audit, self._ledger = db, SqlAuditStore(db), SqlLedger(db)
            return self._audit, self._ledger

    @property
    def audit(self) -> SqlAuditStore:
        """The audit store (opens the database on first use)."""
        return self._open()[0]

    @property
    def ledger(self) -> SqlLedger:
        """The invocation ledger (opens the database on first use)."""
        return self._open()[1]

    def close(self) -> None:
        """Close the database if it was opened."""
        with self._lock:
            if self._db is not None:
                self._db.close()
            self._db = self._audit = self._ledger = None


class LazyAuditStore:
    """``AuditStore`` on the configured database, opened when first written or read."""

    def __init__(self, database: ConfiguredDatabase) -> None:
        self._database = database

    def start_diagnosis(self, diagnosis_id: str, *, thread_id: str, question: str) -> None:
        """Create the diagnosis row (status ``running``); a second call changes nothing."""
        self._database.audit.start_diagnosis(diagnosis_id, thread_id=thread_id, question=question)

    def update_channel(self, diagnosis_id: str, channel: str, value: Mapping[str, object]) -> None:
        """Replace one ``self_evaluation`` channel, preserving the others."""
        self._database.audit.update_channel(diagnosis_id, channel, value)

    def finish_diagnosis(self, diagnosis_id: str, outcome: DiagnosisOutcome) -> None:
        """Record the outcome of a diagnosis."""
        self._database.audit.finish_diagnosis(diagnosis_id, outcome)

    def mark(self, diagnosis_id: str, *, status: DiagnosisStatus | None = None, note: str) -> None:
        """Set a note (and optionally the status) on a diagnosis."""
        self._database.audit.mark(diagnosis_id, status=status, note=note)

    def abandon_running(self, thread_id: str, *, keep: str | None = None) -> list[str]:
        """Mark every ``running`` diagnosis of a thread (except ``keep``) as abandoned."""
        return self._database.audit.abandon_running(thread_id, keep=keep)

    def get(self, diagnosis_id: str) -> DiagnosisRecord | None:
        """Return one diagnosis record, or None."""
        return self._database.audit.get(diagnosis_id)

    def list(self, thread_id: str | None = None) -> builtins.list[DiagnosisRecord]:
        """Return diagnosis records, oldest first, optionally of one thread."""
        return self._database.audit.list(thread_id)


class LazyLedger:
    """``InvocationLedger`` on the configured database, opened when first written or read."""

    def __init__(self, database: ConfiguredDatabase) -> None:
        self._database = database

    def record(self, draft: InvocationDraft) -> Invocation:
        """Store an invocation once per idempotency key and return the stored row."""
        return self._database.ledger.record(draft)

    def find(self, idempotency_key: str) -> Invocation | None:
        """Return the row recorded under this idempotency key, or None."""
        return self._database.ledger.find(idempotency_key)

    def list(self, diagnosis_id: str) -> builtins.list[Invocation]:
        """Return the rows of one diagnosis in call order."""
        return self._database.ledger.list(diagnosis_id)


database = ConfiguredDatabase()
atexit.register(database.close)

graph = build_graph(ledger=LazyLedger(database), audit=LazyAuditStore(database)).compile(
    name="superbiz"
)

__all__ = ["checkpointer", "graph"]
