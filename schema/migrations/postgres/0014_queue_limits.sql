-- Version 14: what the nodes' config says of a queue beyond its routes:
-- its priority, its limits on running jobs (across the farm, on one node)
-- and on starts (rate_limit per rate_period_ms, counted in fixed windows
-- of the database clock: rate_window is the number of the window the
-- count rate_used is of, the epoch milliseconds divided by the period).
-- managed is 1 when any of them is set: such a queue's jobs are claimed
-- only under a lock on its row (see the store's limits.go), the others by
-- the plain claim as before. NULL limits are no limit.
ALTER TABLE slotpoller_queues ADD COLUMN managed        INTEGER NOT NULL DEFAULT 0;
ALTER TABLE slotpoller_queues ADD COLUMN priority       INTEGER NOT NULL DEFAULT 0;
ALTER TABLE slotpoller_queues ADD COLUMN max_running    INTEGER;
ALTER TABLE slotpoller_queues ADD COLUMN max_per_node   INTEGER;
ALTER TABLE slotpoller_queues ADD COLUMN rate_limit     INTEGER;
ALTER TABLE slotpoller_queues ADD COLUMN rate_period_ms BIGINT;
ALTER TABLE slotpoller_queues ADD COLUMN rate_window    BIGINT  NOT NULL DEFAULT 0;
ALTER TABLE slotpoller_queues ADD COLUMN rate_used      INTEGER NOT NULL DEFAULT 0;
-- A managed claim reads a queue's due jobs in order, and counts its
-- running jobs (on one node, too), each through its own index.
CREATE INDEX slotpoller_jobs_queue_due ON slotpoller_jobs (queue, run_at, id) WHERE state = 'ready';
CREATE INDEX slotpoller_jobs_queue_running ON slotpoller_jobs (queue, owner_node) WHERE state = 'running';
