-- Version 17: W3C trace context. A job may carry the traceparent of the
-- trace that enqueued it (https://www.w3.org/TR/trace-context/, e.g.
-- 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01); the node sends
-- it on to the job's endpoint. NULL: none.
ALTER TABLE slotpoller_jobs ADD COLUMN trace_parent TEXT;

-- The entry point's view gains a last column, traceparent (NULL or '':
-- none), checked as the Go client checks it and stored lowercased; an
-- INSERT naming the old columns works as before. The rest of the trigger
-- is version 12's, unchanged.
DROP TRIGGER slotpoller_enqueue_v1;
GO
DROP VIEW slotpoller_enqueue_v1;
GO
CREATE VIEW slotpoller_enqueue_v1 AS SELECT
  CAST(NULL AS TEXT)    AS endpoint,
  CAST(NULL AS BLOB)    AS payload,
  CAST(NULL AS TEXT)    AS method,
  CAST(NULL AS INTEGER) AS delay_ms,
  CAST(NULL AS INTEGER) AS run_at,
  CAST(NULL AS INTEGER) AS max_attempts,
  CAST(NULL AS INTEGER) AS timeout_ms,
  CAST(NULL AS TEXT)    AS unique_key,
  CAST(NULL AS TEXT)    AS idempotency_key,
  CAST(NULL AS TEXT)    AS queue,
  CAST(NULL AS TEXT)    AS traceparent
