-- Version 17: W3C trace context. A job may carry the traceparent of the
-- trace that enqueued it (https://www.w3.org/TR/trace-context/, e.g.
-- 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01); the node sends
-- it on to the job's endpoint. NULL: none. 55 characters, the length of a
-- version-00 traceparent and of any later version's first four fields.
ALTER TABLE slotpoller_jobs ADD COLUMN trace_parent VARCHAR(55);

-- The plain claim (version 16) returns the trace parent too, last. A
-- function's result columns are part of its type, which CREATE OR REPLACE
-- cannot change: it is dropped and created again, the rest unchanged (the
-- nodes own it; no grant is given on it).
DROP FUNCTION slotpoller_claim_jobs(text, text, integer, bigint, bigint, bigint, bigint);
GO
CREATE FUNCTION slotpoller_claim_jobs(p_owner text, p_node text, p_limit integer,
  p_h1 bigint, p_h2 bigint, p_h3 bigint, p_h4 bigint)
RETURNS TABLE (id bigint, token bigint, attempt integer, max_attempts integer, endpoint text, method text,
  payload bytea, idem_key text, timeout_ms bigint, run_at timestamptz, scheduled_for timestamptz, queue varchar,
  trace_parent varchar)
LANGUAGE plpgsql
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  WITH picked AS (
    SELECT c.id FROM slotpoller_jobs c
    WHERE c.state = 'ready' AND c.run_at <= clock_timestamp()
      AND NOT EXISTS (SELECT 1 FROM slotpoller_queues pq WHERE pq.name = c.queue AND (pq.paused = 1 OR pq.managed = 1))
      AND (c.exclusive = 0 OR (
        EXISTS (SELECT 1 FROM slotpoller_schedules AS s WHERE s.name = c.schedule)
        AND NOT EXISTS (SELECT 1 FROM slotpoller_jobs r WHERE r.schedule = c.schedule AND r.state = 'running')
        AND NOT EXISTS (SELECT 1 FROM slotpoller_jobs e WHERE e.schedule = c.schedule AND e.state = 'ready'
          AND e.scheduled_for < c.scheduled_for)))
    ORDER BY c.run_at, c.id LIMIT p_limit FOR UPDATE OF c SKIP LOCKED)
  UPDATE slotpoller_jobs j SET state = 'running', owner = p_owner, owner_node = p_node,
    token = j.token + CASE WHEN j.token < 9223372036854775807 THEN 1 ELSE 0 END,
    attempt = j.attempt + CASE WHEN j.attempt < 2147483647 THEN 1 ELSE 0 END,
    started_at = clock_timestamp(), start_by = NULL,
    lease_until = clock_timestamp() + CAST(CASE WHEN j.timeout_ms <= 0 OR j.timeout_ms > 86400000 THEN CAST(p_h1 AS BIGINT)
      WHEN j.timeout_ms > CAST(p_h2 AS BIGINT) THEN j.timeout_ms + CAST(p_h3 AS BIGINT) ELSE CAST(p_h4 AS BIGINT) END
      AS double precision) * interval '1 millisecond'
  WHERE j.id = ANY (ARRAY(SELECT p.id FROM picked p))
  RETURNING j.id, j.token, j.attempt, j.max_attempts, j.endpoint, j.method, j.payload, j.idem_key, j.timeout_ms,
    j.run_at, j.scheduled_for, j.queue, j.trace_parent;
END
$$;
GO

-- The managed claim (version 14) the same: dropped and created again with
-- the trace parent last, the rest unchanged.
DROP FUNCTION slotpoller_claim_managed(text, text, integer, bigint, bigint, bigint, bigint, boolean);
GO
CREATE FUNCTION slotpoller_claim_managed(p_owner text, p_node text, p_limit integer,
  p_h1 bigint, p_h2 bigint, p_h3 bigint, p_h4 bigint, p_others boolean)
