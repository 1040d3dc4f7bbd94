-- Queries of the HTTP API (`jobrun web`, jobrun/web/) and of `jobrun delete`.
-- "{schema}" is the quoted schema name; parameters are psycopg's %(name)s placeholders.
-- Lists are keyset-paginated (a cursor is the sort key of the last row seen), never OFFSET.

-- name: web_session_utc
-- Render timestamps in UTC on this connection (the API speaks RFC 3339 UTC).
SET TIME ZONE 'UTC'

-- name: delete_job
-- Delete one finished job (with its attempts and effects), guarded by an optional version; returns the deleted row.
WITH d AS (
    DELETE FROM {schema}.jobs
     WHERE id = %(id)s AND status IN ('succeeded', 'dead', 'cancelled')
       AND (%(version)s::bigint IS NULL OR version = %(version)s)
    RETURNING *
), a AS (
    DELETE FROM {schema}.job_attempts t USING d WHERE t.job_id = d.id
), e AS (
    DELETE FROM {schema}.processed_effects t USING d WHERE t.job_id = d.id
)
SELECT * FROM d

-- name: web_list_jobs
-- Jobs newest first, by any of `statuses`, queue, task, schedule (name) and a substring of id, task or idempotency key; keyset on id (before = last id seen).
SELECT * FROM {schema}.jobs
 WHERE (%(statuses)s::text[] IS NULL OR status = ANY(%(statuses)s::text[]))
   AND (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(task)s::text IS NULL OR task = %(task)s)
   AND (%(schedule)s::text IS NULL
        OR schedule_id = (SELECT id FROM {schema}.schedules WHERE name = %(schedule)s))
   AND (%(q)s::text IS NULL OR strpos(id::text, %(q)s) > 0 OR strpos(task, %(q)s) > 0
        OR strpos(idempotency_key, %(q)s) > 0)
   AND (%(before)s::bigint IS NULL OR id < %(before)s)
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: web_attempts_feed
-- Finished attempts across jobs, newest first, by any of `outcomes`, task and queue; keyset on (finished_at, job_id, lease_token).
SELECT a.job_id, a.lease_token, a.attempt, a.outcome, a.started_at, a.finished_at,
       a.worker_host, a.worker_pid, a.worker_child, a.error, j.task, j.queue
  FROM {schema}.job_attempts a JOIN {schema}.jobs j ON j.id = a.job_id
 WHERE (%(outcomes)s::text[] IS NULL OR a.outcome = ANY(%(outcomes)s::text[]))
   AND (%(task)s::text IS NULL OR j.task = %(task)s)
   AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
   AND (%(at)s::timestamptz IS NULL
        OR (a.finished_at, a.job_id, a.lease_token) < (%(at)s, %(job_id)s, %(token)s))
 ORDER BY a.finished_at DESC, a.job_id DESC, a.lease_token DESC
 LIMIT %(limit)s

-- name: web_task_counts
-- Jobs per task (all, or one task) and status, as stored now.
SELECT task, status, count(*) AS n
  FROM {schema}.jobs
 WHERE %(task)s::text IS NULL OR task = %(task)s
 GROUP BY task, status

-- name: web_task_runs
-- Per task, of the latest `sample` attempts that ended in the last `window` s: how many, how many succeeded, mean and p95 run time in seconds.
SELECT task, count(*) AS runs, count(*) FILTER (WHERE outcome = 'succeeded') AS succeeded,
       avg(run)::float8 AS mean_run,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY run)::float8 AS p95_run
  FROM (SELECT j.task, a.outcome, extract(epoch FROM a.finished_at - a.started_at) AS run
          FROM {schema}.job_attempts a JOIN {schema}.jobs j ON j.id = a.job_id
         WHERE a.finished_at > now() - make_interval(secs => %(window)s)
           AND a.started_at IS NOT NULL
           AND a.outcome IN ('succeeded', 'failed', 'timeout', 'worker_lost', 'lease_expired')
           AND (%(task)s::text IS NULL OR j.task = %(task)s)
         ORDER BY a.finished_at DESC
         LIMIT %(sample)s) s
 GROUP BY task
