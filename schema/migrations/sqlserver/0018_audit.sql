-- Version 18: the operator audit log. One row per operator action (a job
-- retried or cancelled, a queue paused, a schedule changed...), written by
-- the CLI and the admin API beside the action itself: who (actor: an OS
-- user, an API token or a dashboard sign-in), from where (origin: a host,
-- a remote address), what was done (action, e.g. job.retry, queue.pause),
-- to what (target: a job id, a queue or schedule name, a filter) and how
-- it went (detail). at is the database clock when the row was written,
-- SYSUTCDATETIME(). The store cuts each text to its width, so that a
-- record never fails for being long.
--
-- Text is NVARCHAR, as everywhere in this schema: go-mssqldb sends strings
-- as nvarchar, and an operator's name need not be ASCII. A width counts
-- UTF-16 code units, so the store counts a character outside the Basic
-- Multilingual Plane as two on every database. actor and action, which a
-- list filters on, compare in a binary collation: case-sensitive, as on
-- the other databases.
CREATE TABLE {audit} (
  id     BIGINT         IDENTITY(1,1) NOT NULL CONSTRAINT pk_audit PRIMARY KEY CLUSTERED,
  at     DATETIME2(7)   NOT NULL,
  actor  NVARCHAR(200)  COLLATE Latin1_General_100_BIN2 NOT NULL,
  origin NVARCHAR(200)  NOT NULL,
  action NVARCHAR(100)  COLLATE Latin1_General_100_BIN2 NOT NULL,
  target NVARCHAR(400)  NOT NULL,
  detail NVARCHAR(1000) NOT NULL CONSTRAINT df_audit_detail DEFAULT ''
);
-- Retention deletes the entries older than an age, oldest first: a range
-- seek of this index. A list walks the clustered key newest first.
CREATE NONCLUSTERED INDEX audit_at ON {audit} (at);
