"""The runbook index in the configured database: files, chunks and their full-text search.

SQLite (the embedded default) searches an FTS5 table with ``bm25`` (``porter unicode61``
tokenizer); PostgreSQL a generated ``tsvector`` column (``english`` configuration) under a GIN
index with ``ts_rank_cd``. Both weight the columns the same way: the document's name first, its
heading path next, the body last. The database does the ranking; this module only stores and
asks. Tokenising the text (identifiers split, CJK bigrams) is the caller's: the ``*_terms``
columns hold that text, and ``search`` takes the query's tokens.

Every change of one re-index is applied in one transaction (under an advisory lock in
PostgreSQL), so a failed re-index leaves the previous index whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from persistence.database import Database, Transaction

KB_LOCK_KEY = 0x5B12_0004
"""PostgreSQL advisory lock held while the index is changed."""
_SQLITE_WEIGHTS = "8.0, 3.0, 1.0"
"""bm25 weights of name, headings and body (PostgreSQL: setweight A, B, D)."""


@dataclass(frozen=True)
class IndexedFile:
    """One file as indexed: where, its content hash and stat, its title, how many chunks."""

    path: str
    root: str
    source: str
    sha256: str
    size: int
    mtime_ns: int
    title: str
    chunks: int
    indexed_at: str = ""


@dataclass(frozen=True)
class ChunkRow:
    """One chunk to store: its place in the file, what is shown, and the tokenised text."""

    ordinal: int
    doc_id: str
    title: str
    source: str
    chunk: str
    name_terms: str
    heading_terms: str
    body_terms: str


@dataclass(frozen=True)
class FoundChunk:
    """A chunk the search found, with the database's rank (higher is better)."""

    path: str
    ordinal: int
    doc_id: str
    title: str
    source: str
    chunk: str
    terms: str
    score: float


