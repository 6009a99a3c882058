-- Retention deletes finished jobs oldest first, one state at a time, in
-- bounded batches: a seek on (state, finished_at). Only finished rows have
-- finished_at, so enqueues and claims do not write this index.
CREATE INDEX slotpoller_jobs_finished ON slotpoller_jobs (state, finished_at) WHERE finished_at IS NOT NULL;
-- status and /metrics count the jobs backing off after a failure (ready,
-- attempt > 0, due later) with a capped count: a seek on these rows alone.
CREATE INDEX slotpoller_jobs_retrying ON slotpoller_jobs (run_at) WHERE state = 'ready' AND attempt > 0;
