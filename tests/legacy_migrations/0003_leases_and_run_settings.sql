-- The run settings a diagnosis started with (language, offline or models, budgets, environment),
-- so a resume continues the same run.
ALTER TABLE diagnosis_session {add_column} run_settings {json};

-- A lease per running diagnosis: held by one process, renewed by its heartbeat. A lease whose
-- expiry has passed belongs to a process that stopped without finishing (an orphan).
CREATE TABLE IF NOT EXISTS diagnosis_lease (
    diagnosis_id TEXT PRIMARY KEY,
    thread_id    TEXT NOT NULL,
    holder       TEXT NOT NULL,
    origin       TEXT NOT NULL,
    acquired_at  {now_timestamp},
    expires_at   {real} NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS diagnosis_lease_expiry ON diagnosis_lease (expires_at);
CREATE INDEX IF NOT EXISTS diagnosis_lease_holder ON diagnosis_lease (holder, thread_id);
