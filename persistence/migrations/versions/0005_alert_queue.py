"""Alert investigations: one row per Alertmanager alert group and set of alerts.

Rows wait queued until a worker runs their diagnosis. The queue survives a restart: rows left
queued are run on start, rows left running by a process that stopped (claim expired) are queued
again or failed.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from persistence.sqltypes import Json, Real, Timestamp

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    """Create ``alert_investigation``."""
    op.create_table(
        "alert_investigation",
        sa.Column("diagnosis_id", sa.Text, primary_key=True, nullable=True),
        sa.Column("thread_id", sa.Text, nullable=False),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("group_key", sa.Text, nullable=False),
        sa.Column("alert_set", sa.Text, nullable=False),
        sa.Column("receiver", sa.Text, nullable=False),
        sa.Column("message_id", sa.Text, nullable=False),
        sa.Column("question", sa.Text, nullable=False),
        sa.Column("alerts", Json, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("holder", sa.Text),
        sa.Column("claim_expires", Real),
        sa.Column("not_before", Real, nullable=False, server_default=sa.text("0")),
        sa.Column("received_at", Timestamp, nullable=False),
        sa.Column("started_at", Timestamp),
        sa.Column("finished_at", Timestamp),
        sa.Column("resolved_at", Timestamp),
        sa.Column("verdict", sa.Text),
        sa.Column("score", Real),
        sa.Column("error", sa.Text),
        sa.Column("link_base", sa.Text, nullable=False, server_default=sa.text("''")),
        sa.Column("notify_status", sa.Text),
        sa.Column("notify_attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("notify_next_at", Real),
        sa.Column("notify_error", sa.Text),
        sa.UniqueConstraint("owner", "group_key", "alert_set"),
    )
    op.create_index("alert_investigation_status", "alert_investigation", ["status", "not_before"])
    op.create_index("alert_investigation_owner", "alert_investigation", ["owner", "received_at"])
    op.create_index("alert_investigation_thread", "alert_investigation", ["thread_id"])
