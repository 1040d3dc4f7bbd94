-- 0017 the transition log: one row in job_events per transition of a job, written by triggers
-- on jobs in the statement (and so the transaction) that makes the change.
--
-- Triggers, not edits of finish_jobs or the claims: every writer of jobs (the client's insert,
-- the SQL functions, the claims, finish_jobs, unclaim, cancel, retry, an operator's own SQL)
-- is covered without knowing of the log, and a new writer is too. They are statement-level
-- with transition tables, so a claim of 50 jobs or a completion batch of 100 is one
-- INSERT ... SELECT into job_events, not 100 calls. What a change was is read from the rows
-- alone (jobrun/events.py holds the same rule in Python, tests/db/test_job_events.py checks
-- both agree):
--   * an insert is `enqueued`;
--   * a status that moves: to leased `claimed`, to succeeded / dead / cancelled that status,
--     from dead or cancelled back to queued `requeued` (jobrun retry), any other move the
--     log has no name for `changed` (a new status adds its name here); from leased back to
--     queued by the outcome of the attempt the same statement recorded (finish_jobs writes
--     the job_attempts row keyed by the lease's token in the statement that moves the job,
--     and an AFTER trigger sees it): `released` (shutdown), `reaped` (lease_expired), any
--     other outcome `retried` (with run_at and the delay), no attempt row `given_back` (a
--     claim undone, unclaim: the job never started);
--   * a status that stays: on a leased job, attempts that grow `started`, a cancel asked for
--     `cancel_requested`; any other change of `version` (a change a user sees) `changed`.
--     Heartbeats, aging steps and other bookkeeping leave version alone and write nothing.
-- Who: `owner` is the master that holds (claimed, started) or held (an attempt's end) the
-- lease; `actor` the caller that made the change, as the transaction-local setting
-- jobrun.actor names it (the CLI, the API and the client set it for cancel and retry), else
-- the database role (session_user). A lost lease changes no row: the master that lost it
-- writes a `lease_lost` row itself (note_lease_lost).
--
-- The knob: settings row 'job_events' (2 all, the default when absent; 1 terminal: only
-- succeeded, dead and cancelled; 0 none). The triggers read it once per statement and return
-- at once for none (the insert trigger also for terminal). Cluster-wide, as the triggers run
-- in the database; `jobrun events mode all|terminal|none` writes it.
--
-- Retention: a job's events go with it. A deleted job (retention's purge, jobrun delete)
-- takes its events with it in the same statement, so the log never outgrows the jobs table
-- and nothing is left to purge on its own.

CREATE TABLE {schema}.job_events (
    job_id      bigint NOT NULL,
    seq         bigint GENERATED ALWAYS AS IDENTITY,
    at          timestamptz NOT NULL DEFAULT now(),
    kind        text NOT NULL
                CONSTRAINT event_kind_valid CHECK (kind IN (
                    'enqueued', 'claimed', 'started', 'cancel_requested', 'changed',
                    'succeeded', 'dead', 'cancelled', 'retried', 'released', 'reaped',
                    'given_back', 'requeued', 'lease_lost')),
    status      text NOT NULL,       -- the job's status after the change
    attempt     integer,             -- the job's attempts after the change
    lease_token bigint,
    owner       text,                -- the master holding or ending the lease
    actor       text,                -- jobrun.actor of the transaction, else the role
    outcome     text,                -- the outcome of the attempt the change ended
    detail      jsonb,               -- run_at and delay of a retry, an error's first 200 chars
    -- The events stream reads what came after the last event it saw (seq > mark); new keys
    -- go to the right edge of the index, its cheapest insert.
    PRIMARY KEY (seq)
) WITH (autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 50000);
-- A job's events in order (get --events) and the purge's delete of them.
CREATE INDEX job_events_job ON {schema}.job_events (job_id, seq);

-- What one change of a job was (NULL: nothing to record); jobrun.events.kind in Python.
CREATE FUNCTION {schema}.event_kind(old_status text, new_status text, outcome text,
                                    attempts_up boolean, cancel_asked boolean,
                                    version_moved boolean) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN old_status IS NULL THEN 'enqueued'
        WHEN old_status = new_status THEN
            CASE WHEN new_status = 'leased' AND attempts_up THEN 'started'
                 WHEN cancel_asked THEN 'cancel_requested'
                 WHEN version_moved THEN 'changed' END
        WHEN new_status = 'leased' THEN 'claimed'
        WHEN new_status IN ('succeeded', 'dead', 'cancelled') THEN new_status
        WHEN old_status = 'leased' THEN
            CASE WHEN outcome IS NULL THEN 'given_back'
                 WHEN outcome = 'released' THEN 'released'
                 WHEN outcome = 'lease_expired' THEN 'reaped'
                 ELSE 'retried' END
        WHEN old_status IN ('dead', 'cancelled') THEN 'requeued'
        ELSE 'changed' END
$$;

-- The knob's row holds one of the three levels, whoever writes it.
ALTER TABLE {schema}.settings ADD CONSTRAINT job_events_level
    CHECK (name <> 'job_events' OR value BETWEEN 0 AND 2);

-- The knob as a level: 2 all, 1 terminal, 0 none.
CREATE FUNCTION {schema}.job_events_level() RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce((SELECT s.value FROM {schema}.settings s WHERE s.name = 'job_events'), 2)
$$;

CREATE FUNCTION {schema}.record_job_inserts() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF {schema}.job_events_level() < 2 THEN
        RETURN NULL;
    END IF;
    INSERT INTO {schema}.job_events (job_id, kind, status, attempt, lease_token, actor, detail)
    SELECT n.id, 'enqueued', n.status, n.attempts, n.lease_token,
           coalesce(nullif(current_setting('jobrun.actor', true), ''), session_user::text),
           CASE WHEN n.run_at > now() THEN jsonb_build_object('run_at', n.run_at) END
      FROM new_rows n;
    RETURN NULL;
END
$$;

-- The old and new rows of the statement are paired by id without a join: each side's columns
-- are gathered as arrays in id order and unnested side by side. The transition tables have
-- no index and no statistics, and a join of them was planned as a nested loop, quadratic in
-- the batch (a completion of 900 jobs took ~90 ms, five times the completion itself).
CREATE FUNCTION {schema}.record_job_updates() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    level bigint := {schema}.job_events_level();
BEGIN
    IF level < 1 THEN
        RETURN NULL;
    END IF;
    INSERT INTO {schema}.job_events (job_id, kind, status, attempt, lease_token, owner, actor,
                                     outcome, detail)
    SELECT e.id, e.kind, e.status, e.attempts, e.lease_token, e.owner,
           coalesce(nullif(current_setting('jobrun.actor', true), ''), session_user::text),
           e.outcome,
           CASE WHEN e.kind IN ('retried', 'reaped') THEN
                    jsonb_build_object('run_at', e.run_at, 'delay',
                                       round(extract(epoch FROM e.run_at - now()), 3))
                WHEN e.error IS NOT NULL THEN jsonb_build_object('error', left(e.error, 200))
           END
      FROM (SELECT z.id, z.status, z.attempts, z.lease_token, z.run_at,
                   coalesce(z.owner, z.old_owner) AS owner, a.outcome, a.error,
                   {schema}.event_kind(z.old_status, z.status, a.outcome,
                                       z.attempts > z.old_attempts,
                                       z.cancel AND NOT z.old_cancel,
                                       z.version <> z.old_version) AS kind
              FROM (SELECT array_agg(n.id ORDER BY n.id) AS id,
                           array_agg(n.status ORDER BY n.id) AS status,
                           array_agg(n.attempts ORDER BY n.id) AS attempts,
                           array_agg(n.lease_token ORDER BY n.id) AS lease_token,
                           array_agg(n.run_at ORDER BY n.id) AS run_at,
                           array_agg(n.lease_owner ORDER BY n.id) AS owner,
                           array_agg(n.cancel_requested ORDER BY n.id) AS cancel,
                           array_agg(n.version ORDER BY n.id) AS version
                      FROM new_rows n) n,
                   (SELECT array_agg(o.status ORDER BY o.id) AS status,
                           array_agg(o.attempts ORDER BY o.id) AS attempts,
                           array_agg(o.lease_token ORDER BY o.id) AS lease_token,
                           array_agg(o.lease_owner ORDER BY o.id) AS owner,
                           array_agg(o.cancel_requested ORDER BY o.id) AS cancel,
                           array_agg(o.version ORDER BY o.id) AS version
                      FROM old_rows o) o,
                   unnest(n.id, n.status, n.attempts, n.lease_token, n.run_at, n.owner,
                          n.cancel, n.version, o.status, o.attempts, o.lease_token, o.owner,
                          o.cancel, o.version)
                       AS z(id, status, attempts, lease_token, run_at, owner, cancel, version,
                            old_status, old_attempts, old_token, old_owner, old_cancel,
                            old_version)
              LEFT JOIN {schema}.job_attempts a
                     ON z.old_status = 'leased' AND z.status <> 'leased'
                    AND a.job_id = z.id AND a.lease_token = z.old_token) e
     WHERE e.kind IS NOT NULL
       AND (level >= 2 OR e.kind IN ('succeeded', 'dead', 'cancelled'));
    RETURN NULL;
END
$$;

-- Whatever the knob says: a deleted job takes its events with it.
CREATE FUNCTION {schema}.drop_job_events() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM {schema}.job_events e USING old_rows o WHERE e.job_id = o.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_events_insert AFTER INSERT ON {schema}.jobs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.record_job_inserts();
CREATE TRIGGER jobs_events_update AFTER UPDATE ON {schema}.jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.record_job_updates();
CREATE TRIGGER jobs_events_delete AFTER DELETE ON {schema}.jobs
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.drop_job_events();

-- Mode none turns the recording triggers off, not only their work: a trigger with transition
-- tables makes every statement on jobs copy each row it changes (payload and all) into them,
-- mode or not. Setting the mode (a row of settings) switches them; deleting still drops a
-- job's events in any mode.
CREATE FUNCTION {schema}.apply_job_events_mode() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NEW.name = 'job_events' THEN
        EXECUTE format('ALTER TABLE %1$I.jobs %2$s TRIGGER jobs_events_insert,'
                       ' %2$s TRIGGER jobs_events_update', TG_TABLE_SCHEMA,
                       CASE WHEN NEW.value = 0 THEN 'DISABLE' ELSE 'ENABLE' END);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER settings_job_events AFTER INSERT OR UPDATE OF value ON {schema}.settings
    FOR EACH ROW WHEN (NEW.name = 'job_events')
    EXECUTE FUNCTION {schema}.apply_job_events_mode();

-- A lease a master lost changes no row of the job (whoever took it wrote that transition);
-- the master writes what it saw: `lease_lost` for each (id, token) of `owner`, with the job's
-- status now and `reason` (mode all only). Returns how many were written.
CREATE FUNCTION {schema}.note_lease_lost(ids bigint[], tokens bigint[], owner text,
                                         reason text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    written integer;
BEGIN
    IF {schema}.job_events_level() < 2 THEN
        RETURN 0;
    END IF;
    -- The rows are locked (shared) before their status is read: a transition of the job
    -- committing meanwhile (the new holder's completion) is waited for and read, so the note
    -- follows it in the log with the status it left, never before it with a stale one.
    WITH j AS (
        SELECT j.id, j.status, j.attempts FROM {schema}.jobs j
         WHERE j.id = ANY (ids) ORDER BY j.id FOR SHARE
    )
    INSERT INTO {schema}.job_events (job_id, kind, status, attempt, lease_token, owner, actor,
                                     detail)
    SELECT j.id, 'lease_lost', j.status, j.attempts, u.token, note_lease_lost.owner,
           coalesce(nullif(current_setting('jobrun.actor', true), ''), session_user::text),
           jsonb_build_object('reason', left(note_lease_lost.reason, 200))
      FROM unnest(ids, tokens) AS u(id, token)
      JOIN j ON j.id = u.id;
    GET DIAGNOSTICS written = ROW_COUNT;
    RETURN written;
END
$$;
