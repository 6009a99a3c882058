CREATE TABLE IF NOT EXISTS slotpoller_schema_version (
  version     INTEGER     NOT NULL PRIMARY KEY,
  description TEXT        NOT NULL,
  applied_at  TIMESTAMPTZ NOT NULL
);
