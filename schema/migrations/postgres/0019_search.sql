-- Version 19: finding a job (JobsSearch). An exact lookup by idempotency
-- key seeks this index (the few jobs that share a key are sorted, newest
-- first); by id and by unique key the primary key and the unique key's
-- index serve. The text search reads the newest jobs by the primary key.
-- A hash index, not a btree: a claim and a finish change the job's state,
-- which is indexed, so every update writes an entry here; on random keys
-- a btree's entries cost the 100,000-job burn-down 41% more database CPU
-- per job, a hash index's a few percent (TestEveryJobsIndexWrittenByEachUpdateIsChosen).
CREATE INDEX slotpoller_jobs_idem_key ON slotpoller_jobs USING hash (idem_key);
