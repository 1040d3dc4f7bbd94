-- 0004 schedules: recurring schedules (cron), the scheduler's leader lease, and the schedule
-- that made a job.

CREATE TABLE {schema}.schedules (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text NOT NULL UNIQUE
                 CONSTRAINT schedule_name_valid
                 CHECK (name ~ '^[A-Za-z_][A-Za-z0-9_.:-]*$' AND length(name) <= 200),
    cron         text NOT NULL CONSTRAINT cron_length CHECK (length(cron) BETWEEN 1 AND 200),
    timezone     text NOT NULL DEFAULT 'UTC',
    task         text NOT NULL
                 CONSTRAINT task_name_valid
                 CHECK (task ~ '^[A-Za-z_][A-Za-z0-9_.:-]*$' AND length(task) <= 200),
    payload      jsonb NOT NULL DEFAULT 'null',
    queue        text NOT NULL DEFAULT 'default',
    priority     smallint NOT NULL DEFAULT 0
                 CONSTRAINT priority_range CHECK (priority BETWEEN -100 AND 100),
    max_attempts integer CONSTRAINT max_attempts_range CHECK (max_attempts BETWEEN 1 AND 1000),
    starts_at    timestamptz,
    ends_at      timestamptz,
    catch_up     text NOT NULL DEFAULT 'latest'
                 CONSTRAINT catch_up_valid CHECK (catch_up IN ('latest', 'all', 'none')),
    paused       boolean NOT NULL DEFAULT false,
    declared     boolean NOT NULL DEFAULT false,  -- declared in code (@app.periodic)
    -- The first slot not yet fired; NULL when no fire is left (the schedule has expired).
    next_fire_at timestamptz,
    last_fire_at timestamptz,
    version      bigint NOT NULL DEFAULT 1,       -- bumped by every change of definition
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT window_ordered CHECK (starts_at IS NULL OR ends_at IS NULL OR ends_at > starts_at)
);

-- One row: the master whose scheduler leads, until expires_at (database clock). A leader
-- renews it; anyone may take it once it has expired. term counts changes of leader.
CREATE TABLE {schema}.scheduler_leader (
    singleton  boolean PRIMARY KEY DEFAULT true CONSTRAINT one_row CHECK (singleton),
    owner      text NOT NULL,
    term       bigint NOT NULL,
    elected_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);

-- Jobs a schedule made carry its id (no foreign key: the hot table pays nothing for it, and a
-- deleted schedule leaves its jobs).
ALTER TABLE {schema}.jobs ADD COLUMN schedule_id bigint;
CREATE INDEX jobs_schedule ON {schema}.jobs (schedule_id, id) WHERE schedule_id IS NOT NULL;

-- Schedules changed: wakes every master's scheduler (payload: the schedule's name).
CREATE FUNCTION {schema}.notify_schedules() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_schedules', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER schedules_notify AFTER INSERT OR UPDATE OF cron, timezone, paused, starts_at,
    ends_at, next_fire_at, version OR DELETE ON {schema}.schedules
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.notify_schedules();
