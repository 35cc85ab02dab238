"""Audit store on the SQL database (``diagnosis_session``), for PostgreSQL and SQLite.

Each ``self_evaluation`` channel is written read-modify-write inside one transaction with the row
locked (``SELECT ... FOR UPDATE`` in PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` locks the file), so
a write preserves the other channel, and the object is created only while it is null.
"""

from __future__ import annotations

from typing import Any

from persistence.audit import utcnow
from persistence.database import Database, load_json

_COLUMNS = (
    "id, thread_id, question, status, rounds, verdict, score, final_answer, note, "
    "created_at, updated_at, self_evaluation"
)


def _row(row: dict[str, Any]) -> dict[str, Any]:
    row = dict(row)
    row["self_evaluation"] = load_json(row.get("self_evaluation"))
    return row


class SqlAuditStore:
    """``AuditStore`` on the ``diagnosis_session`` table."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def start_diagnosis(self, diagnosis_id: str, *, thread_id: str, question: str) -> None:
        """Create the diagnosis row (status ``running``); a second call changes nothing."""
        now = utcnow()
        with self._db.transaction() as tx:
            tx.execute(
                "INSERT INTO diagnosis_session (id, thread_id, question, status, rounds, "
                "created_at, updated_at) VALUES (%s, %s, %s, 'running', 0, %s, %s) "
                "ON CONFLICT (id) DO NOTHING",
                (diagnosis_id, thread_id, question, now, now),
            )

    def update_channel(self, diagnosis_id: str, channel: str, value: dict[str, Any]) -> None:
        """Replace one ``self_evaluation`` channel, preserving the others."""
        lock = " FOR UPDATE" if self._db.dialect == "postgres" else ""
        with self._db.transaction() as tx:
            rows = tx.execute(
                f"SELECT self_evaluation FROM diagnosis_session WHERE id = %s{lock}",
                (diagnosis_id,),
            )
            if not rows:
                raise KeyError(f"unknown diagnosis {diagnosis_id!r}")
            current = load_json(rows[0]["self_evaluation"])
            merged = {channel: value} if current is None else {**current, channel: value}
            tx.execute(
                "UPDATE diagnosis_session SET self_evaluation = %s, updated_at = %s WHERE id = %s",
                (tx.json(merged), utcnow(), diagnosis_id),
            )

    def finish_diagnosis(
        self,
        diagnosis_id: str,
        *,
        status: str,
        rounds: int,
        verdict: str | None,
        score: float | None,
        answer: str | None,
    ) -> None:
        """Record the outcome of a diagnosis."""
        with self._db.transaction() as tx:
            tx.execute(
                "UPDATE diagnosis_session SET status = %s, rounds = %s, verdict = %s, score = %s, "
                "final_answer = %s, updated_at = %s WHERE id = %s",
                (status, rounds, verdict, score, answer, utcnow(), diagnosis_id),
            )

    def mark(self, diagnosis_id: str, *, status: str | None = None, note: str) -> None:
        """Set a note (and optionally the status) on a diagnosis, e.g. resumed or abandoned."""
        with self._db.transaction() as tx:
            tx.execute(
                "UPDATE diagnosis_session SET status = COALESCE(%s, status), note = %s, "
                "updated_at = %s WHERE id = %s",
                (status, note, utcnow(), diagnosis_id),
            )

    def abandon_running(self, thread_id: str, *, keep: str | None = None) -> list[str]:
        """Mark every ``running`` diagnosis of a thread (except ``keep``) as abandoned."""
        with self._db.transaction() as tx:
            rows = tx.execute(
                "SELECT id FROM diagnosis_session WHERE thread_id = %s AND status = 'running' "
                "AND id <> %s",
                (thread_id, keep or ""),
            )
            ids = [str(r["id"]) for r in rows]
            for diagnosis_id in ids:
                tx.execute(
                    "UPDATE diagnosis_session SET status = 'abandoned', note = %s, "
                    "updated_at = %s WHERE id = %s",
                    ("superseded by a newer question on the same thread", utcnow(), diagnosis_id),
                )
        return ids

    def get(self, diagnosis_id: str) -> dict[str, Any] | None:
        """Return one diagnosis record, or None."""
        with self._db.transaction() as tx:
            rows = tx.execute(
                f"SELECT {_COLUMNS} FROM diagnosis_session WHERE id = %s", (diagnosis_id,)
            )
        return _row(rows[0]) if rows else None

    def list(self, thread_id: str | None = None) -> list[dict[str, Any]]:
        """Return diagnosis records, oldest first, optionally of one thread."""
        where, params = ("WHERE thread_id = %s", (thread_id,)) if thread_id else ("", ())
        with self._db.transaction() as tx:
            rows = tx.execute(
                f"SELECT {_COLUMNS} FROM diagnosis_session {where} ORDER BY created_at, id", params
            )
        return [_row(r) for r in rows]
