-- Audit tables: one row per diagnosis, one row per tool invocation.
CREATE TABLE IF NOT EXISTS diagnosis_session (
    id              TEXT PRIMARY KEY,
    thread_id       TEXT NOT NULL,
    question        TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'abandoned')),
    rounds          INTEGER NOT NULL DEFAULT 0,
    verdict         TEXT,
    score           DOUBLE PRECISION,
    final_answer    TEXT,
    note            TEXT,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    self_evaluation JSONB
);
CREATE INDEX IF NOT EXISTS diagnosis_session_thread ON diagnosis_session (thread_id, created_at);

CREATE TABLE IF NOT EXISTS tool_invocation (
    diagnosis_id      TEXT NOT NULL,
    invocation_id     TEXT NOT NULL,
    seq               INTEGER NOT NULL,
    thread_id         TEXT NOT NULL,
    round             INTEGER NOT NULL,
    tool_name         TEXT NOT NULL,
    arguments         JSONB NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('ok', 'no_hit', 'error')),
    output            JSONB,
    retrieval_details JSONB NOT NULL,
    idempotency_key   TEXT NOT NULL UNIQUE,
    started_at        TEXT NOT NULL,
    duration_ms       DOUBLE PRECISION NOT NULL,
    error             TEXT,
    PRIMARY KEY (diagnosis_id, invocation_id)
);
