-- Version 16: the plain claim (the store's JobsClaim) as a function whose
-- plan does not follow the table's statistics. A burst of jobs makes ready
-- rows that the statistics, refreshed by autovacuum only once a tenth of
-- the table has changed, still count as a handful; for a handful, reading
-- every ready row and sorting them costs the planner no more than walking
-- the due index in order, and it took that plan: each claim of a few jobs
-- read and sorted the whole backlog (14 ms a claim over 20,000 ready jobs,
-- against half a millisecond in index order). Inside this function the
-- planner may neither sort nor build a bitmap, so the claim walks the due
-- index in (run_at, id) order and stops at its limit, whatever the
-- statistics say and however deep the backlog; and its rows are written
-- back by their ids, each one look-up in the primary key (joined to the
-- picked rows, the same statistics had the write walk every ready row for
-- each picked one; asked again that a row be ready, it walked them all
-- once). A picked row is ready: the pick locked it, and a row another
-- claim changed since the statement's snapshot is checked again, in its
-- new version, before it is locked (FOR UPDATE under READ COMMITTED). PL/pgSQL keeps the plan for the connection's life, as
-- a prepared statement would.
-- The statement is the claim of the other databases (internal/store's
-- ClaimJobs): candidates picked in a CTE with SKIP LOCKED, so that
-- pollers in one slot take different rows, and written back by id; a
-- claimable row's queue is neither paused nor managed, and
-- an occurrence of a schedule that forbids overlap waits for the running
-- and the earlier ones. Parameters: the owner, its node, the most rows,
-- and the hold (the store's Hold.args).
CREATE FUNCTION slotpoller_claim_jobs(p_owner text, p_node text, p_limit integer,
  p_h1 bigint, p_h2 bigint, p_h3 bigint, p_h4 bigint)
RETURNS TABLE (id bigint, token bigint, attempt integer, max_attempts integer, endpoint text, method text,
  payload bytea, idem_key text, timeout_ms bigint, run_at timestamptz, scheduled_for timestamptz, queue varchar)
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
    j.run_at, j.scheduled_for, j.queue;
END
$$;
