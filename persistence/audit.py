"""Audit store: one record per diagnosis with its ``self_evaluation`` channels.

Channels are updated read-modify-write: each write replaces only its own channel, and the whole
``self_evaluation`` object is created only when it is still null. ``InMemoryAuditStore`` serves one
process; ``SqlAuditStore`` is the ``diagnosis_session`` table, where each channel write locks the
row (``SELECT ... FOR UPDATE`` in PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` locks the file).
"""

from __future__ import annotations

import builtins
import copy
import json
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Protocol, TypeVar

from pydantic import TypeAdapter, ValidationError

from persistence.database import Database, load_json
from state.records import (
    DiagnosisOutcome,
    DiagnosisRecord,
    DiagnosisStatus,
    JSONObject,
    VerifierEvaluation,
)

T = TypeVar("T")

ABANDONED_NOTE = "superseded by a newer question on the same thread"


def utcnow() -> str:
    """Current UTC time as ISO-8601 text."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class AuditStore(Protocol):
    """Where diagnoses are recorded for audit."""

    def start_diagnosis(
        self,
        diagnosis_id: str,
        *,
        thread_id: str,
        question: str,
        settings: Mapping[str, object] | None = None,
    ) -> None:
        """Create the diagnosis row (status ``running``); a second call changes nothing."""

    def update_channel(self, diagnosis_id: str, channel: str, value: Mapping[str, object]) -> None:
        """Replace one ``self_evaluation`` channel, preserving the others."""

    def finish_diagnosis(self, diagnosis_id: str, outcome: DiagnosisOutcome) -> None:
        """Record the outcome of a diagnosis."""

    def mark(self, diagnosis_id: str, *, status: DiagnosisStatus | None = None, note: str) -> None:
        """Set a note (and optionally the status) on a diagnosis, e.g. resumed or failed."""

    def abandon_running(self, thread_id: str, *, keep: str | None = None) -> builtins.list[str]:
        """Mark every ``running`` diagnosis of a thread (except ``keep``) as abandoned."""

    def get(self, diagnosis_id: str) -> DiagnosisRecord | None:
        """One diagnosis record, or None."""

    def list(self, thread_id: str | None = None) -> builtins.list[DiagnosisRecord]:
        """Diagnosis records, oldest first, optionally of one thread."""


def _plain(value: Mapping[str, object]) -> JSONObject:
    """A channel value as its own plain JSON copy (what a database would store)."""
    plain: JSONObject = json.loads(json.dumps(value, ensure_ascii=False))
    return plain


class InMemoryAuditStore:
    """Process-local audit store (thread-safe)."""

    def __init__(self) -> None:
        self._rows: dict[str, DiagnosisRecord] = {}
        self._lock = threading.Lock()

    def _row(self, diagnosis_id: str) -> DiagnosisRecord:
        row = self._rows.get(diagnosis_id)
        if row is None:
            raise KeyError(f"unknown diagnosis {diagnosis_id!r}")
        return row

    def start_diagnosis(
        self,
        diagnosis_id: str,
        *,
        thread_id: str,
        question: str,
        settings: Mapping[str, object] | None = None,
    ) -> None:
        """Create the diagnosis row (status ``running``); a second call changes nothing."""
        with self._lock:
            if diagnosis_id not in self._rows:
                now = utcnow()
                self._rows[diagnosis_id] = DiagnosisRecord(
                    id=diagnosis_id,
                    thread_id=thread_id,
                    question=question,
                    status="running",
                    rounds=0,
                    verdict=None,
                    score=None,
                    final_answer=None,
                    note=None,
                    created_at=now,
                    updated_at=now,
                    self_evaluation=None,
                    run_settings=_plain(settings) if settings is not None else None,
                )

    def update_channel(self, diagnosis_id: str, channel: str, value: Mapping[str, object]) -> None:
        """Replace one ``self_evaluation`` channel, preserving the others."""
        with self._lock:
            row = self._row(diagnosis_id)
            row["self_evaluation"] = {**(row["self_evaluation"] or {}), channel: _plain(value)}
            row["updated_at"] = utcnow()

    def finish_diagnosis(self, diagnosis_id: str, outcome: DiagnosisOutcome) -> None:
        """Record the outcome of a diagnosis."""
        with self._lock:
            row = self._row(diagnosis_id)
            row["status"], row["rounds"] = outcome["status"], outcome["rounds"]
            row["verdict"], row["score"] = outcome["verdict"], outcome["score"]
            row["final_answer"], row["updated_at"] = outcome["answer"], utcnow()

    def mark(self, diagnosis_id: str, *, status: DiagnosisStatus | None = None, note: str) -> None:
        """Set a note (and optionally the status) on a diagnosis, e.g. resumed or failed."""
        with self._lock:
            row = self._row(diagnosis_id)
            row["note"], row["updated_at"] = note, utcnow()
            if status is not None:
                row["status"] = status

    def abandon_running(self, thread_id: str, *, keep: str | None = None) -> builtins.list[str]:
        """Mark every ``running`` diagnosis of a thread (except ``keep``) as abandoned."""
        with self._lock:
            rows = [
                r
                for r in self._rows.values()
                if r["thread_id"] == thread_id and r["status"] == "running" and r["id"] != keep
            ]
            for row in rows:
                row["status"], row["note"] = "abandoned", ABANDONED_NOTE
                row["updated_at"] = utcnow()
            return [row["id"] for row in rows]

    def get(self, diagnosis_id: str) -> DiagnosisRecord | None:
        """A copy of one diagnosis record, or None."""
        with self._lock:
            row = self._rows.get(diagnosis_id)
            return copy.deepcopy(row) if row is not None else None

    def list(self, thread_id: str | None = None) -> builtins.list[DiagnosisRecord]:
        """Copies of diagnosis records, oldest first, optionally of one thread."""
        with self._lock:
            rows = [r for r in self._rows.values() if thread_id in (None, r["thread_id"])]
            return copy.deepcopy(sorted(rows, key=lambda r: r["created_at"]))


class StoredRecordError(ValueError):
    """A stored audit record cannot be read as this version's records; the message says why."""


