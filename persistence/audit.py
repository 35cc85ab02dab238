"""Audit store: one record per diagnosis with its ``self_evaluation`` channels.

Channels are updated read-modify-write: each write replaces only its own channel, and the whole
``self_evaluation`` object is created only when it is still null. ``InMemoryAuditStore`` serves one
process; ``SqlAuditStore`` is the ``diagnosis_session`` table, where each channel write is one
``UPDATE`` that merges the channel into the stored object (the row's lock makes it atomic).
"""

from __future__ import annotations

import builtins
import copy
import json
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import cache
from typing import Any, Protocol, TypeVar

import sqlalchemy as sa
from pydantic import TypeAdapter, ValidationError
from sqlalchemy.sql import Executable

from persistence import dialects, tables
from persistence.database import Database
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


_RECORD: TypeAdapter[DiagnosisRecord] = TypeAdapter(DiagnosisRecord)
_SESSION = tables.diagnosis_session
_COLUMNS = [
    _SESSION.c[name]
    for name in (
        "id",
        "thread_id",
        "question",
        "status",
        "rounds",
        "verdict",
        "score",
        "final_answer",
        "note",
        "created_at",
        "updated_at",
        "self_evaluation",
        "run_settings",
    )
]
_BY_ID = sa.select(*_COLUMNS).where(_SESSION.c.id == sa.bindparam("id"))


def _record(row: sa.RowMapping) -> DiagnosisRecord:
    """A database row as a ``DiagnosisRecord`` (validated: the database is outside the code)."""
    return _RECORD.validate_python(dict(row))


def _param(name: str) -> sa.BindParameter[Any]:
    """The bound parameter ``p_<name>`` for column ``name`` (SQLAlchemy keeps column names)."""
    return sa.bindparam(f"p_{name}", type_=_SESSION.c[name].type)


def _params(**values: Any) -> dict[str, Any]:
    """``_param`` names for the values of some columns."""
    return {f"p_{name}": value for name, value in values.items()}


_FINISH = (
    sa.update(_SESSION)
    .where(_SESSION.c.id == sa.bindparam("diagnosis_id"))
    .values({name: _param(name) for name in ("status", "rounds", "verdict", "score")})
    .values(final_answer=_param("final_answer"), updated_at=_param("updated_at"))
)
_MARK = (
    sa.update(_SESSION)
    .where(_SESSION.c.id == sa.bindparam("diagnosis_id"))
    .values(
        status=sa.func.coalesce(_param("status"), _SESSION.c.status),
        note=_param("note"),
        updated_at=_param("updated_at"),
    )
)
_ABANDON = (
    sa.update(_SESSION)
    .where(
        _SESSION.c.thread_id == _param("thread_id"),
        _SESSION.c.status == "running",
        _SESSION.c.id != sa.bindparam("keep"),
    )
    .values(status="abandoned", note=_param("note"), updated_at=_param("updated_at"))
    .returning(_SESSION.c.id)
)
_STARTED = ("id", "thread_id", "question", "created_at", "updated_at", "run_settings")


@cache
def _start(dialect: str) -> Executable:
    """``INSERT ... ON CONFLICT (id) DO NOTHING`` of a new row (built once per dialect)."""
    return (
        dialects.insert(dialect, _SESSION)
        .values({name: _param(name) for name in _STARTED})
        .values(status="running", rounds=0)
        .on_conflict_do_nothing(index_elements=["id"])
    )


@cache
def _merge_channel(dialect: str) -> Executable:
    """One ``UPDATE`` merging a channel into ``self_evaluation`` (built once per dialect)."""
    return (
        sa.update(_SESSION)
        .where(_SESSION.c.id == sa.bindparam("diagnosis_id"))
        .values(
            self_evaluation=dialects.merge_json_key(dialect, _SESSION.c.self_evaluation),
            updated_at=_param("updated_at"),
        )
        .returning(_SESSION.c.id)
    )


class SqlAuditStore:
    """``AuditStore`` on the ``diagnosis_session`` table (PostgreSQL or SQLite).

    The statements of a diagnosis are built once, with bound parameters: SQLAlchemy then finds
    them compiled in its cache without working out their cache key again.
    """

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
        with self._db.transaction(single=True) as conn:
            conn.execute(
                _start(conn.dialect.name),
                _params(
                    id=diagnosis_id,
                    thread_id=thread_id,
                    question=question,
                    created_at=now,
                    updated_at=now,
                    run_settings=dict(settings) if settings is not None else None,
                ),
            )

    def update_channel(self, diagnosis_id: str, channel: str, value: Mapping[str, object]) -> None:
        """Replace one ``self_evaluation`` channel, preserving the others.

        One statement merges the channel in place (no read, no transaction round trips).
        """
        params = dialects.json_key_params(channel, dict(value))
        with self._db.transaction(single=True) as conn:
            updated = conn.execute(
                _merge_channel(conn.dialect.name),
                {**params, "diagnosis_id": diagnosis_id, **_params(updated_at=utcnow())},
            ).first()
        if updated is None:
            raise KeyError(f"unknown diagnosis {diagnosis_id!r}")

    def finish_diagnosis(self, diagnosis_id: str, outcome: DiagnosisOutcome) -> None:
        """Record the outcome of a diagnosis."""
        with self._db.transaction(single=True) as conn:
            conn.execute(
                _FINISH,
                {
                    "diagnosis_id": diagnosis_id,
                    **_params(
                        status=outcome["status"],
                        rounds=outcome["rounds"],
                        verdict=outcome["verdict"],
                        score=outcome["score"],
                        final_answer=outcome["answer"],
                        updated_at=utcnow(),
                    ),
                },
            )

    def mark(self, diagnosis_id: str, *, status: DiagnosisStatus | None = None, note: str) -> None:
        """Set a note (and optionally the status) on a diagnosis, e.g. resumed or abandoned."""
        with self._db.transaction(single=True) as conn:
            conn.execute(
                _MARK,
                {
                    "diagnosis_id": diagnosis_id,
                    **_params(status=status, note=note, updated_at=utcnow()),
                },
            )

    def abandon_running(self, thread_id: str, *, keep: str | None = None) -> builtins.list[str]:
        """Mark every ``running`` diagnosis of a thread (except ``keep``) as abandoned."""
        with self._db.transaction(single=True) as conn:
            rows = conn.execute(
                _ABANDON,
                {
                    "keep": keep or "",
                    **_params(thread_id=thread_id, note=ABANDONED_NOTE, updated_at=utcnow()),
                },
            ).all()
        return sorted(str(row.id) for row in rows)

    def get(self, diagnosis_id: str) -> DiagnosisRecord | None:
        """One diagnosis record, or None."""
        with self._db.transaction(single=True) as conn:
            row = conn.execute(_BY_ID, {"id": diagnosis_id}).mappings().first()
        return _record(row) if row is not None else None

    def list(self, thread_id: str | None = None) -> builtins.list[DiagnosisRecord]:
        """Diagnosis records, oldest first, optionally of one thread."""
        query = sa.select(*_COLUMNS).order_by(_SESSION.c.created_at, _SESSION.c.id)
        if thread_id:
            query = query.where(_SESSION.c.thread_id == thread_id)
        with self._db.transaction(single=True) as conn:
            rows = conn.execute(query).mappings().all()
        return [_record(r) for r in rows]
