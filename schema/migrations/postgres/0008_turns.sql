-- The dashboard's rotation strip: each node's recently polled slot numbers,
-- written with its heartbeat (no extra statement), newest first, as the
-- newest slot and then the gaps back to each older one ("1780000123,3,3").
ALTER TABLE slotpoller_nodes ADD COLUMN turns TEXT;
