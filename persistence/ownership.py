"""Which API identity owns each thread (``thread_owner``), for PostgreSQL and SQLite.

A thread belongs to the identity that created it through the HTTP API. A thread that already
has diagnoses but no owner (created by the command line) belongs to nobody the API knows: it is
never handed to an API caller.
"""

from __future__ import annotations

from typing_extensions import TypedDict

from persistence.audit import utcnow
from persistence.database import Database


class OwnedThread(TypedDict):
    """A thread an API identity owns, and when it claimed it."""

    thread_id: str
    created_at: str


class ThreadOwners:
    """Owner rows of threads."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def owner_of(self, thread_id: str) -> str | None:
        """The identity owning a thread, or None when no API identity owns it."""
        with self._db.transaction() as tx:
            rows = tx.execute("SELECT owner FROM thread_owner WHERE thread_id = %s", (thread_id,))
        return str(rows[0]["owner"]) if rows else None

    def claim(self, thread_id: str, owner: str) -> bool:
        """Make ``owner`` the owner of a new thread; True when the thread is (now) theirs.

        False when another identity owns the thread, or when the thread already has diagnoses
        recorded without an owner. Two concurrent claims of a new thread: exactly one wins.
        """
        with self._db.transaction() as tx:
            rows = tx.execute("SELECT owner FROM thread_owner WHERE thread_id = %s", (thread_id,))
            if rows:
                return str(rows[0]["owner"]) == owner
            history = tx.execute(
                "SELECT 1 AS found FROM diagnosis_session WHERE thread_id = %s LIMIT 1",
                (thread_id,),
            )
            if history:
                return False
            tx.execute(
                "INSERT INTO thread_owner (thread_id, owner, created_at) VALUES (%s, %s, %s) "
                "ON CONFLICT (thread_id) DO NOTHING",
                (thread_id, owner, utcnow()),
            )
            rows = tx.execute("SELECT owner FROM thread_owner WHERE thread_id = %s", (thread_id,))
        return bool(rows) and str(rows[0]["owner"]) == owner

    def threads_of(self, owner: str) -> list[OwnedThread]:
        """The threads an identity owns, oldest first."""
        with self._db.transaction() as tx:
            rows = tx.execute(
                "SELECT thread_id, created_at FROM thread_owner WHERE owner = %s "
                "ORDER BY created_at, thread_id",
                (owner,),
            )
        return [
            OwnedThread(thread_id=str(r["thread_id"]), created_at=str(r["created_at"]))
            for r in rows
        ]
