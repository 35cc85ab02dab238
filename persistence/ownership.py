"""Which API identity owns each thread (``thread_owner``), for PostgreSQL and SQLite.

A thread belongs to the identity that created it through the HTTP API. A thread that already
has diagnoses but no owner (created by the command line) belongs to nobody the API knows: it is
never handed to an API caller.
"""

from __future__ import annotations

import sqlalchemy as sa
from typing_extensions import TypedDict

from persistence import dialects, tables
from persistence.audit import utcnow
from persistence.database import Database


class OwnedThread(TypedDict):
    """A thread an API identity owns, and when it claimed it."""

    thread_id: str
    created_at: str


_OWNER = tables.thread_owner
_SESSION = tables.diagnosis_session
_OWNER_OF = sa.select(_OWNER.c.owner).where(_OWNER.c.thread_id == sa.bindparam("thread_id"))


class ThreadOwners:
    """Owner rows of threads."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def owner_of(self, thread_id: str) -> str | None:
        """The identity owning a thread, or None when no API identity owns it."""
        with self._db.transaction(single=True) as conn:
            owner = conn.execute(_OWNER_OF, {"thread_id": thread_id}).scalar()
        return None if owner is None else str(owner)

    def claim(self, thread_id: str, owner: str) -> bool:
        """Make ``owner`` the owner of a new thread; True when the thread is (now) theirs.

        False when another identity owns the thread, or when the thread already has diagnoses
        recorded without an owner. Two concurrent claims of a new thread: exactly one wins.
        """
        with self._db.transaction() as conn:
            found = conn.execute(_OWNER_OF, {"thread_id": thread_id}).scalar()
            if found is not None:
                return str(found) == owner
            history = conn.execute(
                sa.select(sa.literal(1)).where(_SESSION.c.thread_id == thread_id).limit(1)
            ).first()
            if history is not None:
                return False
            conn.execute(
                dialects.insert(conn, _OWNER)
                .values(thread_id=thread_id, owner=owner, created_at=utcnow())
                .on_conflict_do_nothing(index_elements=["thread_id"])
            )
            found = conn.execute(_OWNER_OF, {"thread_id": thread_id}).scalar()
        return found is not None and str(found) == owner

    def unowned_count(self) -> int:
        """How many threads have diagnoses but no owner (the command line's)."""
        with self._db.transaction(single=True) as conn:
            found = conn.execute(
                sa.select(sa.func.count(sa.distinct(_SESSION.c.thread_id))).where(
                    ~sa.exists().where(_OWNER.c.thread_id == _SESSION.c.thread_id)
                )
            ).scalar()
        return int(found or 0)

    def threads_of(self, owner: str) -> list[OwnedThread]:
        """The threads an identity owns, oldest first."""
        with self._db.transaction(single=True) as conn:
            rows = conn.execute(
                sa.select(_OWNER.c.thread_id, _OWNER.c.created_at)
                .where(_OWNER.c.owner == owner)
                .order_by(_OWNER.c.created_at, _OWNER.c.thread_id)
            ).all()
        return [OwnedThread(thread_id=str(r.thread_id), created_at=str(r.created_at)) for r in rows]
