-- Endless tasks: each held by one node at a time under a lease and a token.
CREATE TABLE {tasks} (
  name         NVARCHAR(200)  COLLATE Latin1_General_100_BIN2 NOT NULL CONSTRAINT pk_tasks PRIMARY KEY,
  endpoint     NVARCHAR(MAX)  NOT NULL,
  method       NVARCHAR(16)   NOT NULL,
  payload      VARBINARY(MAX) NULL,
  every_ms     BIGINT         NOT NULL,
  timeout_ms   BIGINT         NOT NULL DEFAULT 0,
  state        NVARCHAR(20)   COLLATE Latin1_General_100_BIN2 NOT NULL,
  owner        NVARCHAR(200)  COLLATE Latin1_General_100_BIN2 NULL,
  owner_node   NVARCHAR(200)  COLLATE Latin1_General_100_BIN2 NULL,
  token        BIGINT         NOT NULL DEFAULT 0,
  lease_until  DATETIME2(7)   NULL,
  since        DATETIME2(7)   NULL,
  handoff      INT            NOT NULL DEFAULT 0,
  calls        BIGINT         NOT NULL DEFAULT 0,
  failures     INT            NOT NULL DEFAULT 0,
  last_call_at DATETIME2(7)   NULL,
  last_status  INT            NULL,
  last_error   NVARCHAR(MAX)  NULL,
  created_at   DATETIME2(7)   NOT NULL,
  deleted_at   DATETIME2(7)   NULL
);

CREATE NONCLUSTERED INDEX tasks_owner ON {tasks} (owner);
CREATE NONCLUSTERED INDEX tasks_state ON {tasks} (state);
