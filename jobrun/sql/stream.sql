-- The events stream of `jobrun web` (jobrun/web/summary.py): the queue summary it sends the
-- console, read a few times a second while a page is open, so every query here is bounded by
-- what moved since the previous read or by the queue's depth, never by the table's history.
-- The rates are differences between reads (jobs above the previous read's highest id; jobs
-- that finished since the previous read's time mark), not counts over a window of history.
-- "{schema}" is the quoted schema name; parameters are psycopg's %(name)s placeholders.

-- name: stream_queues
-- Per declared queue: paused, concurrency, runnable/scheduled/leased/waiting depth and oldest runnable age through the partial indexes on queued, leased and waiting rows, failed attempts in the last `fail_window` s through the one on failed attempts; with the read's clock and its finished-jobs mark (now minus `lag` s).
WITH queued AS (
    SELECT queue, count(*) FILTER (WHERE run_at <= now()) AS queued,
           count(*) FILTER (WHERE run_at > now()) AS scheduled,
           min(run_at) FILTER (WHERE run_at <= now()) AS oldest_runnable
      FROM {schema}.jobs WHERE status = 'queued' GROUP BY queue
), leased AS (
    SELECT queue, count(*) AS leased FROM {schema}.jobs WHERE status = 'leased' GROUP BY queue
), waiting AS (
    SELECT queue, count(*) AS waiting FROM {schema}.jobs WHERE status = 'waiting' GROUP BY queue
), failures AS (
    SELECT j.queue, count(*) AS n
      FROM {schema}.job_attempts a JOIN {schema}.jobs j ON j.id = a.job_id
     WHERE a.finished_at > now() - make_interval(secs => %(fail_window)s)
       AND a.outcome IN ('failed', 'timeout', 'worker_lost', 'lease_expired')
     GROUP BY j.queue
)
-- One row with a NULL queue when none is declared, so that the clock is always read.
SELECT k.name AS queue, k.paused, k.concurrency,
       coalesce(q.queued, 0) AS queued, coalesce(q.scheduled, 0) AS scheduled,
       coalesce(l.leased, 0) AS leased, coalesce(w.waiting, 0) AS waiting,
       extract(epoch FROM c.now - q.oldest_runnable)::float8 AS oldest_age,
       coalesce(x.n, 0) AS failures, c.now, c.mark
  FROM (SELECT now() AS now, now() - make_interval(secs => %(lag)s) AS mark) c
  LEFT JOIN {schema}.queues k ON true
  LEFT JOIN queued q ON q.queue = k.name
  LEFT JOIN leased l ON l.queue = k.name
  LEFT JOIN waiting w ON w.queue = k.name
  LEFT JOIN failures x ON x.queue = k.name
 ORDER BY k.name

-- name: stream_highest_id
-- The highest job id now (the first read's enqueue mark).
SELECT coalesce(max(id), 0) AS id FROM {schema}.jobs

-- name: stream_moves
-- What moved since the previous read, per queue: jobs with an id above `after` (enqueued; a primary-key range) with the highest of those ids, and jobs that finished (succeeded, dead, cancelled) with finished_at in (`since`, `upto`] (a range of the finished-jobs index) with the waits (start minus runnable) of the newest `sample` of them.
SELECT 'enqueued' AS kind, queue, count(*) AS n, max(id) AS max_id, NULL::float8[] AS waits
  FROM {schema}.jobs WHERE id > %(after)s GROUP BY queue
UNION ALL
SELECT 'done', queue, count(*), NULL,
       (array_agg(extract(epoch FROM started_at - greatest(created_at, run_at))::float8
                  ORDER BY finished_at DESC)
            FILTER (WHERE started_at >= greatest(created_at, run_at)))[1:%(sample)s]
  FROM {schema}.jobs
 WHERE status IN ('succeeded', 'dead', 'cancelled')
   AND finished_at > %(since)s AND finished_at <= %(upto)s
 GROUP BY queue

-- name: stream_recent_waits
-- The first read's wait sample: queue, wait (start minus runnable) and finished_at of the newest `sample` jobs that finished in the `window` s up to `upto`, newest first (the finished-jobs index, stopped by LIMIT).
SELECT queue, extract(epoch FROM started_at - greatest(created_at, run_at))::float8 AS wait,
       finished_at
  FROM {schema}.jobs
 WHERE status IN ('succeeded', 'dead', 'cancelled')
   AND finished_at > %(upto)s - make_interval(secs => %(window)s)
   AND finished_at <= %(upto)s
   AND started_at >= greatest(created_at, run_at)
 ORDER BY finished_at DESC
 LIMIT %(sample)s
