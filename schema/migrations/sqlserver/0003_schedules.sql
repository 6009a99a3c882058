-- Recurring schedules; their occurrences are jobs under a unique key.
CREATE TABLE {schedules} (
  name         NVARCHAR(200)  COLLATE Latin1_General_100_BIN2 NOT NULL CONSTRAINT pk_schedules PRIMARY KEY,
  every_ms     BIGINT         NOT NULL DEFAULT 0,
  cron         NVARCHAR(200)  NOT NULL DEFAULT '',
  time_zone    NVARCHAR(100)  NOT NULL DEFAULT '',
  endpoint     NVARCHAR(MAX)  NOT NULL,
  method       NVARCHAR(16)   NOT NULL,
  payload      VARBINARY(MAX) NULL,
  timeout_ms   BIGINT         NOT NULL DEFAULT 0,
  max_attempts INT            NOT NULL,
  tolerance_ms BIGINT         NOT NULL,
  misfire      NVARCHAR(16)   COLLATE Latin1_General_100_BIN2 NOT NULL,
  overlap      NVARCHAR(16)   COLLATE Latin1_General_100_BIN2 NOT NULL,
  enabled      INT            NOT NULL,
  next_fire_at DATETIME2(7)   NULL,
  missed       BIGINT         NOT NULL DEFAULT 0,
  version      BIGINT         NOT NULL DEFAULT 0,
  last_fire_at DATETIME2(7)   NULL,
  source       NVARCHAR(16)   NOT NULL,
  created_at   DATETIME2(7)   NOT NULL,
  updated_at   DATETIME2(7)   NOT NULL
);

CREATE NONCLUSTERED INDEX schedules_next ON {schedules} (enabled, next_fire_at);

-- One ALTER TABLE ... ADD per column: SQL Server takes several columns in
-- one ADD, Babelfish (Aurora's T-SQL layer) does not, and the schema is the
-- same either way.
ALTER TABLE {jobs} ADD schedule NVARCHAR(200) COLLATE Latin1_General_100_BIN2 NULL;
ALTER TABLE {jobs} ADD scheduled_for DATETIME2(7) NULL;
ALTER TABLE {jobs} ADD start_by DATETIME2(7) NULL;
ALTER TABLE {jobs} ADD exclusive INT NOT NULL CONSTRAINT df_jobs_exclusive DEFAULT 0;

CREATE NONCLUSTERED INDEX jobs_schedule ON {jobs} (schedule, state) WHERE schedule IS NOT NULL;
-- The poll marks occurrences missed past their start_by: keep that a seek.
CREATE NONCLUSTERED INDEX jobs_start_by ON {jobs} (state, start_by) WHERE start_by IS NOT NULL;
