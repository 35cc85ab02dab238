"""Audit tables: one row per diagnosis, one row per tool invocation.

SQLite also gets ``thread_lock``, the one-writer-per-thread row (PostgreSQL uses advisory locks).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from persistence.sqltypes import Json, Real, Timestamp

revision = "0001"
down_revision: str | None = None


def upgrade() -> None:
    """Create ``diagnosis_session``, ``tool_invocation`` and (SQLite) ``thread_lock``."""
    postgres = op.get_bind().dialect.name == "postgresql"
    now = sa.text("now()") if postgres else None
    op.create_table(
        "diagnosis_session",
        sa.Column("id", sa.Text, primary_key=True, nullable=True),
        sa.Column("thread_id", sa.Text, nullable=False),
        sa.Column("question", sa.Text, nullable=False),
        sa.Column(
            "status",
            sa.Text,
            sa.CheckConstraint("status IN ('running', 'done', 'failed', 'abandoned')"),
            nullable=False,
        ),
        sa.Column("rounds", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("verdict", sa.Text),
        sa.Column("score", Real),
        sa.Column("final_answer", sa.Text),
        sa.Column("note", sa.Text),
        sa.Column("created_at", Timestamp, nullable=False, server_default=now),
        sa.Column("updated_at", Timestamp, nullable=False, server_default=now),
        sa.Column("self_evaluation", Json),
    )
    op.create_index("diagnosis_session_thread", "diagnosis_session", ["thread_id", "created_at"])
    op.create_table(
        "tool_invocation",
        sa.Column("diagnosis_id", sa.Text, nullable=False),
        sa.Column("invocation_id", sa.Text, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("thread_id", sa.Text, nullable=False),
        sa.Column("round", sa.Integer, nullable=False),
        sa.Column("tool_name", sa.Text, nullable=False),
        sa.Column("arguments", Json, nullable=False),
        sa.Column(
            "status",
            sa.Text,
            sa.CheckConstraint("status IN ('ok', 'no_hit', 'error')"),
            nullable=False,
        ),
        sa.Column("output", Json),
        sa.Column("retrieval_details", Json, nullable=False),
        sa.Column("idempotency_key", sa.Text, nullable=False, unique=True),
        sa.Column("started_at", sa.Text, nullable=False),
        sa.Column("duration_ms", Real, nullable=False),
        sa.Column("error", sa.Text),
        sa.PrimaryKeyConstraint("diagnosis_id", "invocation_id"),
    )
    if not postgres:
        op.create_table(
            "thread_lock",
            sa.Column("thread_id", sa.Text, primary_key=True, nullable=True),
            sa.Column("owner", sa.Text, nullable=False),
            sa.Column("pid", sa.Integer, nullable=False),
            sa.Column("host", sa.Text, nullable=False),
            sa.Column("acquired_at", sa.Text, nullable=False),
        )
