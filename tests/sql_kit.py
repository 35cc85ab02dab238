"""Plain SQL against a ``persistence.database.Database`` in tests (``:name`` parameters)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from persistence.database import Database


def query(db: Database, sql: str, **params: Any) -> list[dict[str, Any]]:
    """Run one statement in a transaction of ``db``; its rows as dicts (none for a write)."""
    with db.transaction() as conn:
        result = conn.execute(text(sql), params)
        return [dict(row) for row in result.mappings()] if result.returns_rows else []
