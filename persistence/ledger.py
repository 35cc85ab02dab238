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

from pydantic import TypeAdapter

from persistence.database import Database, Transaction, load_json
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


_COLUMNS = (
    "invocation_id, diagnosis_id, thread_id, round, tool_name, arguments, status, output, "
    "retrieval_details, idempotency_key, started_at, duration_ms, error"
)
_ROW: TypeAdapter[Invocation] = TypeAdapter(Invocation)
_LEDGER_LOCK = 0x5B12
"""First key of the PostgreSQL advisory lock that serialises id assignment per diagnosis."""


def _row(row: dict[str, object]) -> Invocation:
    """A database row as an ``Invocation`` (validated: the database is outside the code)."""
    decoded = {
        key: load_json(value) if key in ("arguments", "output", "retrieval_details") else value
        for key, value in row.items()
    }
    return _ROW.validate_python(decoded)


class SqlLedger:
    """``InvocationLedger`` on the ``tool_invocation`` table (PostgreSQL or SQLite)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def _find(self, tx: Transaction, idempotency_key: str) -> Invocation | None:
        rows = tx.execute(
            f"SELECT {_COLUMNS} FROM tool_invocation WHERE idempotency_key = %s",
            (idempotency_key,),
        )
        return _row(rows[0]) if rows else None

    def record(self, draft: InvocationDraft) -> Invocation:
        """Store an invocation once per idempotency key (see ``InvocationLedger.record``).

        One ``INSERT ... SELECT`` numbers the row (the diagnosis's highest number + 1, read from
        the ``(diagnosis_id, seq)`` index), skips it when the key is already recorded and returns
        what it stored, so a new row costs one statement besides the lock; only a repeated key
        reads the stored row.
        """
        key = draft["idempotency_key"]
        with self._db.transaction() as tx:
            if tx.dialect == "postgres":
                lock = zlib.crc32(draft["diagnosis_id"].encode("utf-8")) - 2**31
                tx.execute("SELECT pg_advisory_xact_lock(%s::int4, %s::int4)", (_LEDGER_LOCK, lock))
            inserted = tx.execute(
                "INSERT INTO tool_invocation (diagnosis_id, invocation_id, seq, thread_id, round, "
                "tool_name, arguments, status, output, retrieval_details, idempotency_key, "
                "started_at, duration_ms, error) "
                "SELECT %s, 'inv-' || (c.n + 1), c.n + 1, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
                "%s FROM (SELECT COALESCE(MAX(seq), 0) AS n FROM tool_invocation "
                "WHERE diagnosis_id = %s) AS c "
                "WHERE true ON CONFLICT (idempotency_key) DO NOTHING "
                f"RETURNING {_COLUMNS}",
                (
                    draft["diagnosis_id"],
                    draft["thread_id"] or "-",
                    draft["round"],
                    draft["tool_name"],
                    tx.json(draft["arguments"]),
                    draft["status"],
                    tx.json(draft["output"]),
                    tx.json(draft["retrieval_details"]),
                    key,
                    draft["started_at"],
                    draft["duration_ms"],
                    draft["error"],
                    draft["diagnosis_id"],
                ),
            )
            stored = _row(inserted[0]) if inserted else self._find(tx, key)
        assert stored is not None
        return stored

    def find(self, idempotency_key: str) -> Invocation | None:
        """The stored row with this idempotency key, if any."""
        with self._db.transaction(single=True) as tx:
            return self._find(tx, idempotency_key)

    def list(self, diagnosis_id: str) -> builtins.list[Invocation]:
        """Every invocation of a diagnosis in call order."""
        with self._db.transaction(single=True) as tx:
            rows = tx.execute(
                f"SELECT {_COLUMNS} FROM tool_invocation WHERE diagnosis_id = %s ORDER BY seq",
                (diagnosis_id,),
            )
        return [_row(r) for r in rows]
