-- Least-privilege roles for one schema (`jobrun roles --print | --apply`): a producer, a worker
-- (what a master needs) and an observer (read-only, for top and dashboards). The role names
-- are identifiers too: written {{producer}}, {{worker}}, {{observer}} here (the doubled braces
-- survive the {schema} rendering every query gets) and inserted by jobrun.admin.roles with
-- sql.Identifier, their names as sql.Literal in {{..._name}}. Each block runs without
-- parameters. The roles are NOLOGIN groups: grant them to login roles
-- (GRANT jobrun_producer TO app_backend).

-- name: roles_create
-- Create the three roles when missing (NOLOGIN groups).
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {{producer_name}}) THEN
        CREATE ROLE {{producer}} NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {{worker_name}}) THEN
        CREATE ROLE {{worker}} NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {{observer_name}}) THEN
        CREATE ROLE {{observer}} NOLOGIN;
    END IF;
END
$roles$;

-- name: roles_revoke_public
-- Functions are executable by PUBLIC by default; only the roles granted below may call jobrun's.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} FROM PUBLIC;

-- name: roles_grant_producer
-- The producer adds queued jobs and workflows (the SQL functions, or the client's own inserts) and reads jobs, their attempts, their events, workflows and queues; it cannot lease, update or delete.
GRANT USAGE ON SCHEMA {schema} TO {{producer}};
GRANT SELECT ON {schema}.queues, {schema}.jobs, {schema}.job_attempts, {schema}.job_events,
                {schema}.workflows, {schema}.job_deps TO {{producer}};
-- The functions run as their owner (SECURITY DEFINER) and need nothing more. The client
-- inserts jobs without an idempotency key itself (one statement, no function call), so the
-- producer may insert the columns a new job chooses, and only those: status, attempts,
-- crashes, the lease, cancel_requested, version and the timestamps take their defaults, so a
-- row it adds is queued, unleased and never started. A table-wide INSERT (granted before) is
-- taken back first. Its payloads are checked against the cap by a trigger (migration 0015).
REVOKE INSERT ON {schema}.jobs FROM {{producer}};
GRANT INSERT (id, queue, task, payload, priority, run_at, max_attempts, traceparent,
              concurrency_key) ON {schema}.jobs TO {{producer}};
GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {{producer}};
DO $grant$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
              WHERE p.pronamespace = {{schema_name}}::regnamespace
                AND p.proname IN ('enqueue', 'enqueue_many', 'enqueue_workflow')
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f, {{producer_name}});
    END LOOP;
END
$grant$;

-- name: roles_grant_worker
-- The worker (a master started with --no-migrate): read and write every jobrun table, use its sequences and functions; no DDL.
GRANT USAGE ON SCHEMA {schema} TO {{worker}};
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {{worker}};
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {{worker}};
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO {{worker}};
ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {{worker}};
ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT USAGE, SELECT ON SEQUENCES TO {{worker}};

-- name: roles_grant_observer
-- The observer (jobrun top, workers, stats, dashboards): read every jobrun table, nothing else.
GRANT USAGE ON SCHEMA {schema} TO {{observer}};
GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {{observer}};
ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT ON TABLES TO {{observer}};
