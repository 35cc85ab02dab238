"""Database access for the audit tables: PostgreSQL in production, SQLite on a laptop.

One setting selects the database: ``SUPERBIZ_DATABASE_URL`` (or ``--db``). ``postgresql://...``
selects PostgreSQL; a file path or ``sqlite:///path`` selects SQLite; unset, an SQLite file in
the user's data directory is used, created on first use. Statements are SQLAlchemy Core,
executed on a SQLAlchemy engine: for PostgreSQL a pool of psycopg connections, for SQLite one
sqlite3 connection shared by the process's threads in turn. The schema is created and migrated
by Alembic (``persistence/migrations``); a database whose schema is newer than this code is
refused. An unreachable or misconfigured database is an error, never a silent fall-back.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import StaticPool

from state import catalog, configuration
from state.display import one_line
from state.settings import Setting, SettingsError

Dialect = Literal["postgres", "sqlite"]

ENV_VAR = catalog.DATABASE_URL.variable
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
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

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


def _reason(exc: BaseException) -> BaseException:
    """The driver's exception inside a SQLAlchemy one (the exception itself otherwise)."""
    orig = getattr(exc, "orig", None)
    return orig if isinstance(orig, BaseException) else exc


def missing_table(exc: BaseException) -> bool:
    """True for the error of a statement on a table that does not exist (a recreated database)."""
    reason = _reason(exc)
    if getattr(reason, "sqlstate", None) == "42P01":  # PostgreSQL's undefined_table
        return True
    return isinstance(reason, sqlite3.OperationalError) and "no such table" in str(reason)


