"""Which API identity owns a thread: set when the thread is created through the HTTP API.

Threads created by the command line have no row and are not reachable through the API.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from persistence.sqltypes import Timestamp

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    """Create ``thread_owner``."""
    postgres = op.get_bind().dialect.name == "postgresql"
    op.create_table(
        "thread_owner",
        sa.Column("thread_id", sa.Text, primary_key=True, nullable=True),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column(
            "created_at",
            Timestamp,
            nullable=False,
            server_default=sa.text("now()") if postgres else None,
        ),
    )
    op.create_index("thread_owner_owner", "thread_owner", ["owner", "created_at"])
