-- 0015 a producer's own insert is held to the rules of the SQL enqueue functions.
--
-- jobrun.Client inserts jobs without an idempotency key with one plain statement (queries
-- insert_job and insert_jobs), so the producer role holds INSERT on jobs, on the columns a new
-- job may choose only (jobrun/sql/roles.sql): status, attempts, crashes, the lease, version
-- and the timestamps always take their defaults, so its rows are queued, never started and
-- unleased. What the column types cannot say is the payload's size and shape, which the
-- functions check against the operator's cap (settings.max_payload_bytes) and the client
-- checks against its own. This trigger checks them for a direct insert by a role that may
-- not update jobs: a producer, whose insert's rows the client already checked, or any SQL of
-- its own. Trusted roles (the owner, the worker role, and the functions, which run as the
-- owner and checked first) skip it: the WHEN is read once per statement, and the rows come
-- from the transition table the notify trigger collects anyway. A producer's insert thus
-- pays the walk the functions pay (each payload's text length), in the same statement.
-- The size is the payload's JSON text as jsonb writes it, in bytes, as the functions count
-- it. Errors: JR004 over the cap, JR001 a shape the functions refuse; the statement inserts
-- nothing.
CREATE FUNCTION {schema}.check_inserted_payloads() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    max_bytes bigint := coalesce((SELECT s.value FROM {schema}.settings s
                                   WHERE s.name = 'max_payload_bytes'), 1048576);
    bad_id bigint;
    bad text;
BEGIN
    SELECT p.id, p.why INTO bad_id, bad
      FROM (SELECT p.id, CASE WHEN p.size > max_bytes THEN 'size'
                              ELSE {schema}.json_shape_error(p.payload, p.size) END AS why
              FROM (SELECT n.id, n.payload, octet_length(n.payload::text) AS size
                      FROM new_rows n) p) p
     WHERE p.why IS NOT NULL LIMIT 1;
    IF FOUND AND bad = 'size' THEN
        RAISE EXCEPTION 'payload of job % is over the limit of % bytes', bad_id, max_bytes
            USING ERRCODE = 'JR004';
    ELSIF FOUND THEN
        RAISE EXCEPTION 'payload of job % %', bad_id, bad USING ERRCODE = 'JR001';
    END IF;
    RETURN NULL;
END
$$;

-- Named to fire before jobs_notify_ready (triggers of one event fire in name order).
CREATE TRIGGER jobs_check_payloads AFTER INSERT ON {schema}.jobs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT
    WHEN (NOT has_table_privilege('{schema}.jobs'::regclass, 'UPDATE'))
    EXECUTE FUNCTION {schema}.check_inserted_payloads();
