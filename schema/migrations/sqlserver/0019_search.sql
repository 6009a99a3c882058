-- Version 19: finding a job (JobsSearch). An exact lookup by idempotency
-- key seeks an index, newest first among the jobs that share a key; by id
-- and by unique key the clustered key and jobs_unique_key serve. The text
-- search reads the newest jobs by the clustered key.
--
-- The key, NVARCHAR(MAX), cannot be an index key: the index holds a
-- computed column of its first 200 characters (all of it: a key is at
-- most 200 printable ASCII characters), in a binary collation, so that
-- the lookup is case-sensitive as on the other databases. Not PERSISTED:
-- Babelfish refuses the word, and SQL Server indexes a deterministic
-- computed column without it (as endpoint_head, migration 10). id is
-- written out: SQL Server would append the clustered key by itself,
-- Babelfish does not.
ALTER TABLE {jobs} ADD idem_key_200 AS CAST(LEFT(idem_key, 200) AS NVARCHAR(200)) COLLATE Latin1_General_100_BIN2;
CREATE NONCLUSTERED INDEX jobs_idem_key ON {jobs} (idem_key_200, id);
