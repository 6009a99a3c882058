-- Endless tasks: each held by one node at a time under a lease and a token.
CREATE TABLE slotpoller_tasks (
  name         TEXT        NOT NULL PRIMARY KEY,
  endpoint     TEXT        NOT NULL,
  method       TEXT        NOT NULL,
  payload      BYTEA,
  every_ms     BIGINT      NOT NULL,
  timeout_ms   BIGINT      NOT NULL DEFAULT 0,
  state        TEXT        NOT NULL,
  owner        TEXT,
  owner_node   TEXT,
  token        BIGINT      NOT NULL DEFAULT 0,
  lease_until  TIMESTAMPTZ,
  since        TIMESTAMPTZ,
  handoff      INTEGER     NOT NULL DEFAULT 0,
  calls        BIGINT      NOT NULL DEFAULT 0,
  failures     INTEGER     NOT NULL DEFAULT 0,
  last_call_at TIMESTAMPTZ,
  last_status  INTEGER,
  last_error   TEXT,
  created_at   TIMESTAMPTZ NOT NULL,
  deleted_at   TIMESTAMPTZ
);

CREATE INDEX slotpoller_tasks_owner ON slotpoller_tasks (owner);
CREATE INDEX slotpoller_tasks_state ON slotpoller_tasks (state);
