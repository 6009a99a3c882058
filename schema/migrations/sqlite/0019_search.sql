-- Version 19: finding a job (JobsSearch). An exact lookup by idempotency
-- key seeks this index, newest first among the jobs that share a key; by
-- id and by unique key the primary key and the unique key's index serve.
-- The text search reads the newest jobs by the primary key.
CREATE INDEX slotpoller_jobs_idem_key ON slotpoller_jobs (idem_key, id);
