"""The one place that changes LangGraph's checkpoint tables with its own SQL.

Everything else goes through the checkpointers' public API (``setup``, ``put``, ``list``,
``delete_thread``, PostgreSQL's ``prune``). What that API lacks is done here, on the tables
those savers create, declared below as ``Table`` objects (``tests/test_checkpoint_tables.py``
fails when ``setup()`` of the installed savers creates other tables or columns):

- ``keep_latest`` (SQLite; LangGraph's ``SqliteSaver`` has no ``prune``): keep the newest
  checkpoint of each namespace of a thread (checkpoint ids are time-ordered) with its pending
  writes, delete the others and their writes. The savers used here keep whole channel values per
  checkpoint (no ``DeltaChannel``), so the newest checkpoint holds the thread's full state;
- ``delete_for_runs`` (neither saver has it; the LangGraph server's ``multitask_strategy=
  "rollback"`` needs it): the checkpoints whose metadata ``run_id`` is one of the runs, their
  pending writes, and (PostgreSQL) every channel blob no remaining checkpoint refers to;
- ``copy_thread`` (neither saver has it; the server's ``threads.copy``): every checkpoint, write
  and blob of a thread under the new thread id (``thread_id`` in checkpoint metadata becomes the
  new one).

Each runs in one transaction of the audit tables' database (``persistence.database``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from persistence.database import Database, DatabaseError

_PG = sa.MetaData()
_LITE = sa.MetaData()


def _key(metadata: sa.MetaData, name: str, *columns: sa.Column[Any]) -> sa.Table:
    return sa.Table(
        name,
        metadata,
        sa.Column("thread_id", sa.Text, primary_key=True),
        sa.Column("checkpoint_ns", sa.Text, primary_key=True),
        *columns,
    )


PG_CHECKPOINTS = _key(
    _PG,
    "checkpoints",
    sa.Column("checkpoint_id", sa.Text, primary_key=True),
    sa.Column("parent_checkpoint_id", sa.Text),
    sa.Column("type", sa.Text),
    sa.Column("checkpoint", postgresql.JSONB),
    sa.Column("metadata", postgresql.JSONB),
)
PG_BLOBS = _key(
    _PG,
    "checkpoint_blobs",
    sa.Column("channel", sa.Text, primary_key=True),
    sa.Column("version", sa.Text, primary_key=True),
    sa.Column("type", sa.Text),
    sa.Column("blob", sa.LargeBinary),
)
PG_WRITES = _key(
    _PG,
    "checkpoint_writes",
    sa.Column("checkpoint_id", sa.Text, primary_key=True),
    sa.Column("task_id", sa.Text, primary_key=True),
    sa.Column("idx", sa.Integer, primary_key=True),
    sa.Column("channel", sa.Text),
    sa.Column("type", sa.Text),
    sa.Column("blob", sa.LargeBinary),
    sa.Column("task_path", sa.Text),
)
PG_MIGRATIONS = sa.Table("checkpoint_migrations", _PG, sa.Column("v", sa.Integer, primary_key=True))
"""``PostgresSaver.setup()``'s record of the migrations it applied (not touched here)."""

LITE_CHECKPOINTS = _key(
    _LITE,
    "checkpoints",
    sa.Column("checkpoint_id", sa.Text, primary_key=True),
    sa.Column("parent_checkpoint_id", sa.Text),
    sa.Column("type", sa.Text),
    sa.Column("checkpoint", sa.LargeBinary),
    sa.Column("metadata", sa.LargeBinary),
)
LITE_WRITES = _key(
    _LITE,
    "writes",
    sa.Column("checkpoint_id", sa.Text, primary_key=True),
    sa.Column("task_id", sa.Text, primary_key=True),
    sa.Column("task_path", sa.Text),
    sa.Column("idx", sa.Integer, primary_key=True),
    sa.Column("channel", sa.Text),
    sa.Column("type", sa.Text),
    sa.Column("value", sa.LargeBinary),
)

EXPECTED: dict[str, sa.MetaData] = {"postgres": _PG, "sqlite": _LITE}
"""The tables and columns each dialect's saver creates, as this module expects them."""
POSTGRES_SAVER_MIGRATIONS = 10
"""How many schema migrations ``PostgresSaver.setup()`` applies in the version this module was
written against (a new one may change what the statements here must do)."""


def _tables(conn: Connection) -> tuple[sa.Table, sa.Table, sa.Table | None]:
    """Checkpoints, writes and (PostgreSQL) blobs of the connection's dialect."""
    if conn.dialect.name == "postgresql":
        return PG_CHECKPOINTS, PG_WRITES, PG_BLOBS
    return LITE_CHECKPOINTS, LITE_WRITES, None


def _metadata_text(conn: Connection, checkpoints: sa.Table) -> ColumnElement[Any]:
    """The checkpoint's metadata as JSON text (SQLite stores it as a blob)."""
    if conn.dialect.name == "postgresql":
        return checkpoints.c.metadata
    return sa.cast(checkpoints.c.metadata, sa.Text)


