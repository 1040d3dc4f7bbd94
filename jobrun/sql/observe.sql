-- Read-only queries for operators: `jobrun workers`, `jobrun logs` and `jobrun top`.
-- "{schema}" is the quoted schema name; parameters are psycopg's %(name)s placeholders.
-- Every query here is cheap enough to run once a second on a busy queue: depth comes from the
-- partial indexes on queued and leased rows, recent activity from time-bounded ranges of the
-- finished-jobs, job_attempts(finished_at) and created_at BRIN indexes; no query counts all
-- history. All times are on the database clock.

-- name: observe_begin_snapshot
-- First statement of a `jobrun top` frame: every query of the frame sees the same rows and the same now(), and writes nothing.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY

-- name: observe_workers
-- Every registered master with its uptime and silence in seconds; `stale` marks rows not seen for `stale_after` seconds.
SELECT owner, host, pid, app, queues, tasks, concurrency, slots, busy, version, inflight, started_at, last_seen,
       db_failures, db_error, db_host,
       extract(epoch FROM now() - started_at)::float8 AS uptime,
       extract(epoch FROM now() - last_seen)::float8 AS silent_for,
       last_seen < now() - make_interval(secs => %(stale_after)s) AS stale,
       extract(epoch FROM now())::float8 AS db_now
  FROM {schema}.workers
 ORDER BY host, pid, owner

-- name: observe_queues
-- Per declared queue: its settings (intervals in seconds), runnable/scheduled/leased/waiting depth and oldest runnable age, enqueues and finishes in the last `rate_window` s, wait p50/p95 of the latest `sample` jobs finished in `wait_window` s, failed attempts in `fail_window` s; `served_by`: the owners of the live masters serving it.
WITH queued AS (
    SELECT queue,
           count(*) FILTER (WHERE run_at <= now()) AS queued,
           count(*) FILTER (WHERE run_at > now()) AS scheduled,
           min(run_at) FILTER (WHERE run_at <= now()) AS oldest_runnable
      FROM {schema}.jobs WHERE status = 'queued' GROUP BY queue
), leased AS (
    SELECT queue, count(*) AS leased FROM {schema}.jobs WHERE status = 'leased' GROUP BY queue
), waiting AS (
    SELECT queue, count(*) AS waiting FROM {schema}.jobs WHERE status = 'waiting' GROUP BY queue
), enqueued AS (
    SELECT queue, count(*) AS n FROM {schema}.jobs
     WHERE created_at > now() - make_interval(secs => %(rate_window)s) GROUP BY queue
), finished AS (
    SELECT queue, count(*) AS n FROM {schema}.jobs
     WHERE status IN ('succeeded', 'dead', 'cancelled')
       AND finished_at > now() - make_interval(secs => %(rate_window)s)
     GROUP BY queue
), waits AS (
    -- Wait = claim time minus the time the job became runnable (enqueue, or its run_at when
    -- later). For a retried job that is its last attempt's wait. A job whose run_at moved past
    -- its last start (re-scheduled, then cancelled) has no meaningful wait and is skipped.
    SELECT queue,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY wait) AS wait_p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY wait) AS wait_p95,
           count(*) AS wait_sample
      FROM (SELECT queue,
                   extract(epoch FROM started_at - greatest(created_at, run_at))::float8 AS wait
              FROM {schema}.jobs
             WHERE status IN ('succeeded', 'dead', 'cancelled')
               AND finished_at > now() - make_interval(secs => %(wait_window)s)
               AND started_at >= greatest(created_at, run_at)
             ORDER BY finished_at DESC
             LIMIT %(sample)s) s
     GROUP BY queue
), held AS (
    -- Claims the limits held back, summed over the masters' registry rows, by reason.
    SELECT h.queue, string_agg(h.reason || ' ' || h.n, ', ' ORDER BY h.reason) AS held
      FROM (SELECT q.key AS queue, r.key AS reason, sum(r.value::bigint) AS n
              FROM {schema}.workers w, jsonb_each(w.held) q, jsonb_each_text(q.value) r
             GROUP BY q.key, r.key) h
     GROUP BY h.queue
), failures AS (
    SELECT j.queue, count(*) AS n
      FROM {schema}.job_attempts a JOIN {schema}.jobs j ON j.id = a.job_id
     WHERE a.finished_at > now() - make_interval(secs => %(fail_window)s)
       AND a.outcome IN ('failed', 'timeout', 'worker_lost', 'lease_expired')
     GROUP BY j.queue
), served AS (
    -- The live masters (seen in the last `stale_after` s) whose -Q names the queue: none, and
    -- its jobs wait for a master that will never come (GET /tasks names them the same way).
    SELECT s.queue, array_agg(w.owner ORDER BY w.host, w.pid, w.owner) AS served_by
      FROM {schema}.workers w, unnest(w.queues) AS s(queue)
     WHERE w.last_seen >= now() - make_interval(secs => %(stale_after)s)
     GROUP BY s.queue
)
SELECT k.name AS queue, k.name, k.paused, k.concurrency, k.rate_limit,
       extract(epoch FROM k.rate_period)::float8 AS rate_period,
       extract(epoch FROM k.aging)::float8 AS aging, k.priority_default, k.max_attempts,
       extract(epoch FROM k.retention)::float8 AS retention, k.key_concurrency, h.held,
       k.created_at, k.updated_at, k.version,
       coalesce(q.queued, 0) AS queued, coalesce(q.scheduled, 0) AS scheduled,
       coalesce(l.leased, 0) AS leased, coalesce(wt.waiting, 0) AS waiting,
       extract(epoch FROM now() - q.oldest_runnable)::float8 AS oldest_age,
       coalesce(e.n, 0) AS enqueued, coalesce(f.n, 0) AS finished,
       w.wait_p50, w.wait_p95, coalesce(w.wait_sample, 0) AS wait_sample,
       coalesce(x.n, 0) AS failures, coalesce(v.served_by, ARRAY[]::text[]) AS served_by
  FROM {schema}.queues k
  LEFT JOIN queued q ON q.queue = k.name
  LEFT JOIN leased l ON l.queue = k.name
  LEFT JOIN waiting wt ON wt.queue = k.name
  LEFT JOIN enqueued e ON e.queue = k.name
  LEFT JOIN finished f ON f.queue = k.name
  LEFT JOIN waits w ON w.queue = k.name
  LEFT JOIN failures x ON x.queue = k.name
  LEFT JOIN held h ON h.queue = k.name
  LEFT JOIN served v ON v.queue = k.name
 ORDER BY k.name

