"""PostgreSQL connection pools that fail fast, with the real reason, when the database is lost.

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

from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from persistence.database import DatabaseError, DatabaseTarget, connect_postgres

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
