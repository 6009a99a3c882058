-- Version 18: the operator audit log. One row per operator action (a job
-- retried or cancelled, a queue paused, a schedule changed...), written by
-- the CLI and the admin API beside the action itself: who (actor: an OS
-- user, an API token or a dashboard sign-in), from where (origin: a host,
-- a remote address), what was done (action, e.g. job.retry, queue.pause),
-- to what (target: a job id, a queue or schedule name, a filter) and how
-- it went (detail). at is the database clock when the row was written,
-- UTC_TIMESTAMP(6), a DATETIME(6) as every time here. The store cuts each
-- text to its width, so that a record never fails for being long.
--
-- MySQL commits every DDL statement on its own: the table is created only
-- if missing, its index inside it, so that a migration cut short is
-- finished by running this again. utf8mb4 in its binary collation, as the
-- other tables: an actor or action compares case-sensitively.
CREATE TABLE IF NOT EXISTS slotpoller_audit (
  id     BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
  at     DATETIME(6)   NOT NULL,
  actor  VARCHAR(200)  NOT NULL,
  origin VARCHAR(200)  NOT NULL,
  action VARCHAR(100)  NOT NULL,
  target VARCHAR(400)  NOT NULL,
  detail VARCHAR(1000) NOT NULL DEFAULT '',
  -- Retention deletes the entries older than an age, oldest first: a
  -- range of this index. A list walks the primary key newest first.
  KEY slotpoller_audit_at (at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
