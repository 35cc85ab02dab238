-- The runbook library's index (superbiz kb index): one row per indexed Markdown file and one per
-- chunk (a section under one heading path), searched by full text: in PostgreSQL the chunk's
-- tsvector column with a GIN index (ts_rank_cd), in SQLite the chunks' FTS5 table (BM25).
-- The *_terms columns hold the text as the index tokenises it: words, identifiers split into
-- their parts beside the whole, CJK text as overlapping bigrams.
CREATE TABLE IF NOT EXISTS kb_file (
    path       TEXT PRIMARY KEY,
    root       TEXT NOT NULL,
    source     TEXT NOT NULL,
    sha256     TEXT NOT NULL,
    size       {bigint} NOT NULL,
    mtime_ns   {bigint} NOT NULL,
    title      TEXT NOT NULL,
    chunks     INTEGER NOT NULL,
    indexed_at {now_timestamp}
);
CREATE TABLE IF NOT EXISTS kb_chunk (
    id            {serial_key},
-- [postgres]
    path          TEXT NOT NULL REFERENCES kb_file (path) ON DELETE CASCADE,
-- [sqlite]
    path          TEXT NOT NULL,
-- [end]
    ordinal       INTEGER NOT NULL,
    doc_id        TEXT NOT NULL UNIQUE,
    title         TEXT NOT NULL,
    source        TEXT NOT NULL,
    chunk         TEXT NOT NULL,
    name_terms    TEXT NOT NULL,
    heading_terms TEXT NOT NULL,
-- [postgres]
    body_terms    TEXT NOT NULL,
    search        TSVECTOR GENERATED ALWAYS AS (
        setweight(to_tsvector('english', name_terms), 'A')
        || setweight(to_tsvector('english', heading_terms), 'B')
        || setweight(to_tsvector('english', body_terms), 'D')
    ) STORED
-- [sqlite]
    body_terms    TEXT NOT NULL
-- [end]
);
CREATE INDEX IF NOT EXISTS kb_chunk_path ON kb_chunk (path, ordinal);
-- [postgres]
CREATE INDEX IF NOT EXISTS kb_chunk_search ON kb_chunk USING GIN (search);
-- [sqlite]
CREATE VIRTUAL TABLE IF NOT EXISTS kb_chunk_fts USING fts5 (
    name_terms, heading_terms, body_terms, tokenize = 'porter unicode61'
);
-- [end]
