-- Named queries. Each block: "-- name: <name>", then a one-line description, then the SQL.
-- "{schema}" is the quoted schema name; parameters are psycopg's %(name)s placeholders.

-- ===== producers =========================================================================

-- name: enqueue
-- Enqueue one job through the SQL API; returns the stored job and whether it was created.
SELECT id, created, queue, task, status, priority, run_at, attempts, max_attempts,
       idempotency_key, created_at
  FROM {schema}.enqueue(%(task)s, %(payload)s::jsonb,
                        queue => %(queue)s, priority => %(priority)s, run_at => %(run_at)s,
                        delay => make_interval(secs => %(delay)s),
                        max_attempts => %(max_attempts)s, idempotency_key => %(idempotency_key)s,
                        traceparent => %(traceparent)s)

-- name: enqueue_many
-- Enqueue many jobs in one statement; one (id, created) row per input, in input order.
SELECT id, created
  FROM {schema}.enqueue_many(%(tasks)s::text[], %(payloads)s::text[]::jsonb[], %(queues)s::text[],
                             %(priorities)s::integer[], %(run_ats)s::timestamptz[],
                             %(max_attempts)s::integer[], %(idempotency_keys)s::text[],
                             %(traceparents)s::text[])

-- name: set_payload_limit
-- Tell the SQL enqueue functions the configured payload cap (session setting).
SELECT set_config('jobrun.max_payload_bytes', %(limit)s, false)

-- ===== inspection and admin ==============================================================

-- name: get_job
-- One job by id.
SELECT * FROM {schema}.jobs WHERE id = %(id)s

-- name: get_attempts
-- The recorded attempts of one job, oldest first.
SELECT * FROM {schema}.job_attempts WHERE job_id = %(id)s ORDER BY lease_token

-- name: list_jobs
-- Jobs newest first, filtered by status/queue/task, keyset-paginated on id (before = last id seen).
SELECT * FROM {schema}.jobs
 WHERE (%(status)s::text IS NULL OR status = %(status)s)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(task)s::text IS NULL OR task = %(task)s)
   AND (%(before)s::bigint IS NULL OR id < %(before)s)
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: cancel_job
-- Cancel a job: a queued one at once, a leased one by setting cancel_requested; returns the row.
UPDATE {schema}.jobs
   SET status = CASE WHEN status = 'queued' THEN 'cancelled' ELSE status END,
       finished_at = CASE WHEN status = 'queued' THEN now() ELSE finished_at END,
       cancel_requested = (status = 'leased')
 WHERE id = %(id)s AND status IN ('queued', 'leased')
RETURNING *

-- name: retry_job
-- Put a dead or cancelled job back to queued now, with its attempts and crashes reset.
WITH r AS (
    UPDATE {schema}.jobs
       SET status = 'queued', attempts = 0, crashes = 0, run_at = now(), finished_at = NULL,
           cancel_requested = false
     WHERE id = %(id)s AND status IN ('dead', 'cancelled')
    RETURNING *
), n AS (
    SELECT pg_notify(%(channel)s, r.queue) FROM r
)
SELECT r.* FROM r LEFT JOIN n ON true

-- name: purge_batch
-- Delete up to `batch` finished jobs (and their attempts and effects) older than a duration.
WITH d AS (
    SELECT id FROM {schema}.jobs
     WHERE status = ANY(%(statuses)s::text[])
       AND finished_at < now() - make_interval(secs => %(older_than)s)
     ORDER BY finished_at
     LIMIT %(batch)s
       FOR UPDATE SKIP LOCKED
), a AS (
    DELETE FROM {schema}.job_attempts t USING d WHERE t.job_id = d.id
), e AS (
    DELETE FROM {schema}.processed_effects t USING d WHERE t.job_id = d.id
)
DELETE FROM {schema}.jobs j USING d WHERE j.id = d.id

-- name: stats
-- Job counts by queue and status, with the age of the oldest runnable queued job per queue.
SELECT k.name AS queue, k.paused,
       coalesce(c.queued, 0) AS queued, coalesce(c.scheduled, 0) AS scheduled,
       coalesce(c.leased, 0) AS leased, coalesce(c.succeeded, 0) AS succeeded,
       coalesce(c.dead, 0) AS dead, coalesce(c.cancelled, 0) AS cancelled,
       extract(epoch FROM now() - c.oldest_runnable)::float8 AS oldest_queued_age
  FROM {schema}.queues k
  LEFT JOIN (
    SELECT queue,
           count(*) FILTER (WHERE status = 'queued' AND run_at <= now()) AS queued,
           count(*) FILTER (WHERE status = 'queued' AND run_at > now()) AS scheduled,
           count(*) FILTER (WHERE status = 'leased') AS leased,
           count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE status = 'dead') AS dead,
           count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
           min(run_at) FILTER (WHERE status = 'queued' AND run_at <= now()) AS oldest_runnable
      FROM {schema}.jobs GROUP BY queue
  ) c ON c.queue = k.name
 ORDER BY k.name

-- name: queue_add
-- Declare a queue (no-op when it exists); returns the row.
INSERT INTO {schema}.queues (name) VALUES (%(name)s)
ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name
RETURNING *

-- name: queue_list
-- Declared queues.
SELECT * FROM {schema}.queues ORDER BY name

-- name: queue_set_paused
-- Pause or resume a queue; returns the row (none when undeclared).
UPDATE {schema}.queues SET paused = %(paused)s WHERE name = %(name)s RETURNING *

-- name: queue_notify
-- Wake masters for a queue (after resume).
SELECT pg_notify(%(channel)s, %(name)s)

-- name: db_now
-- The database clock.
SELECT now() AS now, clock_timestamp() AS clock
