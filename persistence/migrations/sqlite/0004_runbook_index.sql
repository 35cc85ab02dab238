-- The runbook library's index (superbiz kb index): one row per indexed Markdown file, one per
-- chunk (a section under one heading path), and the chunks' full-text table (FTS5, BM25).
-- The *_terms columns hold the text as the index tokenises it: words, identifiers split into
-- their parts beside the whole, CJK text as overlapping bigrams.
CREATE TABLE IF NOT EXISTS kb_file (
    path       TEXT PRIMARY KEY,
    root       TEXT NOT NULL,
    source     TEXT NOT NULL,
    sha256     TEXT NOT NULL,
    size       INTEGER NOT NULL,
    mtime_ns   INTEGER NOT NULL,
    title      TEXT NOT NULL,
    chunks     INTEGER NOT NULL,
    indexed_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS kb_chunk (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    path          TEXT NOT NULL,
    ordinal       INTEGER NOT NULL,
    doc_id        TEXT NOT NULL UNIQUE,
    title         TEXT NOT NULL,
    source        TEXT NOT NULL,
    chunk         TEXT NOT NULL,
    name_terms    TEXT NOT NULL,
    heading_terms TEXT NOT NULL,
    body_terms    TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS kb_chunk_path ON kb_chunk (path, ordinal);
CREATE VIRTUAL TABLE IF NOT EXISTS kb_chunk_fts USING fts5 (
    name_terms, heading_terms, body_terms, tokenize = 'porter unicode61'
);
