-- Version 18: the operator audit log. One row per operator action (a job
-- retried or cancelled, a queue paused, a schedule changed...), written by
-- the CLI and the admin API beside the action itself: who (actor: an OS
-- user, an API token or a dashboard sign-in), from where (origin: a host,
-- a remote address), what was done (action, e.g. job.retry, queue.pause),
-- to what (target: a job id, a queue or schedule name, a filter) and how
-- it went (detail). at is the database clock when the row was written, in
-- integer Unix milliseconds like every time here. SQLite does not enforce
-- a TEXT's width: the store cuts each text to the width the other
-- databases give it (200, 200, 100, 400, 1000 characters), so that every
-- database keeps the same entry. AUTOINCREMENT, as for jobs: an id is
-- never given again after the newest rows are pruned, so a page's cursor
-- (ids below it) stays where it was.
CREATE TABLE slotpoller_audit (
  id     INTEGER PRIMARY KEY AUTOINCREMENT,
  at     INTEGER NOT NULL,
  actor  TEXT    NOT NULL,
  origin TEXT    NOT NULL,
  action TEXT    NOT NULL,
  target TEXT    NOT NULL,
  detail TEXT    NOT NULL DEFAULT ''
);
-- Retention deletes the entries older than an age, oldest first: a range
-- of this index. A list walks the primary key newest first.
CREATE INDEX slotpoller_audit_at ON slotpoller_audit (at);
