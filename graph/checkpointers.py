"""The LangGraph server's checkpointer, on the database the CLI and the audit tables use.

``langgraph.json`` names :func:`checkpointer` (through ``apps/langgraph_server.py``) under
``"checkpointer": {"path": ...}``; the server enters it once per event loop and keeps it open
while it runs. The database is chosen exactly as the CLI chooses it
(``persistence.database.resolve_target``): ``SUPERBIZ_DATABASE_URL`` naming PostgreSQL gives
LangGraph's ``AsyncPostgresSaver`` on a connection pool; unset, or naming an SQLite file, gives
``AsyncSqliteSaver`` on that same file (by default the embedded one the CLI uses). The checkpoint
tables are set up first, in a worker thread, by ``persistence.checkpoints``, which also makes the
CLI's synchronous checkpointer on the same tables. A database that cannot be reached or set up
stops the server with the reason, never a fall-back.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiosqlite
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from persistence.checkpoints import setup_postgres_checkpoints, setup_sqlite_checkpoints
from persistence.database import (
    POOL_OPEN_TIMEOUT_S,
    SQLITE_BUSY_TIMEOUT_S,
    DatabaseTarget,
    connect_error,
    pool_error,
    pool_options,
    resolve_target,
)


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
        await asyncio.to_thread(setup_postgres_checkpoints, target)
        async with _postgres_pool(target) as pool:
            yield AsyncPostgresSaver(pool)
        return
    await asyncio.to_thread(setup_sqlite_checkpoints, target)
    try:
        conn = await aiosqlite.connect(str(target.path), timeout=SQLITE_BUSY_TIMEOUT_S)
    except (OSError, aiosqlite.Error) as exc:
        raise connect_error(target, exc) from exc
    try:
        yield AsyncSqliteSaver(conn)
    finally:
        await conn.close()


@asynccontextmanager
async def _postgres_pool(target: DatabaseTarget) -> AsyncIterator[AsyncConnectionPool[Any]]:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        target.conninfo,
        check=AsyncConnectionPool.check_connection,
        open=False,
        **pool_options("superbiz-checkpoints"),
    )
    try:
        try:
            await pool.open(wait=True, timeout=POOL_OPEN_TIMEOUT_S)
        except PoolTimeout as exc:
            raise pool_error(target) from exc
        yield pool
    finally:
        await pool.close()
