-- Version 12: queues. Every job belongs to a queue (jobs.queue, 'default'
-- unless given or routed); a paused queue's jobs are not claimed. The
-- nodes write queue_routes from their config (queues:) at start: a job
-- enqueued without a queue goes to the queue of the longest route prefix
-- its endpoint starts with, else to 'default'. prefix_len is the prefix's
-- length in characters, written by the node, so that the match is one
-- equality on a substring in every database. paused is 0 or 1, like the
-- other flags of the schema.
ALTER TABLE slotpoller_jobs ADD COLUMN queue VARCHAR(100) NOT NULL DEFAULT 'default';
CREATE TABLE slotpoller_queues (
  name      VARCHAR(100) NOT NULL PRIMARY KEY,
  paused    INTEGER      NOT NULL DEFAULT 0,
  paused_by TEXT,
  paused_at TIMESTAMPTZ
);
CREATE TABLE slotpoller_queue_routes (
  prefix     VARCHAR(400) NOT NULL PRIMARY KEY,
  prefix_len INTEGER      NOT NULL,
  queue      VARCHAR(100) NOT NULL
);

-- The entry point gains a trailing parameter, queue (NULL or '': routed
-- as above). A function with one more parameter is another function in
-- PostgreSQL (an overload), and a call naming only the old parameters
-- would be ambiguous between the two: the old one is dropped first. Calls
-- by position or by name that worked before work the same. Who could
-- execute the old function can execute the new one: its grants are read
-- before the drop and given again after the create (a REVOKE from PUBLIC
-- too). The rest is version 11's, unchanged.
CREATE TEMPORARY TABLE slotpoller_enqueue_acl ON COMMIT DROP AS
  SELECT p.proacl FROM pg_proc p
  WHERE p.oid = 'slotpoller_enqueue_v1(text, bytea, text, bigint, timestamptz, integer, bigint, text, text)'::regprocedure;
GO
DROP FUNCTION slotpoller_enqueue_v1(text, bytea, text, bigint, timestamptz, integer, bigint, text, text);
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
  queue           text        DEFAULT NULL
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
    unique_key, idem_key, token, created_at, exclusive, queue)
  VALUES (p_endpoint, p_method, slotpoller_enqueue_v1.payload, 'ready',
    COALESCE(slotpoller_enqueue_v1.run_at, clock_timestamp() + p_delay * interval '1 millisecond'),
    0, p_attempts, p_timeout, p_unique, p_idem, 0, clock_timestamp(), 0, p_queue)
  RETURNING id INTO p_id;
  RETURN p_id;
END;
$$;
GO
GO
-- The old function's grants, given again (NULL: the default, PUBLIC may
-- execute, which the new function has too).
DO $$
DECLARE
  acl aclitem[];
  g   record;
  fn  constant text := 'slotpoller_enqueue_v1(text, bytea, text, bigint, timestamptz, integer, bigint, text, text, text)';
BEGIN
  SELECT proacl INTO acl FROM slotpoller_enqueue_acl;
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
