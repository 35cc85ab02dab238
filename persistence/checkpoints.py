"""LangGraph's checkpoint tables, in the database the audit tables use, and the sync checkpointer.

The setup functions create or migrate the tables before a checkpointer is built on them: the
synchronous one here (``checkpoint_saver``, for the CLI and the HTTP API) and the LangGraph
server's asynchronous one in ``graph/checkpointers.py``, which runs them in a worker thread. Both
kinds share the same tables, so neither calls ``setup()`` itself.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver

from persistence.database import (
    Database,
    DatabaseError,
    DatabaseTarget,
    connect_postgres,
    connect_sqlite,
)

SETUP_LOCK_KEY = 0x5B12_0002
"""PostgreSQL advisory lock taken (by polling) while LangGraph's checkpoint tables are set up."""
SETUP_ATTEMPTS = 3
SETUP_LOCK_TIMEOUT_S = 60.0
SETUP_LOCK_POLL_S = 0.1
SETUP_RETRY_DELAY_S = 0.5


def setup_postgres_checkpoints(target: DatabaseTarget) -> None:
    """Create or migrate the checkpoint tables of a PostgreSQL target, one process at a time.

    ``setup()`` is idempotent but not safe against a concurrent first run (both would insert the
    same migration version), so it runs while this process holds a session advisory lock on a
    separate, idle connection. The lock is polled with ``pg_try_advisory_lock``, never waited
    for inside a statement: ``CREATE INDEX CONCURRENTLY`` in the holder's ``setup()`` waits for
    every open transaction, a blocked lock request included, which would deadlock unseen. A clash
    with a setup that does not take the lock is retried a few times, each on a new connection.
    The connections are this function's own (autocommit, as ``CREATE INDEX CONCURRENTLY``
    requires) and closed before it returns.

    Raises:
        DatabaseError: when the database is unreachable, another process holds the lock for
            more than ``SETUP_LOCK_TIMEOUT_S``, or the setup keeps failing.
    """
    try:
        with connect_postgres(target) as lock_conn:
            _acquire_setup_lock(lock_conn, target)
            try:
                _setup_with_retries(target)
            finally:
                lock_conn.execute("SELECT pg_advisory_unlock(%s)", (SETUP_LOCK_KEY,))
    except psycopg.Error as exc:
        raise _setup_error(target, exc) from exc


def _acquire_setup_lock(conn: psycopg.Connection[Any], target: DatabaseTarget) -> None:
    deadline = time.monotonic() + SETUP_LOCK_TIMEOUT_S
    while True:
        row = conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", (SETUP_LOCK_KEY,)).fetchone()
        if row and row["ok"]:
            return
        if time.monotonic() > deadline:
            raise DatabaseError(
                f"another process has been setting up checkpoints in {target.display} for more "
                f"than {SETUP_LOCK_TIMEOUT_S:.0f} s; try again when it is done"
            )
        time.sleep(SETUP_LOCK_POLL_S)


def _setup_with_retries(target: DatabaseTarget) -> None:
    for attempt in range(1, SETUP_ATTEMPTS + 1):
        try:
            with connect_postgres(target) as conn:
                PostgresSaver(conn).setup()
            return
        except psycopg.Error:
            if attempt == SETUP_ATTEMPTS:
                raise
            time.sleep(SETUP_RETRY_DELAY_S)


def setup_sqlite_checkpoints(target: DatabaseTarget) -> None:
    """Create or migrate the checkpoint tables in an SQLite target's file (created if missing).

    Raises:
        DatabaseError: when the file cannot be opened or the tables cannot be set up.
    """
    conn = connect_sqlite(target, autocommit=False)
    try:
        SqliteSaver(conn).setup()
    except Exception as exc:
        raise _setup_error(target, exc) from exc
    finally:
        conn.close()


def _setup_error(target: DatabaseTarget, exc: Exception) -> DatabaseError:
    return DatabaseError(
        f"cannot set up checkpoints in {target.display}: {type(exc).__name__}: {exc}"
    )


@contextmanager
def checkpoint_saver(db: Database) -> Iterator[BaseCheckpointSaver[str]]:
    """LangGraph's checkpointer on a database, its tables set up first, for the block.

    Yields:
        ``PostgresSaver`` on the database's pool, or ``SqliteSaver`` on a connection of its own
        to the same SQLite file (closed when the block ends).

    Raises:
        DatabaseError: when the database cannot be opened or its checkpoints set up.
    """
    target = db.target
    if target.dialect == "postgres":
        setup_postgres_checkpoints(target)
        assert db.pool is not None
        yield PostgresSaver(db.pool)
        return
    setup_sqlite_checkpoints(target)
    conn = connect_sqlite(target, autocommit=False)
    try:
        yield SqliteSaver(conn)
    finally:
        conn.close()
