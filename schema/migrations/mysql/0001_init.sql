-- MySQL 8.0+ and MariaDB 10.6+: the whole schema at version 14, in one
-- version (versions 2 to 14 are recorded with nothing to do). MySQL
-- commits every DDL statement on its own, so a migration is not one
-- transaction here: each statement can run again (IF NOT EXISTS, DROP ...
-- IF EXISTS), and a migration cut short is finished by the next.
--
-- Every time is a DATETIME(6) in UTC on the database clock,
-- UTC_TIMESTAMP(6) (a TIMESTAMP column would go through the session's
-- time zone, and ends in 2038). Text is utf8mb4 in its binary collation:
-- names compare exactly, and an endpoint prefix is a range in byte order,
-- as on the other databases. MySQL has no partial index: each partial
-- index of the other databases is a composite one led by the column of
-- its condition (state).
CREATE TABLE IF NOT EXISTS slotpoller_nodes (
  name            VARCHAR(200) NOT NULL PRIMARY KEY,
  incarnation     VARCHAR(200) NOT NULL,
  state           VARCHAR(20)  NOT NULL,
  capacity        INT          NOT NULL,
  free            INT          NOT NULL,
  offset_us       BIGINT       NOT NULL DEFAULT 0,
  offset_error_us BIGINT       NOT NULL DEFAULT 0,
  started_at      DATETIME(6)  NOT NULL,
  last_seen       DATETIME(6)  NOT NULL,
  left_at         DATETIME(6),
  backlog_until   DATETIME(6),
  turns           TEXT,
  live_until      DATETIME(6),
  lock_key        BIGINT
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS slotpoller_jobs (
  id                  BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
  endpoint            TEXT         NOT NULL,
  method              VARCHAR(16)  NOT NULL,
  payload             MEDIUMBLOB,
  state               VARCHAR(20)  NOT NULL,
  run_at              DATETIME(6)  NOT NULL,
  attempt             INT          NOT NULL DEFAULT 0,
  max_attempts        INT          NOT NULL,
  timeout_ms          BIGINT       NOT NULL DEFAULT 0,
  unique_key          VARCHAR(450),
  idem_key            VARCHAR(255) NOT NULL,
  owner               VARCHAR(200),
  owner_node          VARCHAR(200),
  token               BIGINT       NOT NULL DEFAULT 0,
  lease_until         DATETIME(6),
  created_at          DATETIME(6)  NOT NULL,
  started_at          DATETIME(6),
  finished_at         DATETIME(6),
  last_status         INT,
  last_error          TEXT,
  schedule            VARCHAR(200),
  scheduled_for       DATETIME(6),
  start_by            DATETIME(6),
  exclusive           INT          NOT NULL DEFAULT 0,
  history             TEXT,
  queue               VARCHAR(100) NOT NULL DEFAULT 'default',
  cancel_requested_by VARCHAR(200),
  cancel_requested_at DATETIME(6),
  -- A unique index holds any number of NULLs: jobs without a key.
  UNIQUE KEY slotpoller_jobs_unique_key (unique_key),
  -- The claim's pick: the due ready jobs in claim order, a range of this
  -- index (and the jobs backing off after a failure, counted by run_at).
  KEY slotpoller_jobs_due (state, run_at, id),
  -- Reclaiming expired leases; a renewal finds an owner's rows.
  KEY slotpoller_jobs_lease (state, lease_until),
  KEY slotpoller_jobs_owner (owner, state),
  -- A list by state, newest first.
  KEY slotpoller_jobs_state_id (state, id),
  KEY slotpoller_jobs_schedule (schedule, state),
  KEY slotpoller_jobs_start_by (state, start_by),
  -- Retention: each finished state's rows oldest first.
  KEY slotpoller_jobs_finished (state, finished_at),
  -- A list by endpoint prefix: a range of the endpoint's first 255
  -- characters (a TEXT is indexed by a prefix of itself).
  KEY slotpoller_jobs_endpoint (endpoint(255)),
  KEY slotpoller_jobs_created (created_at),
  -- The managed claim: a queue's due jobs in order, its running jobs.
  KEY slotpoller_jobs_queue_due (queue, state, run_at, id),
  KEY slotpoller_jobs_queue_running (queue, state, owner_node)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS slotpoller_tasks (
  name         VARCHAR(200) NOT NULL PRIMARY KEY,
  endpoint     TEXT         NOT NULL,
  method       VARCHAR(16)  NOT NULL,
  payload      MEDIUMBLOB,
  every_ms     BIGINT       NOT NULL,
  timeout_ms   BIGINT       NOT NULL DEFAULT 0,
  state        VARCHAR(20)  NOT NULL,
  owner        VARCHAR(200),
  owner_node   VARCHAR(200),
  token        BIGINT       NOT NULL DEFAULT 0,
  lease_until  DATETIME(6),
  since        DATETIME(6),
  handoff      INT          NOT NULL DEFAULT 0,
  calls        BIGINT       NOT NULL DEFAULT 0,
  failures     INT          NOT NULL DEFAULT 0,
  last_call_at DATETIME(6),
  last_status  INT,
  last_error   TEXT,
  created_at   DATETIME(6)  NOT NULL,
  deleted_at   DATETIME(6),
  KEY slotpoller_tasks_owner (owner),
  KEY slotpoller_tasks_state (state)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS slotpoller_schedules (
  name         VARCHAR(200) NOT NULL PRIMARY KEY,
  every_ms     BIGINT       NOT NULL DEFAULT 0,
  cron         VARCHAR(200) NOT NULL DEFAULT '',
  time_zone    VARCHAR(100) NOT NULL DEFAULT '',
  endpoint     TEXT         NOT NULL,
  method       VARCHAR(16)  NOT NULL,
  payload      MEDIUMBLOB,
  timeout_ms   BIGINT       NOT NULL DEFAULT 0,
  max_attempts INT          NOT NULL,
  tolerance_ms BIGINT       NOT NULL,
  misfire      VARCHAR(16)  NOT NULL,
  overlap      VARCHAR(16)  NOT NULL,
  enabled      INT          NOT NULL,
  next_fire_at DATETIME(6),
  missed       BIGINT       NOT NULL DEFAULT 0,
  version      BIGINT       NOT NULL DEFAULT 0,
  last_fire_at DATETIME(6),
  source       VARCHAR(16)  NOT NULL,
  created_at   DATETIME(6)  NOT NULL,
  updated_at   DATETIME(6)  NOT NULL,
  KEY slotpoller_schedules_next (enabled, next_fire_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Queues (see the other databases' version 12 and 14): a paused queue's
-- jobs are not claimed; a managed one's (any limit set) are claimed only
-- under a lock on its row. The routes map an endpoint prefix to a queue.
CREATE TABLE IF NOT EXISTS slotpoller_queues (
  name           VARCHAR(100) NOT NULL PRIMARY KEY,
  paused         INT          NOT NULL DEFAULT 0,
  paused_by      VARCHAR(200),
  paused_at      DATETIME(6),
  managed        INT          NOT NULL DEFAULT 0,
  priority       INT          NOT NULL DEFAULT 0,
  max_running    INT,
  max_per_node   INT,
  rate_limit     INT,
  rate_period_ms BIGINT,
  rate_window    BIGINT       NOT NULL DEFAULT 0,
  rate_used      INT          NOT NULL DEFAULT 0
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS slotpoller_queue_routes (
  prefix     VARCHAR(400) NOT NULL PRIMARY KEY,
  prefix_len INT          NOT NULL,
  queue      VARCHAR(100) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The entry point for applications in any language, inside their own
-- transaction:
--
--   CALL slotpoller_enqueue_v1(endpoint, payload, method, delay_ms, run_at,
--     max_attempts, timeout_ms, unique_key, idempotency_key, queue);
--
-- Every argument after the endpoint may be NULL for its default (MySQL's
-- procedures take no defaults nor named arguments): POST, now, 33
-- attempts, the node's timeout, no unique key, a generated idempotency
-- key, the queue of the longest route prefix (else 'default'). run_at is
-- a DATETIME in UTC. The procedure returns the new job's id as a one-row
-- result (id), and LAST_INSERT_ID() says it too. It checks its arguments
-- as the Go client does (jobs.CheckNewJob) and as the other databases'
-- entry points do, with their messages (SQLSTATE 22023; a taken unique key
-- is error 1062, SQLSTATE 23000, with the holder's id). A message holds no
-- argument's value: MySQL's MESSAGE_TEXT is at most 128 characters. _v1 is
-- the contract: an incompatible change adds slotpoller_enqueue_v2.
DROP PROCEDURE IF EXISTS slotpoller_enqueue_v1;
GO
CREATE PROCEDURE slotpoller_enqueue_v1(
  IN a_endpoint        TEXT,
  IN a_payload         MEDIUMBLOB,
  IN a_method          VARCHAR(64),
  IN a_delay_ms        BIGINT,
  IN a_run_at          DATETIME(6),
  IN a_max_attempts    BIGINT,
  IN a_timeout_ms      BIGINT,
  IN a_unique_key      TEXT,
  IN a_idempotency_key TEXT,
  IN a_queue           TEXT
)
BEGIN
  DECLARE p_method   VARCHAR(64) DEFAULT COALESCE(a_method, 'POST');
  DECLARE p_attempts BIGINT DEFAULT COALESCE(a_max_attempts, 33);
  DECLARE p_timeout  BIGINT DEFAULT COALESCE(a_timeout_ms, 0);
  DECLARE p_delay    BIGINT DEFAULT COALESCE(a_delay_ms, 0);
  DECLARE p_unique   TEXT DEFAULT NULLIF(a_unique_key, '');
  DECLARE p_idem     TEXT DEFAULT a_idempotency_key;
  DECLARE p_queue    TEXT DEFAULT NULLIF(a_queue, '');
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
    unique_key, idem_key, token, created_at, exclusive, queue)
  VALUES (a_endpoint, p_method, a_payload, 'ready',
    COALESCE(a_run_at, TIMESTAMPADD(MICROSECOND, p_delay * 1000, UTC_TIMESTAMP(6))),
    0, p_attempts, p_timeout, p_unique, p_idem, 0, UTC_TIMESTAMP(6), 0, p_queue);
  SELECT LAST_INSERT_ID() AS id;
END;
GO
