-- Queries of the HTTP API (`jobrun web`, jobrun/web/) and of `jobrun delete`.
-- "{schema}" is the quoted schema name; parameters are psycopg's %(name)s placeholders.
-- Lists are keyset-paginated (a cursor is the sort key of the last row seen), never OFFSET.

-- name: web_session_utc
-- Render timestamps in UTC on this connection (the API speaks RFC 3339 UTC).
SET TIME ZONE 'UTC'

-- name: web_session_custom_plans
-- Plan each read for its own parameters: a list's optional filters ("%(task)s IS NULL OR task = ...") pick their index only when the planner sees the values, never in a generic plan.
SET plan_cache_mode = force_custom_plan

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
-- Jobs newest first, by any of `statuses`, queue, task, schedule (name) and a substring of id, task or idempotency key; keyset on id (before = last id seen); looks at no more than `scan` jobs, and on a short page says where it stopped (walked_to; one row of NULL job columns when the page is empty).
-- The walk reads ids only, newest first, from the index that holds them in order: jobs_task_id
-- with a task, else jobs_schedule with a schedule, else the primary key (an id-only walk makes
-- the covering index the cheap path whatever the planner's estimates). Each id is then read by
-- primary key (LATERAL ... LIMIT 1 keeps that a lookup per id, never a join that walks the
-- table) and tested against the other filters. A filter that matches rarely (a rare queue or
-- finished status) would otherwise walk the whole table: the walk's LIMIT stops it after
-- `scan` ids, while the page's LIMIT stops it as soon as the page is full. Only a short page
-- walks again (ids only) to find the lowest id looked at, when the walk reached `scan`.
WITH walk AS NOT MATERIALIZED (
    SELECT id FROM {schema}.jobs
     WHERE (%(task)s::text IS NULL OR task = %(task)s)
       AND (%(schedule)s::text IS NULL OR %(task)s::text IS NOT NULL
            OR schedule_id = (SELECT id FROM {schema}.schedules WHERE name = %(schedule)s))
       AND (%(before)s::bigint IS NULL OR id < %(before)s)
     ORDER BY id DESC
     LIMIT %(scan)s
), page AS (
    SELECT j.* FROM walk w
     CROSS JOIN LATERAL (SELECT * FROM {schema}.jobs x WHERE x.id = w.id LIMIT 1) j
     WHERE (%(schedule)s::text IS NULL OR %(task)s::text IS NULL  -- with a task, tested here
            OR j.schedule_id = (SELECT id FROM {schema}.schedules WHERE name = %(schedule)s))
       AND (%(statuses)s::text[] IS NULL OR j.status = ANY(%(statuses)s::text[]))
       AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
       AND (%(q)s::text IS NULL OR strpos(j.id::text, %(q)s) > 0 OR strpos(j.task, %(q)s) > 0
            OR strpos(j.idempotency_key, %(q)s) > 0)
     ORDER BY w.id DESC
     LIMIT %(limit)s
)
SELECT p.*, b.walked_to
  FROM (SELECT CASE WHEN (SELECT count(*) FROM page) < %(limit)s
                    THEN (SELECT min(id) FROM walk HAVING count(*) = %(scan)s) END AS walked_to) b
  LEFT JOIN page p ON true
 ORDER BY p.id DESC

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

-- name: web_task_figures
-- Every figure of GET /tasks in one statement, one row per kind and task (and status): 'queued' and 'leased' (n: the task's jobs in that state now, through the partial indexes jobs_queued_task and jobs_leased), 'finished' (per task and status, n of the newest `sample` jobs that finished in the last `window` s), 'runs' (per task, of the newest `sample` attempts that ended in the window: n, how many succeeded, mean and p95 run time in seconds), 'served' (served_by: owners of the masters seen in the last `stale_after` s whose app declares the task, in host, pid, owner order). `oldest` is the oldest finish in the group, `window_start` the window's start. With `task`, the 'queued', 'leased' and 'served' rows are that task's only (the samples stay every task's: their `oldest` says what they cover).
-- The samples walk the finished_at indexes newest first, stopped by LIMIT (an attempt is
-- joined to its job by id); the queued count is an index-only scan of jobs_queued_task, so
-- its cost follows the queue's depth, never the table's history.
WITH finished AS (
    SELECT task, status, finished_at FROM {schema}.jobs
     WHERE status IN ('succeeded', 'dead', 'cancelled')
       AND finished_at > now() - make_interval(secs => %(window)s)
     ORDER BY finished_at DESC
     LIMIT %(sample)s
), runs AS (
    SELECT j.task, a.outcome, a.finished_at,
           extract(epoch FROM a.finished_at - a.started_at) AS run
      FROM {schema}.job_attempts a JOIN {schema}.jobs j ON j.id = a.job_id
     WHERE a.finished_at > now() - make_interval(secs => %(window)s)
       AND a.started_at IS NOT NULL
       AND a.outcome IN ('succeeded', 'failed', 'timeout', 'worker_lost', 'lease_expired')
     ORDER BY a.finished_at DESC
     LIMIT %(sample)s
)
SELECT 'queued' AS kind, task, 'queued' AS status, count(*) AS n, NULL::bigint AS succeeded,
       NULL::float8 AS mean_run, NULL::float8 AS p95_run, NULL::timestamptz AS oldest,
       NULL::timestamptz AS window_start, NULL::text[] AS served_by
  FROM {schema}.jobs
 WHERE status = 'queued' AND (%(task)s::text IS NULL OR task = %(task)s)
 GROUP BY task
UNION ALL
SELECT 'leased', task, 'leased', count(*), NULL, NULL, NULL, NULL, NULL, NULL
  FROM {schema}.jobs
 WHERE status = 'leased' AND (%(task)s::text IS NULL OR task = %(task)s)
 GROUP BY task
UNION ALL
SELECT 'finished', task, status, count(*), NULL, NULL, NULL, min(finished_at),
       now() - make_interval(secs => %(window)s), NULL
  FROM finished
 GROUP BY task, status
UNION ALL
SELECT 'runs', task, NULL, count(*), count(*) FILTER (WHERE outcome = 'succeeded'),
       avg(run)::float8, percentile_cont(0.95) WITHIN GROUP (ORDER BY run)::float8,
       min(finished_at), now() - make_interval(secs => %(window)s), NULL
  FROM runs
 GROUP BY task
UNION ALL
SELECT 'served', t.task, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       array_agg(w.owner ORDER BY w.host, w.pid, w.owner)
  FROM {schema}.workers w, unnest(w.tasks) AS t(task)
 WHERE w.last_seen >= now() - make_interval(secs => %(stale_after)s)
   AND (%(task)s::text IS NULL OR t.task = %(task)s)
 GROUP BY t.task
