-- Version 17: W3C trace context. A job may carry the traceparent of the
-- trace that enqueued it (https://www.w3.org/TR/trace-context/, e.g.
-- 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01); the node sends
-- it on to the job's endpoint. NULL: none. 55 characters, the length of a
-- version-00 traceparent and of any later version's first four fields.
--
-- MySQL commits every DDL statement on its own: each statement here can
-- run again, and a migration cut short is finished by the next. MySQL has
-- no ADD COLUMN IF NOT EXISTS (MariaDB has): the column is added by a
-- statement built from what information_schema says, a no-op once it is
-- there.
SET @slotpoller_v17 = (SELECT IF(COUNT(*) = 0,
  'ALTER TABLE slotpoller_jobs ADD COLUMN trace_parent VARCHAR(55) NULL', 'DO 0')
  FROM information_schema.columns
  WHERE table_schema = DATABASE() AND table_name = 'slotpoller_jobs' AND column_name = 'trace_parent');
PREPARE slotpoller_v17 FROM @slotpoller_v17;
EXECUTE slotpoller_v17;
DEALLOCATE PREPARE slotpoller_v17;
SET @slotpoller_v17 = NULL;

-- The entry point with a trace parent:
--
--   CALL slotpoller_enqueue_v2(endpoint, payload, method, delay_ms, run_at,
--     max_attempts, timeout_ms, unique_key, idempotency_key, queue,
--     traceparent);
--
-- v1's ten arguments, in v1's order and with v1's defaults for NULL, and
-- an eleventh, traceparent: NULL or '' for none, else a W3C traceparent,
-- checked as the Go client checks it and stored lowercased. It returns
-- the new job's id as v1 does, as a one-row result (id), and
-- LAST_INSERT_ID() says it too; it refuses what v1 refuses, with v1's
-- messages and errors (SQLSTATE 22023; a taken unique key is error 1062,
-- SQLSTATE 23000, with the holder's id).
--
-- A procedure takes no defaults: a parameter added to v1 would break
-- every call of v1 with ten arguments, hence v2 beside it. v1 stays as
-- version 1 made it, a whole body of its own that writes no trace parent
-- (NULL), rather than a procedure calling v2: dropping a procedure drops
-- what was granted on it (GRANT EXECUTE ON PROCEDURE ... to an
-- application), and MySQL cannot change a procedure's body without a
-- drop. v2 is new: grant EXECUTE on it where v1 was granted.
DROP PROCEDURE IF EXISTS slotpoller_enqueue_v2;
GO
CREATE PROCEDURE slotpoller_enqueue_v2(
  IN a_endpoint        TEXT,
  IN a_payload         MEDIUMBLOB,
  IN a_method          VARCHAR(64),
  IN a_delay_ms        BIGINT,
  IN a_run_at          DATETIME(6),
  IN a_max_attempts    BIGINT,
  IN a_timeout_ms      BIGINT,
  IN a_unique_key      TEXT,
  IN a_idempotency_key TEXT,
  IN a_queue           TEXT,
  IN a_traceparent     TEXT
)
BEGIN
  DECLARE p_method   VARCHAR(64) DEFAULT COALESCE(a_method, 'POST');
  DECLARE p_attempts BIGINT DEFAULT COALESCE(a_max_attempts, 33);
  DECLARE p_timeout  BIGINT DEFAULT COALESCE(a_timeout_ms, 0);
  DECLARE p_delay    BIGINT DEFAULT COALESCE(a_delay_ms, 0);
  DECLARE p_unique   TEXT DEFAULT NULLIF(a_unique_key, '');
  DECLARE p_idem     TEXT DEFAULT a_idempotency_key;
  DECLARE p_queue    TEXT DEFAULT NULLIF(a_queue, '');
  -- Empty is none; spaces are not (a PAD SPACE collation has ' ' = '').
  DECLARE p_trace    TEXT DEFAULT IF(CHAR_LENGTH(a_traceparent) = 0, NULL, LOWER(a_traceparent));
  DECLARE p_path     TEXT;
  DECLARE p_rest     TEXT;
  DECLARE p_seg      TEXT;
  DECLARE p_existing BIGINT DEFAULT NULL;
  DECLARE p_msg      VARCHAR(128);

  -- The endpoint: the textual rules of jobs.ResolveEndpoint.
  IF a_endpoint IS NULL OR a_endpoint = '' THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'endpoint: endpoint is empty; it must be a path starting with /';
  END IF;
  IF a_endpoint REGEXP CONCAT('[', CHAR(1 USING utf8mb4), '-', CHAR(31 USING utf8mb4), CHAR(127 USING utf8mb4), ']') THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'endpoint: endpoint contains a control character';
  END IF;
  SET p_path = SUBSTRING_INDEX(a_endpoint, '?', 1);
  IF LOCATE('\\', p_path) > 0 THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'endpoint: endpoint contains a backslash, which some servers treat as /';
  END IF;
  IF LOCATE('#', a_endpoint) > 0 THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'endpoint: endpoint contains a fragment (#), which is never sent to a server';
  END IF;
  IF a_endpoint REGEXP '^[A-Za-z][A-Za-z0-9+.-]*:' THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'endpoint: endpoint is an absolute URL; only a path on the node''s own base URL is allowed';
  END IF;
  IF LEFT(a_endpoint, 2) = '//' THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'endpoint: endpoint is a scheme-relative URL (//host); only a path on the node''s own base URL is allowed';
  END IF;
  IF LEFT(a_endpoint, 1) <> '/' THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'endpoint: endpoint must start with /';
  END IF;
  IF p_path REGEXP '%($|.$|[^0-9A-Fa-f]|.[^0-9A-Fa-f])' THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'endpoint: endpoint has invalid percent-encoding';
  END IF;
  IF p_path REGEXP '%([01][0-9A-Fa-f]|7[Ff])' THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'endpoint: endpoint contains an encoded control character';
  END IF;
  -- Stricter than Go, which decodes up to four times: an encoded /, \ or %
  -- is refused outright, so one decoding of %2E is all that is left.
  IF LOCATE('%2f', LOWER(p_path)) > 0 OR LOCATE('%5c', LOWER(p_path)) > 0 OR LOCATE('%25', LOWER(p_path)) > 0 THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'endpoint: endpoint has an encoded /, \\ or % in its path, which the database entry point does not take';
  END IF;
  -- Path segments, one by one: a segment is cut at ';' and trimmed of
  -- trailing spaces; one made of dots only is refused.
  SET p_rest = REPLACE(REPLACE(p_path, '%2e', '.'), '%2E', '.');
  segments: LOOP
    SET p_seg = TRIM(TRAILING ' ' FROM SUBSTRING_INDEX(SUBSTRING_INDEX(p_rest, '/', 1), ';', 1));
    IF p_seg <> '' AND REPLACE(p_seg, '.', '') = '' THEN
      SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'endpoint: endpoint has a dot path segment (after percent-decoding); dot segments are not allowed';
    END IF;
    IF LOCATE('/', p_rest) = 0 THEN
      LEAVE segments;
    END IF;
    SET p_rest = SUBSTRING(p_rest, LOCATE('/', p_rest) + 1);
  END LOOP segments;

  -- Exact, whatever the session's collation: compared as bytes.
  IF CAST(p_method AS BINARY) NOT IN (CAST('GET' AS BINARY), CAST('POST' AS BINARY), CAST('PUT' AS BINARY),
      CAST('PATCH' AS BINARY), CAST('DELETE' AS BINARY)) THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'method: method is not one of GET, POST, PUT, PATCH, DELETE';
  END IF;
  IF p_attempts < 1 OR p_attempts > 1000 THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'max_attempts: max attempts must be an integer between 1 and 1000';
  END IF;
  IF p_timeout < 0 THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'timeout: timeout must not be negative';
  END IF;
  IF p_timeout > 86400000 THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'timeout: timeout is above 24h0m0s';
  END IF;
  IF p_delay < 0 THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'delay: delay must not be negative';
  END IF;
  IF p_delay > 31622400000 THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'delay: delay is more than 366 days ahead; a job may be due at most that far ahead';
  END IF;
  IF a_run_at > TIMESTAMPADD(DAY, 366, UTC_TIMESTAMP(6)) THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'run_at: run at is more than 366 days ahead; a job may be due at most that far ahead';
  END IF;
  IF a_run_at < '1970-01-01 00:00:00' THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'run_at: run at is before 1970-01-01; a job''s run time must be a real time (a past one means now)';
  END IF;
  IF a_run_at IS NOT NULL AND p_delay <> 0 THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'run_at: give a run time or a delay, not both';
  END IF;
  IF LENGTH(a_payload) > 1048576 THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'payload: payload is over 1048576 bytes (1 MiB)';
  END IF;
  IF CHAR_LENGTH(p_unique) > 450 THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'unique_key: unique key must be at most 450 characters';
  END IF;
  -- Printable ASCII: one byte a character, none below a space or above ~.
  IF p_idem IS NULL THEN
    SET p_idem = CONCAT('slotpoller-', LOWER(REPLACE(UUID(), '-', '')));
  ELSEIF p_idem = '' OR LENGTH(p_idem) > 200 OR LEFT(p_idem, 1) = ' ' OR RIGHT(p_idem, 1) = ' '
      OR LENGTH(p_idem) <> CHAR_LENGTH(p_idem) OR p_idem REGEXP '[^ -~]' THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'idempotency_key: idempotency key must be 1 to 200 printable ASCII characters, without a leading or trailing space';
  END IF;

  IF p_queue IS NOT NULL AND (LENGTH(p_queue) > 100 OR LEFT(p_queue, 1) = ' ' OR RIGHT(p_queue, 1) = ' '
      OR LENGTH(p_queue) <> CHAR_LENGTH(p_queue) OR p_queue REGEXP '[^ -~]' OR p_queue REGEXP '[/?#%]') THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'queue: queue name must be 1 to 100 printable ASCII characters, without a leading or trailing space or any of / ? # %';
  END IF;
  -- A W3C traceparent (version-traceid-parentid-flags), any case, stored
  -- lowercased: 55 characters, all of them one byte (ASCII), hex and three
  -- dashes in their places; the version is not ff and neither id is all
  -- zeros. Lowered first, so that a case-insensitive collation, which
  -- lets [0-9a-f] match A-F too, changes nothing.
  IF p_trace IS NOT NULL AND (CHAR_LENGTH(p_trace) <> 55 OR LENGTH(p_trace) <> CHAR_LENGTH(p_trace)
      OR NOT p_trace REGEXP '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
      OR LEFT(p_trace, 2) = 'ff' OR SUBSTRING(p_trace, 4, 32) = REPEAT('0', 32) OR SUBSTRING(p_trace, 37, 16) = REPEAT('0', 16)) THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'traceparent: not a W3C traceparent (version-traceid-parentid-flags: 55 characters of hex and dashes, ids not all zero)';
  END IF;
  -- No queue given: the longest route prefix the endpoint starts with
  -- (routes come from the nodes' config), else the default queue.
  IF p_queue IS NULL THEN
    SELECT r.queue INTO p_queue FROM slotpoller_queue_routes r
    WHERE r.prefix = SUBSTRING(a_endpoint, 1, r.prefix_len) ORDER BY r.prefix_len DESC LIMIT 1;
    SET p_queue = COALESCE(p_queue, 'default');
  END IF;

  IF p_unique IS NOT NULL THEN
    SELECT j.id INTO p_existing FROM slotpoller_jobs j WHERE j.unique_key = p_unique LIMIT 1;
    IF p_existing IS NOT NULL THEN
      SET p_msg = CONCAT('unique_key: a job with this unique key exists (id ', p_existing, ')');
      SIGNAL SQLSTATE '23000' SET MYSQL_ERRNO = 1062, MESSAGE_TEXT = p_msg;
    END IF;
  END IF;

  INSERT INTO slotpoller_jobs (endpoint, method, payload, state, run_at, attempt, max_attempts, timeout_ms,
    unique_key, idem_key, token, created_at, exclusive, queue, trace_parent)
  VALUES (a_endpoint, p_method, a_payload, 'ready',
    COALESCE(a_run_at, TIMESTAMPADD(MICROSECOND, p_delay * 1000, UTC_TIMESTAMP(6))),
    0, p_attempts, p_timeout, p_unique, p_idem, 0, UTC_TIMESTAMP(6), 0, p_queue, p_trace);
  SELECT LAST_INSERT_ID() AS id;
END;
GO
