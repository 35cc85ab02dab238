"""What a run of the graph holds while it runs: its thread's writer lock and its diagnosis's lease.

The graph takes both itself (``graph/guard.py`` around every run, the intake node for the lease of
a new diagnosis), so every entry point (command line, HTTP API, LangGraph server) is one writer per
thread and leaves no orphan. ``SqlRunLocks`` works on the database (``persistence/locks.py``,
``persistence/leases.py``); ``InMemoryRunLocks`` serves one process (tests, scenario runs).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

from persistence.database import Database
from persistence.leases import Leases, Origin
from persistence.locks import ThreadBusy, thread_lock


class RunLocks(Protocol):
    """Locks and leases of runs."""

    def hold(self, thread_id: str) -> AbstractContextManager[None]:
        """Hold the thread's writer lock for the block.

        Raises:
            ThreadBusy: when another run holds the thread.
        """
        ...

    def lease(self, diagnosis_id: str, thread_id: str) -> None:
        """Hold the lease of a diagnosis that this process runs now."""
        ...

    def current(self, thread_id: str) -> str | None:
        """The diagnosis this process leased last on a thread it holds, if any."""
        ...

    def release(self, thread_id: str) -> None:
        """Give back the leases this process holds on a thread's diagnoses."""
        ...


class _Remembered:
    """The diagnosis this process leased last on each thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: dict[str, str] = {}

    def lease(self, diagnosis_id: str, thread_id: str) -> None:
        """Remember the diagnosis the thread's run works on."""
        with self._lock:
            self._current[thread_id] = diagnosis_id

    def current(self, thread_id: str) -> str | None:
        """The diagnosis leased last on the thread by this process."""
        with self._lock:
            return self._current.get(thread_id)

    def release(self, thread_id: str) -> None:
        """Forget the thread's diagnosis."""
        with self._lock:
            self._current.pop(thread_id, None)


class InMemoryRunLocks(_Remembered):
    """Process-local locks; leases are only remembered (nothing outlives the process)."""

    def __init__(self) -> None:
        super().__init__()
        self._held: set[str] = set()

    @contextmanager
    def _hold(self, thread_id: str) -> Iterator[None]:
        with self._lock:
            if thread_id in self._held:
                raise ThreadBusy(
                    f"thread {thread_id!r} is already being diagnosed by another run; wait for "
                    "it to finish, or use another thread"
                )
            self._held.add(thread_id)
        try:
            yield
        finally:
            with self._lock:
                self._held.discard(thread_id)

    def hold(self, thread_id: str) -> AbstractContextManager[None]:
        """Hold the thread for the block (see ``RunLocks.hold``)."""
        return self._hold(thread_id)


class SqlRunLocks(_Remembered):
    """Thread locks and diagnosis leases in the database.

    Args:
        db: The database.
        origin: The entry point whose runs these are (``cli``, ``api``, ``langgraph``, ...).
    """

    def __init__(self, db: Database, *, origin: Origin) -> None:
        super().__init__()
        self._db = db
        self.leases = Leases(db, origin=origin)

    def hold(self, thread_id: str) -> AbstractContextManager[None]:
        """The thread's writer lock (``persistence.locks.thread_lock``)."""
        return thread_lock(self._db, thread_id)

    def lease(self, diagnosis_id: str, thread_id: str) -> None:
        """Take (or renew) the diagnosis's lease for this process."""
        self.leases.take(diagnosis_id, thread_id)
        super().lease(diagnosis_id, thread_id)

    def release(self, thread_id: str) -> None:
        """Give back this process's leases on the thread."""
        super().release(thread_id)
        self.leases.release_thread(thread_id)
