-- The dashboard's rotation strip: each node's recently polled slot numbers,
-- written with its heartbeat (no extra statement), newest first, as the
-- newest slot and then the gaps back to each older one ("1780000123,3,3").
-- Bounded by the writer (64 turns); 1000 characters leave room.
ALTER TABLE {nodes} ADD turns nvarchar(1000) NULL;