def _metadata_key(conn: Connection, checkpoints: sa.Table, key: str) -> ColumnElement[Any]:
    """One key of a checkpoint's metadata, as text (NULL when it has none)."""
    if conn.dialect.name == "postgresql":
        return checkpoints.c.metadata.op("->>")(sa.literal(key))
    return sa.func.json_extract(_metadata_text(conn, checkpoints), f"$.{key}")


def _same_checkpoint(row: sa.FromClause, checkpoints: sa.FromClause) -> ColumnElement[bool]:
    return sa.and_(
        checkpoints.c.thread_id == row.c.thread_id,
        checkpoints.c.checkpoint_ns == row.c.checkpoint_ns,
        checkpoints.c.checkpoint_id == row.c.checkpoint_id,
    )


def _drop_unreferenced(conn: Connection, thread_ids: Sequence[str]) -> None:
    """Delete writes of checkpoints that are gone, and (PostgreSQL) blobs nothing refers to."""
    checkpoints, writes, blobs = _tables(conn)
    if not thread_ids:
        return
    kept = checkpoints.alias("c")
    conn.execute(
        sa.delete(writes).where(
            writes.c.thread_id.in_(list(thread_ids)),
            ~sa.exists().where(_same_checkpoint(writes, kept)),
        )
    )
    if blobs is not None:
        version = kept.c.checkpoint.op("->")(sa.literal("channel_versions")).op("->>")(
            blobs.c.channel
        )
        conn.execute(
            sa.delete(blobs).where(
                blobs.c.thread_id.in_(list(thread_ids)),
                ~sa.exists().where(
                    kept.c.thread_id == blobs.c.thread_id,
                    kept.c.checkpoint_ns == blobs.c.checkpoint_ns,
                    version == blobs.c.version,
                ),
            )
        )


def keep_latest(db: Database, thread_ids: Sequence[str]) -> None:
    """Keep only the newest checkpoint of each namespace of the threads (SQLite).

    Raises:
        DatabaseError: on PostgreSQL (whose saver prunes itself), or when the database fails.
    """
    if db.dialect != "sqlite":
        raise DatabaseError("PostgreSQL checkpoints are pruned by LangGraph's own saver")
    ids = [str(t) for t in thread_ids]
    with db.transaction() as conn:
        checkpoints, _writes, _blobs = _tables(conn)
        newer = checkpoints.alias("k")
        newest = (
            sa.select(sa.func.max(newer.c.checkpoint_id))
            .where(
                newer.c.thread_id == checkpoints.c.thread_id,
                newer.c.checkpoint_ns == checkpoints.c.checkpoint_ns,
            )
            .scalar_subquery()
        )
        conn.execute(
            sa.delete(checkpoints).where(
                checkpoints.c.thread_id.in_(ids), checkpoints.c.checkpoint_id < newest
            )
        )
        _drop_unreferenced(conn, ids)


def delete_for_runs(db: Database, run_ids: Sequence[str]) -> None:
    """Delete every checkpoint the given runs wrote, with its writes and unreferenced blobs.

    Raises:
        DatabaseError: when the database cannot be used.
    """
    ids = [str(r) for r in run_ids]
    if not ids:
        return
    with db.transaction() as conn:
        checkpoints, _writes, _blobs = _tables(conn)
        of_runs = _metadata_key(conn, checkpoints, "run_id").in_(ids)
        threads = [
            str(thread)
            for thread in conn.execute(
                sa.select(checkpoints.c.thread_id).where(of_runs).distinct()
            ).scalars()
        ]
        conn.execute(sa.delete(checkpoints).where(of_runs))
        _drop_unreferenced(conn, threads)


def copy_thread(db: Database, source_thread_id: str, target_thread_id: str) -> None:
    """Copy every checkpoint, write and blob of a thread to another thread id.

    Raises:
        DatabaseError: when the database cannot be used.
        sqlalchemy.exc.IntegrityError: when the target thread has checkpoints with the same ids.
    """
    src, dst = str(source_thread_id), str(target_thread_id)
    with db.transaction() as conn:
        checkpoints, writes, blobs = _tables(conn)
        if conn.dialect.name == "postgresql":
            has_thread: ColumnElement[bool] = checkpoints.c.metadata.has_key("thread_id")
            renamed: ColumnElement[Any] = sa.func.jsonb_set(
                checkpoints.c.metadata,
                sa.cast(sa.literal("{thread_id}"), postgresql.ARRAY(sa.Text)),
                sa.func.to_jsonb(sa.cast(sa.literal(dst), sa.Text)),
            )
        else:
            has_thread = _metadata_key(conn, checkpoints, "thread_id").is_not(None)
            renamed = sa.func.json_set(_metadata_text(conn, checkpoints), "$.thread_id", dst)
        metadata = sa.case((has_thread, renamed), else_=checkpoints.c.metadata)
        for table, changed in (
            (checkpoints, {"metadata": metadata}),
            (writes, {}),
            *([(blobs, {})] if blobs is not None else []),
        ):
            names = [column.name for column in table.columns]
            picked = [
                sa.literal(dst) if name == "thread_id" else changed.get(name, table.c[name])
                for name in names
            ]
            conn.execute(
                sa.insert(table).from_select(
                    names, sa.select(*picked).where(table.c.thread_id == src)
                )
            )
