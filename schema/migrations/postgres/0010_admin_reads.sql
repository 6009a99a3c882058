-- The admin reads (the HTTP API's job list and retry, the dashboard) seek
-- at any table size; docs/benchmarks.md has their plans and times at
-- 1,000,000 jobs. Each index is written by every enqueue, so there are as
-- few as the reads need. Building them locks out writes to the jobs table
-- for a few seconds per million rows.
--
-- A list by state, newest first (state = ? ORDER BY id DESC, LIMIT n): a
-- backward seek that stops after n rows. It takes the place of the index
-- on (state) alone, which the capped counts by state read and still read
-- here: one index, as before.
CREATE INDEX slotpoller_jobs_state_id ON slotpoller_jobs (state, id);
DROP INDEX slotpoller_jobs_state;
-- A list by endpoint prefix: a range seek (endpoint >= prefix AND endpoint
-- < its successor, in byte order whatever the database's collation, hence
-- COLLATE "C"), so that a prefix no job has reads nothing.
CREATE INDEX slotpoller_jobs_endpoint ON slotpoller_jobs (endpoint COLLATE "C");
-- A list since or until a time (created_at >= now - since): a range seek.
CREATE INDEX slotpoller_jobs_created ON slotpoller_jobs (created_at);
