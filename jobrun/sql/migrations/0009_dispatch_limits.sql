-- 0009 dispatch limits: what the claim needs to hold a queue's cluster-wide concurrency and
-- rate limits and its per-key concurrency, and enqueue functions that take a concurrency key
-- and fill in the queue's defaults (docs/dispatch.md).
--
-- Why counters in rows of their own, not a count of leased jobs: a claim runs in READ
-- COMMITTED, so a count taken in the claim statement reads the statement's snapshot, taken
-- before the claim waited for the queue's lock; a racing master's commit in between would be
-- missed and the limit overshot. A row locked FOR UPDATE is read in its latest version, so
-- what a claim must know exactly lives in one: queue_claims (taken, the rate window), locked
-- by claims of a limited queue only. Releases add to queue_releases instead, a row no claim
-- locks: a claim reads it from its snapshot, which can only be behind (count too few
-- releases, so too many leased: the safe side), and a completion never waits for a claim.

-- Leases a claim counted in its queue's taken (the queue had a concurrency limit then); their
-- release counts in freed. Leases from before a limit was set are not counted.
ALTER TABLE {schema}.jobs ADD COLUMN counted boolean NOT NULL DEFAULT false;

-- Per queue, written by claims of a limited queue (under this row's lock):
--   taken              counted leases ever taken
--   starts_at/starts_n the sliding rate window: starts per bucket of a fiftieth of the period
--                      (a bucket's time is its end, at or after its starts' started_at), kept
--                      one period plus a margin back: at most about a hundred entries
--   last_claim_at      the latest clock of a claim that started jobs (the margin's guard)
CREATE TABLE {schema}.queue_claims (
    queue         text PRIMARY KEY REFERENCES {schema}.queues (name) ON DELETE CASCADE,
    taken         bigint NOT NULL DEFAULT 0,
    starts_at     timestamptz[] NOT NULL DEFAULT '{{}}',
    starts_n      integer[] NOT NULL DEFAULT '{{}}',
    last_claim_at timestamptz NOT NULL DEFAULT '-infinity'
) WITH (fillfactor = 50);

-- Per queue, written by releases of counted leases (completion, reaper, give-back):
-- leased now = taken - freed.
CREATE TABLE {schema}.queue_releases (
    queue text PRIMARY KEY REFERENCES {schema}.queues (name) ON DELETE CASCADE,
    freed bigint NOT NULL DEFAULT 0
) WITH (fillfactor = 50);

-- One row per running job with a concurrency key: its slot (0 .. key_concurrency - 1). The
-- primary key is what holds the limit: two claims racing for the last slot of a key insert
-- the same row, and the loser's insert does nothing (its job stays queued).
CREATE TABLE {schema}.key_leases (
    queue  text NOT NULL,
    key    text NOT NULL,
    slot   integer NOT NULL,
    job_id bigint NOT NULL,
    PRIMARY KEY (queue, key, slot)
);

-- Claims each master's limits held back since it started (by queue, then reason): `jobrun
-- top` sums the live masters' rows.
ALTER TABLE {schema}.workers ADD COLUMN held jsonb NOT NULL DEFAULT '{{}}';

INSERT INTO {schema}.queue_claims (queue) SELECT name FROM {schema}.queues;
INSERT INTO {schema}.queue_releases (queue) SELECT name FROM {schema}.queues;

-- Every declared queue has its two rows, however it was declared.
CREATE FUNCTION {schema}.queue_dispatch_rows() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('INSERT INTO %I.queue_claims (queue) VALUES ($1) ON CONFLICT DO NOTHING',
                   TG_TABLE_SCHEMA) USING NEW.name;
    EXECUTE format('INSERT INTO %I.queue_releases (queue) VALUES ($1) ON CONFLICT DO NOTHING',
                   TG_TABLE_SCHEMA) USING NEW.name;
    RETURN NULL;
END
$$;

CREATE TRIGGER queues_dispatch_rows AFTER INSERT ON {schema}.queues
    FOR EACH ROW EXECUTE FUNCTION {schema}.queue_dispatch_rows();

-- Give back what released leases held (called by the completion, the reaper, the give-back
-- and a transactional completion, with their released jobs that were counted or keyed; an
-- empty call returns at once): counted leases add to their queue's freed, keyed ones delete
-- their key_leases row, and each such queue is announced, so a claim a limit held back runs.
CREATE FUNCTION {schema}.release_limits(queues text[], counted boolean[], keys text[],
                                        ids bigint[], channel text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF queues IS NULL THEN
        RETURN;
    END IF;
    UPDATE {schema}.queue_releases r SET freed = r.freed + f.n
      FROM (SELECT u.q, count(*) AS n FROM unnest(queues, counted) AS u(q, c)
             WHERE u.c GROUP BY u.q) f
     WHERE r.queue = f.q;
    DELETE FROM {schema}.key_leases kl
     USING unnest(queues, keys, ids) AS u(q, k, id)
     WHERE u.k IS NOT NULL AND kl.queue = u.q AND kl.key = u.k AND kl.job_id = u.id;
    PERFORM pg_notify(channel, d.q) FROM (SELECT DISTINCT u.q FROM unnest(queues) AS u(q)) d;
END
$$;

-- The enqueue functions again, whole: a concurrency key per job, and a job given no priority
-- or max_attempts takes its queue's priority_default and max_attempts (NULL: 5).
DROP FUNCTION {schema}.enqueue(text, jsonb, text, bigint, timestamptz, interval, bigint, text, text);
DROP FUNCTION {schema}.enqueue_many(text[], jsonb[], text[], integer[], timestamptz[], integer[], text[], text[]);

CREATE FUNCTION {schema}.enqueue_many(
    tasks            text[],
    payloads         jsonb[]       DEFAULT NULL,
    queues           text[]        DEFAULT NULL,
    priorities       integer[]     DEFAULT NULL,
    run_ats          timestamptz[] DEFAULT NULL,
    attempt_limits   integer[]     DEFAULT NULL,
    idempotency_keys text[]        DEFAULT NULL,
    traceparents     text[]        DEFAULT NULL,
    concurrency_keys text[]        DEFAULT NULL
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
       OR coalesce(cardinality(traceparents), n) <> n
       OR coalesce(cardinality(concurrency_keys), n) <> n THEN
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

    SELECT u.ord, u.v INTO bad_ord, bad FROM unnest(concurrency_keys) WITH ORDINALITY AS u(v, ord)
     WHERE u.v IS NOT NULL AND NOT (length(u.v) BETWEEN 1 AND 200 AND u.v !~ '[[:cntrl:]]') LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job %: invalid concurrency key %: 1 to 200 characters, no control characters',
            bad_ord, {schema}.shown(bad) USING ERRCODE = 'JR001';
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
        -- Priority and max_attempts not given: the queue's priority_default and max_attempts.
        SELECT u.ord, nextval(seq) AS id, u.task, coalesce(u.payload, 'null'::jsonb) AS payload,
               -- (Looked up per row, not joined: ids are drawn in input order.)
               coalesce(u.queue, 'default') AS queue,
               coalesce(u.priority, (SELECT k.priority_default FROM {schema}.queues k
                                      WHERE k.name = coalesce(u.queue, 'default'))) AS priority,
               coalesce(u.run_at, now()) AS run_at,
               coalesce(u.max_attempts, (SELECT k.max_attempts FROM {schema}.queues k
                                          WHERE k.name = coalesce(u.queue, 'default')), 5)
                   AS max_attempts,
               u.ikey, u.tp, u.ckey
          FROM unnest(tasks, payloads, queues, priorities, run_ats, attempt_limits,
                      idempotency_keys, traceparents, concurrency_keys)
               WITH ORDINALITY AS u(task, payload, queue, priority, run_at, max_attempts, ikey, tp,
                                    ckey, ord)
    ), ins AS (
        INSERT INTO {schema}.jobs AS j
               (id, queue, task, payload, priority, run_at, max_attempts, idempotency_key,
                traceparent, concurrency_key)
        SELECT s.id, s.queue, s.task, s.payload, s.priority, s.run_at, s.max_attempts, s.ikey,
               s.tp, s.ckey
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

CREATE FUNCTION {schema}.enqueue(
    task            text,
    payload         jsonb       DEFAULT 'null',
    queue           text        DEFAULT 'default',
    priority        bigint      DEFAULT NULL,
    run_at          timestamptz DEFAULT NULL,
    delay           interval    DEFAULT NULL,
    max_attempts    bigint      DEFAULT NULL,
    idempotency_key text        DEFAULT NULL,
    traceparent     text        DEFAULT NULL,
    concurrency_key text        DEFAULT NULL
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
               ARRAY[enqueue.traceparent], ARRAY[enqueue.concurrency_key]) e;
    RETURN QUERY
        SELECT j.id, r.created, j.queue, j.task, j.status, j.priority, j.run_at, j.attempts,
               j.max_attempts, j.idempotency_key, j.created_at
          FROM {schema}.jobs j WHERE j.id = r.id;
END
$$;

REVOKE EXECUTE ON FUNCTION {schema}.enqueue_many(text[], jsonb[], text[], integer[], timestamptz[], integer[], text[], text[], text[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}.enqueue(text, jsonb, text, bigint, timestamptz, interval, bigint, text, text, text) FROM PUBLIC;
