"""LangGraph's checkpoint tables: changed only by the checkpointers' public API, except in
``persistence/checkpoint_tables.py``, whose idea of the tables must be what the savers create."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver

from persistence import checkpoint_tables, tables
from persistence.audit import SqlAuditStore
from persistence.checkpoints import setup_checkpoints
from persistence.database import open_database
from persistence.retention import prune_finished

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = (
    *("analysis", "apps", "evidence", "graph", "knowledge", "models", "nodes", "persistence"),
    *("state", "tools", "verification"),
)


def test_the_savers_create_the_tables_the_module_expects(database_url: str) -> None:
    """Fails when the installed LangGraph savers' ``setup()`` creates another schema."""
    db = open_database(database_url)
    try:
        setup_checkpoints(db.target)
        expected = checkpoint_tables.EXPECTED[db.dialect]
        with db.transaction() as conn:
            inspector = sa.inspect(conn)
            theirs = set(inspector.get_table_names()) - set(tables.metadata.tables)
            found = {
                name: (
                    {column["name"] for column in inspector.get_columns(name)},
                    set(inspector.get_pk_constraint(name)["constrained_columns"]),
                )
                for name in theirs
            }
            applied = (
                conn.execute(
                    sa.select(sa.func.count()).select_from(checkpoint_tables.PG_MIGRATIONS)
                ).scalar_one()
                if db.dialect == "postgres"
                else None
            )
    finally:
        db.close()

    theirs_expected = {
        table.name: ({c.name for c in table.columns}, {c.name for c in table.primary_key})
        for table in expected.sorted_tables
    }
    if db.dialect == "sqlite":  # the FTS5 table of the runbook index is ours
        found = {name: v for name, v in found.items() if not name.startswith("kb_chunk_fts")}
    assert found == theirs_expected
    if db.dialect == "postgres":
        assert (
            applied == len(PostgresSaver.MIGRATIONS) == checkpoint_tables.POSTGRES_SAVER_MIGRATIONS
        )


def test_only_the_checkpoint_tables_module_names_langgraphs_tables() -> None:
    names = re.compile(
        r"checkpoint_blobs|checkpoint_writes|checkpoint_migrations|"
        r"""["'](checkpoints|writes)["']|\b(FROM|INTO|UPDATE)\s+(checkpoints|writes)\b""",
        re.IGNORECASE,
    )
    found = [
        str(path.relative_to(ROOT))
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        if names.search(path.read_text(encoding="utf-8"))
    ]
    assert found == ["persistence/checkpoint_tables.py"]


class Pruned(InMemorySaver):
    """A checkpointer that records the ``prune`` calls it gets."""

    def __init__(self) -> None:
        super().__init__()
        self.pruned: list[tuple[list[str], str]] = []

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.pruned.append((list(thread_ids), strategy))


def test_retention_prunes_through_the_checkpointers_prune(tmp_path: Path) -> None:
    db = open_database(f"sqlite:///{tmp_path / 'x.sqlite'}")
    audit = SqlAuditStore(db)
    try:
        audit.start_diagnosis("d-old", thread_id="old", question="why?")
        audit.finish_diagnosis(
            "d-old", {"status": "done", "rounds": 1, "verdict": "PASS", "score": 1.0, "answer": "a"}
        )
        audit.start_diagnosis("d-busy", thread_id="busy", question="why?")  # still running
        saver = Pruned()
        later = datetime.now(UTC) + timedelta(days=3)

        report = prune_finished(db, saver, keep_days=2, now=later)
        recent = prune_finished(db, saver, keep_days=2)
    finally:
        db.close()

    assert report.threads == 1 and saver.pruned == [(["old"], "keep_latest")]
    assert recent.threads == 0
