"""What PostgreSQL and SQLite spell differently, in one place.

Everything else is plain SQLAlchemy Core, which each dialect renders. Here:

- ``insert``: an ``INSERT`` with ``ON CONFLICT`` (both have it; SQLAlchemy builds it per dialect);
- advisory locks: PostgreSQL's; in SQLite a write transaction (``BEGIN IMMEDIATE``) already
  excludes every other writer, so they are not needed there;
- ``merge_json_key``: one JSON object's key replaced in place, ``jsonb`` operators in
  PostgreSQL, the JSON1 functions in SQLite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

if TYPE_CHECKING:
    from sqlalchemy.dialects import postgresql, sqlite


def is_postgres(conn: Connection) -> bool:
    """True on a PostgreSQL connection."""
    return conn.dialect.name == "postgresql"


def insert(conn: Connection | str, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
    """An ``INSERT`` into ``table`` that can take ``on_conflict_do_nothing`` / ``_do_update``.

    Args:
        conn: The connection it runs on, or its dialect's name.
        table: The table.
    """
    name = conn if isinstance(conn, str) else conn.dialect.name
    if name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as postgres_insert

        return postgres_insert(table)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table)


def advisory_xact_lock(conn: Connection, *keys: int) -> None:
    """Wait for a PostgreSQL advisory lock held until the transaction ends (no-op in SQLite).

    Args:
        conn: A connection inside a transaction.
        keys: One 64-bit key, or two 32-bit keys.
    """
    if is_postgres(conn):
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(*_keys(keys))))


def try_advisory_lock(conn: Connection, *keys: int) -> bool:
    """Take a PostgreSQL session advisory lock if it is free; whether it was taken."""
    return bool(conn.execute(sa.select(sa.func.pg_try_advisory_lock(*_keys(keys)))).scalar())


def advisory_unlock(conn: Connection, *keys: int) -> None:
    """Release a PostgreSQL session advisory lock this connection holds."""
    conn.execute(sa.select(sa.func.pg_advisory_unlock(*_keys(keys))))


def _keys(keys: tuple[int, ...]) -> list[ColumnElement[Any]]:
    if len(keys) == 1:
        return [sa.cast(sa.literal(keys[0]), sa.BigInteger)]
    return [sa.cast(sa.literal(key), sa.Integer) for key in keys]


def merge_json_key(dialect: str, column: sa.Column[Any]) -> ColumnElement[Any]:
    """``column`` (a JSON object, or ``{}`` when it is not one) with one key set.

    The key and its value are bound parameters (``json_key_params`` gives them).

    Args:
        dialect: The dialect's name.
        column: A ``persistence.sqltypes.Json`` column.
    """
    value = sa.bindparam("json_value", type_=column.type)
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import JSONB

        base = sa.case(
            (sa.func.jsonb_typeof(column) == "object", column),
            else_=sa.cast(sa.literal("{}"), JSONB),
        )
        key = sa.bindparam("json_key", type_=sa.Text)
        added = sa.func.jsonb_build_object(key, sa.cast(value, JSONB))
        return base.op("||")(added)
    base = sa.case((sa.func.json_type(column) == "object", column), else_=sa.literal("{}"))
    path = sa.bindparam("json_path", type_=sa.Text)
    return sa.func.json_set(base, path, sa.func.json(value))


def json_key_params(key: str, value: Any) -> dict[str, Any]:
    """The bound parameters of ``merge_json_key`` for one key and its value.

    Raises:
        ValueError: for a key that is not letters, digits and ``_``.
    """
    if not key.replace("_", "").isalnum() or not key.isascii():
        raise ValueError(f"a JSON key to merge must be letters, digits and _, got {key!r}")
    return {"json_key": key, "json_path": f"$.{key}", "json_value": value}
