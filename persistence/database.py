"""Database access for the audit tables: PostgreSQL in production, SQLite on a laptop.

One setting selects the database: ``SUPERBIZ_DATABASE_URL`` (or ``--db``). ``postgresql://...``
selects PostgreSQL; a file path or ``sqlite:///path`` selects SQLite; unset, an SQLite file in
the user's data directory is used, created on first use. The schema is created and migrated by the
versioned SQL files in ``persistence/migrations/versions/`` (one file per version, written for
both dialects: see ``migrations``); a database whose schema is newer than this code is refused.
An unreachable or misconfigured database is an error, never a silent fall-back.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool, PoolTimeout

from state import catalog, configuration
from state.display import one_line
from state.settings import Setting, SettingsError

Dialect = Literal["postgres", "sqlite"]

ENV_VAR = catalog.DATABASE_URL.variable
MIGRATION_LOCK_KEY = 0x5B12_0001
"""PostgreSQL advisory lock held by the transaction that migrates the audit tables."""
_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_PASSWORD = re.compile(r"(://[^:/@]+:)[^@]+@")


class DatabaseError(RuntimeError):
    """The database cannot be used; the message says why and how to fix it."""


class SchemaTooNew(DatabaseError):
    """The database was migrated by a newer version of superbiz."""


class DatabaseUnavailable(DatabaseError):
    """The database does not answer or cannot be opened (a dependency that is down)."""


class NoDatabase(DatabaseError):
    """A read-only command found no database: nothing has been recorded there yet."""


@dataclass(frozen=True)
class DatabaseTarget:
    """Where the data lives."""

    dialect: Dialect
    conninfo: str = ""
    path: Path | None = None

    @property
    def display(self) -> str:
        """The target for messages, with any password hidden (an SQLite file by its path)."""
        if self.dialect == "postgres":
            return _PASSWORD.sub(r"\1***@", self.conninfo)
        return f"SQLite file {self.path}"


def default_sqlite_path() -> Path:
    """The embedded default: ``$XDG_DATA_HOME/superbiz/superbiz.sqlite`` (or ~/.local/share)."""
    base = configuration.other_variable("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "superbiz" / "superbiz.sqlite"


def resolve_target(value: str | None = None) -> DatabaseTarget:
    """Turn ``--db`` / ``SUPERBIZ_DATABASE_URL`` (or nothing) into a database target.

    Raises:
        DatabaseError: for a URL scheme that is neither PostgreSQL nor SQLite.
    """
    raw = (value if value is not None else configuration.value(catalog.DATABASE_URL) or "").strip()
    if not raw:
        return DatabaseTarget("sqlite", path=default_sqlite_path())
    if raw.startswith(("postgresql://", "postgres://")):
        _require_database_name(raw)
        return DatabaseTarget("postgres", conninfo=raw)
    if raw.startswith("sqlite:"):
        return DatabaseTarget("sqlite", path=_sqlite_url_path(raw))
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", raw):
        scheme = raw.split("://", 1)[0]
        raise DatabaseError(
            f"unsupported database URL scheme {scheme!r}: use postgresql://user@host/db, "
            "sqlite:///path/to/file.sqlite or a file path"
        )
    return DatabaseTarget("sqlite", path=Path(os.path.abspath(Path(raw).expanduser())))


SQLITE_URL_FORMS = (
    "sqlite:///relative/file.sqlite (relative to the current folder) or "
    "sqlite:////absolute/file.sqlite"
)


def _sqlite_url_path(raw: str) -> Path:
    """The file of an SQLite URL, made absolute.

    SQLAlchemy's forms: three slashes and a relative path, or four slashes (three and an
    absolute path); ``~`` is expanded.

    Raises:
        DatabaseError: for an in-memory URL, no path, or query parameters.
    """
    if not raw.startswith("sqlite:///"):
        raise DatabaseError(
            f"{raw!r} names no SQLite file (an in-memory database would lose every record); "
            f"use {SQLITE_URL_FORMS}"
        )
    rest = raw[len("sqlite:///") :]
    if "?" in rest:
        raise DatabaseError(
            f"SQLite URL options are not supported ({raw!r}); use {SQLITE_URL_FORMS}"
        )
    if not rest or rest == ":memory:":
        raise DatabaseError(f"{raw!r} names no SQLite file; use {SQLITE_URL_FORMS}")
    return Path(os.path.abspath(Path(rest).expanduser()))


def _require_database_name(url: str) -> None:
    """Refuse a PostgreSQL URL without a database name (it would write into ``postgres``).

    Raises:
        DatabaseError: with the URL to use instead.
    """
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise DatabaseError(f"invalid PostgreSQL URL: {exc}") from exc
    if params.get("dbname"):
        return
    shown = _PASSWORD.sub(r"\1***@", url).rstrip("/")
    raise DatabaseError(
        f"the PostgreSQL URL {shown} names no database, so the server's default database "
        f"(usually the 'postgres' system database) would be written to; add the name, e.g. "
        f"{shown}/superbiz (create it first: createdb superbiz)"
    )


class Transaction:
    """Runs statements inside one transaction; ``%s`` placeholders in both dialects."""

    def __init__(self, dialect: Dialect, cursor: Any) -> None:
        self.dialect = dialect
        self._cursor = cursor

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Execute one statement and return its rows as dicts (empty for none)."""
        if self.dialect == "sqlite":
            self._cursor.execute(sql.replace("%s", "?"), tuple(params))
            if self._cursor.description is None:
                return []
            names = [d[0] for d in self._cursor.description]
            return [dict(zip(names, row, strict=True)) for row in self._cursor.fetchall()]
        self._cursor.execute(sql, tuple(params))
        if self._cursor.description is None:
            return []
        return [_plain_row(row) for row in self._cursor.fetchall()]

    def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Execute one statement once per parameter row (no result rows)."""
        if not rows:
            return
        if self.dialect == "sqlite":
            self._cursor.executemany(sql.replace("%s", "?"), [tuple(r) for r in rows])
            return
        self._cursor.executemany(sql, [tuple(r) for r in rows])

    def json(self, value: Any) -> Any:
        """A JSON parameter for this dialect."""
        if value is None:
            return None
        return Jsonb(value) if self.dialect == "postgres" else json.dumps(value, ensure_ascii=False)


def _plain_row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()}


def load_json(value: Any) -> Any:
    """Read a JSON column (text in SQLite, already decoded in PostgreSQL)."""
    if isinstance(value, str):
        return json.loads(value)
    return value


class Database:
    """The audit tables' database, opened on first use: a PostgreSQL pool or an SQLite connection.

    Making one opens nothing. The first ``transaction()`` (or ``open()``, ``ping()``, ``pool``)
    resolves the setting, connects, checks that the database answers and brings its schema up to
    date, once, while other threads wait for it. A database that cannot be opened raises
    ``DatabaseError`` with the reason and stays closed, so the next use tries again; after
    ``close()``, the next use opens it again.

    Args:
        value: ``--db``; None reads ``SUPERBIZ_DATABASE_URL`` (else the embedded default) each
            time the database is opened.
    """

    def __init__(
        self, value: str | None = None, *, read_only: bool = False, migrate: bool = True
    ) -> None:
        self._value = value
        self._read_only = read_only
        self._migrate = migrate and not read_only
        self._lock = threading.Lock()
        self._opened: _Opened | None = None
        self._setups: list[Callable[[DatabaseTarget], None]] = []

    @property
    def target(self) -> DatabaseTarget:
        """Where the data lives: the open target, else the one the setting names now.

        Raises:
            DatabaseError: for a URL scheme that is neither PostgreSQL nor SQLite.
        """
        opened = self._opened
        return opened.target if opened is not None else resolve_target(self._value)

    @property
    def dialect(self) -> Dialect:
        """The dialect of ``target``."""
        return self.target.dialect

    @property
    def pool(self) -> ConnectionPool[Any] | None:
        """The PostgreSQL pool (None for SQLite), opening the database if needed."""
        return self._open().pool

    def open(self) -> None:
        """Open the database now unless it is open.

        Raises:
            DatabaseError: when the database is unreachable, misconfigured or too new.
        """
        self._open()

    def _open(self) -> _Opened:
        opened = self._opened
        if opened is not None:
            return opened
        with self._lock:
            if self._opened is None:
                self._opened = _Opened.connect(
                    resolve_target(self._value), read_only=self._read_only, migrate=self._migrate
                )
            return self._opened

    @contextmanager
    def transaction(self, *, single: bool = False) -> Iterator[Transaction]:
        """One transaction: committed when the block ends, rolled back on an exception.

        Args:
            single: the block runs exactly one statement. On PostgreSQL (autocommit) that
                statement is its own transaction, so no ``BEGIN`` and ``COMMIT`` are sent: two
                round trips fewer for a lone read.

        Raises:
            DatabaseError: when the database cannot be opened.
        """
        opened = self._open()
        try:
            with opened.transaction(single=single) as tx:
                yield tx
        except (psycopg.errors.UndefinedTable, sqlite3.OperationalError) as exc:
            if not _missing_table(exc):
                raise
            raise self._recover(opened, exc) from exc

    def add_setup(self, setup: Callable[[DatabaseTarget], None]) -> None:
        """Run ``setup(target)`` again whenever the tables are set up again (see ``check_schema``).

        For tables beside the audit tables in the same database (LangGraph's checkpoints).
        """
        self._setups.append(setup)

    def check_schema(self) -> int:
        """The schema version, after setting the tables up again if they are missing or older.

        A database that was dropped and created again (empty), or migrated back, is set up again
        here, so a running process picks it up without a restart.

        Raises:
            SchemaTooNew: when a newer superbiz migrated the database.
            DatabaseError: when the database cannot be used.
        """
        opened = self._open()
        latest = latest_version(opened.target.dialect)
        try:
            with opened.transaction() as tx:
                rows = tx.execute("SELECT version FROM superbiz_schema")
            current = _version(rows)
        except (psycopg.errors.UndefinedTable, sqlite3.OperationalError) as exc:
            if not _missing_table(exc):
                raise DatabaseError(f"database {opened.target.display}: {exc}") from exc
            current = 0
        except (psycopg.Error, PoolTimeout) as exc:
            raise DatabaseError(f"database {opened.target.display}: {exc}") from exc
        _refuse_newer(opened.target, current, latest)
        if current < latest:
            self._setup_again(opened)
        return latest

    def setup_again(self) -> None:
        """Set up the audit tables and every ``add_setup`` table again (all idempotent).

        Raises:
            DatabaseError: when the database cannot be used.
        """
        self._setup_again(self._open())

    def _setup_again(self, opened: _Opened) -> None:
        _migrate(opened.target, opened.transaction)
        for setup in self._setups:
            setup(opened.target)

    def _recover(self, opened: _Opened, exc: BaseException) -> DatabaseError:
        reason = one_line(str(exc))
        try:
            self._setup_again(opened)
        except Exception as again:  # the original reason stays the message
            return DatabaseError(
                f"database {opened.target.display} lacks its tables ({reason}) and they could "
                f"not be set up again: {again}"
            )
        return DatabaseError(
            f"database {opened.target.display} lacked its tables ({reason}; was it recreated?); "
            "they have been set up again: retry"
        )

    def ping(self) -> None:
        """Raise ``DatabaseError`` when the database cannot answer a trivial query."""
        self._open().ping()

    def close(self) -> None:
        """Close the pool or connection, if open."""
        with self._lock:
            opened, self._opened = self._opened, None
        if opened is not None:
            opened.close()


def _missing_table(exc: BaseException) -> bool:
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return True
    return isinstance(exc, sqlite3.OperationalError) and "no such table" in str(exc)


@dataclass(eq=False)
class _Opened:
    """An open target: its PostgreSQL pool, or its SQLite connection and that one's lock."""

    target: DatabaseTarget
    pool: ConnectionPool[Any] | None = None
    sqlite: sqlite3.Connection | None = None
    read_only: bool = False
    _lock: threading.RLock = field(default_factory=threading.RLock)

    @classmethod
    def connect(cls, target: DatabaseTarget, *, read_only: bool, migrate: bool) -> _Opened:
        """Connect to the target, check that it answers and migrate it (closed on failure).

        A read-only target is never created nor migrated; its schema must be current.
        """
        if target.dialect == "postgres":
            opened = cls(target, pool=_open_pool(target))
        elif read_only:
            opened = cls(target, sqlite=connect_sqlite_read_only(target), read_only=True)
        else:
            opened = cls(target, sqlite=connect_sqlite(target, autocommit=True))
        try:
            opened.ping()
            if read_only:
                _check_readable(target, opened.transaction)
            elif migrate:
                _migrate(target, opened.transaction)
        except BaseException:
            opened.close()
            raise
        return opened

    @contextmanager
    def transaction(self, *, single: bool = False) -> Iterator[Transaction]:
        if self.pool is not None:
            if single:
                with self.pool.connection() as conn, conn.cursor() as cur:
                    yield Transaction("postgres", cur)
                return
            with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                yield Transaction("postgres", cur)
            return
        assert self.sqlite is not None
        with self._lock:
            cur = self.sqlite.cursor()
            if single:  # autocommit: the one statement is its own transaction
                yield Transaction("sqlite", cur)
                return
            with sqlite_transaction(cur, "BEGIN" if self.read_only else "BEGIN IMMEDIATE"):
                yield Transaction("sqlite", cur)

    def ping(self) -> None:
        try:
            with self.transaction() as tx:
                tx.execute("SELECT 1")
        except (psycopg.Error, PoolTimeout, sqlite3.Error) as exc:
            raise DatabaseUnavailable(
                f"database {self.target.display} is not reachable: {exc}"
            ) from exc

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        if self.sqlite is not None:
            self.sqlite.close()


@contextmanager
def sqlite_transaction(cur: sqlite3.Cursor, begin: str = "BEGIN IMMEDIATE") -> Iterator[None]:
    """One transaction on an autocommit SQLite connection's cursor.

    ``begin`` starts it; it is committed when the block ends, rolled back on an exception.
    """
    cur.execute(begin)
    try:
        yield
    except BaseException:
        cur.execute("ROLLBACK")
        raise
    cur.execute("COMMIT")


POOL_SIZE_VAR = catalog.DB_POOL_SIZE.variable
"""Connections a pool may hold open at once (default 10)."""

CONNECT_TIMEOUT_S = 5
POOL_OPEN_TIMEOUT_S = 10.0
SQLITE_BUSY_TIMEOUT_S = 30.0

POOL_KWARGS: dict[str, Any] = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
"""Connection settings of every pool: autocommit (the checkpointer creates indexes
concurrently, which cannot run in a transaction), no prepared statements (poolers), dict rows."""


def pool_size() -> int:
    """The configured pool size, at least 1.

    Raises:
        DatabaseError: when ``SUPERBIZ_DB_POOL_SIZE`` is not a whole number.
    """
    value: int = setting_value(catalog.DB_POOL_SIZE)
    return value


def setting_value(setting: Setting) -> Any:
    """The checked value of one of the database's settings (``state/catalog.py``).

    Raises:
        DatabaseError: naming the variable, for a value its rule does not allow.
    """
    try:
        return configuration.value(setting)
    except SettingsError as exc:
        raise DatabaseError(str(exc)) from None


def pool_options(name: str) -> dict[str, Any]:
    """Keyword arguments of every connection pool, sync or async, named ``name`` in its logs.

    Raises:
        DatabaseError: when ``SUPERBIZ_DB_POOL_SIZE`` is not a whole number.
    """
    return {"kwargs": POOL_KWARGS, "min_size": 1, "max_size": pool_size(), "name": name}


def pool_error(target: DatabaseTarget) -> DatabaseError:
    """The error for a pool whose first connection did not open in time."""
    return DatabaseUnavailable(f"cannot open a connection pool to {target.display}")


def connect_error(target: DatabaseTarget, exc: BaseException) -> DatabaseError:
    """The readable error for a database that cannot be reached (PostgreSQL) or opened (SQLite)."""
    if target.dialect == "sqlite":
        return DatabaseUnavailable(
            f"cannot open the SQLite database {target.path}: {exc} (check --db or {ENV_VAR})"
        )
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return DatabaseUnavailable(
        f"cannot connect to PostgreSQL at {target.display}: {reason} (check --db or {ENV_VAR})"
    )


def connect_postgres(target: DatabaseTarget) -> psycopg.Connection[Any]:
    """A direct connection to a PostgreSQL target, with the pools' settings (``POOL_KWARGS``).

    Raises:
        DatabaseError: with the real reason (refused, unknown database, authentication).
    """
    try:
        conn: psycopg.Connection[Any] = psycopg.connect(
            target.conninfo, connect_timeout=CONNECT_TIMEOUT_S, **POOL_KWARGS
        )
    except psycopg.Error as exc:
        raise connect_error(target, exc) from exc
    return conn


def _open_pool(target: DatabaseTarget) -> ConnectionPool[Any]:
    # A direct probe gives the real reason (refused, unknown database, auth) at once.
    connect_postgres(target).close()
    from persistence.pools import FailFastPool, check_connection, note_returned

    pool: ConnectionPool[Any] = FailFastPool(
        target.conninfo,
        target=target,
        check=check_connection,
        configure=note_returned,  # a new connection counts as just checked
        reset=note_returned,
        open=True,
        **pool_options("superbiz"),
    )
    try:
        pool.wait(timeout=POOL_OPEN_TIMEOUT_S)
    except PoolTimeout as exc:
        pool.close()
        raise pool_error(target) from exc
    return pool


def connect_sqlite(target: DatabaseTarget, *, autocommit: bool) -> sqlite3.Connection:
    """A connection to an SQLite target, usable from any thread, in WAL mode; waits 30 s for locks.

    The file and its folder are created when missing.

    Args:
        target: an SQLite target.
        autocommit: True: no implicit transactions, the caller writes ``BEGIN`` (the audit
            tables); False: Python's implicit transactions (what LangGraph's ``SqliteSaver``
            commits).

    Raises:
        DatabaseError: when the file cannot be created or opened.
    """
    assert target.path is not None
    try:
        target.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            str(target.path), check_same_thread=False, timeout=SQLITE_BUSY_TIMEOUT_S
        )
        if autocommit:
            conn.isolation_level = None
        conn.execute("PRAGMA journal_mode=WAL")
        # In WAL mode NORMAL syncs at checkpoints, not at every commit: a crash of the process
        # (or a kill) loses nothing committed; a power cut may lose the last commits, never
        # corrupt the file. Every commit waited for an fsync before.
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
    except (OSError, sqlite3.Error) as exc:
        raise connect_error(target, exc) from exc
    return conn


