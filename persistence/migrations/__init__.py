"""The audit tables' schema versions, migrated by Alembic.

Each file of ``versions/`` is one Alembic revision, numbered ``0001``, ``0002``, ... (its
revision id is its number, its file name the number and a name): the schema version of a
database is the number of the last revision applied to it. ``upgrade`` runs Alembic's
``upgrade head`` programmatically (``env.py`` takes the caller's connection, inside the caller's
transaction), so a migration is all or nothing.

Two records say where a database is:

- Alembic's version table (``superbiz_alembic_version``), which Alembic keeps;
- ``superbiz_schema`` (one row, the version as a number), which every release since the first
  reads, so that an older release refuses a database a newer one migrated. ``upgrade`` writes
  it after Alembic; a database from before the switch to Alembic has only this one, and is
  stamped at its version before it is upgraded.

Reading the versions needs neither Alembic nor the revision files: the newest version is the
highest file number, so opening an up-to-date database costs one statement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from persistence.database import SchemaTooNew, missing_table
from persistence.dialects import advisory_xact_lock
from persistence.tables import REVISION_TABLE, revision_table, superbiz_schema

FOLDER = Path(__file__).resolve().parent
"""The Alembic script folder: ``env.py`` and ``versions/``."""
MIGRATION_LOCK_KEY = 0x5B12_0001
"""PostgreSQL advisory lock held by the transaction that migrates the audit tables."""
_REVISION_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.py$")


@cache
def migration_names() -> tuple[tuple[int, str], ...]:
    """The bundled migrations in order: ``(version, name)``, the name being the file's stem."""
    found = []
    for entry in (FOLDER / "versions").iterdir():
        match = _REVISION_FILE.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.stem))
    return tuple(sorted(found))


def latest_version() -> int:
    """The schema version this code brings a database to."""
    names = migration_names()
    return names[-1][0] if names else 0


def revision_id(version: int) -> str:
    """The Alembic revision id of a schema version (``3`` -> ``"0003"``)."""
    return f"{version:04d}"


@dataclass(frozen=True)
class Versions:
    """What a database records of its schema version.

    Attributes:
        number: ``superbiz_schema``'s version; None without that table (0 when it is empty).
        revision: Alembic's revision; None without its table or row.
    """

    number_recorded: int | None
    revision: str | None

    @property
    def recorded(self) -> bool:
        """True when the database has superbiz tables (a version of either kind)."""
        return self.number_recorded is not None or self.revision is not None

    @property
    def number(self) -> int:
        """The schema version: Alembic's revision when there is one, else the recorded number."""
        if self.revision is not None:
            return int(self.revision) if self.revision.isdigit() else latest_version() + 1
        return self.number_recorded or 0

    @property
    def current(self) -> bool:
        """Both records say this code's version."""
        latest = latest_version()
        return self.number_recorded == latest and self.revision == revision_id(latest)

    def refuse_newer(self, display: str) -> None:
        """Raise ``SchemaTooNew`` when either record is newer than this code (or unknown).

        Raises:
            SchemaTooNew: with the versions, when a newer superbiz migrated the database.
        """
        latest = latest_version()
        newest = max(self.number, self.number_recorded or 0)
        if newest > latest:
            shown = self.revision if self.number > latest and self.revision else str(newest)
            raise SchemaTooNew(
                f"database {display} has schema version {shown}, newer than this superbiz "
                f"(version {latest}); upgrade superbiz before using this database"
            )


def read_versions(conn: Connection) -> Versions:
    """Both version records (a missing table reads as None; nothing is created)."""
    names = set(sa.inspect(conn).get_table_names())
    number = revision = None
    if superbiz_schema.name in names:
        row = conn.execute(sa.select(superbiz_schema.c.version).limit(1)).first()
        number = int(row.version) if row is not None else 0
    if REVISION_TABLE in names:
        revision = conn.execute(sa.select(revision_table.c.version_num).limit(1)).scalar()
    return Versions(number, revision)


def read_versions_quickly(conn: Connection) -> Versions | None:
    """Both version records in one statement; None when it cannot tell (a table or row missing).

    For a connection outside a transaction: in PostgreSQL a failed statement would end one.
    """
    query = sa.select(superbiz_schema.c.version, revision_table.c.version_num).select_from(
        superbiz_schema.join(revision_table, sa.true())
    )
    try:
        rows = conn.execute(query).all()
    except sa.exc.DBAPIError as exc:
        if missing_table(exc):
            return None
        raise
    return Versions(int(rows[0].version), rows[0].version_num) if len(rows) == 1 else None


def upgrade(conn: Connection, display: str) -> tuple[int, int]:
    """Bring the schema to the newest version inside the caller's transaction.

    Args:
        conn: A connection inside a transaction (committed by the caller).
        display: The database, for messages.

    Returns:
        The versions before and after.

    Raises:
        SchemaTooNew: when a newer superbiz migrated the database.
    """
    advisory_xact_lock(conn, MIGRATION_LOCK_KEY)
    found = read_versions(conn)
    found.refuse_newer(display)
    latest = latest_version()
    if found.revision != revision_id(latest):
        _alembic(conn, found)
    if found.number_recorded is None:
        superbiz_schema.create(conn)
    if found.number_recorded is None or found.number_recorded == 0:
        conn.execute(sa.delete(superbiz_schema))
        conn.execute(sa.insert(superbiz_schema).values(version=latest))
    elif found.number_recorded != latest:
        conn.execute(sa.update(superbiz_schema).values(version=latest))
    return found.number, latest


def _alembic(conn: Connection, found: Versions) -> None:
    """Run Alembic on ``conn``: stamp a database from before Alembic, then ``upgrade head``."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(FOLDER))
    config.attributes["connection"] = conn
    if found.revision is None and found.number:
        command.stamp(config, revision_id(found.number))
    command.upgrade(config, "head")