RETURNS TABLE (id bigint, token bigint, attempt integer, max_attempts integer, endpoint text, method text,
  payload bytea, idem_key text, timeout_ms bigint, run_at timestamptz, scheduled_for timestamptz, queue varchar,
  trace_parent varchar)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
  v_locked varchar[];
BEGIN
  -- A row lock writes no new row version. Taken in name order, so that
  -- two claims never wait for each other in a cycle. A claim waits for
  -- one that holds the rows (a claim is milliseconds) rather than skip
  -- their queues: a node that skipped would come back with nothing and
  -- idle until its next turn.
  SELECT COALESCE(array_agg(l.name), '{}') INTO v_locked FROM (
    SELECT q.name FROM slotpoller_queues q WHERE q.managed = 1 AND q.paused = 0
    ORDER BY q.name FOR UPDATE) AS l;

  RETURN QUERY
  -- The queues that have ready jobs, one index seek each (a loose scan of
  -- the index of ready jobs by queue): the other queues' due jobs are read
  -- queue by queue, never by stepping over a managed queue's backlog.
  WITH RECURSIVE qs AS (
    (SELECT c.queue FROM slotpoller_jobs c WHERE p_others AND c.state = 'ready' ORDER BY c.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT c.queue FROM slotpoller_jobs c WHERE c.state = 'ready' AND c.queue > qs.queue ORDER BY c.queue LIMIT 1)
    FROM qs WHERE qs.queue IS NOT NULL
  ),
  -- The claim's one start time, read after this statement's snapshot was
  -- taken: a job it sees finished has its finished_at before it, so no two
  -- attempts overlap past the limit on the database clock either. Its
  -- starts count in its rate window; claims take the lock in turn, so a
  -- window only ever moves forward (a claim that waited across a window's
  -- end counts in the new one).
  t AS MATERIALIZED (
    SELECT x.now, CAST(TRUNC(EXTRACT(EPOCH FROM x.now) * 1000) AS BIGINT) AS ms FROM (SELECT clock_timestamp() AS now) AS x
  ), room AS (
    SELECT q.name, q.priority, q.rate_limit IS NOT NULL AS rated,
      GREATEST(COALESCE(LEAST(
        q.max_running - rc.running,
        q.max_per_node - rc.mine,
        q.rate_limit - CASE WHEN q.rate_window >= t.ms / q.rate_period_ms THEN q.rate_used ELSE 0 END), p_limit), 0) AS n
    FROM slotpoller_queues q CROSS JOIN t
    -- A queue's running jobs, all and this node's, in one pass of its
    -- index of running jobs; none read for a queue with no such limit.
    CROSS JOIN LATERAL (SELECT COUNT(*) AS running, COUNT(*) FILTER (WHERE r.owner_node = p_node) AS mine
      FROM slotpoller_jobs r WHERE r.queue = q.name AND r.state = 'running'
        AND (q.max_running IS NOT NULL OR q.max_per_node IS NOT NULL)) AS rc
    WHERE q.name = ANY (v_locked)
  ), picked AS (
    SELECT p.id FROM (
      SELECT x.id, x.run_at, r.priority AS pr FROM room r CROSS JOIN LATERAL (
        SELECT c.id, c.run_at FROM slotpoller_jobs c
        WHERE c.queue = r.name AND c.state = 'ready' AND c.run_at <= clock_timestamp()
          AND (c.exclusive = 0 OR (
            EXISTS (SELECT 1 FROM slotpoller_schedules AS s WHERE s.name = c.schedule)
            AND NOT EXISTS (SELECT 1 FROM slotpoller_jobs r2 WHERE r2.schedule = c.schedule AND r2.state = 'running')
            AND NOT EXISTS (SELECT 1 FROM slotpoller_jobs e WHERE e.schedule = c.schedule AND e.state = 'ready'
              AND e.scheduled_for < c.scheduled_for)))
        ORDER BY c.run_at, c.id LIMIT LEAST(r.n, p_limit)) AS x
      WHERE r.n > 0
      UNION ALL
      SELECT u.id, u.run_at, 0 FROM qs CROSS JOIN LATERAL (
        SELECT c.id, c.run_at FROM slotpoller_jobs c
        WHERE c.queue = qs.queue AND c.state = 'ready' AND c.run_at <= clock_timestamp()
          AND (c.exclusive = 0 OR (
            EXISTS (SELECT 1 FROM slotpoller_schedules AS s WHERE s.name = c.schedule)
            AND NOT EXISTS (SELECT 1 FROM slotpoller_jobs r2 WHERE r2.schedule = c.schedule AND r2.state = 'running')
            AND NOT EXISTS (SELECT 1 FROM slotpoller_jobs e WHERE e.schedule = c.schedule AND e.state = 'ready'
              AND e.scheduled_for < c.scheduled_for)))
        ORDER BY c.run_at, c.id LIMIT p_limit FOR UPDATE OF c SKIP LOCKED) AS u
      WHERE qs.queue IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM slotpoller_queues pq WHERE pq.name = qs.queue AND (pq.paused = 1 OR pq.managed = 1))
    ) AS p ORDER BY p.pr DESC, p.run_at, p.id LIMIT p_limit
  ), claimed AS (
    UPDATE slotpoller_jobs AS j SET state = 'running', owner = p_owner, owner_node = p_node,
      token = j.token + CASE WHEN j.token < 9223372036854775807 THEN 1 ELSE 0 END,
      attempt = j.attempt + CASE WHEN j.attempt < 2147483647 THEN 1 ELSE 0 END,
      started_at = (SELECT t.now FROM t), start_by = NULL,
      lease_until = clock_timestamp() + CAST(CASE WHEN j.timeout_ms <= 0 OR j.timeout_ms > 86400000 THEN p_h1
        WHEN j.timeout_ms > p_h2 THEN j.timeout_ms + p_h3 ELSE p_h4 END AS double precision) * interval '1 millisecond'
    FROM picked WHERE j.id = picked.id AND j.state = 'ready'
    RETURNING j.id, j.token, j.attempt, j.max_attempts, j.endpoint, j.method, j.payload, j.idem_key, j.timeout_ms,
      j.run_at, j.scheduled_for, j.queue, j.trace_parent
  ), counted AS (
    UPDATE slotpoller_queues AS q
    SET rate_used = CASE WHEN q.rate_window >= t.ms / q.rate_period_ms THEN q.rate_used ELSE 0 END + s.n,
      rate_window = GREATEST(q.rate_window, t.ms / q.rate_period_ms)
    FROM (SELECT cl.queue, COUNT(*) AS n FROM claimed cl GROUP BY cl.queue) AS s CROSS JOIN t
    WHERE q.name = s.queue AND q.rate_limit IS NOT NULL AND q.rate_period_ms > 0
  )
  SELECT cl.id, cl.token, cl.attempt, cl.max_attempts, cl.endpoint, cl.method, cl.payload, cl.idem_key, cl.timeout_ms,
    cl.run_at, cl.scheduled_for, cl.queue, cl.trace_parent FROM claimed cl;