_EVALUATION: TypeAdapter[VerifierEvaluation] = TypeAdapter(VerifierEvaluation)


def verifier_evaluation_of(record: DiagnosisRecord) -> VerifierEvaluation | None:
    """The record's ``verifier_evaluation`` channel, or None when it has none yet.

    Raises:
        StoredRecordError: when the stored channel does not have the expected shape.
    """
    return stored_channel(record, "verifier_evaluation", _EVALUATION, "verifier evaluation")


def stored_channel(
    record: DiagnosisRecord,
    channel: str,
    adapter: TypeAdapter[T],
    what: str,
    error: Callable[[str], Exception] = StoredRecordError,
) -> T | None:
    """One ``self_evaluation`` channel of a record, validated; None when it has none yet.

    Args:
        record: The diagnosis record.
        channel: The channel's key.
        adapter: The channel's type.
        what: The channel for the message (``verifier evaluation``).
        error: The exception raised, made from the message.

    Raises:
        Exception: ``error`` (``StoredRecordError``), when the stored channel does not have the
            expected shape.
    """
    value = (record["self_evaluation"] or {}).get(channel)
    if value is None:
        return None
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise error(
            f"diagnosis {record['id']}: its {what} cannot be read ({where}: {first['msg']})"
        ) from None


_COLUMNS = (
    "id, thread_id, question, status, rounds, verdict, score, final_answer, note, "
    "created_at, updated_at, self_evaluation, run_settings"
)
_RECORD: TypeAdapter[DiagnosisRecord] = TypeAdapter(DiagnosisRecord)


def _record(row: dict[str, object]) -> DiagnosisRecord:
    """A database row as a ``DiagnosisRecord`` (validated: the database is outside the code)."""
    return _RECORD.validate_python(
        {
            **row,
            "self_evaluation": load_json(row["self_evaluation"]),
            "run_settings": load_json(row["run_settings"]),
        }
    )


