-- 0012 the jobs table's value rules move from CHECK constraints into domains.
--
-- PostgreSQL reads a table's CHECK constraints from their stored text and plans them again at
-- every statement that writes the table, and checks every one of them on every row an UPDATE
-- writes, whatever it changed. The master's statements each write a few rows (a claim, a
-- completion, an enqueue), so at 1,000 jobs a second that was ~9 % of the database's CPU
-- (docs/BENCHMARKS.md). A domain's rules are read once per session and checked only where a
-- value of the domain is written: an insert checks them all, a claim or a completion only
-- what it sets (status, run_at). Same rules and same constraint names, so the same errors
-- (jobrun/store/db.py maps them by name); base_priority shares priority's rule and name.
--
-- The columns change type while their domains have no rule yet (the same storage: the table
-- is not rewritten; PostgreSQL builds its five partial indexes again), then each domain gets
-- its rule, which reads the table once to validate it: 1.7 s for a million jobs, under the
-- ALTER TABLE lock (producers and masters wait for it). Since the columns are of the domains,
-- a statement that uses one untyped parameter both for such a column and as text must cast it.
CREATE DOMAIN {schema}.queue_name AS text;
CREATE DOMAIN {schema}.task_name AS text;
CREATE DOMAIN {schema}.job_status AS text;
CREATE DOMAIN {schema}.job_priority AS smallint;
CREATE DOMAIN {schema}.attempt_limit AS integer;
CREATE DOMAIN {schema}.idempotency_key_text AS text;
CREATE DOMAIN {schema}.concurrency_key_text AS text;
CREATE DOMAIN {schema}.run_time AS timestamptz;

ALTER TABLE {schema}.jobs
    DROP CONSTRAINT queue_name_valid,
    DROP CONSTRAINT task_name_valid,
    DROP CONSTRAINT status_valid,
    DROP CONSTRAINT priority_range,
    DROP CONSTRAINT base_priority_range,
    DROP CONSTRAINT max_attempts_range,
    DROP CONSTRAINT idempotency_key_valid,
    DROP CONSTRAINT concurrency_key_valid,
    DROP CONSTRAINT run_at_range,
    ALTER COLUMN queue TYPE {schema}.queue_name,
    ALTER COLUMN task TYPE {schema}.task_name,
    ALTER COLUMN status TYPE {schema}.job_status,
    ALTER COLUMN priority TYPE {schema}.job_priority,
    ALTER COLUMN base_priority TYPE {schema}.job_priority,
    ALTER COLUMN max_attempts TYPE {schema}.attempt_limit,
    ALTER COLUMN idempotency_key TYPE {schema}.idempotency_key_text,
    ALTER COLUMN concurrency_key TYPE {schema}.concurrency_key_text,
    ALTER COLUMN run_at TYPE {schema}.run_time;

ALTER DOMAIN {schema}.queue_name ADD CONSTRAINT queue_name_valid
    CHECK (VALUE ~ '^[A-Za-z0-9][A-Za-z0-9_.-]*$' AND length(VALUE) <= 63);
ALTER DOMAIN {schema}.task_name ADD CONSTRAINT task_name_valid
    CHECK (VALUE ~ '^[A-Za-z_][A-Za-z0-9_.:-]*$' AND length(VALUE) <= 200);
ALTER DOMAIN {schema}.job_status ADD CONSTRAINT status_valid
    CHECK (VALUE IN ('queued', 'leased', 'succeeded', 'dead', 'cancelled'));
ALTER DOMAIN {schema}.job_priority ADD CONSTRAINT priority_range
    CHECK (VALUE BETWEEN -100 AND 100);
ALTER DOMAIN {schema}.attempt_limit ADD CONSTRAINT max_attempts_range
    CHECK (VALUE BETWEEN 1 AND 1000);
ALTER DOMAIN {schema}.idempotency_key_text ADD CONSTRAINT idempotency_key_valid
    CHECK (length(VALUE) BETWEEN 1 AND 255);
ALTER DOMAIN {schema}.concurrency_key_text ADD CONSTRAINT concurrency_key_valid
    CHECK (length(VALUE) BETWEEN 1 AND 200 AND VALUE !~ '[[:cntrl:]]');
ALTER DOMAIN {schema}.run_time ADD CONSTRAINT run_at_range
    CHECK (VALUE < '10000-01-01 00:00:00+00');

-- enqueue() returns its job's columns (RETURN QUERY): the row type follows their types.
ALTER TYPE {schema}.enqueued
    ALTER ATTRIBUTE queue TYPE {schema}.queue_name,
    ALTER ATTRIBUTE task TYPE {schema}.task_name,
    ALTER ATTRIBUTE status TYPE {schema}.job_status,
    ALTER ATTRIBUTE priority TYPE {schema}.job_priority,
    ALTER ATTRIBUTE run_at TYPE {schema}.run_time,
    ALTER ATTRIBUTE max_attempts TYPE {schema}.attempt_limit,
    ALTER ATTRIBUTE idempotency_key TYPE {schema}.idempotency_key_text;
