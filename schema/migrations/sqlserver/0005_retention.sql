-- Retention deletes finished jobs oldest first, one state at a time, in
-- bounded batches: a seek on (state, finished_at). Not filtered on
-- finished_at IS NOT NULL, so that the seek never depends on the optimizer
-- matching a filter with a parameterized predicate.
CREATE NONCLUSTERED INDEX jobs_finished ON {jobs} (state, finished_at);
-- status and /metrics count the jobs backing off after a failure (ready,
-- attempt > 0, due later) with a capped count: a seek on these rows alone.
-- The filter is made of literals, as the count's predicate is.
CREATE NONCLUSTERED INDEX jobs_retrying ON {jobs} (run_at) WHERE state = 'ready' AND attempt > 0;
