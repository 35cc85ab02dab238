-- Audit tables: one row per diagnosis, one row per tool invocation (SQLite stores JSON as text).
CREATE TABLE IF NOT EXISTS diagnosis_session (
    id              TEXT PRIMARY KEY,
    thread_id       TEXT NOT NULL,
    question        TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'abandoned')),
    rounds          INTEGER NOT NULL DEFAULT 0,
    verdict         TEXT,
    score           {real},
    final_answer    TEXT,
    note            TEXT,
    created_at      {now_timestamp},
    updated_at      {now_timestamp},
    self_evaluation {json}
);
CREATE INDEX IF NOT EXISTS diagnosis_session_thread ON diagnosis_session (thread_id, created_at);

CREATE TABLE IF NOT EXISTS tool_invocation (
    diagnosis_id      TEXT NOT NULL,
    invocation_id     TEXT NOT NULL,
    seq               INTEGER NOT NULL,
    thread_id         TEXT NOT NULL,
    round             INTEGER NOT NULL,
    tool_name         TEXT NOT NULL,
    arguments         {json} NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('ok', 'no_hit', 'error')),
    output            {json},
    retrieval_details {json} NOT NULL,
    idempotency_key   TEXT NOT NULL UNIQUE,
    started_at        TEXT NOT NULL,
    duration_ms       {real} NOT NULL,
    error             TEXT,
    PRIMARY KEY (diagnosis_id, invocation_id)
);
-- [sqlite]

-- One writer per thread: a run holds its thread's row while it runs (Postgres uses advisory locks).
CREATE TABLE IF NOT EXISTS thread_lock (
    thread_id   TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    host        TEXT NOT NULL,
    acquired_at TEXT NOT NULL
);
-- [end]
