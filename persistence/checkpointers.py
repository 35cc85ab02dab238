"""The LangGraph server's checkpointer, on the database the CLI and the audit tables use.

``langgraph.json`` names :func:`checkpointer` (through ``apps/langgraph_server/server.py``) under
``"checkpointer": {"path": ...}``; the server enters it once per event loop and keeps it open
while it runs. The database is chosen exactly as the CLI chooses it
(``persistence.database.resolve_target``): ``SUPERBIZ_DATABASE_URL`` naming PostgreSQL gives
LangGraph's ``AsyncPostgresSaver`` on a connection pool; unset, or naming an SQLite file, gives
``AsyncSqliteSaver`` on that same file (by default the embedded one the CLI uses). The checkpoint
tables are set up first, in a worker thread, by ``persistence.checkpoints``, which also makes the
CLI's synchronous checkpointer on the same tables. A database that cannot be reached or set up
stops the server with the reason, never a fall-back.

Both savers are LangGraph's with what the server needs and they lack: ``adelete_for_runs``
(``multitask_strategy="rollback"``) and ``acopy_thread``, and SQLite's ``aprune`` (PostgreSQL's
saver prunes itself), done by ``persistence/checkpoint_tables.py`` in a worker thread (SQLite's
``delete`` strategy by the saver's own ``adelete_thread``); and a read or write that finds no table
(the database was dropped and created again under the running server) sets the tables up again
and is retried once. The PostgreSQL pool fails fast with the reason when the database is lost
(``persistence/pools.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import aiosqlite
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from persistence import checkpoint_tables
from persistence.checkpoints import (
    PRUNE_STRATEGIES,
    setup_checkpoints,
    setup_postgres_checkpoints,
    setup_sqlite_checkpoints,
)
from persistence.database import (
    POOL_OPEN_TIMEOUT_S,
    SQLITE_BUSY_TIMEOUT_S,
    Database,
    DatabaseTarget,
    connect_error,
    missing_table,
    open_database,
    resolve_target,
)
from persistence.pools import FailFastAsyncPool, pool_error, pool_options

T = TypeVar("T")


def _value(target: DatabaseTarget) -> str:
    """The ``--db`` value naming a target."""
    return target.conninfo if target.dialect == "postgres" else str(target.path)


def _setup_all(target: DatabaseTarget) -> None:
    """Set the audit and checkpoint tables of a (recreated) database up again."""
    open_database(_value(target)).close()
    setup_checkpoints(target)


class AsyncMaintainedSaver:
    """``adelete_for_runs``, ``acopy_thread`` and the missing-table retry (async).

    Mixed in before ``AsyncPostgresSaver`` / ``AsyncSqliteSaver``; ``target`` names their
    database, ``db`` is it (opened on first use) for ``persistence/checkpoint_tables.py``.
    """

    target: DatabaseTarget
    db: Database

    async def _again(self, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except Exception as exc:
            if not missing_table(exc):
                raise
        await asyncio.to_thread(_setup_all, self.target)
        return await call()

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """``aget_tuple``, retried once after setting up missing tables again."""
        parent: Any = super()
        found: CheckpointTuple | None = await self._again(lambda: parent.aget_tuple(config))
        return found

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """``alist``, retried once (before its first item) after setting up missing tables."""
        parent: Any = super()

        async def collect() -> list[CheckpointTuple]:
            return [
                item
                async for item in parent.alist(config, filter=filter, before=before, limit=limit)
            ]

        for item in await self._again(collect):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """``aput``, retried once after setting up missing tables again."""
        parent: Any = super()
        stored: RunnableConfig = await self._again(
            lambda: parent.aput(config, checkpoint, metadata, new_versions)
        )
        return stored

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """``aput_writes``, retried once after setting up missing tables again."""
        parent: Any = super()
        await self._again(lambda: parent.aput_writes(config, writes, task_id, task_path))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) the given runs wrote (rollback)."""
        await asyncio.to_thread(
            checkpoint_tables.delete_for_runs, self.db, [str(r) for r in run_ids]
        )

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread to another thread id."""
        await asyncio.to_thread(
            checkpoint_tables.copy_thread, self.db, source_thread_id, target_thread_id
        )


class MaintainedAsyncPostgresSaver(AsyncMaintainedSaver, AsyncPostgresSaver):
    """LangGraph's ``AsyncPostgresSaver`` (which prunes itself) with the maintenance it lacks."""


class MaintainedAsyncSqliteSaver(AsyncMaintainedSaver, AsyncSqliteSaver):
    """LangGraph's ``AsyncSqliteSaver`` with the maintenance it lacks, ``aprune`` included."""

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune threads: ``keep_latest`` (newest checkpoint per namespace) or ``delete``.

        Raises:
            ValueError: for another strategy.
        """
        if strategy not in PRUNE_STRATEGIES:
            raise ValueError(f"unknown prune strategy {strategy!r}: use keep_latest or delete")
        ids = [str(t) for t in thread_ids]
        if strategy == "delete":
            for thread_id in ids:
                await self.adelete_thread(thread_id)
            return
        await asyncio.to_thread(checkpoint_tables.keep_latest, self.db, ids)


@asynccontextmanager
async def checkpointer() -> AsyncIterator[BaseCheckpointSaver[str]]:
    """Open the configured database's checkpointer for the server's lifetime.

    Yields:
        ``AsyncPostgresSaver`` for a PostgreSQL URL, else ``AsyncSqliteSaver`` on the SQLite file.

    Raises:
        DatabaseError: when the database is unreachable, misconfigured or cannot be set up.
    """
    target = resolve_target()
    db = Database(_value(target))  # for checkpoint_tables, opened on first use
    try:
        if target.dialect == "postgres":
            await asyncio.to_thread(setup_postgres_checkpoints, target)
            async with _postgres_pool(target) as pool:
                saver = MaintainedAsyncPostgresSaver(pool)
                saver.target, saver.db = target, db
                yield saver
            return
        await asyncio.to_thread(setup_sqlite_checkpoints, target)
        try:
            conn = await aiosqlite.connect(str(target.path), timeout=SQLITE_BUSY_TIMEOUT_S)
        except (OSError, aiosqlite.Error) as exc:
            raise connect_error(target, exc) from exc
        try:
            lite = MaintainedAsyncSqliteSaver(conn)
            lite.target, lite.db = target, db
            yield lite
        finally:
            await conn.close()
    finally:
        await asyncio.to_thread(db.close)


@asynccontextmanager
async def _postgres_pool(target: DatabaseTarget) -> AsyncIterator[AsyncConnectionPool[Any]]:
    pool: AsyncConnectionPool[Any] = FailFastAsyncPool(
        target.conninfo,
        target=target,
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
