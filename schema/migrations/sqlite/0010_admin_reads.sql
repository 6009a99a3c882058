-- The admin reads (the HTTP API's job list and retry, the dashboard) seek
-- at any table size; docs/benchmarks.md has their plans and times at
-- 1,000,000 jobs. Each index is written by every enqueue, so there are as
-- few as the reads need.
--
-- A list by state, newest first, needs nothing new: the index on (state)
-- holds each state's rows in rowid (id) order.
--
-- A list by endpoint prefix: a range seek (endpoint >= prefix AND endpoint
-- < its successor, in the BINARY collation's byte order), so that a prefix
-- no job has reads nothing.
CREATE INDEX slotpoller_jobs_endpoint ON slotpoller_jobs (endpoint);
-- A list since or until a time (created_at >= now - since): a range seek.
CREATE INDEX slotpoller_jobs_created ON slotpoller_jobs (created_at);
