"""Databases as the releases before Alembic left them, and a dialect-neutral view of a schema.

``tests/legacy_migrations/`` holds the SQL migration files those releases ran (one file per
version for both dialects: ``{word}`` stands for a dialect's type, lines between ``-- [postgres]``
or ``-- [sqlite]`` and the next marker are that dialect's only); ``build`` runs them as their
runner did, on the driver's own connection, up to a version.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import psycopg

FOLDER = Path(__file__).with_name("legacy_migrations")
WORDS = {
    "postgres": {
        "json": "JSONB",
        "real": "DOUBLE PRECISION",
        "bigint": "BIGINT",
        "timestamp": "TIMESTAMPTZ",
        "now_timestamp": "TIMESTAMPTZ NOT NULL DEFAULT now()",
        "serial_key": "BIGSERIAL PRIMARY KEY",
        "add_column": "ADD COLUMN IF NOT EXISTS",
    },
    "sqlite": {
        "json": "TEXT",
        "real": "REAL",
        "bigint": "INTEGER",
        "timestamp": "TEXT",
        "now_timestamp": "TEXT NOT NULL",
        "serial_key": "INTEGER PRIMARY KEY AUTOINCREMENT",
        "add_column": "ADD COLUMN",
    },
}
_SECTION = re.compile(r"^-- \[(postgres|sqlite|end)\]$")


def _statements(template: str, dialect: str) -> list[str]:
    kept, section = [], "end"
    for line in template.splitlines(keepends=True):
        marker = _SECTION.match(line.strip())
        if marker:
            section = marker.group(1)
        elif section in ("end", dialect):
            kept.append(line)
    sql = re.sub(r"\{([a-z_]+)\}", lambda w: WORDS[dialect][w.group(1)], "".join(kept))
    lines = [line for line in sql.splitlines() if not line.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def build(url: str, upto: int) -> None:
    """Make the database at ``url`` what a release of schema version ``upto`` made of it."""
    dialect = "sqlite" if url.startswith("sqlite:") else "postgres"
    statements = ["CREATE TABLE IF NOT EXISTS superbiz_schema (version INTEGER NOT NULL)"]
    for path in sorted(FOLDER.glob("*.sql")):
        if int(path.name[:4]) <= upto:
            statements += _statements(path.read_text(encoding="utf-8"), dialect)
    if dialect == "sqlite":
        with sqlite3.connect(url.removeprefix("sqlite:///")) as lite:
            for statement in statements:
                lite.execute(statement)
            lite.execute("INSERT INTO superbiz_schema (version) VALUES (?)", (upto,))
        return
    with psycopg.connect(url) as conn:  # one transaction, committed at the end
        for statement in statements:
            conn.execute(statement)
        conn.execute("INSERT INTO superbiz_schema (version) VALUES (%s)", (upto,))


def _checks(sql: str) -> list[str]:
    """The CHECK constraints of a ``CREATE TABLE`` text, whitespace normalised."""
    found, start = [], sql.find("CHECK (")
    while start != -1:
        depth, end = 0, start + len("CHECK ")
        for end in range(start + len("CHECK "), len(sql)):
            depth += {"(": 1, ")": -1}.get(sql[end], 0)
            if depth == 0:
                break
        found.append(" ".join(sql[start : end + 1].split()))
        start = sql.find("CHECK (", end)
    return found


def schema(url: str) -> Any:
    """What a database's schema is, whatever wrote the DDL.

    SQLite: every table's columns (name, declared type, not null, default, key position), its
    indexes (named ones by name; the automatic ones of keys and ``UNIQUE`` by their columns),
    foreign keys and CHECK constraints; a virtual table by its exact text. PostgreSQL: the catalog's
    columns, index definitions and constraint definitions.
    """
    if url.startswith("sqlite:"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as lite:
            described: dict[str, Any] = {}
            tables = lite.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name"
            ).fetchall()
            for name, sql in tables:
                if sql.startswith("CREATE VIRTUAL TABLE"):
                    described[name] = sql
                    continue
                indexes = []
                for _seq, index, unique, origin, partial in lite.execute(
                    f"PRAGMA index_list('{name}')"
                ):
                    columns = [r[2] for r in lite.execute(f"PRAGMA index_info('{index}')")]
                    shown = None if index.startswith("sqlite_autoindex_") else index
                    indexes.append((shown, unique, origin, partial, columns))
                described[name] = {
                    "columns": lite.execute(f"PRAGMA table_xinfo('{name}')").fetchall(),
                    "indexes": sorted(indexes, key=repr),
                    "foreign_keys": lite.execute(f"PRAGMA foreign_key_list('{name}')").fetchall(),
                    "checks": _checks(sql),
                }
            return described
    with psycopg.connect(url) as conn:
        return [
            conn.execute(
                "SELECT table_name, column_name, data_type, is_nullable, column_default, "
                "generation_expression FROM information_schema.columns "
                "WHERE table_schema = current_schema() ORDER BY table_name, column_name"
            ).fetchall(),
            conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                "ORDER BY indexname"
            ).fetchall(),
            conn.execute(
                "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE connamespace = current_schema()::regnamespace ORDER BY conname"
            ).fetchall(),
        ]