class Database:
    """The audit tables' database, opened on first use: a PostgreSQL pool or an SQLite connection.

    Making one opens nothing. The first ``transaction()`` (or ``open()``, ``ping()``) resolves the
    setting, connects, checks that the database answers and brings its schema up to date, once,
    while other threads wait for it. A database that cannot be opened raises ``DatabaseError``
    with the reason and stays closed, so the next use tries again; after ``close()``, the next use
    opens it again.

    Args:
        value: ``--db``; None reads ``SUPERBIZ_DATABASE_URL`` (else the embedded default) each
            time the database is opened.
        read_only: open an existing database for reading only: nothing is created or migrated.
        migrate: False leaves the schema as it is (``superbiz db upgrade`` migrates itself).
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
    def pool_size(self) -> int | None:
        """How many connections the PostgreSQL pool holds at most (None for SQLite).

        Raises:
            DatabaseError: when ``SUPERBIZ_DB_POOL_SIZE`` is not a whole number.
        """
        return pool_size() if self.dialect == "postgres" else None

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
                self._opened = _Opened.open(
                    resolve_target(self._value), read_only=self._read_only, migrate=self._migrate
                )
            return self._opened

    @contextmanager
    def transaction(self, *, single: bool = False) -> Iterator[Connection]:
        """A connection in one transaction: committed when the block ends, rolled back on an error.

        Args:
            single: the block runs exactly one statement, which is its own transaction: no
                ``BEGIN`` and ``COMMIT`` are sent (two PostgreSQL round trips fewer for a lone
                statement; an SQLite write statement takes the write lock by itself).

        Raises:
            DatabaseError: when the database cannot be opened or lacks its tables.
        """
        opened = self._open()
        try:
            with opened.transaction(single=single) as conn:
                yield conn
        except sa.exc.DBAPIError as exc:
            if not missing_table(exc):
                raise
            raise self._recover(opened, exc) from exc

    @contextmanager
    def session(self) -> Iterator[Connection]:
        """A PostgreSQL connection of the pool held for the block, in autocommit mode.

        For what lives as long as a connection (session advisory locks).

        Raises:
            DatabaseError: when the database cannot be opened, or is SQLite.
        """
        opened = self._open()
        if opened.target.dialect != "postgres":
            raise DatabaseError("a held session is PostgreSQL's (SQLite has one connection)")
        with opened.connect() as conn:
            yield conn.execution_options(isolation_level="AUTOCOMMIT")

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
        from persistence import migrations

        opened = self._open()
        try:
            with opened.transaction(single=True) as conn:
                found = migrations.read_versions_quickly(conn) or migrations.read_versions(conn)
        except sa.exc.SQLAlchemyError as exc:
            raise DatabaseError(f"database {opened.target.display}: {exc}") from exc
        found.refuse_newer(opened.target.display)
        if not found.current:
            self._setup_again(opened)
        return migrations.latest_version()

    def setup_again(self) -> None:
        """Set up the audit tables and every ``add_setup`` table again (all idempotent).

        Raises:
            DatabaseError: when the database cannot be used.
        """
        self._setup_again(self._open())

    def _setup_again(self, opened: _Opened) -> None:
        opened.migrate()
        for setup in self._setups:
            setup(opened.target)

    def _recover(self, opened: _Opened, exc: BaseException) -> DatabaseError:
        reason = one_line(str(_reason(exc)))
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


@dataclass(eq=False)
class _Opened:
    """An open target: its engine (for SQLite also its one connection, kept, and a lock)."""

    target: DatabaseTarget
    engine: Engine
    read_only: bool = False
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _held: Connection | None = None

    @classmethod
    def open(cls, target: DatabaseTarget, *, read_only: bool, migrate: bool) -> _Opened:
        """Connect to the target, check that it answers and migrate it (closed on failure).

        A read-only target is never created nor migrated; its schema must be current.
        """
        if target.dialect == "postgres":
            opened = cls(target, _postgres_engine(target))
        else:
            opened = cls(target, _sqlite_engine(target, read_only=read_only), read_only=read_only)
        try:
            opened.ping()
            if read_only:
                opened.check_readable()
            elif migrate:
                opened.migrate_if_needed()
        except BaseException:
            opened.close()
            raise
        return opened

    def new_connection(self) -> Connection:
        """A new connection of the engine, or ``DatabaseUnavailable`` with the driver's reason."""
        try:
            return self.engine.connect()
        except sa.exc.DBAPIError as exc:
            raise connect_error(self.target, _reason(exc)) from exc
        except sa.exc.TimeoutError as exc:
            raise DatabaseUnavailable(
                f"no free connection to {self.target.display} in time: {exc} "
                f"(raise {POOL_SIZE_VAR}?)"
            ) from exc

    @contextmanager
    def connect_raw(self) -> Iterator[Connection]:
        """A pooled connection for the block (see ``new_connection``)."""
        with self.new_connection() as conn:
            yield conn

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """A connection for the block: pooled (PostgreSQL), or SQLite's, held by this thread."""
        if self.target.dialect == "postgres":
            with self.connect_raw() as conn:
                yield conn
            return
        with self._lock:
            if self._held is None or self._held.closed:
                self._held = self.new_connection()
            yield self._held

    @contextmanager
    def transaction(self, *, single: bool = False) -> Iterator[Connection]:
        postgres = self.target.dialect == "postgres"
        with self.connect() as conn:
            if postgres and not single:
                with conn.begin():
                    yield conn
                return
            if postgres:
                conn.execution_options(isolation_level="AUTOCOMMIT")
            elif not single:
                # sqlite3 runs in autocommit mode (isolation_level None): the transaction is
                # ours. An immediate one takes the write lock at once (waiting for it), so a
                # read followed by a write never fails on a snapshot another writer changed.
                conn.exec_driver_sql("BEGIN" if self.read_only else "BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.rollback()
                raise
            conn.commit()

    def ping(self) -> None:
        try:
            with self.transaction(single=True) as conn:
                conn.execute(sa.select(1))
        except sa.exc.SQLAlchemyError as exc:
            raise DatabaseUnavailable(
                f"database {self.target.display} is not reachable: {_reason(exc)}"
            ) from exc

    def check_readable(self) -> None:
        """Refuse to read a database whose schema is not this code's (nothing is changed).

        Raises:
            NoDatabase: when it has no superbiz tables yet.
            DatabaseError: when its schema is older (run ``superbiz db upgrade``) or newer.
        """
        from persistence import migrations

        with self.transaction() as conn:
            found = migrations.read_versions(conn)
        if not found.recorded:
            raise NoDatabase(f"{self.target.display} holds no superbiz records yet")
        found.refuse_newer(self.target.display)
        if found.number < migrations.latest_version():
            raise DatabaseError(
                f"database {self.target.display} has schema version {found.number}, older than "
                f"this superbiz (version {migrations.latest_version()}); run superbiz db upgrade "
                "first"
            )

    def migrate_if_needed(self) -> None:
        """Migrate unless the schema is current (one read when it is)."""
        from persistence import migrations

        with self.transaction(single=True) as conn:
            found = migrations.read_versions_quickly(conn)
        if found is None or not found.current:
            self.migrate()

    def migrate(self) -> tuple[int, int]:
        """Apply the missing migrations in one transaction; the ``(from, to)`` versions.

        Raises:
            SchemaTooNew: when the database's schema is newer than this code.
        """
        from persistence import migrations

        with self.transaction() as conn:
            return migrations.upgrade(conn, self.target.display)

    def close(self) -> None:
        with self._lock:
            held, self._held = self._held, None
        if held is not None:
            held.close()
        self.engine.dispose()


POOL_SIZE_VAR = catalog.DB_POOL_SIZE.variable
"""Connections a pool may hold open at once (default 10)."""

CONNECT_TIMEOUT_S = 5
POOL_OPEN_TIMEOUT_S = 10.0
POOL_TIMEOUT_S = 30.0
"""How long a statement waits for a free pooled connection."""
SQLITE_BUSY_TIMEOUT_S = 30.0


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


def connect_error(target: DatabaseTarget, exc: BaseException) -> DatabaseError:
    """The readable error for a database that cannot be reached (PostgreSQL) or opened (SQLite)."""
    if isinstance(exc, DatabaseError):
        return exc
    if target.dialect == "sqlite":
        return DatabaseUnavailable(
            f"cannot open the SQLite database {target.path}: {exc} (check --db or {ENV_VAR})"
        )
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return DatabaseUnavailable(
        f"cannot connect to PostgreSQL at {target.display}: {reason} (check --db or {ENV_VAR})"
    )


def _postgres_engine(target: DatabaseTarget) -> Engine:
    """The engine of a PostgreSQL target: a pool of psycopg connections, checked at checkout.

    Each connection is made by psycopg from the URL as given (``connect_timeout``,
    ``prepare_threshold=None``: no prepared statements, for transaction poolers). A pooled
    connection is checked before it is handed out (``persistence.pools.check_connection``: a
    query only when it has been idle long or the server sent something); a dead one is replaced.
    A database that cannot be reached fails the checkout at once with the server's reason,
    since the pool connects in the caller's thread.
    """
    import psycopg

    from persistence.pools import check_connection, note_returned

    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(
            target.conninfo, connect_timeout=CONNECT_TIMEOUT_S, prepare_threshold=None
        )

    engine = sa.create_engine(
        "postgresql+psycopg://",
        creator=connect,
        pool_size=pool_size(),
        max_overflow=0,
        pool_timeout=POOL_TIMEOUT_S,
        use_native_hstore=False,
    )

    def checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        try:
            check_connection(dbapi_connection)
        except psycopg.Error as exc:  # SQLAlchemy replaces it with a new connection
            raise sa.exc.DisconnectionError(str(exc)) from exc

    def returned(dbapi_connection: Any, record: Any) -> None:
        if dbapi_connection is not None:  # None: it was invalidated, and is gone
            note_returned(dbapi_connection)

    event.listen(engine, "connect", returned)  # a new connection counts as just checked
    event.listen(engine, "checkin", returned)
    event.listen(engine, "checkout", checkout)
    return engine


def _sqlite_engine(target: DatabaseTarget, *, read_only: bool) -> Engine:
    """The engine of an SQLite target: one connection (``connect_sqlite``), used in turn."""
    if read_only:
        return sa.create_engine(
            "sqlite://", creator=lambda: connect_sqlite_read_only(target), poolclass=StaticPool
        )
    return sa.create_engine(
        "sqlite://", creator=lambda: connect_sqlite(target, autocommit=True), poolclass=StaticPool
    )


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


def migrate(db: Database) -> tuple[int, int]:
    """Apply the missing migrations in one transaction; return ``(from, to)`` versions.

    Raises:
        SchemaTooNew: when the database's schema is newer than this code.
        DatabaseError: when the database cannot be used.
    """
    return db._open().migrate()


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
