"""The audit tables as they are after the newest migration, for building statements.

Statements are built from these ``Table`` objects with SQLAlchemy Core and rendered by each
dialect (PostgreSQL through psycopg, SQLite through sqlite3). The migrations
(``persistence/migrations/versions/``) create and change the tables;
``tests/test_migration_versions.py`` checks that what they create is what is declared here.
Dialect-specific statements are built in ``persistence/dialects.py``.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from persistence.sqltypes import BigInt, Json, Real, Timestamp

metadata = sa.MetaData()

superbiz_schema = sa.Table(
    "superbiz_schema",
    metadata,
    sa.Column("version", sa.Integer, nullable=False),
)
"""The schema version as a number, one row: what ``db upgrade`` reports and older releases read."""

REVISION_TABLE = "superbiz_alembic_version"
revision_table = sa.Table(
    REVISION_TABLE,
    metadata,
    sa.Column("version_num", sa.String(32), primary_key=True),
)
"""Alembic's record of the revision the database is at (kept by Alembic, read here)."""

diagnosis_session = sa.Table(
    "diagnosis_session",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("thread_id", sa.Text, nullable=False),
    sa.Column("question", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("rounds", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("verdict", sa.Text),
    sa.Column("score", Real),
    sa.Column("final_answer", sa.Text),
    sa.Column("note", sa.Text),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.Column("self_evaluation", Json),
    sa.Column("run_settings", Json),
    sa.CheckConstraint("status IN ('running', 'done', 'failed', 'abandoned')"),
    sa.Index("diagnosis_session_thread", "thread_id", "created_at"),
)

tool_invocation = sa.Table(
    "tool_invocation",
    metadata,
    sa.Column("diagnosis_id", sa.Text, primary_key=True),
    sa.Column("invocation_id", sa.Text, primary_key=True),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("thread_id", sa.Text, nullable=False),
    sa.Column("round", sa.Integer, nullable=False),
    sa.Column("tool_name", sa.Text, nullable=False),
    sa.Column("arguments", Json, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("output", Json),
    sa.Column("retrieval_details", Json, nullable=False),
    sa.Column("idempotency_key", sa.Text, nullable=False, unique=True),
    sa.Column("started_at", sa.Text, nullable=False),
    sa.Column("duration_ms", Real, nullable=False),
    sa.Column("error", sa.Text),
    sa.CheckConstraint("status IN ('ok', 'no_hit', 'error')"),
    sa.Index("tool_invocation_seq", "diagnosis_id", "seq", unique=True),
)

thread_lock = sa.Table(
    "thread_lock",
    metadata,
    sa.Column("thread_id", sa.Text, primary_key=True),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("host", sa.Text, nullable=False),
    sa.Column("acquired_at", sa.Text, nullable=False),
)
"""SQLite only: the writer lock row of a thread (PostgreSQL uses advisory locks)."""

thread_owner = sa.Table(
    "thread_owner",
    metadata,
    sa.Column("thread_id", sa.Text, primary_key=True),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Index("thread_owner_owner", "owner", "created_at"),
)

diagnosis_lease = sa.Table(
    "diagnosis_lease",
    metadata,
    sa.Column("diagnosis_id", sa.Text, primary_key=True),
    sa.Column("thread_id", sa.Text, nullable=False),
    sa.Column("holder", sa.Text, nullable=False),
    sa.Column("origin", sa.Text, nullable=False),
    sa.Column("acquired_at", Timestamp, nullable=False),
    sa.Column("expires_at", Real, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Index("diagnosis_lease_expiry", "expires_at"),
    sa.Index("diagnosis_lease_holder", "holder", "thread_id"),
)

kb_file = sa.Table(
    "kb_file",
    metadata,
    sa.Column("path", sa.Text, primary_key=True),
    sa.Column("root", sa.Text, nullable=False),
    sa.Column("source", sa.Text, nullable=False),
    sa.Column("sha256", sa.Text, nullable=False),
    sa.Column("size", BigInt, nullable=False),
    sa.Column("mtime_ns", BigInt, nullable=False),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("chunks", sa.Integer, nullable=False),
    sa.Column("indexed_at", Timestamp, nullable=False),
)

kb_chunk = sa.Table(
    "kb_chunk",
    metadata,
    sa.Column("id", BigInt, primary_key=True),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("ordinal", sa.Integer, nullable=False),
    sa.Column("doc_id", sa.Text, nullable=False, unique=True),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("source", sa.Text, nullable=False),
    sa.Column("chunk", sa.Text, nullable=False),
    sa.Column("name_terms", sa.Text, nullable=False),
    sa.Column("heading_terms", sa.Text, nullable=False),
    sa.Column("body_terms", sa.Text, nullable=False),
    sa.Index("kb_chunk_path", "path", "ordinal"),
)
"""A runbook chunk. PostgreSQL adds the generated ``search`` column (its full-text vector, under
a GIN index) and a foreign key on ``path``; SQLite keeps the terms in ``kb_chunk_fts``."""

kb_chunk_search: sa.ColumnClause[Any] = sa.column("search")
"""PostgreSQL only: ``kb_chunk.search``, the chunk's weighted ``tsvector`` (generated)."""

kb_chunk_fts = sa.table(
    "kb_chunk_fts",
    sa.column("rowid", sa.Integer),
    sa.column("name_terms", sa.Text),
    sa.column("heading_terms", sa.Text),
    sa.column("body_terms", sa.Text),
)
"""SQLite only: the FTS5 table of the chunks' terms, ``rowid`` = ``kb_chunk.id``."""

alert_investigation = sa.Table(
    "alert_investigation",
    metadata,
    sa.Column("diagnosis_id", sa.Text, primary_key=True),
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
    sa.Index("alert_investigation_status", "status", "not_before"),
    sa.Index("alert_investigation_owner", "owner", "received_at"),
    sa.Index("alert_investigation_thread", "thread_id"),
)