class SqlAuditStore:
    """``AuditStore`` on the ``diagnosis_session`` table (PostgreSQL or SQLite)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def start_diagnosis(
        self,
        diagnosis_id: str,
        *,
        thread_id: str,
        question: str,
        settings: Mapping[str, object] | None = None,
    ) -> None:
        """Create the diagnosis row (status ``running``); a second call changes nothing."""
        now = utcnow()
        with self._db.transaction() as tx:
            tx.execute(
                "INSERT INTO diagnosis_session (id, thread_id, question, status, rounds, "
                "created_at, updated_at, run_settings) "
                "VALUES (%s, %s, %s, 'running', 0, %s, %s, %s) "
                "ON CONFLICT (id) DO NOTHING",
                (
                    diagnosis_id,
                    thread_id,
                    question,
                    now,
                    now,
                    tx.json(dict(settings)) if settings is not None else None,
                ),
            )

    def update_channel(self, diagnosis_id: str, channel: str, value: Mapping[str, object]) -> None:
        """Replace one ``self_evaluation`` channel, preserving the others."""
        if self._db.target.dialect == "postgres":
            # One statement merges the channel in place: no read, no transaction round trips.
            with self._db.transaction(single=True) as tx:
                updated = tx.execute(
                    "UPDATE diagnosis_session SET self_evaluation = "
                    "(CASE WHEN jsonb_typeof(self_evaluation) = 'object' THEN self_evaluation "
                    "ELSE '{}'::jsonb END) || jsonb_build_object(%s::text, %s::jsonb), "
                    "updated_at = %s WHERE id = %s RETURNING id",
                    (channel, tx.json(dict(value)), utcnow(), diagnosis_id),
                )
            if not updated:
                raise KeyError(f"unknown diagnosis {diagnosis_id!r}")
            return
        with self._db.transaction() as tx:
            lock = ""
            rows = tx.execute(
                f"SELECT self_evaluation FROM diagnosis_session WHERE id = %s{lock}",
                (diagnosis_id,),
            )
            if not rows:
                raise KeyError(f"unknown diagnosis {diagnosis_id!r}")
            current = load_json(rows[0]["self_evaluation"])
            merged = {**(current if isinstance(current, dict) else {}), channel: dict(value)}
            tx.execute(
                "UPDATE diagnosis_session SET self_evaluation = %s, updated_at = %s WHERE id = %s",
                (tx.json(merged), utcnow(), diagnosis_id),
            )

    def finish_diagnosis(self, diagnosis_id: str, outcome: DiagnosisOutcome) -> None:
        """Record the outcome of a diagnosis."""
        with self._db.transaction(single=True) as tx:
            tx.execute(
                "UPDATE diagnosis_session SET status = %s, rounds = %s, verdict = %s, score = %s, "
                "final_answer = %s, updated_at = %s WHERE id = %s",
                (
                    outcome["status"],
                    outcome["rounds"],
                    outcome["verdict"],
                    outcome["score"],
                    outcome["answer"],
                    utcnow(),
                    diagnosis_id,
                ),
            )

    def mark(self, diagnosis_id: str, *, status: DiagnosisStatus | None = None, note: str) -> None:
        """Set a note (and optionally the status) on a diagnosis, e.g. resumed or abandoned."""
        with self._db.transaction(single=True) as tx:
            tx.execute(
                "UPDATE diagnosis_session SET status = COALESCE(%s, status), note = %s, "
                "updated_at = %s WHERE id = %s",
                (status, note, utcnow(), diagnosis_id),
            )

    def abandon_running(self, thread_id: str, *, keep: str | None = None) -> builtins.list[str]:
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
                    (ABANDONED_NOTE, utcnow(), diagnosis_id),
                )
        return ids

    def get(self, diagnosis_id: str) -> DiagnosisRecord | None:
        """One diagnosis record, or None."""
        with self._db.transaction(single=True) as tx:
            rows = tx.execute(
                f"SELECT {_COLUMNS} FROM diagnosis_session WHERE id = %s", (diagnosis_id,)
            )
        return _record(rows[0]) if rows else None

    def list(self, thread_id: str | None = None) -> builtins.list[DiagnosisRecord]:
        """Diagnosis records, oldest first, optionally of one thread."""
        where, params = ("WHERE thread_id = %s", (thread_id,)) if thread_id else ("", ())
        with self._db.transaction(single=True) as tx:
            rows = tx.execute(
                f"SELECT {_COLUMNS} FROM diagnosis_session {where} ORDER BY created_at, id", params
            )
        return [_record(r) for r in rows]
