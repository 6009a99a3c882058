-- Liveness: how long the node stays live without another write (database
-- time, written with its turns by a node that holds a session lock).
-- lock_key stays NULL on SQLite: its nodes share one host and heartbeat.
ALTER TABLE slotpoller_nodes ADD COLUMN live_until INTEGER;
ALTER TABLE slotpoller_nodes ADD COLUMN lock_key INTEGER;
