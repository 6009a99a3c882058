-- Cancel of a running job: an operator's request, written on the running
-- row (who asked, and when on the database clock) and read back by the
-- owner's next lease renewal, which cancels the call. Both NULL: nobody
-- asked. A reclaim of a row that carries a request ends it cancelled.
-- One column per ADD (Babelfish refuses several).
ALTER TABLE {jobs} ADD cancel_requested_by NVARCHAR(200) NULL;
ALTER TABLE {jobs} ADD cancel_requested_at DATETIME2(7) NULL;
