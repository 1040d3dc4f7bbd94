-- Named queries of recurring schedules (jobrun/schedules.py, jobrun/worker/scheduler.py).

-- ===== definitions ==========================================================================

-- name: schedule_insert
-- Create a schedule (values checked by the client); no row if its queue is not declared.
INSERT INTO {schema}.schedules (name, cron, timezone, task, payload, queue, priority,
                                max_attempts, starts_at, ends_at, catch_up, paused, declared,
                                next_fire_at)
SELECT %(name)s, %(cron)s, %(timezone)s, %(task)s, %(payload)s::jsonb, %(queue)s, %(priority)s,
       %(max_attempts)s, %(starts_at)s, %(ends_at)s, %(catch_up)s, %(paused)s, %(declared)s,
       %(next_fire_at)s
 WHERE EXISTS (SELECT FROM {schema}.queues k WHERE k.name = %(queue)s)
RETURNING *

-- name: schedule_update
-- Replace a schedule's definition if it is still at the version read; returns the row.
UPDATE {schema}.schedules
   SET cron = %(cron)s, timezone = %(timezone)s, task = %(task)s, payload = %(payload)s::jsonb,
       queue = %(queue)s, priority = %(priority)s, max_attempts = %(max_attempts)s,
       starts_at = %(starts_at)s, ends_at = %(ends_at)s, catch_up = %(catch_up)s,
       declared = %(declared)s, next_fire_at = %(next_fire_at)s, version = version + 1,
       updated_at = now()
 WHERE name = %(name)s AND version = %(version)s
   AND EXISTS (SELECT FROM {schema}.queues k WHERE k.name = %(queue)s)
RETURNING *

-- name: schedule_set_paused
-- Pause or resume a schedule at the version read; resuming starts again from the next slot after now.
UPDATE {schema}.schedules
   SET paused = %(paused)s, next_fire_at = %(next_fire_at)s, version = version + 1,
       updated_at = now()
 WHERE name = %(name)s AND version = %(version)s
RETURNING *

-- name: schedule_delete
-- Delete a schedule, guarded by an optional version; returns it (none if missing or at another version).
DELETE FROM {schema}.schedules
 WHERE name = %(name)s AND (%(version)s::bigint IS NULL OR version = %(version)s)
RETURNING *

-- name: schedule_get
-- One schedule by name, with the database clock.
SELECT s.*, now() AS db_now FROM {schema}.schedules s WHERE s.name = %(name)s

-- name: schedule_list
-- Every schedule, by name.
SELECT * FROM {schema}.schedules ORDER BY name

-- name: schedule_runs
-- The newest jobs a schedule made, with the outcome of their last attempt.
SELECT j.id, j.status, j.run_at, j.created_at, j.finished_at, j.attempts, j.idempotency_key,
       a.outcome, a.error
  FROM {schema}.jobs j
  LEFT JOIN LATERAL (SELECT outcome, error FROM {schema}.job_attempts t
                      WHERE t.job_id = j.id ORDER BY t.lease_token DESC LIMIT 1) a ON true
 WHERE j.schedule_id = %(id)s
 ORDER BY j.id DESC
 LIMIT %(limit)s

-- name: list_schedule_jobs
-- Jobs a schedule made, newest first, keyset-paginated on id.
SELECT * FROM {schema}.jobs
 WHERE schedule_id = (SELECT id FROM {schema}.schedules WHERE name = %(schedule)s)
   AND (%(status)s::text IS NULL OR status = %(status)s)
   AND (%(before)s::bigint IS NULL OR id < %(before)s)
 ORDER BY id DESC
 LIMIT %(limit)s

-- ===== the scheduler ========================================================================

-- name: leader_acquire
-- Take the leader lease if free or expired, or renew it if ours; returns the lease only if we hold it now.
INSERT INTO {schema}.scheduler_leader AS l (singleton, owner, term, elected_at, expires_at)
VALUES (true, %(owner)s, 1, now(), now() + make_interval(secs => %(ttl)s))
ON CONFLICT (singleton) DO UPDATE
   SET owner = excluded.owner,
       term = CASE WHEN l.owner = excluded.owner THEN l.term ELSE l.term + 1 END,
       elected_at = CASE WHEN l.owner = excluded.owner THEN l.elected_at ELSE now() END,
       expires_at = excluded.expires_at
 WHERE l.owner = excluded.owner OR l.expires_at < now()
RETURNING owner, term, expires_at, now() AS db_now

-- name: leader_release
-- Give the lease up (on shutdown) so another master leads at once.
DELETE FROM {schema}.scheduler_leader WHERE owner = %(owner)s

-- name: schedules_due_soon
-- Active schedules by next fire (the leader's work list), with the database clock.
SELECT s.id, s.name, s.cron, s.timezone, s.catch_up, s.ends_at, s.next_fire_at, s.version,
       now() AS db_now
  FROM {schema}.schedules s
 WHERE NOT s.paused AND s.next_fire_at IS NOT NULL
 ORDER BY s.next_fire_at
 LIMIT %(limit)s

-- name: schedule_fire
-- Enqueue a schedule's slots (key sched:<id>:<slot>) and advance it, in one statement, only if this master still holds the leader lease and the schedule is as read.
-- The leader row is locked FOR SHARE: a takeover that committed first makes the lease check
-- fail here (the row is re-read at its newest version), and a takeover that comes later waits
-- for this statement. One autocommit statement: a frozen leader holds no lock between steps.
WITH lease AS (
    SELECT 1 FROM {schema}.scheduler_leader l
     WHERE l.singleton AND l.owner = %(owner)s AND l.term = %(term)s AND l.expires_at > now()
       FOR SHARE
), advanced AS (
    UPDATE {schema}.schedules s
       SET next_fire_at = %(next_fire_at)s,
           last_fire_at = coalesce(%(last_fire_at)s, s.last_fire_at)
     WHERE s.id = %(id)s AND s.version = %(version)s AND NOT s.paused
       AND s.next_fire_at = %(expected)s AND s.next_fire_at <= now()
       AND EXISTS (SELECT FROM lease)
    RETURNING s.id, s.task, s.payload, s.queue, s.priority, s.max_attempts
), made AS (
    INSERT INTO {schema}.jobs (queue, task, payload, priority, max_attempts, idempotency_key,
                               schedule_id)
    SELECT a.queue, a.task, a.payload, a.priority, coalesce(a.max_attempts, 5),
           'sched:' || a.id || ':' || to_char(slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
           a.id
      FROM advanced a, unnest(%(slots)s::timestamptz[]) AS slot
     WHERE EXISTS (SELECT FROM {schema}.queues k WHERE k.name = a.queue)
     ORDER BY slot
    ON CONFLICT (queue, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id
)
SELECT (SELECT count(*) FROM advanced) AS advanced, ARRAY(SELECT id FROM made) AS job_ids,
       now() AS db_now

-- name: schedules_for_top
-- Schedules with their last and next fire, for jobrun top.
SELECT name, cron, timezone, task, queue, paused, last_fire_at, next_fire_at
  FROM {schema}.schedules ORDER BY next_fire_at NULLS LAST, name LIMIT %(limit)s

-- name: listen_schedules
-- Subscribe this session to the schema's "schedules changed" notifications (the leader re-plans).
LISTEN {schedules_channel}
