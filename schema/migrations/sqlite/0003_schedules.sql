-- Recurring schedules; their occurrences are jobs under a unique key.
CREATE TABLE slotpoller_schedules (
  name         TEXT    NOT NULL PRIMARY KEY,
  every_ms     INTEGER NOT NULL DEFAULT 0,
  cron         TEXT    NOT NULL DEFAULT '',
  time_zone    TEXT    NOT NULL DEFAULT '',
  endpoint     TEXT    NOT NULL,
  method       TEXT    NOT NULL,
  payload      BLOB,
  timeout_ms   INTEGER NOT NULL DEFAULT 0,
  max_attempts INTEGER NOT NULL,
  tolerance_ms INTEGER NOT NULL,
  misfire      TEXT    NOT NULL,
  overlap      TEXT    NOT NULL,
  enabled      INTEGER NOT NULL,
  next_fire_at INTEGER,
  missed       INTEGER NOT NULL DEFAULT 0,
  version      BIGINT      NOT NULL DEFAULT 0,
  last_fire_at INTEGER,
  source       TEXT    NOT NULL,
  created_at   INTEGER NOT NULL,
  updated_at   INTEGER NOT NULL
);

CREATE INDEX slotpoller_schedules_next ON slotpoller_schedules (next_fire_at) WHERE enabled = 1;

ALTER TABLE slotpoller_jobs ADD COLUMN schedule TEXT;
ALTER TABLE slotpoller_jobs ADD COLUMN scheduled_for INTEGER;
ALTER TABLE slotpoller_jobs ADD COLUMN start_by INTEGER;
ALTER TABLE slotpoller_jobs ADD COLUMN exclusive INTEGER NOT NULL DEFAULT 0;
CREATE INDEX slotpoller_jobs_schedule ON slotpoller_jobs (schedule, state) WHERE schedule IS NOT NULL;
-- The poll marks occurrences missed past their start_by: keep that a seek.
CREATE INDEX slotpoller_jobs_start_by ON slotpoller_jobs (start_by) WHERE state = 'ready' AND start_by IS NOT NULL;
