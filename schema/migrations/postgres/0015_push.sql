-- Version 15: an enqueue wakes the farm at commit. After every INSERT
-- statement into the jobs table, whatever door it came through (the Go
-- client, the enqueue entry point, the HTTP API, the CLI, a plain INSERT),
-- one note 'due' goes to the farm's channel when any new row is ready and
-- due by the database clock at the insert (clock_timestamp(), not now(),
-- the transaction's start: a job enqueued with no delay late in a long
-- transaction is due). NOTIFY is transactional: the note is delivered at
-- commit, dropped on rollback, and sent once per transaction however many
-- statements raise it. The channel is named by the table's schema, not the
-- inserting connection's search_path, which a foreign application may set
-- otherwise: the nodes listen on 'slotpoller:' || current_schema(), their
-- tables' schema. A job due later, or inserted running (the start-now
-- insert), sends nothing: the turns find it.
CREATE FUNCTION slotpoller_jobs_due_note() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM slotpoller_new_jobs n WHERE n.state = 'ready' AND n.run_at <= clock_timestamp()) THEN
    PERFORM pg_notify('slotpoller:' || TG_TABLE_SCHEMA, 'due');
  END IF;
  RETURN NULL;
END
$$;
GO
CREATE TRIGGER slotpoller_jobs_due AFTER INSERT ON slotpoller_jobs
  REFERENCING NEW TABLE AS slotpoller_new_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION slotpoller_jobs_due_note();
