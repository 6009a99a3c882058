-- Version 20: the claims seek their due jobs. The claim functions
-- compared run_at with clock_timestamp(), which PostgreSQL reads anew for
-- every row, so the bound was a filter on the due index and not where its
-- walk stops: a claim that found fewer due jobs than it asked for read
-- every job due later as well (a farm holding a million retries or
-- scheduled jobs read a million rows per claim). The bound is now read
-- once per claim, a subquery's value, on which the index seeks; a job
-- that falls due during the claim's milliseconds waits for the next one.
-- Everything else is version 17's, unchanged; the signatures and results
-- are the same, so the functions are replaced in place.
CREATE OR REPLACE FUNCTION slotpoller_claim_jobs(p_owner text, p_node text, p_limit integer,
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
    WHERE c.state = 'ready' AND c.run_at <= (SELECT clock_timestamp())
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

CREATE OR REPLACE FUNCTION slotpoller_claim_managed(p_owner text, p_node text, p_limit integer,
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
        WHERE c.queue = r.name AND c.state = 'ready' AND c.run_at <= (SELECT t.now FROM t)
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
        WHERE c.queue = qs.queue AND c.state = 'ready' AND c.run_at <= (SELECT t.now FROM t)
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
