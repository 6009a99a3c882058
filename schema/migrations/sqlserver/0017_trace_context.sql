-- Version 17: W3C trace context. A job may carry the traceparent of the
-- trace that enqueued it (https://www.w3.org/TR/trace-context/, e.g.
-- 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01); the node sends
-- it on to the job's endpoint. NULL: none. 55 characters, the length of a
-- version-00 traceparent and of any later version's first four fields;
-- ASCII (hex and dashes), so VARCHAR.
ALTER TABLE {jobs} ADD trace_parent VARCHAR(55) NULL;
GO
-- The entry point gains a trailing parameter, @traceparent (NULL or '':
-- none), after @queue, checked as the Go client checks it and stored
-- lowercased. NVARCHAR(MAX), like the other text parameters, so that
-- nothing is cut short before it is checked. The rest is version 12's,
-- unchanged; ALTER keeps the permissions granted on the procedure.
ALTER PROCEDURE [{schema}].[enqueue_v1]
  @endpoint        NVARCHAR(MAX),
  @payload         VARBINARY(MAX) = NULL,
  @method          NVARCHAR(MAX)  = N'POST',
  @delay_ms        BIGINT         = NULL,
  @run_at          DATETIME2(7)   = NULL,
  @max_attempts    INT            = 33,
  @timeout_ms      BIGINT         = 0,
  @unique_key      NVARCHAR(MAX)  = NULL,
  @idempotency_key NVARCHAR(MAX)  = NULL,
  @id              BIGINT         = NULL OUTPUT,
  @queue           NVARCHAR(MAX)  = NULL,
  @traceparent     NVARCHAR(MAX)  = NULL
