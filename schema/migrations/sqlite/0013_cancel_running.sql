-- Cancel of a running job: an operator's request, written on the running
-- row (who asked, and when on the database clock, in milliseconds) and read
-- back by the owner's next lease renewal, which cancels the call. Both
-- NULL: nobody asked. A reclaim of a row that carries a request ends it
-- cancelled.
ALTER TABLE slotpoller_jobs ADD COLUMN cancel_requested_by TEXT;
ALTER TABLE slotpoller_jobs ADD COLUMN cancel_requested_at INTEGER;
