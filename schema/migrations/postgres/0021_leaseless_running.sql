-- Version 21: the turn's look for a running job without a lease, which no
-- door writes (an odd row the reclaim takes), seeks an index that is
-- always empty. Through the lease index it was the planner's choice: it
-- takes a running job's lease for as likely to be NULL as any other job's
-- (most jobs, done or ready, have none), expects a match within a few
-- pages, and read the whole jobs table in a sequential scan, at every
-- turn of a busy farm (TestRoutineStatementsReadNeitherHistoryNorLaterJobs).
-- A row is entered only when it matches, so claims and finishes write
-- nothing here.
CREATE INDEX slotpoller_jobs_leaseless ON slotpoller_jobs (id) WHERE state = 'running' AND lease_until IS NULL;
