"""The run settings a diagnosis started with, and a lease per running diagnosis.

The settings (language, offline or models, budgets, environment) let a resume continue the same
run. A lease is held by one process and renewed by its heartbeat; a lease whose expiry has
passed belongs to a process that stopped without finishing (an orphan).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from persistence.sqltypes import Json, Real, Timestamp

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    """Add ``diagnosis_session.run_settings``; create ``diagnosis_lease``."""
    postgres = op.get_bind().dialect.name == "postgresql"
    op.add_column("diagnosis_session", sa.Column("run_settings", Json))
    op.create_table(
        "diagnosis_lease",
        sa.Column("diagnosis_id", sa.Text, primary_key=True, nullable=True),
        sa.Column("thread_id", sa.Text, nullable=False),
        sa.Column("holder", sa.Text, nullable=False),
        sa.Column("origin", sa.Text, nullable=False),
        sa.Column(
            "acquired_at",
            Timestamp,
            nullable=False,
            server_default=sa.text("now()") if postgres else None,
        ),
        sa.Column("expires_at", Real, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
    )
    op.create_index("diagnosis_lease_expiry", "diagnosis_lease", ["expires_at"])
    op.create_index("diagnosis_lease_holder", "diagnosis_lease", ["holder", "thread_id"])
