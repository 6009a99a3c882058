-- Times are datetime2 in UTC on the database clock, SYSUTCDATETIME().
-- Names, keys and states compare in a binary collation, so that they are
-- case-sensitive as on PostgreSQL and SQLite whatever the database's default
-- collation is. Text columns are nvarchar: go-mssqldb sends strings as
-- nvarchar, and a varchar column compared with an nvarchar parameter would
-- be converted row by row instead of sought.
CREATE TABLE {nodes} (
  name            NVARCHAR(200) COLLATE Latin1_General_100_BIN2 NOT NULL CONSTRAINT pk_nodes PRIMARY KEY,
  incarnation     NVARCHAR(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
  state           NVARCHAR(20)  COLLATE Latin1_General_100_BIN2 NOT NULL,
  capacity        INT           NOT NULL,
  free            INT           NOT NULL,
  offset_us       BIGINT        NOT NULL DEFAULT 0,
  offset_error_us BIGINT        NOT NULL DEFAULT 0,
  started_at      DATETIME2(7)  NOT NULL,
  last_seen       DATETIME2(7)  NOT NULL,
  left_at         DATETIME2(7)  NULL,
  backlog_until   DATETIME2(7)  NULL
);

CREATE TABLE {jobs} (
  id           BIGINT         IDENTITY(1,1) NOT NULL CONSTRAINT pk_jobs PRIMARY KEY CLUSTERED,
  endpoint     NVARCHAR(MAX)  NOT NULL,
  method       NVARCHAR(16)   NOT NULL,
  payload      VARBINARY(MAX) NULL,
  state        NVARCHAR(20)   COLLATE Latin1_General_100_BIN2 NOT NULL,
  run_at       DATETIME2(7)   NOT NULL,
  attempt      INT            NOT NULL DEFAULT 0,
  max_attempts INT            NOT NULL,
  timeout_ms   BIGINT         NOT NULL DEFAULT 0,
  unique_key   NVARCHAR(450)  COLLATE Latin1_General_100_BIN2 NULL,
  idem_key     NVARCHAR(MAX)  NOT NULL,
  owner        NVARCHAR(200)  COLLATE Latin1_General_100_BIN2 NULL,
  owner_node   NVARCHAR(200)  COLLATE Latin1_General_100_BIN2 NULL,
  token        BIGINT         NOT NULL DEFAULT 0,
  lease_until  DATETIME2(7)   NULL,
  created_at   DATETIME2(7)   NOT NULL,
  started_at   DATETIME2(7)   NULL,
  finished_at  DATETIME2(7)   NULL,
  last_status  INT            NULL,
  last_error   NVARCHAR(MAX)  NULL
);

-- A unique key is unique among the jobs that have one (a filtered index:
-- a plain unique index would allow a single NULL).
CREATE UNIQUE NONCLUSTERED INDEX jobs_unique_key ON {jobs} (unique_key) WHERE unique_key IS NOT NULL;
-- The claim: a seek on state = 'ready' AND run_at <= now that returns the
-- rows in claim order (run_at, id), covering the pick (id is the key).
CREATE NONCLUSTERED INDEX jobs_due ON {jobs} (state, run_at, id);
-- Lease scans: expired leases (state = 'running' AND lease_until < now) and
-- an owner's renewal (state = 'running' AND owner = ?), owner included so
-- that finding an owner's rows needs no lookup.
CREATE NONCLUSTERED INDEX jobs_lease ON {jobs} (state, lease_until) INCLUDE (owner);