AS
BEGIN
  SET NOCOUNT ON;
  -- A write to a table with an index on a computed column (endpoint_head,
  -- migration 10) needs these settings, and a caller's session may have
  -- others (DB-Library and FreeTDS clients start with ANSI_WARNINGS off).
  -- Set in the procedure, they last until it returns.
  SET ANSI_WARNINGS ON;
  SET ARITHABORT ON;
  SET ANSI_PADDING ON;
  SET CONCAT_NULL_YIELDS_NULL ON;
  SET NUMERIC_ROUNDABORT OFF;
  DECLARE @now DATETIME2(7) = SYSUTCDATETIME();
  DECLARE @problem NVARCHAR(2000) = NULL;
  DECLARE @shown NVARCHAR(300) = N'"' + LEFT(COALESCE(@endpoint, N''), 200) + N'"';
  DECLARE @path NVARCHAR(MAX), @rest NVARCHAR(MAX), @seg NVARCHAR(MAX), @at INT, @existing BIGINT;
  DECLARE @trace NVARCHAR(MAX) = LOWER(@traceparent);
  SET @method = COALESCE(@method, N'POST');
  SET @max_attempts = COALESCE(@max_attempts, 33);
  SET @timeout_ms = COALESCE(@timeout_ms, 0);
  IF LEN(@unique_key + N'x') = 1 SET @unique_key = NULL;

  -- The endpoint: the textual rules of jobs.ResolveEndpoint.
  SET @path = COALESCE(@endpoint, N'');
  IF CHARINDEX(N'?', @path) > 0 SET @path = LEFT(@path, CHARINDEX(N'?', @path) - 1);
  IF @endpoint IS NULL OR LEN(@endpoint + N'x') = 1
    SET @problem = N'endpoint: endpoint is empty; it must be a path starting with /';
  ELSE IF @endpoint COLLATE Latin1_General_100_BIN2 LIKE N'%[' + NCHAR(1) + N'-' + NCHAR(31) + NCHAR(127) + N']%'
    OR CHARINDEX(NCHAR(0), @endpoint COLLATE Latin1_General_100_BIN2) > 0
    SET @problem = N'endpoint: endpoint ' + @shown + N' contains a control character';
  ELSE IF CHARINDEX(N'\', @path) > 0
    SET @problem = N'endpoint: endpoint ' + @shown + N' contains a backslash, which some servers treat as /';
  ELSE IF CHARINDEX(N'#', @endpoint) > 0
    SET @problem = N'endpoint: endpoint ' + @shown + N' contains a fragment (#), which is never sent to a server';
  ELSE IF @endpoint LIKE N'[A-Za-z]%:%' AND LEFT(@endpoint, CHARINDEX(N':', @endpoint) - 1) COLLATE Latin1_General_100_BIN2 NOT LIKE N'%[^A-Za-z0-9+.-]%'
    SET @problem = N'endpoint: endpoint ' + @shown + N' is an absolute URL; only a path on the node''s own base URL is allowed';
  ELSE IF LEFT(@endpoint, 2) = N'//'
    SET @problem = N'endpoint: endpoint ' + @shown + N' is a scheme-relative URL (//host); only a path on the node''s own base URL is allowed';
  ELSE IF LEFT(@endpoint, 1) <> N'/'
    SET @problem = N'endpoint: endpoint ' + @shown + N' must start with /';
  ELSE IF @path LIKE N'%[%]' OR @path LIKE N'%[%]_'
    OR @path COLLATE Latin1_General_100_BIN2 LIKE N'%[%][^0-9A-Fa-f]%' OR @path COLLATE Latin1_General_100_BIN2 LIKE N'%[%]_[^0-9A-Fa-f]%'
    SET @problem = N'endpoint: endpoint ' + @shown + N' has invalid percent-encoding';
  ELSE IF @path COLLATE Latin1_General_100_BIN2 LIKE N'%[%][01][0-9A-Fa-f]%' OR @path COLLATE Latin1_General_100_BIN2 LIKE N'%[%]7[Ff]%'
    SET @problem = N'endpoint: endpoint ' + @shown + N' contains an encoded control character';
  -- Stricter than Go, which decodes up to four times: an encoded /, \ or %
  -- is refused outright, so one decoding of %2E is all that is left.
  ELSE IF @path COLLATE Latin1_General_100_BIN2 LIKE N'%[%][2][Ff5]%' OR @path COLLATE Latin1_General_100_BIN2 LIKE N'%[%]5[Cc]%'
    SET @problem = N'endpoint: endpoint ' + @shown + N' has an encoded /, \ or % in its path, which the database entry point does not take';
  ELSE
  BEGIN
    SET @rest = REPLACE(REPLACE(@path COLLATE Latin1_General_100_BIN2, N'%2e', N'.'), N'%2E', N'.') + N'/';
    WHILE @problem IS NULL AND LEN(@rest + N'x') > 1
    BEGIN
      SET @at = CHARINDEX(N'/', @rest);
      SET @seg = LEFT(@rest, @at - 1);
      SET @rest = SUBSTRING(@rest, @at + 1, DATALENGTH(@rest));
      IF CHARINDEX(N';', @seg) > 0 SET @seg = LEFT(@seg, CHARINDEX(N';', @seg) - 1);
      SET @seg = RTRIM(@seg);
      IF LEN(@seg + N'x') > 1 AND LEN(REPLACE(@seg, N'.', N'') + N'x') = 1
        SET @problem = N'endpoint: endpoint ' + @shown + N' has a "' + LEFT(@seg, 50) + N'" path segment (after percent-decoding); dot segments are not allowed';
    END;
  END;

  IF @problem IS NULL AND NOT (@method COLLATE Latin1_General_100_BIN2 IN (N'GET', N'POST', N'PUT', N'PATCH', N'DELETE')
      AND LEN(@method + N'x') = LEN(@method) + 1)
    SET @problem = N'method: method "' + LEFT(@method, 50) + N'" is not one of GET, POST, PUT, PATCH, DELETE';
  IF @problem IS NULL AND (@max_attempts < 1 OR @max_attempts > 1000)
    SET @problem = N'max_attempts: max attempts ' + CAST(@max_attempts AS NVARCHAR(20)) + N' must be between 1 and 1000';
  IF @problem IS NULL AND @timeout_ms < 0
    SET @problem = N'timeout: timeout ' + CAST(@timeout_ms AS NVARCHAR(20)) + N'ms must not be negative';
  IF @problem IS NULL AND @timeout_ms > 86400000
    SET @problem = N'timeout: timeout ' + CAST(@timeout_ms AS NVARCHAR(20)) + N'ms is above 24h0m0s';
  IF @problem IS NULL AND @delay_ms < 0
    SET @problem = N'delay: delay ' + CAST(@delay_ms AS NVARCHAR(20)) + N'ms must not be negative';
  IF @problem IS NULL AND @delay_ms > 31622400000
    SET @problem = N'delay: delay ' + CAST(@delay_ms AS NVARCHAR(20)) + N'ms is more than 366 days ahead; a job may be due at most that far ahead';
  IF @problem IS NULL AND @run_at > DATEADD(day, 366, @now)
    SET @problem = N'run_at: run at ' + CONVERT(NVARCHAR(27), @run_at, 126) + N'Z is more than 366 days ahead; a job may be due at most that far ahead';
  IF @problem IS NULL AND @run_at < '19700101'
    SET @problem = N'run_at: run at ' + CONVERT(NVARCHAR(27), @run_at, 126) + N'Z is before 1970-01-01; a job''s run time must be a real time (a past one means now)';
  IF @problem IS NULL AND @run_at IS NOT NULL AND COALESCE(@delay_ms, 0) <> 0
    SET @problem = N'run_at: give a run time or a delay, not both';
  IF @problem IS NULL AND DATALENGTH(@payload) > 1048576
    SET @problem = N'payload: payload is ' + CAST(DATALENGTH(@payload) AS NVARCHAR(20)) + N' bytes; at most 1048576 (1 MiB) are allowed';
  IF @problem IS NULL AND LEN(@unique_key + N'x') - 1 > 450
    SET @problem = N'unique_key: unique key must be at most 450 characters (it has ' + CAST(LEN(@unique_key + N'x') - 1 AS NVARCHAR(20)) + N')';
  IF @problem IS NULL AND @idempotency_key IS NOT NULL AND (LEN(@idempotency_key + N'x') = 1 OR LEN(@idempotency_key + N'x') - 1 > 200
      OR LEFT(@idempotency_key, 1) = N' ' OR RIGHT(@idempotency_key, 1) = N' '
      OR @idempotency_key COLLATE Latin1_General_100_BIN2 LIKE N'%[^ -~]%')
    SET @problem = N'idempotency_key: idempotency key must be 1 to 200 printable ASCII characters, without a leading or trailing space';
  IF LEN(@queue + N'x') = 1 SET @queue = NULL;
  IF @problem IS NULL AND @queue IS NOT NULL AND (LEN(@queue + N'x') - 1 > 100
      OR LEFT(@queue, 1) = N' ' OR RIGHT(@queue, 1) = N' '
      OR @queue COLLATE Latin1_General_100_BIN2 LIKE N'%[^ -~]%' OR @queue LIKE N'%[/?#%]%')
    SET @problem = N'queue: queue name "' + LEFT(@queue, 100) + N'" must be 1 to 100 printable ASCII characters, without a leading or trailing space or any of / ? # %';
  -- A W3C traceparent (version-traceid-parentid-flags), any case, stored
  -- lowercased: 55 characters, hex and three dashes in their places; the
  -- version is not ff and neither id is all zeros. Matched in a binary
  -- collation, where [0-9a-f] is those 16 characters and nothing else.
  IF LEN(@trace + N'x') = 1 SET @trace = NULL;
  IF @problem IS NULL AND @trace IS NOT NULL AND (LEN(@trace + N'x') - 1 <> 55
      OR @trace COLLATE Latin1_General_100_BIN2 NOT LIKE N'[0-9a-f][0-9a-f]-' + REPLICATE(N'[0-9a-f]', 32) + N'-' + REPLICATE(N'[0-9a-f]', 16) + N'-[0-9a-f][0-9a-f]'
      OR LEFT(@trace, 2) = N'ff' OR SUBSTRING(@trace, 4, 32) = REPLICATE(N'0', 32) OR SUBSTRING(@trace, 37, 16) = REPLICATE(N'0', 16))
    SET @problem = N'traceparent: traceparent "' + LEFT(@traceparent, 100) + N'" is not a W3C traceparent (version-traceid-parentid-flags: 55 characters of hex and dashes, ids not all zero)';
  IF @problem IS NOT NULL
    THROW 51000, @problem, 1;

  IF @unique_key IS NOT NULL
  BEGIN
    -- The key lock holds until the caller's transaction ends on SQL Server,
    -- so a concurrent enqueue of the same key waits and then gets 51001;
    -- Babelfish ignores the hints, and there the loser of a race gets the
    -- unique index's own error (2627) instead.
    SELECT @existing = id FROM [{schema}].[jobs] WITH (UPDLOCK, HOLDLOCK) WHERE unique_key = @unique_key;
    IF @existing IS NOT NULL
    BEGIN
      SET @problem = N'unique_key: a job with unique key "' + LEFT(@unique_key, 200) + N'" exists (id ' + CAST(@existing AS NVARCHAR(20)) + N')';
      THROW 51001, @problem, 1;
    END;
  END;
  IF @idempotency_key IS NULL
    SET @idempotency_key = N'slotpoller-' + LOWER(REPLACE(CONVERT(NVARCHAR(36), NEWID()), N'-', N''));

  -- No queue given: the longest route prefix the endpoint starts with,
  -- else the default queue.
  IF @queue IS NULL
    SELECT TOP (1) @queue = r.queue FROM [{schema}].[queue_routes] AS r
    WHERE r.prefix = SUBSTRING(@endpoint, 1, r.prefix_len) ORDER BY r.prefix_len DESC;
  SET @queue = COALESCE(@queue, N'default');

  INSERT INTO [{schema}].[jobs] (endpoint, method, payload, state, run_at, attempt, max_attempts, timeout_ms,
    unique_key, idem_key, token, created_at, exclusive, queue, trace_parent)
  VALUES (@endpoint, @method, @payload, N'ready',
    COALESCE(@run_at, DATEADD(millisecond, CAST(COALESCE(@delay_ms, 0) % 86400000 AS INT), DATEADD(day, CAST(COALESCE(@delay_ms, 0) / 86400000 AS INT), @now))),
    0, @max_attempts, @timeout_ms, @unique_key, @idempotency_key, 0, @now, 0, @queue, @trace);
  SET @id = CAST(SCOPE_IDENTITY() AS BIGINT);
  SELECT @id AS id;
END;
GO