def connect_sqlite_read_only(target: DatabaseTarget) -> sqlite3.Connection:
    """A read-only connection to an existing SQLite file (never created).

    It works on a read-only file, and in a read-only folder.

    Raises:
        NoDatabase: when the file does not exist.
        DatabaseUnavailable: when it cannot be opened.
    """
    assert target.path is not None
    if not target.path.is_file():
        raise NoDatabase(
            f"no database at {target.path}: nothing has been recorded there yet "
            f"(check --db or {ENV_VAR})"
        )
    uri = target.path.as_uri()
    try:
        conn = sqlite3.connect(
            f"{uri}?mode=ro", uri=True, check_same_thread=False, timeout=SQLITE_BUSY_TIMEOUT_S
        )
        conn.isolation_level = None
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error:
        # A WAL file whose folder cannot be written: read the file as it is, unshared.
        try:
            conn = sqlite3.connect(f"{uri}?immutable=1", uri=True, check_same_thread=False)
            conn.isolation_level = None
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.Error as exc:
            raise connect_error(target, exc) from exc
    return conn


def _check_readable(
    target: DatabaseTarget, transaction: Callable[[], AbstractContextManager[Transaction]]
) -> None:
    """Refuse to read a database whose schema is not this code's (nothing is changed).

    Raises:
        NoDatabase: when it has no superbiz tables yet.
        DatabaseError: when its schema is older (run ``superbiz db upgrade``) or newer.
    """
    latest = latest_version(target.dialect)
    with transaction() as tx:
        if target.dialect == "sqlite":
            found = tx.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'superbiz_schema'"
            )
        else:
            found = tx.execute("SELECT to_regclass('superbiz_schema') AS name")
            found = [row for row in found if row["name"]]
        if not found:
            raise NoDatabase(f"{target.display} holds no superbiz records yet")
        rows = tx.execute("SELECT version FROM superbiz_schema")
    current = _version(rows)
    _refuse_newer(target, current, latest)
    if current < latest:
        raise DatabaseError(
            f"database {target.display} has schema version {current}, older than this "
            f"superbiz (version {latest}); run superbiz db upgrade first"
        )


