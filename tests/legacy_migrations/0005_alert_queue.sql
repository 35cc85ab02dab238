-- Alert investigations: one row per Alertmanager alert group and set of alerts, queued until a
-- worker runs its diagnosis. The queue survives a restart: rows left queued are run on start,
-- rows left running by a process that stopped (claim expired) are queued again or failed.
CREATE TABLE IF NOT EXISTS alert_investigation (
    diagnosis_id   TEXT PRIMARY KEY,
    thread_id      TEXT NOT NULL,
    owner          TEXT NOT NULL,
    group_key      TEXT NOT NULL,
    alert_set      TEXT NOT NULL,
    receiver       TEXT NOT NULL,
    message_id     TEXT NOT NULL,
    question       TEXT NOT NULL,
    alerts         {json} NOT NULL,
    status         TEXT NOT NULL,
    attempts       INTEGER NOT NULL DEFAULT 0,
    holder         TEXT,
    claim_expires  {real},
    not_before     {real} NOT NULL DEFAULT 0,
    received_at    {timestamp} NOT NULL,
    started_at     {timestamp},
    finished_at    {timestamp},
    resolved_at    {timestamp},
    verdict        TEXT,
    score          {real},
    error          TEXT,
    link_base      TEXT NOT NULL DEFAULT '',
    notify_status  TEXT,
    notify_attempts INTEGER NOT NULL DEFAULT 0,
    notify_next_at {real},
    notify_error   TEXT,
    UNIQUE (owner, group_key, alert_set)
);
CREATE INDEX IF NOT EXISTS alert_investigation_status ON alert_investigation (status, not_before);
CREATE INDEX IF NOT EXISTS alert_investigation_owner ON alert_investigation (owner, received_at);
CREATE INDEX IF NOT EXISTS alert_investigation_thread ON alert_investigation (thread_id);
