-- Which API identity owns a thread: set when the thread is created through the HTTP API.
-- Threads created by the command line have no row and are not reachable through the API.
CREATE TABLE IF NOT EXISTS thread_owner (
    thread_id  TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    created_at {now_timestamp}
);
CREATE INDEX IF NOT EXISTS thread_owner_owner ON thread_owner (owner, created_at);
