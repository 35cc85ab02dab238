"""Maintenance of LangGraph's checkpoint tables: delete a run's checkpoints, prune, copy a thread.

LangGraph's PostgreSQL and SQLite savers do not implement ``delete_for_runs``, ``prune`` and
``copy_thread``; the LangGraph server needs them (``multitask_strategy="rollback"``, thread
history pruning, ``threads.copy``). These functions do it in SQL on the tables those savers
write, in both dialects, each in one transaction on a connection of their own:

- a run's checkpoints are the rows whose metadata ``run_id`` is the run's; their pending writes
  go with them, and (PostgreSQL) every channel blob no remaining checkpoint refers to;
- ``keep_latest`` keeps the newest checkpoint of each namespace of a thread (checkpoint ids are
  time-ordered) with its pending writes and the blobs it refers to; ``delete`` removes the
  thread's checkpoints altogether;
- a copy duplicates every checkpoint, write and blob of a thread under the new thread id (the
  ``thread_id`` in checkpoint metadata becomes the new one).

The savers used here keep whole channel values per checkpoint (no ``DeltaChannel``), so keeping
only the newest checkpoint keeps the thread's full state.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg

from persistence.database import (
    DatabaseError,
    DatabaseTarget,
    connect_postgres,
    connect_sqlite,
    sqlite_transaction,
)

STRATEGIES = ("keep_latest", "delete", "delete_all")


@dataclass
class Removed:
    """How many rows an operation deleted."""

    checkpoints: int = 0
    writes: int = 0
    blobs: int = 0

    def add(self, other: Removed) -> None:
        """Add another count to this one."""
        self.checkpoints += other.checkpoints
        self.writes += other.writes
        self.blobs += other.blobs


class _Tx:
    """A cursor in one transaction, ``%s`` placeholders in both dialects."""

    def __init__(self, dialect: str, cursor: Any) -> None:
        self.dialect = dialect
        self._cursor = cursor

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        if self.dialect == "sqlite":
            sql = sql.replace("%s", "?")
        self._cursor.execute(sql, tuple(params))
        return max(0, int(self._cursor.rowcount or 0))

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        if self.dialect == "sqlite":
            sql = sql.replace("%s", "?")
        self._cursor.execute(sql, tuple(params))
        return [
            tuple(row.values()) if isinstance(row, dict) else tuple(row)
            for row in self._cursor.fetchall()
        ]


@contextmanager
def _transaction(target: DatabaseTarget) -> Iterator[_Tx]:
    try:
        if target.dialect == "postgres":
            with connect_postgres(target) as conn, conn.transaction(), conn.cursor() as cur:
                yield _Tx("postgres", cur)
            return
        lite = connect_sqlite(target, autocommit=True)
        try:
            lite_cur = lite.cursor()
            with sqlite_transaction(lite_cur):
                yield _Tx("sqlite", lite_cur)
        finally:
            lite.close()
    except (psycopg.Error, sqlite3.Error) as exc:
        raise DatabaseError(f"checkpoint maintenance in {target.display} failed: {exc}") from exc


def _writes_table(tx: _Tx) -> str:
    return "checkpoint_writes" if tx.dialect == "postgres" else "writes"


def _run_id_of(tx: _Tx) -> str:
    if tx.dialect == "postgres":
        return "metadata->>'run_id'"
    return "json_extract(CAST(metadata AS TEXT), '$.run_id')"


def _drop_unreferenced(tx: _Tx, thread_ids: Sequence[str]) -> Removed:
    """Delete writes of checkpoints that are gone, and (PostgreSQL) blobs nothing refers to."""
    removed = Removed()
    for thread_id in thread_ids:
        removed.writes += tx.run(
            f"DELETE FROM {_writes_table(tx)} WHERE thread_id = %s AND NOT EXISTS ("
            f"SELECT 1 FROM checkpoints c WHERE c.thread_id = {_writes_table(tx)}.thread_id "
            f"AND c.checkpoint_ns = {_writes_table(tx)}.checkpoint_ns "
            f"AND c.checkpoint_id = {_writes_table(tx)}.checkpoint_id)",
            (thread_id,),
        )
        if tx.dialect == "postgres":
            removed.blobs += tx.run(
                "DELETE FROM checkpoint_blobs b WHERE b.thread_id = %s AND NOT EXISTS ("
                "SELECT 1 FROM checkpoints c WHERE c.thread_id = b.thread_id "
                "AND c.checkpoint_ns = b.checkpoint_ns "
                "AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)",
                (thread_id,),
            )
    return removed


def delete_for_runs(target: DatabaseTarget, run_ids: Sequence[str]) -> Removed:
    """Delete every checkpoint the given runs wrote, with its writes and unreferenced blobs.

    Raises:
        DatabaseError: when the database cannot be used.
    """
    ids = [str(r) for r in run_ids]
    if not ids:
        return Removed()
    with _transaction(target) as tx:
        marks = ", ".join("%s" for _ in ids)
        threads = [
            str(row[0])
            for row in tx.rows(
                f"SELECT DISTINCT thread_id FROM checkpoints WHERE {_run_id_of(tx)} IN ({marks})",
                ids,
            )
        ]
        removed = Removed(
            checkpoints=tx.run(f"DELETE FROM checkpoints WHERE {_run_id_of(tx)} IN ({marks})", ids)
        )
        removed.add(_drop_unreferenced(tx, threads))
    return removed


def prune(target: DatabaseTarget, thread_ids: Sequence[str], strategy: str) -> Removed:
    """Prune threads: ``keep_latest`` (newest checkpoint per namespace) or ``delete`` (all).

    Raises:
        ValueError: for another strategy.
        DatabaseError: when the database cannot be used.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown prune strategy {strategy!r}: use keep_latest or delete")
    ids = [str(t) for t in thread_ids]
    removed = Removed()
    with _transaction(target) as tx:
        for thread_id in ids:
            if strategy == "keep_latest":
                removed.checkpoints += tx.run(
                    "DELETE FROM checkpoints WHERE thread_id = %s AND checkpoint_id < ("
                    "SELECT MAX(k.checkpoint_id) FROM checkpoints k WHERE k.thread_id = "
                    "checkpoints.thread_id AND k.checkpoint_ns = checkpoints.checkpoint_ns)",
                    (thread_id,),
                )
            else:
                removed.checkpoints += tx.run(
                    "DELETE FROM checkpoints WHERE thread_id = %s", (thread_id,)
                )
        removed.add(_drop_unreferenced(tx, ids))
    return removed