@dataclass(frozen=True)
class IndexStats:
    """How big the index is and when it last changed."""

    files: int
    chunks: int
    last_indexed: str | None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _text(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


class KnowledgeStore:
    """The ``kb_file`` and ``kb_chunk`` tables of one database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def files(self) -> dict[str, IndexedFile]:
        """Every indexed file by path."""
        with self.db.transaction() as tx:
            rows = tx.execute(
                "SELECT path, root, source, sha256, size, mtime_ns, title, chunks, indexed_at "
                "FROM kb_file"
            )
        return {
            row["path"]: IndexedFile(
                path=row["path"],
                root=row["root"],
                source=row["source"],
                sha256=row["sha256"],
                size=int(row["size"]),
                mtime_ns=int(row["mtime_ns"]),
                title=row["title"],
                chunks=int(row["chunks"]),
                indexed_at=_text(row["indexed_at"]),
            )
            for row in rows
        }

    def apply(
        self,
        *,
        replaced: Sequence[tuple[IndexedFile, Sequence[ChunkRow]]],
        touched: Sequence[IndexedFile],
        removed: Sequence[str],
    ) -> None:
        """Apply one re-index in one transaction.

        Args:
            replaced: Files whose content is new or changed, with all their chunks.
            touched: Files whose content is unchanged but whose size or mtime moved.
            removed: Paths no longer in the library.
        """
        with self.db.transaction() as tx:
            if tx.dialect == "postgres":
                tx.execute("SELECT pg_advisory_xact_lock(%s)", (KB_LOCK_KEY,))
            for path in [*removed, *(file.path for file, _ in replaced)]:
                self._delete(tx, path)
            stamp = _now()
            for file, chunks in replaced:
                self._insert_file(tx, file, stamp)
                tx.execute_many(
                    "INSERT INTO kb_chunk (path, ordinal, doc_id, title, source, chunk, "
                    "name_terms, heading_terms, body_terms) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    [
                        (
                            file.path,
                            c.ordinal,
                            c.doc_id,
                            c.title,
                            c.source,
                            c.chunk,
                            c.name_terms,
                            c.heading_terms,
                            c.body_terms,
                        )
                        for c in chunks
                    ],
                )
                if tx.dialect == "sqlite":
                    tx.execute(
                        "INSERT INTO kb_chunk_fts (rowid, name_terms, heading_terms, body_terms) "
                        "SELECT id, name_terms, heading_terms, body_terms FROM kb_chunk "
                        "WHERE path = %s",
                        (file.path,),
                    )
            for file in touched:
                tx.execute(
                    "UPDATE kb_file SET size = %s, mtime_ns = %s WHERE path = %s",
                    (file.size, file.mtime_ns, file.path),
                )

    @staticmethod
    def _delete(tx: Transaction, path: str) -> None:
        if tx.dialect == "sqlite":
            tx.execute(
                "DELETE FROM kb_chunk_fts WHERE rowid IN (SELECT id FROM kb_chunk WHERE path = %s)",
                (path,),
            )
        tx.execute("DELETE FROM kb_chunk WHERE path = %s", (path,))
        tx.execute("DELETE FROM kb_file WHERE path = %s", (path,))

    @staticmethod
    def _insert_file(tx: Transaction, file: IndexedFile, stamp: str) -> None:
        tx.execute(
            "INSERT INTO kb_file (path, root, source, sha256, size, mtime_ns, title, chunks, "
            "indexed_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                file.path,
                file.root,
                file.source,
                file.sha256,
                file.size,
                file.mtime_ns,
                file.title,
                file.chunks,
                stamp,
            ),
        )

    def search(self, tokens: Sequence[str], *, limit: int) -> list[FoundChunk]:
        """Chunks matching any token, best first (ties by doc id).

        Args:
            tokens: The query's tokens, each letters and digits only (or CJK).
            limit: How many chunks at most.
        """
        words = [t for t in dict.fromkeys(tokens) if t.isalnum()]
        if not words:
            return []
        with self.db.transaction() as tx:
            if tx.dialect == "sqlite":
                rows = tx.execute(
                    "SELECT c.path, c.ordinal, c.doc_id, c.title, c.source, c.chunk, "
                    "c.name_terms || ' ' || c.heading_terms || ' ' || c.body_terms AS terms, "
                    f"-bm25(kb_chunk_fts, {_SQLITE_WEIGHTS}) AS score "
                    "FROM kb_chunk_fts JOIN kb_chunk c ON c.id = kb_chunk_fts.rowid "
                    "WHERE kb_chunk_fts MATCH %s ORDER BY score DESC, c.doc_id LIMIT %s",
                    (" OR ".join(f'"{w}"' for w in words), limit),
                )
            else:
                rows = tx.execute(
                    "SELECT c.path, c.ordinal, c.doc_id, c.title, c.source, c.chunk, "
                    "c.name_terms || ' ' || c.heading_terms || ' ' || c.body_terms AS terms, "
                    "ts_rank_cd(c.search, q, 1) AS score "
                    "FROM kb_chunk c, to_tsquery('english', %s) q "
                    "WHERE c.search @@ q ORDER BY score DESC, c.doc_id LIMIT %s",
                    (" | ".join(words), limit),
                )
        return [_found(row) for row in rows]

    def chunks_of(self, paths: Sequence[str], *, limit: int) -> list[FoundChunk]:
        """The chunks of some files, in file then document order (score 0)."""
        if not paths:
            return []
        marks = ", ".join("%s" for _ in paths)
        with self.db.transaction() as tx:
            rows = tx.execute(
                "SELECT path, ordinal, doc_id, title, source, chunk, "
                "name_terms || ' ' || heading_terms || ' ' || body_terms AS terms, 0.0 AS score "
                f"FROM kb_chunk WHERE path IN ({marks}) ORDER BY path, ordinal LIMIT %s",
                (*paths, limit),
            )
        return [_found(row) for row in rows]

    def stats(self) -> IndexStats:
        """Files, chunks and the last time a file was indexed."""
        with self.db.transaction() as tx:
            files = tx.execute(
                "SELECT COUNT(*) AS n, COALESCE(SUM(chunks), 0) AS c, MAX(indexed_at) AS at "
                "FROM kb_file"
            )[0]
        last = files["at"]
        return IndexStats(
            files=int(files["n"]),
            chunks=int(files["c"]),
            last_indexed=_text(last) if last is not None else None,
        )


def _found(row: dict[str, Any]) -> FoundChunk:
    return FoundChunk(
        path=row["path"],
        ordinal=int(row["ordinal"]),
        doc_id=row["doc_id"],
        title=row["title"],
        source=row["source"],
        chunk=row["chunk"],
        terms=row["terms"],
        score=float(row["score"] or 0.0),
    )
