"""The invocation ledger: where every tool call is recorded before its result is used.

Recording is idempotent on the invocation's ``idempotency_key``, so a graph node that is executed
again after a resume gets the row it already wrote instead of a duplicate. Invocation ids are
``inv-1``, ``inv-2``, ... in recording order within one diagnosis. ``InMemoryLedger`` serves one
process (tests, scenario runs); ``SqlLedger`` is the ``tool_invocation`` table.
"""

from __future__ import annotations

import builtins
import threading
import zlib
from typing import Protocol

import sqlalchemy as sa
from pydantic import TypeAdapter
from sqlalchemy.engine import Connection
from sqlalchemy.sql import Executable

from persistence import dialects, tables
from persistence.database import Database
from state.records import Invocation, InvocationDraft


class InvocationLedger(Protocol):
    """Storage of tool invocations."""

    def record(self, draft: InvocationDraft) -> Invocation:
        """Store an invocation once per idempotency key.

        Returns:
            The stored row: the existing one, unchanged, when the key was already recorded;
            otherwise the new row with ``invocation_id`` = ``inv-<n>``, n being the number of
            invocations already recorded for the diagnosis plus one.
        """
        ...

    def find(self, idempotency_key: str) -> Invocation | None:
        """The row recorded under this idempotency key, or None."""
        ...

    def list(self, diagnosis_id: str) -> builtins.list[Invocation]:
        """The rows of one diagnosis in call order."""
        ...


def _with_id(draft: InvocationDraft, invocation_id: str) -> Invocation:
    return Invocation(**draft, invocation_id=invocation_id)


class InMemoryLedger:
    """A thread-safe ledger held in memory.

    Rows are shallow-copied in and out: the ledger takes over the nested values of a recorded
    row and shares them with the rows it hands out, so treat both as read-only.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[str, Invocation] = {}
        self._by_diagnosis: dict[str, builtins.list[str]] = {}

    def record(self, draft: InvocationDraft) -> Invocation:
        """Store an invocation once per idempotency key (see ``InvocationLedger.record``)."""
        with self._lock:
            existing = self._by_key.get(draft["idempotency_key"])
            if existing is not None:
                return existing.copy()
            keys = self._by_diagnosis.setdefault(draft["diagnosis_id"], [])
            row = _with_id(draft, f"inv-{len(keys) + 1}")
            self._by_key[draft["idempotency_key"]] = row
            keys.append(draft["idempotency_key"])
            return row.copy()

    def find(self, idempotency_key: str) -> Invocation | None:
        """The row recorded under this idempotency key, or None."""
        with self._lock:
            row = self._by_key.get(idempotency_key)
            return row.copy() if row is not None else None

    def list(self, diagnosis_id: str) -> builtins.list[Invocation]:
        """The rows of one diagnosis in call order."""
        with self._lock:
            return [self._by_key[k].copy() for k in self._by_diagnosis.get(diagnosis_id, [])]


_ROW: TypeAdapter[Invocation] = TypeAdapter(Invocation)
_LEDGER_LOCK = 0x5B12
"""First key of the PostgreSQL advisory lock that serialises id assignment per diagnosis."""
_T = tables.tool_invocation
_COLUMNS = [
    _T.c[name]
    for name in (
        "invocation_id",
        "diagnosis_id",
        "thread_id",
        "round",
        "tool_name",
        "arguments",
        "status",
        "output",
        "retrieval_details",
        "idempotency_key",
        "started_at",
        "duration_ms",
        "error",
    )
]
_BY_KEY = sa.select(*_COLUMNS).where(_T.c.idempotency_key == sa.bindparam("key"))
_OF_DIAGNOSIS = (
    sa.select(*_COLUMNS).where(_T.c.diagnosis_id == sa.bindparam("diagnosis_id")).order_by(_T.c.seq)
)
_DRAFT = [
    "diagnosis_id",
    "thread_id",
    "round",
    "tool_name",
    "arguments",
    "status",
    "output",
    "retrieval_details",
    "idempotency_key",
    "started_at",
    "duration_ms",
    "error",
]


def _row(row: sa.RowMapping) -> Invocation:
    """A database row as an ``Invocation`` (validated: the database is outside the code)."""
    return _ROW.validate_python(dict(row))


def _recording(conn: Connection) -> Executable:
    """``INSERT ... SELECT ... ON CONFLICT DO NOTHING RETURNING``: a new row, numbered.

    The row's number is the diagnosis's highest + 1 (read from the ``(diagnosis_id, seq)``
    index); a key already recorded inserts and returns nothing.
    """
    values = [sa.bindparam(name, type_=_T.c[name].type) for name in _DRAFT]
    counted = (
        sa.select(sa.func.coalesce(sa.func.max(_T.c.seq), 0).label("n"))
        .where(_T.c.diagnosis_id == values[0])
        .subquery("c")
    )
    number = counted.c.n + 1
    selected = sa.select(
        values[0], sa.literal("inv-") + sa.cast(number, sa.Text), number, *values[1:]
    ).where(sa.true())
    return (
        dialects.insert(conn, _T)
        .from_select(["diagnosis_id", "invocation_id", "seq", *_DRAFT[1:]], selected)
        .on_conflict_do_nothing(index_elements=["idempotency_key"])
        .returning(*_COLUMNS)
    )


class SqlLedger:
    """``InvocationLedger`` on the ``tool_invocation`` table (PostgreSQL or SQLite)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._recordings: dict[str, Executable] = {}

    def record(self, draft: InvocationDraft) -> Invocation:
        """Store an invocation once per idempotency key (see ``InvocationLedger.record``).

        One ``INSERT ... SELECT`` numbers the row (the diagnosis's highest number + 1, read from
        the ``(diagnosis_id, seq)`` index), skips it when the key is already recorded and returns
        what it stored, so a new row costs one statement (in PostgreSQL besides a per-diagnosis
        advisory lock, as concurrent calls of one diagnosis would read the same highest number;
        in SQLite the statement takes the write lock itself); only a repeated key reads the
        stored row.
        """
        key = draft["idempotency_key"]
        params = {name: draft[name] for name in _DRAFT}  # type: ignore[literal-required]
        params["thread_id"] = draft["thread_id"] or "-"
        postgres = self._db.dialect == "postgres"
        with self._db.transaction(single=not postgres) as conn:
            if postgres:
                lock = zlib.crc32(draft["diagnosis_id"].encode("utf-8")) - 2**31
                dialects.advisory_xact_lock(conn, _LEDGER_LOCK, lock)
            statement = self._recordings.get(conn.dialect.name)
            if statement is None:
                statement = self._recordings[conn.dialect.name] = _recording(conn)
            inserted = conn.execute(statement, params).mappings().first()
            if inserted is None:
                inserted = conn.execute(_BY_KEY, {"key": key}).mappings().first()
        assert inserted is not None
        return _row(inserted)

    def find(self, idempotency_key: str) -> Invocation | None:
        """The stored row with this idempotency key, if any."""
        with self._db.transaction(single=True) as conn:
            row = conn.execute(_BY_KEY, {"key": idempotency_key}).mappings().first()
        return _row(row) if row is not None else None

    def list(self, diagnosis_id: str) -> builtins.list[Invocation]:
        """Every invocation of a diagnosis in call order."""
        with self._db.transaction(single=True) as conn:
            rows = conn.execute(_OF_DIAGNOSIS, {"diagnosis_id": diagnosis_id}).mappings().all()
        return [_row(r) for r in rows]
