"""Pooled PostgreSQL connections: the health check spares round trips, not dead connections."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from psycopg_pool import ConnectionPool

from persistence import pools
from persistence.database import open_database


def _backend_pids(db: Any) -> set[int]:
    with db.transaction(single=True) as conn:
        return {int(conn.execute(sa.select(sa.func.pg_backend_pid())).scalar_one())}


def test_pool_replaces_a_connection_the_server_terminated(postgres_url: str) -> None:
    db = open_database(postgres_url)
    try:
        (pid,) = _backend_pids(db)
        with psycopg.connect(db.target.conninfo, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            # The backend has gone (and closed its socket) once the server no longer lists it.
            deadline = time.monotonic() + 10
            while (
                time.monotonic() < deadline
                and admin.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)
                ).fetchone()
            ):
                time.sleep(0.01)
            time.sleep(0.05)
        # The terminated connection is noticed at checkout and replaced: the read succeeds.
        (again,) = _backend_pids(db)
        assert again != pid
    finally:
        db.close()


def test_pool_checks_with_a_query_only_connections_idle_for_long(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[object] = []
    real_check = ConnectionPool.check_connection

    def spy(conn: Any) -> None:
        checked.append(conn)
        real_check(conn)

    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(spy))
    db = open_database(postgres_url)
    try:
        for _ in range(12):  # every pooled connection used and given back once
            _backend_pids(db)
        checked.clear()
        for _ in range(5):
            _backend_pids(db)
        assert checked == []  # given back moments ago, nothing to read: used as it is
        monkeypatch.setattr(pools, "IDLE_CHECK_S", 0.0)
        _backend_pids(db)
        assert len(checked) == 1  # idle "too long": checked with a query
    finally:
        db.close()
