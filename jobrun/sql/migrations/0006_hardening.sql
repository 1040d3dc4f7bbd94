-- 0006 hardening: one set of input limits in the SQL enqueue API (mirroring jobrun/validate.py),
-- limits producers cannot raise, enqueue functions that run with their owner's rights, and the
-- session of a transactional handler recorded with its lease so a stale one can be ended.

-- Limits the SQL enqueue functions read. Producers cannot write it; an operator can:
--   UPDATE jobrun.settings SET value = 4194304 WHERE name = 'max_payload_bytes';
-- A session may lower the payload cap (SET jobrun.max_payload_bytes), never raise it.
CREATE TABLE {schema}.settings (
    name  text PRIMARY KEY,
    value bigint NOT NULL
);
INSERT INTO {schema}.settings (name, value) VALUES ('max_payload_bytes', 1048576);

-- Times PostgreSQL stores but Python (and most JSON clients) cannot read back are refused.
-- Rows stored before (a far delay was accepted) move to the last time that can be read:
-- they were never going to run either way, and now list and get can show them.
UPDATE {schema}.jobs SET run_at = '9999-12-31 23:59:59+00' WHERE run_at >= '10000-01-01 00:00:00+00';
ALTER TABLE {schema}.jobs
    ADD CONSTRAINT run_at_range CHECK (run_at < '10000-01-01 00:00:00+00');

-- The database session running a transactional handler's transaction, for the attempt whose
-- lease token is handler_token: a stale attempt's session (its process frozen, its host cut
-- off) holds the effect key's row lock while it lives, so once that lease expired the reaper
-- ends the session (pg_terminate_backend). backend_start tells a reused pid apart.
ALTER TABLE {schema}.jobs
    ADD COLUMN handler_pid integer,
    ADD COLUMN handler_token bigint,
    ADD COLUMN handler_since timestamptz;

