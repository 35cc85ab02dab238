"""Migrations by Alembic: numbered revisions in a line, databases of every older release upgraded
to exactly the schema a new one gets, and the version records both kinds of release read."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from persistence import tables
from persistence.audit import SqlAuditStore
from persistence.checkpoint_tables import EXPECTED
from persistence.database import Database, NoDatabase, SchemaTooNew, migrate, open_database
from persistence.migrations import FOLDER, latest_version, migration_names, revision_id
from tests import legacy_schema
from tests.conftest import POSTGRES_ADMIN_URL, _postgres_unavailable
from tests.sql_kit import query

LATEST = latest_version()


def test_migrations_are_numbered_revisions_in_one_line() -> None:
    script = ScriptDirectory(str(FOLDER))
    revisions = list(reversed(list(script.walk_revisions())))

    assert [r.revision for r in revisions] == [revision_id(n) for n, _ in migration_names()]
    assert [r.down_revision for r in revisions] == [None, *[r.revision for r in revisions[:-1]]]
    assert script.get_heads() == [revision_id(LATEST)]
    for revision, (number, name) in zip(revisions, migration_names(), strict=True):
        assert Path(revision.path).stem == name and name.startswith(revision_id(number))
    # The releases before Alembic had one SQL file per version under the same names.
    legacy = sorted(p.stem for p in legacy_schema.FOLDER.glob("*.sql"))
    assert [name for _, name in migration_names()][: len(legacy)] == legacy


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


@pytest.mark.parametrize("version", range(LATEST + 1))
def test_a_database_of_any_older_release_upgrades_to_the_schema_of_a_new_one(
    empty_databases: list[str], version: int
) -> None:
    old, new = empty_databases
    legacy_schema.build(old, version)
    if version:  # a diagnosis recorded by that release is kept as it was
        legacy = Database(old, migrate=False)
        query(
            legacy,
            "INSERT INTO diagnosis_session (id, thread_id, question, status, rounds, created_at, "
            "updated_at) VALUES ('d-1', 't-1', 'why?', 'done', 1, :at, :at)",
            at="2026-01-02T03:04:05.678+00:00",
        )
        legacy.close()
    db = Database(old, migrate=False)
    try:
        assert migrate(db) == (version, LATEST)
        if version:
            record = SqlAuditStore(db).get("d-1")
            assert record is not None
            assert (record["question"], record["status"], record["run_settings"]) == (
                "why?",
                "done",
                None,
            )
            assert record["created_at"].startswith("2026-01-02T03:04:05.678")
    finally:
        db.close()
    open_database(new).close()
    assert legacy_schema.schema(old) == legacy_schema.schema(new)
    for url in (old, new):
        db = Database(url, migrate=False)
        try:
            assert query(db, "SELECT version FROM superbiz_schema") == [{"version": LATEST}]
            assert query(db, f"SELECT version_num FROM {tables.REVISION_TABLE}") == [
                {"version_num": revision_id(LATEST)}
            ]
        finally:
            db.close()


def _difference(step: Any) -> tuple[str, str, str]:
    """One of Alembic's differences as (kind, table, column or constraint name)."""
    if isinstance(step, list):  # column modifications come as a list of one
        (step,) = step
        return step[0], step[2], step[3]
    kind, subject = step[0], step[-1]
    if kind in ("add_table", "remove_table"):
        return kind, subject.name, ""
    if kind in ("add_column", "remove_column"):
        return kind, step[2], subject.name
    return kind, subject.table.name, subject.name


SQLITE_ONLY_IN_DATABASE = {
    # The FTS5 table of the chunks' terms and the tables FTS5 keeps it in.
    *(
        ("remove_table", name, "")
        for name in (
            "kb_chunk_fts",
            *(f"kb_chunk_fts_{part}" for part in ("config", "content", "data", "docsize", "idx")),
        )
    ),
    # SQLite's primary keys take NULL unless declared NOT NULL, and these never were.
    *(
        ("modify_nullable", table, column)
        for table, column in (
            ("alert_investigation", "diagnosis_id"),
            ("diagnosis_lease", "diagnosis_id"),
            ("diagnosis_session", "id"),
            ("kb_chunk", "id"),
            ("kb_file", "path"),
            ("thread_lock", "thread_id"),
            ("thread_owner", "thread_id"),
        )
    ),
}
POSTGRES_ONLY_IN_DATABASE = {
    ("add_table", "thread_lock", ""),  # SQLite's thread lock rows (PostgreSQL: advisory locks)
    ("remove_column", "kb_chunk", "search"),  # the generated tsvector, queried by name
    ("remove_index", "kb_chunk", "kb_chunk_search"),
    ("remove_fk", "kb_chunk", "kb_chunk_path_fkey"),
}


def test_the_tables_module_declares_the_migrated_schema(database_url: str) -> None:
    """``persistence/tables.py`` (what statements are built from) is what the migrations made.

    Alembic compares them (tables, columns, types, nullability, defaults, indexes, unique
    constraints); the only differences are the dialect-specific parts the module leaves out.
    """
    db = open_database(database_url)
    try:
        with db.transaction() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            differences = {_difference(step) for step in compare_metadata(context, tables.metadata)}
    finally:
        db.close()
    # LangGraph's checkpoint tables share the database (other tests' checkpointers made them):
    # they are the savers' own, checked by tests/test_checkpoint_tables.py.
    saver_tables = {name for meta in EXPECTED.values() for name in meta.tables}
    differences = {step for step in differences if step[1] not in saver_tables}

    if database_url.startswith("sqlite"):
        assert differences == SQLITE_ONLY_IN_DATABASE
    else:
        assert differences == POSTGRES_ONLY_IN_DATABASE


def test_a_database_migrated_by_a_newer_release_is_refused(database_url: str) -> None:
    open_database(database_url).close()
    db = Database(database_url, migrate=False)
    update = f"UPDATE {tables.REVISION_TABLE} SET version_num = :v"
    query(db, update, v=revision_id(LATEST + 1))
    try:
        with pytest.raises(SchemaTooNew, match=f"schema version {revision_id(LATEST + 1)}, newer"):
            open_database(database_url)
        with pytest.raises(SchemaTooNew, match="newer than this superbiz"):
            open_database(database_url, read_only=True)
    finally:  # the PostgreSQL database serves the session's other tests
        query(db, update, v=revision_id(LATEST))
        db.close()


def test_a_database_of_the_last_release_before_alembic_is_read_without_a_change(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    legacy_schema.build(url, LATEST)
    before = legacy_schema.schema(url)

    db = open_database(url, read_only=True)
    try:
        assert SqlAuditStore(db).list() == []
    finally:
        db.close()

    assert legacy_schema.schema(url) == before  # read-only: not even stamped
    with sqlite3.connect(tmp_path / "old.sqlite") as conn:
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert tables.REVISION_TABLE not in names


def test_read_only_open_of_an_empty_file_says_nothing_is_recorded(tmp_path: Path) -> None:
    path = tmp_path / "empty.sqlite"
    sqlite3.connect(path).close()

    with pytest.raises(NoDatabase, match="holds no superbiz records yet"):
        open_database(f"sqlite:///{path}", read_only=True)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)


def test_version_read_is_one_statement_once_the_schema_is_current(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.sqlite'}"
    open_database(url).close()
    statements: list[str] = []
    db = Database(url)

    @sa.event.listens_for(sa.engine.Engine, "before_cursor_execute")
    def seen(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(statement)

    try:
        db.open()
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", seen)
        db.close()
    assert [s for s in statements if "superbiz" in s] == [statements[-1]]
    assert len([s for s in statements if "superbiz" in s]) == 1