def copy_thread(target: DatabaseTarget, source_thread_id: str, target_thread_id: str) -> int:
    """Copy every checkpoint, write and blob of a thread to another thread id; checkpoints copied.

    Raises:
        DatabaseError: when the database cannot be used (or the target thread has checkpoints
            with the same ids already).
    """
    src, dst = str(source_thread_id), str(target_thread_id)
    with _transaction(target) as tx:
        if tx.dialect == "postgres":
            metadata = (
                "CASE WHEN metadata ? 'thread_id' THEN jsonb_set(metadata, '{thread_id}', "
                "to_jsonb(%s::text)) ELSE metadata END"
            )
        else:
            metadata = (
                "CASE WHEN json_extract(CAST(metadata AS TEXT), '$.thread_id') IS NOT NULL "
                "THEN json_set(CAST(metadata AS TEXT), '$.thread_id', %s) ELSE metadata END"
            )
        copied = tx.run(
            "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
            "parent_checkpoint_id, type, checkpoint, metadata) SELECT %s, checkpoint_ns, "
            f"checkpoint_id, parent_checkpoint_id, type, checkpoint, {metadata} "
            "FROM checkpoints WHERE thread_id = %s",
            (dst, dst, src),
        )
        if tx.dialect == "postgres":
            tx.run(
                "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, "
                "blob) SELECT %s, checkpoint_ns, channel, version, type, blob "
                "FROM checkpoint_blobs WHERE thread_id = %s",
                (dst, src),
            )
            tx.run(
                "INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, "
                "task_id, idx, channel, type, blob, task_path) SELECT %s, checkpoint_ns, "
                "checkpoint_id, task_id, idx, channel, type, blob, task_path "
                "FROM checkpoint_writes WHERE thread_id = %s",
                (dst, src),
            )
        else:
            tx.run(
                "INSERT INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, "
                "idx, channel, type, value) SELECT %s, checkpoint_ns, checkpoint_id, task_id, "
                "task_path, idx, channel, type, value FROM writes WHERE thread_id = %s",
                (dst, src),
            )
        return copied
