-- Endless tasks: each held by one node at a time under a lease and a token.
CREATE TABLE slotpoller_tasks (
  name         TEXT    NOT NULL PRIMARY KEY,
  endpoint     TEXT    NOT NULL,
  method       TEXT    NOT NULL,
  payload      BLOB,
  every_ms     INTEGER NOT NULL,
  timeout_ms   INTEGER NOT NULL DEFAULT 0,
  state        TEXT    NOT NULL,
  owner        TEXT,
  owner_node   TEXT,
  token        INTEGER NOT NULL DEFAULT 0,
  lease_until  INTEGER,
  since        INTEGER,
  handoff      INTEGER NOT NULL DEFAULT 0,
  calls        INTEGER NOT NULL DEFAULT 0,
  failures     INTEGER NOT NULL DEFAULT 0,
  last_call_at INTEGER,
  last_status  INTEGER,
  last_error   TEXT,
  created_at   INTEGER NOT NULL,
  deleted_at   INTEGER
);

CREATE INDEX slotpoller_tasks_owner ON slotpoller_tasks (owner);
CREATE INDEX slotpoller_tasks_state ON slotpoller_tasks (state);