DIALECT_WORDS: dict[Dialect, dict[str, str]] = {
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
"""What each ``{word}`` of a migration stands for in each dialect. ``now_timestamp`` is a
required timestamp that PostgreSQL fills with ``now()`` (SQLite's rows are written with one);
SQLite's ``ADD COLUMN`` has no ``IF NOT EXISTS`` (the version number guards it)."""

_WORD = re.compile(r"\{([a-z_]+)\}")
_SECTION = re.compile(r"^-- \[(postgres|sqlite|end)\]$")


def migrations(dialect: Dialect) -> list[tuple[int, str, str]]:
    """The bundled migrations as a dialect runs them: ``(version, name, sql)`` in order.

    One file per version (``persistence/migrations/versions/``) serves both dialects: each
    ``{word}`` in it stands for the dialect's ``DIALECT_WORDS[word]``, and the lines after a
    ``-- [postgres]`` (or ``-- [sqlite]``) line, up to the next such line or ``-- [end]``, are
    that dialect's only.
    """
    folder = resources.files("persistence").joinpath("migrations", "versions")
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            sql = _for_dialect(entry.read_text(encoding="utf-8"), dialect)
            found.append((int(match.group(1)), entry.name, sql))
    return sorted(found)


def _for_dialect(template: str, dialect: Dialect) -> str:
    """A migration file's text as one dialect runs it (see ``migrations``)."""
    kept, section = [], "end"
    for line in template.splitlines(keepends=True):
        marker = _SECTION.match(line.strip())
        if marker:
            section = marker.group(1)
        elif section in ("end", dialect):
            kept.append(line)
    words = DIALECT_WORDS[dialect]
    return _WORD.sub(lambda word: words[word.group(1)], "".join(kept))


def latest_version(dialect: Dialect) -> int:
    """The schema version this code expects."""
    found = migrations(dialect)
    return found[-1][0] if found else 0


def _version(rows: list[dict[str, Any]]) -> int:
    """The schema version in ``superbiz_schema``'s rows (0 for none)."""
    return int(rows[0]["version"]) if rows else 0


def _refuse_newer(target: DatabaseTarget, current: int, latest: int) -> None:
    """Raise ``SchemaTooNew`` when the database's schema version is newer than this code's."""
    if current > latest:
        raise SchemaTooNew(
            f"database {target.display} has schema version {current}, newer than this "
            f"superbiz (version {latest}); upgrade superbiz before using this database"
        )


def _statements(sql: str) -> list[str]:
    lines = [line for line in sql.splitlines() if not line.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def migrate(db: Database) -> tuple[int, int]:
    """Apply the missing migrations in one transaction; return ``(from, to)`` versions.

    Raises:
        SchemaTooNew: when the database's schema is newer than this code.
    """
    return _migrate(db.target, db.transaction)


def _migrate(
    target: DatabaseTarget, transaction: Callable[[], AbstractContextManager[Transaction]]
) -> tuple[int, int]:
    latest = latest_version(target.dialect)
    with transaction() as tx:
        if tx.dialect == "postgres":
            tx.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
        tx.execute("CREATE TABLE IF NOT EXISTS superbiz_schema (version INTEGER NOT NULL)")
        rows = tx.execute("SELECT version FROM superbiz_schema")
        current = _version(rows)
        _refuse_newer(target, current, latest)
        for version, _name, sql in migrations(tx.dialect):
            if version <= current:
                continue
            for statement in _statements(sql):
                tx.execute(statement)
        if not rows:
            tx.execute("INSERT INTO superbiz_schema (version) VALUES (%s)", (latest,))
        elif latest != current:
            tx.execute("UPDATE superbiz_schema SET version = %s", (latest,))
    return current, latest


def open_database(
    value: str | None = None, *, read_only: bool = False, migrate: bool = True
) -> Database:
    """Connect to the configured database now and bring its schema up to date.

    Args:
        value: ``--db``; None reads ``SUPERBIZ_DATABASE_URL`` (else the embedded default).
        read_only: open an existing database for reading only: nothing is created or
            migrated (``NoDatabase`` when there is none).
        migrate: False leaves the schema as it is (``superbiz db upgrade`` migrates itself).

    Raises:
        DatabaseError: when the database is unreachable, misconfigured or too new.
    """
    db = Database(value, read_only=read_only, migrate=migrate)
    db.open()
    return db
