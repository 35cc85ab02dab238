"""Alembic's environment: the migrations run on the connection the caller passes.

``persistence.migrations.upgrade`` puts its connection (inside its transaction) in
``config.attributes["connection"]``; Alembic does not commit it. Nothing here opens a
connection or reads a setting.
"""

from __future__ import annotations

from alembic import context

from persistence.tables import REVISION_TABLE

connection = context.config.attributes["connection"]
context.configure(connection=connection, version_table=REVISION_TABLE)
with context.begin_transaction():
    context.run_migrations()
