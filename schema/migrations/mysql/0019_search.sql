-- Version 19: finding a job (JobsSearch). An exact lookup by idempotency
-- key seeks this index, newest first among the jobs that share a key; by
-- id and by unique key the primary key and the unique key's index serve.
-- The text search reads the newest jobs by the primary key.
--
-- MySQL commits every DDL statement on its own: the index is created by a
-- statement built from what information_schema says, a no-op once it is
-- there, so that a migration cut short is finished by running it again.
SET @slotpoller_v19 = (SELECT IF(COUNT(*) = 0,
  'CREATE INDEX slotpoller_jobs_idem_key ON slotpoller_jobs (idem_key, id)', 'DO 0')
  FROM information_schema.statistics
  WHERE table_schema = DATABASE() AND table_name = 'slotpoller_jobs' AND index_name = 'slotpoller_jobs_idem_key');
PREPARE slotpoller_v19 FROM @slotpoller_v19;
EXECUTE slotpoller_v19;
DEALLOCATE PREPARE slotpoller_v19;
SET @slotpoller_v19 = NULL;
