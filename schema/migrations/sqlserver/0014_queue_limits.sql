-- Version 14: what the nodes' config says of a queue beyond its routes:
-- its priority, its limits on running jobs (across the farm, on one node)
-- and on starts (rate_limit per rate_period_ms, counted in fixed windows
-- of the database clock: rate_window is the number of the window the
-- count rate_used is of, the epoch milliseconds divided by the period).
-- managed is 1 when any of them is set: such a queue's jobs are claimed
-- only under a lock on its row (see the store's limits.go), the others by
-- the plain claim as before. NULL limits are no limit. One column per ADD
-- (Babelfish refuses several).
ALTER TABLE {queues} ADD managed INT NOT NULL CONSTRAINT df_queues_managed DEFAULT 0;
ALTER TABLE {queues} ADD priority INT NOT NULL CONSTRAINT df_queues_priority DEFAULT 0;
ALTER TABLE {queues} ADD max_running INT NULL;
ALTER TABLE {queues} ADD max_per_node INT NULL;
ALTER TABLE {queues} ADD rate_limit INT NULL;
ALTER TABLE {queues} ADD rate_period_ms BIGINT NULL;
ALTER TABLE {queues} ADD rate_window BIGINT NOT NULL CONSTRAINT df_queues_rate_window DEFAULT 0;
ALTER TABLE {queues} ADD rate_used INT NOT NULL CONSTRAINT df_queues_rate_used DEFAULT 0;
-- A managed claim reads a queue's due jobs in order, and counts its
-- running jobs (on one node, too).
CREATE NONCLUSTERED INDEX jobs_queue ON {jobs} (queue, state, run_at, id);