END
$$;
GO

-- The entry point gains a trailing parameter, traceparent (NULL or '':
-- none), checked as the Go client checks it and stored lowercased. As in
-- version 12, a function with one more parameter is another function: the
-- old one is dropped first, so that a call naming only the old parameters
-- is not ambiguous, and its grants are read before the drop and given
-- again after the create (a REVOKE from PUBLIC too). Calls by position or
-- by name that worked before work the same. The rest is version 12's,
-- unchanged. The grants' table has a name of its own: a database upgraded
-- from before version 12 runs both in one transaction, where version 12's
-- lasts until the commit.
CREATE TEMPORARY TABLE slotpoller_enqueue_acl_17 ON COMMIT DROP AS
  SELECT p.proacl FROM pg_proc p
  WHERE p.oid = 'slotpoller_enqueue_v1(text, bytea, text, bigint, timestamptz, integer, bigint, text, text, text)'::regprocedure;
GO
DROP FUNCTION slotpoller_enqueue_v1(text, bytea, text, bigint, timestamptz, integer, bigint, text, text, text);
GO
CREATE FUNCTION slotpoller_enqueue_v1(
  endpoint        text,
  payload         bytea       DEFAULT NULL,
  method          text        DEFAULT 'POST',
  delay_ms        bigint      DEFAULT NULL,
  run_at          timestamptz DEFAULT NULL,
  max_attempts    integer     DEFAULT 33,
  timeout_ms      bigint      DEFAULT 0,
  unique_key      text        DEFAULT NULL,
  idempotency_key text        DEFAULT NULL,
  queue           text        DEFAULT NULL,
  traceparent     text        DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
  p_method   text   := COALESCE(slotpoller_enqueue_v1.method, 'POST');
  p_attempts bigint := COALESCE(slotpoller_enqueue_v1.max_attempts, 33);
  p_timeout  bigint := COALESCE(slotpoller_enqueue_v1.timeout_ms, 0);
  p_delay    bigint := COALESCE(slotpoller_enqueue_v1.delay_ms, 0);
  p_unique   text   := NULLIF(slotpoller_enqueue_v1.unique_key, '');
  p_idem     text   := slotpoller_enqueue_v1.idempotency_key;
  p_endpoint text   := slotpoller_enqueue_v1.endpoint;
  p_path     text;
  p_seg      text;
  p_existing bigint;
  p_id       bigint;
  p_queue    text   := NULLIF(slotpoller_enqueue_v1.queue, '');
  p_trace    text   := lower(NULLIF(slotpoller_enqueue_v1.traceparent, ''));
BEGIN
  -- The endpoint: the textual rules of jobs.ResolveEndpoint.
  IF p_endpoint IS NULL OR p_endpoint = '' THEN
    RAISE EXCEPTION 'endpoint: endpoint is empty; it must be a path starting with /' USING ERRCODE = '22023';
  END IF;
  IF p_endpoint ~ '[\x01-\x1f\x7f]' THEN
    RAISE EXCEPTION 'endpoint: endpoint % contains a control character', to_json(p_endpoint) USING ERRCODE = '22023';
  END IF;
  p_path := split_part(p_endpoint, '?', 1);
  IF strpos(p_path, '\') > 0 THEN
    RAISE EXCEPTION 'endpoint: endpoint % contains a backslash, which some servers treat as /', to_json(p_endpoint) USING ERRCODE = '22023';
  END IF;
  IF strpos(p_endpoint, '#') > 0 THEN
    RAISE EXCEPTION 'endpoint: endpoint % contains a fragment (#), which is never sent to a server', to_json(p_endpoint) USING ERRCODE = '22023';
  END IF;
  IF p_endpoint ~ '^[A-Za-z][A-Za-z0-9+.-]*:' THEN
    RAISE EXCEPTION 'endpoint: endpoint % is an absolute URL; only a path on the node''s own base URL is allowed', to_json(p_endpoint) USING ERRCODE = '22023';
  END IF;
  IF left(p_endpoint, 2) = '//' THEN
    RAISE EXCEPTION 'endpoint: endpoint % is a scheme-relative URL (//host); only a path on the node''s own base URL is allowed', to_json(p_endpoint) USING ERRCODE = '22023';
  END IF;
  IF left(p_endpoint, 1) <> '/' THEN
    RAISE EXCEPTION 'endpoint: endpoint % must start with /', to_json(p_endpoint) USING ERRCODE = '22023';
  END IF;
  IF p_path ~ '%($|.$|[^0-9A-Fa-f]|.[^0-9A-Fa-f])' THEN
    RAISE EXCEPTION 'endpoint: endpoint % has invalid percent-encoding', to_json(p_endpoint) USING ERRCODE = '22023';
  END IF;
  IF p_path ~ '%([01][0-9A-Fa-f]|7[Ff])' THEN
    RAISE EXCEPTION 'endpoint: endpoint % contains an encoded control character', to_json(p_endpoint) USING ERRCODE = '22023';
  END IF;
  -- Stricter than Go, which decodes up to four times: an encoded /, \ or %
  -- is refused outright, so one decoding of %2E is all that is left.
  IF p_path ~* '%(2f|5c|25)' THEN
    RAISE EXCEPTION 'endpoint: endpoint % has an encoded /, \ or %% in its path, which the database entry point does not take', to_json(p_endpoint) USING ERRCODE = '22023';
  END IF;
  FOREACH p_seg IN ARRAY string_to_array(replace(replace(p_path, '%2e', '.'), '%2E', '.'), '/') LOOP
    IF rtrim(split_part(p_seg, ';', 1), ' ') ~ '^\.+$' THEN
      RAISE EXCEPTION 'endpoint: endpoint % has a % path segment (after percent-decoding); dot segments are not allowed', to_json(p_endpoint), to_json(p_seg) USING ERRCODE = '22023';
    END IF;
  END LOOP;

  IF p_method NOT IN ('GET', 'POST', 'PUT', 'PATCH', 'DELETE') THEN
    RAISE EXCEPTION 'method: method % is not one of GET, POST, PUT, PATCH, DELETE', to_json(p_method) USING ERRCODE = '22023';
  END IF;
  IF p_attempts < 1 OR p_attempts > 1000 THEN
    RAISE EXCEPTION 'max_attempts: max attempts % must be between 1 and 1000', p_attempts USING ERRCODE = '22023';
  END IF;
  IF p_timeout < 0 THEN
    RAISE EXCEPTION 'timeout: timeout %ms must not be negative', p_timeout USING ERRCODE = '22023';
  END IF;
  IF p_timeout > 86400000 THEN
    RAISE EXCEPTION 'timeout: timeout %ms is above 24h0m0s', p_timeout USING ERRCODE = '22023';
  END IF;
  IF p_delay < 0 THEN
    RAISE EXCEPTION 'delay: delay %ms must not be negative', p_delay USING ERRCODE = '22023';
  END IF;
  IF p_delay > 31622400000 THEN
    RAISE EXCEPTION 'delay: delay %ms is more than 366 days ahead; a job may be due at most that far ahead', p_delay USING ERRCODE = '22023';
  END IF;
  IF slotpoller_enqueue_v1.run_at > clock_timestamp() + interval '366 days' THEN
    RAISE EXCEPTION 'run_at: run at % is more than 366 days ahead; a job may be due at most that far ahead', slotpoller_enqueue_v1.run_at USING ERRCODE = '22023';
  END IF;
  IF slotpoller_enqueue_v1.run_at < timestamptz '1970-01-01 00:00:00+00' THEN
    RAISE EXCEPTION 'run_at: run at % is before 1970-01-01; a job''s run time must be a real time (a past one means now)', slotpoller_enqueue_v1.run_at USING ERRCODE = '22023';
  END IF;
  IF slotpoller_enqueue_v1.run_at IS NOT NULL AND p_delay <> 0 THEN
    RAISE EXCEPTION 'run_at: give a run time or a delay, not both' USING ERRCODE = '22023';
  END IF;
  IF octet_length(slotpoller_enqueue_v1.payload) > 1048576 THEN
    RAISE EXCEPTION 'payload: payload is % bytes; at most 1048576 (1 MiB) are allowed', octet_length(slotpoller_enqueue_v1.payload) USING ERRCODE = '22023';
  END IF;
  IF char_length(p_unique) > 450 THEN
    RAISE EXCEPTION 'unique_key: unique key must be valid UTF-8 of at most 450 characters (it has %)', char_length(p_unique) USING ERRCODE = '22023';
  END IF;
  IF p_idem IS NULL THEN
    p_idem := 'slotpoller-' || replace(gen_random_uuid()::text, '-', '');
  ELSIF p_idem = '' OR octet_length(p_idem) > 200 OR left(p_idem, 1) = ' ' OR right(p_idem, 1) = ' ' OR p_idem ~ '[^ -~]' THEN
    RAISE EXCEPTION 'idempotency_key: idempotency key % must be 1 to 200 printable ASCII characters, without a leading or trailing space', to_json(p_idem) USING ERRCODE = '22023';
  END IF;

  IF p_queue IS NOT NULL AND (octet_length(p_queue) > 100 OR left(p_queue, 1) = ' ' OR right(p_queue, 1) = ' ' OR p_queue ~ '[^ -~]' OR p_queue ~ '[/?#%]') THEN
    RAISE EXCEPTION 'queue: queue name % must be 1 to 100 printable ASCII characters, without a leading or trailing space or any of / ? # %%', to_json(p_queue) USING ERRCODE = '22023';
  END IF;
  -- A W3C traceparent (version-traceid-parentid-flags), any case, stored
  -- lowercased: 55 characters, hex and three dashes in their places; the
  -- version is not ff and neither id is all zeros.
  IF p_trace IS NOT NULL AND (char_length(p_trace) <> 55
      OR p_trace !~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
      OR left(p_trace, 2) = 'ff' OR substr(p_trace, 4, 32) = repeat('0', 32) OR substr(p_trace, 37, 16) = repeat('0', 16)) THEN
    RAISE EXCEPTION 'traceparent: traceparent % is not a W3C traceparent (version-traceid-parentid-flags: 55 characters of hex and dashes, ids not all zero)', to_json(slotpoller_enqueue_v1.traceparent) USING ERRCODE = '22023';
  END IF;
  -- No queue given: the longest route prefix the endpoint starts with
  -- (routes come from the nodes' config), else the default queue.
  IF p_queue IS NULL THEN
    SELECT r.queue INTO p_queue FROM slotpoller_queue_routes r
    WHERE r.prefix = substring(p_endpoint, 1, r.prefix_len) ORDER BY r.prefix_len DESC LIMIT 1;
    p_queue := COALESCE(p_queue, 'default');
  END IF;

  IF p_unique IS NOT NULL THEN
    SELECT j.id INTO p_existing FROM slotpoller_jobs j WHERE j.unique_key = p_unique;
    IF FOUND THEN
      RAISE EXCEPTION 'unique_key: a job with unique key % exists (id %)', to_json(p_unique), p_existing
        USING ERRCODE = '23505', DETAIL = 'existing_id=' || p_existing;
    END IF;
  END IF;

  INSERT INTO slotpoller_jobs (endpoint, method, payload, state, run_at, attempt, max_attempts, timeout_ms,
    unique_key, idem_key, token, created_at, exclusive, queue, trace_parent)
  VALUES (p_endpoint, p_method, slotpoller_enqueue_v1.payload, 'ready',
    COALESCE(slotpoller_enqueue_v1.run_at, clock_timestamp() + p_delay * interval '1 millisecond'),
    0, p_attempts, p_timeout, p_unique, p_idem, 0, clock_timestamp(), 0, p_queue, p_trace)
  RETURNING id INTO p_id;
  RETURN p_id;
END;
$$;
GO
-- The old function's grants, given again (NULL: the default, PUBLIC may
-- execute, which the new function has too).
DO $$
DECLARE
  acl aclitem[];
  g   record;
  fn  constant text := 'slotpoller_enqueue_v1(text, bytea, text, bigint, timestamptz, integer, bigint, text, text, text, text)';
BEGIN
  SELECT proacl INTO acl FROM slotpoller_enqueue_acl_17;
  IF acl IS NULL THEN
    RETURN;
  END IF;
  EXECUTE 'REVOKE EXECUTE ON FUNCTION ' || fn || ' FROM PUBLIC';
  FOR g IN SELECT DISTINCT a.grantee FROM aclexplode(acl) a WHERE a.privilege_type = 'EXECUTE' LOOP
    IF g.grantee = 0 THEN
      EXECUTE 'GRANT EXECUTE ON FUNCTION ' || fn || ' TO PUBLIC';
    ELSE
      EXECUTE 'GRANT EXECUTE ON FUNCTION ' || fn || ' TO ' || g.grantee::regrole::text;
    END IF;
  END LOOP;
END $$;
