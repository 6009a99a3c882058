-- Times are integer Unix milliseconds on the database clock.
CREATE TABLE slotpoller_nodes (
  name            TEXT    NOT NULL PRIMARY KEY,
  incarnation     TEXT    NOT NULL,
  state           TEXT    NOT NULL,
  capacity        INTEGER NOT NULL,
  free            INTEGER NOT NULL,
  offset_us       INTEGER NOT NULL DEFAULT 0,
  offset_error_us INTEGER NOT NULL DEFAULT 0,
  started_at      INTEGER NOT NULL,
  last_seen       INTEGER NOT NULL,
  left_at         INTEGER,
  backlog_until   INTEGER
);

CREATE TABLE slotpoller_jobs (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  endpoint     TEXT    NOT NULL,
  method       TEXT    NOT NULL,
  payload      BLOB,
  state        TEXT    NOT NULL,
  run_at       INTEGER NOT NULL,
  attempt      INTEGER NOT NULL DEFAULT 0,
  max_attempts INTEGER NOT NULL,
  timeout_ms   INTEGER NOT NULL DEFAULT 0,
  unique_key   TEXT,
  idem_key     TEXT    NOT NULL,
  owner        TEXT,
  owner_node   TEXT,
  token        INTEGER NOT NULL DEFAULT 0,
  lease_until  INTEGER,
  created_at   INTEGER NOT NULL,
  started_at   INTEGER,
  finished_at  INTEGER,
  last_status  INTEGER,
  last_error   TEXT
);

CREATE UNIQUE INDEX slotpoller_jobs_unique_key ON slotpoller_jobs (unique_key) WHERE unique_key IS NOT NULL;
CREATE INDEX slotpoller_jobs_due ON slotpoller_jobs (run_at, id) WHERE state = 'ready';
CREATE INDEX slotpoller_jobs_lease ON slotpoller_jobs (lease_until) WHERE state = 'running';
CREATE INDEX slotpoller_jobs_state ON slotpoller_jobs (state);
