"""The migration files, one per version for both dialects, and upgrades from every older version."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from persistence.database import (
    Database,
    Dialect,
    _statements,
    latest_version,
    migrate,
    migrations,
    open_database,
)
from tests.conftest import POSTGRES_ADMIN_URL, _postgres_unavailable

LATEST = latest_version("sqlite")


@pytest.mark.parametrize(
    ("dialect", "foreign"),
    [
        ("postgres", ("AUTOINCREMENT", "fts5", "REAL", "thread_lock")),
        ("sqlite", ("JSONB", "TIMESTAMPTZ", "DOUBLE PRECISION", "BIGSERIAL", "TSVECTOR", "GIN")),
    ],
)
def test_migrations_render_each_dialect_without_the_others_words(
    dialect: Dialect, foreign: tuple[str, ...]
) -> None:
    found = migrations(dialect)
    assert [version for version, _name, _sql in found] == list(range(1, LATEST + 1))
    for _version, name, sql in found:
        assert "{" not in sql and "-- [" not in sql, name
        statements = "\n".join(_statements(sql))
        for word in foreign:
            assert word not in statements, (name, word)


def test_both_dialects_apply_the_same_versions_under_the_same_names() -> None:
    names = {
        dialect: [name for _v, name, _s in migrations(dialect)]
        for dialect in ("postgres", "sqlite")
    }
    assert names["postgres"] == names["sqlite"]


def _build(url: str, upto: int) -> None:
    """A database as a superbiz of schema version ``upto`` left it."""
    db = Database(url, migrate=False)
    try:
        with db.transaction() as tx:
            tx.execute("CREATE TABLE IF NOT EXISTS superbiz_schema (version INTEGER NOT NULL)")
            for version, _name, sql in migrations(tx.dialect):
                if version <= upto:
                    for statement in _statements(sql):
                        tx.execute(statement)
            tx.execute("INSERT INTO superbiz_schema (version) VALUES (%s)", (upto,))
    finally:
        db.close()


def _schema(url: str) -> list[Any]:
    db = Database(url, migrate=False)
    try:
        with db.transaction() as tx:
            if tx.dialect == "sqlite":
                return tx.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
            return [
                tx.execute(
                    "SELECT table_name, column_name, data_type, is_nullable, column_default, "
                    "generation_expression FROM information_schema.columns "
                    "WHERE table_schema = current_schema() ORDER BY table_name, column_name"
                ),
                tx.execute(
                    "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                    "ORDER BY indexname"
                ),
                tx.execute(
                    "SELECT conname, pg_get_constraintdef(oid) AS definition FROM pg_constraint "
                    "WHERE connamespace = current_schema()::regnamespace ORDER BY conname"
                ),
            ]
    finally:
        db.close()


@pytest.fixture(params=["sqlite", "postgres"])
def empty_databases(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    """Two new, empty databases of one dialect (PostgreSQL ones dropped afterwards)."""
    if request.param == "sqlite":
        yield [f"sqlite:///{tmp_path / 'a.sqlite'}", f"sqlite:///{tmp_path / 'b.sqlite'}"]
        return
    import psycopg

    names = [f"superbiz_test_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    try:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            for name in names:
                conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        _postgres_unavailable(str(exc).strip())
    base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0]
    try:
        yield [f"{base}/{name}" for name in names]
    finally:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            for name in names:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.parametrize("version", range(LATEST))
def test_a_database_of_any_older_version_upgrades_to_the_schema_of_a_new_one(
    empty_databases: list[str], version: int
) -> None:
    old, new = empty_databases
    _build(old, version)
    db = Database(old, migrate=False)
    try:
        assert migrate(db) == (version, LATEST)
    finally:
        db.close()
    open_database(new).close()
    assert _schema(old) == _schema(new)
    if old.startswith("sqlite:"):
        with sqlite3.connect(old.removeprefix("sqlite:///")) as conn:
            assert conn.execute("SELECT version FROM superbiz_schema").fetchall() == [(LATEST,)]