-- name: observe_latest_failures
-- The newest `limit` failed attempts (failed, timeout, worker_lost, lease_expired) of the last `fail_window` s, with job task and queue.
SELECT a.job_id AS id, j.task, j.queue, a.attempt, a.outcome, a.error, a.worker_host,
       a.worker_pid, extract(epoch FROM now() - a.finished_at)::float8 AS age
  FROM {schema}.job_attempts a JOIN {schema}.jobs j ON j.id = a.job_id
 WHERE a.finished_at > now() - make_interval(secs => %(fail_window)s)
   AND a.outcome IN ('failed', 'timeout', 'worker_lost', 'lease_expired')
 ORDER BY a.finished_at DESC, a.job_id DESC
 LIMIT %(limit)s

-- name: observe_attempt_logs
-- The finished attempts of one job, oldest first, with their captured logs (all, or those numbered `attempt`), plus the job's status.
SELECT j.id AS job_id, j.task, j.status, a.lease_token, a.attempt, a.outcome, a.worker_host,
       a.worker_pid, a.worker_child, a.started_at, a.finished_at, a.error, a.log
  FROM {schema}.jobs j
  LEFT JOIN {schema}.job_attempts a
         ON a.job_id = j.id AND (%(attempt)s::integer IS NULL OR a.attempt = %(attempt)s)
 WHERE j.id = %(id)s
 ORDER BY a.lease_token