WHERE 0;
GO
CREATE TRIGGER slotpoller_enqueue_v1 INSTEAD OF INSERT ON slotpoller_enqueue_v1
BEGIN
  SELECT RAISE(ABORT, 'endpoint: endpoint is empty; it must be a path starting with /')
  WHERE NEW.endpoint IS NULL OR NEW.endpoint = '';
  SELECT RAISE(ABORT, 'endpoint: endpoint contains a control character')
  WHERE NEW.endpoint GLOB '*[' || char(1) || '-' || char(31) || char(127) || ']*';
  SELECT RAISE(ABORT, 'endpoint: endpoint contains a backslash, which some servers treat as /')
  WHERE instr(CASE WHEN instr(NEW.endpoint, '?') > 0 THEN substr(NEW.endpoint, 1, instr(NEW.endpoint, '?') - 1) ELSE NEW.endpoint END, '\') > 0;
  SELECT RAISE(ABORT, 'endpoint: endpoint contains a fragment (#), which is never sent to a server')
  WHERE instr(NEW.endpoint, '#') > 0;
  SELECT RAISE(ABORT, 'endpoint: endpoint is an absolute URL; only a path on the node''s own base URL is allowed')
  WHERE NEW.endpoint GLOB '[A-Za-z]*:*' AND NOT substr(NEW.endpoint, 1, instr(NEW.endpoint, ':') - 1) GLOB '*[^A-Za-z0-9+.-]*';
  SELECT RAISE(ABORT, 'endpoint: endpoint is a scheme-relative URL (//host); only a path on the node''s own base URL is allowed')
  WHERE substr(NEW.endpoint, 1, 2) = '//';
  SELECT RAISE(ABORT, 'endpoint: endpoint must start with /')
  WHERE substr(NEW.endpoint, 1, 1) <> '/';
  SELECT RAISE(ABORT, 'endpoint: endpoint has invalid percent-encoding')
  FROM (SELECT CASE WHEN instr(NEW.endpoint, '?') > 0 THEN substr(NEW.endpoint, 1, instr(NEW.endpoint, '?') - 1) ELSE NEW.endpoint END AS p)
  WHERE p GLOB '*%' OR p GLOB '*%?' OR p GLOB '*%[^0-9A-Fa-f]*' OR p GLOB '*%?[^0-9A-Fa-f]*';
  SELECT RAISE(ABORT, 'endpoint: endpoint contains an encoded control character')
  FROM (SELECT CASE WHEN instr(NEW.endpoint, '?') > 0 THEN substr(NEW.endpoint, 1, instr(NEW.endpoint, '?') - 1) ELSE NEW.endpoint END AS p)
  WHERE p GLOB '*%[01][0-9A-Fa-f]*' OR p GLOB '*%7[Ff]*';
  -- Stricter than Go, which decodes up to four times: an encoded /, \ or %
  -- is refused outright, so one decoding of %2E is all that is left.
  SELECT RAISE(ABORT, 'endpoint: endpoint has an encoded /, \ or % in its path, which the database entry point does not take')
  FROM (SELECT lower(CASE WHEN instr(NEW.endpoint, '?') > 0 THEN substr(NEW.endpoint, 1, instr(NEW.endpoint, '?') - 1) ELSE NEW.endpoint END) AS p)
  WHERE instr(p, '%2f') > 0 OR instr(p, '%5c') > 0 OR instr(p, '%25') > 0;
  -- Path segments, split as the items of a JSON array (a trigger takes no
  -- WITH clause); a segment is cut at ';' and trimmed of trailing spaces.
  SELECT RAISE(ABORT, 'endpoint: endpoint has a dot path segment (after percent-decoding); dot segments are not allowed')
  FROM json_each('["' || replace(replace(replace(replace(
    CASE WHEN instr(NEW.endpoint, '?') > 0 THEN substr(NEW.endpoint, 1, instr(NEW.endpoint, '?') - 1) ELSE NEW.endpoint END,
    '"', '\"'), '%2e', '.'), '%2E', '.'), '/', '","') || '"]') AS s
  WHERE rtrim(CASE WHEN instr(s.value, ';') > 0 THEN substr(s.value, 1, instr(s.value, ';') - 1) ELSE s.value END, ' ') <> ''
    AND replace(rtrim(CASE WHEN instr(s.value, ';') > 0 THEN substr(s.value, 1, instr(s.value, ';') - 1) ELSE s.value END, ' '), '.', '') = '';

  SELECT RAISE(ABORT, 'method: method is not one of GET, POST, PUT, PATCH, DELETE')
  WHERE COALESCE(NEW.method, 'POST') NOT IN ('GET', 'POST', 'PUT', 'PATCH', 'DELETE');
  SELECT RAISE(ABORT, 'max_attempts: max attempts must be an integer between 1 and 1000')
  WHERE typeof(COALESCE(NEW.max_attempts, 33)) <> 'integer' OR COALESCE(NEW.max_attempts, 33) NOT BETWEEN 1 AND 1000;
  SELECT RAISE(ABORT, 'timeout: timeout_ms must be an integer')
  WHERE typeof(COALESCE(NEW.timeout_ms, 0)) <> 'integer';
  SELECT RAISE(ABORT, 'timeout: timeout must not be negative')
  WHERE NEW.timeout_ms < 0;
  SELECT RAISE(ABORT, 'timeout: timeout is above 24h0m0s')
  WHERE NEW.timeout_ms > 86400000;
  SELECT RAISE(ABORT, 'delay: delay_ms must be an integer')
  WHERE typeof(COALESCE(NEW.delay_ms, 0)) <> 'integer';
  SELECT RAISE(ABORT, 'delay: delay must not be negative')
  WHERE NEW.delay_ms < 0;
  SELECT RAISE(ABORT, 'delay: delay is more than 366 days ahead; a job may be due at most that far ahead')
  WHERE NEW.delay_ms > 31622400000;
  SELECT RAISE(ABORT, 'run_at: run_at must be integer Unix milliseconds (UTC)')
  WHERE NEW.run_at IS NOT NULL AND typeof(NEW.run_at) <> 'integer';
  SELECT RAISE(ABORT, 'run_at: run at is more than 366 days ahead; a job may be due at most that far ahead')
  WHERE NEW.run_at > CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER) + 31622400000;
  SELECT RAISE(ABORT, 'run_at: run at is before 1970-01-01; a job''s run time must be a real time (a past one means now)')
  WHERE NEW.run_at < 0;
  SELECT RAISE(ABORT, 'run_at: give a run time or a delay, not both')
  WHERE NEW.run_at IS NOT NULL AND COALESCE(NEW.delay_ms, 0) <> 0;
  SELECT RAISE(ABORT, 'payload: payload is over 1048576 bytes (1 MiB)')
  WHERE length(CAST(NEW.payload AS BLOB)) > 1048576;
  SELECT RAISE(ABORT, 'unique_key: unique key must be at most 450 characters')
  WHERE length(NEW.unique_key) > 450;
  SELECT RAISE(ABORT, 'idempotency_key: idempotency key must be 1 to 200 printable ASCII characters, without a leading or trailing space')
  WHERE NEW.idempotency_key IS NOT NULL AND (NEW.idempotency_key = '' OR length(CAST(NEW.idempotency_key AS BLOB)) > 200
    OR substr(NEW.idempotency_key, 1, 1) = ' ' OR substr(NEW.idempotency_key, -1) = ' ' OR NEW.idempotency_key GLOB '*[^ -~]*');
  SELECT RAISE(ABORT, 'queue: queue name must be 1 to 100 printable ASCII characters, without a leading or trailing space or any of / ? # %')
  WHERE NULLIF(NEW.queue, '') IS NOT NULL AND (length(CAST(NEW.queue AS BLOB)) > 100
    OR substr(NEW.queue, 1, 1) = ' ' OR substr(NEW.queue, -1) = ' ' OR NEW.queue GLOB '*[^ -~]*' OR NEW.queue GLOB '*[/?#%]*');
  -- A W3C traceparent (version-traceid-parentid-flags), any case, stored
  -- lowercased: 55 characters (and 55 bytes: ASCII, no NUL), hex and three
  -- dashes in their places; the version is not ff and neither id is all
  -- zeros. lower() folds ASCII only, and GLOB is case-sensitive.
  SELECT RAISE(ABORT, 'traceparent: traceparent is not a W3C traceparent (version-traceid-parentid-flags: 55 characters of hex and dashes, ids not all zero)')
  FROM (SELECT lower(NEW.traceparent) AS tp)
  WHERE NULLIF(NEW.traceparent, '') IS NOT NULL AND (length(tp) <> 55 OR length(CAST(tp AS BLOB)) <> 55
    OR tp GLOB '*[^0-9a-f-]*' OR substr(tp, 3, 1) <> '-' OR substr(tp, 36, 1) <> '-' OR substr(tp, 53, 1) <> '-'
    OR length(replace(tp, '-', '')) <> 52
    OR substr(tp, 1, 2) = 'ff' OR substr(tp, 4, 32) = '00000000000000000000000000000000' OR substr(tp, 37, 16) = '0000000000000000');
  SELECT RAISE(ABORT, 'unique_key: a job with this unique key exists; its id: SELECT id FROM slotpoller_jobs WHERE unique_key = ?')
  WHERE EXISTS (SELECT 1 FROM slotpoller_jobs WHERE unique_key = NULLIF(NEW.unique_key, ''));

  INSERT INTO slotpoller_jobs (endpoint, method, payload, state, run_at, attempt, max_attempts, timeout_ms,
    unique_key, idem_key, token, created_at, exclusive, queue, trace_parent)
  VALUES (NEW.endpoint, COALESCE(NEW.method, 'POST'), NEW.payload, 'ready',
    COALESCE(NEW.run_at, CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER) + COALESCE(NEW.delay_ms, 0)),
    0, COALESCE(NEW.max_attempts, 33), COALESCE(NEW.timeout_ms, 0), NULLIF(NEW.unique_key, ''),
    COALESCE(NEW.idempotency_key, 'slotpoller-' || lower(hex(randomblob(16)))), 0,
    CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER), 0,
    -- No queue given: the longest route prefix the endpoint starts with,
    -- else the default queue.
    COALESCE(NULLIF(NEW.queue, ''), (SELECT r.queue FROM slotpoller_queue_routes r
      WHERE r.prefix = substr(NEW.endpoint, 1, r.prefix_len) ORDER BY r.prefix_len DESC LIMIT 1), 'default'),
    NULLIF(lower(NEW.traceparent), ''));
END;
GO