-- A value for an error message: at most 60 characters, control characters as '?', quoted.
CREATE FUNCTION {schema}.shown(value text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN value IS NULL THEN 'NULL'
                ELSE '"' || regexp_replace(left(value, 60), '[[:cntrl:]]', '?', 'g') || '"'
                     || CASE WHEN length(value) > 60 THEN '...' ELSE '' END END
$$;

-- Why a JSON value breaks the shape limits, or NULL when it does not: containers nested more
-- than 100 deep (Python's parser fails near 1,000), numbers of 4,301 digits or more before the
-- point (Python refuses to convert such integers). `size` is the length of its text: shorter
-- texts cannot break them, and skip the walks. The depth walk goes first and stops at level
-- 100, so the unbounded walk for numbers never meets a document nested deeper. Plain SQL, so
-- it is inlined; walking jsonb nodes costs far less than scanning its text (translate() or a
-- regular expression over a 10 KB payload cost more than the insert).
CREATE FUNCTION {schema}.json_shape_error(value jsonb, size integer) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN size > 200 AND jsonb_path_exists(value,
                 'strict $.**{{100}} ? (@.type() == "array" || @.type() == "object")')
            THEN 'nested deeper than 100 levels'
        WHEN size > 4300 AND jsonb_path_exists(value,
                 'strict $.** ? (@.type() == "number" && (@ >= 1e4300 || @ <= -1e4300))')
            THEN 'holds a number of more than 4300 digits'
    END
$$;

CREATE OR REPLACE FUNCTION {schema}.enqueue_many(
    tasks            text[],
    payloads         jsonb[]       DEFAULT NULL,
    queues           text[]        DEFAULT NULL,
    priorities       integer[]     DEFAULT NULL,
    run_ats          timestamptz[] DEFAULT NULL,
    attempt_limits   integer[]     DEFAULT NULL,
    idempotency_keys text[]        DEFAULT NULL,
    traceparents     text[]        DEFAULT NULL
) RETURNS TABLE (id bigint, created boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n         integer := coalesce(cardinality(tasks), 0);
    max_bytes bigint := (SELECT s.value FROM {schema}.settings s WHERE s.name = 'max_payload_bytes');
    asked     bigint;
    seq       regclass := pg_get_serial_sequence('{schema}.jobs', 'id')::regclass;
    bad       text;
    bad_ord   bigint;
    all_ids   bigint[];
    made      boolean[];
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    IF coalesce(cardinality(payloads), n) <> n OR coalesce(cardinality(queues), n) <> n
       OR coalesce(cardinality(priorities), n) <> n OR coalesce(cardinality(run_ats), n) <> n
       OR coalesce(cardinality(attempt_limits), n) <> n
       OR coalesce(cardinality(idempotency_keys), n) <> n
       OR coalesce(cardinality(traceparents), n) <> n THEN
        RAISE EXCEPTION 'enqueue_many: every array argument must have as many elements as tasks (%)', n
            USING ERRCODE = 'JR001';
    END IF;
    BEGIN
        asked := nullif(current_setting('jobrun.max_payload_bytes', true), '')::bigint;
    EXCEPTION WHEN others THEN
        RAISE EXCEPTION 'jobrun.max_payload_bytes must be a number of bytes' USING ERRCODE = 'JR001';
    END;
    max_bytes := least(coalesce(max_bytes, 1048576), coalesce(asked, max_bytes, 1048576));

    -- The rules of jobrun/validate.py, checked before anything is written, so an error names
    -- the item and never echoes a whole row.
    SELECT u.ord, u.v INTO bad_ord, bad FROM unnest(tasks) WITH ORDINALITY AS u(v, ord)
     WHERE u.v IS NULL OR NOT (u.v ~ '^[A-Za-z_][A-Za-z0-9_.:-]*$' AND length(u.v) <= 200) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job %: invalid task name %: a letter or _, then letters, digits, ''_'', ''.'', '':'' or ''-''; at most 200 characters',
            bad_ord, {schema}.shown(bad) USING ERRCODE = 'JR001';
    END IF;
    SELECT u.ord, u.v INTO bad_ord, bad FROM unnest(queues) WITH ORDINALITY AS u(v, ord)
     WHERE u.v IS NOT NULL AND NOT (u.v ~ '^[A-Za-z0-9][A-Za-z0-9_.-]*$' AND length(u.v) <= 63) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job %: invalid queue name %: a letter or digit, then letters, digits, ''_'', ''.'' or ''-''; at most 63 characters',
            bad_ord, {schema}.shown(bad) USING ERRCODE = 'JR001';
    END IF;
    SELECT u.ord, u.v INTO bad_ord, bad FROM unnest(priorities) WITH ORDINALITY AS u(v, ord)
     WHERE u.v NOT BETWEEN -100 AND 100 LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job %: invalid priority %: an integer from -100 to 100 (lower runs first)',
            bad_ord, bad USING ERRCODE = 'JR001';
    END IF;
    SELECT u.ord, u.v INTO bad_ord, bad FROM unnest(attempt_limits) WITH ORDINALITY AS u(v, ord)
     WHERE u.v NOT BETWEEN 1 AND 1000 LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job %: invalid max_attempts %: an integer from 1 to 1000', bad_ord, bad
            USING ERRCODE = 'JR001';
    END IF;
    SELECT u.ord INTO bad_ord FROM unnest(run_ats) WITH ORDINALITY AS u(v, ord)
     WHERE u.v >= '10000-01-01 00:00:00+00' OR u.v < '0001-01-01 00:00:00+00' LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job %: run_at is out of range: from year 1 to 9999 in UTC', bad_ord
            USING ERRCODE = 'JR001';
    END IF;
    SELECT u.ord, u.v INTO bad_ord, bad FROM unnest(idempotency_keys) WITH ORDINALITY AS u(v, ord)
     WHERE u.v IS NOT NULL AND NOT length(u.v) BETWEEN 1 AND 255 LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job %: invalid idempotency key %: 1 to 255 characters', bad_ord,
            {schema}.shown(bad) USING ERRCODE = 'JR001';
    END IF;

    SELECT d.q INTO bad
      FROM (SELECT DISTINCT coalesce(u.q, 'default') AS q
              FROM unnest(coalesce(queues, ARRAY[NULL::text])) AS u(q)) d
     WHERE NOT EXISTS (SELECT 1 FROM {schema}.queues k WHERE k.name = d.q)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'queue "%" is not declared (declare it with: jobrun queue add %)', bad, bad
            USING ERRCODE = 'JR002';
    END IF;

    SELECT p.ord, p.why INTO bad_ord, bad
      FROM (SELECT p.ord, CASE WHEN p.size > max_bytes THEN 'size'
                               ELSE {schema}.json_shape_error(p.v, p.size) END AS why
              FROM (SELECT p.v, octet_length(p.v::text) AS size, p.ord
                      FROM unnest(payloads) WITH ORDINALITY AS p(v, ord)) p) p
     WHERE p.why IS NOT NULL LIMIT 1;
    IF FOUND AND bad = 'size' THEN
        RAISE EXCEPTION 'payload % is over the limit of % bytes', bad_ord, max_bytes
            USING ERRCODE = 'JR004';
    ELSIF FOUND THEN
        RAISE EXCEPTION 'payload % %', bad_ord, bad USING ERRCODE = 'JR001';
    END IF;

    WITH src AS MATERIALIZED (
        SELECT u.ord, nextval(seq) AS id, u.task, coalesce(u.payload, 'null'::jsonb) AS payload,
               coalesce(u.queue, 'default') AS queue, coalesce(u.priority, 0) AS priority,
               coalesce(u.run_at, now()) AS run_at, coalesce(u.max_attempts, 5) AS max_attempts,
               u.ikey, u.tp
          FROM unnest(tasks, payloads, queues, priorities, run_ats, attempt_limits,
                      idempotency_keys, traceparents)
               WITH ORDINALITY AS u(task, payload, queue, priority, run_at, max_attempts, ikey, tp, ord)
    ), ins AS (
        INSERT INTO {schema}.jobs AS j
               (id, queue, task, payload, priority, run_at, max_attempts, idempotency_key, traceparent)
        SELECT s.id, s.queue, s.task, s.payload, s.priority, s.run_at, s.max_attempts, s.ikey, s.tp
          FROM src s ORDER BY s.ord
        ON CONFLICT (queue, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING j.id
    )
    SELECT array_agg(s.id ORDER BY s.ord), array_agg(i.id IS NOT NULL ORDER BY s.ord)
      INTO all_ids, made
      FROM src s LEFT JOIN ins i ON i.id = s.id;

    IF false = ANY (made) THEN
        -- Replays: a later statement, so rows committed meanwhile by a racing producer
        -- (whose insert made ours skip) are visible here.
        SELECT u.ikey INTO bad
          FROM unnest(made, tasks, payloads, queues, idempotency_keys)
               AS u(made, task, payload, queue, ikey)
          LEFT JOIN {schema}.jobs e
                 ON e.queue = coalesce(u.queue, 'default') AND e.idempotency_key = u.ikey
         WHERE NOT u.made
           AND (e.id IS NULL OR e.task <> u.task OR e.payload <> coalesce(u.payload, 'null'::jsonb))
         LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'idempotency key % is already used in this queue by a job with another task or payload',
                {schema}.shown(bad) USING ERRCODE = 'JR003';
        END IF;
        RETURN QUERY
            SELECT coalesce(e.id, a.id), a.made
              FROM unnest(all_ids, made, queues, idempotency_keys) WITH ORDINALITY
                   AS a(id, made, queue, ikey, ord)
              LEFT JOIN {schema}.jobs e
                     ON NOT a.made AND e.queue = coalesce(a.queue, 'default')
                    AND e.idempotency_key = a.ikey
             ORDER BY a.ord;
    ELSE
        RETURN QUERY SELECT a.id, true FROM unnest(all_ids) AS a(id);
    END IF;
END
$$;

-- enqueue takes bigint priority and max_attempts, so an out-of-range number is refused by
-- its rule rather than by "function does not exist".
DROP FUNCTION {schema}.enqueue(text, jsonb, text, integer, timestamptz, interval, integer, text, text);
CREATE FUNCTION {schema}.enqueue(
    task            text,
    payload         jsonb       DEFAULT 'null',
    queue           text        DEFAULT 'default',
    priority        bigint      DEFAULT 0,
    run_at          timestamptz DEFAULT NULL,
    delay           interval    DEFAULT NULL,
    max_attempts    bigint      DEFAULT 5,
    idempotency_key text        DEFAULT NULL,
    traceparent     text        DEFAULT NULL
) RETURNS SETOF {schema}.enqueued
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    r record;
BEGIN
    IF enqueue.run_at IS NOT NULL AND enqueue.delay IS NOT NULL THEN
        RAISE EXCEPTION 'give run_at or delay, not both' USING ERRCODE = 'JR001';
    END IF;
    IF enqueue.delay < interval '0' THEN
        RAISE EXCEPTION 'invalid delay %: must not be negative', enqueue.delay USING ERRCODE = 'JR001';
    END IF;
    IF enqueue.delay > interval '100 years' THEN
        RAISE EXCEPTION 'invalid delay %: at most 100 years', enqueue.delay USING ERRCODE = 'JR001';
    END IF;
    IF enqueue.priority NOT BETWEEN -100 AND 100 THEN
        RAISE EXCEPTION 'invalid priority %: an integer from -100 to 100 (lower runs first)',
            enqueue.priority USING ERRCODE = 'JR001';
    END IF;
    IF enqueue.max_attempts NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'invalid max_attempts %: an integer from 1 to 1000', enqueue.max_attempts
            USING ERRCODE = 'JR001';
    END IF;
    SELECT e.id, e.created INTO r
      FROM {schema}.enqueue_many(
               ARRAY[enqueue.task], ARRAY[enqueue.payload], ARRAY[enqueue.queue],
               ARRAY[enqueue.priority::integer],
               ARRAY[coalesce(enqueue.run_at, now() + enqueue.delay)],
               ARRAY[enqueue.max_attempts::integer], ARRAY[enqueue.idempotency_key],
               ARRAY[enqueue.traceparent]) e;
    RETURN QUERY
        SELECT j.id, r.created, j.queue, j.task, j.status, j.priority, j.run_at, j.attempts,
               j.max_attempts, j.idempotency_key, j.created_at
          FROM {schema}.jobs j WHERE j.id = r.id;
END
$$;

-- Producers need only USAGE on the schema and EXECUTE on these two (docs/concepts.md): the
-- functions write with their owner's rights, checking every value on the way.
REVOKE EXECUTE ON FUNCTION {schema}.enqueue_many(text[], jsonb[], text[], integer[], timestamptz[], integer[], text[], text[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}.enqueue(text, jsonb, text, bigint, timestamptz, interval, bigint, text, text) FROM PUBLIC;
