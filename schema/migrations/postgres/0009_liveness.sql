-- Liveness at constant database cost. A node writes its row only in its own
-- turn, once per rotation, and says how long it stays live without another
-- write (live_until, database time); between turns the session advisory
-- lock it holds under lock_key on a connection of its own says it is still
-- running: the database releases it when the process or its connection
-- dies. A row without a lock_key (a node of an older version) is live by
-- its heartbeat (last_seen) as before.
ALTER TABLE slotpoller_nodes ADD COLUMN live_until TIMESTAMPTZ;
ALTER TABLE slotpoller_nodes ADD COLUMN lock_key BIGINT;
