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

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from persistence import dialects, tables
from persistence.database import Database

KB_LOCK_KEY = 0x5B12_0004
"""PostgreSQL advisory lock held while the index is changed."""
_SQLITE_WEIGHTS = (8.0, 3.0, 1.0)
"""bm25 weights of name, headings and body (PostgreSQL: setweight A, B, D)."""
_FILE = tables.kb_file
_CHUNK = tables.kb_chunk
_FTS = tables.kb_chunk_fts
_CHUNK_COLUMNS = ("ordinal", "doc_id", "title", "source", "chunk")
_FILE_COLUMNS = ("path", "root", "source", "sha256", "size", "mtime_ns", "title", "chunks")


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
        with self.db.transaction(single=True) as conn:
            rows = conn.execute(sa.select(_FILE)).mappings().all()
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
        with self.db.transaction() as conn:
            dialects.advisory_xact_lock(conn, KB_LOCK_KEY)
            sqlite = not dialects.is_postgres(conn)
            for path in [*removed, *(file.path for file, _ in replaced)]:
                self._delete(conn, path, sqlite=sqlite)
            stamp = _now()
            for file, chunks in replaced:
                conn.execute(
                    sa.insert(_FILE).values(
                        **{name: getattr(file, name) for name in _FILE_COLUMNS}, indexed_at=stamp
                    )
                )
                if chunks:
                    conn.execute(
                        sa.insert(_CHUNK),
                        [
                            {
                                "path": file.path,
                                **{name: getattr(c, name) for name in _CHUNK_COLUMNS},
                                "name_terms": c.name_terms,
                                "heading_terms": c.heading_terms,
                                "body_terms": c.body_terms,
                            }
                            for c in chunks
                        ],
                    )
                if sqlite:
                    terms = (_CHUNK.c.name_terms, _CHUNK.c.heading_terms, _CHUNK.c.body_terms)
                    conn.execute(
                        sa.insert(_FTS).from_select(
                            ["rowid", "name_terms", "heading_terms", "body_terms"],
                            sa.select(_CHUNK.c.id, *terms).where(_CHUNK.c.path == file.path),
                        )
                    )
            for file in touched:
                conn.execute(
                    sa.update(_FILE)
                    .where(_FILE.c.path == file.path)
                    .values(size=file.size, mtime_ns=file.mtime_ns)
                )

    @staticmethod
    def _delete(conn: Connection, path: str, *, sqlite: bool) -> None:
        if sqlite:
            conn.execute(
                sa.delete(_FTS).where(
                    _FTS.c.rowid.in_(sa.select(_CHUNK.c.id).where(_CHUNK.c.path == path))
                )
            )
        conn.execute(sa.delete(_CHUNK).where(_CHUNK.c.path == path))
        conn.execute(sa.delete(_FILE).where(_FILE.c.path == path))

    def search(self, tokens: Sequence[str], *, limit: int) -> list[FoundChunk]:
        """Chunks matching any token, best first (ties by doc id).

        Args:
            tokens: The query's tokens, each letters and digits only (or CJK).
            limit: How many chunks at most.
        """
        words = [t for t in dict.fromkeys(tokens) if t.isalnum()]
        if not words:
            return []
        terms = _terms(_CHUNK)
        shown = [_CHUNK.c.path, *(_CHUNK.c[name] for name in _CHUNK_COLUMNS), terms]
        with self.db.transaction(single=True) as conn:
            if dialects.is_postgres(conn):
                # The chunk's weighted tsvector (a generated column) against the query's words.
                query = sa.func.to_tsquery("english", " | ".join(words))
                vector: sa.ColumnElement[Any] = sa.literal_column(
                    f"{_CHUNK.name}.{tables.kb_chunk_search.name}"
                )
                score = sa.func.ts_rank_cd(vector, query, 1).label("score")
                statement = sa.select(*shown, score).where(vector.bool_op("@@")(query))
            else:
                # The FTS5 table's BM25 (smaller is better, so negated), the columns weighted.
                score = (-sa.func.bm25(sa.literal_column(_FTS.name), *_SQLITE_WEIGHTS)).label(
                    "score"
                )
                matched = sa.literal_column(_FTS.name).op("MATCH")(
                    " OR ".join(f'"{w}"' for w in words)
                )
                statement = (
                    sa.select(*shown, score)
                    .select_from(_FTS.join(_CHUNK, _CHUNK.c.id == _FTS.c.rowid))
                    .where(matched)
                )
            rows = (
                conn.execute(statement.order_by(sa.desc("score"), _CHUNK.c.doc_id).limit(limit))
                .mappings()
                .all()
            )
        return [_found(row) for row in rows]

    def chunks_of(self, paths: Sequence[str], *, limit: int) -> list[FoundChunk]:
        """The chunks of some files, in file then document order (score 0)."""
        if not paths:
            return []
        shown = [_CHUNK.c.path, *(_CHUNK.c[name] for name in _CHUNK_COLUMNS), _terms(_CHUNK)]
        with self.db.transaction(single=True) as conn:
            rows = (
                conn.execute(
                    sa.select(*shown, sa.literal(0.0).label("score"))
                    .where(_CHUNK.c.path.in_(list(paths)))
                    .order_by(_CHUNK.c.path, _CHUNK.c.ordinal)
                    .limit(limit)
                )
                .mappings()
                .all()
            )
        return [_found(row) for row in rows]

    def stats(self) -> IndexStats:
        """Files, chunks and the last time a file was indexed."""
        with self.db.transaction(single=True) as conn:
            files = (
                conn.execute(
                    sa.select(
                        sa.func.count().label("n"),
                        sa.func.coalesce(sa.func.sum(_FILE.c.chunks), 0).label("c"),
                        sa.func.max(_FILE.c.indexed_at).label("at"),
                    )
                )
                .mappings()
                .one()
            )
        last = files["at"]
        return IndexStats(
            files=int(files["n"]),
            chunks=int(files["c"]),
            last_indexed=_text(last) if last is not None else None,
        )


def _terms(chunk: sa.Table) -> sa.Label[str]:
    """A chunk's terms, as one text: name, headings, body."""
    return (chunk.c.name_terms + " " + chunk.c.heading_terms + " " + chunk.c.body_terms).label(
        "terms"
    )


def _found(row: sa.RowMapping) -> FoundChunk:
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
