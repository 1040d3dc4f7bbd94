-- 0011 a client may wake the masters after its insert commits instead of at its commit.
--
-- A transaction that sends a NOTIFY takes one lock for the whole cluster at its commit and
-- holds it until the commit is flushed, so every enqueue's commit waited for the one before
-- it to reach the disk: with a dozen producers an enqueue took ~8 ms at 2,000 jobs/s, most of
-- it waiting for that lock (wait event Lock/object), and the producers could not offer more
-- than ~1,500 jobs/s (docs/BENCHMARKS.md). A statement that sets jobrun.notify to 'after' for
-- its transaction (the clients' plain inserts on their own connection, in autocommit mode)
-- sends no NOTIFY; its client sends the wake-up itself right after the commit (query
-- wake_queues), in a transaction that writes nothing and so waits for no flush. Every other
-- insert (the SQL API, an enqueue inside the caller's transaction, a schedule's) notifies at
-- its commit as before.
CREATE OR REPLACE FUNCTION {schema}.notify_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('jobrun.notify', true) = 'after' THEN
        RETURN NULL;
    END IF;
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_ready', s.queue)
       FROM (SELECT DISTINCT n.queue FROM new_rows n
              WHERE n.status = 'queued' AND n.run_at <= now()) s;
    RETURN NULL;
END
$$;
