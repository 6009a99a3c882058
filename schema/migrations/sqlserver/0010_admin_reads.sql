-- The admin reads (the HTTP API's job list and retry, the dashboard) seek
-- at any table size; docs/benchmarks.md has their plans and times at
-- 1,000,000 jobs. Each index is written by every enqueue, so there are as
-- few as the reads need.
--
-- A list by state, newest first (state = ? ORDER BY id DESC, TOP n): a
-- backward seek that stops after n rows. (SQL Server would append the
-- clustered key id to an index on (state) by itself; Babelfish does not.)
CREATE NONCLUSTERED INDEX jobs_state ON {jobs} (state, id);
-- A list by endpoint prefix: a range seek (endpoint_head >= prefix AND
-- endpoint_head < its successor), so that a prefix no job has reads
-- nothing. The endpoint, NVARCHAR(MAX), cannot be an index key: the index
-- holds its first 400 characters (800 bytes, under the 900-byte key limit
-- with id), in a binary collation, in which the range is exact for the
-- ASCII prefixes that bound it. Not PERSISTED: Babelfish refuses the word,
-- and SQL Server indexes a deterministic computed column without it.
ALTER TABLE {jobs} ADD endpoint_head AS CAST(LEFT(endpoint, 400) AS NVARCHAR(400)) COLLATE Latin1_General_100_BIN2;
CREATE NONCLUSTERED INDEX jobs_endpoint ON {jobs} (endpoint_head);
-- A list since or until a time (created_at >= now - since): a range seek.
CREATE NONCLUSTERED INDEX jobs_created ON {jobs} (created_at);
