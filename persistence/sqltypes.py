"""Column types of the audit tables, one per kind of value, rendered by each dialect.

The tables (``persistence/tables.py``) and the migrations (``persistence/migrations/versions/``)
name these types; each dialect gets the column type the schema has always had:

| type | PostgreSQL | SQLite |
|---|---|---|
| ``Json`` | ``JSONB`` | ``TEXT`` (the JSON text) |
| ``Real`` | ``DOUBLE PRECISION`` | ``REAL`` |
| ``BigInt`` | ``BIGINT`` | ``INTEGER`` |
| ``Timestamp`` | ``TIMESTAMPTZ`` | ``TEXT`` (ISO 8601) |

Values are read back the same way in both: JSON as Python values (SQL ``NULL`` for ``None``,
never a JSON ``null``), timestamps as ISO 8601 text.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine


class Json(sa.types.TypeDecorator[Any]):
    """A JSON value: ``JSONB`` in PostgreSQL, its text in SQLite; ``None`` is SQL ``NULL``."""

    impl = sa.Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        """``JSONB`` in PostgreSQL (``None`` stored as ``NULL``), ``TEXT`` elsewhere."""
        if dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import JSONB

            return dialect.type_descriptor(JSONB(none_as_null=True))
        return dialect.type_descriptor(sa.Text())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        """The value as stored: given to the driver as it is in PostgreSQL, as text in SQLite."""
        if value is None or dialect.name == "postgresql":
            return value
        return json.dumps(value, ensure_ascii=False)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        """The stored value as Python data (SQLite's text is parsed)."""
        if isinstance(value, str | bytes) and dialect.name != "postgresql":
            return json.loads(value)
        return value


class Timestamp(sa.types.TypeDecorator[str]):
    """A point in time: ``TIMESTAMPTZ`` in PostgreSQL, ISO 8601 text in SQLite; read as text."""

    impl = sa.Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        """``TIMESTAMPTZ`` in PostgreSQL, ``TEXT`` elsewhere."""
        if dialect.name == "postgresql":
            return dialect.type_descriptor(sa.TIMESTAMP(timezone=True))
        return dialect.type_descriptor(sa.Text())

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        """ISO 8601 text (PostgreSQL's ``datetime`` values are formatted)."""
        if isinstance(value, datetime):
            return value.isoformat()
        return None if value is None else str(value)


Real: TypeEngine[float] = sa.REAL().with_variant(sa.Double(), "postgresql")
"""A floating-point number: ``DOUBLE PRECISION`` in PostgreSQL, ``REAL`` in SQLite."""

BigInt: TypeEngine[int] = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
"""A 64-bit integer: ``BIGINT`` in PostgreSQL, ``INTEGER`` (64 bits anyway) in SQLite."""
