"""The runbook library's index: one row per indexed Markdown file and one per chunk.

A chunk is a section under one heading path, searched by full text: in PostgreSQL the chunk's
generated ``tsvector`` column under a GIN index (``ts_rank_cd``), in SQLite the chunks' FTS5
table (BM25). The ``*_terms`` columns hold the text as the index tokenises it: words,
identifiers split into their parts beside the whole, CJK text as overlapping bigrams.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

from persistence.sqltypes import BigInt, Timestamp

revision = "0004"
down_revision = "0003"

SEARCH = (
    "setweight(to_tsvector('english', name_terms), 'A') "
    "|| setweight(to_tsvector('english', heading_terms), 'B') "
    "|| setweight(to_tsvector('english', body_terms), 'D')"
)
"""PostgreSQL: the weighted vector of a chunk (name first, headings next, body last)."""


def upgrade() -> None:
    """Create ``kb_file`` and ``kb_chunk``; PostgreSQL's search column, SQLite's FTS5 table."""
    postgres = op.get_bind().dialect.name == "postgresql"
    op.create_table(
        "kb_file",
        sa.Column("path", sa.Text, primary_key=True, nullable=True),
        sa.Column("root", sa.Text, nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("sha256", sa.Text, nullable=False),
        sa.Column("size", BigInt, nullable=False),
        sa.Column("mtime_ns", BigInt, nullable=False),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("chunks", sa.Integer, nullable=False),
        sa.Column(
            "indexed_at",
            Timestamp,
            nullable=False,
            server_default=sa.text("now()") if postgres else None,
        ),
    )
    path = (
        sa.Column(
            "path", sa.Text, sa.ForeignKey("kb_file.path", ondelete="CASCADE"), nullable=False
        )
        if postgres
        else sa.Column("path", sa.Text, nullable=False)
    )
    search = (
        [sa.Column("search", pg.TSVECTOR, sa.Computed(SEARCH, persisted=True))] if postgres else []
    )
    op.create_table(
        "kb_chunk",
        sa.Column("id", BigInt, primary_key=True, nullable=True),
        path,
        sa.Column("ordinal", sa.Integer, nullable=False),
        sa.Column("doc_id", sa.Text, nullable=False, unique=True),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("chunk", sa.Text, nullable=False),
        sa.Column("name_terms", sa.Text, nullable=False),
        sa.Column("heading_terms", sa.Text, nullable=False),
        sa.Column("body_terms", sa.Text, nullable=False),
        *search,
        sqlite_autoincrement=True,
    )
    op.create_index("kb_chunk_path", "kb_chunk", ["path", "ordinal"])
    if postgres:
        op.create_index("kb_chunk_search", "kb_chunk", ["search"], postgresql_using="gin")
    else:
        op.execute(
            "CREATE VIRTUAL TABLE kb_chunk_fts USING fts5 (\n"
            "    name_terms, heading_terms, body_terms, tokenize = 'porter unicode61'\n)"
        )
