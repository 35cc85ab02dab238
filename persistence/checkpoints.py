"""LangGraph's checkpoint tables, in the database the audit tables use, and the sync checkpointer.

The setup functions create or migrate the tables before a checkpointer is built on them: the
synchronous one here (``checkpoint_saver``, for the CLI and the HTTP API) and the LangGraph
server's asynchronous one in ``persistence/checkpointers.py``, which runs them in a worker thread.
Both kinds share the same tables, so neither calls ``setup()`` itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver

from persistence import checkpoint_tables
from persistence.database import (
    Database,
    DatabaseError,
    DatabaseTarget,
    connect_sqlite,
    missing_table,
)
from persistence.pools import connect_postgres, open_pool

T = TypeVar("T")

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


def setup_checkpoints(target: DatabaseTarget) -> None:
    """Create or migrate the checkpoint tables of either dialect.

    Raises:
        DatabaseError: when the database cannot be used or the tables cannot be set up.
    """
    if target.dialect == "postgres":
        setup_postgres_checkpoints(target)
    else:
        setup_sqlite_checkpoints(target)


class MaintainedSaver:
    """What LangGraph's savers lack: maintenance, and a retry when their tables went missing.

    ``delete_for_runs`` and ``copy_thread`` (and SQLite's ``prune``) run
    ``persistence/checkpoint_tables.py``; a read or write that finds no table (the database was
    dropped and created again under a running process) sets the tables up again and is retried
    once.

    Mixed in before ``PostgresSaver`` / ``SqliteSaver``; ``db`` is their database and
    ``recover`` sets its tables up again.
    """

    db: Database
    recover: Callable[[], None]

    def _again(self, call: Callable[[], T]) -> T:
        try:
            return call()
        except Exception as exc:
            if not missing_table(exc):
                raise
        self.recover()
        return call()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """``get_tuple``, retried once after setting up missing tables again."""
        parent: Any = super()
        found: CheckpointTuple | None = self._again(lambda: parent.get_tuple(config))
        return found

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """``list``, retried once (before its first item) after setting up missing tables."""
        parent: Any = super()
        items = self._again(
            lambda: list(parent.list(config, filter=filter, before=before, limit=limit))
        )
        yield from items

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """``put``, retried once after setting up missing tables again."""
        parent: Any = super()
        stored: RunnableConfig = self._again(
            lambda: parent.put(config, checkpoint, metadata, new_versions)
        )
        return stored

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """``put_writes``, retried once after setting up missing tables again."""
        parent: Any = super()
        self._again(lambda: parent.put_writes(config, writes, task_id, task_path))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) the given runs wrote."""
        checkpoint_tables.delete_for_runs(self.db, [str(r) for r in run_ids])

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread to another thread id."""
        checkpoint_tables.copy_thread(self.db, source_thread_id, target_thread_id)


class MaintainedPostgresSaver(MaintainedSaver, PostgresSaver):
    """LangGraph's ``PostgresSaver`` (which prunes itself) with the maintenance it lacks."""


class MaintainedSqliteSaver(MaintainedSaver, SqliteSaver):
    """LangGraph's ``SqliteSaver`` with the maintenance it lacks, ``prune`` included."""

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune threads: ``keep_latest`` (newest checkpoint per namespace) or ``delete``.

        Raises:
            ValueError: for another strategy.
        """
        prune_sqlite(self, self.db, thread_ids, strategy)


PRUNE_STRATEGIES = ("keep_latest", "delete")


def prune_sqlite(
    saver: BaseCheckpointSaver[str], db: Database, thread_ids: Sequence[str], strategy: str
) -> None:
    """``prune`` for LangGraph's SQLite savers, which have none.

    ``delete`` goes through their ``delete_thread``, ``keep_latest`` through
    ``persistence/checkpoint_tables.py``.

    Raises:
        ValueError: for an unknown strategy.
    """
    if strategy not in PRUNE_STRATEGIES:
        raise ValueError(f"unknown prune strategy {strategy!r}: use keep_latest or delete")
    ids = [str(t) for t in thread_ids]
    if strategy == "delete":
        for thread_id in ids:
            saver.delete_thread(thread_id)
        return
    checkpoint_tables.keep_latest(db, ids)


@contextmanager
def checkpoint_saver(db: Database) -> Iterator[BaseCheckpointSaver[str]]:
    """LangGraph's checkpointer on a database, its tables set up first, for the block.

    Yields:
        ``PostgresSaver`` on a psycopg pool of its own (LangGraph's savers take psycopg
        connections; the audit tables are on SQLAlchemy's pool), or ``SqliteSaver`` on a
        connection of its own to the same SQLite file (closed when the block ends).

    Raises:
        DatabaseError: when the database cannot be opened or its checkpoints set up.
    """
    target = db.target
    saver: MaintainedSaver
    if target.dialect == "postgres":
        setup_postgres_checkpoints(target)
        pool = open_pool(target, "superbiz-checkpoints")
        try:
            saver = MaintainedPostgresSaver(pool)
            saver.db, saver.recover = db, db.setup_again
            yield saver
        finally:
            pool.close()
        return
    setup_sqlite_checkpoints(target)
    conn = connect_sqlite(target, autocommit=False)
    try:
        saver = MaintainedSqliteSaver(conn)
        saver.db, saver.recover = db, db.setup_again
        yield saver
    finally:
        conn.close()
