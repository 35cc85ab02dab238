"""Invocation ledger on the SQL database (``tool_invocation``), for PostgreSQL and SQLite.

``record`` is idempotent on the unique ``idempotency_key``: a node re-executed after a crash gets
the row it wrote before, never a duplicate. Ids are assigned under a per-diagnosis lock.
"""

from __future__ import annotations

import zlib
from typing import Any

from persistence.database import Database, Transaction, load_json

_COLUMNS = (
    "invocation_id, diagnosis_id, thread_id, round, tool_name, arguments, status, output, "
    "retrieval_details, idempotency_key, started_at, duration_ms, error"
)


def _row(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    for key in ("arguments", "output", "retrieval_details"):
        out[key] = load_json(out.get(key))
    return out


class SqlLedger:
    """``InvocationLedger`` on the ``tool_invocation`` table."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def _find(self, tx: Transaction, idempotency_key: str) -> dict[str, Any] | None:
        rows = tx.execute(
            f"SELECT {_COLUMNS} FROM tool_invocation WHERE idempotency_key = %s",
            (idempotency_key,),
        )
        return _row(rows[0]) if rows else None

    def record(self, invocation: dict[str, Any]) -> dict[str, Any]:
        """Store an invocation once per idempotency key and return the stored row."""
        diagnosis_id = invocation.get("diagnosis_id")
        key = invocation.get("idempotency_key")
        if not diagnosis_id or not key:
            raise ValueError("an invocation needs a diagnosis_id and an idempotency_key")
        with self._db.transaction() as tx:
            if tx.dialect == "postgres":
                lock = zlib.crc32(str(diagnosis_id).encode("utf-8"))
                tx.execute(
                    "SELECT pg_advisory_xact_lock(%s::int4, %s::int4)", (0x5B12, lock - 2**31)
                )
            existing = self._find(tx, str(key))
            if existing is not None:
                return existing
            count = tx.execute(
                "SELECT COUNT(*) AS n FROM tool_invocation WHERE diagnosis_id = %s",
                (diagnosis_id,),
            )[0]["n"]
            seq = int(count) + 1
            row = {**invocation, "invocation_id": f"inv-{seq}"}
            tx.execute(
                "INSERT INTO tool_invocation (diagnosis_id, invocation_id, seq, thread_id, round, "
                "tool_name, arguments, status, output, retrieval_details, idempotency_key, "
                "started_at, duration_ms, error) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    diagnosis_id,
                    row["invocation_id"],
                    seq,
                    row.get("thread_id") or "-",
                    int(row.get("round") or 1),
                    row.get("tool_name") or "",
                    tx.json(row.get("arguments") or {}),
                    row.get("status"),
                    tx.json(row.get("output")),
                    tx.json(row.get("retrieval_details") or {}),
                    key,
                    row.get("started_at") or "",
                    float(row.get("duration_ms") or 0.0),
                    row.get("error"),
                ),
            )
            stored = self._find(tx, str(key))
        assert stored is not None
        return stored

    def find(self, idempotency_key: str) -> dict[str, Any] | None:
        """The stored row with this idempotency key, if any."""
        with self._db.transaction() as tx:
            return self._find(tx, idempotency_key)

    def list(self, diagnosis_id: str) -> list[dict[str, Any]]:
        """Every invocation of a diagnosis in call order."""
        with self._db.transaction() as tx:
            rows = tx.execute(
                f"SELECT {_COLUMNS} FROM tool_invocation WHERE diagnosis_id = %s ORDER BY seq",
                (diagnosis_id,),
            )
        return [_row(r) for r in rows]
