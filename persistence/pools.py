"""psycopg connections and pools for LangGraph's PostgreSQL checkpointers, and the health check.

LangGraph's PostgreSQL savers take a psycopg connection or pool (``autocommit``,
``prepare_threshold=None``, dict rows: ``POOL_KWARGS``); the audit tables use SQLAlchemy's pool
(``persistence/database.py``), whose checkouts run the same health check
(``check_connection``).

A psycopg pool whose database went away (dropped, renamed, server down) keeps trying to reconnect
in the background and lets every caller wait its whole timeout (30 s) before a bare
``PoolTimeout``. These pools wait a moment for a free connection (``FAST_WAIT_S``); if none comes,
they connect directly once (at most once a second, the outcome shared by the callers of that
second): a database that cannot be reached raises ``DatabaseError`` with the server's reason at
once (``database "x" does not exist``, ``connection refused``, authentication); a reachable one
only means the pool is busy, and the caller waits the rest of its timeout as usual.
"""

from __future__ import annotations

import asyncio
import select
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from persistence.database import (
    CONNECT_TIMEOUT_S,
    POOL_OPEN_TIMEOUT_S,
    DatabaseError,
    DatabaseTarget,
    DatabaseUnavailable,
    connect_error,
    pool_size,
)

POOL_KWARGS: dict[str, Any] = {
    "autocommit": True,
    "prepare_threshold": None,
    "row_factory": dict_row,
}
"""Connection settings of LangGraph's pools: autocommit (the checkpointer creates indexes
concurrently, which cannot run in a transaction), no prepared statements (``None``: a transaction
pooler may hand each transaction to another server connection), dict rows."""


def pool_options(name: str) -> dict[str, Any]:
    """Keyword arguments of every checkpointer pool, sync or async, named ``name`` in its logs.

    Raises:
        DatabaseError: when ``SUPERBIZ_DB_POOL_SIZE`` is not a whole number.
    """
    return {"kwargs": POOL_KWARGS, "min_size": 1, "max_size": pool_size(), "name": name}


def pool_error(target: DatabaseTarget) -> DatabaseError:
    """The error for a pool whose first connection did not open in time."""
    return DatabaseUnavailable(f"cannot open a connection pool to {target.display}")


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


def open_pool(target: DatabaseTarget, name: str) -> ConnectionPool[Any]:
    """An open ``FailFastPool`` on a PostgreSQL target, its first connection made.

    Raises:
        DatabaseError: with the reason when the database cannot be reached.
    """
    # A direct probe gives the real reason (refused, unknown database, auth) at once.
    connect_postgres(target).close()
    pool: ConnectionPool[Any] = FailFastPool(
        target.conninfo,
        target=target,
        check=check_connection,
        configure=note_returned,  # a new connection counts as just checked
        reset=note_returned,
        open=True,
        **pool_options(name),
    )
    try:
        pool.wait(timeout=POOL_OPEN_TIMEOUT_S)
    except PoolTimeout as exc:
        pool.close()
        raise pool_error(target) from exc
    return pool


FAST_WAIT_S = 1.0
"""How long a caller waits for a pooled connection before the database is probed."""
PROBE_EVERY_S = 1.0
"""How long one probe's outcome stands for every caller."""


IDLE_CHECK_S = 30.0
"""A pooled connection idle longer than this is checked with a query before it is handed out."""

_returned: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
"""When each pooled connection was last given back to its pool."""


def note_returned(conn: Any) -> None:
    """Pool ``configure`` and ``reset`` hook: when the connection was opened or given back."""
    _returned[conn] = time.monotonic()


def check_connection(conn: Any) -> None:
    """Pool ``check`` hook: the health check, without a round trip when it can be spared.

    A connection that the server closed (restart, ``pg_terminate_backend``, an idle timeout) has
    something to read on its socket: its termination notice or the end of the stream. An idle
    connection with nothing to read, given back less than ``IDLE_CHECK_S`` ago, is used as it is;
    any other is checked with a query (``ConnectionPool.check_connection``), which raises for a
    dead one so that the pool replaces it. Checked with a query on every checkout, the checks
    were half of a diagnosis's round trips.
    """
    returned = _returned.pop(conn, None)
    fresh = returned is not None and time.monotonic() - returned < IDLE_CHECK_S
    if fresh and not conn.closed:
        try:
            readable, _, _ = select.select([conn.fileno()], [], [], 0)
        except (OSError, ValueError):
            readable = [True]
        if not readable:
            return
    ConnectionPool.check_connection(conn)


class _Probe:
    """A direct connection attempt, its outcome shared for ``PROBE_EVERY_S``."""

    def __init__(self, target: DatabaseTarget) -> None:
        self._target = target
        self._lock = threading.Lock()
        self._at = float("-inf")
        self._error: DatabaseError | None = None

    def check(self) -> None:
        """Raise ``DatabaseError`` with the reason when the database cannot be reached."""
        with self._lock:
            if time.monotonic() - self._at > PROBE_EVERY_S:
                try:
                    connect_postgres(self._target).close()
                    self._error = None
                except DatabaseError as exc:
                    self._error = exc
                self._at = time.monotonic()
            error = self._error
        if error is not None:
            raise DatabaseError(str(error)) from error


def _waits(timeout: float | None, default: float) -> tuple[float, float]:
    total = default if timeout is None else timeout
    first = min(FAST_WAIT_S, total)
    return first, max(0.0, total - first)


class FailFastPool(ConnectionPool[Any]):
    """``ConnectionPool`` whose ``getconn`` fails fast with the reason on a lost database."""

    def __init__(self, conninfo: str, *, target: DatabaseTarget, **kwargs: Any) -> None:
        self._probe = _Probe(target)
        super().__init__(conninfo, **kwargs)

    def getconn(self, timeout: float | None = None) -> Any:
        """A connection, or ``DatabaseError`` (lost database) or ``PoolTimeout`` (busy pool)."""
        first, rest = _waits(timeout, self.timeout)
        try:
            return super().getconn(timeout=first)
        except PoolTimeout:
            if rest <= 0:
                raise
        self._probe.check()
        return super().getconn(timeout=rest)


class FailFastAsyncPool(AsyncConnectionPool[Any]):
    """``AsyncConnectionPool`` whose ``getconn`` fails fast with the reason on a lost database."""

    def __init__(self, conninfo: str, *, target: DatabaseTarget, **kwargs: Any) -> None:
        self._probe = _Probe(target)
        super().__init__(conninfo, **kwargs)

    async def getconn(self, timeout: float | None = None) -> Any:
        """A connection, or ``DatabaseError`` (lost database) or ``PoolTimeout`` (busy pool)."""
        first, rest = _waits(timeout, self.timeout)
        try:
            return await super().getconn(timeout=first)
        except PoolTimeout:
            if rest <= 0:
                raise
        check: Callable[[], None] = self._probe.check
        await asyncio.to_thread(check)
        return await super().getconn(timeout=rest)
