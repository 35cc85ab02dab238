"""Connections to PostgreSQL never prepare statements, so a transaction pooler can sit in front.

A pooler in transaction mode (PgBouncer, Odyssey) hands consecutive transactions of one client
to different server connections: a statement prepared on one is missing on the next. psycopg
prepares a statement after ``prepare_threshold`` executions, on the first when it is 0; only
``None`` turns preparing off.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from persistence.database import _postgres_engine, resolve_target
from persistence.pools import connect_postgres

pytestmark = pytest.mark.postgres

_COUNT = "SELECT count(*) AS n FROM pg_prepared_statements"


def test_checkpointer_connections_prepare_no_statement(postgres_url: str) -> None:
    with connect_postgres(resolve_target(postgres_url)) as conn:
        for _ in range(8):
            conn.execute("SELECT 1 WHERE %s::int > 0", (1,)).fetchall()
        row: Any = conn.execute(_COUNT).fetchone()
    assert row["n"] == 0


def test_audit_engine_connections_prepare_no_statement(postgres_url: str) -> None:
    engine = _postgres_engine(resolve_target(postgres_url))
    try:
        with engine.connect() as conn:
            for _ in range(8):
                conn.execute(sa.text("SELECT 1 WHERE :x > 0"), {"x": 1}).fetchall()
            count = conn.execute(sa.text(_COUNT)).scalar_one()
    finally:
        engine.dispose()
    assert count == 0
