"""The LangGraph server's checkpointer, on the database the CLI and the audit tables use.

``langgraph.json`` names :func:`checkpointer` under ``"checkpointer": {"path": ...}``; the server
enters it once per event loop and keeps it open while it runs. The database is chosen exactly as
the CLI chooses it (``persistence.database.resolve_target``): ``SUPERBIZ_DATABASE_URL`` naming
PostgreSQL gives LangGraph's ``AsyncPostgresSaver`` on a connection pool; unset, or naming an SQLite
file, gives ``AsyncSqliteSaver`` on that same file (by default the embedded one the CLI uses). A
database that cannot be reached or set up stops the server with the reason, never a fall-back.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiosqlite
import psycopg
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from persistence.database import (
    CONNECT_TIMEOUT_S,
    ENV_VAR,
    POOL_KWARGS,
    SETUP_LOCK_KEY,
    DatabaseError,
    DatabaseTarget,
    connect_error,
    pool_size,
    resolve_target,
)

SETUP_ATTEMPTS = 3
SETUP_LOCK_TIMEOUT_S = 60.0
SETUP_LOCK_POLL_S = 0.1
SETUP_RETRY_DELAY_S = 0.5

SQLITE_BUSY_TIMEOUT_S = 30.0


@asynccontextmanager
async def checkpointer() -> AsyncIterator[BaseCheckpointSaver[str]]:
    """Open the configured database's checkpointer for the server's lifetime.

    Yields:
        ``AsyncPostgresSaver`` for a PostgreSQL URL, else ``AsyncSqliteSaver`` on the SQLite file.

    Raises:
        DatabaseError: when the database is unreachable, misconfigured or cannot be set up.
    """
    target = resolve_target()
    if target.dialect == "postgres":
        async with _postgres(target) as saver:
            yield saver
    else:
        async with _sqlite(target) as sqlite_saver:
            yield sqlite_saver


@asynccontextmanager
async def _postgres(target: DatabaseTarget) -> AsyncIterator[AsyncPostgresSaver]:
    try:
        # A direct probe gives the real reason (refused, unknown database, auth) at once.
        probe = await psycopg.AsyncConnection.connect(
            target.conninfo, connect_timeout=CONNECT_TIMEOUT_S
        )
        await probe.close()
    except psycopg.Error as exc:
        raise connect_error(target, exc) from exc
    # autocommit: setup() creates indexes CONCURRENTLY, which cannot run inside a transaction.
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        target.conninfo,
        kwargs=POOL_KWARGS,
        min_size=1,
        # Setup holds one connection for its lock while it works on another.
        max_size=pool_size(minimum=2),
        check=AsyncConnectionPool.check_connection,
        open=False,
        name="superbiz-checkpoints",
    )
    try:
        await pool.open(wait=True, timeout=10)
    except PoolTimeout as exc:
        await pool.close()
        raise DatabaseError(f"cannot open a connection pool to {target.display}") from exc
    try:
        saver = AsyncPostgresSaver(pool)
        await _setup_postgres(saver, pool, target)
        yield saver
    finally:
        await pool.close()


async def _setup_postgres(
    saver: AsyncPostgresSaver, pool: AsyncConnectionPool[Any], target: DatabaseTarget
) -> None:
    """Create or migrate the checkpoint tables, one process at a time.

    ``setup()`` is idempotent but not safe against a concurrent first run (both would insert the
    same migration version), so it runs while this process holds a session advisory lock on a
    separate, idle connection. The lock is polled with ``pg_try_advisory_lock``, never waited
    for inside a statement: ``CREATE INDEX CONCURRENTLY`` in the holder's ``setup()`` waits for
    every open transaction, a blocked lock request included, which would deadlock unseen. A clash
    with a setup that does not take the lock is retried a few times.
    """
    async with pool.connection() as conn:
        await _acquire_setup_lock(conn, target)
        try:
            for attempt in range(1, SETUP_ATTEMPTS + 1):
                try:
                    await saver.setup()
                    return
                except psycopg.Error as exc:
                    if attempt == SETUP_ATTEMPTS:
                        raise DatabaseError(
                            f"cannot set up checkpoints in {target.display}: "
                            f"{type(exc).__name__}: {exc}"
                        ) from exc
                    await asyncio.sleep(SETUP_RETRY_DELAY_S)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (SETUP_LOCK_KEY,))


async def _acquire_setup_lock(conn: psycopg.AsyncConnection[Any], target: DatabaseTarget) -> None:
    deadline = asyncio.get_running_loop().time() + SETUP_LOCK_TIMEOUT_S
    while True:
        cur = await conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", (SETUP_LOCK_KEY,))
        row = await cur.fetchone()
        if row and row["ok"]:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise DatabaseError(
                f"another process has been setting up checkpoints in {target.display} for more "
                f"than {SETUP_LOCK_TIMEOUT_S:.0f} s; try again when it is done"
            )
        await asyncio.sleep(SETUP_LOCK_POLL_S)


@asynccontextmanager
async def _sqlite(target: DatabaseTarget) -> AsyncIterator[AsyncSqliteSaver]:
    path = target.path
    assert path is not None
    try:
        await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
        conn = await aiosqlite.connect(str(path), timeout=SQLITE_BUSY_TIMEOUT_S)
    except (OSError, aiosqlite.Error) as exc:
        raise DatabaseError(
            f"cannot open the SQLite database {path}: {exc} (check {ENV_VAR})"
        ) from exc
    try:
        saver = AsyncSqliteSaver(conn)
        try:
            await saver.setup()
        except aiosqlite.Error as exc:
            raise DatabaseError(f"cannot set up checkpoints in {target.display}: {exc}") from exc
        yield saver
    finally:
        await conn.close()
