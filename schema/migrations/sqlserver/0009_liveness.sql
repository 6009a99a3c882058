-- Liveness: how long the node stays live without another write (database
-- time, written with its turns by a node that holds a session lock).
-- lock_key stays NULL on SQL Server for now: its nodes heartbeat. A session
-- applock (sp_getapplock, checked with APPLOCK_TEST) would take its place
-- once the nodes can be woken between turns as LISTEN/NOTIFY does on
-- PostgreSQL.
ALTER TABLE {nodes} ADD live_until datetime2(7) NULL;
ALTER TABLE {nodes} ADD lock_key bigint NULL;
